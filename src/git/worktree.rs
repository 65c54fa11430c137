//! The worktrees runner makes for items on a work branch: added, made to hold a branch, started
//! removed, and kept as the spare of their repository between items. Through git's
//! command line (its own record of worktrees, the checkout of files and their filters), but for
//! the removal of a worktree plainly runner's, done in process.

use super::command::GitError;
use super::command::{self, checked};
use super::local;
use std::path::Path;

/// Clear the runner-owned worktree at `path` if the `git worktree add` that made it never
/// finished (runner was killed while git checked the files out). git locks a worktree it is
/// adding, with the reason "initializing", and unlocks it once the checkout is whole; one still
/// so locked holds no work, only part of a checkout, which would read as files deleted. Its
/// folder and its record in the repository are removed, so that it is added afresh (`git
/// worktree remove` and `prune` leave a locked worktree alone). `true` when one was cleared.
pub(crate) fn clear_half_added(repo: &Path, path: &Path) -> Result<bool, GitError> {
    let Some(common) = local::common_dir(repo) else {
        return Ok(false);
    };
    let Ok(records) = std::fs::read_dir(common.join("worktrees")) else {
        return Ok(false);
    };
    // git records the worktree's real path; runner's may pass through a link, and the folders
    // it names may be gone: the nearest that is not is resolved, the rest joined to it.
    let real = |p: &Path| {
        p.ancestors().find_map(|a| {
            let rest = p.strip_prefix(a).ok()?;
            Some(std::fs::canonicalize(a).ok()?.join(rest))
        })
    };
    let Some(ours) = real(path) else {
        return Ok(false);
    };
    for record in records.flatten().map(|r| r.path()) {
        let read = |name: &str| std::fs::read_to_string(record.join(name)).unwrap_or_default();
        let gitdir = read("gitdir");
        let names_ours = Path::new(gitdir.trim_end_matches('\n'))
            .parent()
            .and_then(real)
            .is_some_and(|p| p == ours);
        if names_ours && read("locked").trim_end() == "initializing" {
            match std::fs::remove_dir_all(path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
                _ => {}
            }
            std::fs::remove_dir_all(&record)?;
            return Ok(true);
        }
    }
    Ok(false)
}

