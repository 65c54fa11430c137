//! What runner serves or watches beside a confined child while it runs: the recorder of the
//! writes its sandbox denies (`denials.rs`) and its proxy (`egress.rs`). The child hands both
//! over through a socket pair before it runs its program; once its whole tree is gone, what
//! each saw is collected.

use super::denials::{self, Denied};
use super::sandbox::Confinement;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The socket pair, before the child is started.
pub(super) struct Handover {
    ours: OwnedFd,
    theirs: OwnedFd,
    writable: Option<Arc<Vec<std::path::PathBuf>>>,
    allow: Option<Arc<super::egress::Allow>>,
}

/// Serving and watching, while the child runs.
pub(super) struct Serving {
    task: tokio::task::JoinHandle<Served>,
}

struct Served {
    watcher: Option<tokio::task::JoinHandle<Denied>>,
    /// Tells the watcher to stop waiting.
    stop: Arc<std::sync::atomic::AtomicBool>,
    proxy: Option<tokio::task::JoinHandle<()>>,
    refused: Arc<Mutex<Denied>>,
}

impl Handover {
    /// A socket pair for `confine`'s child, where it has anything to hand over.
    pub(super) fn new(confine: Option<&Confinement>) -> std::io::Result<Option<Handover>> {
        let Some(c) = confine else {
            return Ok(None);
        };
        if c.record.is_none() && c.allow.is_none() {
            return Ok(None);
        }
        let (ours, theirs) = denials::channel()?;
        Ok(Some(Handover {
            ours,
            theirs,
            writable: c.record.clone(),
            allow: c.allow.clone(),
        }))
    }

    /// The child's end, for it to send through.
    pub(super) fn child_end(&self) -> RawFd {
        self.theirs.as_raw_fd()
    }

    /// The child is started (it holds its own copy of its end): take what it hands over and
    /// serve it.
    pub(super) fn serve(self) -> Serving {
        // Once the child has sent or run its program, the socket reads as closed.
        drop(self.theirs);
        let ours = self.ours;
        let (writable, allow) = (self.writable, self.allow);
        let task = tokio::spawn(async move {
            let (listener, proxy) = tokio::task::spawn_blocking(move || denials::receive(&ours))
                .await
                .unwrap_or((None, None));
            // The recorder waits in the kernel for the child's calls for as long as it lives:
            // on the blocking pool.
            let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let watcher = listener.zip(writable).map(|(l, w)| {
                let stop = stop.clone();
                tokio::task::spawn_blocking(move || denials::watch(l, &w, &stop))
            });
            let refused = Arc::new(Mutex::new(Denied::default()));
            let proxy = proxy.zip(allow).map(|(p, a)| {
                tokio::spawn(super::egress::serve(
                    std::net::TcpListener::from(p),
                    a,
                    refused.clone(),
                ))
            });
            Served {
                watcher,
                stop,
                proxy,
                refused,
            }
        });
        Serving { task }
    }
}

impl Serving {
    /// Once the child's whole tree is gone: the proxy ends, and what was denied is collected
    /// (the writes first, then the hosts).
    pub(super) async fn finish(self) -> Denied {
        let wait = Duration::from_secs(2);
        let Ok(Ok(served)) = tokio::time::timeout(wait, self.task).await else {
            return Denied::default();
        };
        if let Some(p) = served.proxy {
            p.abort();
        }
        let mut denied = match served.watcher {
            // Done once no process of the tree is left; told to stop where one is left that
            // cannot end (the tree's end says so), and then done within its next look.
            Some(mut w) => match tokio::time::timeout(wait, &mut w).await {
                Ok(Ok(d)) => d,
                Ok(Err(_)) => Denied::default(),
                Err(_) => {
                    served
                        .stop
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                    w.await.unwrap_or_default()
                }
            },
            None => Denied::default(),
        };
        let refused = served.refused.lock().map(|r| r.clone()).unwrap_or_default();
        for a in refused.accesses {
            if denied.accesses.len() < denials::KEPT {
                denied.accesses.push(a);
            } else {
                denied.more += 1;
            }
        }
        denied.more += refused.more;
        denied
    }
}
