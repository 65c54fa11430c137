//! The ledger on a thread of its own while a run drains.
//!
//! The drain's event loop also runs every item's timers, kill ladders and output pipes. A ledger
//! call can take long: a SQLite commit waits up to its busy timeout for another writer, and a
//! shared ledger whose server is away is tried again for `RUNNER_LEDGER_RETRY` (minutes). So while
//! a run drains, every call goes to one thread that owns the ledger, in the order the calls were
//! made: what needs no answer (events, a quarantine, a lock let go) is handed over and not waited
//! for, and what does (a claim, results made durable) is an answer the loop awaits while the rest
//! of the run goes on. Before and after the drain, the same calls run where they are made.
//!
//! A claim and a commit of results are asked once or twice an item, and each trip to the
//! ledger's thread and back is a wake-up on the other core and another on this one, while the
//! item waits: a drain of quick items spent a quarter of its time so. So such a call is made here
//! and now when nothing is waiting on the thread and the ledger can be told not to wait
//! ([`crate::ledger::Ledger::waits`]: SQLite gives up at once on another writer's lock, and
//! leaves the checkpoint, with its `fsync`, to the thread); when it gives up, having changed
//! nothing, the same call goes to the thread, which waits as before. A shared ledger's calls
//! always go to the thread.

use super::store::Store;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, mpsc};

/// A call for the ledger's thread.
type Job = Box<dyn FnOnce(&mut Store) + Send>;

/// The ledger, on its own thread between [`Recorder::start`] and [`Recorder::stop`].
pub(crate) struct Recorder {
    store: Arc<Mutex<Store>>,
    away: Option<Away>,
    /// The first failure of a call nobody waits for.
    failed: Arc<Mutex<Option<String>>>,
    /// The calls handed to the thread and not yet made.
    queued: Arc<AtomicUsize>,
}

/// The thread the ledger is on, and how calls reach it.
struct Away {
    jobs: mpsc::Sender<Job>,
    thread: std::thread::JoinHandle<()>,
}

/// What runs a call: the ledger's thread, or here and now.
enum Answer<T> {
    Here(Option<T>),
    Away(tokio::sync::oneshot::Receiver<T>),
}

