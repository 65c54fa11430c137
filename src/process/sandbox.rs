//! Kernel confinement of an item's processes: what they may write and read, whom they may
//! signal, whether they reach the network.
//!
//! An agent is untrusted code running with the user's uid, and a gate runs what the agent
//! wrote, so only the kernel can keep an item to its own work. Each worker, gate and worktree
//! setup is started under:
//!
//! - **Landlock** (the `landlock` crate builds the ruleset; the child restricts itself with it
//!   between `clone` and `execve`, see `launch.rs`). The rules, each with its reason:
//!   - *writes* (every write right Landlock has but device ioctls: create, remove, rename,
//!     link, truncate, write) only beneath the item's checkout, its git folder in a worktree
//!     (`.git/worktrees/<name>`, for its index and HEAD), the repository's object store (so the
//!     item's own `git add` works; objects are named by their content, so a new one changes
//!     none other), the item's private `TMPDIR`, its usage folder, its build cache, the
//!     manifest's `sandbox.writable`, and the few device files every program writes
//!     (`/dev/null`, `/dev/tty`, `/dev/pts`, `/dev/shm`, …). Nothing else: not the
//!     repository's `config`, `hooks/`, `refs/`, `packed-refs` or `info/`, not another item's
//!     checkout, not runner's ledger, reports, workspace, manifest or gate scripts, not the
//!     user's home. (An item working in the repository's own checkout, not a worktree, has the
//!     whole checkout, `.git` included: Landlock cannot carve a folder out of a writable one.
//!     There runner's check of the shared git state after the item is what protects it.)
//!   - reads are not restricted by Landlock (it grants, it cannot deny beneath a grant: hiding
//!     one file that way means granting every sibling on the way down to it, and whatever is
//!     made beside them later — `~/.claude.json` written by the agent — could not be read).
//!   - *scopes*: no signal to a process outside the item's own domain (runner, another item),
//!     no connection to an abstract Unix socket outside it.
//!   - Being in a domain of its own also keeps the item from `ptrace` and from
//!     `/proc/<pid>/environ`, `mem` and `cwd` of every process outside it: runner's
//!     environment and another item's secrets are out of its reach.
//! - **A user namespace** of the item's own, mapping the user to itself: the item keeps its
//!   uid and files, but has no capability outside the namespace. The kernel lets a process
//!   read another's memory or environment (`/proc/<pid>/environ`, `mem`, `maps`) only with
//!   the same user namespace and no fewer capabilities, or `CAP_SYS_PTRACE` over it: so no
//!   item reads runner's (root's included) or another item's. (Landlock's own ptrace rule does
//!   not cover those reads on every kernel: seen reading a peer's `environ` on Linux 6.18.)
//!   runner also makes itself not dumpable. Where no user namespace can be made, a confined
//!   item run as root loses `CAP_SYS_PTRACE` instead.
//! - **A pid namespace** of the item's own command, with a `/proc` of its own: it sees no
//!   process but its own (not another item's command line, not runner's). The child is made in
//!   it as its first process and starts the program as the second (signals reach the program
//!   as anywhere); when the program ends, the first process ends, and the kernel ends whatever
//!   the program left in the namespace.
//! - **A mount namespace** of the item's own (inside its user namespace) in which runner's
//!   ledger files — which hold the verdicts' seal key — are covered by `/dev/null`, and the
//!   manifest's other repositories and other items' worktrees by an empty read-only tmpfs:
//!   there, but empty. Nothing mounted there reaches the user's.
//! - **Read-only mounts**: in that mount namespace every mount is made read-only but binds of
//!   what the item may write (made first, so that they stay writable). Landlock does not cover
//!   a file's mode, owner, times or extended attributes; a read-only mount does.
//! - **A network namespace** for `network: none`: loopback only, made by the child itself
//!   (inside its user namespace, or directly where runner may). For `network: [hosts…]`, the
//!   same, and a proxy listener there served by runner (`egress.rs`).
//! - **A record of what was denied** (`denials.rs`): a seccomp filter hands runner each call
//!   that writes by name; runner lets it go on and records those outside the rules.
//!
//! Where the kernel lacks a part, `best-effort` runs without it and says what is missing;
//! `required` refuses to start.

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope,
};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// The newest Landlock ABI runner asks for (scopes came with 6).
const ABI_WANTED: ABI = ABI::V6;

