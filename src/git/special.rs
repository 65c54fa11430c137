//! Files git opens that are there but are not regular files — a FIFO, a device, a socket — or,
//! in the object store, a link an item made: git opens them plainly, and opening a FIFO nobody
//! writes waits for ever (a git call of runner's until its deadline; a read in process, for
//! ever). Two checks: the repository's up front ([`special_file`]), and what an item's
//! processes could write of it after they ran ([`planted`]).
//!
//! Read by hand: a walk of folders by what `lstat` and the folder listing say, no file opened.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// What is wrong with a file of type `t` at `p` that git would open, if anything.
fn odd_type(t: std::fs::FileType, p: &Path) -> Option<String> {
    odd(t, p, "is")
}

/// [`odd_type`], said of `p` with `verb` ("is", or "leads to" for a link's target).
fn odd(t: std::fs::FileType, p: &Path, verb: &str) -> Option<String> {
    let what = if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_socket() {
        "a socket"
    } else {
        return None;
    };
    Some(format!(
        "`{}` {verb} {what}, not a regular file: git would wait on it for ever",
        p.display()
    ))
}

/// A link's target, when that is what is wrong with it (or the link leads nowhere git can
/// read, which git reports itself).
fn odd_target(p: &Path) -> Option<String> {
    let target = std::fs::metadata(p).ok()?;
    odd(target.file_type(), p, "leads to")
}

/// A file git opens in the checkout at `dir` that is there but not a regular file (a FIFO, a
/// device, a socket): git would wait on it for ever (opening a FIFO nobody writes blocks), so
/// the repository is refused up front, naming it. HEAD, the index, the configuration,
/// `packed-refs`, `commondir`, every ref and every file of the object store (loose objects,
/// packs, `info/alternates`) are looked at, by the type the folder listing gives (no file is
/// opened; a link is followed); past 100,000 entries the rest is left to git, whose calls have
/// a deadline.
pub(crate) fn special_file(dir: &Path) -> Option<String> {
    let git_dir = dir.join(".git");
    if !std::fs::symlink_metadata(&git_dir).is_ok_and(|m| m.is_dir()) {
        return None;
    }
    let odd = |p: &Path| odd_type(std::fs::symlink_metadata(p).ok()?.file_type(), p);
    for name in [
        "HEAD",
        "index",
        "config",
        "packed-refs",
        "commondir",
        "ORIG_HEAD",
        "FETCH_HEAD",
    ] {
        if let Some(why) = odd(&git_dir.join(name)) {
            return Some(why);
        }
    }
    let mut dirs = vec![git_dir.join("refs"), git_dir.join("objects")];
    let mut seen = 0usize;
    while let Some(d) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            seen += 1;
            // A repository with more refs and objects than this is left to git's deadline past
            // them.
            if seen > 100_000 {
                return None;
            }
            // The type the listing gives: no file is opened or stat'ed but a link.
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() {
                dirs.push(e.path());
            } else if t.is_symlink() {
                if let Some(why) = odd_target(&e.path()) {
                    return Some(why);
                }
            } else if let Some(why) = odd_type(t, &e.path()) {
                return Some(why);
            }
        }
    }
    None
}

/// How many entries [`planted`] lists before it gives up and says so (failing closed): far
/// past what a worker's `git add` of a large tree writes.
const PLANTED_LIMIT: usize = 1_000_000;

/// What `lstat` says of a folder that changes whenever a name in it is added, removed or
/// renamed: device and inode, type and mode, change time. Its owner cannot set the change time
/// back.
type FolderStamp = (u64, u64, u32, i64, i64);

fn folder_stamp(m: &std::fs::Metadata) -> FolderStamp {
    (m.dev(), m.ino(), m.mode(), m.ctime(), m.ctime_nsec())
}

/// The folders [`planted`] listed during a run, kept while each is unchanged: a folder whose
/// stamp is the one it had when listed, and had settled then (its change time a second old: a
/// change within one clock tick of the last keeps the time), holds the same names, so what was
/// found fine in it then is fine now — a file's type cannot change without a new name, and a
/// link cannot be made again without one. Only its subfolders (whose own stamps are looked at)
/// and its links (whose targets may have changed) are kept. An item's walk so lists only what
/// changed since the last item of its repository, where it listed every folder and looked at
/// every entry (a third of an in-place `true` item's system calls).
#[derive(Debug, Default)]
pub struct PlantedListings {
    by_dir: std::sync::Mutex<std::collections::HashMap<PathBuf, Listed>>,
}

