//! Finding and ending escaped descendants.
//!
//! A process group does not hold everything a worker starts: `setsid`, double forks and `nohup`
//! leave it. Every spawned process carries `RUNNER_TOKEN` (unguessable, per run) and
//! `RUNNER_REPO` in its environment, and descendants inherit them; the census reads
//! `/proc/<pid>/environ` to find them. A tree counts as gone only after several quiet scans in a
//! row, and any unreadable scan resets the count. A scan normally reads only runner's own
//! children (see [`scan`]), a handful of small reads, on the event loop; a scan of every process
//! runs on the blocking pool.

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

/// The keys of the processes running now (a worker, gate or probe each), with how many of
/// each: an orphan runner adopts that carries no token of this run (its environment was
/// cleared) belongs to the only item running, when only one is.
static RUNNING: std::sync::Mutex<Vec<CensusKey>> = std::sync::Mutex::new(Vec::new());

/// While this lives, a process of `key` runs.
pub(crate) struct Running(CensusKey);

impl Running {
    pub fn new(key: &CensusKey) -> Running {
        RUNNING
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(key.clone());
        Running(key.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut running = RUNNING.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = running.iter().position(|k| *k == self.0) {
            running.swap_remove(i);
        }
    }
}

/// Whether `key`'s item is the only one with a process running.
fn only_running(key: &CensusKey) -> bool {
    let running = RUNNING.lock().unwrap_or_else(|p| p.into_inner());
    !running.is_empty() && running.iter().all(|k| k == key)
}

/// Quiet scans in a row before a tree counts as gone.
const QUIET_SCANS: u32 = 3;
/// Pause between scans.
const SCAN_GAP: Duration = Duration::from_millis(5);
/// Longest time spent ending escaped descendants.
const SWEEP_DEADLINE: Duration = Duration::from_secs(10);
/// The longest pause before looking again at a child that shows no environment yet.
const UNSURE_PAUSE_MAX: Duration = Duration::from_micros(3200);

pub(crate) fn signal_group(pgid: i32, sig: Signal) {
    let _ = killpg(Pid::from_raw(pgid), sig);
}

pub(crate) fn group_alive(pgid: i32) -> bool {
    killpg(Pid::from_raw(pgid), None).is_ok()
}

/// Reap zombies of group `pgid` that are runner's children (re-parented to it as subreaper).
pub(crate) fn reap_group(pgid: i32) {
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
pub(crate) static DIRECT_CHILDREN: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());

/// Direct children reaped while [`DIRECT_CHILDREN`] was held elsewhere (a helper being spawned
/// on the blocking pool): taken out of it by the next holder, so that the event loop never waits
/// for the lock.
static REAPED: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());

/// A direct child has been reaped: it is no longer one.
pub(crate) fn forget_direct(pid: i32) {
    match DIRECT_CHILDREN.try_lock() {
        Ok(mut d) => d.retain(|p| *p != pid),
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().retain(|p| *p != pid),
        Err(std::sync::TryLockError::WouldBlock) => {
            REAPED.lock().unwrap_or_else(|p| p.into_inner()).push(pid)
        }
    }
}

/// Take out of `direct` the children reaped while it was held elsewhere.
fn settle_reaped(direct: &mut Vec<i32>) {
    let mut reaped = REAPED.lock().unwrap_or_else(|p| p.into_inner());
    if !reaped.is_empty() {
        direct.retain(|p| !reaped.contains(p));
        reaped.clear();
    }
}

/// Hold [`DIRECT_CHILDREN`] (the spawn lock), up to date. Not on the event loop while another
/// thread may hold it for long (see [`scan_within`]).
pub(crate) fn lock_direct() -> std::sync::MutexGuard<'static, Vec<i32>> {
    let mut direct = DIRECT_CHILDREN.lock().unwrap_or_else(|p| p.into_inner());
    settle_reaped(&mut direct);
    direct
}

