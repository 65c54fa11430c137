//! A cgroup per item, where the machine lets runner make one.
//!
//! A process group, the subreaper role and the run-token census (see [`super::census`]) find
//! what a worker starts as long as it keeps its environment; a process that leaves its group and
//! clears its environment (`setsid env -i …`) can only be attributed by guesswork. A cgroup has
//! no such hole: a process belongs to the cgroup of the process that started it, whatever it
//! does to its session, group or environment, and only a privileged process can move itself
//! out. So where runner can create cgroups in the unified (v2) hierarchy, each item gets one:
//!
//! - `<parent>/runner-<run id>/repo-<repository>`, where `<parent>` is `RUNNER_CGROUP` when set
//!   (a subtree delegated to the user running runner), else runner's own cgroup.
//! - Every process of the item (worker and gates) is in it before it runs its program: created
//!   there by the kernel (`clone3` with `CLONE_INTO_CGROUP`), or, where that is refused, moving
//!   itself in (the launcher writes `0` to `cgroup.procs`); so nothing it starts is ever outside.
//! - Membership is the census: `cgroup.procs` lists the item's processes and `cgroup.events`
//!   says when none is left. Ending the item signals every member, waits out the grace period,
//!   then kills the whole cgroup at once (`cgroup.kill`; on kernels before 5.14, freeze, kill
//!   each member, thaw).
//! - `worker.limits` become the cgroup's `memory.max`, `pids.max` and `cpu.max`; where those
//!   controllers are bound to v1 hierarchies instead (a hybrid machine), the item gets a cgroup
//!   in each of those too, with the v1 equivalents.
//!
//! Each lease record names its item's cgroups, so a run that finds the holder dead ends what is
//! left in them (`runner apply`, `runner unlock --kill`) and removes them.
//!
//! The unified item cgroup holds no process itself: its processes start in a leaf below it
//! (`repo-<repository>/g<n>`), and after every kill the next process starts in a fresh leaf.
//! Killing a cgroup (`cgroup.kill`) leaves it killing whatever the kernel later creates in it
//! with `CLONE_INTO_CGROUP` (seen on Linux 6.18: every such child dies of SIGKILL at once), so a
//! repository whose item left a process that needed the kill would otherwise kill every later
//! item's first process. The item cgroup stays the one the lease record names; limits are set
//! on it and hold for every leaf below; `cgroup.events` and a kill of it cover them all.

use crate::support::limits::Limits;
use crate::vocab::Containment;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a run asks for (`RUNNER_CONTAINMENT`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Want {
    /// A cgroup per item where possible, else process groups.
    #[default]
    Auto,
    /// A cgroup per item, or the run does not start.
    Cgroup,
    /// Process groups, even where cgroups are available.
    ProcessGroup,
}

impl Want {
    /// From `RUNNER_CONTAINMENT`'s value: `auto` (or unset), `cgroup` or `process-group`.
    pub fn parse(value: Option<&str>) -> Result<Want, ContainmentError> {
        match value.map(str::trim) {
            None | Some("" | "auto") => Ok(Want::Auto),
            Some("cgroup") => Ok(Want::Cgroup),
            Some("process-group") => Ok(Want::ProcessGroup),
            Some(other) => Err(ContainmentError::UnknownMode(other.to_string())),
        }
    }
}

/// Why a run cannot be contained as it asked.
#[derive(Debug, thiserror::Error)]
pub enum ContainmentError {
    #[error("RUNNER_CONTAINMENT is `{0}`: it takes `auto`, `cgroup` or `process-group`")]
    UnknownMode(String),
    #[error("`worker.limits` needs a cgroup per item, and RUNNER_CONTAINMENT is `process-group`")]
    LimitsWithoutCgroups,
    /// Cgroups were asked for (`what`), and none can be made.
    #[error("{what}, and {why}")]
    NoCgroup {
        what: &'static str,
        #[source]
        why: NoCgroup,
    },
    #[error(
        "`worker.limits` sets {0} but the {0} controller cannot be used: {why}",
        controller
    )]
    Controller {
        controller: &'static str,
        #[source]
        why: NoCgroup,
    },
}