/// What this kernel can confine with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Support {
    /// The Landlock ABI version, when Landlock is enabled.
    pub landlock: Option<i32>,
    /// Whether a child can get a user namespace of its own.
    pub userns: bool,
    /// Whether a child can get a pid namespace with a `/proc` of its own (in its user
    /// namespace).
    pub pidns: bool,
    /// Whether a child can get a network namespace of its own, and how.
    pub netns: NetnsSupport,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetnsSupport {
    /// runner may make one (root, or `CAP_SYS_ADMIN`).
    Direct,
    /// Only inside a user namespace of the child's own.
    InUserNamespace,
    Unavailable,
}

/// The kernel's Landlock ABI, or `None` where it is disabled or absent.
pub fn landlock_abi() -> Option<i32> {
    static ABI_VERSION: std::sync::OnceLock<Option<i32>> = std::sync::OnceLock::new();
    *ABI_VERSION.get_or_init(|| {
        let v = super::launch::landlock_abi_version();
        (v > 0).then_some(v)
    })
}

/// What this kernel gives, probed once per process (each namespace by a forked child that
/// makes it).
pub fn support() -> Support {
    static SUPPORT: std::sync::OnceLock<Support> = std::sync::OnceLock::new();
    SUPPORT
        .get_or_init(|| {
            let userns = super::launch::probe_namespaces(true, false);
            let netns = if super::launch::probe_namespaces(false, true) {
                NetnsSupport::Direct
            } else if userns && super::launch::probe_namespaces(true, true) {
                NetnsSupport::InUserNamespace
            } else {
                NetnsSupport::Unavailable
            };
            Support {
                landlock: landlock_abi(),
                userns,
                pidns: userns && super::launch::probe_pid_namespace(),
                netns,
            }
        })
        .clone()
}

/// What one command of an item may touch.
#[derive(Clone, Debug, Default)]
pub struct Rules {
    /// Folders (and files) it may write beneath.
    pub writable: Vec<PathBuf>,
    /// Those of them where it may make only files and folders (git's: no FIFO, device, socket
    /// or link).
    pub plain: Vec<PathBuf>,
    /// Files it may not read: covered by `/dev/null` in its own mount namespace.
    pub hidden: Vec<PathBuf>,
    /// Folders it may not read: covered by an empty tmpfs there.
    pub hidden_dirs: Vec<PathBuf>,
    /// Folders covered whole, with only the entries that hold something it may write bound
    /// back ([`plan_covers`]).
    pub covered: Vec<PathBuf>,
    /// No network but its own loopback.
    pub no_network: bool,
    /// With no network: the hosts it reaches all the same, through runner's proxy.
    pub allow: Option<std::sync::Arc<super::egress::Allow>>,
}

/// A confinement ready for children: the Landlock ruleset (a descriptor each child restricts
/// itself with) and the namespaces it makes.
#[derive(Debug)]
pub struct Confinement {
    pub(super) write: Option<OwnedFd>,
    pub(super) userns: bool,
    /// A pid namespace of its own, with its own `/proc` (with the user namespace only).
    pub(super) pidns: bool,
    pub(super) netns: bool,
    /// Files covered by `/dev/null`, folders by an empty tmpfs, for the child (with a user
    /// namespace only).
    pub(super) hide: Vec<PathBuf>,
    pub(super) hide_dirs: Vec<PathBuf>,
    /// Folders most of whose entries are hidden: covered whole, what the item may see of them
    /// bound back ([`plan_covers`]).
    pub(super) covers: Vec<Cover>,
    /// What stays writable when every mount is made read-only in its mount namespace (with a
    /// user namespace only): the folders it may write, a file it may write outside them, and
    /// POSIX shared memory.
    pub(super) keep_writable: Vec<PathBuf>,
    /// Where the command may write, canonical, when runner records what it tries to write
    /// elsewhere (`denials.rs`; with Landlock in force only).
    pub(super) record: Option<std::sync::Arc<Vec<PathBuf>>>,
    /// The hosts it reaches through runner's proxy (`egress.rs`), in a network namespace of
    /// its own.
    pub(super) allow: Option<std::sync::Arc<super::egress::Allow>>,
}