/// Make the runner-owned worktree at `path` hold `branch`: a worktree kept from an earlier run
/// on that branch is used as it is (its leftovers saved and reset first by the caller, see
/// [`kept_leftovers`]); one on another branch is removed; a missing one is added — on the
/// existing branch, or on a new one forked from `base`. `true` when the worktree is new.
pub(crate) fn ensure_worktree(
    repo: &Path,
    path: &Path,
    branch: &str,
    base: &str,
    exists: bool,
) -> Result<bool, GitError> {
    if path.join(".git").exists() {
        let on = checked(path, &["symbolic-ref", "-q", "--short", "HEAD"])
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        if on == branch {
            return Ok(false);
        }
        let p = path.to_string_lossy().to_string();
        checked(repo, &["worktree", "remove", "--force", &p])?;
    }
    if stale_worktrees(repo) {
        let _ = checked(repo, &["worktree", "prune"]);
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let p = path.to_string_lossy().to_string();
    if exists {
        checked(repo, &["worktree", "add", "--quiet", &p, branch])?;
    } else {
        checked(
            repo,
            &["worktree", "add", "--quiet", "-b", branch, &p, base],
        )?;
    }
    command::same_filters(repo, path);
    Ok(true)
}

/// Whether the repository at `repo` records a worktree whose folder is gone (what `git worktree
/// prune` clears, and what would keep `git worktree add` from reusing its path or branch).
/// `true` whenever its records cannot be read: prune then, as always.
fn stale_worktrees(repo: &Path) -> bool {
    let common = match local::common_dir(repo) {
        Some(c) => c,
        None => return true,
    };
    let entries = match std::fs::read_dir(common.join("worktrees")) {
        Ok(e) => e,
        Err(e) => return e.kind() != std::io::ErrorKind::NotFound,
    };
    for entry in entries {
        let Ok(entry) = entry else { return true };
        let Ok(gitdir) = std::fs::read_to_string(entry.path().join("gitdir")) else {
            return true;
        };
        let points = Path::new(gitdir.trim_end_matches('\n'));
        if !points.is_absolute() || !points.exists() {
            return true;
        }
    }
    false
}

/// Remove the worktree at `path` of the repository at `repo`, whatever its files hold.
pub(crate) fn remove_worktree(repo: &Path, path: &Path) -> Result<(), GitError> {
    // What git would do — its files, then its git dir — without a process of git's, where the
    // worktree is plainly one runner added.
    if let Some(own) = local::removable_worktree(path) {
        std::fs::remove_dir_all(path)?;
        std::fs::remove_dir_all(own)?;
        return Ok(());
    }
    let p = path.to_string_lossy().to_string();
    checked(repo, &["worktree", "remove", "--force", &p])?;
    Ok(())
}

/// Check `commit` out, detached, in a new worktree at `path` (one left there by an earlier
/// run is replaced).
pub(crate) fn add_detached_worktree(
    repo: &Path,
    path: &Path,
    commit: &str,
) -> Result<(), GitError> {
    let p = path.to_string_lossy().to_string();
    if path.exists() {
        let _ = checked(repo, &["worktree", "remove", "--force", &p]);
        let _ = std::fs::remove_dir_all(path);
    }
    let _ = checked(repo, &["worktree", "prune"]);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    checked(
        repo,
        &["worktree", "add", "--quiet", "--detach", &p, commit],
    )?;
    Ok(())
}

/// Keep the worktree at `path`, whose work is committed, as the repository's spare at
/// `spare` for its next item: HEAD detached (its branch free for anything else), every file
/// git does not track removed, ignored ones included (nothing of the item is left: its build
/// output, its dependencies, what `worktree.share` linked), then moved. A spare already there
/// is removed first.
pub(crate) fn park_worktree(repo: &Path, path: &Path, spare: &Path) -> Result<(), GitError> {
    if spare.exists() {
        remove_worktree(repo, spare)?;
    }
    checked(path, &["checkout", "--quiet", "--detach"])?;
    checked(path, &["clean", "-ffdxq"])?;
    let (from, to) = (path.to_string_lossy(), spare.to_string_lossy());
    checked(repo, &["worktree", "move", &from, &to])?;
    Ok(())
}

/// Take the repository's spare worktree at `spare` for an item at `path` on `branch` (an
/// existing one, or one made from `base`): moved there, its index made anew, switched to the
/// branch — git updates only the files that differ — and proven clean: no change, nothing
/// untracked, nothing ignored. `false`, with the spare removed, when it is not a worktree of the repository or
/// cannot be proven clean; the caller then adds a worktree as it would without one.
pub(crate) fn take_spare(
    repo: &Path,
    spare: &Path,
    path: &Path,
    branch: &str,
    base: &str,
    exists: bool,
) -> Result<bool, GitError> {
    let discard = |at: &Path| -> Result<bool, GitError> {
        remove_worktree(repo, at)?;
        let _ = checked(repo, &["worktree", "prune"]);
        Ok(false)
    };
    let detached = checked(spare, &["symbolic-ref", "-q", "HEAD"]).is_err();
    if !detached || own_dir(repo, spare).is_none() {
        return discard(spare);
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    // The base named in the repository (`HEAD` there is not the spare's).
    let start = checked(
        repo,
        &["rev-parse", "--verify", &format!("{base}^{{commit}}")],
    )?;
    let start = start.trim();
    let (from, to) = (spare.to_string_lossy(), path.to_string_lossy());
    checked(repo, &["worktree", "move", &from, &to])?;
    // Its index made anew from its HEAD, every file hashed against it: nothing the last item
    // did to the index (a file marked unchanged or outside the sparse checkout, a cached
    // answer about untracked files) carries over, and a changed file shows.
    if let Some(own) = own_dir(repo, path) {
        match std::fs::remove_file(own.join("index")) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
            _ => {}
        }
    } else {
        return discard(path);
    }
    if checked(path, &["read-tree", "HEAD"]).is_err()
        || checked(path, &["update-index", "-q", "--refresh"]).is_err()
    {
        return discard(path);
    }
    let switched = if exists {
        checked(path, &["switch", "--quiet", "--no-guess", branch])
    } else {
        checked(
            path,
            &["switch", "--quiet", "--no-guess", "--create", branch, start],
        )
    };
    if switched.is_err() {
        return discard(path);
    }
    let status = checked(
        path,
        &[
            "status",
            "--porcelain=v1",
            "-z",
            "--ignored=matching",
            "--untracked-files=all",
            "--ignore-submodules=none",
        ],
    )?;
    if !status.is_empty() {
        return discard(path);
    }
    command::same_filters(repo, path);
    Ok(true)
}

/// The own git folder of `worktree`, a linked worktree of the repository at `repo` (its `.git`
/// names a folder of the repository's `worktrees`); `None` for anything else — the repository's
/// own checkout, another repository, a `.git` a worker rewrote to name either.
fn own_dir(repo: &Path, worktree: &Path) -> Option<std::path::PathBuf> {
    let (own, common) = local::git_dirs(worktree)?;
    let repo_common = local::common_dir(repo)?;
    let linked = same_file(&common, &repo_common)
        && own
            .parent()
            .is_some_and(|p| same_file(p, &repo_common.join("worktrees")))
        && !same_file(&own, &common);
    linked.then_some(own)
}

/// Whether `a` and `b` are the same folder.
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}
