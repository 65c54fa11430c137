//! Short-lived helpers (git, a tracker's command) that a thread starts and waits for.
//!
//! A drain starts several git commands per item. Started by the standard library with a
//! `pre_exec` hook (the parent-death signal), each was a `fork` of runner's whole address
//! space, torn down again by the `execve` that followed: measured over a codemod of 1,000
//! repositories, copying and unmapping runner's memory took about a tenth of all the CPU the
//! drain used. A helper that inherits runner's environment is started as workers are
//! ([`super::launch`]: `clone` sharing runner's memory, the same parent-death signal and process
//! group), which copies nothing.

use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use super::{census, launch, program};

/// How long a helper (git) may take before it is ended: `RUNNER_GIT_TIMEOUT` when set (see
/// [`set_helper_timeout`]), else 10 minutes (a clone of a large repository over a slow link).
static HELPER_TIMEOUT: std::sync::Mutex<Duration> = std::sync::Mutex::new(Duration::from_secs(600));

/// Set how long a helper may take.
pub(crate) fn set_helper_timeout(d: Duration) {
    *HELPER_TIMEOUT.lock().unwrap_or_else(|p| p.into_inner()) = d;
}

/// Counts the run's stops: a helper started before the latest one is ended. (Helpers started
/// after it, to wind the run down, are not.)
static STOPS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How long a helper has, once the run stops, to end on SIGTERM (git then removes its lock
/// files) before it is killed.
const HELPER_STOP_GRACE: Duration = Duration::from_secs(2);

/// The run is stopping: end every helper still running (SIGTERM, then SIGKILL after a short
/// grace). What asked for one gets an error of kind `Interrupted`.
pub(crate) fn stop_helpers() {
    STOPS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

/// Spawn a short-lived helper (git) under the same lock as every other spawn, so that it never
/// inherits a lease descriptor made inheritable for a worker, and wait for it — at most the
/// helper timeout: then its whole process group is killed and the answer is an error of kind
/// `TimedOut`. A hung git fails what asked it, never the run.
///
/// `cmd` runs in runner's environment with the changes it names (`env`, `env_remove`; never
/// `env_clear`), its standard input closed.
///
/// The helper is registered as a direct child until it is waited for, so that a census never
/// reaps it as an orphan and steals its exit status.
pub(crate) fn spawn_helper(cmd: &mut Command) -> std::io::Result<Output> {
    let timeout = *HELPER_TIMEOUT.lock().unwrap_or_else(|p| p.into_inner());
    run(cmd, timeout, true)
}

/// [`spawn_helper`] for any command (one that may clear its environment or read its standard
/// input), with a deadline of its own (a tracker's command: `sources[].timeout`).
pub(crate) fn spawn_helper_within(cmd: &mut Command, timeout: Duration) -> std::io::Result<Output> {
    run(cmd, timeout, false)
}

fn run(cmd: &mut Command, timeout: Duration, inherits_env: bool) -> std::io::Result<Output> {
    if cfg!(debug_assertions) {
        crate::support::blocking::blocking(&format!(
            "waiting for `{}`",
            cmd.get_program().to_string_lossy()
        ));
    }
    let stops = STOPS.load(std::sync::atomic::Ordering::SeqCst);
    let (mut child, stdout_pipe, stderr_pipe) = start(cmd, inherits_env)?;
    let pid = child.pid();
    // A watchdog ends the helper's group at the deadline, or when the run stops; the pipes
    // then close and the reads below end.
    let (done, finished) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        use std::sync::atomic::Ordering;
        use std::sync::mpsc::RecvTimeoutError;
        let deadline = Instant::now() + timeout;
        let slice = Duration::from_millis(50);
        loop {
            let now = Instant::now();
            if now >= deadline {
                census::signal_group(pid, nix::sys::signal::Signal::SIGKILL);
                return Some(std::io::ErrorKind::TimedOut);
            }
            if STOPS.load(Ordering::SeqCst) != stops {
                census::signal_group(pid, nix::sys::signal::Signal::SIGTERM);
                if let Err(RecvTimeoutError::Timeout) = finished.recv_timeout(HELPER_STOP_GRACE) {
                    census::signal_group(pid, nix::sys::signal::Signal::SIGKILL);
                }
                return Some(std::io::ErrorKind::Interrupted);
            }
            match finished.recv_timeout(slice.min(deadline - now)) {
                Err(RecvTimeoutError::Timeout) => continue,
                _ => return None,
            }
        }
    });
    let err_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = { stderr_pipe }.read_to_end(&mut buf);
        buf
    });
    let mut stdout = Vec::new();
    let _ = { stdout_pipe }.read_to_end(&mut stdout);
    let stderr = err_reader.join().unwrap_or_default();
    let status = child.wait();
    drop(done);
    let ended = watchdog.join().unwrap_or(None);
    census::forget_direct(pid);
    match ended {
        Some(std::io::ErrorKind::TimedOut) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "did not finish within {} s; it was ended",
                    timeout.as_secs_f64()
                ),
            ));
        }
        Some(kind) => {
            return Err(std::io::Error::new(
                kind,
                "was ended because the run is stopping",
            ));
        }
        None => {}
    }
    Ok(Output {
        status: status?,
        stdout,
        stderr,
    })
}

