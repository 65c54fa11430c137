//! The worktrees runner makes for items on a work branch: added, made to hold a branch, started
//! removed, and kept as the spare of their repository between items. Through git's
//! command line (its own record of worktrees, the checkout of files and their filters), but for
//! the removal of a worktree plainly runner's, done in process.

use super::command::GitError;
use super::command::{self, checked};
use super::local;
use super::repos::Repos;
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
    g: &Repos,
    repo: &Path,
    path: &Path,
    branch: &str,
    base: &str,
    exists: bool,
) -> Result<bool, GitError> {
    if path.join(".git").exists() {
        let on = checked(g, path, &["symbolic-ref", "-q", "--short", "HEAD"])
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        if on == branch {
            return Ok(false);
        }
        let p = path.to_string_lossy().to_string();
        checked(g, repo, &["worktree", "remove", "--force", &p])?;
    }
    if stale_worktrees(repo) {
        let _ = checked(g, repo, &["worktree", "prune"]);
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let p = path.to_string_lossy().to_string();
    if exists {
        checked(g, repo, &["worktree", "add", "--quiet", &p, branch])?;
    } else if let Some(added) = add_in_process(g, repo, path, branch, base) {
        added?;
    } else {
        checked(
            g,
            repo,
            &["worktree", "add", "--quiet", "-b", branch, &p, base],
        )?;
    }
    g.same_as(repo, path);
    Ok(true)
}

/// `git worktree add --quiet -b <branch> <path> <base>` with one process of git's where git
/// starts three: the branch made in process as `git branch` makes it ([`super::refs`]), the
/// worktree's records written as git writes them (`worktrees/<name>/` with `locked` saying
/// "initializing" while the files are checked out, `gitdir`, `commondir`, `HEAD` and the first
/// line of its reflog; the worktree's `.git` file), then the files checked out by the command
/// git runs for it, `git reset --hard --no-recurse-submodules`, and the lock removed.
///
/// `None`, with nothing written, where git is to do it all: a repository that is not its own
/// plain checkout ([`local::start_point`]), a start that is not a local branch or a commit id, a
/// setting that makes git write more ([`command::plain_worktrees`]) or refs differently, a
/// worktree folder already there, a name git would change (it makes the records' folder from
/// the worktree's, made safe as a ref's part and numbered when taken), a branch that exists.
/// `Some(Err)`: the checkout failed; what was made of the worktree is removed, the branch left
/// made, as git leaves them.
fn add_in_process(
    g: &Repos,
    repo: &Path,
    path: &Path,
    branch: &str,
    base: &str,
) -> Option<Result<(), GitError>> {
    let (_, common) = local::git_dirs(repo)?;
    let name = path.file_name()?.to_str()?;
    let plain_name = !name.starts_with('.')
        && !name.ends_with(".lock")
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !plain_name || !command::plain_worktrees(g, repo) {
        return None;
    }
    // git records real paths: the worktree's through its parent's, the records' folder through
    // the common folder's.
    let top = std::fs::canonicalize(path.parent()?).ok()?.join(name);
    let own = std::fs::canonicalize(&common)
        .ok()?
        .join("worktrees")
        .join(name);
    if std::fs::symlink_metadata(&top).is_ok() || std::fs::symlink_metadata(&own).is_ok() {
        return None;
    }
    // The records name both paths as text: one that is not is git's to write.
    let (top_text, own_text) = (top.to_str()?, own.to_str()?);
    let start = local::start_point(repo, base)?;
    let logs = command::ref_logs(g, repo)?;
    let who = super::refs::reflog_who(g, repo)?;
    let refname = format!("refs/heads/{branch}");
    let message = format!("branch: Created from {base}");
    let failed = |what: &str, e: std::io::Error| GitError::Failed {
        args: format!("worktree add -b {branch} {top_text}"),
        dir: repo.display().to_string(),
        stderr: format!("{what}: {e}"),
    };
    match super::refs::update_in_process(g, repo, &refname, &start, None, &message)? {
        Ok(()) => {}
        Err(e) => return Some(Err(failed("cannot make the branch", e))),
    }
    // What this made, and only that, is removed if the checkout fails.
    let (mut made_own, mut made_top) = (false, false);
    let mut records = || -> std::io::Result<()> {
        std::fs::create_dir_all(own.parent().unwrap_or(&common))?;
        std::fs::create_dir(&own)?;
        made_own = true;
        std::fs::write(own.join("locked"), "initializing\n")?;
        std::fs::create_dir(&top)?;
        made_top = true;
        std::fs::write(own.join("gitdir"), format!("{top_text}/.git\n"))?;
        std::fs::write(top.join(".git"), format!("gitdir: {own_text}\n"))?;
        std::fs::write(own.join("commondir"), "../..\n")?;
        std::fs::write(own.join("HEAD"), format!("ref: {refname}\n"))?;
        // git points HEAD at the branch first, which begins its reflog with a line of no
        // message.
        super::refs::log_head(&own, None, &start, &who, logs, "")
    };
    let made = records().map_err(|e| failed("cannot write the worktree's records", e));
    // The repository's configuration is the worktree's (it has none of its own yet): its filter
    // drivers are turned off for the checkout as for every call in the repository.
    g.same_as(repo, &top);
    let checked_out = made.and_then(|()| {
        let fresh = command::plain_checkouts(g, repo)
            .then(|| local::check_out_fresh(&top, &own, &common.join("objects"), &start))
            .flatten();
        match fresh {
            // What `git reset --hard` leaves beside the files: ORIG_HEAD, and its line in
            // HEAD's reflog.
            Some(Ok(())) => std::fs::write(own.join("ORIG_HEAD"), format!("{start}\n"))
                .and_then(|()| {
                    super::refs::log_head(
                        &own,
                        Some(&start),
                        &start,
                        &who,
                        logs,
                        "reset: moving to HEAD",
                    )
                })
                .map_err(|e| failed("cannot write the worktree's records", e)),
            Some(Err(e)) => Err(failed("cannot check the files out", e)),
            None => checked(
                g,
                &top,
                &["reset", "--hard", "--no-recurse-submodules", "--quiet"],
            )
            .map(|_| ()),
        }
    });
    if let Err(e) = checked_out {
        if made_top {
            let _ = std::fs::remove_dir_all(&top);
        }
        if made_own {
            let _ = std::fs::remove_dir_all(&own);
        }
        return Some(Err(e));
    }
    Some(std::fs::remove_file(own.join("locked")).map_err(|e| failed("cannot unlock", e)))
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
pub(crate) fn remove_worktree(g: &Repos, repo: &Path, path: &Path) -> Result<(), GitError> {
    // What git would do — its files, then its git dir — without a process of git's, where the
    // worktree is plainly one runner added.
    if let Some(own) = local::removable_worktree(path) {
        std::fs::remove_dir_all(path)?;
        std::fs::remove_dir_all(own)?;
        return Ok(());
    }
    let p = path.to_string_lossy().to_string();
    checked(g, repo, &["worktree", "remove", "--force", &p])?;
    Ok(())
}

/// Check `commit` out, detached, in a new worktree at `path` (one left there by an earlier
/// run is replaced).
pub(crate) fn add_detached_worktree(
    g: &Repos,
    repo: &Path,
    path: &Path,
    commit: &str,
) -> Result<(), GitError> {
    let p = path.to_string_lossy().to_string();
    if path.exists() {
        let _ = checked(g, repo, &["worktree", "remove", "--force", &p]);
        let _ = std::fs::remove_dir_all(path);
    }
    let _ = checked(g, repo, &["worktree", "prune"]);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    checked(
        g,
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
pub(crate) fn park_worktree(
    g: &Repos,
    repo: &Path,
    path: &Path,
    spare: &Path,
) -> Result<(), GitError> {
    if spare.exists() {
        remove_worktree(g, repo, spare)?;
    }
    checked(g, path, &["checkout", "--quiet", "--detach"])?;
    checked(g, path, &["clean", "-ffdxq"])?;
    let (from, to) = (path.to_string_lossy(), spare.to_string_lossy());
    checked(g, repo, &["worktree", "move", &from, &to])?;
    Ok(())
}

/// Take the repository's spare worktree at `spare` for an item at `path` on `branch` (an
/// existing one, or one made from `base`): moved there, its index made anew, switched to the
/// branch — git updates only the files that differ — and proven clean: no change, nothing
/// untracked, nothing ignored. `false`, with the spare removed, when it is not a worktree of the repository or
/// cannot be proven clean; the caller then adds a worktree as it would without one.
pub(crate) fn take_spare(
    g: &Repos,
    repo: &Path,
    spare: &Path,
    path: &Path,
    branch: &str,
    base: &str,
    exists: bool,
) -> Result<bool, GitError> {
    let discard = |at: &Path| -> Result<bool, GitError> {
        remove_worktree(g, repo, at)?;
        let _ = checked(g, repo, &["worktree", "prune"]);
        Ok(false)
    };
    let detached = checked(g, spare, &["symbolic-ref", "-q", "HEAD"]).is_err();
    if !detached || own_dir(repo, spare).is_none() {
        return discard(spare);
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    // The base named in the repository (`HEAD` there is not the spare's).
    let start = checked(
        g,
        repo,
        &["rev-parse", "--verify", &format!("{base}^{{commit}}")],
    )?;
    let start = start.trim();
    let (from, to) = (spare.to_string_lossy(), path.to_string_lossy());
    checked(g, repo, &["worktree", "move", &from, &to])?;
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
    if checked(g, path, &["read-tree", "HEAD"]).is_err()
        || checked(g, path, &["update-index", "-q", "--refresh"]).is_err()
    {
        return discard(path);
    }
    let switched = if exists {
        checked(g, path, &["switch", "--quiet", "--no-guess", branch])
    } else {
        checked(
            g,
            path,
            &["switch", "--quiet", "--no-guess", "--create", branch, start],
        )
    };
    if switched.is_err() {
        return discard(path);
    }
    let status = checked(
        g,
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
    g.same_as(repo, path);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = super::super::base_command()
            .arg("-C")
            .arg(dir)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn write(path: PathBuf, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// Every file under `top` but `.git`: its path, mode and content (a link's target).
    fn files(top: &Path) -> Vec<(String, u32, Vec<u8>)> {
        use std::os::unix::fs::MetadataExt;
        let mut out = Vec::new();
        let mut dirs = vec![top.to_path_buf()];
        while let Some(d) = dirs.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                let rel = p.strip_prefix(top).unwrap().to_string_lossy().into_owned();
                if rel == ".git" {
                    continue;
                }
                let m = std::fs::symlink_metadata(&p).unwrap();
                if m.is_dir() {
                    dirs.push(p);
                } else if m.is_symlink() {
                    let target = std::fs::read_link(&p).unwrap();
                    out.push((rel, m.mode(), target.to_string_lossy().into_owned().into()));
                } else {
                    out.push((rel, m.mode(), std::fs::read(&p).unwrap()));
                }
            }
        }
        out.sort();
        out
    }

    /// What an index holds but the file system's part of each entry (times, device, inode,
    /// owner, size): each entry's mode, object, flags and path, then its extensions as written.
    fn index_without_stat(path: &Path) -> (Vec<Vec<u8>>, Vec<u8>) {
        let data = std::fs::read(path).unwrap();
        assert_eq!(&data[..8], b"DIRC\0\0\0\x02");
        let count = u32::from_be_bytes(data[8..12].try_into().unwrap()) as usize;
        let mut at = 12;
        let mut entries = Vec::new();
        for _ in 0..count {
            let mode = &data[at + 24..at + 28];
            let rest = &data[at + 40..];
            let len = usize::from(u16::from_be_bytes([rest[20], rest[21]]) & 0xFFF);
            let mut e = mode.to_vec();
            e.extend_from_slice(&rest[..22 + len]);
            entries.push(e);
            at += (40 + 22 + len + 8) / 8 * 8;
        }
        (entries, data[at..data.len() - 20].to_vec())
    }

    /// A repository with files at several depths, an executable and a link, committed by a
    /// named person, packed refs and a tag.
    fn repo() -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("repo");
        std::fs::create_dir(&d).unwrap();
        git(&d, &["init", "-q", "-b", "main"]);
        git(&d, &["config", "user.name", "Ada Named"]);
        git(&d, &["config", "user.email", "ada@example.invalid"]);
        write(d.join("README.md"), "hello\n");
        write(d.join("src/lib/a.rs"), "fn a() {}\n");
        write(d.join("src/main.rs"), "fn main() {}\n");
        // Folders whose names sort one way as paths and another in the cache tree (shorter
        // first), a file beside a folder of a longer name, an empty file.
        write(d.join("src/lib.rs"), "");
        write(d.join("src/b/c/deep.txt"), "deep\n");
        write(d.join("src/aa/x"), "x\n");
        write(d.join("src.txt"), "dot\n");
        write(d.join("z/y"), "y\n");
        write(d.join("run.sh"), "#!/bin/sh\n");
        std::fs::set_permissions(
            d.join("run.sh"),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        std::os::unix::fs::symlink("src/main.rs", d.join("main-link")).unwrap();
        git(&d, &["add", "-A"]);
        git(&d, &["commit", "-q", "-m", "init"]);
        git(&d, &["tag", "v1"]);
        git(&d, &["branch", "packed-one"]);
        git(&d, &["pack-refs", "--all"]);
        t
    }

    /// A worktree added in process is the one `git worktree add -b` adds: the same branch and
    /// reflog line, the same records (but for its name and the second they were written), the
    /// same files with the same modes, an index git finds clean, and no lock left. Git lists
    /// it, removes it, and finds the repository whole.
    #[test]
    fn a_worktree_added_in_process_is_the_one_git_adds() {
        let g = &crate::git::Repos::default();
        let t = repo();
        let d = t.path().join("repo");
        let wt = t.path().join("wt");
        std::fs::create_dir(&wt).unwrap();
        let (ours, theirs) = (wt.join("ours"), wt.join("theirs"));
        assert!(matches!(
            add_in_process(g, &d, &ours, "item/ours", "main"),
            Some(Ok(()))
        ));
        git(
            &d,
            &[
                "worktree",
                "add",
                "--quiet",
                "-b",
                "item/theirs",
                theirs.to_str().unwrap(),
                "main",
            ],
        );
        let common = d.join(".git");
        let mask = |text: String| {
            let re = regex::Regex::new(r"> \d+ [+-]\d{4}").unwrap();
            re.replace_all(&text, "> WHEN")
                .replace("theirs", "NAME")
                .replace("ours", "NAME")
        };
        let read = |p: PathBuf| {
            mask(std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        };
        for f in ["HEAD", "commondir", "gitdir", "ORIG_HEAD", "logs/HEAD"] {
            assert_eq!(
                read(common.join("worktrees/ours").join(f)),
                read(common.join("worktrees/theirs").join(f)),
                "{f}"
            );
        }
        assert_eq!(read(ours.join(".git")), read(theirs.join(".git")));
        assert_eq!(
            read(common.join("logs/refs/heads/item/ours")),
            read(common.join("logs/refs/heads/item/theirs"))
        );
        assert!(
            read(common.join("logs/refs/heads/item/ours"))
                .ends_with("\tbranch: Created from main\n")
        );
        assert!(!common.join("worktrees/ours/locked").exists());
        assert_eq!(files(&ours), files(&theirs));
        // The same entries and the same cache tree, byte for byte; written in process (git's
        // would have no cache tree of its own making here only if it were git's).
        let (ours_index, theirs_index) = (
            index_without_stat(&common.join("worktrees/ours/index")),
            index_without_stat(&common.join("worktrees/theirs/index")),
        );
        assert_eq!(ours_index, theirs_index);
        assert!(ours_index.1.starts_with(b"TREE"), "{:?}", ours_index.1);
        assert_eq!(
            git(&ours, &["ls-files", "-s"]),
            git(&theirs, &["ls-files", "-s"])
        );
        assert_eq!(git(&ours, &["status", "--porcelain", "--ignored"]), "");
        assert_eq!(
            git(&ours, &["symbolic-ref", "HEAD"]),
            "refs/heads/item/ours\n"
        );
        assert_eq!(
            git(&d, &["rev-parse", "item/ours"]),
            git(&d, &["rev-parse", "main"])
        );
        let listed = git(&d, &["worktree", "list", "--porcelain"]);
        assert!(listed.contains("branch refs/heads/item/ours\n"), "{listed}");
        git(&d, &["fsck", "--strict", "--no-dangling"]);
        git(&d, &["worktree", "remove", ours.to_str().unwrap()]);
        assert!(!ours.exists());
    }

    /// Where git would write more, or name things otherwise, or refuse, nothing is written and
    /// git is asked: a branch that exists (loose or packed, or a ref where its folder would
    /// go), a folder already there, a start that is a tag or a remote-tracking branch or
    /// revision syntax, a name git would change, a sparse checkout or tracking set up by
    /// configuration. A checkout that fails leaves the branch made and nothing of the worktree,
    /// as git leaves them.
    #[test]
    fn what_git_would_do_otherwise_is_left_to_git() {
        let g = &crate::git::Repos::default();
        let t = repo();
        let d = t.path().join("repo");
        let wt = t.path().join("wt");
        std::fs::create_dir(&wt).unwrap();
        let common = d.join(".git");
        let worktrees = || std::fs::read_dir(common.join("worktrees")).map_or(0, |e| e.count());
        git(&d, &["update-ref", "refs/remotes/origin/main", "HEAD"]);
        git(&d, &["branch", "loose"]);
        git(&d, &["branch", "dir/inside"]);
        std::fs::create_dir(wt.join("there")).unwrap();
        for (path, branch, base) in [
            ("a", "main", "main"),
            ("a", "packed-one", "main"),
            ("a", "packed-one/below", "main"),
            ("a", "main/below", "main"),
            ("a", "loose/below", "main"),
            ("a", "dir", "main"),
            ("there", "new", "main"),
            ("a", "new", "v1"),
            ("a", "new", "origin/main"),
            ("a", "new", "main~0"),
            ("a", "new", "HEAD"),
            ("a b", "new", "main"),
            (".a", "new", "main"),
        ] {
            assert!(
                add_in_process(g, &d, &wt.join(path), branch, base).is_none(),
                "{path} {branch} {base}"
            );
        }
        assert_eq!(worktrees(), 0);
        assert!(!wt.join("a").exists());
        assert_eq!(git(&d, &["branch", "--list", "new"]), "");
        for (key, value) in [
            ("core.sparseCheckout", "true"),
            ("branch.autoSetupMerge", "always"),
            ("worktree.useRelativePaths", "true"),
        ] {
            git(&d, &["config", key, value]);
            g.forget(&d);
            assert!(
                add_in_process(g, &d, &wt.join("a"), "new", "main").is_none(),
                "{key}"
            );
            git(&d, &["config", "--unset", key]);
        }
        g.forget(&d);
        assert_eq!(worktrees(), 0);
        // An object the checkout needs is missing: git fails it, and what was made of the
        // worktree is removed.
        let blob = git(&d, &["rev-parse", "HEAD:README.md"]);
        let blob = blob.trim();
        std::fs::remove_file(common.join("objects").join(&blob[..2]).join(&blob[2..])).unwrap();
        let failed = add_in_process(g, &d, &wt.join("a"), "new", "main");
        assert!(matches!(failed, Some(Err(_))), "{failed:?}");
        assert!(!wt.join("a").exists());
        assert_eq!(worktrees(), 0);
        assert_eq!(git(&d, &["branch", "--list", "new"]), "  new\n");
    }

    /// A commit on a new branch `b` whose tree is `tree` (any bytes: a tree git itself would not
    /// make), and a worktree of it with no file checked out yet: its folder and its own git
    /// folder.
    fn bare_worktree(d: &Path, at: &Path, b: &str, tree: &[u8]) -> (PathBuf, PathBuf, String) {
        use std::io::Write;
        let mut child = super::super::base_command()
            .arg("-C")
            .arg(d)
            .args(["hash-object", "-t", "tree", "--literally", "-w", "--stdin"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(tree).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        let tree = String::from_utf8(out.stdout).unwrap();
        let commit = git(d, &["commit-tree", tree.trim(), "-m", "crafted"]);
        let commit = commit.trim().to_string();
        git(d, &["branch", b, &commit]);
        let own = no_checkout(d, at, b);
        (at.to_path_buf(), own, commit)
    }

    /// A worktree of the repository at `d` added at `at` on branch `b` (made where it does not
    /// exist) with no file checked out and no index: its own git folder.
    fn no_checkout(d: &Path, at: &Path, b: &str) -> PathBuf {
        let path = at.to_str().unwrap();
        if git(d, &["branch", "--list", b]).is_empty() {
            git(
                d,
                &["worktree", "add", "-q", "--no-checkout", "-b", b, path],
            );
        } else {
            git(d, &["worktree", "add", "-q", "--no-checkout", path, b]);
        }
        let own = d.join(".git/worktrees").join(at.file_name().unwrap());
        let _ = std::fs::remove_file(own.join("index"));
        own
    }

    /// One tree entry: `mode name\0` and the object's 20 bytes.
    fn entry(mode: &str, name: &[u8], hex: &str) -> Vec<u8> {
        let mut e = format!("{mode} ").into_bytes();
        e.extend_from_slice(name);
        e.push(0);
        e.extend((0..20).map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap()));
        e
    }

    /// The checkout in process writes a plain tree and leaves everything it does not write as
    /// git would to git, with nothing written: a `.gitattributes` (in any case), a submodule,
    /// a name git refuses (`.GIT`, `..`), a file and a folder of one name, an empty folder, a
    /// destination that holds more than its `.git`.
    #[test]
    fn a_checkout_in_process_writes_plain_trees_and_leaves_the_rest_to_git() {
        let t = repo();
        let d = t.path().join("repo");
        let objects = d.join(".git/objects");
        let blob = git(&d, &["rev-parse", "HEAD:README.md"]).trim().to_string();
        let sub = git(&d, &["rev-parse", "HEAD:src"]).trim().to_string();
        let empty = git(&d, &["hash-object", "-t", "tree", "-w", "/dev/null"])
            .trim()
            .to_string();
        let head = git(&d, &["rev-parse", "HEAD"]).trim().to_string();
        let only_git = |top: &Path| {
            let names: Vec<_> = std::fs::read_dir(top)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            names == [std::ffi::OsString::from(".git")]
        };
        // A plain tree: written, and git finds the worktree clean.
        let at = t.path().join("plain");
        let own = no_checkout(&d, &at, "plain");
        assert!(matches!(
            local::check_out_fresh(&at, &own, &objects, &head),
            Some(Ok(()))
        ));
        assert_eq!(git(&at, &["status", "--porcelain", "--ignored"]), "");
        assert_eq!(
            std::fs::read_to_string(at.join("src/b/c/deep.txt")).unwrap(),
            "deep\n"
        );
        // A destination holding more than `.git`: nothing written, the file left.
        let at = t.path().join("busy");
        let own = no_checkout(&d, &at, "busy");
        std::fs::write(at.join("mine"), "mine").unwrap();
        assert!(local::check_out_fresh(&at, &own, &objects, &head).is_none());
        assert_eq!(std::fs::read_to_string(at.join("mine")).unwrap(), "mine");
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("attributes", entry("100644", b".gitattributes", &blob)),
            ("attributes-case", entry("100644", b".GitAttributes", &blob)),
            ("submodule", entry("160000", b"sub", &head)),
            ("dot-git", entry("100644", b".GIT", &blob)),
            ("dot-git-in-folder", {
                let mut t = entry("100644", b"a", &blob);
                t.extend(entry("40000", b".git", &sub));
                t
            }),
            ("dot-dot", entry("40000", b"..", &sub)),
            ("file-and-folder", {
                let mut t = entry("100644", b"a", &blob);
                t.extend(entry("40000", b"a", &sub));
                t
            }),
            ("empty-folder", {
                let mut t = entry("100644", b"a", &blob);
                t.extend(entry("40000", b"e", &empty));
                t
            }),
        ];
        // A blob gone from the store, met after other files were written: what was written is
        // taken away.
        write(t.path().join("gone.txt"), "a blob of its own\n");
        let gone = git(
            &d,
            &[
                "hash-object",
                "-w",
                t.path().join("gone.txt").to_str().unwrap(),
            ],
        )
        .trim()
        .to_string();
        let mut tree = entry("100644", b"a-first", &blob);
        tree.extend(entry("100644", b"b-gone", &gone));
        let (top, own, commit) = bare_worktree(&d, &t.path().join("gone"), "gone", &tree);
        std::fs::remove_file(objects.join(&gone[..2]).join(&gone[2..])).unwrap();
        assert!(local::check_out_fresh(&top, &own, &objects, &commit).is_none());
        assert!(only_git(&top), "a file was left");
        assert!(!own.join("index").exists());
        for (name, tree) in cases {
            let (top, own, commit) = bare_worktree(&d, &t.path().join(name), name, &tree);
            assert!(
                local::check_out_fresh(&top, &own, &objects, &commit).is_none(),
                "{name}"
            );
            assert!(only_git(&top), "{name}: something was written");
            assert!(!own.join("index").exists(), "{name}");
        }
    }
}
