//! Git, two ways. What changes a checkout or needs git's judgement — worktrees added and
//! removed, `add -A` and the tree of a worktree's state, merges, clones, anything the readers
//! below do not fully understand — goes to git's command line ([`command`], [`worktree`],
//! [`snapshot`]). What runner asks of every item, where a git process would cost more than the
//! item, is read and written in process from git's own files: the checkout's HEAD, refs and
//! index ([`local`]), commits and tags through gitoxide's object database (loose or packed,
//! whole or as deltas), the configuration through `gix-config` ([`config`]), a branch moved
//! with its reflog ([`refs`]), trees written from an index and commits, encoded by
//! `gix-object` (`local::trees`). Each in-process piece is checked against git in differential
//! tests and answers `None` — ask git — for anything it does not read exactly as git does; the
//! readers trust no size or count a file gives, since a worker can write them.
//!
//! Every git call goes through one command builder: `git -C <dir>` with a fixed locale, no prompts,
//! stdin closed, and `GIT_OPTIONAL_LOCKS=0` so that read-only questions (status, rev-parse) never
//! write to the repository: `runner plan` promises to write nothing. Every `GIT_*` variable that
//! changes git's answers (`GIT_DIR`, `GIT_WORK_TREE`, `GIT_INDEX_FILE`, `GIT_CONFIG_PARAMETERS`,
//! `GIT_NO_REPLACE_OBJECTS`, …) is removed, so a runner started from a git hook or alias still
//! gets git's own answers about the repository it was asked about.

mod command;
mod config;
mod kept;
mod local;
mod looked;
mod probe;
mod refs;
mod repos;
mod shared_state;
mod snapshot;
mod special;
mod worktree;

pub use command::GitError;
pub use command::command;
use command::{base_command, checked, failed, run};
pub use local::Reads;
pub(crate) use local::index_overexpands;
pub use probe::*;
pub use repos::Repos;
pub use shared_state::{LastCaptures, LeaseMark, SharedState};
use snapshot::flagged;
pub use snapshot::{
    BaseIndex, base_index, base_index_small, base_index_small_at, base_index_small_kept, snapshot,
    snapshot_from,
};
pub(crate) use snapshot::{hidden_inputs, restore_snapshot, snapshot_tree};
pub use special::PlantedListings;
pub(crate) use special::{planted, special_file, worktree_git_dirs};
pub(crate) use worktree::*;

use crate::support::refname::full_object_name;
use std::collections::BTreeSet;
use std::path::Path;

/// A probe and a dirtiness check, for a checkout whose `.git` is a folder (so that it is its own
/// top level and common dir): read from the checkout's files when they prove it clean, else from
/// one `git status` call. `None` when that does not apply or git's answer is not understood; the
/// caller then asks separately.
pub(crate) fn probe_with_status(g: &Repos, dir: &Path) -> Option<(Probe, bool)> {
    if let Some(probe) = local::clean_checkout(g, dir, Reads::All) {
        return Some((probe, false));
    }
    let git_dir = dir.join(".git");
    if !git_dir.is_dir() {
        return None;
    }
    let out = run(
        g,
        dir,
        &[
            "status",
            "--porcelain=v2",
            "--branch",
            "--untracked-files=normal",
        ],
    )
    .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut head = None;
    let mut branch = None;
    let mut dirty = false;
    for line in text.lines() {
        if let Some(oid) = line.strip_prefix("# branch.oid ") {
            head = (oid != "(initial)").then(|| oid.to_string());
        } else if let Some(b) = line.strip_prefix("# branch.head ") {
            branch = (b != "(detached)").then(|| b.to_string());
        } else if !line.starts_with('#') && !line.is_empty() {
            dirty = true;
        }
    }
    let top = std::path::absolute(dir).ok()?;
    let dirty = dirty || hides_edits(g, dir).unwrap_or(true);
    Some((
        Probe {
            common_dir: top.join(".git"),
            toplevel: top,
            head,
            branch,
        },
        dirty,
    ))
}