/// Helpers started by [`launch`] rather than the standard library: the tests' proof that a
/// helper was not forked.
#[cfg(test)]
static LAUNCHED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A helper started one way or the other.
enum Helper {
    Launched(launch::Launched),
    Std(std::process::Child),
}

impl Helper {
    fn pid(&self) -> i32 {
        match self {
            Helper::Launched(l) => l.pid,
            Helper::Std(c) => c.id() as i32,
        }
    }

    /// Its exit, once reaped; for a launched helper whose program could not be started, why.
    fn wait(&mut self) -> std::io::Result<ExitStatus> {
        match self {
            Helper::Launched(l) => {
                let status = l.wait_blocking()?;
                match l.start_error() {
                    Some(e) => Err(e),
                    None => Ok(status),
                }
            }
            Helper::Std(c) => c.wait(),
        }
    }
}

/// Start the helper with its standard output and error on pipes, registered as a direct
/// child: launched where [`launchable`] says it can be, else by the standard library.
fn start(cmd: &mut Command, inherits_env: bool) -> std::io::Result<(Helper, File, File)> {
    if inherits_env
        && let Some((program, args, env, cwd)) = launchable(cmd)
        && let Some(null) = program::null()
    {
        use nix::fcntl::OFlag;
        let (out_r, out_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
        let (err_r, err_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
        let stdio = [null.as_raw_fd(), out_w.as_raw_fd(), err_w.as_raw_fd()];
        let mut direct = census::lock_direct();
        let launched = launch::launch(
            &program,
            &args,
            &env,
            &cwd,
            stdio,
            None,
            &[],
            None,
            launch::Waiter::Thread,
            launch::Confine::none(),
        );
        match launched {
            Ok(l) => {
                direct.push(l.pid);
                #[cfg(test)]
                LAUNCHED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                return Ok((Helper::Launched(l), File::from(out_r), File::from(err_r)));
            }
            Err(launch::LaunchError::Failed(e)) => return Err(e),
            Err(launch::LaunchError::Unsupported) => {}
        }
    }
    launch::die_with_parent(cmd);
    let mut direct = census::lock_direct();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()?;
    direct.push(child.id() as i32);
    drop(direct);
    let pipe = |fd: Option<std::os::fd::OwnedFd>| -> std::io::Result<File> {
        fd.map(File::from)
            .ok_or_else(|| std::io::Error::other("a helper's output was not piped"))
    };
    let out = pipe(child.stdout.take().map(Into::into))?;
    let err = pipe(child.stderr.take().map(Into::into))?;
    Ok((Helper::Std(child), out, err))
}

/// A command to launch: its program's path, arguments, whole environment (runner's with the
/// command's changes) and folder. `None` where the standard library is to start it: something
/// not valid UTF-8, or a program not found (whose error the standard library gives).
type Launchable = (PathBuf, Vec<String>, Vec<(String, String)>, PathBuf);

fn launchable(cmd: &Command) -> Option<Launchable> {
    let program = cmd.get_program().to_str()?;
    let args = cmd
        .get_args()
        .map(|a| a.to_str().map(String::from))
        .collect::<Option<Vec<_>>>()?;
    let mut env: std::collections::BTreeMap<String, String> = std::env::vars_os()
        .map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect::<Option<_>>()?;
    for (k, v) in cmd.get_envs() {
        let k = k.to_str()?.to_string();
        match v {
            Some(v) => env.insert(k, v.to_str()?.to_string()),
            None => env.remove(&k),
        };
    }
    let here = std::env::current_dir().ok()?;
    let cwd = match cmd.get_current_dir() {
        Some(d) => here.join(d),
        None => here,
    };
    let program = program::resolve_program(program, env.get("PATH").map(String::as_str), &cwd)?;
    Some((program, args, env.into_iter().collect(), cwd))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A helper gets runner's environment with the command's changes, its folder, its own
    /// process group, its two streams apart and its exit status, started without a fork.
    #[test]
    fn a_launched_helper_gets_what_the_command_says() {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            "echo \"$RUNNER_HELPER_TEST ${HOME-unset} $(pwd)\"; echo oops >&2; \
             echo $$ $(cut -d' ' -f5 /proc/$$/stat); exit 3",
        ])
        .env("RUNNER_HELPER_TEST", "set")
        .env_remove("HOME")
        .current_dir(dir.path())
        .stdin(Stdio::null());
        let (_, _, env, cwd) = launchable(&cmd).expect("a plain command is launched");
        assert!(
            env.iter()
                .any(|(k, v)| k == "RUNNER_HELPER_TEST" && v == "set")
        );
        assert!(!env.iter().any(|(k, _)| k == "HOME"));
        assert_eq!(cwd, dir.path());
        let launched = LAUNCHED.load(std::sync::atomic::Ordering::SeqCst);
        let out = spawn_helper(&mut cmd).unwrap();
        assert!(
            LAUNCHED.load(std::sync::atomic::Ordering::SeqCst) > launched,
            "the helper was started by the standard library, a fork of runner"
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let mut lines = text.lines();
        let real = std::fs::canonicalize(dir.path()).unwrap();
        assert_eq!(
            lines.next().unwrap(),
            format!("set unset {}", real.display())
        );
        let ids: Vec<&str> = lines.next().unwrap().split(' ').collect();
        assert_eq!(
            ids[0], ids[1],
            "the helper leads a process group of its own"
        );
        assert_eq!(out.stderr, b"oops\n");
        assert_eq!(out.status.code(), Some(3));
        // A program that is nowhere: the error names it as missing.
        let err = spawn_helper(&mut Command::new("runner-no-such-program")).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    }

    /// Past its deadline a launched helper's whole group is ended, a child it left in the
    /// background holding its output open included.
    #[test]
    fn a_launched_helper_past_its_deadline_is_ended_with_its_group() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "sleep 60 & echo $! > \"$0\"; wait"])
            .arg(&pid_file)
            .stdin(Stdio::null());
        let started = Instant::now();
        let err = run(&mut cmd, Duration::from_millis(300), true).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        assert!(started.elapsed() < Duration::from_secs(30));
        let pid: i32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // The background sleep was killed: gone, or a zombie until whoever adopted it reaps
        // it. (Its output closes as it exits, a moment before it is marked so.)
        let state = || {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            stat.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .to_string()
        };
        let ended = |s: &str| s.is_empty() || s.starts_with('Z');
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ended(&state()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let last = state();
        assert!(
            ended(&last),
            "the background sleep outlived its helper: {last}"
        );
    }
}
