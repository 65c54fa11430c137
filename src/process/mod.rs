//! The one place that spawns processes.
//!
//! Every worker, gate and probe goes through [`run`]: its own process group, stdin closed, an
//! environment built from scratch, output teed to a log file and a bounded in-memory tail with
//! secrets redacted, and a deadline. Ending a process is one function, [`end_tree`], shared by
//! timeout, cancel and normal completion: signal the group, wait out the grace period, kill the
//! group, reap what came back to us, then look for escaped descendants by their run token and
//! repository (a census of `/proc`), several quiet reads in a row before the tree counts as gone.
//!
//! runner makes itself a child subreaper ([`become_subreaper`]), so descendants whose parent dies
//! are re-parented to runner instead of init; that is what lets it reap and account for them.
//! Should runner itself die, the run's guardian (`engine::guard`) ends what its items left.

#[expect(unsafe_code, reason = "one call tuning the allocator, see its comment")]
pub mod alloc;
pub mod census;
pub mod cgroup;
#[expect(
    unsafe_code,
    reason = "a seccomp filter's listener and the memory of the process it stopped, see its comment"
)]
pub mod denials;
pub mod egress;
mod handover;
mod helper;
#[expect(
    unsafe_code,
    reason = "the one module of runner that may: raw process creation, see its comment"
)]
mod launch;
mod program;
pub(crate) use helper::{set_helper_timeout, spawn_helper, spawn_helper_within, stop_helpers};
pub(crate) use launch::{ignore_file_size_signal, not_dumpable};
pub mod output;
pub mod redact;
pub mod sandbox;
#[expect(
    unsafe_code,
    reason = "a signal action reading the sender from siginfo, see its comment"
)]
pub mod signals;

use output::Collector;
use redact::Redactor;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;
use tokio::sync::watch;

pub use census::CensusKey;

/// How a run is asked to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stop {
    /// Keep going.
    Run,
    /// End process trees with their grace period.
    Graceful,
    /// Kill at once.
    Immediate,
}

/// What to run and under which limits.
#[derive(Clone, Debug)]
pub struct SpawnSpec {
    pub argv: Vec<String>,
    pub cwd: PathBuf,
    /// The complete environment; nothing of runner's own leaks in.
    pub env: Vec<(String, String)>,
    pub log_path: PathBuf,
    pub timeout: Duration,
    pub grace: Duration,
    /// No output for this long ends the process as silenced.
    pub silence: Option<Duration>,
    pub redactor: Arc<Redactor>,
    /// A descriptor the child keeps open (the repository lease), so the lease outlives runner
    /// for as long as any descendant that did not close it.
    pub inherit_fd: Option<i32>,
    pub census: CensusKey,
    /// Output lines matching this are counted (a gate's `min_tests`).
    pub count_lines: Option<Arc<regex::Regex>>,
    /// Recognise failures in the output (gates), these folders replaced by `<dir>`.
    pub failure_roots: Option<Vec<String>>,
    /// The item's cgroup: the child moves itself in before it runs its program, and the tree
    /// is ended through it.
    pub cgroup: Option<Arc<cgroup::ItemCgroup>>,
    /// The kernel confinement the child puts itself under before it runs its program.
    pub confine: Option<Arc<sandbox::Confinement>>,
}

/// How a process ended.
#[derive(Clone, Debug, Default)]
pub struct Finished {
    pub exit: Option<i32>,
    pub signal: Option<i32>,
    /// Ended by runner's timer at `timeout`.
    pub timed_out: bool,
    /// Ended because it printed nothing for `silence`.
    pub silenced: bool,
    /// Ended because the run was cancelled.
    pub cancelled: bool,
    /// Could not be started at all.
    pub spawn_error: Option<String>,
    pub duration: Duration,
    /// The redacted last part of its output.
    pub tail: String,
    pub output_bytes: u64,
    /// Whether it printed anything at all.
    pub any_output: bool,
    /// Whether its log file was written (none is when it printed nothing).
    pub logged: bool,
    /// Why its log is not all of its output (it could not be created or written whole).
    pub log_error: Option<String>,
    /// Bytes of its output past its log's limit, not logged.
    pub unlogged: u64,
    /// Output lines matching [`SpawnSpec::count_lines`].
    pub counted: u64,
    /// The failures recognised in its output, when asked for ([`SpawnSpec::failure_roots`]).
    pub failures: Vec<crate::failures::Failure>,
    /// Whether the whole tree was proven gone afterwards.
    pub tree_gone: bool,
    /// What its confinement denied it (recorded where the kernel lets runner watch).
    pub denied: denials::Denied,
}

