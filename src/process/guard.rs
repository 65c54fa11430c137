//! The guardian of a run: a small process of runner's own that outlives it, and ends what the
//! run started when runner dies without saying it is done (`kill -9`, the OOM killer, a panic
//! that aborts).
//!
//! The parent-death signal reaches runner's direct children only; what they started — a test
//! server a gate left, an agent's language server, a daemon that left its session, forked
//! twice and ignores SIGTERM — would live on until a later run touched its repository, and on a
//! CI machine or a laptop no later run may come. So each top-level drain starts
//! `runner guard-run` with a pipe on its stdin: runner writes the run's token (and its cgroup,
//! when it has one), and `done` once every item has ended. The guardian waits on the pipe; when
//! it closes without `done`, runner is gone, and the guardian ends every process carrying the
//! run's token, wherever it went, and everything in the run's cgroup (SIGTERM, a grace, SIGKILL,
//! until scans find none), then exits. It is in a session of its own (a terminal's signals meant
//! for runner do not end it), carries none of the run's variables, and holds nothing open but the
//! pipe and its log.
//!
//! The token goes through the pipe, never the command line, which every user can read.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::time::Duration;

/// How long what the dead run left has after SIGTERM before SIGKILL.
const GRACE: Duration = Duration::from_secs(2);

/// A run's guardian, from runner's side.
pub(crate) struct Guard {
    child: std::process::Child,
    pipe: Option<std::process::ChildStdin>,
}

impl Guard {
    /// Start the guardian of the run whose processes carry `token`, and whose cgroups (unified
    /// first) are `cgroups`; it says what it did in `log`.
    pub(crate) fn start(
        token: &str,
        cgroups: &[PathBuf],
        log: &std::path::Path,
    ) -> std::io::Result<Guard> {
        let exe = std::env::current_exe()?;
        if let Some(dir) = log.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)?;
        let mut cmd = std::process::Command::new(exe);
        cmd.arg("guard-run")
            .arg("--for")
            .arg(std::process::id().to_string())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .env("NO_COLOR", "1");
        // None of the run's variables: a census by token never counts the guardian.
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("RUNNER_") {
                cmd.env_remove(k);
            }
        }
        // Registered as runner's own child before anything could reap it, so that the end of the
        // run's census of adopted orphans leaves it alone.
        let mut child = {
            let mut direct = super::census::lock_direct();
            let child = cmd.spawn()?;
            direct.push(child.id() as i32);
            child
        };
        let mut pipe = child.stdin.take();
        if let Some(p) = pipe.as_mut() {
            let mut said = format!("{token}\n");
            for c in cgroups {
                said.push_str(&format!("cgroup {}\n", c.display()));
            }
            if let Err(e) = p.write_all(said.as_bytes()).and_then(|()| p.flush()) {
                let _ = child.kill();
                let _ = child.wait();
                super::census::forget_direct(child.id() as i32);
                return Err(e);
            }
        }
        Ok(Guard { child, pipe })
    }

    /// Every item ended as it should: the guardian goes, touching nothing.
    pub(crate) fn stand_down(mut self) {
        if let Some(mut p) = self.pipe.take() {
            let _ = p.write_all(b"done\n").and_then(|()| p.flush());
        }
        let _ = self.child.wait();
        super::census::forget_direct(self.child.id() as i32);
    }
}

/// What runner told its guardian.
#[derive(Debug, Default, PartialEq)]
struct Told {
    token: String,
    cgroups: Vec<PathBuf>,
    done: bool,
}

/// Read what runner says on `input` until it is done or the pipe closes.
fn listen(input: impl BufRead) -> Told {
    let mut told = Told::default();
    for (n, line) in input.lines().enumerate() {
        let Ok(line) = line else { break };
        if n == 0 {
            told.token = line;
        } else if let Some(c) = line.strip_prefix("cgroup ") {
            told.cgroups.push(PathBuf::from(c));
        } else if line == "done" {
            told.done = true;
            break;
        }
    }
    told
}

/// `runner guard-run --for PID`: the guardian itself. Exit 0 when runner said it was done or
/// nothing of the run was left; 1 when something could not be ended.
pub fn run(for_pid: u32) -> i32 {
    // A session of its own: the terminal's SIGINT and SIGHUP are runner's to heed, not its.
    let _ = nix::unistd::setsid();
    // What started after runner did may be the run's; what started before cannot be.
    let since = match crate::support::host::seen(for_pid) {
        crate::support::host::Seen::Started(t) => Some(t),
        _ => None,
    };
    let told = listen(std::io::stdin().lock());
    if told.done || told.token.is_empty() {
        return crate::vocab::EXIT_OK;
    }
    let now = crate::support::clock::now();
    eprintln!(
        "{now} runner guard-run: runner (pid {for_pid}) ended without finishing its run: ending what the run started"
    );
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        eprintln!("runner guard-run: no runtime: nothing was ended");
        return crate::vocab::EXIT_FAILURES;
    };
    let mut failed = false;
    rt.block_on(async {
        if !told.cgroups.is_empty() {
            match super::cgroup::end_left(&told.cgroups, GRACE).await {
                Ok(pids) if pids.is_empty() => {}
                Ok(pids) => eprintln!("runner guard-run: ended the run's cgroup: pids {pids:?}"),
                Err(left) => {
                    failed = true;
                    eprintln!("runner guard-run: the run's cgroup could not be emptied: pids {left:?}");
                }
            }
        }
        match super::census::end_token(&told.token, GRACE, since).await {
            Ok(pids) if pids.is_empty() => {}
            Ok(pids) => eprintln!("runner guard-run: ended the run's processes: pids {pids:?}"),
            Err(left) => {
                failed = true;
                eprintln!("runner guard-run: processes of the run could not be ended or read: pids {left:?}");
            }
        }
    });
    if failed {
        crate::vocab::EXIT_FAILURES
    } else {
        crate::vocab::EXIT_OK
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_runner_says_is_read_until_done_or_the_pipe_closes() {
        let told = listen(&b"tok\ncgroup /sys/fs/cgroup/r\ndone\nignored\n"[..]);
        assert_eq!(
            told,
            Told {
                token: "tok".into(),
                cgroups: vec![PathBuf::from("/sys/fs/cgroup/r")],
                done: true
            }
        );
        // The pipe closed without `done`: runner died.
        let told = listen(&b"tok\n"[..]);
        assert!(!told.done && told.token == "tok");
        assert_eq!(listen(&b""[..]), Told::default());
    }
}
