//! Which confinement a run's items get (`sandbox:` in the manifest against what the kernel
//! gives), and the rules of one item's command: what it may write and what it may not read.
//! The kernel side is `process::sandbox`.

use crate::manifest::{LoadedManifest, NetworkPolicy, SandboxMode};
use crate::process::sandbox::{self, Confinement, NetnsSupport, Rules};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A run's confinement, decided once before anything runs.
#[derive(Clone, Debug)]
pub struct SandboxPlan {
    pub mode: SandboxMode,
    pub network: NetworkPolicy,
    /// `network: [hosts…]`, where it is in force: the hosts items reach through runner's proxy
    /// (their clients pointed at it by their environment).
    pub allow: Option<Arc<crate::process::egress::Allow>>,
    /// `sandbox.writable`, resolved.
    pub writable: Vec<PathBuf>,
    /// What no item may read: the ledger's files (covered by `/dev/null` for items).
    pub hidden: Vec<PathBuf>,
    /// Every repository's folder: an item reads only its own.
    pub repositories: Vec<PathBuf>,
    /// Where the items' worktrees are: an item reads only its own.
    pub worktrees: PathBuf,
    /// Where each repository's private temporary folder is (its items' `TMPDIR`, one item at a
    /// time): an item reads only its own repository's.
    pub tmp: PathBuf,
    /// What the kernel lacks of what the manifest asks (best-effort runs without it).
    pub missing: Vec<String>,
    /// Whether Landlock confines items' files.
    pub landlock: bool,
    /// In words: what each item runs under (`landlock ABI 7, network none`, `off`).
    pub summary: String,
    /// The folders covered whole, as last listed: one listing for the run's items while the
    /// folder is unchanged.
    pub listings: Arc<sandbox::Listings>,
    /// Every repository's folder is a plain path (`sandbox::plain_path`): told once for the run.
    pub plain_repositories: bool,
}

impl SandboxPlan {
    /// `containment` (how the run keeps items' processes together) with what confines them.
    pub fn with(&self, containment: String) -> String {
        format!("{containment}; sandbox: {}", self.summary)
    }

    /// Whether items are confined at all.
    pub fn active(&self) -> bool {
        self.mode != SandboxMode::Off
    }
}

/// Decide the run's confinement: `Err` (a message) where `required` cannot be had.
pub fn plan(
    loaded: &LoadedManifest,
    state: &Path,
    workspace: &Path,
    repositories: Vec<PathBuf>,
) -> Result<SandboxPlan, String> {
    let spec = loaded.manifest.sandbox.clone().unwrap_or_default();
    let (mode, network) = (spec.mode(), spec.network());
    let mut allow = match network {
        NetworkPolicy::Allow => Some(Arc::new(
            crate::process::egress::Allow::parse(spec.allowed_hosts())
                .map_err(|e| format!("sandbox.network: {e}"))?,
        )),
        _ => None,
    };
    // The operator's own additions, for every manifest run here (`RUNNER_SANDBOX_WRITABLE`,
    // folders separated by `:`): a machine's shared caches, say. An item cannot set runner's
    // environment, and a runner it starts runs inside its confinement whatever it is told.
    let from_env = &crate::support::settings::current().sandbox_writable;
    let writable = spec
        .writable
        .iter()
        .map(|w| resolve(&loaded.dir, w))
        .chain(from_env.iter().filter(|p| p.is_absolute()).cloned())
        .collect();
    let mut hidden = Vec::new();
    if !state.to_string_lossy().contains("://") {
        // As the kernel resolves it: the child covers it from another folder.
        let state = match (state.parent(), state.file_name()) {
            (Some(dir), Some(name)) => std::fs::canonicalize(if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            })
            .map(|d| d.join(name))
            .unwrap_or_else(|_| state.to_path_buf()),
            _ => state.to_path_buf(),
        };
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut p = state.as_os_str().to_owned();
            p.push(suffix);
            hidden.push(PathBuf::from(p));
        }
    }
    let (missing, summary) = if mode == SandboxMode::Off {
        (Vec::new(), "off".to_string())
    } else {
        let support = sandbox::support();
        let mut missing = Vec::new();
        let mut parts = Vec::new();
        match support.landlock {
            Some(abi) => parts.push(format!("landlock ABI {abi}")),
            None => missing.push(
                "Landlock (the kernel has it disabled or lacks it): items may write anywhere the user can".to_string(),
            ),
        }
        if support.userns {
            parts.push("user namespace".to_string());
            if support.pidns {
                parts.push("pid namespace".to_string());
            } else {
                missing.push(
                    "a pid namespace with its own /proc: an item sees the machine's processes and their command lines"
                        .to_string(),
                );
            }
        } else {
            missing.push(
                "a user namespace: an item may read runner's ledger, the other repositories and the environment of another item's processes"
                    .to_string(),
            );
        }
        if network == NetworkPolicy::Open {
            parts.push("network open".to_string());
        } else {
            match support.netns {
                NetnsSupport::Unavailable => {
                    allow = None;
                    missing.push(
                        "a network namespace (neither runner nor a user namespace may make one): items reach the network".to_string(),
                    );
                }
                NetnsSupport::Direct | NetnsSupport::InUserNamespace => {
                    parts.push(match network {
                        NetworkPolicy::Allow => format!(
                            "network only {} (through runner's proxy)",
                            spec.allowed_hosts().join(", ")
                        ),
                        _ => "network none".to_string(),
                    });
                }
            }
        }
        if mode == SandboxMode::Required && !missing.is_empty() {
            return Err(format!(
                "`sandbox.mode: required`, but this machine cannot confine items: {}",
                missing.join("; ")
            ));
        }
        let summary = if parts.iter().all(|p| !p.starts_with("landlock")) {
            format!("unconfined ({})", missing.join("; "))
        } else {
            parts.join(", ")
        };
        (missing, summary)
    };
    let landlock = mode != SandboxMode::Off && sandbox::landlock_abi().is_some();
    if mode == SandboxMode::Off {
        allow = None;
    }
    Ok(SandboxPlan {
        mode,
        network,
        allow,
        writable,
        hidden,
        worktrees: workspace.join("worktrees"),
        tmp: workspace.join("tmp"),
        missing,
        landlock,
        summary,
        listings: Arc::default(),
        plain_repositories: repositories.iter().all(|r| sandbox::plain_path(r)),
        repositories,
    })
}