static SUBREAPER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Record that runner is a child subreaper: every orphan of a spawned tree is then re-parented
/// to runner, and a scan need only look at runner's own children.
pub(crate) fn set_subreaper(active: bool) {
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

/// One scan: the pids carrying `key`, and whether a dead orphan was reaped (a sign that
/// processes were moving during the scan), or `Err` when `/proc` could not be read.
///
/// As subreaper, runner adopts every orphan of a spawned tree, so the topmost live process of
/// any escaped subtree is a child of runner: a scan looks only at runner's children, as the
/// kernel lists them in `/proc/self/task/<tid>/children`. Without the subreaper role, or
/// without those lists, every process is examined.
pub fn scan(key: &CensusKey) -> std::io::Result<Scan> {
    scan_within(key, usize::MAX, true).unwrap_or_else(|| scan_all(key, true))
}

/// What one scan found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scan {
    /// Processes carrying the key.
    pub found: Vec<i32>,
    /// An orphan died while the scan ran: its children may have moved behind it.
    pub disturbed: bool,
    /// runner's own children that showed no environment yet (in the middle of `execve`).
    pub unsure: Vec<i32>,
}

impl Scan {
    fn look(&mut self, pid: i32, c: Carries) {
        match c {
            Carries::Yes => self.found.push(pid),
            Carries::No => {}
            Carries::Unsure => self.unsure.push(pid),
        }
    }
}

/// Most of runner's children a scan examines on the event loop itself; more (a worker that
/// left hundreds of processes behind) are examined on the blocking pool.
const INLINE_CHILDREN: usize = 64;

/// A scan of runner's children, unless there are more than `budget` of them, or runner is not
/// the subreaper, or the kernel does not list children (`None`: scan every process instead).
///
/// With `wait` false (on the event loop), a spawn lock held elsewhere (a git helper being started
/// on the blocking pool) is not waited for: `None`, and the caller scans on the blocking pool.
fn scan_within(key: &CensusKey, budget: usize, wait: bool) -> Option<std::io::Result<Scan>> {
    if !SUBREAPER.load(std::sync::atomic::Ordering::SeqCst) {
        return Some(scan_all(key, false));
    }
    // Held for the whole scan: a helper forked meanwhile is registered before it can be
    // listed, and no direct child is reaped behind the runtime's back.
    let direct = if wait {
        lock_direct()
    } else {
        let mut d = match DIRECT_CHILDREN.try_lock() {
            Ok(d) => d,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        settle_reaped(&mut d);
        d
    };
    let children = own_children()?;
    (children.len() <= budget).then(|| Ok(scan_children(key, children, &direct)))
}

/// Examine runner's children, except the direct children runner spawned itself (item leaders
/// and helpers it waits for: not escapees). A dead one is reaped.
///
/// Every other child is an orphan runner adopted from a tree it started. One carrying this
/// run's token belongs to the item its repository names; one carrying none (it cleared its
/// environment: `setsid env -i …`) belongs to `key`'s item when that is the only item with a
/// process running. Those it cannot place are ended when the run ends ([`end_adopted`]).
fn scan_children(key: &CensusKey, children: Vec<i32>, direct: &[i32]) -> Scan {
    let mut scan = Scan::default();
    let sole = only_running(key);
    for pid in children {
        if direct.contains(&pid) {
            continue;
        }
        if matches!(
            waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)),
            Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..))
        ) {
            scan.disturbed = true;
        } else {
            // An empty environment (cleared, or in the middle of `execve`) carries no token.
            let carries = match carries_key(pid, key, || true) {
                Carries::No | Carries::Unsure if sole && !carries_token(pid, &key.token) => {
                    Carries::Yes
                }
                c => c,
            };
            scan.look(pid, carries);
        }
    }
    scan
}

/// Reap the orphans runner adopted that have died, leaving its direct children to the runtime.
/// One `waitid` that only peeks answers the common case, nothing to reap; otherwise runner's
/// children are listed. Skipped when a spawn holds the lock (the next call, or the run's end,
/// collects them): this runs on the event loop and never waits for it.
pub(crate) fn reap_adopted() {
    use nix::sys::wait::{Id, waitid};
    if !SUBREAPER.load(std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    let peek = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    if matches!(waitid(Id::All, peek), Ok(WaitStatus::StillAlive) | Err(_)) {
        return;
    }
    let mut direct = match DIRECT_CHILDREN.try_lock() {
        Ok(d) => d,
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return,
    };
    settle_reaped(&mut direct);
    for pid in own_children().unwrap_or_default() {
        if !direct.contains(&pid) {
            reap(pid);
        }
    }
}

/// Whether `pid`'s environment carries run token `token` at all (for any repository).
fn carries_token(pid: i32, token: &str) -> bool {
    let needle = format!("RUNNER_TOKEN={token}");
    std::fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == needle.as_bytes()))
}