/// Why no cgroup of the run can be made on this machine.
#[derive(Debug, thiserror::Error)]
pub enum NoCgroup {
    #[error("no cgroup2 file system is mounted")]
    NoUnifiedMount,
    #[error("this process has no cgroup in the unified hierarchy")]
    NoUnifiedCgroup,
    #[error(
        "cgroup `{}` cannot be created: {source} (set RUNNER_CGROUP to a cgroup delegated to this user)",
        dir.display()
    )]
    Create {
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "`{}` is not a usable cgroup (no cgroup.kill or cgroup.freeze: Linux 5.2 or later is needed)",
        parent.display()
    )]
    Unusable { parent: PathBuf },
    #[error("it is neither enabled in the unified hierarchy nor mounted as a v1 hierarchy")]
    NoController,
    #[error("this process has no cgroup in its hierarchy")]
    NoControllerCgroup,
    #[error("cgroup `{}` cannot be created: {source}", dir.display())]
    CreateV1 {
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// A resource controller a limit needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Controller {
    Memory,
    Pids,
    Cpu,
}

impl Controller {
    fn name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Pids => "pids",
            Controller::Cpu => "cpu",
        }
    }

    fn needed(limits: &Limits) -> Vec<Controller> {
        let mut c = Vec::new();
        if limits.memory.is_some() {
            c.push(Controller::Memory);
        }
        if limits.pids.is_some() {
            c.push(Controller::Pids);
        }
        if limits.cpu.is_some() {
            c.push(Controller::Cpu);
        }
        c
    }

    /// The files and values that set `limits` for this controller, in the unified hierarchy
    /// (`v2`) or its own v1 hierarchy.
    fn settings(self, limits: &Limits, v2: bool) -> Vec<(&'static str, String)> {
        const PERIOD: u64 = 100_000;
        match (self, v2) {
            (Controller::Memory, true) => limits
                .memory
                .map(|b| {
                    vec![
                        ("memory.max", b.to_string()),
                        ("memory.swap.max", "0".into()),
                    ]
                })
                .unwrap_or_default(),
            (Controller::Memory, false) => limits
                .memory
                .map(|b| vec![("memory.limit_in_bytes", b.to_string())])
                .unwrap_or_default(),
            (Controller::Pids, _) => limits
                .pids
                .map(|p| vec![("pids.max", p.to_string())])
                .unwrap_or_default(),
            (Controller::Cpu, true) => limits
                .cpu
                .map(|c| {
                    let quota = ((c * PERIOD as f64).round() as u64).max(1000);
                    vec![("cpu.max", format!("{quota} {PERIOD}"))]
                })
                .unwrap_or_default(),
            (Controller::Cpu, false) => limits
                .cpu
                .map(|c| {
                    let quota = ((c * PERIOD as f64).round() as u64).max(1000);
                    vec![
                        ("cpu.cfs_period_us", PERIOD.to_string()),
                        ("cpu.cfs_quota_us", quota.to_string()),
                    ]
                })
                .unwrap_or_default(),
        }
    }
}

/// How this run contains its items.
#[derive(Debug)]
pub struct Contained {
    pub mode: Containment,
    /// The run's cgroup in the unified hierarchy.
    run: Option<PathBuf>,
    /// Limits set in v1 hierarchies: each controller with the run's cgroup there.
    v1: Vec<(Controller, PathBuf)>,
    limits: Limits,
    /// Why cgroups are not used, when they are not.
    pub why_not: Option<String>,
    /// Each repository's item cgroup, made for its first item and kept for the next ones
    /// (creating and removing a cgroup costs the kernel more than the rest of an item's
    /// bookkeeping); removed once nothing more of the repository runs in the drain
    /// ([`Contained::done_with`]), the rest when the run ends.
    items: std::sync::Mutex<std::collections::HashMap<String, Arc<ItemCgroup>>>,
}

impl Contained {
    /// No cgroups: process groups and the token census.
    pub(crate) fn process_groups(why: impl Into<String>) -> Contained {
        Contained {
            mode: Containment::ProcessGroup,
            run: None,
            v1: Vec::new(),
            limits: Limits::default(),
            why_not: Some(why.into()),
            items: Default::default(),
        }
    }