/// Names of the local branches: read from the checkout's refs where they tell it, else asked of
/// git.
pub(crate) fn local_branches(g: &Repos, dir: &Path) -> Result<BTreeSet<String>, GitError> {
    if let Some(names) = local::branches(dir) {
        return Ok(names);
    }
    let text = checked(
        g,
        dir,
        &[
            "for-each-ref",
            "--format=%(refname:lstrip=2)",
            "refs/heads/",
        ],
    )?;
    Ok(text.lines().map(str::to_string).collect())
}

/// Whether `marker` is contained in `branch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ancestry {
    Contained,
    Missing,
    /// The marker names no commit here; treated as missing (fail closed).
    Unresolvable,
}

/// `git merge-base --is-ancestor marker rev`, with an unknown marker told apart. `rev` is
/// anything git resolves to a commit (`refs/heads/x`, `main`, `HEAD`, an id).
pub fn ancestry(g: &Repos, dir: &Path, marker: &str, rev: &str) -> Result<Ancestry, GitError> {
    // Read from the repository's files when they can answer for certain.
    if let Some(contained) = local::is_ancestor(dir, marker, rev) {
        return Ok(if contained {
            Ancestry::Contained
        } else {
            Ancestry::Missing
        });
    }
    let commit = format!("{marker}^{{commit}}");
    // One call in the usual case; only a failure asks whether the marker resolves at all.
    let out = run(g, dir, &["merge-base", "--is-ancestor", &commit, rev])?;
    match out.status.code() {
        Some(0) => Ok(Ancestry::Contained),
        Some(1) => Ok(Ancestry::Missing),
        _ => {
            let resolved = run(g, dir, &["rev-parse", "--verify", "-q", &commit])?;
            if !resolved.status.success() {
                return Ok(Ancestry::Unresolvable);
            }
            Err(failed(
                format!("merge-base --is-ancestor {marker} {rev}"),
                dir,
                &out,
            ))
        }
    }
}

/// How many commits `base` has that local branch `branch` lacks: how far a continued work
/// branch is behind the base new ones are forked from.
pub fn behind(g: &Repos, dir: &Path, branch: &str, base: &str) -> Result<u64, GitError> {
    if let Some(n) = local::behind(dir, branch, base) {
        return Ok(n);
    }
    let range = format!("refs/heads/{branch}..{base}");
    let text = checked(g, dir, &["rev-list", "--count", &range, "--"])?;
    text.trim().parse().map_err(|_| GitError::Failed {
        args: format!("rev-list --count {range}"),
        dir: dir.display().to_string(),
        stderr: format!("unexpected output `{}`", text.trim()),
    })
}

/// A file of a commit's tree: its path relative to the top, and whether it is a symbolic link.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TreeFile {
    pub path: String,
    pub symlink: bool,
}

/// The files of `rev`'s tree under the folders `roots` (relative to the top; `""` for all).
pub(crate) fn tree_files(
    g: &Repos,
    dir: &Path,
    rev: &str,
    roots: &[String],
) -> Result<Vec<TreeFile>, GitError> {
    let treeish = format!("{rev}^{{tree}}");
    let mut args = vec!["ls-tree", "-r", "-z", "--full-tree", treeish.as_str(), "--"];
    args.extend(roots.iter().filter(|r| !r.is_empty()).map(String::as_str));
    let out = run(g, dir, &args)?;
    if !out.status.success() {
        return Err(failed("ls-tree", dir, &out));
    }
    Ok(out
        .stdout
        .split(|b| *b == 0)
        .filter_map(|entry| {
            let entry = std::str::from_utf8(entry).ok()?;
            let (meta, path) = entry.split_once('\t')?;
            let mode = meta.split(' ').next()?;
            (!meta.contains(" commit ")).then(|| TreeFile {
                path: path.to_string(),
                symlink: mode == "120000",
            })
        })
        .collect())
}

/// The files under `roots` (relative to the top) where the checkout differs from its HEAD
/// commit: untracked, ignored, staged, changed or deleted.
pub(crate) fn uncommitted_under(
    g: &Repos,
    dir: &Path,
    roots: &[String],
) -> Result<std::collections::HashSet<String>, GitError> {
    let mut args = vec![
        "status",
        "--porcelain=v1",
        "-z",
        "--untracked-files=all",
        "--ignored=matching",
        "--no-renames",
        "--",
    ];
    args.extend(roots.iter().filter(|r| !r.is_empty()).map(String::as_str));
    Ok(status_z(g, dir, &args)?
        .into_iter()
        .filter_map(|p| String::from_utf8(p).ok())
        .collect())
}