impl Finished {
    /// A command that could not be started, and why: nothing of it ever ran, so nothing of it
    /// is left (its tree is gone).
    pub fn unstarted(why: impl Into<String>, duration: Duration) -> Finished {
        Finished {
            spawn_error: Some(why.into()),
            duration,
            tree_gone: true,
            ..Finished::default()
        }
    }

    pub fn success(&self) -> bool {
        self.exit == Some(0)
            && !self.timed_out
            && !self.silenced
            && !self.cancelled
            && self.spawn_error.is_none()
    }
}

/// Make runner the reaper of its orphaned descendants.
pub(crate) fn become_subreaper() {
    // Failing this only widens the census to every process (orphans go to init instead).
    census::set_subreaper(nix::sys::prctl::set_child_subreaper(true).is_ok());
}

/// Run one process to its end under the spec's limits, then end its whole tree.
pub async fn run(spec: SpawnSpec, mut stop: watch::Receiver<Stop>) -> Finished {
    let started = Instant::now();
    let mut fin = Finished::default();
    let Some((program, args)) = spec.argv.split_first() else {
        return Finished::unstarted("empty command", started.elapsed());
    };
    // Resolved here, against the child's own PATH: the program runs with the environment it is
    // given, and an absolute path also lets the standard library use `posix_spawn`.
    let path_var = spec
        .env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str());
    let Some(program) = program::resolve_program(program, path_var, &spec.cwd) else {
        return Finished::unstarted(
            format!("cannot start `{program}`: not found on `PATH`"),
            started.elapsed(),
        );
    };
    // One pipe for both streams: the log keeps their interleaving as the process wrote it, and
    // a process costs one pipe and one reader instead of two.
    let (out, rx) = match output_pipe() {
        Ok(p) => p,
        Err(e) => {
            return Finished::unstarted(format!("cannot create a pipe: {e}"), started.elapsed());
        }
    };
    // What runner serves or watches beside the child: its denied writes, its proxy.
    let handover = match handover::Handover::new(spec.confine.as_deref()) {
        Ok(h) => h,
        Err(e) => {
            return Finished::unstarted(
                format!("cannot create a socket pair: {e}"),
                started.elapsed(),
            );
        }
    };
    let child = start(
        &program,
        args,
        &spec,
        out,
        handover.as_ref().map(handover::Handover::child_end),
    );
    let serving = handover.map(handover::Handover::serve);
    let mut child = match child {
        Ok(c) => c,
        // No child was made (or the one made was ended and reaped before this returned).
        Err(e) => {
            return Finished::unstarted(
                format!("cannot start `{}`: {e}", program.display()),
                started.elapsed(),
            );
        }
    };
    let pgid = child.pid();
    let _running = census::Running::new(&spec.census);
    let collector = Collector::new(Some(spec.log_path.clone()), spec.redactor.clone())
        .counting(spec.count_lines.clone())
        .recognising(spec.failure_roots.clone());
    let readers = vec![tokio::spawn(pump(rx, collector.clone()))];

    let deadline = tokio::time::Instant::now() + spec.timeout;
    let status = loop {
        let silence_check = tokio::time::sleep(Duration::from_millis(200));
        tokio::select! {
            st = child.wait() => break st.ok(),
            _ = tokio::time::sleep_until(deadline) => {
                fin.timed_out = true;
                break None;
            }
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() != Stop::Run {
                    fin.cancelled = true;
                    break None;
                }
            }
            _ = silence_check, if spec.silence.is_some() => {
                if let Some(s) = spec.silence
                    && collector.quiet_for() >= s
                {
                    fin.silenced = true;
                    break None;
                }
            }
        }
    };
    let status = match status {
        Some(s) => Some(s),
        None => end_by_runner(&mut child, pgid, spec.grace, &mut stop).await,
    };
    if let Some(e) = child.start_error() {
        fin.spawn_error = Some(format!("cannot start `{}`: {e}", program.display()));
    } else if let Some(st) = status {
        fin.exit = st.code();
        fin.signal = st.signal();
    }
    if let Some(pid) = pgid {
        census::forget_direct(pid);
    }
    // Whatever the reason it ended, nothing it started may outlive it.
    let immediate = *stop.borrow() == Stop::Immediate;
    fin.tree_gone = match pgid {
        Some(g) => {
            end_tree(
                g,
                if immediate {
                    Duration::ZERO
                } else {
                    spec.grace
                },
                &spec.census,
                spec.cgroup.as_deref(),
                Some(&stop),
            )
            .await
        }
        None => true,
    };
    // Pipes close once every holder is gone; bound the wait in case one escaped the census.
    for h in readers {
        let _ = tokio::time::timeout(Duration::from_secs(2), h).await;
    }
    if let Some(serving) = serving {
        fin.denied = serving.finish().await;
    }
    let snap = collector.finish();
    fin.tail = snap.tail;
    fin.output_bytes = snap.bytes;
    fin.any_output = snap.bytes > 0;
    fin.logged = snap.logged;
    fin.log_error = snap.log_error;
    fin.unlogged = snap.unlogged;
    fin.counted = snap.counted;
    fin.failures = snap.failures;
    fin.duration = started.elapsed();
    fin
}

