//! The repository lease: at most one `runner` works in a repository at a time.
//!
//! The lease lives in the git common dir (`git rev-parse --git-common-dir`), so every worktree of
//! one clone shares it. It is an OS file lock (`flock` on `runner.lock`) plus a record of its
//! holder (host, pid, process start time, run id) in `runner.lease.json`, written atomically.
//! The lock is what excludes; the record is what `status` and `unlock` show, and once the lease
//! is released it names the last holder. The lock's descriptor is handed to every process
//! spawned for the item, so the lock stays held for as long as any descendant keeps it open —
//! even if runner itself is killed.

use crate::support::fs::{open_regular, read_regular, write_atomic};
use crate::support::host::Holder;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

pub(crate) const LOCK_FILE: &str = "runner.lock";
pub(crate) const RECORD_FILE: &str = "runner.lease.json";
/// A repository's quarantine: kept with the repository, so every manifest and every ledger sees
/// it, and lifted (not deleted) by `runner unlock`, which records who, when and why.
pub(crate) const QUARANTINE_FILE: &str = "runner.quarantine.json";
/// The latest watch kept over the repository's quarantine ([`Watch`]): a file of its own, so a
/// run recording one never races an operator's lift of the quarantine.
pub(crate) const WATCH_FILE: &str = "runner.quarantine-watch.json";

/// A repository's quarantine record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quarantine {
    pub run_id: String,
    pub reason: String,
    pub at: String,
    /// Set once an operator lifted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifted: Option<Lifted>,
}

/// A watch kept over a quarantine: a later run looked for what the quarantined item left (the
/// processes keeping its lease's lock, in its cgroups, or carrying its run's token and its
/// repository's name), ended those it could, and names those still there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Watch {
    /// The run that kept it.
    pub run_id: String,
    pub at: String,
    /// The processes it found and ended.
    #[serde(default)]
    pub ended: Vec<i32>,
    /// Those still there when it gave up (pid and command line).
    #[serde(default)]
    pub left: Vec<(i32, String)>,
}

impl Watch {
    /// Record the watch kept over the quarantine of the repository whose git common dir is
    /// `common_dir`.
    pub fn record(&self, common_dir: &Path) -> std::io::Result<()> {
        let bytes = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        write_atomic(&common_dir.join(WATCH_FILE), &bytes)
    }

    /// The latest watch kept over quarantine `q` of the repository, if any was since it began.
    pub fn latest(common_dir: &Path, q: &Quarantine) -> Option<Watch> {
        let bytes = read_regular(&common_dir.join(WATCH_FILE), Some(1 << 20)).ok()?;
        let w: Watch = serde_json::from_slice(&bytes).ok()?;
        (w.at >= q.at).then_some(w)
    }

