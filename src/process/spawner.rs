//! A thread of its own that starts children with the standard library.
//!
//! `posix_spawn` makes the calling thread sleep until the child has called `execve`. Called on
//! the event loop, that sleep (and the wait for a core to wake it on a busy machine) stalls every
//! slot; here it is paid by a thread that does nothing else. The loop hands over a request and
//! awaits the started child, carrying on with other work meanwhile.

use super::census;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::mpsc;
use tokio::sync::oneshot;

/// What to start, and where to send the started child.
struct Request {
    program: PathBuf,
    args: Vec<String>,
    spec: super::SpawnSpec,
    out: OwnedFd,
    /// The runtime the child is waited for on (its SIGCHLD handling).
    runtime: tokio::runtime::Handle,
    reply: oneshot::Sender<std::io::Result<tokio::process::Child>>,
}

/// The spawner thread's queue, started on first use; `None` when no thread could be started.
fn queue() -> Option<&'static mpsc::Sender<Request>> {
    static QUEUE: OnceLock<Option<mpsc::Sender<Request>>> = OnceLock::new();
    QUEUE
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Request>();
            std::thread::Builder::new()
                .name("runner-spawner".into())
                .spawn(move || {
                    for req in rx {
                        let r = start(req.program, &req.args, &req.spec, req.out, &req.runtime);
                        let _ = req.reply.send(r);
                    }
                })
                .ok()
                .map(|_| tx)
        })
        .as_ref()
}

/// Start a child under the spawn lock (see `census::DIRECT_CHILDREN`), registered as a direct
/// child before the lock is let go.
fn start(
    program: PathBuf,
    args: &[String],
    spec: &super::SpawnSpec,
    out: OwnedFd,
    runtime: &tokio::runtime::Handle,
) -> std::io::Result<tokio::process::Child> {
    let _in_runtime = runtime.enter();
    let mut direct = census::DIRECT_CHILDREN
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let child = super::start_std_child(&program, args, spec, out)?;
    if let Some(pid) = child.id() {
        direct.push(pid as i32);
    }
    Ok(child)
}

/// Start `program` on the spawner thread and await it; on the calling thread when there is no
/// spawner thread.
pub async fn spawn(
    program: PathBuf,
    args: Vec<String>,
    spec: super::SpawnSpec,
    out: OwnedFd,
) -> std::io::Result<tokio::process::Child> {
    let runtime = tokio::runtime::Handle::current();
    let Some(q) = queue() else {
        return start(program, &args, &spec, out, &runtime);
    };
    let (reply, answer) = oneshot::channel();
    q.send(Request {
        program,
        args,
        spec,
        out,
        runtime,
        reply,
    })
    .map_err(|_| std::io::Error::other("the spawner thread has ended"))?;
    answer
        .await
        .map_err(|_| std::io::Error::other("the spawner thread has ended"))?
}