    /// Set up containment for run `run_id`: its cgroup when `want` allows and the machine lets
    /// runner make one, with `limits` enforceable for each item. `Err` says why a run that asked
    /// for cgroups, or for limits, cannot have them.
    pub(crate) fn set_up(
        run_id: &str,
        want: Want,
        limits: Limits,
    ) -> Result<Contained, ContainmentError> {
        if want == Want::ProcessGroup {
            if !limits.is_empty() {
                return Err(ContainmentError::LimitsWithoutCgroups);
            }
            return Ok(Contained::process_groups(
                "RUNNER_CONTAINMENT is `process-group`",
            ));
        }
        let mounts = Mounts::read();
        let run = match unified_run_dir(&mounts, run_id) {
            Ok(dir) => dir,
            Err(why) => {
                if want == Want::Cgroup || !limits.is_empty() {
                    let what = if want == Want::Cgroup {
                        "RUNNER_CONTAINMENT is `cgroup`"
                    } else {
                        "`worker.limits` needs a cgroup per item"
                    };
                    return Err(ContainmentError::NoCgroup { what, why });
                }
                return Ok(Contained::process_groups(why.to_string()));
            }
        };
        let mut contained = Contained {
            mode: Containment::Cgroup,
            run: Some(run.clone()),
            v1: Vec::new(),
            limits,
            why_not: None,
            items: Default::default(),
        };
        for c in Controller::needed(&limits) {
            if enable_unified(&run, c).is_ok() {
                continue;
            }
            match v1_run_dir(&mounts, c, run_id) {
                Ok(dir) => contained.v1.push((c, dir)),
                Err(why) => {
                    contained.remove();
                    return Err(ContainmentError::Controller {
                        controller: c.name(),
                        why,
                    });
                }
            }
        }
        Ok(contained)
    }

    /// "cgroup (/sys/fs/cgroup/…/runner-ID)" or "process-group (why)": for logs and `status`.
    pub(crate) fn describe(&self) -> String {
        match (&self.run, &self.why_not) {
            (Some(dir), _) => format!("cgroup ({})", dir.display()),
            (None, Some(why)) => format!("process-group ({why})"),
            (None, None) => "process-group".into(),
        }
    }

    /// The run's cgroup, or why there is none: for the report.
    pub fn detail(&self) -> String {
        match (&self.run, &self.why_not) {
            (Some(dir), _) => dir.display().to_string(),
            (None, why) => why.clone().unwrap_or_default(),
        }
    }

    /// Where item `repo`'s cgroups are (or will be): the unified one first.
    /// The run's cgroups, the unified one first (none without cgroups).
    pub(crate) fn run_dirs(&self) -> Vec<PathBuf> {
        self.run
            .iter()
            .chain(self.v1.iter().map(|(_, d)| d))
            .cloned()
            .collect()
    }

    pub(crate) fn item_dirs(&self, repo: &str) -> Vec<PathBuf> {
        let name = format!("repo-{repo}");
        self.run
            .iter()
            .chain(self.v1.iter().map(|(_, d)| d))
            .map(|d| d.join(&name))
            .collect()
    }

    /// Item `repo`'s cgroups, with the run's limits, made on first use: `None` without cgroups.
    pub fn item(&self, repo: &str) -> io::Result<Option<Arc<ItemCgroup>>> {
        if self.run.is_none() {
            return Ok(None);
        }
        let mut items = self.items.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = items.get(repo) {
            return Ok(Some(c.clone()));
        }
        let made = Arc::new(self.make_item(repo)?);
        items.insert(repo.to_string(), made.clone());
        Ok(Some(made))
    }

    /// Nothing more of `repo` runs in this drain: its cgroup is removed (once its last user
    /// lets go), rather than kept, with the kernel's memory for it, until the run ends.
    pub(crate) fn done_with(&self, repo: &str) {
        self.items
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(repo);
    }

    fn make_item(&self, repo: &str) -> io::Result<ItemCgroup> {
        let dirs = self.item_dirs(repo);
        for (i, dir) in dirs.iter().enumerate() {
            make_dir(dir)?;
            let settings = if i == 0 {
                Controller::needed(&self.limits)
                    .into_iter()
                    .filter(|c| !self.v1.iter().any(|(v, _)| v == c))
                    .flat_map(|c| c.settings(&self.limits, true))
                    .collect()
            } else {
                self.v1[i - 1].0.settings(&self.limits, false)
            };
            for (file, value) in settings {
                // `memory.swap.max` is absent where swap is not accounted: nothing to limit.
                if file == "memory.swap.max" && !dir.join(file).exists() {
                    continue;
                }
                write_file(&dir.join(file), &value)?;
            }
            // Opened now to be told at once if it cannot be, and again for each process (in
            // the unified hierarchy, of the leaf it starts in).
            if i > 0 {
                open_procs(dir)?;
            }
        }
        Ok(ItemCgroup {
            dirs,
            leaf: std::sync::Mutex::new((0, false)),
        })
    }

