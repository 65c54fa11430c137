//! Finding and ending escaped descendants.
//!
//! A process group does not hold everything a worker starts: `setsid`, double forks and `nohup`
//! leave it. Every spawned process carries `RUNNER_TOKEN` (unguessable, per run) and
//! `RUNNER_REPO` in its environment, and descendants inherit them; the census reads
//! `/proc/<pid>/environ` to find them. A tree counts as gone only after several quiet scans in a
//! row, and any unreadable scan resets the count. Scans run on the blocking pool, never on the
//! event loop.

use nix::sys::signal::{Signal, kill, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use std::time::{Duration, Instant};

/// Identifies the processes of one item: the run's token and the repository (one item per
/// repository runs at a time).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CensusKey {
    pub token: String,
    pub repo: String,
}

/// Quiet scans in a row before a tree counts as gone.
const QUIET_SCANS: u32 = 3;
/// Pause between scans.
const SCAN_GAP: Duration = Duration::from_millis(5);
/// Longest time spent ending escaped descendants.
const SWEEP_DEADLINE: Duration = Duration::from_secs(10);

pub fn signal_group(pgid: i32, sig: Signal) {
    let _ = killpg(Pid::from_raw(pgid), sig);
}

pub fn group_alive(pgid: i32) -> bool {
    killpg(Pid::from_raw(pgid), None).is_ok()
}

/// Reap zombies of group `pgid` that are runner's children (re-parented to it as subreaper).
pub fn reap_group(pgid: i32) {
    loop {
        match waitpid(Pid::from_raw(-pgid), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(_) => break,
            Ok(_) => continue,
        }
    }
}

fn reap(pid: i32) {
    let _ = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG));
}

/// Pids of the direct children runner spawned and has not yet reaped itself (the async runtime
/// reaps them). A scan must never reap one of those: the runtime would lose its exit status.
/// Every spawn holds this lock from `spawn` until the pid is recorded, and a scan holds it while
/// it reaps, so a child can never be reaped in between. It doubles as the spawn lock: no two
/// children are forked at once, so a descriptor made inheritable for one child reaches no other.
pub static DIRECT_CHILDREN: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());

static SUBREAPER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Highest pid allocated when last looked (`/proc/sys/kernel/ns_last_pid`), or -1 before the
/// first look.
static LAST_PID: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(-1);
/// Whether pid numbers may have wrapped around since runner started (or cannot be watched).
static PIDS_WRAPPED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// Below this `pid_max`, a wrap between two looks is too easy to miss; scans stay full.
const MIN_PID_MAX: i64 = 32_768;

/// Watch the kernel's pid counter. Until pids wrap around, every descendant of runner has a
/// larger pid than runner itself, so a scan can skip the smaller ones without reading them.
/// Called at every spawn, every scan and once a second while a run is under way; a wrap of the
/// whole pid space between two looks would take tens of thousands of forks in a second. Any
/// doubt (unreadable counter, small `pid_max`, a counter that went backwards) turns the
/// shortcut off for the rest of the process's life.
pub fn observe_pid_clock() {
    use std::sync::atomic::Ordering::SeqCst;
    if PIDS_WRAPPED.load(SeqCst) {
        return;
    }
    static PID_MAX: std::sync::OnceLock<Option<i64>> = std::sync::OnceLock::new();
    let read = |p: &str| -> Option<i64> { std::fs::read_to_string(p).ok()?.trim().parse().ok() };
    let (Some(now), Some(max)) = (
        read("/proc/sys/kernel/ns_last_pid"),
        *PID_MAX.get_or_init(|| read("/proc/sys/kernel/pid_max")),
    ) else {
        PIDS_WRAPPED.store(true, SeqCst);
        return;
    };
    let before = LAST_PID.swap(now, SeqCst);
    if max < MIN_PID_MAX
        || (before >= 0 && now < before)
        || (before < 0 && now < std::process::id() as i64)
    {
        PIDS_WRAPPED.store(true, SeqCst);
    }
}

/// Record that runner is a child subreaper: every orphan of a spawned tree is then re-parented
/// to runner, and a scan need only look at runner's own children.
pub fn set_subreaper(active: bool) {
    SUBREAPER.store(active, std::sync::atomic::Ordering::SeqCst);
}

/// Parent pid and state letter from `/proc/<pid>/stat`.
fn stat(pid: i32) -> Option<(i32, char)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = s.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((ppid, state))
}

/// One scan: the pids carrying `key`, and whether a dead orphan was seen (a sign that processes
/// were moving during the scan), or `Err` when `/proc` could not be read.
pub fn scan(key: &CensusKey) -> std::io::Result<(Vec<i32>, bool)> {
    scan_bounded(key, usize::MAX).map(|r| r.unwrap_or_default())
}