/// End a child runner stops (a timeout, silence, a cancelled run): signal its group, wait
/// out the grace (cut short by a second signal asking for an immediate stop), then kill; how
/// it ended, when it was seen to.
async fn end_by_runner(
    child: &mut Child,
    pgid: Option<i32>,
    grace: Duration,
    stop: &mut watch::Receiver<Stop>,
) -> Option<std::process::ExitStatus> {
    let grace = if *stop.borrow() == Stop::Immediate {
        Duration::ZERO
    } else {
        grace
    };
    if let Some(g) = pgid {
        census::signal_group(g, nix::sys::signal::Signal::SIGTERM);
    }
    let waited = tokio::select! {
        st = child.wait() => Some(st),
        _ = tokio::time::sleep(grace) => None,
        _ = immediate(stop) => None,
    };
    match waited {
        Some(st) => st.ok(),
        None => {
            if let Some(g) = pgid {
                census::signal_group(g, nix::sys::signal::Signal::SIGKILL);
            }
            tokio::time::timeout(Duration::from_secs(10), child.wait())
                .await
                .ok()
                .and_then(Result::ok)
        }
    }
}

/// A started child: created directly ([`launch`]), or by the standard library where that is not
/// available.
enum Child {
    Launched(launch::Launched),
    Std(tokio::process::Child),
}

impl Child {
    fn pid(&self) -> Option<i32> {
        match self {
            Child::Launched(l) => Some(l.pid),
            Child::Std(c) => c.id().map(|p| p as i32),
        }
    }

    async fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        match self {
            Child::Launched(l) => l.wait().await,
            Child::Std(c) => c.wait().await,
        }
    }

    /// Once it has exited: the error that kept its program from starting, if any (the standard
    /// library reports that from `spawn` instead).
    fn start_error(&self) -> Option<std::io::Error> {
        match self {
            Child::Launched(l) => l.start_error(),
            Child::Std(_) => None,
        }
    }
}

/// Start `program` with `args` as `spec` says, its output (both streams) to `out`. Spawning is
/// serialised with every other spawn of this process and with a scan's reaping (see
/// `census::DIRECT_CHILDREN`): the child is registered as a direct child before any scan can
/// see it.
fn start(
    program: &std::path::Path,
    args: &[String],
    spec: &SpawnSpec,
    out: OwnedFd,
    record: Option<std::os::fd::RawFd>,
) -> std::io::Result<Child> {
    use std::os::fd::AsRawFd;
    let joining = spec.cgroup.as_ref().map(|c| c.joining()).transpose()?;
    let join = joining
        .as_ref()
        .map(cgroup::Joining::join_fds)
        .unwrap_or_default();
    let mut direct = census::lock_direct();
    let launched = match program::null() {
        Some(null) => {
            let stdio = [null.as_raw_fd(), out.as_raw_fd(), out.as_raw_fd()];
            let launched = launch::launch(
                program,
                args,
                &spec.env,
                &spec.cwd,
                stdio,
                spec.inherit_fd,
                &join,
                joining.as_ref().and_then(cgroup::Joining::folder_fd),
                launch::Waiter::Runtime,
                child_confine(spec, record),
            );
            match launched {
                Ok(l) => Some(Child::Launched(l)),
                Err(launch::LaunchError::Failed(e)) => return Err(e),
                Err(launch::LaunchError::Unsupported) => None,
            }
        }
        None => None,
    };
    let child = match launched {
        Some(c) => c,
        None => start_std(program, args, spec, out, join, record)?,
    };
    if let Some(pid) = child.pid() {
        direct.push(pid);
    }
    Ok(child)
}