    /// What it found, for `status`: `run R at T: ended 2 process(es) (pids 1, 2); none left`.
    pub fn describe(&self) -> String {
        let pids = |p: &mut dyn Iterator<Item = i32>| {
            p.map(|p| p.to_string()).collect::<Vec<_>>().join(", ")
        };
        let left = || {
            self.left
                .iter()
                .map(|(pid, cmd)| format!("{pid} `{cmd}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let found = match (self.ended.is_empty(), self.left.is_empty()) {
            (true, true) => "nothing of its item is running".to_string(),
            (true, false) => format!(
                "{} process(es) of its item could not be ended: {}",
                self.left.len(),
                left()
            ),
            (false, true) => format!(
                "ended {} process(es) its item had left (pids {}); none is left",
                self.ended.len(),
                pids(&mut self.ended.iter().copied())
            ),
            (false, false) => format!(
                "ended {} process(es) its item had left (pids {}); {} could not be: {}",
                self.ended.len(),
                pids(&mut self.ended.iter().copied()),
                self.left.len(),
                left()
            ),
        };
        format!("run {} at {}: {found}", self.run_id, self.at)
    }
}

/// Who lifted a quarantine, when and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lifted {
    pub by: String,
    pub at: String,
    pub why: Option<String>,
}

/// Quarantine the repository whose git common dir is `common_dir`.
pub fn quarantine(common_dir: &Path, q: &Quarantine) -> std::io::Result<()> {
    let bytes = serde_json::to_vec_pretty(q).map_err(std::io::Error::other)?;
    write_atomic(&common_dir.join(QUARANTINE_FILE), &bytes)
}

/// The quarantine in force on the repository, if any (a lifted one is not).
///
/// A record that is there but cannot be read or understood (not a regular file, truncated, not
/// JSON) keeps the repository quarantined, naming the record: only its absence or a lift by
/// `runner unlock` (which writes a whole record) frees the repository.
pub fn quarantined(common_dir: &Path) -> Option<Quarantine> {
    let path = common_dir.join(QUARANTINE_FILE);
    let unreadable = |why: String| Quarantine {
        run_id: "unknown".into(),
        reason: format!(
            "its quarantine record `{}` cannot be read ({why}); `runner unlock` lifts it",
            path.display()
        ),
        at: String::new(),
        lifted: None,
    };
    let bytes = match read_regular(&path, Some(1 << 20)) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => return Some(unreadable(e.to_string())),
    };
    match serde_json::from_slice::<Quarantine>(&bytes) {
        Ok(q) => q.lifted.is_none().then_some(q),
        Err(e) => Some(unreadable(e.to_string())),
    }
}

/// Lift the repository's quarantine, recording who, when and why; `Ok(false)` when none was in
/// force.
pub(crate) fn lift(common_dir: &Path, lifted: Lifted) -> std::io::Result<bool> {
    let Some(mut q) = quarantined(common_dir) else {
        return Ok(false);
    };
    q.lifted = Some(lifted);
    quarantine(common_dir, &q)?;
    Ok(true)
}

/// What a lease's record says: the process that holds (or last held) it, its run and the
/// repository.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Record {
    #[serde(flatten)]
    pub holder: Holder,
    pub run_id: String,
    pub repo: String,
    /// The run's token, in the environment of every process it started: how the next run finds
    /// them if this one dies.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub token: String,
    /// The item's cgroups, when the run contains items in cgroups (the unified one first):
    /// whatever a dead holder left is in them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cgroups: Vec<std::path::PathBuf>,
}

impl Record {
    pub fn this_process(run_id: &str, repo: &str, token: &str) -> Self {
        Record {
            holder: Holder::this_process(),
            run_id: run_id.to_string(),
            repo: repo.to_string(),
            token: token.to_string(),
            cgroups: Vec::new(),
        }
    }

    /// The same record, naming the item's cgroups.
    pub(crate) fn in_cgroups(mut self, dirs: Vec<std::path::PathBuf>) -> Self {
        self.cgroups = dirs;
        self
    }
}

impl std::fmt::Display for Record {
    /// "run `ID` (pid N on HOST)"
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "run `{}` (pid {} on {})",
            self.run_id, self.holder.pid, self.holder.host
        )
    }
}