impl Confinement {
    /// The ruleset's descriptor, for the child (-1: none).
    pub(super) fn ruleset_fd(&self) -> i32 {
        use std::os::fd::AsRawFd;
        self.write.as_ref().map_or(-1, AsRawFd::as_raw_fd)
    }
}

/// The device files every program may write.
pub const DEVICE_FILES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
];

/// Device folders every program may write beneath: terminals it opens, POSIX shared memory.
pub const DEVICE_DIRS: &[&str] = &["/dev/pts", "/dev/shm"];

/// Build the confinement of `rules`. Errors say which part could not be had; the caller
/// decides (best-effort runs without it, required refuses).
pub fn build(rules: &Rules, listings: &Listings) -> Result<Confinement, String> {
    let support = support();
    let write = match support.landlock {
        Some(_) => Some(write_layer(rules).map_err(|e| format!("landlock: {e}"))?),
        None => None,
    };
    let no_network = rules.no_network || rules.allow.is_some();
    if no_network && support.netns == NetnsSupport::Unavailable {
        return Err(
            "network none: this kernel gives no network namespace (neither to runner nor in a user namespace)"
                .into(),
        );
    }
    let covered = |paths: &[PathBuf]| {
        if support.userns {
            paths.to_vec()
        } else {
            Vec::new()
        }
    };
    let (hide_dirs, covers) = plan_covers(
        &covered(&rules.hidden_dirs),
        &rules.writable,
        &covered(&rules.covered),
        listings,
    );
    let record = (write.is_some() && super::denials::supported()).then(|| {
        std::sync::Arc::new(
            rules
                .writable
                .iter()
                .filter_map(|p| std::fs::canonicalize(p).ok())
                // The device files and folders every program may write are no denial either.
                .chain(DEVICE_FILES.iter().chain(DEVICE_DIRS).map(PathBuf::from))
                .collect(),
        )
    });
    let keep_writable = if support.userns {
        let dirs: Vec<&PathBuf> = rules.writable.iter().filter(|p| p.is_dir()).collect();
        rules
            .writable
            .iter()
            .filter(|p| p.is_dir() || (p.exists() && !dirs.iter().any(|d| p.starts_with(d))))
            .cloned()
            .chain(
                ["/dev/shm"]
                    .iter()
                    .map(PathBuf::from)
                    .filter(|p| p.is_dir()),
            )
            .collect()
    } else {
        Vec::new()
    };
    Ok(Confinement {
        write,
        record,
        allow: rules.allow.clone(),
        keep_writable,
        userns: support.userns,
        pidns: support.pidns,
        netns: no_network,
        hide: covered(&rules.hidden),
        hide_dirs,
        covers,
    })
}

/// A folder covered whole by an empty read-only tmpfs in the item's mount namespace, with the
/// entries the item may see bound back into it (as they are: each the same files, its own
/// mounts with it) and its links made again. One mount and one bind per entry kept, where
/// covering each hidden entry alone costs a tmpfs each: 199 of 200 repositories in one folder
/// are one mount, not 199, for every command an item starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cover {
    pub dir: PathBuf,
    pub keep: Vec<(std::ffi::OsString, Kept)>,
}

/// An entry of a covered folder the item may see, by what it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kept {
    Dir,
    /// Anything else but a link: bound onto a file made for it.
    File,
    /// A symbolic link, made again with its target.
    Link(PathBuf),
}

