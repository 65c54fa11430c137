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

/// What an item's processes left, in the git folders they could write, that runner's next git
/// call or read would wait on: a file that is not a regular file, or a link made while the
/// item ran (git makes none there; a link can be turned to a FIFO after it is looked at).
/// `common` is the repository's common git folder; `own` the item's worktree's own git folder
/// (`None` in the repository's own checkout, whose git folder is `common`); `since` when the
/// item began, in seconds of the epoch.
///
/// What is looked at: the own git folder whole (HEAD, the index, its logs); in the object
/// store, `pack/` and `info/` whole and each loose-object folder whose change time is not
/// older than `since` (a name added to a folder gives it a new change time, which its owner
/// cannot set back); in the repository's own checkout, the common folder's files, `logs/` and
/// worktrees' folders. `refs/`, `hooks/`, `info/` and the configuration are
/// the shared state's (`SharedState`), which compares their types too.
pub(crate) fn planted(common: &Path, own: Option<&Path>, since: i64) -> Option<String> {
    let mut walk = PlantedWalk {
        since,
        seen: 0,
        dirs: Vec::new(),
    };
    let objects = common.join("objects");
    match own {
        Some(own) => walk.dirs.push(own.to_path_buf()),
        None => {
            // Its files, and of its folders those git writes as it works: the rest are the
            // shared state's, the object store's below, or no git's (`lfs/`, `modules/`).
            let take = |name: &str, dir: bool| !dir || matches!(name, "logs" | "worktrees");
            if let Some(why) = walk.list(common, take) {
                return Some(why);
            }
        }
    }
    walk.dirs.push(objects.join("pack"));
    walk.dirs.push(objects.join("info"));
    if let Some(why) = walk.drain() {
        return Some(why);
    }
    // The loose-object folders: listed when something was added to them since.
    let Ok(entries) = std::fs::read_dir(&objects) else {
        return None;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name == "pack" || name == "info" {
            continue;
        }
        let path = e.path();
        let Ok(m) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if m.is_dir() {
            if m.ctime() >= since {
                walk.dirs.push(path);
            }
        } else if let Some(why) = walk.entry(&path, &m) {
            return Some(why);
        }
    }
    walk.drain()
}

/// The walk of [`planted`]: folders still to list, and how many entries were seen.
struct PlantedWalk {
    since: i64,
    seen: usize,
    dirs: Vec<PathBuf>,
}

impl PlantedWalk {
    /// List every folder still to list, and the folders beneath them.
    fn drain(&mut self) -> Option<String> {
        while let Some(d) = self.dirs.pop() {
            if let Some(why) = self.list(&d, |_, _| true) {
                return Some(why);
            }
        }
        None
    }

    /// Look at each entry of `dir` that `take` keeps, by its name and whether it is a folder;
    /// folders are listed later.
    fn list(&mut self, dir: &Path, take: impl Fn(&str, bool) -> bool) -> Option<String> {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return None;
        };
        for e in entries.flatten() {
            self.seen += 1;
            if self.seen > PLANTED_LIMIT {
                return Some(format!(
                    "more than {PLANTED_LIMIT} files under `{}`: not looked at whole",
                    dir.display()
                ));
            }
            let path = e.path();
            let Ok(m) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if !take(&e.file_name().to_string_lossy(), m.is_dir()) {
                continue;
            }
            if m.is_dir() {
                self.dirs.push(path);
            } else if let Some(why) = self.entry(&path, &m) {
                return Some(why);
            }
        }
        None
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
    fn a_worktrees_common_folder_is_read_without_its_dots() {
        let t = tempfile::tempdir().unwrap();
        let repo = std::fs::canonicalize(t.path()).unwrap().join("repo");
        let git = |args: &[&str]| {
            let out = crate::git::command(&repo).args(args).output().unwrap();
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