/// The paths `git status --porcelain=v1 -z` (with `args`) names, as bytes: each entry without
/// its two status letters and space.
fn status_z(g: &Repos, dir: &Path, args: &[&str]) -> Result<Vec<Vec<u8>>, GitError> {
    let out = run(g, dir, args)?;
    if !out.status.success() {
        return Err(failed("status", dir, &out));
    }
    Ok(out
        .stdout
        .split(|b| *b == 0)
        .filter_map(|entry| entry.get(3..))
        .filter(|p| !p.is_empty())
        .map(<[u8]>::to_vec)
        .collect())
}

/// The paths (relative to the top of `dir`) whose content differs from HEAD: changed, staged,
/// deleted or untracked, not ignored.
pub(crate) fn changed_paths(g: &Repos, dir: &Path) -> Result<Vec<String>, GitError> {
    let args = [
        "status",
        "--porcelain=v1",
        "-z",
        "--untracked-files=all",
        "--no-renames",
    ];
    status_z(g, dir, &args)?
        .into_iter()
        // A name that is not UTF-8 is not passed over: it fails the caller's proof.
        .map(|p| {
            String::from_utf8(p).map_err(|_| GitError::Failed {
                args: "status".into(),
                dir: dir.display().to_string(),
                stderr: "it named a path that is not UTF-8".into(),
            })
        })
        .collect()
}

/// Whether the working tree has uncommitted changes (tracked or untracked).
pub(crate) fn is_dirty(g: &Repos, dir: &Path) -> Result<bool, GitError> {
    let text = checked(
        g,
        dir,
        &["status", "--porcelain", "--untracked-files=normal"],
    )?;
    if !text.trim().is_empty() {
        return Ok(true);
    }
    hides_edits(g, dir)
}

/// Whether a clean `git status` may be hiding edits: files flagged `assume-unchanged` (or
/// `skip-worktree` while there) whose content is not what HEAD holds.
fn hides_edits(g: &Repos, dir: &Path) -> Result<bool, GitError> {
    if flagged(g, dir, None)?.is_empty() {
        return Ok(false);
    }
    let (tree, _index) = snapshot(g, dir)?;
    Ok(tree_of(g, dir, "HEAD").ok() != Some(tree))
}

/// Whether `path` holds a `.git` entry (a checkout or a linked worktree), without spawning git.
pub(crate) fn looks_like_checkout(path: &Path) -> bool {
    path.join(".git").exists()
}

/// The commit HEAD points at in `dir`.
pub fn head(g: &Repos, dir: &Path) -> Result<String, GitError> {
    Ok(
        checked(g, dir, &["rev-parse", "--verify", "HEAD^{commit}"])?
            .trim()
            .to_string(),
    )
}

/// The commit local branch `branch` of the repository at `dir` points at.
pub(crate) fn branch_tip(g: &Repos, dir: &Path, branch: &str) -> Result<String, GitError> {
    let rev = format!("refs/heads/{branch}^{{commit}}");
    Ok(
        checked(g, dir, &["rev-parse", "--verify", "--quiet", &rev])?
            .trim()
            .to_string(),
    )
}

/// Push local branch `branch` of the repository at `dir` to the branch of the same name on
/// `remote`, as a fast-forward (a push that would rewrite the remote's branch is rejected and
/// reported, never forced). Credentials come from the user's git configuration; nothing prompts.
/// Push `branch` to the same name on `remote`; `true` when the remote's branch moved (created or
/// fast-forwarded), `false` when it already pointed there.
pub(crate) fn push_branch(
    g: &Repos,
    dir: &Path,
    remote: &str,
    branch: &str,
) -> Result<bool, GitError> {
    let spec = format!("refs/heads/{branch}:refs/heads/{branch}");
    let out = checked(g, dir, &["push", "--porcelain", "--", remote, &spec])?;
    Ok(pushed_anything(&out))
}