/// What a listing of a folder kept: its stamp then, its subfolders and its links.
#[derive(Debug, Clone)]
struct Listed {
    stamp: FolderStamp,
    folders: Vec<std::ffi::OsString>,
    links: Vec<std::ffi::OsString>,
}

impl PlantedListings {
    fn get(&self, dir: &Path, stamp: FolderStamp) -> Option<Listed> {
        let known = self.by_dir.lock().ok()?;
        known.get(dir).filter(|l| l.stamp == stamp).cloned()
    }

    fn keep(&self, dir: &Path, listed: Listed) {
        if let Ok(mut known) = self.by_dir.lock() {
            known.insert(dir.to_path_buf(), listed);
        }
    }
}

/// What an item's processes left, in the git folders they could write, that runner's next git
/// call or read would wait on: a file that is not a regular file, or a link made while the
/// item ran (git makes none there; a link can be turned to a FIFO after it is looked at).
/// `common` is the repository's common git folder; `own` the item's worktree's own git folder
/// (`None` in the repository's own checkout, whose git folder is `common`); `since` when the
/// item began, in seconds of the epoch; `listings` the folders listed before in this run.
///
/// What is looked at: the own git folder whole (HEAD, the index, its logs); in the object
/// store, `pack/` and `info/` whole and each loose-object folder whose change time is not
/// older than `since` (a name added to a folder gives it a new change time, which its owner
/// cannot set back); in the repository's own checkout, the common folder's files, `logs/` and
/// worktrees' folders. `refs/`, `hooks/`, `info/` and the configuration are
/// the shared state's (`SharedState`), which compares their types too. A folder unchanged since
/// it was listed is not listed again ([`PlantedListings`]); a file's type is the one its
/// folder's listing gives, and only a link is looked at further.
pub(crate) fn planted(
    common: &Path,
    own: Option<&Path>,
    since: i64,
    listings: &PlantedListings,
) -> Option<String> {
    planted_at(common, own, since, listings, std::time::SystemTime::now())
}

/// [`planted`], the walk starting at `now`.
fn planted_at(
    common: &Path,
    own: Option<&Path>,
    since: i64,
    listings: &PlantedListings,
    now: std::time::SystemTime,
) -> Option<String> {
    let mut walk = PlantedWalk {
        since,
        now,
        seen: 0,
        dirs: Vec::new(),
        listings,
    };
    let objects = common.join("objects");
    match own {
        Some(own) => walk.dirs.push(own.to_path_buf()),
        None => {
            // Its files, and of its folders those git writes as it works: the rest are the
            // shared state's, the object store's below, or no git's (`lfs/`, `modules/`).
            let take =
                |name: &std::ffi::OsStr, dir: bool| !dir || name == "logs" || name == "worktrees";
            let folders = match walk.visit(common, take) {
                Ok(folders) => folders,
                Err(why) => return Some(why),
            };
            walk.dirs.extend(folders.iter().map(|f| common.join(f)));
        }
    }
    walk.dirs.push(objects.join("pack"));
    walk.dirs.push(objects.join("info"));
    if let Some(why) = walk.drain() {
        return Some(why);
    }
    // The loose-object folders: listed when something was added to them since.
    let loose = match walk.visit(&objects, |name, dir| {
        !(dir && (name == "pack" || name == "info"))
    }) {
        Ok(folders) => folders,
        Err(why) => return Some(why),
    };
    for name in loose {
        let path = objects.join(name);
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir() && m.ctime() >= since) {
            walk.dirs.push(path);
        }
    }
    walk.drain()
}

/// The walk of [`planted`]: folders still to list, and how many entries were seen.
struct PlantedWalk<'a> {
    since: i64,
    /// When the walk began: a folder listed is kept if it had settled by then.
    now: std::time::SystemTime,
    seen: usize,
    dirs: Vec<PathBuf>,
    listings: &'a PlantedListings,
}