/// Whether folder `dir` may be covered by a tmpfs for a command that writes `writable`: not
/// `/`, and not a folder something it may write is or holds (a tmpfs there would take the writes
/// away).
fn may_cover(dir: &Path, writable: &[PathBuf]) -> bool {
    dir.parent().is_some() && !writable.iter().any(|w| dir.starts_with(w))
}

/// Whether [`build`] covers folder `dir` whole (as one of `Rules::covered`) for a command that
/// writes `writable`: what is in it is out of sight but for what `writable` needs.
pub fn covered_whole(dir: &Path, writable: &[PathBuf]) -> bool {
    support().userns && may_cover(dir, writable)
}

/// Whether `path` is plain: absolute, no `.` or `..`, no doubled or trailing separator — as every
/// path runner makes by joining names to an absolute one is. Two plain paths name the same
/// place exactly when their bytes are the same, which makes [`within`] and [`first_beneath`]
/// byte comparisons.
fn plain(path: &[u8]) -> bool {
    if path.first() != Some(&b'/') {
        return false;
    }
    if path.len() == 1 {
        return true;
    }
    // One pass over the bytes (asked thousands of times an item at a thousand repositories):
    // each component's length so far, and whether it is all dots.
    let bad = |len: usize, dots: bool| len == 0 || (dots && len <= 2);
    let (mut len, mut dots) = (0usize, true);
    for &c in &path[1..] {
        if c == b'/' {
            if bad(len, dots) {
                return false;
            }
            (len, dots) = (0, true);
        } else {
            len += 1;
            dots &= c == b'.';
        }
    }
    !bad(len, dots)
}

/// [`plain`], of a path.
pub(crate) fn plain_path(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    plain(path.as_os_str().as_bytes())
}

/// `Path::starts_with`: whether `path` is `dir` or lies beneath it — by the paths' bytes where
/// both are [`plain`], component by component otherwise. Asked of every repository for every
/// item and command: a thousand repositories' paths taken apart component by component cost
/// milliseconds an item.
pub(crate) fn within(path: &Path, dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let (p, d) = (path.as_os_str().as_bytes(), dir.as_os_str().as_bytes());
    if !plain(p) || !plain(d) {
        return path.starts_with(dir);
    }
    within_plain(p, d)
}

/// [`within`] of two paths known to be [`plain`], by their bytes.
pub(crate) fn within_plain(path: &[u8], dir: &[u8]) -> bool {
    path.strip_prefix(dir)
        .is_some_and(|rest| dir == b"/" || rest.is_empty() || rest.starts_with(b"/"))
}

/// The name of the entry of folder `dir` that `path` is or lies beneath (`Path::strip_prefix`
/// and the first component of the rest), by bytes where both are [`plain`].
fn first_beneath<'a>(path: &'a Path, dir: &Path) -> Option<&'a std::ffi::OsStr> {
    use std::os::unix::ffi::OsStrExt;
    let (p, d) = (path.as_os_str().as_bytes(), dir.as_os_str().as_bytes());
    if !plain(p) || !plain(d) {
        let rest = path.strip_prefix(dir).ok()?;
        return match rest.components().next()? {
            std::path::Component::Normal(n) => Some(n),
            _ => None,
        };
    }
    let rest = p.strip_prefix(d)?;
    let rest = if d == b"/" {
        rest
    } else {
        rest.strip_prefix(b"/")?
    };
    let first = rest.split(|c| *c == b'/').next()?;
    (!first.is_empty()).then(|| std::ffi::OsStr::from_bytes(first))
}

/// Entries bound back into one covered folder at most: past that, its hidden entries are
/// covered each alone.
const MAX_KEPT: usize = 64;