/// A `sandbox.writable` entry as a path: `~/…` in the user's home, a relative one in the
/// manifest's folder.
fn resolve(dir: &Path, w: &str) -> PathBuf {
    if let (Some(rest), Some(home)) = (w.strip_prefix("~/"), std::env::var_os("HOME")) {
        return PathBuf::from(home).join(rest);
    }
    if Path::new(w).is_absolute() {
        PathBuf::from(w)
    } else {
        dir.join(w)
    }
}

/// What one item's commands may touch, besides the folder each runs in.
#[derive(Clone, Debug)]
pub struct ItemRules {
    /// The item's private temporary folder (`TMPDIR`).
    pub tmp: PathBuf,
    /// Folders it may write wherever its command runs.
    pub writable: Vec<PathBuf>,
    /// Each of `writable` as the kernel resolves it (links followed), told when the rules are
    /// made, before any of the item's processes runs.
    pub writable_real: Vec<PathBuf>,
    /// Git's folders among them (a worktree's own git folder, the object store), where it may
    /// make only files and folders: no FIFO, device, socket or link, which git never makes there
    /// and which runner's own git would wait on or follow.
    pub git: Vec<PathBuf>,
    /// Folders it may not read: the other repositories, the other items' worktrees, the other
    /// repositories' temporary folders.
    pub hidden_dirs: Vec<PathBuf>,
    /// Folders covered whole, but for the entries that hold something it may write: the
    /// workspace's worktrees and temporary folders, whose entries come and go while it runs
    /// (another item's, made after it started, is out of sight too).
    pub covered: Vec<PathBuf>,
    /// The confinement built for its last command and the folder that command ran in: the next
    /// command in the same folder (its gates after its worker) takes it as it is.
    pub built: Arc<std::sync::Mutex<Option<Built>>>,
}

/// A confinement built, and the folder its command ran in.
type Built = (PathBuf, Arc<Confinement>);

impl ItemRules {
    /// Whether `path` is beneath something the item may write (its own folders and
    /// `sandbox.writable`; not counting the folder a command runs in).
    pub fn may_write(&self, path: &Path) -> bool {
        let path = real(path);
        self.writable_real.iter().any(|w| path.starts_with(w))
    }

