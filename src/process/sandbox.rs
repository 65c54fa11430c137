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
//!   - *reads* everywhere but runner's ledger (which holds the verdicts' seal key). Landlock
//!     grants, it cannot deny beneath a grant, so "everything but" is granted as the siblings
//!     of each folder on the way down to what is hidden; those folders themselves cannot be
//!     listed (their entries can still be opened by name). This layer is made once per run
//!     and stacked under each command's write layer (a second Landlock layer: what either
//!     denies is denied).
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
//! - **A network namespace** for `network: none`: loopback only, made by the child itself
//!   (inside its user namespace, or directly where runner may).
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
    /// No network but its own loopback.
    pub no_network: bool,
}

/// The layer that keeps what is hidden from every item's reads: made once per run (listing
/// the folders on the way down to what is hidden costs more than all of a command's other
/// rules), shared by every command, which stacks it under its own write layer.
#[derive(Debug)]
pub struct ReadLayer(OwnedFd);

/// A confinement ready for children: the Landlock rulesets (descriptors each child restricts
/// itself with: the run's read layer, then its own write layer) and the namespaces it makes.
#[derive(Debug)]
pub struct Confinement {
    pub(super) read: Option<std::sync::Arc<ReadLayer>>,
    pub(super) write: Option<OwnedFd>,
    pub(super) userns: bool,
    pub(super) netns: bool,
    /// What is in force, in words (`landlock ABI 6; network none`).
    pub summary: String,
}