/// Which of the `hidden` folders are covered each alone, and which folders are covered whole
/// ([`Cover`]): each of `whole` (but for its entries that hold something the item may write),
/// and a folder holding at least four hidden ones, more than twice as many as its entries that
/// are not (but for those). Never a folder that something the item may write is or holds (a
/// tmpfs there would take writes away), `/`, or one that cannot be read. A hidden entry that is
/// a link stays covered alone (a mount follows the link to what it hides; removing the link
/// would leave its target in sight); one inside a folder covered whole, not bound back, needs
/// nothing more. Deepest folders first, so that a folder covered within a kept entry of another
/// goes along with it when that is bound back.
pub(crate) fn plan_covers(
    hidden: &[PathBuf],
    writable: &[PathBuf],
    whole: &[PathBuf],
    listings: &Listings,
) -> (Vec<PathBuf>, Vec<Cover>) {
    use std::collections::{BTreeMap, HashSet};
    let may_cover = |dir: &Path| may_cover(dir, writable);
    let mut covers = Vec::new();
    for dir in whole.iter().filter(|d| may_cover(d)) {
        if let Some(cover) = whole_cover(dir, writable) {
            covers.push(cover);
        }
    }
    // Out of sight already: beneath an entry of a folder covered whole that is not bound back.
    // Asked of every other repository for every command an item starts: by bytes (see
    // `first_beneath`), a thousand repositories' paths taken apart component by component cost
    // 0.8 ms a command.
    let unseen = |h: &Path| {
        covers.iter().any(|c: &Cover| {
            first_beneath(h, &c.dir)
                .is_some_and(|first| !c.keep.iter().any(|(name, _)| name.as_os_str() == first))
        })
    };
    // Keyed by the folder's bytes: the same folder is the same bytes here (every path is made
    // by joining names to a plain absolute one), and bytes compare faster than components.
    let mut by_parent: BTreeMap<&std::ffi::OsStr, (&Path, Vec<&PathBuf>)> = BTreeMap::new();
    let mut alone: Vec<PathBuf> = Vec::new();
    for h in hidden.iter().filter(|h| !unseen(h)) {
        match (h.parent(), h.file_name()) {
            (Some(p), Some(_)) if p.parent().is_some() => by_parent
                .entry(p.as_os_str())
                .or_insert_with(|| (p, Vec::new()))
                .1
                .push(h),
            _ => alone.push(h.clone()),
        }
    }
    for (_, (dir, hs)) in by_parent {
        let cover = (hs.len() >= 4 && may_cover(dir) && !covers.iter().any(|c| c.dir == dir))
            .then(|| cover_of(dir, &hs, listings))
            .flatten();
        match cover {
            Some((cover, links)) => {
                alone.extend(links);
                covers.push(cover);
            }
            None => alone.extend(hs.into_iter().cloned()),
        }
    }
    covers.sort_by_key(|c: &Cover| std::cmp::Reverse(c.dir.components().count()));
    return (alone, covers);

    /// `dir` covered with only its entries that hold something writable kept; `None` when it
    /// is no folder that can be looked at. The kept entries are found from the writable paths,
    /// not by listing `dir`: a folder of every repository's temporary folder or worktrees holds
    /// hundreds, and this runs for every command of every item.
    fn whole_cover(dir: &Path, writable: &[PathBuf]) -> Option<Cover> {
        if !std::fs::metadata(dir).ok()?.is_dir() {
            return None;
        }
        let mut names: Vec<&std::ffi::OsStr> = writable
            .iter()
            .filter_map(|w| w.strip_prefix(dir).ok()?.components().next())
            .filter_map(|c| match c {
                std::path::Component::Normal(n) => Some(n),
                _ => None,
            })
            .collect();
        names.sort();
        names.dedup();
        let mut keep = Vec::new();
        for name in names {
            let path = dir.join(name);
            // Not there: nothing to bind back (the kernel grants what exists).
            let Ok(m) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            let kept = if m.file_type().is_symlink() {
                Kept::Link(std::fs::read_link(&path).ok()?)
            } else if m.is_dir() {
                Kept::Dir
            } else {
                Kept::File
            };
            keep.push((name.to_os_string(), kept));
        }
        Some(Cover {
            dir: dir.to_path_buf(),
            keep,
        })
    }

    /// `dir` covered with all but `hs` kept, and the hidden links to cover alone; `None` when
    /// that is not worth it or `dir` cannot be read.
    fn cover_of(dir: &Path, hs: &[&PathBuf], listings: &Listings) -> Option<(Cover, Vec<PathBuf>)> {
        let names: HashSet<&std::ffi::OsStr> = hs.iter().filter_map(|h| h.file_name()).collect();
        let listed = listings.of(dir)?;
        let mut keep = Vec::new();
        let mut links = Vec::new();
        for (name, kept) in listed.iter() {
            if names.contains(name.as_os_str()) {
                if matches!(kept, Kept::Link(_)) {
                    links.push(dir.join(name));
                }
                continue;
            }
            keep.push((name.clone(), kept.clone()));
            if keep.len() > MAX_KEPT {
                return None;
            }
        }
        let hidden_here = names.len() - links.len();
        (hidden_here > 2 * keep.len() + 1).then(|| {
            (
                Cover {
                    dir: dir.to_path_buf(),
                    keep,
                },
                links,
            )
        })
    }
}