/// End every orphan runner adopted that is still alive, and reap it: what no item could claim
/// (it cleared its environment while several items ran) goes when the run ends. SIGTERM, up to
/// `grace` to go, then SIGKILL. Returns the pids that were found.
pub(crate) async fn end_adopted(grace: Duration) -> Vec<i32> {
    if !SUBREAPER.load(std::sync::atomic::Ordering::SeqCst) {
        return Vec::new();
    }
    let adopted = || -> Vec<i32> {
        let direct = lock_direct();
        own_children()
            .unwrap_or_default()
            .into_iter()
            .filter(|p| !direct.contains(p))
            .filter(|&p| {
                if matches!(
                    waitpid(Pid::from_raw(p), Some(WaitPidFlag::WNOHANG)),
                    Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..))
                ) {
                    return false;
                }
                true
            })
            .collect()
    };
    let first = tokio::task::spawn_blocking(adopted)
        .await
        .unwrap_or_default();
    if first.is_empty() {
        return first;
    }
    tracing::info!(pids = ?first, "ending processes the run adopted and no item claimed");
    for &pid in &first {
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    }
    let until = Instant::now() + grace + SWEEP_DEADLINE;
    let kill_at = Instant::now() + grace;
    while Instant::now() < until {
        tokio::time::sleep(SCAN_GAP * 4).await;
        let left = tokio::task::spawn_blocking(adopted)
            .await
            .unwrap_or_default();
        if left.is_empty() {
            break;
        }
        if Instant::now() >= kill_at {
            for pid in left {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
    }
    first
}

/// Examine every process; as subreaper, reap the dead orphans runner adopted.
fn scan_all(key: &CensusKey, adopting: bool) -> std::io::Result<Scan> {
    let me = std::process::id() as i32;
    let mut scan = Scan::default();
    for pid in proc_pids()? {
        if pid == me {
            continue;
        }
        if adopting && stat(pid) == Some((me, 'Z')) && !lock_direct().contains(&pid) {
            reap(pid);
            scan.disturbed = true;
        } else {
            let ours = || stat(pid).is_some_and(|(ppid, _)| ppid == me);
            scan.look(pid, carries_key(pid, key, ours));
        }
    }
    Ok(scan)
}

/// What one look at a process's environment tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Carries {
    Yes,
    No,
    /// One of runner's own children shows no environment yet: look again shortly.
    Unsure,
}

/// What reading a live process's environment gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Environ {
    /// Whether it carries the key.
    Read(bool),
    /// It shows none (cleared, or in the middle of `execve`).
    Empty,
    /// It is there but its environment cannot be read (a process that made itself
    /// non-dumpable, or changed its credentials): absence of evidence, never "not ours".
    Unreadable,
}

/// Whether `pid`'s environment carries the run token and repository of `key`. A process gone
/// meanwhile, a zombie and a kernel thread carry nothing.
///
/// A process shows no environment at all for an instant in the middle of `execve` (the kernel
/// lets a `vfork` parent go before it has laid out the new environment: measured here, 5% of
/// reads made right after a spawn returned came back empty, for up to 5 ms). So when one of
/// runner's own children (`ours`) shows none, the answer is [`Carries::Unsure`], and the sweep
/// looks again after a timer (never a sleep on the loop) before it counts as carrying nothing.
///
/// One of runner's own children whose environment cannot be read at all (it made itself
/// non-dumpable) came from one of runner's items: it counts as carrying the key (fail closed:
/// an unproven stranger is ended, never left holding the repository). Any other process whose
/// environment cannot be read is not runner's to end.
fn carries_key(pid: i32, key: &CensusKey, ours: impl Fn() -> bool) -> Carries {
    let env = environ_carries(pid, key);
    let ours = matches!(env, Environ::Empty | Environ::Unreadable) && ours();
    judge(env, ours)
}

/// [`carries_key`]'s decision from what the read gave and whether the process is one of
/// runner's own children.
fn judge(env: Environ, ours: bool) -> Carries {
    match env {
        Environ::Read(true) => Carries::Yes,
        Environ::Read(false) => Carries::No,
        Environ::Empty if ours => Carries::Unsure,
        Environ::Empty => Carries::No,
        Environ::Unreadable if ours => Carries::Yes,
        Environ::Unreadable => Carries::No,
    }
}