/// A held lease. [`Lease::release`] releases the lock; dropping the lease releases it once no
/// descendant holds the descriptor.
#[derive(Debug)]
pub(crate) struct Lease {
    file: File,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum LeaseError {
    #[error("cannot open the lease in `{path}`: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The holder's record could not be written: without it, a run that dies while holding the
    /// lease leaves nothing the next run can find its processes by, so the lease is let go.
    #[error("cannot write the lease's record `{path}`: {source}")]
    Record {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl Lease {
    /// Take the lease of the repository whose git common dir is `common_dir`, or `None` when
    /// another process holds it.
    pub(crate) fn try_acquire(
        common_dir: &Path,
        holder: Record,
    ) -> Result<Option<Lease>, LeaseError> {
        let path = common_dir.join(LOCK_FILE);
        let io = |source| LeaseError::Io {
            path: path.display().to_string(),
            source,
        };
        let file = open_regular(
            &path,
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true),
        )
        .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                tracing::debug!(lock = %path.display(), "lease held by another process");
                return Ok(None);
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
        }
        // The record is how the next run finds what this one started should it die: a lease
        // whose record cannot be written is let go (fail closed). A run takes one repository's
        // lease many times, and the record it left last time is still right: it is rewritten
        // only when it names someone else. A stale record is removed first, so that the new one
        // is a plain create (renaming over an existing file makes ext4 flush); what it said was
        // acted on before the lock was taken (a dead holder's processes are ended first).
        let record = common_dir.join(RECORD_FILE);
        let bytes = serde_json::to_vec_pretty(&holder).unwrap_or_default();
        if !RecordsSeen::says(&record, &bytes) {
            if read_regular(&record, None).ok().as_deref() != Some(bytes.as_slice()) {
                let _ = std::fs::remove_file(&record);
                if let Err(source) = write_atomic(&record, &bytes) {
                    let _ = file.unlock();
                    return Err(LeaseError::Record {
                        path: record.display().to_string(),
                        source,
                    });
                }
            }
            RecordsSeen::saw(record, bytes);
        }
        tracing::debug!(lock = %path.display(), run = %holder.run_id, repo = %holder.repo, "lease taken");
        Ok(Some(Lease { file }))
    }

    /// Re-enter the lease a parent run holds: for a run started inside one of its workers or
    /// gates (`parent_token` is that run's `RUNNER_TOKEN`). Granted only when the lease is held,
    /// its record names that very token, and its holder is a live ancestor of this process;
    /// `None` otherwise. The parent keeps the lock and its record: this lease writes nothing
    /// and releasing it releases nothing.
    pub(crate) fn reenter(common_dir: &Path, parent_token: &str) -> Option<Lease> {
        if parent_token.is_empty() || !is_held(common_dir) {
            return None;
        }
        let record = read_record(&common_dir.join(RECORD_FILE))?;
        let file = open_regular(
            &common_dir.join(LOCK_FILE),
            std::fs::OpenOptions::new().read(true),
        )
        .ok()?;
        // Its holder is an ancestor: seen as one, or (from a pid namespace of an item's, where
        // its pid names nothing) known by the lock's descriptor, which a command of the item
        // inherits from the holder and this process holds.
        if record.token != parent_token
            || !(crate::support::host::is_ancestor(&record.holder) || holds_open(&file))
        {
            return None;
        }
        tracing::debug!(run = %record.run_id, repo = %record.repo, "lease re-entered from a parent run");
        Some(Lease { file })
    }

    /// The lock's descriptor, to be kept open in spawned processes.
    pub(crate) fn fd(&self) -> i32 {
        self.file.as_raw_fd()
    }

    /// Release the lock now, for an item whose process tree is proven gone. A child started
    /// for another item may still hold a copy of the descriptor for the instant before its
    /// `execve` closes it; the lock is released all the same. (Dropping a lease without this
    /// keeps the lock for as long as any process holds the descriptor.) The record stays: it
    /// names the last holder until the next one takes the lease.
    pub fn release(self) {
        let _ = self.file.unlock();
    }
}

/// Whether this process holds a descriptor of `file` (another than `file`'s own): the lock's,
/// inherited from the run that holds the lease.
fn holds_open(file: &std::fs::File) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(lock) = file.metadata() else {
        return false;
    };
    let own = file.as_raw_fd().to_string();
    std::fs::read_dir("/proc/self/fd")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_str() != Some(own.as_str()))
        .filter_map(|e| std::fs::metadata(e.path()).ok())
        .any(|m| m.dev() == lock.dev() && m.ino() == lock.ino())
}

/// The lease records this process last wrote or read, by file identity: a record is replaced
/// whole (a new file renamed into place), so one whose identity, size and modification time are
/// unchanged still says what it said, and a stat stands for reading it again.
struct RecordsSeen;