/// The entries of the folders covered whole, each as what it is (a link with its target), as
/// they were last listed: kept for a run, so that a folder of a thousand repositories is listed
/// once, not for every item (0.55 ms each). A listing is used again only while the folder's
/// change time is the one it had and was already a second old when it was listed: a name added,
/// removed or renamed in it since (a link made again, a file replaced) gives it a new one, which
/// nobody can set back (a change within the same clock tick as the last is what the second
/// guards against).
#[derive(Debug, Default)]
pub struct Listings {
    by_dir: std::sync::Mutex<std::collections::HashMap<PathBuf, Listing>>,
}

/// A folder's entries, and its change time when they were listed.
#[derive(Debug)]
struct Listing {
    stamp: (u64, u64, i64, i64),
    entries: std::sync::Arc<Vec<(std::ffi::OsString, Kept)>>,
}

impl Listings {
    /// The entries of folder `dir`; `None` when it cannot be read whole.
    fn of(&self, dir: &Path) -> Option<std::sync::Arc<Vec<(std::ffi::OsString, Kept)>>> {
        use std::os::unix::fs::MetadataExt;
        let stamp_of = |m: &std::fs::Metadata| (m.dev(), m.ino(), m.ctime(), m.ctime_nsec());
        let before = std::fs::symlink_metadata(dir).ok()?;
        if !before.is_dir() {
            return None;
        }
        let stamp = stamp_of(&before);
        if let Ok(known) = self.by_dir.lock()
            && let Some(l) = known.get(dir)
            && l.stamp == stamp
        {
            return Some(l.entries.clone());
        }
        let started = std::time::SystemTime::now();
        let mut entries = Vec::new();
        for entry in std::fs::read_dir(dir).ok()? {
            let entry = entry.ok()?;
            let kind = entry.file_type().ok()?;
            let kept = if kind.is_symlink() {
                Kept::Link(std::fs::read_link(entry.path()).ok()?)
            } else if kind.is_dir() {
                Kept::Dir
            } else {
                Kept::File
            };
            entries.push((entry.file_name(), kept));
        }
        let entries = std::sync::Arc::new(entries);
        // Kept only when the folder had not changed for a second: a change within the clock
        // tick of the last one would leave its time as it was.
        let settled = std::fs::symlink_metadata(dir).is_ok_and(|after| stamp_of(&after) == stamp)
            && crate::support::fs::settled(stamp.2, stamp.3, started);
        if settled && let Ok(mut known) = self.by_dir.lock() {
            known.insert(
                dir.to_path_buf(),
                Listing {
                    stamp,
                    entries: entries.clone(),
                },
            );
        }
        Some(entries)
    }
}

