//! This host and the processes on it: who holds something, and whether that holder still lives.

use serde::{Deserialize, Serialize};

/// This machine's host name, or `unknown`.
pub(crate) fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown".into())
}

/// Start time of `pid` in clock ticks since boot (`/proc/<pid>/stat` field 22), when `/proc`
/// shows it ([`seen`]).
pub(crate) fn process_start_time(pid: u32) -> Option<u64> {
    match seen(pid) {
        Seen::Started(t) => Some(t),
        _ => None,
    }
}

/// The parent of `pid` (`/proc/<pid>/stat` field 4).
pub(crate) fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// A process's command line, its arguments spaced (empty when it cannot be read).
pub(crate) fn command_line(pid: i32) -> String {
    let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    String::from_utf8_lossy(&cmd)
        .replace('\0', " ")
        .trim_end()
        .to_string()
}

/// Whether `pid` has exited and waits to be reaped: dead, though `/proc` still lists it.
fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| r.trim_start().starts_with(['Z', 'X']))
        })
        .unwrap_or(false)
}

/// Who holds something (a lease, a claim, a run): a process named by host, pid and start time,
/// since pids are reused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Holder {
    pub host: String,
    pub pid: u32,
    /// Process start time in clock ticks since boot: a pid is the same process only if this
    /// matches too.
    pub start_time: Option<u64>,
    /// The pid namespace its pid is in (the namespace file's inode): seen from another one (a
    /// runner started inside a confined item), the pid names nothing, and the holder is never
    /// presumed dead. Absent from records written before runner said so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_ns: Option<u64>,
}

/// The pid namespace this process is in (the namespace file's inode).
fn pid_namespace() -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    static NS: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *NS.get_or_init(|| std::fs::metadata("/proc/self/ns/pid").ok().map(|m| m.ino()))
}

impl Holder {
    /// This process (read once).
    pub fn this_process() -> Self {
        static ME: std::sync::OnceLock<Holder> = std::sync::OnceLock::new();
        ME.get_or_init(|| {
            let pid = std::process::id();
            Holder {
                host: hostname(),
                pid,
                start_time: process_start_time(pid),
                pid_ns: pid_namespace(),
            }
        })
        .clone()
    }

    /// Whether the holder is provably dead: on this host, and its pid is gone or now names a
    /// process that started at another time. A holder on another host, or in another pid
    /// namespace, is never presumed dead.
    pub(crate) fn is_dead(&self) -> bool {
        if self.host != hostname() {
            return false;
        }
        if self
            .pid_ns
            .is_some_and(|theirs| pid_namespace() != Some(theirs))
        {
            return false;
        }
        match seen(self.pid) {
            Seen::Gone => true,
            Seen::Started(_) if is_zombie(self.pid) => true,
            Seen::Started(t) => self.start_time.is_some_and(|s| s != t),
            // What cannot be seen is never proven dead: what it holds is kept, and the operator
            // is told (once per process).
            Seen::Unknown(why) => {
                static TOLD: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());
                let mut told = TOLD.lock().unwrap_or_else(|p| p.into_inner());
                if !told.contains(&self.pid) {
                    told.push(self.pid);
                    tracing::warn!(
                        pid = self.pid,
                        "whether process {} lives cannot be read ({why}): it is not presumed dead, and what it holds is kept",
                        self.pid
                    );
                }
                false
            }
        }
    }
}

/// What `/proc` says of a process.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Seen {
    /// It runs, started at this time (clock ticks since boot).
    Started(u64),
    /// No process has this pid.
    Gone,
    /// It cannot be told: the pid names a process `/proc` does not show (another user's, under
    /// `hidepid`), or its record cannot be read.
    Unknown(String),
}

/// What `/proc` says of `pid`. Under `hidepid=invisible` another user's process is missing from
/// `/proc` as if it had exited: the kernel is asked whether the pid names a process before it
/// counts as gone.
pub(crate) fn seen(pid: u32) -> Seen {
    // No process has pid 0 or one past the kernel's limit (`kill` would read those as groups).
    let Some(as_pid) = i32::try_from(pid).ok().filter(|p| *p > 0) else {
        return Seen::Gone;
    };
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => match stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(19)?.parse().ok())
        {
            Some(t) => Seen::Started(t),
            None => Seen::Unknown(format!("/proc/{pid}/stat does not read as a process's")),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            match nix::sys::signal::kill(nix::unistd::Pid::from_raw(as_pid), None) {
                Err(nix::errno::Errno::ESRCH) => Seen::Gone,
                Ok(()) | Err(_) => Seen::Unknown(
                    "the pid names a process that /proc does not show (hidepid?)".into(),
                ),
            }
        }
        Err(e) => Seen::Unknown(format!("/proc/{pid}/stat: {e}")),
    }
}