    /// Remove the run's cgroups (each once empty; a cgroup with processes left stays).
    pub fn remove(&self) {
        for dir in self.run.iter().chain(self.v1.iter().map(|(_, d)| d)) {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

impl Drop for Contained {
    fn drop(&mut self) {
        // The item cgroups first (each removes itself once the last user lets go), then the
        // run's.
        self.items.lock().unwrap_or_else(|p| p.into_inner()).clear();
        self.remove();
    }
}

/// One item's cgroups: the unified one (the census), and one per v1 controller with a limit.
#[derive(Debug)]
pub struct ItemCgroup {
    dirs: Vec<PathBuf>,
    /// The generation of the unified leaf processes start in (`g<n>` below the item cgroup),
    /// moved on by every kill; and whether it was made.
    leaf: std::sync::Mutex<(u32, bool)>,
}

/// Cgroup `dir`, made unless it is there.
fn make_dir(dir: &Path) -> io::Result<()> {
    match std::fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("cannot create cgroup `{}`: {e}", dir.display()),
        )),
    }
}

/// `dir`'s `cgroup.procs`, open for a process to move itself in.
fn open_procs(dir: &Path) -> io::Result<OwnedFd> {
    std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("cgroup.procs"))
        .map(OwnedFd::from)
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot open `{}/cgroup.procs`: {e}", dir.display()),
            )
        })
}

/// An item's cgroups, open for one process to start in: only while it is being started. (Held
/// open for the whole run, a descriptor per repository, they ran a drain over many
/// repositories out of descriptors, and made every start copy them all into the child's
/// descriptor table.)
pub(crate) struct Joining {
    /// The unified cgroup's folder, for the kernel to create the child in.
    folder: Option<OwnedFd>,
    /// Each cgroup's `cgroup.procs` (the unified one first), for the child to move itself in.
    procs: Vec<OwnedFd>,
}

impl Joining {
    /// The descriptors a child writes itself into.
    pub(crate) fn join_fds(&self) -> Vec<RawFd> {
        self.procs.iter().map(AsRawFd::as_raw_fd).collect()
    }

    /// The unified cgroup's folder.
    pub(crate) fn folder_fd(&self) -> Option<RawFd> {
        self.folder.as_ref().map(AsRawFd::as_raw_fd)
    }
}

impl ItemCgroup {
    /// The unified leaf processes start in now, made when missing (its folder is opened next:
    /// one taken away meanwhile is an error then).
    fn leaf(&self) -> io::Result<PathBuf> {
        let mut leaf = self.leaf.lock().unwrap_or_else(|p| p.into_inner());
        let dir = self.dirs[0].join(format!("g{}", leaf.0));
        if leaf.1 {
            return Ok(dir);
        }
        make_dir(&dir)?;
        leaf.1 = true;
        Ok(dir)
    }

    /// Open the cgroups for a process to start in: the unified leaf, and each v1 cgroup.
    pub(crate) fn joining(&self) -> io::Result<Joining> {
        let leaf = self.leaf()?;
        let mut procs = vec![open_procs(&leaf)?];
        for d in &self.dirs[1..] {
            procs.push(open_procs(d)?);
        }
        Ok(Joining {
            folder: std::fs::File::open(&leaf).ok().map(OwnedFd::from),
            procs,
        })
    }

    /// The unified cgroup's path.
    pub fn path(&self) -> &Path {
        &self.dirs[0]
    }

    /// The live processes in it.
    pub(crate) fn members(&self) -> Vec<i32> {
        members(self.path()).unwrap_or_default()
    }

    /// Whether a live process is left in it (`None`: it cannot be read).
    pub(crate) fn populated(&self) -> Option<bool> {
        populated(self.path())
    }