/// [`carries_key`] from one read. A process gone meanwhile carries nothing.
fn environ_carries(pid: i32, key: &CensusKey) -> Environ {
    let environ = match std::fs::read(format!("/proc/{pid}/environ")) {
        Ok(e) => e,
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                || e.raw_os_error() == Some(libc::ESRCH) =>
        {
            return Environ::Read(false);
        }
        Err(_) => return Environ::Unreadable,
    };
    if environ.is_empty() {
        return Environ::Empty;
    }
    let (mut token, mut repo) = (false, false);
    for var in environ.split(|b| *b == 0) {
        if let Some(v) = var.strip_prefix(b"RUNNER_TOKEN=") {
            token |= v == key.token.as_bytes();
        } else if let Some(v) = var.strip_prefix(b"RUNNER_REPO=") {
            repo |= v == key.repo.as_bytes();
        }
    }
    Environ::Read(token && repo)
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

/// Whether a scan reads only runner's children (subreaper, and a kernel that lists children),
/// a handful of small reads, rather than every process.
fn small_scans() -> bool {
    static LISTS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    SUBREAPER.load(std::sync::atomic::Ordering::SeqCst)
        && *LISTS.get_or_init(|| {
            std::fs::metadata(format!("/proc/self/task/{}/children", std::process::id())).is_ok()
        })
}

/// runner's children, from every thread's `children` list (an orphan is adopted by one of
/// runner's threads), or `None` when the kernel does not provide the lists.
fn own_children() -> Option<Vec<i32>> {
    let mut pids = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let mut path = task.ok()?.path();
        path.push("children");
        // A thread that ended since the listing has no children left to list.
        let Ok(list) = std::fs::read_to_string(&path) else {
            if path.parent().is_some_and(|t| t.exists()) {
                return None;
            }
            continue;
        };
        pids.extend(
            list.split_ascii_whitespace()
                .filter_map(|p| p.parse::<i32>().ok()),
        );
    }
    Some(pids)
}

/// What a dead run left behind in repository `repo`, with command lines, for `status` and
/// `unlock` to name: the processes whose environment carries its token `token` and the
/// repository's name (each under its own repository's lease, once), and those in its item
/// cgroups `cgroups` (as its lease record names them). A process that may be one of them but cannot be
/// read (its environment, the cgroup's members) is named too, as such: it is never taken for
/// gone. `since` is when the dead run started (clock ticks since boot), when known.
pub(crate) fn survivors(
    token: &str,
    repo: &str,
    cgroups: &[std::path::PathBuf],
    since: Option<u64>,
) -> Vec<(i32, String)> {
    let (token_var, repo_var) = (
        format!("RUNNER_TOKEN={token}"),
        format!("RUNNER_REPO={repo}"),
    );
    let mut unknown = Vec::new();
    let mut pids = Vec::new();
    if !token.is_empty() {
        match pids_carrying(&[&token_var, &repo_var], since) {
            Ok(c) => {
                pids = c.found;
                unknown = c.unreadable;
            }
            Err(e) => tracing::warn!("the processes cannot be listed: {e}"),
        }
    }
    if let Some(unified) = cgroups.first() {
        match super::cgroup::members(unified) {
            Ok(m) => pids.extend(m),
            Err(e) => tracing::warn!("{e}"),
        }
    }
    pids.sort_unstable();
    pids.dedup();
    unknown.retain(|p| !pids.contains(p));
    let command = |pid: i32| {
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        String::from_utf8_lossy(&cmd)
            .replace('\0', " ")
            .trim_end()
            .to_string()
    };
    pids.into_iter()
        .map(|pid| (pid, command(pid)))
        .chain(unknown.into_iter().map(|pid| {
            let cmd = command(pid);
            (
                pid,
                format!("{cmd} (its environment cannot be read: it may be the run's)"),
            )
        }))
        .collect()
}