impl Confinement {
    /// The rulesets' descriptors, for the child.
    pub(super) fn ruleset_fds(&self) -> [i32; 2] {
        use std::os::fd::AsRawFd;
        [
            self.read.as_ref().map_or(-1, |r| r.0.as_raw_fd()),
            self.write.as_ref().map_or(-1, AsRawFd::as_raw_fd),
        ]
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

/// The read layer hiding `hidden` (nothing to hide, or no Landlock: none).
pub fn read_layer(hidden: &[PathBuf]) -> Result<Option<std::sync::Arc<ReadLayer>>, String> {
    let hidden = canonical_all(hidden);
    if hidden.is_empty() || landlock_abi().is_none() {
        return Ok(None);
    }
    let build = || -> Result<OwnedFd, Box<dyn std::error::Error>> {
        let read = AccessFs::ReadFile | AccessFs::ReadDir;
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(read)?
            .create()?;
        for path in readable_roots(&hidden, &mut list_dir) {
            grant(&mut ruleset, &path, read)?;
        }
        let fd: Option<OwnedFd> = ruleset.into();
        fd.ok_or_else(|| "the kernel gave no ruleset".into())
    };
    build()
        .map(|fd| Some(std::sync::Arc::new(ReadLayer(fd))))
        .map_err(|e| format!("landlock: {e}"))
}

/// Build the confinement of `rules` over the run's `read` layer. Errors say which part could
/// not be had; the caller decides (best-effort runs without it, required refuses).
pub fn build(
    rules: &Rules,
    read: Option<&std::sync::Arc<ReadLayer>>,
) -> Result<Confinement, String> {
    let support = support();
    let mut parts = Vec::new();
    let write = match support.landlock {
        Some(abi) => {
            let fd = write_layer(rules).map_err(|e| format!("landlock: {e}"))?;
            parts.push(format!("landlock ABI {abi}"));
            Some(fd)
        }
        None => None,
    };
    if support.userns {
        parts.push("user namespace".into());
    }
    let netns = rules.no_network;
    if netns {
        match support.netns {
            NetnsSupport::Unavailable => {
                return Err(
                    "network none: this kernel gives no network namespace (neither to runner nor in a user namespace)"
                        .into(),
                );
            }
            _ => parts.push("network none".into()),
        }
    }
    Ok(Confinement {
        read: read.cloned(),
        write,
        userns: support.userns,
        netns,
        summary: parts.join("; "),
    })
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
    for path in &rules.writable {
        grant(&mut ruleset, path, write)?;
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

/// Paths as the kernel resolves them (links followed), those that exist.
fn canonical_all(paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = paths
        .iter()
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// A folder's entries as (path, is a real folder, where a link leads).
type Entry = (PathBuf, bool, Option<PathBuf>);

fn list_dir(dir: &Path) -> Option<Vec<Entry>> {
    let rd = std::fs::read_dir(dir).ok()?;
    let entries = rd
        .filter_map(Result::ok)
        .map(|e| {
            let path = e.path();
            let ft = e.file_type().ok();
            let is_dir = ft.is_some_and(|t| t.is_dir());
            let target = ft
                .filter(std::fs::FileType::is_symlink)
                .and_then(|_| std::fs::canonicalize(&path).ok());
            (path, is_dir, target)
        })
        .collect();
    Some(entries)
}

/// The fewest paths whose subtrees hold everything but `hidden` (canonical paths): each
/// folder on the way from `/` to something hidden is opened up into its entries, every entry
/// not on such a way granted whole. A link is granted (the kernel follows it) only when it
/// leads neither to nor above something hidden. A folder that cannot be listed (a runner
/// started inside an item, whose own confinement hides it) is granted whole: what hides it
/// still does.
pub(crate) fn readable_roots(
    hidden: &[PathBuf],
    list: &mut dyn FnMut(&Path) -> Option<Vec<Entry>>,
) -> Vec<PathBuf> {
    let root = PathBuf::from("/");
    if hidden.is_empty() {
        return vec![root];
    }
    if hidden.iter().any(|h| h == &root) {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(dir) = stack.pop() {
        let Some(entries) = list(&dir) else {
            out.push(dir);
            continue;
        };
        for (path, is_dir, target) in entries {
            if hidden.iter().any(|h| h == &path) {
                continue;
            }
            let above_hidden = hidden.iter().any(|h| h.starts_with(&path));
            if above_hidden {
                if is_dir {
                    stack.push(path);
                }
                continue;
            }
            if let Some(t) = &target
                && hidden.iter().any(|h| h.starts_with(t) || t.starts_with(h))
            {
                continue;
            }
            out.push(path);
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(paths: &[&str]) -> impl FnMut(&Path) -> Option<Vec<Entry>> {
        let all: Vec<PathBuf> = paths.iter().map(PathBuf::from).collect();
        move |dir: &Path| {
            let mut out = Vec::new();
            for p in &all {
                if p.parent() == Some(dir) {
                    let is_dir = all.iter().any(|q| q.parent() == Some(p.as_path()));
                    out.push((p.clone(), is_dir, None));
                }
            }
            Some(out)
        }
    }

    #[test]
    fn everything_but_what_is_hidden_is_granted_by_its_siblings() {
        let mut list = tree(&[
            "/usr",
            "/usr/bin",
            "/home",
            "/home/u",
            "/home/u/.cache",
            "/home/u/proj",
            "/home/u/proj/.runner",
            "/home/u/proj/.runner/state.db",
            "/home/u/proj/.runner/workspace",
            "/home/u/proj/m.yaml",
            "/home/other",
        ]);
        let hidden = vec![PathBuf::from("/home/u/proj/.runner/state.db")];
        let got = readable_roots(&hidden, &mut list);
        let want: Vec<PathBuf> = [
            "/home/other",
            "/home/u/.cache",
            "/home/u/proj/.runner/workspace",
            "/home/u/proj/m.yaml",
            "/usr",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_folder_that_cannot_be_listed_is_granted_whole() {
        let mut list =
            |dir: &Path| -> Option<Vec<Entry>> { (dir != Path::new("/")).then(Vec::new) };
        let got = readable_roots(&[PathBuf::from("/data/secret")], &mut list);
        assert_eq!(got, vec![PathBuf::from("/")]);
    }

    #[test]
    fn nothing_hidden_grants_the_root() {
        let mut list = tree(&["/usr"]);
        assert_eq!(readable_roots(&[], &mut list), vec![PathBuf::from("/")]);
    }

    #[test]
    fn a_link_to_or_above_a_hidden_path_is_not_granted() {
        let mut list = |dir: &Path| -> Option<Vec<Entry>> {
            Some(match dir.to_str() {
                Some("/") => vec![
                    (PathBuf::from("/data"), true, None),
                    (
                        PathBuf::from("/l1"),
                        false,
                        Some(PathBuf::from("/data/secret")),
                    ),
                    (PathBuf::from("/l2"), false, Some(PathBuf::from("/data"))),
                    (
                        PathBuf::from("/l3"),
                        false,
                        Some(PathBuf::from("/data/open")),
                    ),
                ],
                Some("/data") => vec![
                    (PathBuf::from("/data/secret"), true, None),
                    (PathBuf::from("/data/open"), true, None),
                ],
                _ => Vec::new(),
            })
        };
        let got = readable_roots(&[PathBuf::from("/data/secret")], &mut list);
        let want: Vec<PathBuf> = ["/data/open", "/l3"].iter().map(PathBuf::from).collect();
        assert_eq!(got, want);
    }
}