    /// Whether the kernel keeps the item from making anything but files and folders in `path`
    /// (given Landlock): it is beneath one of git's folders and beneath nothing else it may
    /// write, the folder its commands run in (`dir`) included.
    pub fn only_files_in(&self, path: &Path, dir: &Path) -> bool {
        let path = real(path);
        let (mut in_git, mut in_other) = (false, path.starts_with(real(dir)));
        for (w, r) in self.writable.iter().zip(&self.writable_real) {
            if path.starts_with(r) {
                if self.git.contains(w) {
                    in_git = true;
                } else {
                    in_other = true;
                }
            }
        }
        in_git && !in_other
    }
}

/// `path` as the kernel resolves it (links followed); as it is where it cannot be resolved.
fn real(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

impl SandboxPlan {
    /// The rules of an item working in `checkout`; its `tmp` folder (its repository's, kept
    /// between its items) emptied or made, `extra` (its build cache) made.
    pub fn item(
        &self,
        repo: &Path,
        checkout: &Path,
        tmp: PathBuf,
        extra: &[PathBuf],
    ) -> std::io::Result<ItemRules> {
        crate::support::fs::empty_dir(&tmp)?;
        // A declared folder not made yet is made, so that the CLI finds it writable (the
        // kernel grants what exists); a file (a name with an extension) is left to exist.
        for w in &self.writable {
            if !w.exists() && w.extension().is_none() {
                std::fs::create_dir_all(w)?;
            }
        }
        let mut writable = vec![tmp.clone()];
        for e in extra {
            std::fs::create_dir_all(e)?;
            writable.push(e.clone());
        }
        writable.extend(self.writable.iter().cloned());
        // A worktree's own git folder (its index and HEAD), and the object store its `git add`
        // writes to.
        let git = crate::git::worktree_git_dirs(checkout)
            .map(|(own, common)| vec![own, common.join("objects")])
            .unwrap_or_default();
        writable.extend(git.iter().cloned());
        // Another repository, or another item's worktree, is covered for it; never a folder
        // above what it works in or writes.
        let needs = Needed::new(checkout, repo, &writable);
        let needed = |d: &Path| needs.of(d);
        // The run's repositories were found plain once, not for each item.
        let repository_needed = |d: &Path| {
            if self.plain_repositories {
                needs.of_plain(d)
            } else {
                needs.of(d)
            }
        };
        let mut hidden_dirs: Vec<PathBuf> = self
            .repositories
            .iter()
            .filter(|r| !repository_needed(r))
            .cloned()
            .collect();
        // Other repositories' temporary folders: what their items left or are writing. Where
        // the folders holding them are covered whole (below) they are out of sight already, and
        // not listed: a drain over many repositories listed them all for every item.
        let whole = |d: &Path| sandbox::covered_whole(d, &writable);
        let tmp_listed = if whole(&self.tmp) {
            None
        } else {
            std::fs::read_dir(&self.tmp).ok()
        };
        for other in tmp_listed.into_iter().flatten().flatten() {
            let other = other.path();
            if other.is_dir() && !needed(&other) {
                hidden_dirs.push(other);
            }
        }
        let worktrees_listed = if whole(&self.worktrees) {
            None
        } else {
            std::fs::read_dir(&self.worktrees).ok()
        };
        for by_repo in worktrees_listed.into_iter().flatten().flatten() {
            for wt in std::fs::read_dir(by_repo.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                let wt = wt.path();
                if wt.is_dir() && !needed(&wt) {
                    hidden_dirs.push(wt);
                }
            }
        }
        // Those are listed as they are now; the folders holding them are covered whole
        // besides, so that one made after the item started is out of sight too.
        let covered = vec![self.worktrees.clone(), self.tmp.clone()];
        Ok(ItemRules {
            tmp,
            writable_real: writable.iter().map(|w| real(w)).collect(),
            writable,
            git,
            hidden_dirs,
            covered,
            built: Arc::default(),
        })
    }

    /// The confinement of a command of the item `rules` running in `dir`: built once for the
    /// item's commands in one folder. What it is built from is the item's (its rules, made when
    /// it starts) and the paths among them that exist, listed and granted when its first command
    /// starts; one made by a command afterwards is not granted to the next — and could not
    /// have been written by it either (the kernel grants only what exists). Built for every
    /// command, it cost 2 ms of each at 1,000 repositories (the folder of repositories listed to
    /// cover it, the other 999 copied and sorted).
    pub fn confinement(&self, rules: &ItemRules, dir: &Path) -> Result<Arc<Confinement>, String> {
        let mut built = rules.built.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, c)) = built.as_ref()
            && at == dir
        {
            return Ok(c.clone());
        }
        let c = self.build(rules, dir)?;
        *built = Some((dir.to_path_buf(), c.clone()));
        Ok(c)
    }

    /// [`SandboxPlan::confinement`], built.
    fn build(&self, rules: &ItemRules, dir: &Path) -> Result<Arc<Confinement>, String> {
        let mut writable = rules.writable.clone();
        writable.push(dir.to_path_buf());
        let r = Rules {
            writable,
            plain: rules.git.clone(),
            hidden: self.hidden.clone(),
            hidden_dirs: rules.hidden_dirs.clone(),
            covered: rules.covered.clone(),
            no_network: self.network == NetworkPolicy::None,
            allow: self.allow.clone(),
        };
        sandbox::build(&r, &self.listings).map(Arc::new)
    }
}