/// End every process whose environment carries run token `token`, wherever it is (what a dead
/// run left behind): SIGTERM, up to `grace` to go, then SIGKILL, until scans find none.
/// Returns the pids that were found, or `Err` with those still there at the deadline — and with
/// those that may carry it but cannot be read, which are never signalled nor taken for gone.
/// `since` is when the dead run started (clock ticks since boot), when known.
pub(crate) async fn end_token(
    token: &str,
    grace: Duration,
    since: Option<u64>,
) -> Result<Vec<i32>, Vec<i32>> {
    let needle = format!("RUNNER_TOKEN={token}").into_bytes();
    let scan = move || {
        let n = needle.clone();
        async move {
            tokio::task::spawn_blocking(move || pids_where(|v| v == n.as_slice(), since))
                .await
                .ok()
                .and_then(Result::ok)
        }
    };
    // A clean scan ends the search: proven gone, unless some could not be read.
    let proven = |c: EnvCensus, found: Vec<i32>| {
        if c.unreadable.is_empty() {
            Ok(found)
        } else {
            tracing::warn!(pids = ?c.unreadable, "processes that may carry a dead run's token cannot be read: they are not taken for gone");
            Err(c.unreadable)
        }
    };
    let Some(first) = scan().await else {
        return Err(Vec::new());
    };
    if first.found.is_empty() {
        return proven(first, Vec::new());
    }
    let found = first.found.clone();
    for &pid in &found {
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    }
    let until = Instant::now() + grace;
    while Instant::now() < until {
        tokio::time::sleep(SCAN_GAP * 4).await;
        if let Some(c) = scan().await
            && c.found.is_empty()
        {
            return proven(c, found);
        }
    }
    let deadline = Instant::now() + SWEEP_DEADLINE;
    let mut quiet = 0;
    while Instant::now() < deadline {
        match scan().await {
            Some(c) if c.found.is_empty() => {
                quiet += 1;
                if quiet >= QUIET_SCANS {
                    return proven(c, found);
                }
            }
            Some(c) => {
                quiet = 0;
                for pid in c.found {
                    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
                }
            }
            None => quiet = 0,
        }
        tokio::time::sleep(SCAN_GAP).await;
    }
    Err(scan()
        .await
        .map(|c| c.found.into_iter().chain(c.unreadable).collect())
        .unwrap_or_default())
}

/// Every process (but runner itself) whose environment carries each of `vars` (`NAME=value`).
pub(crate) fn pids_carrying(vars: &[&str], since: Option<u64>) -> std::io::Result<EnvCensus> {
    pids_whose_env(
        |env| {
            vars.iter()
                .all(|v| env.split(|b| *b == 0).any(|e| e == v.as_bytes()))
        },
        since,
    )
}

/// Every process (but runner itself) with an environment variable for which `matches` holds,
/// looked up in `/proc/<pid>/environ`.
pub(crate) fn pids_where(
    matches: impl Fn(&[u8]) -> bool,
    since: Option<u64>,
) -> std::io::Result<EnvCensus> {
    pids_whose_env(|env| env.split(|b| *b == 0).any(&matches), since)
}

/// A census by environment: the processes found, and those that may match but whose
/// environment cannot be read.
#[derive(Debug, Default)]
pub(crate) struct EnvCensus {
    pub found: Vec<i32>,
    /// Processes of runner's own user (any, when runner is root) started at or after the time
    /// asked about, whose environment cannot be read (a program that made itself
    /// non-dumpable, or one runner may not trace): whether they match is unknown. Another
    /// user's process is not counted: it cannot carry runner's variables but through a setuid
    /// program, which does not leave its environment readable to runner anyway.
    pub unreadable: Vec<i32>,
}

/// Every process (but runner itself) whose whole environment (`/proc/<pid>/environ`, its
/// variables NUL-separated) satisfies `matches`; and those that started at or after `since`
/// (clock ticks since boot; any time when `None`) whose environment cannot be read.
fn pids_whose_env(
    matches: impl Fn(&[u8]) -> bool,
    since: Option<u64>,
) -> std::io::Result<EnvCensus> {
    let me = std::process::id() as i32;
    let my_uid = nix::unistd::getuid();
    // runner's ancestors (init among them) started before it: none is what a run left.
    let ancestors = ancestors();
    let mut census = EnvCensus::default();
    for pid in proc_pids()? {
        if pid == me {
            continue;
        }
        match std::fs::read(format!("/proc/{pid}/environ")) {
            Ok(env) => {
                if matches(&env) {
                    census.found.push(pid);
                }
            }
            // Gone meanwhile.
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    || e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(_) => {
                let ours = my_uid.is_root() || uid_of(pid).is_none_or(|u| u == my_uid.as_raw());
                let recent = match crate::support::host::seen(pid as u32) {
                    crate::support::host::Seen::Gone => false,
                    crate::support::host::Seen::Started(t) => since.is_none_or(|s| t >= s),
                    crate::support::host::Seen::Unknown(_) => true,
                };
                if ours && recent && !ancestors.contains(&pid) {
                    census.unreadable.push(pid);
                }
            }
        }
    }
    Ok(census)
}