impl Recorder {
    pub(crate) fn new(store: Store) -> Recorder {
        Recorder {
            store: Arc::new(Mutex::new(store)),
            away: None,
            failed: Arc::new(Mutex::new(None)),
            queued: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// From now on, calls go to the ledger's own thread. When no thread can be started, they
    /// go on running where they are made.
    pub(crate) fn start(&mut self) {
        if self.away.is_some() {
            return;
        }
        let (jobs, rx) = mpsc::channel::<Job>();
        let (store, queued) = (self.store.clone(), self.queued.clone());
        let thread = std::thread::Builder::new()
            .name("runner-ledger".into())
            .spawn(move || {
                for job in rx {
                    {
                        let mut s = lock(&store);
                        // The thread's calls wait as long as they must.
                        s.waits(true);
                        job(&mut s);
                    }
                    queued.fetch_sub(1, Ordering::AcqRel);
                }
            });
        match thread {
            Ok(thread) => self.away = Some(Away { jobs, thread }),
            Err(e) => tracing::warn!("the ledger stays on the event loop: no thread for it: {e}"),
        }
    }

    /// Whether calls go to the ledger's own thread.
    pub(crate) fn is_away(&self) -> bool {
        self.away.is_some()
    }

    /// Every call handed over done; from now on calls run where they are made.
    pub(crate) fn stop(&mut self) {
        if let Some(Away { jobs, thread }) = self.away.take() {
            drop(jobs);
            if thread.join().is_err() {
                self.fail("the ledger's thread ended in a panic".into());
            }
            self.lock().waits(true);
        }
    }

    /// Hand `job` to the thread; `false` when it is gone.
    fn hand(&self, a: &Away, job: Job) -> bool {
        self.queued.fetch_add(1, Ordering::AcqRel);
        if a.jobs.send(job).is_err() {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// The ledger itself, for a caller that may wait on it (before or after the drain). Waits for
    /// the call in progress on the ledger's thread, if any.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Store> {
        lock(&self.store)
    }

    /// A call whose answer nobody waits for: its failure is kept for [`Recorder::failure`].
    pub(crate) fn send(
        &mut self,
        call: impl FnOnce(&mut Store) -> super::Result<()> + Send + 'static,
    ) {
        let failed = self.failed.clone();
        let job = move |s: &mut Store| {
            if let Err(e) = call(s) {
                lock(&failed).get_or_insert(e.to_string());
            }
        };
        match &self.away {
            Some(a) => {
                if !self.hand(a, Box::new(job)) {
                    self.fail("the ledger's thread is gone".into());
                }
            }
            None => job(&mut self.lock()),
        }
    }

    /// A call whose answer is awaited; `None` when the ledger's thread is gone.
    pub(crate) fn ask<T: Send + 'static>(
        &mut self,
        call: impl FnOnce(&mut Store) -> T + Send + 'static,
    ) -> impl Future<Output = Option<T>> + 'static {
        let answer = match &self.away {
            Some(a) => {
                let (tx, rx) = tokio::sync::oneshot::channel();
                let job = move |s: &mut Store| {
                    let _ = tx.send(call(s));
                };
                if self.hand(a, Box::new(job)) {
                    Answer::Away(rx)
                } else {
                    Answer::Here(None)
                }
            }
            None => Answer::Here(Some(call(&mut self.lock()))),
        };
        async move {
            match answer {
                Answer::Here(v) => v,
                Answer::Away(rx) => rx.await.ok(),
            }
        }
    }

    /// A call whose answer is awaited, made here and now when nothing waits on the ledger's
    /// thread and the ledger can be told not to wait, and handed to the thread when it cannot
    /// or gave up on another writer's lock (so `call` may be made twice: the first time it
    /// changed nothing). `events`: how many events `call` records first, which must fit in the
    /// ledger's buffer without a write. `None` when the ledger's thread is gone.
    pub(crate) fn ask_soon<T: Send + 'static>(
        &mut self,
        events: usize,
        mut call: impl FnMut(&mut Store) -> super::Result<T> + Send + 'static,
    ) -> impl Future<Output = Option<super::Result<T>>> + 'static {
        let mut here = None;
        if self.away.is_some()
            && self.queued.load(Ordering::Acquire) == 0
            && let Ok(mut s) = self.store.try_lock()
            && events <= s.room()
            && s.waits(false)
        {
            match call(&mut s) {
                Err(e) if e.is_busy() => {}
                answer => here = Some(answer),
            }
        }
        let later = here.is_none().then(|| self.ask(call));
        async move {
            match (here, later) {
                (Some(answer), _) => Some(answer),
                (None, Some(later)) => later.await,
                (None, None) => None,
            }
        }
    }

    /// The first failure of a call nobody waited for.
    pub(crate) fn failure(&self) -> Option<String> {
        lock(&self.failed).clone()
    }

    fn fail(&self, why: String) {
        lock(&self.failed).get_or_insert(why);
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A lock whose holder panicked is still the ledger: what it had done is in the ledger's own
/// transactions, which a panic does not leave half-written.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let s = super::super::store::open(&dir.path().join("state.db")).unwrap();
        (dir, s)
    }

    #[test]
    fn calls_run_in_the_order_made_and_answers_wait_for_what_came_before() {
        let (_dir, s) = store();
        let mut r = Recorder::new(s);
        r.start();
        let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
        let order = Arc::new(Mutex::new(Vec::new()));
        let o = order.clone();
        // The first call is held on the ledger's thread: the caller is not.
        r.send(move |_| {
            gate_rx.recv().unwrap();
            o.lock().unwrap().push(1);
            Ok(())
        });
        let o = order.clone();
        let answer = r.ask(move |_| {
            o.lock().unwrap().push(2);
            7
        });
        assert!(order.lock().unwrap().is_empty(), "the caller did not wait");
        gate_tx.send(()).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert_eq!(rt.block_on(answer), Some(7));
        assert_eq!(*order.lock().unwrap(), vec![1, 2]);
        r.stop();
        assert_eq!(r.failure(), None);
    }

    fn holder() -> super::super::Holder {
        super::super::Holder::this_process()
    }

    fn key(item: &str) -> crate::vocab::ItemKey {
        crate::vocab::ItemKey {
            manifest: "m".into(),
            repo: "r".into(),
            item: item.into(),
            def_hash: "d".into(),
        }
    }

    #[test]
    fn a_claim_is_answered_at_once_when_the_ledger_is_free_and_by_its_thread_when_another_writer_holds_it()
     {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let mut r = Recorder::new(super::super::store::open(&path).unwrap());
        r.start();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let claim = |calls: Arc<AtomicUsize>, item: &'static str| {
            move |s: &mut Store| {
                calls.fetch_add(1, Ordering::SeqCst);
                s.claim(&key(item), "run", &holder())
            }
        };
        // Free: made here, no trip to the thread.
        let answer = r.ask_soon(0, claim(calls.clone(), "a"));
        assert_eq!(calls.load(Ordering::SeqCst), 1, "made here and now");
        assert!(matches!(
            rt.block_on(answer),
            Some(Ok(super::super::Claim::Claimed))
        ));
        // Another writer holds the ledger: the call gives up at once and goes to the thread,
        // which waits for the writer; the caller does not.
        let other = rusqlite::Connection::open(&path).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let asked = std::time::Instant::now();
        let answer = r.ask_soon(0, claim(calls.clone(), "b"));
        let waited = asked.elapsed();
        assert!(
            waited < std::time::Duration::from_secs(5),
            "the caller waited {waited:?} for another writer's lock"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert_eq!(
            calls.load(Ordering::SeqCst),
            3,
            "tried here, then on the thread, which waits"
        );
        other.execute_batch("COMMIT").unwrap();
        assert!(matches!(
            rt.block_on(answer),
            Some(Ok(super::super::Claim::Claimed))
        ));
        r.stop();
        assert_eq!(r.failure(), None);
        // Both claims are there, once each.
        let n: i64 = other
            .query_row(
                "SELECT count(*) FROM claims WHERE run_id = 'run'",
                [],
                |x| x.get(0),
            )
            .unwrap();
        assert_eq!(n, 2);
    }

    #[test]
    fn a_failed_call_nobody_waits_for_is_kept() {
        let (_dir, s) = store();
        let mut r = Recorder::new(s);
        r.start();
        r.send(|_| {
            Err(super::super::LedgerError::Unusable {
                path: "test".into(),
                message: "refused".into(),
            })
        });
        r.send(|_| Ok(()));
        r.stop();
        assert!(r.failure().is_some_and(|f| f.contains("test")));
    }
}