/// Most processes a scan examines on the event loop itself; a larger scan (a busy machine, or
/// pids that wrapped around) goes to the blocking pool. Small scans stay inline because handing
/// them to another thread costs more than the scan.
const INLINE_BUDGET: usize = 64;

/// A scan that gives up (`Ok(None)`) when it would have to examine more than `budget`
/// processes.
fn scan_bounded(key: &CensusKey, budget: usize) -> std::io::Result<Option<(Vec<i32>, bool)>> {
    let me = std::process::id() as i32;
    let only_children = SUBREAPER.load(std::sync::atomic::Ordering::SeqCst);
    observe_pid_clock();
    // Descendants of runner have larger pids than runner until pids wrap around.
    let floor = if only_children && !PIDS_WRAPPED.load(std::sync::atomic::Ordering::SeqCst) {
        me
    } else {
        0
    };
    let token = format!("RUNNER_TOKEN={}", key.token);
    let repo = format!("RUNNER_REPO={}", key.repo);
    let mut found = Vec::new();
    let mut disturbed = false;
    let mut examined = 0usize;
    for pid in proc_pids()? {
        if pid <= floor || pid == me {
            continue;
        }
        examined += 1;
        if examined > budget {
            return Ok(None);
        }
        let Some((ppid, state)) = stat(pid) else {
            continue;
        };
        if only_children && ppid != me {
            continue;
        }
        if state == 'Z' {
            // A dead orphan of some tree, re-parented to runner: reap it, unless it is a direct
            // child whose status the runtime is about to collect.
            if ppid == me
                && let Ok(direct) = DIRECT_CHILDREN.lock()
                && !direct.contains(&pid)
            {
                reap(pid);
                disturbed = true;
            }
            continue;
        }
        // Gone between listing and reading, or a kernel thread: nothing to end.
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let mut has_token = false;
        let mut has_repo = false;
        for var in environ.split(|b| *b == 0) {
            if var == token.as_bytes() {
                has_token = true;
            } else if var == repo.as_bytes() {
                has_repo = true;
            }
        }
        if has_token && has_repo {
            found.push(pid);
        }
    }
    Ok(Some((found, disturbed)))
}

/// The pids listed in `/proc`.
fn proc_pids() -> std::io::Result<impl Iterator<Item = i32>> {
    Ok(std::fs::read_dir("/proc")?.filter_map(|entry| {
        entry
            .ok()?
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
    }))
}

/// Every process (but runner itself) with an environment variable for which `matches` holds,
/// looked up in `/proc/<pid>/environ`.
pub fn pids_where(matches: impl Fn(&[u8]) -> bool) -> std::io::Result<Vec<i32>> {
    let me = std::process::id() as i32;
    let mut found = Vec::new();
    for pid in proc_pids()? {
        if pid == me {
            continue;
        }
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if env.split(|b| *b == 0).any(&matches) {
            found.push(pid);
        }
    }
    Ok(found)
}

/// Kill every process carrying `key` until enough scans in a row find none. Returns whether
/// that was reached before the deadline.
///
/// `settled` says the process group was already empty when its leader exited: then every
/// descendant still alive had been re-parented to runner (as subreaper) before the scan began,
/// and one clean scan suffices — unless it saw an orphan die while it ran (whose children may
/// have moved behind it), which calls for more. Otherwise processes may still be moving, and
/// several quiet scans, spaced out, are needed; an unreadable scan resets the count.
pub async fn sweep(key: CensusKey, settled: bool) -> bool {
    let until = Instant::now() + SWEEP_DEADLINE;
    let fast = settled && SUBREAPER.load(std::sync::atomic::Ordering::SeqCst);
    let mut quiet = 0;
    let mut needed = if fast { 1 } else { QUIET_SCANS };
    while Instant::now() < until {
        let scanned = match scan_bounded(&key, INLINE_BUDGET) {
            Ok(Some(r)) => Ok(Ok(r)),
            _ => {
                let k = key.clone();
                tokio::task::spawn_blocking(move || scan(&k))
                    .await
                    .map_err(std::io::Error::other)
            }
        };
        match scanned {
            Ok(Ok((pids, disturbed))) if pids.is_empty() => {
                if disturbed {
                    needed = QUIET_SCANS;
                    quiet = 0;
                } else {
                    quiet += 1;
                }
                if quiet >= needed {
                    return true;
                }
            }
            Ok(Ok((pids, _))) => {
                needed = QUIET_SCANS;
                quiet = 0;
                for pid in pids {
                    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
                    reap(pid);
                }
            }
            _ => {
                needed = QUIET_SCANS;
                quiet = 0;
            }
        }
        if needed > 1 {
            tokio::time::sleep(SCAN_GAP).await;
        }
    }
    false
}