/// The pids of runner's ancestors, its parent's up to init (1).
fn ancestors() -> Vec<i32> {
    let parent_of = |pid: i32| -> Option<i32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    let mut out = vec![1];
    let mut pid = std::process::id() as i32;
    // Bounded: a chain is never longer than the pids there are.
    for _ in 0..4096 {
        match parent_of(pid) {
            Some(p) if p > 1 && !out.contains(&p) => {
                out.push(p);
                pid = p;
            }
            _ => break,
        }
    }
    out
}

/// The real user id of `pid`, from `/proc/<pid>/status`.
fn uid_of(pid: i32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Kill every process carrying `key` until enough scans in a row find none. Returns whether
/// that was reached before the deadline.
///
/// `settled` says the process group was already empty when its leader exited: then every
/// descendant still alive had been re-parented to runner (as subreaper) before the scan began,
/// and one clean scan suffices — unless it saw an orphan die while it ran (whose children may
/// have moved behind it), which calls for more. Otherwise processes may still be moving, and
/// several quiet scans, spaced out, are needed; an unreadable scan resets the count.
pub(crate) async fn sweep(key: CensusKey, settled: bool) -> bool {
    let until = Instant::now() + SWEEP_DEADLINE;
    let fast = settled && SUBREAPER.load(std::sync::atomic::Ordering::SeqCst);
    let mut quiet = 0;
    let mut needed = if fast { 1 } else { QUIET_SCANS };
    // Looks again at children caught in the middle of `execve`: 0.1 ms, doubling, about 6 ms in
    // all, after which an empty environment counts as carrying nothing.
    let mut unsure_pause = Duration::from_micros(100);
    while Instant::now() < until {
        // A large scan (every process of a busy machine, or hundreds of escapees) takes a
        // while: not on the event loop.
        let inline = if small_scans() {
            scan_within(&key, INLINE_CHILDREN, false)
        } else {
            None
        };
        let scanned = match inline {
            Some(r) => r,
            None => {
                let k = key.clone();
                tokio::task::spawn_blocking(move || scan(&k))
                    .await
                    .unwrap_or_else(|e| Err(std::io::Error::other(e)))
            }
        };
        if let Ok(scan) = &scanned
            && scan.found.is_empty()
            && !scan.unsure.is_empty()
            && unsure_pause <= UNSURE_PAUSE_MAX
        {
            tokio::time::sleep(unsure_pause).await;
            unsure_pause *= 2;
            continue;
        }
        match scanned {
            Ok(Scan {
                found: pids,
                disturbed,
                ..
            }) if pids.is_empty() => {
                if disturbed {
                    needed = QUIET_SCANS;
                    quiet = 0;
                } else {
                    quiet += 1;
                }
                if quiet >= needed {
                    tracing::trace!(repo = %key.repo, quiet, "census: tree proven gone");
                    return true;
                }
            }
            Ok(Scan { found: pids, .. }) => {
                tracing::debug!(?pids, repo = %key.repo, "census: ending escaped processes");
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
    tracing::debug!(repo = %key.repo, "census: tree not proven gone before the deadline");
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    /// A `sleep` carrying `key`, registered as a direct child so that the censuses of other
    /// tests in this process leave it alone.
    fn sleeper(key: &CensusKey) -> std::process::Child {
        let mut direct = DIRECT_CHILDREN.lock().unwrap();
        let child = Command::new("sleep")
            .arg("30")
            .env("RUNNER_TOKEN", &key.token)
            .env("RUNNER_REPO", &key.repo)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        direct.push(child.id() as i32);
        child
    }

    fn unregister(pid: i32) {
        DIRECT_CHILDREN.lock().unwrap().retain(|p| *p != pid);
    }

    /// A key of this test process: a `sleep` left by an earlier run that failed halfway does
    /// not carry it.
    fn key(repo: &str) -> CensusKey {
        CensusKey {
            token: format!("census-test-{}", std::process::id()),
            repo: repo.into(),
        }
    }

    #[test]
    fn a_child_is_listed_and_found_by_both_kinds_of_scan() {
        let (mine, other) = (key("census-a"), key("census-b"));
        let mut a = sleeper(&mine);
        let mut b = sleeper(&other);
        let (pid, other_pid) = (a.id() as i32, b.id() as i32);
        // Only these two: the other children of this process belong to other tests.
        let children: Vec<i32> = own_children()
            .expect("the kernel lists children")
            .into_iter()
            .filter(|p| [pid, other_pid].contains(p))
            .collect();
        assert_eq!(children.len(), 2, "both children are listed");
        assert_eq!(
            settled_scan(|| scan_children(&mine, children.clone(), &[])),
            vec![pid]
        );
        assert_eq!(
            settled_scan(|| scan_children(&mine, children.clone(), &[pid])),
            Vec::<i32>::new()
        );
        let found = settled_scan(|| scan_all(&mine, false).unwrap());
        let described: Vec<String> = found
            .iter()
            .map(|p| {
                let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
                format!("{p} {:?} {:?}", String::from_utf8_lossy(&cmd), stat(*p))
            })
            .collect();
        assert_eq!(
            found,
            vec![pid],
            "a scan of every process found {described:?}"
        );
        for c in [&mut a, &mut b] {
            c.kill().unwrap();
            c.wait().unwrap();
            unregister(c.id() as i32);
        }
        assert!(scan_all(&mine, false).unwrap().found.is_empty());
    }

    /// What a scan finds once no child is caught in the middle of `execve` any more (as the
    /// sweep looks again after a timer).
    fn settled_scan(scan: impl Fn() -> Scan) -> Vec<i32> {
        for _ in 0..100 {
            let s = scan();
            if s.unsure.is_empty() {
                return s.found;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        panic!("a child showed no environment for 100 looks")
    }

    /// Right after a spawn returns, a child's environment can still be missing (the kernel
    /// releases the parent before it lays out the new one): a scan waits for it.
    #[test]
    fn a_child_in_the_middle_of_execve_is_still_found() {
        let k = key("census-d");
        for _ in 0..200 {
            let mut c = sleeper(&k);
            let pid = c.id() as i32;
            let found = settled_scan(|| scan_children(&k, vec![pid], &[]));
            c.kill().unwrap();
            c.wait().unwrap();
            unregister(pid);
            assert_eq!(found, vec![pid]);
        }
    }

    #[test]
    fn an_unreadable_environment_of_runners_own_child_counts_as_the_items() {
        assert_eq!(judge(Environ::Unreadable, true), Carries::Yes);
        assert_eq!(judge(Environ::Unreadable, false), Carries::No);
        assert_eq!(judge(Environ::Empty, true), Carries::Unsure);
        assert_eq!(judge(Environ::Read(false), true), Carries::No);
        // A process gone meanwhile carries nothing.
        let key = CensusKey {
            token: "t".into(),
            repo: "r".into(),
        };
        assert_eq!(environ_carries(i32::MAX, &key), Environ::Read(false));
    }

    #[test]
    fn a_child_without_any_environment_carries_nothing() {
        let k = key("census-e");
        let mut c = {
            let mut direct = DIRECT_CHILDREN.lock().unwrap();
            let c = Command::new("/bin/sleep")
                .arg("30")
                .env_clear()
                .stdin(Stdio::null())
                .spawn()
                .unwrap();
            direct.push(c.id() as i32);
            c
        };
        let pid = c.id() as i32;
        // Wait until it has reached `sleep` (its command line is laid out with its environment).
        while !std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| c.starts_with(b"/bin/sleep"))
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(
            carries_key(pid, &k, || true),
            Carries::Unsure,
            "one of runner's own: looked at again"
        );
        assert_eq!(
            carries_key(pid, &k, || false),
            Carries::No,
            "anyone else's: nothing"
        );
        c.kill().unwrap();
        c.wait().unwrap();
        unregister(pid);
    }

    #[test]
    #[expect(
        clippy::zombie_processes,
        reason = "the scan under test is what reaps it"
    )]
    fn a_dead_child_that_is_not_a_direct_one_is_reaped() {
        let k = key("census-c");
        let mut c = sleeper(&k);
        let pid = c.id() as i32;
        c.kill().unwrap();
        // Wait until it is a zombie, without reaping it.
        while stat(pid).is_some_and(|(_, s)| s != 'Z') {
            std::thread::sleep(Duration::from_millis(5));
        }
        let scan = scan_children(&k, vec![pid], &[]);
        unregister(pid);
        assert!(scan.found.is_empty());
        assert!(scan.disturbed);
        assert!(stat(pid).is_none(), "reaped");
    }
}