/// Grant `access` beneath `path` (a file: the file's share of it); a path not there (gone
/// since it was listed, an optional device) is nothing to grant.
fn grant(
    ruleset: &mut landlock::RulesetCreated,
    path: &Path,
    access: landlock::BitFlags<AccessFs>,
) -> Result<(), Box<dyn std::error::Error>> {
    let Ok(fd) = PathFd::new(path) else {
        return Ok(());
    };
    let is_dir = std::fs::metadata(path).map(|m| m.is_dir()).unwrap_or(false);
    let access = if is_dir {
        access
    } else {
        access & AccessFs::from_file(ABI_WANTED)
    };
    ruleset
        .as_mut()
        .add_rule(PathBeneath::new(fd, access).set_compatibility(CompatLevel::BestEffort))?;
    Ok(())
}

/// The command's own layer: writes where it may, and signals and abstract sockets kept within
/// the item.
fn write_layer(rules: &Rules) -> Result<OwnedFd, Box<dyn std::error::Error>> {
    let write = AccessFs::from_write(ABI_WANTED) & !AccessFs::IoctlDev;
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(write)?
        .scope(Scope::from_all(ABI_WANTED))?
        .create()?;
    let plain = write
        & !(AccessFs::MakeFifo
            | AccessFs::MakeSock
            | AccessFs::MakeChar
            | AccessFs::MakeBlock
            | AccessFs::MakeSym);
    for path in &rules.writable {
        let access = if rules.plain.contains(path) {
            plain
        } else {
            write
        };
        grant(&mut ruleset, path, access)?;
    }
    for path in DEVICE_FILES {
        grant(
            &mut ruleset,
            Path::new(path),
            AccessFs::WriteFile | AccessFs::Truncate,
        )?;
    }
    for dir in DEVICE_DIRS {
        grant(&mut ruleset, Path::new(dir), write)?;
    }
    let fd: Option<OwnedFd> = ruleset.into();
    fd.ok_or_else(|| "the kernel gave no ruleset".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// A path is plain exactly when it is absolute, has no `..`, and its components put
        /// together again are the same bytes (no `.`, no doubled or trailing separator).
        #[test]
        fn a_plain_path_is_its_components(
            parts in proptest::collection::vec(proptest::sample::select(vec!["", ".", "..", "a", ".a", "..a", "a.", "a..", "..."]), 0..6),
            rooted in proptest::bool::ANY,
            trailing in proptest::bool::ANY,
        ) {
            let mut s = if rooted { String::from("/") } else { String::new() };
            s.push_str(&parts.join("/"));
            if trailing {
                s.push('/');
            }
            let path = PathBuf::from(&s);
            let again: PathBuf = path.components().collect();
            let by_components = path.is_absolute()
                && !path.components().any(|c| c == std::path::Component::ParentDir)
                && again.as_os_str() == path.as_os_str();
            proptest::prop_assert_eq!(plain_path(&path), by_components, "{:?}", s);
        }

        /// Whether a path lies beneath another, and the entry it lies beneath, by bytes, are
        /// what `Path::starts_with`, `Path::strip_prefix` and the rest's first component say,
        /// for paths of every shape (`.`, `..`, doubled and trailing separators, relative ones).
        #[test]
        fn paths_compared_by_bytes_answer_as_by_components(
            a in proptest::collection::vec(proptest::sample::select(vec!["", ".", "..", "a", "b", "ab"]), 0..5),
            b in proptest::collection::vec(proptest::sample::select(vec!["", ".", "..", "a", "b", "ab"]), 0..5),
            rooted in proptest::bool::ANY,
            trailing in proptest::bool::ANY,
        ) {
            let make = |parts: &[&str], slash: bool| {
                let mut s = if rooted { String::from("/") } else { String::new() };
                s.push_str(&parts.join("/"));
                if slash {
                    s.push('/');
                }
                PathBuf::from(s)
            };
            let (path, dir) = (make(&a, false), make(&b, trailing));
            let by_components = path.strip_prefix(&dir).ok().and_then(|r| match r.components().next() {
                Some(std::path::Component::Normal(n)) => Some(n.to_os_string()),
                _ => None,
            });
            proptest::prop_assert_eq!(
                first_beneath(&path, &dir).map(|n| n.to_os_string()),
                by_components,
                "{:?} in {:?}",
                path,
                dir
            );
            proptest::prop_assert_eq!(within(&path, &dir), path.starts_with(&dir), "{:?} within {:?}", path, dir);
        }
    }

    #[test]
    fn a_folder_listed_once_is_listed_again_when_it_changes() {
        let d = tempfile::tempdir().unwrap();
        let repos = d.path().join("repos");
        for r in ["a", "b", "c", "d", "e", "g", "h"] {
            std::fs::create_dir_all(repos.join(r)).unwrap();
        }
        std::os::unix::fs::symlink("/one", repos.join("link")).unwrap();
        let listings = Listings::default();
        // Changed within the last second: listed each time, never kept.
        let first = listings.of(&repos).unwrap();
        assert!(!std::sync::Arc::ptr_eq(
            &first,
            &listings.of(&repos).unwrap()
        ));
        std::thread::sleep(std::time::Duration::from_millis(1100));
        let settled = listings.of(&repos).unwrap();
        assert!(std::sync::Arc::ptr_eq(
            &settled,
            &listings.of(&repos).unwrap()
        ));
        // A link made again with another target, an entry added: seen at once.
        std::fs::remove_file(repos.join("link")).unwrap();
        std::os::unix::fs::symlink("/two", repos.join("link")).unwrap();
        std::fs::create_dir(repos.join("f")).unwrap();
        let again = listings.of(&repos).unwrap();
        let mut names: Vec<_> = again.iter().map(|(n, k)| (n.clone(), k.clone())).collect();
        names.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(names.len(), 9);
        assert!(names.contains(&("link".into(), Kept::Link("/two".into()))));
        assert!(names.iter().any(|(n, _)| n == "f"));
        // The cover planned from it hides the new one too.
        let hidden: Vec<PathBuf> = ["b", "c", "d", "e", "f", "g", "h"]
            .iter()
            .map(|r| repos.join(r))
            .collect();
        let (_, covers) = plan_covers(&hidden, &[repos.join("a")], &[], &listings);
        assert_eq!(covers.len(), 1);
        let mut kept: Vec<_> = covers[0].keep.iter().map(|(n, _)| n.clone()).collect();
        kept.sort();
        assert_eq!(kept, vec![std::ffi::OsString::from("a"), "link".into()]);
    }

    #[test]
    fn a_folder_covered_whole_keeps_only_the_entries_holding_something_writable() {
        let d = tempfile::tempdir().unwrap();
        let tmp = d.path().join("tmp");
        for r in ["alpha", "beta", "gamma"] {
            std::fs::create_dir_all(tmp.join(r)).unwrap();
        }
        std::fs::write(tmp.join("note"), "").unwrap();
        std::os::unix::fs::symlink("/nowhere", tmp.join("link")).unwrap();
        let writable = vec![
            tmp.join("beta"),
            tmp.join("link/deeper"),
            tmp.join("note"),
            tmp.join("not-made-yet/x"),
            d.path().join("elsewhere"),
        ];
        let (alone, covers) = plan_covers(
            &[],
            &writable,
            std::slice::from_ref(&tmp),
            &Listings::default(),
        );
        assert!(alone.is_empty());
        assert_eq!(
            covers,
            vec![Cover {
                dir: tmp.clone(),
                keep: vec![
                    ("beta".into(), Kept::Dir),
                    ("link".into(), Kept::Link("/nowhere".into())),
                    ("note".into(), Kept::File),
                ],
            }]
        );
        // A folder that is writable itself, or not there, is not covered.
        let (_, covers) = plan_covers(
            &[],
            std::slice::from_ref(&tmp),
            std::slice::from_ref(&tmp),
            &Listings::default(),
        );
        assert!(covers.is_empty());
        let (_, covers) = plan_covers(
            &[],
            &writable,
            &[d.path().join("absent")],
            &Listings::default(),
        );
        assert!(covers.is_empty());
    }
}