/// Device, inode, size and modification time (seconds, nanoseconds) of a record file.
type Stamp = (u64, u64, u64, i64, i64);

/// Each record path with its stamp and contents when last seen.
type Seen = HashMap<PathBuf, (Stamp, Vec<u8>)>;

static RECORDS_SEEN: std::sync::LazyLock<std::sync::Mutex<Seen>> =
    std::sync::LazyLock::new(Default::default);

impl RecordsSeen {
    fn stamp(path: &Path) -> Option<Stamp> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some((m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
    }

    /// Whether the record at `path` is known to hold `bytes`.
    fn says(path: &Path, bytes: &[u8]) -> bool {
        let Some(now) = Self::stamp(path) else {
            return false;
        };
        let seen = RECORDS_SEEN.lock().unwrap_or_else(|p| p.into_inner());
        seen.get(path)
            .is_some_and(|(stamp, said)| *stamp == now && said == bytes)
    }

    /// Remember that the record at `path` holds `bytes` now.
    fn saw(path: PathBuf, bytes: Vec<u8>) {
        let Some(now) = Self::stamp(&path) else {
            return;
        };
        let mut seen = RECORDS_SEEN.lock().unwrap_or_else(|p| p.into_inner());
        seen.insert(path, (now, bytes));
    }
}

/// The stamp of the lease record of the repository whose common dir is `common_dir` (`None`:
/// there is none, or it is not a regular file): a run that takes the lease writes its record
/// anew unless the one there is its own, always as a new file renamed into place, so an
/// unchanged stamp says no other run took the lease since.
pub(crate) fn record_mark(common_dir: &Path) -> Option<crate::support::fs::FileStamp> {
    crate::support::fs::regular_file_stamp(&common_dir.join(RECORD_FILE))
}

/// Whether some process holds the lease of the repository whose common dir is `common_dir`.
pub(crate) fn is_held(common_dir: &Path) -> bool {
    let Ok(file) = open_regular(
        &common_dir.join(LOCK_FILE),
        std::fs::OpenOptions::new().write(true),
    ) else {
        return false;
    };
    matches!(file.try_lock(), Err(std::fs::TryLockError::WouldBlock))
}

/// Every process that has the lease's lock file open (pid and command line), found through
/// `/proc/<pid>/fd`: whatever it did to its environment, session or group, a process that keeps
/// the lock keeps the repository. Processes whose descriptors cannot be read are not listed.
pub(crate) fn lock_holders(common_dir: &Path) -> Vec<(i32, String)> {
    use std::os::unix::fs::MetadataExt;
    let Ok(lock) = std::fs::metadata(common_dir.join(LOCK_FILE)) else {
        return Vec::new();
    };
    let (dev, ino) = (lock.dev(), lock.ino());
    let me = std::process::id() as i32;
    let mut out = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return out;
    };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else {
            continue;
        };
        let holds = fds
            .flatten()
            .any(|fd| std::fs::metadata(fd.path()).is_ok_and(|m| m.dev() == dev && m.ino() == ino));
        if holds {
            out.push((pid, crate::support::host::command_line(pid)));
        }
    }
    out.sort_unstable();
    out
}

/// The holder recorded in a common dir, if any. The lock, not the record, says whether the
/// lease is held ([`is_held`]): a released or killed holder leaves its record behind.
pub(crate) fn read_record(path: &Path) -> Option<Record> {
    serde_json::from_slice(&read_regular(path, None).ok()?).ok()
}