/// Whether `git push --porcelain` moved a ref: each ref's line starts with its flag, `=` for
/// one that was already up to date, ` ` `*` `+` for one that moved.
fn pushed_anything(porcelain: &str) -> bool {
    porcelain.lines().any(|l| {
        l.split_once('\t')
            .is_some_and(|(flag, _)| matches!(flag, " " | "*" | "+"))
    })
}

/// Files changed in `dir` since `since` (committed or not), plus untracked files, relative to
/// the working tree root.
pub(crate) fn changed_files(g: &Repos, dir: &Path, since: &str) -> Result<Vec<String>, GitError> {
    let mut files: BTreeSet<String> = checked(
        g,
        dir,
        &[
            "diff",
            "--no-ext-diff",
            "--no-textconv",
            "--name-only",
            since,
        ],
    )?
    .lines()
    .map(str::to_string)
    .collect();
    files.extend(
        checked(g, dir, &["ls-files", "--others", "--exclude-standard"])?
            .lines()
            .map(str::to_string),
    );
    Ok(files.into_iter().collect())
}

/// The merge base of two commits, if they share history.
pub(crate) fn merge_base(g: &Repos, dir: &Path, a: &str, b: &str) -> Option<String> {
    checked(g, dir, &["merge-base", a, b])
        .ok()
        .map(|s| s.trim().to_string())
}

/// Check out `branch` in a worktree at `path`: continued when the branch exists, created from
/// `base` when not. An existing worktree at `path` on that branch is reused.
/// What an earlier run left uncommitted in the runner-owned worktree at `path`, as a patch,
/// when that worktree is still on `branch` and holds anything; nothing is changed. The caller
/// saves the patch durably before [`reset_worktree`] removes it.
pub(crate) fn kept_leftovers(
    g: &Repos,
    path: &Path,
    branch: &str,
) -> Result<Option<String>, GitError> {
    if !path.join(".git").exists() {
        return Ok(None);
    }
    let on = checked(g, path, &["symbolic-ref", "-q", "--short", "HEAD"])
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    if on != branch || !is_dirty(g, path)? {
        return Ok(None);
    }
    let patch = leftovers_patch(g, path)?;
    Ok((!patch.is_empty()).then_some(patch))
}

/// Which of `paths` (relative to the top of `dir`) git ignores there: untracked and matched by
/// an exclude rule. A path nothing ignores would show as new work in the checkout.
pub(crate) fn ignored_of(
    g: &Repos,
    dir: &Path,
    paths: &[String],
) -> Result<BTreeSet<String>, GitError> {
    let paths: Vec<String> = paths
        .iter()
        .filter(|p| !p.contains('\n'))
        .cloned()
        .collect();
    if paths.is_empty() {
        return Ok(BTreeSet::new());
    }
    let mut args = vec!["check-ignore", "--"];
    args.extend(paths.iter().map(String::as_str));
    let out = run(g, dir, &args)?;
    // 1: none of them is ignored.
    if !matches!(out.status.code(), Some(0 | 1)) {
        return Err(failed("check-ignore", dir, &out));
    }
    // One path a line, as given (paths with a newline are not asked about).
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|p| !p.is_empty())
        .map(|p| p.trim_end_matches('/').to_string())
        .collect())
}

/// Start `branch` anew from `base`, keeping what it held as branch `backup` (made at its tip;
/// one already there at that tip is the same backup). A runner-owned worktree at `worktree` on
/// it is removed first; git refuses, and this fails, while another worktree has it checked out.
pub(crate) fn restart_branch(
    g: &Repos,
    repo: &Path,
    worktree: &Path,
    branch: &str,
    backup: &str,
    base: &str,
) -> Result<(), GitError> {
    if worktree.join(".git").exists() {
        let p = worktree.to_string_lossy().to_string();
        checked(g, repo, &["worktree", "remove", "--force", &p])?;
    }
    let tip = branch_tip(g, repo, branch)?;
    match branch_tip(g, repo, backup) {
        Ok(t) if t == tip => {}
        Ok(t) => {
            return Err(GitError::Failed {
                args: format!("branch {backup}"),
                dir: repo.display().to_string(),
                stderr: format!("branch `{backup}` exists already, at `{t}`"),
            });
        }
        Err(_) => {
            checked(g, repo, &["branch", "--no-track", "--", backup, &tip])?;
        }
    }
    checked(
        g,
        repo,
        &["branch", "--force", "--no-track", "--", branch, base],
    )?;
    Ok(())
}