impl PlantedWalk<'_> {
    /// List every folder still to list, and the folders beneath them.
    fn drain(&mut self) -> Option<String> {
        while let Some(d) = self.dirs.pop() {
            match self.visit(&d, |_, _| true) {
                Ok(folders) => self.dirs.extend(folders.iter().map(|f| d.join(f))),
                Err(why) => return Some(why),
            }
        }
        None
    }

    /// Look at each entry of `dir` that `take` keeps, by its name and whether it is a folder,
    /// and give back its folders (to list later) — from the listing kept of it when the folder
    /// is unchanged since, its links looked at again. A folder that cannot be read has nothing.
    fn visit(
        &mut self,
        dir: &Path,
        take: impl Fn(&std::ffi::OsStr, bool) -> bool,
    ) -> Result<Vec<std::ffi::OsString>, String> {
        let stamp = std::fs::symlink_metadata(dir)
            .ok()
            .filter(|m| m.is_dir())
            .map(|m| folder_stamp(&m));
        if let Some(stamp) = stamp
            && let Some(known) = self.listings.get(dir, stamp)
        {
            for link in &known.links {
                if let Some(why) = odd_target(&dir.join(link)) {
                    return Err(why);
                }
            }
            return Ok(known.folders);
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Ok(Vec::new());
        };
        let mut listed = Listed {
            stamp: stamp.unwrap_or_default(),
            folders: Vec::new(),
            links: Vec::new(),
        };
        for e in entries.flatten() {
            self.seen += 1;
            if self.seen > PLANTED_LIMIT {
                return Err(format!(
                    "more than {PLANTED_LIMIT} files under `{}`: not looked at whole",
                    dir.display()
                ));
            }
            // The type the listing gives (looked up where the file system does not say).
            let Ok(t) = e.file_type() else { continue };
            let name = e.file_name();
            if !take(&name, t.is_dir()) {
                continue;
            }
            if t.is_dir() {
                listed.folders.push(name);
                continue;
            }
            let path = e.path();
            if t.is_symlink() {
                let Ok(m) = std::fs::symlink_metadata(&path) else {
                    continue;
                };
                if let Some(why) = self.entry(&path, &m) {
                    return Err(why);
                }
                listed.links.push(name);
            } else if let Some(why) = odd_type(t, &path) {
                return Err(why);
            }
        }
        // Kept when the folder had settled before the listing and is as it was then (a folder
        // just changed is not looked at again).
        if let Some(stamp) = stamp
            && crate::support::fs::settled(stamp.3, stamp.4, self.now)
            && std::fs::symlink_metadata(dir).is_ok_and(|m| folder_stamp(&m) == stamp)
        {
            let folders = listed.folders.clone();
            self.listings.keep(dir, listed);
            return Ok(folders);
        }
        Ok(listed.folders)
    }

    /// What is wrong with the file at `path`, as `lstat` gave it.
    fn entry(&self, path: &Path, m: &std::fs::Metadata) -> Option<String> {
        let t = m.file_type();
        if t.is_symlink() {
            if m.ctime() >= self.since {
                return Some(format!(
                    "`{}` is a link made while the item ran: git makes none there",
                    path.display()
                ));
            }
            return odd_target(path);
        }
        odd_type(t, path)
    }
}