/// The record of a lease found held: [`read_record`], asked again for a few milliseconds while
/// the record is missing — its new holder removes the old record and then writes its own, and
/// a look that falls between the two (or a holder paused there by a loaded machine) is not a
/// holder without a record. It blocks for at most 20 ms, and only while the record is missing.
pub(crate) fn read_held_record(path: &Path) -> Option<Record> {
    for _ in 0..10 {
        match read_regular(path, None) {
            Ok(bytes) => return serde_json::from_slice(&bytes).ok(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            Err(_) => return None,
        }
    }
    None
}

/// The holder recorded in `common_dir`, unless the record is known to be `own`: this process
/// wrote it (or read it) last and it has not been replaced since, which a `stat` tells.
pub(crate) fn recorded_other(common_dir: &Path, own: &Record) -> Option<Record> {
    let path = common_dir.join(RECORD_FILE);
    let bytes = serde_json::to_vec_pretty(own).unwrap_or_default();
    if RecordsSeen::says(&path, &bytes) {
        return None;
    }
    read_record(&path)
}

/// The host-wide pause (`runner pause --host`): every drain of every manifest of this user on
/// the host stops admitting while it stands. One file in [`host_dir`], written atomically; the
/// token tells a pause from a newer one that replaced it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HostPause {
    pub by: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub at: String,
    pub token: String,
}

impl HostPause {
    /// As `status`, `plan` and a run's ending say it.
    pub fn text(&self) -> String {
        match &self.reason {
            Some(r) => format!("host paused by {} at {}: {r}", self.by, self.at),
            None => format!("host paused by {} at {}", self.by, self.at),
        }
    }
}

const HOST_PAUSE_FILE: &str = "pause.json";

/// Where what holds for the whole host is kept across reboots (a pause for maintenance must
/// outlive one): `RUNNER_HOST_DIR`, else `$XDG_STATE_HOME/runner/host`, else
/// `~/.local/state/runner/host`.
pub fn host_dir() -> PathBuf {
    let var = |v: &str| {
        std::env::var_os(v)
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
    };
    if let Some(d) = &crate::support::settings::current().host_dir {
        return d.clone();
    }
    if let Some(d) = var("XDG_STATE_HOME") {
        return d.join("runner").join("host");
    }
    match var("HOME") {
        Some(h) => h.join(".local/state/runner/host"),
        None => std::env::temp_dir()
            .join(format!("runner-{}", nix::unistd::getuid().as_raw()))
            .join("host"),
    }
}

/// The host's pause, if one stands. A pause file that cannot be read is a pause (a check that
/// cannot be made fails closed), its text saying why.
pub fn host_pause() -> Option<HostPause> {
    let path = host_dir().join(HOST_PAUSE_FILE);
    match std::fs::read(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => Some(unreadable_pause(&path, &e.to_string())),
        Ok(bytes) => Some(
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|e| unreadable_pause(&path, &e.to_string())),
        ),
    }
}

fn unreadable_pause(path: &Path, why: &str) -> HostPause {
    HostPause {
        by: format!("an unreadable `{}` ({why})", path.display()),
        reason: Some("`runner resume --host` removes it".into()),
        at: "an unknown time".into(),
        token: String::new(),
    }
}

/// Pause the host (replacing any pause that stands) and return the pause written.
pub fn set_host_pause(
    by: String,
    reason: Option<String>,
    at: String,
) -> std::io::Result<HostPause> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = host_dir();
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)?;
    let pause = HostPause {
        by,
        reason,
        at,
        token: uuid::Uuid::new_v4().to_string(),
    };
    let bytes = serde_json::to_vec_pretty(&pause).map_err(std::io::Error::other)?;
    write_atomic(&dir.join(HOST_PAUSE_FILE), &bytes)?;
    Ok(pause)
}