/// Whether the holder is a live ancestor of this process (its parent, or its parent's, and so
/// on), on this host.
pub(crate) fn is_ancestor(holder: &Holder) -> bool {
    if holder.host != hostname() || holder.is_dead() {
        return false;
    }
    let mut pid = std::process::id();
    // A chain of processes is never longer than the pids there are; this bounds a loop on a
    // `/proc` that changes under the walk.
    for _ in 0..4096 {
        match parent_of(pid) {
            Some(p) if p == holder.pid => return true,
            Some(p) if p > 1 => pid = p,
            _ => return false,
        }
    }
    false
}

/// Why this process is part of a running item of a runner's, told from what the process cannot
/// change about itself: its cgroup (an item's, in cgroup mode), or an ancestor that is a
/// `runner apply` (runner is a child subreaper, so even a process that left its session and
/// cleared its environment has the runner above it). `None` when neither says so.
pub(crate) fn inside_item() -> Option<String> {
    if let Ok(text) = std::fs::read_to_string("/proc/self/cgroup") {
        for line in text.lines() {
            let Some(path) = line.strip_prefix("0::") else {
                continue;
            };
            let parts: Vec<&str> = path.split('/').collect();
            if let Some(i) = parts.iter().position(|p| p.starts_with("runner-"))
                && parts.get(i + 1).is_some_and(|p| p.starts_with("repo-"))
            {
                return Some(format!(
                    "it runs in cgroup `{path}`, which belongs to an item of run `{}`",
                    parts[i].trim_start_matches("runner-")
                ));
            }
        }
    }
    let parent_of = |pid: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (_, rest) = stat.rsplit_once(')')?;
        rest.split_whitespace().nth(1)?.parse().ok()
    };
    let me = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_os_string()));
    let mut pid = std::process::id();
    for _ in 0..4096 {
        // Pid 1 too: in an item's pid namespace, the namespace's first process is runner's.
        match parent_of(pid) {
            Some(p) if p >= 1 => pid = p,
            _ => return None,
        }
        // Its program: where `exe` leads, or — where a confined item may not follow that link
        // (it belongs to a process outside its domain) — the first word of its command line.
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
            .ok()
            .or_else(|| {
                let first = cmdline.split(|b| *b == 0).next()?;
                Some(std::path::PathBuf::from(
                    String::from_utf8_lossy(first).into_owned(),
                ))
            });
        let same = exe
            .as_ref()
            .and_then(|e| e.file_name())
            .is_some_and(|n| me.as_deref() == Some(n) || n == "runner");
        if !same {
            continue;
        }
        if cmdline.split(|b| *b == 0).any(|a| a == b"apply") {
            return Some(format!("its ancestor, pid {pid}, is `runner apply`"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exited_process_not_yet_reaped_is_dead() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        let holder = Holder {
            host: hostname(),
            pid,
            start_time: process_start_time(pid),
            pid_ns: None,
        };
        assert!(!holder.is_dead());
        child.kill().unwrap();
        // Killed, and not waited for: a zombie that `/proc` still lists.
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !is_zombie(pid) && std::time::Instant::now() < until {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(process_start_time(pid).is_some(), "still listed");
        assert!(holder.is_dead(), "a zombie holds nothing");
        child.wait().unwrap();
    }

    #[test]
    fn ancestry_is_walked_to_the_holder() {
        let parent = Holder {
            host: hostname(),
            pid: std::os::unix::process::parent_id(),
            start_time: process_start_time(std::os::unix::process::parent_id()),
            pid_ns: None,
        };
        assert!(is_ancestor(&parent));
        assert!(
            !is_ancestor(&Holder::this_process()),
            "not its own ancestor"
        );
        let mut stale = parent.clone();
        stale.start_time = stale.start_time.map(|t| t + 1);
        assert!(!is_ancestor(&stale), "a reused pid is not the ancestor");
    }

    #[test]
    fn a_pid_no_process_has_is_gone_and_a_live_one_started() {
        let me = std::process::id();
        assert_eq!(seen(me), Seen::Started(process_start_time(me).unwrap()));
        assert_eq!(seen(0), Seen::Gone);
        assert_eq!(seen(u32::MAX), Seen::Gone);
        // The kernel's pid limit is at most 2^22: beyond it, no process.
        assert_eq!(seen(1 << 23), Seen::Gone);
    }

    #[test]
    fn this_process_lives_and_a_reused_pid_is_dead() {
        let me = Holder::this_process();
        assert!(me.start_time.is_some());
        assert!(!me.is_dead());
        let mut reused = me.clone();
        reused.start_time = me.start_time.map(|t| t + 1);
        assert!(reused.is_dead(), "same pid, another start time");
        let mut elsewhere = reused.clone();
        elsewhere.host = format!("{}-other", me.host);
        assert!(!elsewhere.is_dead(), "never presumed dead on another host");
    }
}
