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
//! A run that ends with repositories quarantined (processes of an item that could not be proven
//! gone: stuck in the kernel, frozen) hands them to its guardian, which keeps watch until nothing
//! of those items is left: what can be ended is, as soon as it can be, and recorded beside the
//! quarantine as a later run's watch would ([`super::watch`]). Lifting the quarantine stays
//! `runner unlock`'s; once lifted, the guardian lets the repository go.
//!
//! The token goes through the pipe, never the command line, which every user can read.

use crate::process::{census, cgroup};
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
        run_id: &str,
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
            let mut direct = census::lock_direct();
            let child = cmd.spawn()?;
            direct.push(child.id() as i32);
            child
        };
        let mut pipe = child.stdin.take();
        if let Some(p) = pipe.as_mut() {
            let mut said = format!("{token}\nrun {run_id}\n");
            for c in cgroups {
                said.push_str(&format!("cgroup {}\n", c.display()));
            }
            if let Err(e) = p.write_all(said.as_bytes()).and_then(|()| p.flush()) {
                let _ = child.kill();
                let _ = child.wait();
                census::forget_direct(child.id() as i32);
                return Err(e);
            }
        }
        Ok(Guard { child, pipe })
    }

    /// Every item ended: the guardian goes, touching nothing — or, when the run quarantined
    /// repositories (git common dirs `watch`), stays to keep watch over them.
    pub(crate) fn stand_down(mut self, watch: &[PathBuf]) {
        if let Some(mut p) = self.pipe.take() {
            let mut said = String::new();
            for c in watch {
                said.push_str(&format!("watch {}\n", c.display()));
            }
            said.push_str("done\n");
            let _ = p.write_all(said.as_bytes()).and_then(|()| p.flush());
        }
        if watch.is_empty() {
            let _ = self.child.wait();
        }
        census::forget_direct(self.child.id() as i32);
    }
}

/// What runner told its guardian.
#[derive(Debug, Default, PartialEq)]
struct Told {
    token: String,
    run_id: String,
    cgroups: Vec<PathBuf>,
    /// Quarantined repositories (git common dirs) to keep watch over once the run is over.
    watch: Vec<PathBuf>,
    done: bool,
}

/// Read what runner says on `input` until it is done or the pipe closes.
fn listen(input: impl BufRead) -> Told {
    let mut told = Told::default();
    for (n, line) in input.lines().enumerate() {
        let Ok(line) = line else { break };
        if n == 0 {
            told.token = line;
        } else if let Some(id) = line.strip_prefix("run ") {
            told.run_id = id.to_string();
        } else if let Some(c) = line.strip_prefix("cgroup ") {
            told.cgroups.push(PathBuf::from(c));
        } else if let Some(c) = line.strip_prefix("watch ") {
            told.watch.push(PathBuf::from(c));
        } else if line == "done" {
            told.done = true;
            break;
        }
    }
    told
}

/// `runner guard-run --for PID`: the guardian itself. Exit 0 once nothing of the run is left
/// to end or watch.
pub fn run(for_pid: u32) -> i32 {
    // A session of its own: the terminal's SIGINT and SIGHUP are runner's to heed, not its.
    let _ = nix::unistd::setsid();
    // What started after runner did may be the run's; what started before cannot be.
    let since = match crate::support::host::seen(for_pid) {
        crate::support::host::Seen::Started(t) => Some(t),
        _ => None,
    };
    let told = listen(std::io::stdin().lock());
    if told.token.is_empty() || (told.done && told.watch.is_empty()) {
        return crate::vocab::EXIT_OK;
    }
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        say("no runtime: nothing is ended or watched".into());
        return crate::vocab::EXIT_FAILURES;
    };
    if told.done {
        say(format!(
            "run `{}` is over with {} repository(ies) quarantined: keeping watch",
            told.run_id,
            told.watch.len()
        ));
        rt.block_on(super::watch::watch_until_gone(
            told.watch,
            &told.run_id,
            say,
        ));
        return crate::vocab::EXIT_OK;
    }
    say(format!(
        "runner (pid {for_pid}) ended without finishing run `{}`: ending what the run started",
        told.run_id
    ));
    // What cannot be ended yet (stuck in the kernel, frozen) is tried again, further apart,
    // until nothing is left.
    let mut pause = Duration::from_secs(1);
    while !rt.block_on(end_all(&told, since)) {
        std::thread::sleep(pause);
        pause = (pause * 2).min(super::watch::MAX_PAUSE);
    }
    crate::vocab::EXIT_OK
}

/// A line in the guardian's log (its stderr), timed.
fn say(what: String) {
    eprintln!("{} runner guard-run: {what}", crate::support::clock::now());
}

/// End everything of the run: its cgroups, and what carries its token. Whether nothing is left.
async fn end_all(told: &Told, since: Option<u64>) -> bool {
    let mut gone = true;
    if !told.cgroups.is_empty() {
        match cgroup::end_left(&told.cgroups, GRACE).await {
            Ok(pids) if pids.is_empty() => {}
            Ok(pids) => say(format!("ended the run's cgroup: pids {pids:?}")),
            Err(left) => {
                gone = false;
                say(format!(
                    "the run's cgroup could not be emptied (pids {left:?}): trying again"
                ));
            }
        }
    }
    match census::end_token(&told.token, GRACE, since).await {
        Ok(pids) if pids.is_empty() => {}
        Ok(pids) => say(format!("ended the run's processes: pids {pids:?}")),
        Err(left) => {
            gone = false;
            say(format!(
                "processes of the run could not be ended or read (pids {left:?}): trying again"
            ));
        }
    }
    gone
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_runner_says_is_read_until_done_or_the_pipe_closes() {
        let told =
            listen(&b"tok\nrun r1\ncgroup /sys/fs/cgroup/r\nwatch /w/.git\ndone\nignored\n"[..]);
        assert_eq!(
            told,
            Told {
                token: "tok".into(),
                run_id: "r1".into(),
                cgroups: vec![PathBuf::from("/sys/fs/cgroup/r")],
                watch: vec![PathBuf::from("/w/.git")],
                done: true
            }
        );
        // The pipe closed without `done`: runner died.
        let told = listen(&b"tok\n"[..]);
        assert!(!told.done && told.token == "tok");
        assert_eq!(listen(&b""[..]), Told::default());
    }
}