/// What the child does to confine itself, from the spec's confinement.
fn child_confine(spec: &SpawnSpec, record: Option<std::os::fd::RawFd>) -> launch::Confine {
    let Some(c) = &spec.confine else {
        return launch::Confine::none();
    };
    let confine = launch::Confine::new(c.ruleset_fd(), c.userns, c.netns)
        .hiding(&c.hide, &c.hide_dirs, &c.covers)
        .recording(record.unwrap_or(-1), c.record.is_some())
        .proxying(c.allow.is_some())
        .in_pid_namespace(c.pidns);
    if c.userns {
        confine.read_only_but(&c.keep_writable, &spec.cwd)
    } else {
        confine
    }
}

/// Start a child with the standard library (`posix_spawn`), where [`launch`] is not available.
/// Called with the spawn lock held (see [`start`]): while the lease descriptor is inheritable for
/// this child, no other child may be forked.
fn start_std(
    program: &std::path::Path,
    args: &[String],
    spec: &SpawnSpec,
    out: OwnedFd,
    join: Vec<std::os::fd::RawFd>,
    record: Option<std::os::fd::RawFd>,
) -> std::io::Result<Child> {
    let stdin = program::null()
        .and_then(|f| f.try_clone().ok())
        .map_or_else(Stdio::null, Stdio::from);
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .current_dir(&spec.cwd)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(stdin)
        .stderr(Stdio::from(out.try_clone()?))
        .stdout(Stdio::from(out))
        .process_group(0)
        .kill_on_drop(false);
    // `join`'s descriptors are open until the caller returns: past the fork.
    launch::join_before_exec(&mut cmd, join);
    // No pid namespace here: the child would have to be made in it.
    launch::confine_before_exec(
        &mut cmd,
        child_confine(spec, record).in_pid_namespace(false),
    );
    // Without a `pre_exec` hook the standard library can use `posix_spawn`, which costs a small
    // fraction of a `fork` of runner's address space.
    if let Some(fd) = spec.inherit_fd {
        launch::set_cloexec(fd, false);
    }
    let c = cmd.spawn();
    if let Some(fd) = spec.inherit_fd {
        launch::set_cloexec(fd, true);
    }
    Ok(Child::Std(c?))
}

/// A pipe for a child's output: the write end blocking, as programs expect of their stdout; the
/// read end non-blocking and registered with the runtime (which registers only that end, where
/// the runtime's own pipe registers both and then takes one back).
fn output_pipe() -> std::io::Result<(OwnedFd, tokio::net::unix::pipe::Receiver)> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    let (rx, tx) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    fcntl(&rx, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
    Ok((
        tx,
        tokio::net::unix::pipe::Receiver::from_owned_fd_unchecked(rx)?,
    ))
}

/// Resolves once the run asks for an immediate stop (never, if the sender is gone).
async fn immediate(stop: &mut watch::Receiver<Stop>) {
    loop {
        if *stop.borrow_and_update() == Stop::Immediate {
            return;
        }
        if stop.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

async fn pump<R: tokio::io::AsyncRead + Unpin>(mut r: R, c: Collector) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => c.push(&buf[..n]),
        }
    }
}