/// Lift the host's pause; the one lifted, if one stood.
pub fn clear_host_pause() -> std::io::Result<Option<HostPause>> {
    let was = host_pause();
    match std::fs::remove_file(host_dir().join(HOST_PAUSE_FILE)) {
        Ok(()) => Ok(was),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The items running on this host, of every manifest: the host-wide worker slots held (each
/// running item holds one of its manifest's), counted by trying each unit's lock.
pub fn host_slots_in_use() -> std::io::Result<usize> {
    let dir = resources_dir();
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut held = 0;
    for entry in entries {
        let name = entry?.file_name();
        let name = name.to_string_lossy();
        if !(name.starts_with("workers-") && name.ends_with(".lock")) {
            continue;
        }
        let Ok(file) = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join(&*name))
        else {
            continue;
        };
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => held += 1,
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
    }
    Ok(held)
}

/// A unit of a host-wide shared resource (`resources:` in the manifest), held while one command
/// runs: an OS file lock on `<dir>/<name>.<k>.lock`, one file per unit, so every runner on the
/// host that declares the resource shares its units. Dropping it releases the unit; the
/// descriptor is close-on-exec, so a command's leftovers never keep it.
pub(crate) struct ResourceUnit {
    file: Option<File>,
}

/// Told each time this process gives a unit back: a command of this run waiting for one asks
/// again at once, instead of at its next poll (another process's release cannot be announced,
/// and is found by the poll).
pub(crate) static UNIT_RELEASED: tokio::sync::Notify = tokio::sync::Notify::const_new();

impl Drop for ResourceUnit {
    fn drop(&mut self) {
        // The lock goes with the descriptor: closed first, then the waiters told.
        drop(self.file.take());
        UNIT_RELEASED.notify_waiters();
    }
}

/// Where the units' lock files live: `RUNNER_RESOURCES_DIR`, else `$XDG_RUNTIME_DIR/runner`,
/// else `/tmp/runner-<uid>` (made private to the user).
pub(crate) fn resources_dir() -> PathBuf {
    if let Some(d) = &crate::support::settings::current().resources_dir {
        return d.clone();
    }
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("runner").join("resources");
    }
    std::env::temp_dir()
        .join(format!("runner-{}", nix::unistd::getuid().as_raw()))
        .join("resources")
}

/// A free unit of resource `name` (of `units`), or `None` when every unit is held.
pub(crate) fn try_resource(
    dir: &Path,
    name: &str,
    units: u32,
) -> std::io::Result<Option<ResourceUnit>> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    // A folder another user made (or a link to one) is not ours to coordinate through.
    let meta = std::fs::symlink_metadata(dir)?;
    if !meta.is_dir() || meta.uid() != nix::unistd::getuid().as_raw() {
        return Err(std::io::Error::other(format!(
            "`{}` is not a folder of this user",
            dir.display()
        )));
    }
    for k in 0..units {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(format!("{name}.{k}.lock")))?;
        match file.try_lock() {
            Ok(()) => return Ok(Some(ResourceUnit { file: Some(file) })),
            Err(std::fs::TryLockError::WouldBlock) => continue,
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
    }
    Ok(None)
}

/// The host-wide worker slots of one manifest: `capacity.workers` units (lock files in
/// [`resources_dir`]) that every run of the manifest on the host takes one of for each item it
/// runs, so that overlapping runs (two cron drains) together never run more items than the
/// bound. A run holds exactly as many as it has items running; an item resting between
/// attempts holds none.
pub(crate) struct HostSlots {
    dir: PathBuf,
    name: String,
    units: u32,
    held: Vec<ResourceUnit>,
}

impl HostSlots {
    /// The slots of manifest `manifest` (by name: what scopes its ledger) with `units` of them.
    pub fn new(manifest: &str, units: u32) -> Self {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(manifest.as_bytes());
        HostSlots {
            dir: resources_dir(),
            name: format!("workers-{}", crate::support::hex(&digest[..8])),
            units: units.max(1),
            held: Vec::new(),
        }
    }

    /// Hold at least `n` slots: `Ok(false)` when another run holds the rest.
    pub(crate) fn ensure(&mut self, n: usize) -> std::io::Result<bool> {
        while self.held.len() < n {
            match try_resource(&self.dir, &self.name, self.units)? {
                Some(u) => self.held.push(u),
                None => return Ok(false),
            }
        }
        Ok(true)
    }