    /// Send `sig` to every member.
    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        for pid in self.members() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
        }
    }

    /// Kill every member at once, and wait (at most `within`) until none is left. Returns
    /// whether the cgroup is empty. The next process starts in a fresh leaf: the killed one
    /// kills what is created in it.
    pub async fn kill(&self, within: Duration) -> bool {
        let gone = kill_and_wait(self.path(), within).await;
        let old = {
            let mut leaf = self.leaf.lock().unwrap_or_else(|p| p.into_inner());
            *leaf = (leaf.0 + 1, false);
            self.dirs[0].join(format!("g{}", leaf.0 - 1))
        };
        let _ = std::fs::remove_dir(old);
        gone
    }

    /// Remove the cgroups (once empty), the unified one's leaves first.
    pub fn remove(&self) {
        remove_leaves(&self.dirs[0]);
        for dir in &self.dirs {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

impl Drop for ItemCgroup {
    fn drop(&mut self) {
        self.remove();
    }
}

/// End what a dead run left in the item cgroups `dirs` (unified one first), as its lease record
/// names them, and remove them: returns the pids that were there, or `Err` with those left at
/// the deadline.
pub(crate) async fn end_left(dirs: &[PathBuf], grace: Duration) -> Result<Vec<i32>, Vec<i32>> {
    let Some(unified) = dirs.first().filter(|d| d.join("cgroup.procs").exists()) else {
        return Ok(Vec::new());
    };
    // Members that cannot be read are not none: the cgroup is not proven empty.
    let found = members(unified).map_err(|e| {
        tracing::warn!("{e}");
        Vec::new()
    })?;
    if !found.is_empty() {
        for &pid in &found {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let until = Instant::now() + grace;
        while Instant::now() < until && populated(unified) != Some(false) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if !kill_and_wait(unified, Duration::from_secs(10)).await {
            return Err(members(unified).unwrap_or_default());
        }
    }
    remove_leaves(unified);
    for dir in dirs {
        let _ = std::fs::remove_dir(dir);
        // The dead run's own cgroup goes with its last item.
        if let Some(run) = dir.parent() {
            let _ = std::fs::remove_dir(run);
        }
    }
    Ok(found)
}

/// The live processes in cgroup `dir` and every cgroup below it; `Err` names what could not be
/// read (a membership that cannot be read is unknown, never empty).
pub(crate) fn members(dir: &Path) -> Result<Vec<i32>, String> {
    let procs = dir.join("cgroup.procs");
    let mut out: Vec<i32> = match std::fs::read_to_string(&procs) {
        Ok(list) => list
            .split_ascii_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect(),
        // Removed meanwhile: nothing is in it.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !dir.exists() => Vec::new(),
        Err(e) => {
            return Err(format!(
                "the members of cgroup `{}` cannot be read: {e}",
                dir.display()
            ));
        }
    };
    match std::fs::read_dir(dir) {
        Ok(entries) => {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    out.extend(members(&e.path())?);
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(format!(
                "the cgroups below `{}` cannot be read: {e}",
                dir.display()
            ));
        }
    }
    Ok(out)
}

/// Remove the (empty) cgroups below `dir`.
fn remove_leaves(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_leaves(&e.path());
                let _ = std::fs::remove_dir(e.path());
            }
        }
    }
}

/// Whether a live process is left in unified cgroup `dir` (or any below it).
fn populated(dir: &Path) -> Option<bool> {
    use std::io::Read;
    // Its first line, had with one read (the kernel gives the whole of such a small file at
    // once): asked after every process an item starts.
    let mut buf = [0u8; 256];
    let n = std::fs::File::open(dir.join("cgroup.events"))
        .ok()?
        .read(&mut buf)
        .ok()?;
    std::str::from_utf8(&buf[..n])
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("populated "))
        .map(|v| v.trim() != "0")
}

/// Kill everything in unified cgroup `dir` and wait, at most `within`, until it is empty.
async fn kill_and_wait(dir: &Path, within: Duration) -> bool {
    let kill_file = dir.join("cgroup.kill");
    let killed = kill_file.exists() && write_file(&kill_file, "1").is_ok();
    if !killed {
        // Before Linux 5.14: freeze so that nothing forks while each member is killed (a fatal
        // signal still reaches a frozen process), then thaw.
        let _ = write_file(&dir.join("cgroup.freeze"), "1");
        let until = Instant::now() + Duration::from_secs(1);
        while Instant::now() < until && !frozen(dir) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        for pid in members(dir).unwrap_or_default() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = write_file(&dir.join("cgroup.freeze"), "0");
    }
    let until = Instant::now() + within;
    loop {
        match populated(dir) {
            Some(false) => return true,
            None if !dir.exists() => return true,
            _ if Instant::now() >= until => return false,
            _ => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

fn frozen(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("cgroup.events"))
        .is_ok_and(|e| e.lines().any(|l| l.trim() == "frozen 1"))
}

/// Write `value` to a cgroup interface file in one `write`, as the kernel expects.
fn write_file(path: &Path, value: &str) -> io::Result<()> {
    let mut f = std::fs::OpenOptions::new().write(true).open(path)?;
    f.write_all(value.as_bytes()).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot write `{value}` to `{}`: {e}", path.display()),
        )
    })
}