/// The commit `rev` names in the repository at `dir`.
pub(crate) fn commit_of(g: &Repos, dir: &Path, rev: &str) -> Result<String, GitError> {
    Ok(checked(
        g,
        dir,
        &["rev-parse", "--verify", &format!("{rev}^{{commit}}")],
    )?
    .trim()
    .to_string())
}

/// The tree the working tree of `dir` holds, untracked files included (ignored ones not):
/// read from the checkout's files when they prove it clean, else written through a temporary
/// index ([`snapshot_tree`]).
pub(crate) fn working_tree(g: &Repos, dir: &Path) -> Result<String, GitError> {
    if let Some(head) = proven_clean(g, dir).and_then(|p| p.head) {
        return tree_of(g, dir, &head);
    }
    snapshot_tree(g, dir)
}

/// Whether commit `a` is an ancestor of (or equal to) `b`.
pub(crate) fn is_ancestor(g: &Repos, dir: &Path, a: &str, b: &str) -> Result<bool, GitError> {
    let out = run(g, dir, &["merge-base", "--is-ancestor", a, b])?;
    match out.status.code() {
        Some(0) => Ok(true),
        Some(1) => Ok(false),
        _ => Err(failed(
            format!("merge-base --is-ancestor {a} {b}"),
            dir,
            &out,
        )),
    }
}

/// The tree of commit `rev`. A commit given by its full name always names the same tree: that
/// answer is remembered for the run.
pub(crate) fn tree_of(g: &Repos, dir: &Path, rev: &str) -> Result<String, GitError> {
    let commit = if full_object_name(rev) {
        local::oid(rev)
    } else {
        None
    };
    if let Some(tree) = commit.as_ref().and_then(|c| g.tree(c)) {
        return Ok(local::hex_of(&tree));
    }
    let tree = checked(
        g,
        dir,
        &["rev-parse", "--verify", &format!("{rev}^{{tree}}")],
    )?
    .trim()
    .to_string();
    if let (Some(commit), Some(named)) = (commit, local::oid(&tree)) {
        g.remember_tree(commit, named);
    }
    Ok(tree)
}

/// Whether `dir`'s repository names who commits (`user.name` and `user.email`), or the
/// environment does. The environment is looked at first (it wins over any configuration, and
/// costs no git call); a folder's answer is remembered for the run.
fn has_identity(g: &Repos, dir: &Path) -> bool {
    if [
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
    ]
    .iter()
    .all(|k| std::env::var_os(k).is_some())
    {
        return true;
    }
    // Asked with the filter drivers, once per folder; a worktree runner added shares its
    // repository's answer.
    command::names_identity(g, dir)
}

pub(crate) use command::DEFAULT_IDENTITY;

/// Commit `tree` on top of `parent` with `message` and move `branch` to it, but only if the
/// branch is still at `parent` (compare and swap). The repository's configured identity is used;
/// without one, [`DEFAULT_IDENTITY`]. Returns the new commit.
pub(crate) fn commit_tree_on(
    g: &Repos,
    dir: &Path,
    tree: &str,
    parent: &str,
    branch: &str,
    message: &str,
) -> Result<String, GitError> {
    let commit = match commit_in_process(g, dir, tree, parent, message) {
        Some(c) => c,
        None => commit_tree(g, dir, tree, parent, message)?,
    };
    let refname = format!("refs/heads/{branch}");
    // As `git commit` writes it: "commit: " and the subject line.
    let msg = format!("commit: {}", message.lines().next().unwrap_or_default());
    match refs::update_in_process(g, dir, &refname, &commit, Some(parent), &msg) {
        Some(Ok(())) => return Ok(commit),
        Some(Err(e)) => {
            return Err(GitError::Failed {
                args: format!("update-ref {refname}"),
                dir: dir.display().to_string(),
                stderr: e.to_string(),
            });
        }
        None => {}
    }
    let mut cmd = command(g, dir);
    with_identity(g, dir, &mut cmd);
    let out = crate::process::spawn_helper(cmd.env("GIT_OPTIONAL_LOCKS", "1").args([
        "update-ref",
        "-m",
        &msg,
        &refname,
        &commit,
        parent,
    ]))?;
    if !out.status.success() {
        return Err(failed(format!("update-ref {refname}"), dir, &out));
    }
    Ok(commit)
}