/// End every process of group `pgid` and every escaped descendant: every member of the item's
/// cgroup when there is one, else every process named by `key`. Returns whether the tree was
/// proven gone. Every wait here has a deadline.
pub(crate) async fn end_tree(
    pgid: i32,
    grace: Duration,
    key: &CensusKey,
    cgroup: Option<&cgroup::ItemCgroup>,
    stop: Option<&watch::Receiver<Stop>>,
) -> bool {
    use nix::sys::signal::Signal;
    if let Some(cg) = cgroup {
        return end_cgroup(pgid, grace, cg, stop).await;
    }
    let group_gone = |g| {
        census::reap_group(g);
        !census::group_alive(g)
    };
    let settled = group_gone(pgid);
    if !settled {
        census::signal_group(pgid, Signal::SIGTERM);
        let until = Instant::now() + grace;
        let hurry = || stop.is_some_and(|s| *s.borrow() == Stop::Immediate);
        while Instant::now() < until && !group_gone(pgid) && !hurry() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if !group_gone(pgid) {
            census::signal_group(pgid, Signal::SIGKILL);
            let until = Instant::now() + Duration::from_secs(5);
            while Instant::now() < until && !group_gone(pgid) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    let group_ok = settled || group_gone(pgid);
    group_ok && census::sweep(key.clone(), settled).await
}

/// [`end_tree`] for an item in a cgroup: the leader's group and every member get SIGTERM, then,
/// after the grace period, the cgroup is killed as one. No census of the environments follows:
/// the adopted orphans that died are reaped, and that is all.
async fn end_cgroup(
    pgid: i32,
    grace: Duration,
    cg: &cgroup::ItemCgroup,
    stop: Option<&watch::Receiver<Stop>>,
) -> bool {
    use nix::sys::signal::Signal;
    census::reap_group(pgid);
    let mut empty = cg.populated() == Some(false);
    let left_some = !empty;
    if !empty {
        census::signal_group(pgid, Signal::SIGTERM);
        cg.signal(Signal::SIGTERM);
        let until = Instant::now() + grace;
        let hurry = || stop.is_some_and(|s| *s.borrow() == Stop::Immediate);
        while Instant::now() < until && !hurry() {
            census::reap_group(pgid);
            if cg.populated() == Some(false) {
                empty = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if !empty {
            empty = cg.kill(Duration::from_secs(5)).await;
        }
    }
    census::reap_group(pgid);
    // The cgroup being empty proves every process of the item gone, wherever it went: what is
    // left is to collect the exit statuses of those that were re-parented to runner. A process
    // leaves its cgroup an instant before it can be reaped, so where the item left some behind
    // they are looked for once more a moment later (else the next item's end, or the run's,
    // collects them).
    if empty {
        census::reap_adopted();
        if left_some {
            tokio::time::sleep(REAP_AGAIN).await;
            census::reap_adopted();
        }
    }
    empty
}

/// How long after an item's cgroup emptied its last adopted orphans are reaped once more.
const REAP_AGAIN: Duration = Duration::from_millis(20);

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::AsRawFd;

    /// The standard library's path, taken where `clone` cannot be: the same environment,
    /// directory, process group and inherited lease descriptor as a launched child.
    #[test]
    fn the_fallback_spawn_gives_a_child_what_a_launched_one_gets() {
        let dir = tempfile::tempdir().unwrap();
        let kept = std::fs::File::create(dir.path().join("lock")).unwrap();
        let fd = kept.as_raw_fd();
        let script = format!(
            "echo \"$ONLY $(pwd)\"; echo $$ $(cut -d' ' -f5 /proc/$$/stat); test -e /proc/$$/fd/{fd} && echo kept"
        );
        let spec = SpawnSpec {
            argv: vec!["/bin/sh".into(), "-c".into(), script],
            cwd: dir.path().to_path_buf(),
            env: vec![("ONLY".into(), "this".into())],
            log_path: dir.path().join("log"),
            timeout: Duration::from_secs(10),
            grace: Duration::from_secs(1),
            silence: None,
            redactor: Arc::new(Redactor::default()),
            inherit_fd: Some(fd),
            census: CensusKey {
                token: "t".into(),
                repo: "r".into(),
            },
            count_lines: None,
            failure_roots: None,
            cgroup: None,
            confine: None,
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let out = rt.block_on(async {
            let (rx, tx) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
            let mut child = {
                let _lock = census::DIRECT_CHILDREN.lock().unwrap();
                start_std(
                    std::path::Path::new("/bin/sh"),
                    &spec.argv[1..],
                    &spec,
                    tx,
                    Vec::new(),
                    None,
                )
                .unwrap()
            };
            assert!(child.wait().await.unwrap().success());
            let mut out = String::new();
            std::fs::File::from(rx).read_to_string(&mut out).unwrap();
            out
        });
        let lines: Vec<&str> = out.lines().collect();
        let cwd = dir.path().canonicalize().unwrap();
        assert_eq!(lines[0], format!("this {}", cwd.display()), "{out}");
        let ids: Vec<&str> = lines[1].split(' ').collect();
        assert_eq!(ids[0], ids[1], "its own group: {out}");
        assert_eq!(lines.get(2), Some(&"kept"), "{out}");
        let flags = nix::fcntl::fcntl(&kept, nix::fcntl::FcntlArg::F_GETFD).unwrap();
        assert_ne!(
            flags & libc::FD_CLOEXEC,
            0,
            "runner's own copy is close-on-exec again"
        );
    }
}