/// The cgroup file systems mounted here, and this process's place in each.
struct Mounts {
    /// `(mount point, root of the mount, file system type, super options)`.
    mounts: Vec<(PathBuf, String, String, String)>,
    /// `/proc/self/cgroup`: `(controllers, path)`; the unified hierarchy has none.
    own: Vec<(String, String)>,
}

impl Mounts {
    fn read() -> Mounts {
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mounts = info
            .lines()
            .filter_map(|line| {
                let (left, right) = line.split_once(" - ")?;
                let left: Vec<&str> = left.split(' ').collect();
                let mut right = right.split(' ');
                let fstype = right.next()?;
                let _source = right.next();
                let options = right.next().unwrap_or("");
                if fstype != "cgroup2" && fstype != "cgroup" {
                    return None;
                }
                Some((
                    PathBuf::from(unescape(left.get(4)?)),
                    unescape(left.get(3)?),
                    fstype.to_string(),
                    options.to_string(),
                ))
            })
            .collect();
        let own = std::fs::read_to_string("/proc/self/cgroup")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let mut parts = l.splitn(3, ':');
                let _id = parts.next()?;
                Some((parts.next()?.to_string(), parts.next()?.to_string()))
            })
            .collect();
        Mounts { mounts, own }
    }

    /// Where this process's cgroup is in the hierarchy mounted at `mount` with root `root`,
    /// given its path `own` there.
    fn place(mount: &Path, root: &str, own: &str) -> PathBuf {
        let rel = if root != "/" {
            own.strip_prefix(root).unwrap_or(own)
        } else {
            own
        };
        mount.join(rel.trim_start_matches('/'))
    }
}

/// `\040` and the like in a mount path.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 4 <= b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The name of run `run_id`'s cgroup: `runner-<run id>.<pid>`, the pid telling a later run
/// whether its owner still lives.
fn run_dir_name(run_id: &str) -> String {
    format!("runner-{run_id}.{}", std::process::id())
}

/// Remove the empty cgroups that runs which died left under `parent` (a run killed before it
/// could remove its own). A cgroup with processes left in it stays (the kernel refuses to remove
/// it): the next run in its repository ends them and says so, through the lease record that
/// names it.
fn remove_stale(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(pid) = name
            .strip_prefix("runner-")
            .and_then(|n| n.rsplit_once('.'))
            .and_then(|(_, pid)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        let alive = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, r)| !r.trim_start().starts_with(['Z', 'X']))
            })
            .unwrap_or(false);
        // A cgroup with a process in it cannot be removed: `rmdir` refuses, and it stays.
        if alive {
            continue;
        }
        remove_leaves(&entry.path());
        let _ = std::fs::remove_dir(entry.path());
    }
}

/// Create the run's cgroup in the unified hierarchy, or say why it cannot be.
fn unified_run_dir(m: &Mounts, run_id: &str) -> Result<PathBuf, NoCgroup> {
    let parent = match &crate::support::settings::current().cgroup {
        Some(p) => p.clone(),
        None => {
            let Some((mount, root, _, _)) = m.mounts.iter().find(|(_, _, t, _)| t == "cgroup2")
            else {
                return Err(NoCgroup::NoUnifiedMount);
            };
            let Some((_, own)) = m.own.iter().find(|(c, _)| c.is_empty()) else {
                return Err(NoCgroup::NoUnifiedCgroup);
            };
            Mounts::place(mount, root, own)
        }
    };
    remove_stale(&parent);
    let dir = parent.join(run_dir_name(run_id));
    std::fs::create_dir(&dir).map_err(|source| NoCgroup::Create {
        dir: dir.clone(),
        source,
    })?;
    // Each item's cgroup must take processes and be killable as one.
    let usable = dir.join("cgroup.procs").exists()
        && (dir.join("cgroup.kill").exists() || dir.join("cgroup.freeze").exists());
    if !usable {
        let _ = std::fs::remove_dir(&dir);
        return Err(NoCgroup::Unusable { parent });
    }
    Ok(dir)
}