    /// Hold at most `n` slots, letting the others go.
    pub fn trim(&mut self, n: usize) {
        self.held.truncate(n);
    }

    /// For the unit tests.
    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// How many of the manifest's slots some run on the host holds now.
    pub fn in_use(manifest: &str, units: u32) -> usize {
        let probe = HostSlots::new(manifest, units);
        (0..probe.units)
            .filter(|k| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(probe.dir.join(format!("{}.{k}.lock", probe.name)))
                    .is_ok_and(|f| matches!(f.try_lock(), Err(std::fs::TryLockError::WouldBlock)))
            })
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_slots_bound_every_holder_together() {
        let dir = tempfile::tempdir().unwrap();
        let slots = |n| HostSlots {
            dir: dir.path().to_path_buf(),
            name: "workers-test".into(),
            units: n,
            held: Vec::new(),
        };
        let (mut a, mut b) = (slots(3), slots(3));
        assert!(a.ensure(2).unwrap());
        assert!(b.ensure(1).unwrap());
        assert!(!b.ensure(2).unwrap(), "a fourth slot of three");
        assert_eq!(b.held(), 1);
        a.trim(1);
        // A child another test of this process is starting holds a copy of every descriptor
        // until it execs, the let-go unit's lock with them: taken once that child has.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !b.ensure(2).unwrap() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(b.held(), 2, "one let go is taken");
        assert!(!a.ensure(2).unwrap(), "and is no longer free");
    }

    #[test]
    fn one_holder_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let a = Lease::try_acquire(dir.path(), Record::this_process("run-a", "r", "t"))
            .unwrap()
            .expect("free lease is taken");
        assert!(
            Lease::try_acquire(dir.path(), Record::this_process("run-b", "r", "t"))
                .unwrap()
                .is_none()
        );
        let rec = read_record(&dir.path().join(RECORD_FILE)).unwrap();
        assert_eq!(rec.run_id, "run-a");
        assert!(rec.holder.start_time.is_some());
        assert!(is_held(dir.path()));
        a.release();
        assert!(!is_held(dir.path()));
        assert_eq!(
            read_record(&dir.path().join(RECORD_FILE)).unwrap().run_id,
            "run-a",
            "the last holder stays named"
        );
        let b = Lease::try_acquire(dir.path(), Record::this_process("run-b", "r", "t"))
            .unwrap()
            .expect("a released lease is taken");
        assert_eq!(
            read_record(&dir.path().join(RECORD_FILE)).unwrap().run_id,
            "run-b"
        );
        b.release();
    }

    #[test]
    fn a_released_lease_is_free_though_a_copy_of_its_descriptor_lives_on() {
        let dir = tempfile::tempdir().unwrap();
        let lease = Lease::try_acquire(dir.path(), Record::this_process("run-a", "r", "t"))
            .unwrap()
            .unwrap();
        // What a child started meanwhile holds until its `execve`.
        let copy = lease.file.try_clone().unwrap();
        lease.release();
        let again =
            Lease::try_acquire(dir.path(), Record::this_process("run-b", "r", "t")).unwrap();
        assert!(again.is_some(), "released, yet still locked");
        drop(copy);
    }

    #[test]
    fn a_record_rewritten_by_another_holder_is_noticed() {
        let dir = tempfile::tempdir().unwrap();
        let record = dir.path().join(RECORD_FILE);
        let holder = Record::this_process("run-a", "r", "t");
        Lease::try_acquire(dir.path(), holder.clone())
            .unwrap()
            .unwrap()
            .release();
        // Another runner takes the lease and leaves its record, the same size as this one's.
        let mut other = holder.clone();
        other.run_id = "run-b".into();
        write_atomic(&record, &serde_json::to_vec_pretty(&other).unwrap()).unwrap();
        Lease::try_acquire(dir.path(), holder)
            .unwrap()
            .unwrap()
            .release();
        assert_eq!(read_record(&record).unwrap().run_id, "run-a");
    }
}