/// Runner's own identity for a git call in `dir` where the repository names none.
fn with_identity(g: &Repos, dir: &Path, cmd: &mut std::process::Command) {
    if !has_identity(g, dir) {
        cmd.args([
            "-c",
            &format!("user.name={}", DEFAULT_IDENTITY.0),
            "-c",
            &format!("user.email={}", DEFAULT_IDENTITY.1),
        ]);
    }
}

/// `git commit-tree tree -p parent -m message` in `dir`: the new commit.
fn commit_tree(
    g: &Repos,
    dir: &Path,
    tree: &str,
    parent: &str,
    message: &str,
) -> Result<String, GitError> {
    let mut cmd = command(g, dir);
    with_identity(g, dir, &mut cmd);
    cmd.args(["commit-tree", tree, "-p", parent, "-m", message]);
    let out = crate::process::spawn_helper(&mut cmd)?;
    if !out.status.success() {
        return Err(failed("commit-tree", dir, &out));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// [`commit_tree`] without a git process: the same commit object, by the same author and
/// committer at this second in the local time zone, written to the repository's objects.
/// `None` where git is to make it (see [`command::commit_idents`] and [`local::write_object`]).
fn commit_in_process(
    g: &Repos,
    dir: &Path,
    tree: &str,
    parent: &str,
    message: &str,
) -> Option<String> {
    use gix_object::WriteTo;
    if !full_object_name(tree) || !full_object_name(parent) || message.contains('\0') {
        return None;
    }
    let [(an, ae), (cn, ce)] = command::commit_idents(g, dir)?;
    let now = jiff::Zoned::now();
    let time = gix_date::Time::new(now.timestamp().as_second(), now.offset().seconds());
    let sign = |name: String, email: String| gix_actor::Signature {
        name: name.into(),
        email: email.into(),
        time,
    };
    let commit = gix_object::Commit {
        tree: gix_hash::ObjectId::from_hex(tree.as_bytes()).ok()?,
        parents: [gix_hash::ObjectId::from_hex(parent.as_bytes()).ok()?].into(),
        author: sign(an, ae),
        committer: sign(cn, ce),
        encoding: None,
        message: format!("{message}\n").into(),
        extra_headers: Vec::new(),
    };
    let mut body = Vec::new();
    commit.write_to(&mut body).ok()?;
    local::write_object(dir, "commit", &body)
}

/// Make the index of `dir` match HEAD again, leaving the files as they are.
pub(crate) fn reset_index(g: &Repos, dir: &Path) -> Result<(), GitError> {
    let out = crate::process::spawn_helper(
        command(g, dir)
            .env("GIT_OPTIONAL_LOCKS", "1")
            .args(["reset", "--quiet"]),
    )?;
    if !out.status.success() {
        return Err(failed("reset", dir, &out));
    }
    Ok(())
}

/// Files changed, lines inserted and deleted between commits `from` and `to`: counted in
/// process where that is certain to be git's count (a plain repository, full commit ids, no
/// setting or attribute that changes it), else by `git diff --numstat`.
pub fn diffstat(g: &Repos, dir: &Path, from: &str, to: &str) -> Result<(u64, u64, u64), GitError> {
    if command::plain_diffs(g, dir)
        && let Some(totals) = local::diff_totals(dir, from, to)
    {
        return Ok(totals);
    }
    let text = checked(
        g,
        dir,
        &[
            "diff",
            "--no-ext-diff",
            "--no-textconv",
            "--numstat",
            "--no-renames",
            from,
            to,
        ],
    )?;
    let (mut files, mut ins, mut del) = (0, 0, 0);
    for line in text.lines() {
        let mut f = line.split('\t');
        files += 1;
        // Binary files show `-`: they count as a file, not as lines.
        ins += f.next().and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
        del += f.next().and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
    }
    Ok((files, ins, del))
}

/// Paths with uncommitted changes in `dir` (tracked or untracked), as `git status` names them.
pub fn uncommitted(g: &Repos, dir: &Path) -> Result<Vec<String>, GitError> {
    let text = checked(g, dir, &["status", "--porcelain", "--untracked-files=all"])?;
    Ok(text
        .lines()
        .filter_map(|l| l.get(3..))
        .map(str::to_string)
        .collect())
}

/// What is uncommitted in `dir` (tracked changes and untracked files that are not ignored), as
/// a patch against HEAD that `git apply` takes back; empty when nothing is. Reads through a
/// temporary index: the checkout is left as it is.
pub(crate) fn leftovers_patch(g: &Repos, dir: &Path) -> Result<String, GitError> {
    let tree = snapshot_tree(g, dir)?;
    let text = checked(
        g,
        dir,
        &[
            "diff",
            "--no-ext-diff",
            "--no-textconv",
            "--binary",
            "HEAD",
            &tree,
        ],
    )?;
    Ok(text)
}

/// Bring a runner-owned worktree back to its branch's committed state: uncommitted changes and
/// untracked files (not ignored ones) are removed.
pub(crate) fn reset_worktree(g: &Repos, dir: &Path) -> Result<(), GitError> {
    for args in [
        &["reset", "--quiet", "--hard", "HEAD"][..],
        &["clean", "--quiet", "-d", "--force"][..],
    ] {
        let out = crate::process::spawn_helper(
            command(g, dir).env("GIT_OPTIONAL_LOCKS", "1").args(args),
        )?;
        if !out.status.success() {
            return Err(failed(args.join(" "), dir, &out));
        }
    }
    Ok(())
}

/// Bring a runner-owned clone up to date with its origin: fetch, then fast-forward the
/// checked-out branch when it is clean and can be (a clone runner made is never rewound or
/// merged).
pub(crate) fn fetch(g: &Repos, dest: &Path) -> Result<(), GitError> {
    checked(g, dest, &["fetch", "--quiet", "--prune", "origin"])?;
    if !is_dirty(g, dest)? {
        // No upstream or a diverged branch is not an error: the branch stays as it is.
        let _ = checked(g, dest, &["merge", "--ff-only", "--quiet", "@{upstream}"]);
    }
    Ok(())
}

/// Someone else pushed to work branch `branch` on `remote`: fetch it and move the local branch
/// forward to what they pushed, when that descends from the local tip (a fast-forward: nothing
/// of the local branch is lost, and nothing is ever force-pushed). The commit the branch now
/// points at; an error when the two diverged or git fails.
pub(crate) fn take_remote_head(
    g: &Repos,
    dir: &Path,
    remote: &str,
    branch: &str,
) -> Result<String, GitError> {
    checked(
        g,
        dir,
        &[
            "fetch",
            "--quiet",
            "--no-tags",
            remote,
            &format!("refs/heads/{branch}"),
        ],
    )?;
    let theirs = checked(g, dir, &["rev-parse", "--verify", "FETCH_HEAD^{commit}"])?
        .trim()
        .to_string();
    let ours = checked(
        g,
        dir,
        &["rev-parse", "--verify", &format!("refs/heads/{branch}")],
    )?
    .trim()
    .to_string();
    if theirs == ours {
        return Ok(ours);
    }
    if !is_ancestor(g, dir, &ours, &theirs)? {
        return Err(GitError::Diverged(format!(
            "`{branch}` on `{remote}` ({}) does not descend from the local branch ({}): the two diverged, and runner never force-pushes",
            &theirs[..theirs.len().min(10)],
            &ours[..ours.len().min(10)]
        )));
    }
    checked(
        g,
        dir,
        &[
            "update-ref",
            &format!("refs/heads/{branch}"),
            &theirs,
            &ours,
        ],
    )?;
    Ok(theirs)
}

/// Clone `url` into `dest` (a bundle, a bare repository path or a remote).
pub(crate) fn clone_repo(url: &str, dest: &Path) -> Result<(), GitError> {
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let out = crate::process::spawn_helper(
        base_command()
            .args(["clone", "--quiet", "--no-hardlinks", url])
            .arg(dest),
    )?;
    if !out.status.success() {
        return Err(failed("clone", dest, &out));
    }
    Ok(())
}