/// Make controller `c` available to the item cgroups below unified run cgroup `run`.
fn enable_unified(run: &Path, c: Controller) -> io::Result<()> {
    let parent = run.parent().unwrap_or(run);
    let available = std::fs::read_to_string(parent.join("cgroup.controllers"))?;
    if !available.split_whitespace().any(|n| n == c.name()) {
        return Err(io::Error::other("not available"));
    }
    let enabled = std::fs::read_to_string(parent.join("cgroup.subtree_control"))?;
    if !enabled.split_whitespace().any(|n| n == c.name()) {
        write_file(
            &parent.join("cgroup.subtree_control"),
            &format!("+{}", c.name()),
        )?;
    }
    write_file(
        &run.join("cgroup.subtree_control"),
        &format!("+{}", c.name()),
    )
}

/// Create the run's cgroup in controller `c`'s v1 hierarchy.
fn v1_run_dir(m: &Mounts, c: Controller, run_id: &str) -> Result<PathBuf, NoCgroup> {
    let has = |list: &str| list.split(',').any(|o| o == c.name());
    let Some((mount, root, _, _)) = m
        .mounts
        .iter()
        .find(|(_, _, t, opts)| t == "cgroup" && has(opts))
    else {
        return Err(NoCgroup::NoController);
    };
    let Some((_, own)) = m.own.iter().find(|(list, _)| has(list)) else {
        return Err(NoCgroup::NoControllerCgroup);
    };
    let parent = Mounts::place(mount, root, own);
    remove_stale(&parent);
    let dir = parent.join(run_dir_name(run_id));
    std::fs::create_dir(&dir).map_err(|source| NoCgroup::CreateV1 {
        dir: dir.clone(),
        source,
    })?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_that_cannot_be_read_are_unknown_never_none() {
        let dir = tempfile::tempdir().unwrap();
        let cg = dir.path().join("item");
        // A cgroup removed meanwhile has no members.
        assert_eq!(members(&cg), Ok(Vec::new()));
        std::fs::create_dir_all(cg.join("g0")).unwrap();
        std::fs::write(cg.join("cgroup.procs"), "12\n34\n").unwrap();
        // A cgroup below whose list cannot be read (here, not a file).
        std::fs::create_dir(cg.join("g0/cgroup.procs")).unwrap();
        let e = members(&cg).unwrap_err();
        assert!(e.contains("g0") && e.contains("cannot be read"), "{e}");
        std::fs::remove_dir(cg.join("g0/cgroup.procs")).unwrap();
        std::fs::write(cg.join("g0/cgroup.procs"), "56\n").unwrap();
        assert_eq!(members(&cg), Ok(vec![12, 34, 56]));
    }

    #[test]
    fn containment_is_asked_for_by_name() {
        assert!(matches!(Want::parse(None), Ok(Want::Auto)));
        assert!(matches!(Want::parse(Some("cgroup")), Ok(Want::Cgroup)));
        assert!(matches!(
            Want::parse(Some("process-group")),
            Ok(Want::ProcessGroup)
        ));
        assert_eq!(
            Want::parse(Some("cgroups")).err().map(|e| e.to_string()),
            Some(
                "RUNNER_CONTAINMENT is `cgroups`: it takes `auto`, `cgroup` or `process-group`"
                    .into()
            )
        );
    }

    #[test]
    fn a_cgroup_path_is_found_below_the_mount_root() {
        assert_eq!(
            Mounts::place(Path::new("/sys/fs/cgroup"), "/", "/user.slice/a.scope"),
            Path::new("/sys/fs/cgroup/user.slice/a.scope")
        );
        assert_eq!(
            Mounts::place(Path::new("/sys/fs/cgroup"), "/ns", "/ns/x"),
            Path::new("/sys/fs/cgroup/x")
        );
        assert_eq!(unescape(r"/a\040b"), "/a b");
    }

    #[test]
    fn limits_are_written_in_each_hierarchys_terms() {
        let l = Limits {
            memory: Some(1 << 30),
            pids: Some(64),
            cpu: Some(1.5),
        };
        assert_eq!(
            Controller::Cpu.settings(&l, true),
            [("cpu.max", "150000 100000".to_string())]
        );
        assert_eq!(
            Controller::Memory.settings(&l, false),
            [("memory.limit_in_bytes", (1u64 << 30).to_string())]
        );
        assert_eq!(
            Controller::Pids.settings(&l, true),
            [("pids.max", "64".to_string())]
        );
    }
}