/// A worktree's own git folder and the repository's common one, from its `.git` file
/// (`gitdir: …`) and that folder's `commondir`; `None` for a repository's own checkout (or
/// anything else). Read plainly: the caller reads it before an item's processes run.
///
/// The common folder is given without the `..` of `commondir` where no link is on the way
/// (the path the kernel resolves is the one read lexically): a plain path, which the item's
/// confinement compares by bytes.
pub(crate) fn worktree_git_dirs(checkout: &Path) -> Option<(PathBuf, PathBuf)> {
    let text = std::fs::read_to_string(checkout.join(".git")).ok()?;
    let own = checkout.join(text.strip_prefix("gitdir:")?.trim());
    let common = std::fs::read_to_string(own.join("commondir")).ok()?;
    let common = own.join(common.trim());
    let mut lexical = PathBuf::new();
    for c in common.components() {
        match c {
            std::path::Component::ParentDir => {
                lexical.pop();
            }
            std::path::Component::CurDir => {}
            c => lexical.push(c),
        }
    }
    let common = match std::fs::canonicalize(&common) {
        Ok(real) if real == lexical => lexical,
        _ => common,
    };
    Some((own, common))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_planted_after_a_folder_was_listed_is_found() {
        let t = tempfile::tempdir().unwrap();
        let g = t.path().join("git");
        for d in [
            "logs/refs/heads/deep",
            "objects/pack",
            "objects/info",
            "objects/ab",
        ] {
            std::fs::create_dir_all(g.join(d)).unwrap();
        }
        std::fs::write(g.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(g.join("logs/HEAD"), "").unwrap();
        std::fs::write(g.join("objects/ab/cdef"), "").unwrap();
        let target = t.path().join("target");
        std::fs::write(&target, "").unwrap();
        std::os::unix::fs::symlink(&target, g.join("logs/link")).unwrap();
        let fifo = |p: &Path| nix::unistd::mkfifo(p, nix::sys::stat::Mode::S_IRWXU).unwrap();
        // Everything is taken as settled (a walk a minute later), and each plant below comes
        // well after the clock tick of the set-up; the item began after the link was made.
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(60);
        let since = i64::MAX;
        let listings = PlantedListings::default();
        let walk = || planted_at(&g, None, since, &listings, later);
        assert_eq!(walk(), None);
        let kept = listings.by_dir.lock().unwrap().len();
        assert!(kept >= 6, "{kept} folders kept");
        assert_eq!(walk(), None, "nothing changed");
        std::thread::sleep(std::time::Duration::from_millis(50));
        // In a folder beneath folders that did not change.
        let deep = g.join("logs/refs/heads/deep/x");
        fifo(&deep);
        assert!(
            walk().unwrap().contains("deep/x` is a FIFO"),
            "{:?}",
            walk()
        );
        std::fs::remove_file(&deep).unwrap();
        assert_eq!(walk(), None);
        // A file made a FIFO where it was.
        std::fs::remove_file(g.join("logs/HEAD")).unwrap();
        fifo(&g.join("logs/HEAD"));
        assert!(
            walk().unwrap().contains("logs/HEAD` is a FIFO"),
            "{:?}",
            walk()
        );
        std::fs::remove_file(g.join("logs/HEAD")).unwrap();
        std::fs::write(g.join("logs/HEAD"), "").unwrap();
        assert_eq!(walk(), None);
        // The target of a link that was there before, in a folder that did not change.
        std::fs::remove_file(&target).unwrap();
        fifo(&target);
        assert!(
            walk().unwrap().contains("link` leads to a FIFO"),
            "{:?}",
            walk()
        );
        std::fs::remove_file(&target).unwrap();
        std::fs::write(&target, "").unwrap();
        // Where a pack index goes.
        fifo(&g.join("objects/pack/pack-1.idx"));
        assert!(
            walk().unwrap().contains("pack-1.idx` is a FIFO"),
            "{:?}",
            walk()
        );
    }

    #[test]
    fn a_worktrees_common_folder_is_read_without_its_dots() {
        let g = &crate::git::Repos::default();
        let t = tempfile::tempdir().unwrap();
        let repo = std::fs::canonicalize(t.path()).unwrap().join("repo");
        let git = |args: &[&str]| {
            let out = crate::git::command(g, &repo).args(args).output().unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        std::fs::create_dir(&repo).unwrap();
        git(&["init", "-q", "-b", "main"]);
        git(&[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "a",
        ]);
        let wt = repo.parent().unwrap().join("wt");
        git(&["worktree", "add", "-q", "-b", "w", wt.to_str().unwrap()]);
        let (own, common) = worktree_git_dirs(&wt).unwrap();
        assert_eq!(own, repo.join(".git/worktrees/wt"));
        assert_eq!(common, repo.join(".git"));
        // Through a link on the way, the kernel's path is not the lexical one: kept as written.
        let link = repo.parent().unwrap().join("link");
        std::os::unix::fs::symlink(repo.join(".git/worktrees"), &link).unwrap();
        std::fs::write(
            wt.join(".git"),
            format!("gitdir: {}\n", link.join("wt").display()),
        )
        .unwrap();
        let (own, common) = worktree_git_dirs(&wt).unwrap();
        assert_eq!(own, link.join("wt"));
        assert_eq!(common, link.join("wt/../.."));
    }
}