/// Which folders an item needs in sight: what it works in (`checkout`), its repository, what it
/// writes, and every folder above them; and what lies in its repository. Asked of every
/// repository of the plan for every item. Where every path is plain (as runner makes them), a
/// folder is above one of them exactly when its bytes are one of their prefixes that ends at a
/// separator: looked up in a set of those rather than compared with each path (at 1,000
/// repositories, 1.3 ms an item).
struct Needed<'a> {
    checkout: &'a Path,
    repo: &'a Path,
    writable: &'a [PathBuf],
    above: Option<std::collections::HashSet<&'a [u8]>>,
}

impl<'a> Needed<'a> {
    fn new(checkout: &'a Path, repo: &'a Path, writable: &'a [PathBuf]) -> Needed<'a> {
        use std::os::unix::ffi::OsStrExt;
        let paths = || {
            [checkout, repo]
                .into_iter()
                .chain(writable.iter().map(PathBuf::as_path))
        };
        let above = paths().all(sandbox::plain_path).then(|| {
            paths()
                .flat_map(|p| {
                    let b = p.as_os_str().as_bytes();
                    let cuts = b.iter().enumerate().filter(|(_, c)| **c == b'/');
                    cuts.map(move |(i, _)| &b[..i.max(1)]).chain([b])
                })
                .collect()
        });
        Needed {
            checkout,
            repo,
            writable,
            above,
        }
    }

    fn of(&self, d: &Path) -> bool {
        if sandbox::plain_path(d) {
            self.of_plain(d)
        } else {
            self.by_components(d)
        }
    }

    /// [`Needed::of`] a folder whose path is plain.
    fn of_plain(&self, d: &Path) -> bool {
        use std::os::unix::ffi::OsStrExt;
        match &self.above {
            Some(above) => {
                let (d, repo) = (d.as_os_str().as_bytes(), self.repo.as_os_str().as_bytes());
                above.contains(d) || sandbox::within_plain(d, repo)
            }
            None => self.by_components(d),
        }
    }

    /// [`Needed::of`], asked of each path ([`sandbox::within`]).
    fn by_components(&self, d: &Path) -> bool {
        let within = sandbox::within;
        within(self.checkout, d)
            || within(self.repo, d)
            || within(d, self.repo)
            || self.writable.iter().any(|w| within(w, d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The set of folders above an item's paths answers as `Path::starts_with` does, for
        /// paths of every shape.
        #[test]
        fn the_folders_an_item_needs_are_those_path_components_say(
            paths in proptest::collection::vec(
                proptest::collection::vec(proptest::sample::select(vec!["", ".", "..", "a", "b", "ab"]), 0..4),
                4,
            ),
            rooted in proptest::collection::vec(proptest::bool::ANY, 4),
        ) {
            let make = |i: usize| {
                let mut s = if rooted[i] { String::from("/") } else { String::new() };
                s.push_str(&paths[i].join("/"));
                PathBuf::from(s)
            };
            let (checkout, repo, w, d) = (make(0), make(1), vec![make(2)], make(3));
            let by_components = checkout.starts_with(&d)
                || repo.starts_with(&d)
                || d.starts_with(&repo)
                || w.iter().any(|w| w.starts_with(&d));
            let needs = Needed::new(&checkout, &repo, &w);
            if sandbox::plain_path(&d) {
                proptest::prop_assert_eq!(needs.of_plain(&d), by_components);
            }
            proptest::prop_assert_eq!(
                needs.of(&d),
                by_components,
                "{:?} {:?} {:?} {:?}",
                checkout,
                repo,
                w,
                d
            );
        }
    }
}
