//! A checkout's state read from its own files, without starting git.
//!
//! Planning asks every repository what HEAD is and whether the checkout has uncommitted
//! changes. A `git status` for that costs a process start and a few milliseconds of CPU per
//! repository, which for a hundred repositories is most of `runner plan`'s time. This module
//! answers the common case in-process and answers only one way: "clean, and here is HEAD", and
//! only when it has proven it. The proof is the one git itself makes:
//!
//! - the index's cached tree (its `TREE` extension) names the very tree HEAD's commit names, so
//!   nothing is staged;
//! - every index entry's file has exactly the stat data the index recorded, and was not changed
//!   in the same instant the index was written (a "racy" entry, which git settles by reading the
//!   content), so nothing is modified;
//! - every file in the working tree is in the index, so nothing is untracked.
//!
//! Everything it does not fully understand ends the attempt with `None`, and the caller asks
//! git: a linked worktree, a repository owned by another user, a config extension or include,
//! replace refs or grafts, a split or sparse index, a conflict, a submodule, an intent-to-add
//! or skip-worktree entry, any difference in stat data, and any file the index does not name (even one that `.gitignore` would ignore). So a wrong
//! "clean" needs git's own index to be wrong; every other mistake only costs the git call that
//! would have been made anyway.
//!
//! Objects — commits and tags, loose or in a pack, whole or as deltas — are read through
//! gitoxide's object database (`objects`), and trees and commits encoded through `gix-object`
//! (`trees`). The index and refs are read here, by hand, each for the reason its module gives
//! (`index`: gitoxide's version 4 decoder does not bound what a planted index expands to;
//! `heads`: `gix-ref` waits on a FIFO left where a ref goes); each is property-tested against
//! any bytes (`untrusted_bytes`) and differential-tested against git (`tests`).
//!
//! By concern: `repo` (which repositories are read: their own `.git`, or a linked worktree as
//! git makes one, with a plain configuration), `heads` (HEAD and refs, loose and packed),
//! `index` (the index file), `history` (ancestry and how far behind, walked commit by commit),
//! `objects` (the object store), `trees` (trees and commits written), `fresh` (a new
//! worktree's files and index), `numstat` (what a diff between two commits counts),
//! `untracked` (files the index does not name), `reads` (how much
//! a question may read); this file proves a checkout clean.

use std::path::{Path, PathBuf};

use objects::{Kind, Objects, Reach};

mod heads;
mod history;
mod index;
mod reads;
mod repo;

pub use heads::branches;
use heads::read_head;
pub(crate) use heads::ref_target;
pub use history::behind;
pub(crate) use history::is_ancestor;
use index::Index;
pub(crate) use index::{PlainIndex, overexpands, plain_index_file};

/// [`overexpands`], a small index read through the run's kept files (`git::kept`): an item's
/// checkout's index, unchanged since it was read before the item, is not read again.
pub(crate) fn index_overexpands(g: &super::repos::Repos, path: &Path) -> bool {
    match g.kept_files().read(path, reads::SMALL_FILE) {
        Ok(kept) => index::overexpands_bytes(&kept.bytes),
        // Not there, not a regular file, or larger: as the file reader says.
        Err(_) => overexpands(path),
    }
}
pub use reads::Reads;
pub(crate) use reads::SMALL_FILE;
use reads::{Oid, hex};
pub(crate) use repo::{git_dirs, plain_config_text, removable_worktree};
use repo::{linked_checkout, objects_of, plain_checkout, rewrites_history};

/// What one `git rev-parse` tells about a checkout (or the checkout's own files, where they
/// tell it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// Root of the working tree.
    pub toplevel: PathBuf,
    /// The common git dir, shared by all worktrees of one clone (where leases live).
    pub common_dir: PathBuf,
    /// The commit HEAD points at; `None` in a repository without commits.
    pub head: Option<String>,
    /// The branch HEAD is on; `None` when detached.
    pub branch: Option<String>,
}

/// HEAD of the checkout at `dir`, when the checkout is proven to have no uncommitted changes
/// (staged, unstaged or untracked). `None` says nothing either way.
pub(crate) fn clean_checkout(g: &super::repos::Repos, dir: &Path, reads: Reads) -> Option<Probe> {
    let (top, git_dir) = plain_checkout(dir, reads)?;
    if rewrites_history(&git_dir, reads)? {
        return None;
    }
    let (head, branch) = read_head(&git_dir, &git_dir, reads)?;
    let index = Index::read(&git_dir, reads)?;
    let staged = match &head {
        Some(commit) => index.tree? != commit_tree(g, &git_dir, commit, reads)?,
        None => !index.entries.is_empty(),
    };
    if staged {
        return None;
    }
    // The walk first: in a checkout with build output it stops at once, before a stat of every
    // tracked file.
    if !untracked::none(&top, index.entries.iter().map(|e| e.path.as_slice()))
        || !index.worktree_matches(&top)
    {
        return None;
    }
    Some(probe(top, git_dir, head, branch))
}

/// What the checkout at `dir` is and where HEAD points, whatever the state of its files: a plain
/// checkout, or a linked worktree (runner's own work branches), whose HEAD is its own and whose
/// branches are the main repository's. `None` says nothing: ask git.
pub fn head(dir: &Path, reads: Reads) -> Option<Probe> {
    if let Some((top, git_dir)) = plain_checkout(dir, reads) {
        let (head, branch) = read_head(&git_dir, &git_dir, reads)?;
        return Some(probe(top, git_dir, head, branch));
    }
    let (top, own, common) = linked_checkout(dir, reads)?;
    let (head, branch) = read_head(&own, &common, reads)?;
    Some(probe(top, common, head, branch))
}

/// [`head`] from small files (`reads`: [`Reads::Small`], or through the run's kept files), with
/// where the checkout's index is: both from one look at its git folder (an item's start asks
/// both, with nothing run between).
pub(crate) fn head_and_index(dir: &Path, reads: Reads) -> Option<(Probe, PathBuf)> {
    if let Some((top, git_dir)) = plain_checkout(dir, reads) {
        let (head, branch) = read_head(&git_dir, &git_dir, reads)?;
        let index = git_dir.join("index");
        return Some((probe(top, git_dir, head, branch), index));
    }
    let (top, own, common) = linked_checkout(dir, reads)?;
    let (head, branch) = read_head(&own, &common, reads)?;
    Some((probe(top, common, head, branch), own.join("index")))
}

/// The git common dir of the checkout at `dir` (its `.git`, or for a linked worktree the main
/// repository's), from its files. `None`: ask git.
pub(crate) fn common_dir(dir: &Path) -> Option<PathBuf> {
    match plain_checkout(dir, Reads::Small) {
        Some((_, git_dir)) => Some(git_dir),
        None => linked_checkout(dir, Reads::Small).map(|(_, _, common)| common),
    }
}

/// What the index of the checkout at `dir` holds, when this reader understands every entry of
/// it — which also says that no entry is flagged assume-unchanged or skip-worktree, none is a
/// submodule and none is in conflict: whether any entry is a symbolic link. `None`: ask git.
pub(crate) fn plain_index(dir: &Path) -> Option<PlainIndex> {
    plain_index_file(&index_file(dir)?)
}

/// Whether every file of the checkout at `dir` (but its `.git`) is in its index: then it has no
/// untracked file, ignored or not. `false` where that cannot be told here: ask git.
pub(crate) fn no_untracked_file(dir: &Path) -> bool {
    index_file(dir)
        .and_then(|p| Index::read_file(&p, Reads::All))
        .is_some_and(|index| untracked::none(dir, index.entries.iter().map(|e| e.path.as_slice())))
}

/// The index file of the checkout at `dir` (`.git/index`, or a linked worktree's own), from
/// its files. `None`: ask git.
pub(crate) fn index_file(dir: &Path) -> Option<PathBuf> {
    match plain_checkout(dir, Reads::Small) {
        Some((_, git_dir)) => Some(git_dir.join("index")),
        None => linked_checkout(dir, Reads::Small).map(|(_, own, _)| own.join("index")),
    }
}

fn probe(top: PathBuf, git_dir: PathBuf, head: Option<Oid>, branch: Option<String>) -> Probe {
    Probe {
        common_dir: git_dir,
        toplevel: top,
        head: head.map(|h| hex(&h)),
        branch,
    }
}

/// The tree a commit names, read from a loose object, or (where reads are not kept small) a
/// pack; asked after every worker pass of every item, it is read once per commit a run.
fn commit_tree(g: &super::repos::Repos, git_dir: &Path, commit: &Oid, reads: Reads) -> Option<Oid> {
    if let Some(tree) = g.tree(commit) {
        return Some(tree);
    }
    let tree = read_commit_tree(git_dir, commit, reads)?;
    g.remember_tree(*commit, tree);
    Some(tree)
}

/// The object id `text` spells in full hexadecimal.
pub(super) fn oid(text: &str) -> Option<Oid> {
    reads::parse_oid(text.as_bytes())
}

/// `oid` in hexadecimal.
pub(super) fn hex_of(oid: &Oid) -> String {
    hex(oid)
}

fn read_commit_tree(git_dir: &Path, commit: &Oid, reads: Reads) -> Option<Oid> {
    // A pack's index can be large: read only where reads are not kept small.
    Objects::open(&git_dir.join("objects"), reads.reach())?.commit_tree(commit)
}

mod fresh;

/// The files of `commit` (a full commit id) checked out in process into the new worktree at
/// `top`, its index written to its own git folder `own`, the objects read from `objects`:
/// `None` where git is to do it, nothing written ([`fresh`]).
pub(crate) fn check_out_fresh(
    top: &Path,
    own: &Path,
    objects: &Path,
    commit: &str,
) -> Option<std::io::Result<()>> {
    fresh::check_out(top, own, objects, &reads::parse_oid(commit.as_bytes())?)
}

mod numstat;

/// Files changed, lines inserted and deleted between commits `from` and `to` (full ids) of the
/// repository's own checkout at `dir`, as `git diff --numstat --no-renames` totals them, where
/// that is certain without git ([`numstat`]); `None`: ask git.
pub(crate) fn diff_totals(dir: &Path, from: &str, to: &str) -> Option<(u64, u64, u64)> {
    let (top, git_dir) = plain_checkout(dir, Reads::Small)?;
    let (from, to) = (
        reads::parse_oid(from.as_bytes())?,
        reads::parse_oid(to.as_bytes())?,
    );
    numstat::totals(&top, &git_dir, &from, &to)
}

mod objects;

mod trees;

mod untracked;

/// `git write-tree` with `GIT_INDEX_FILE=index` in the checkout at `dir`, in process: the tree
/// the index holds, its trees written to the repository's objects. `None`: ask git.
pub(crate) fn write_index_tree(dir: &Path, index: &Path) -> Option<String> {
    let objects = objects_of(dir)?;
    let index = Index::read_file(index, Reads::All)?;
    let entries: Vec<trees::Entry<'_>> = index
        .entries
        .iter()
        .map(|e| (e.path.as_slice(), e.mode, e.oid))
        .collect();
    let store = Objects::open(&objects, Reach::All)?;
    trees::write_tree(&entries, &objects, &|oid| Some(store.contains(oid)))
}

/// An object of `kind` (`commit`) with `body`, written to the objects of the checkout at `dir`
/// unless there already; its name. `None`: ask git.
pub(crate) fn write_object(dir: &Path, kind: &str, body: &[u8]) -> Option<String> {
    let objects = objects_of(dir)?;
    let store = Objects::open(&objects, Reach::All)?;
    trees::write_object(&objects, kind, body, &|oid| Some(store.contains(oid)))
}

/// The commit a new branch starts from when `git branch <new> <name>` is run in the repository's
/// own checkout at `dir`: `name` a full commit id, or the short name of a local branch that no
/// other ref's name could be taken for (git's own files, `refs/<name>`, a tag come first in
/// git's order). `None`: ask git — anything else (a remote-tracking branch, whose start also
/// sets up tracking; a tag; revision syntax), a linked worktree, an object that is not a commit.
pub(crate) fn start_point(dir: &Path, name: &str) -> Option<String> {
    let (_, git_dir) = plain_checkout(dir, Reads::Small)?;
    let oid = if crate::support::refname::full_object_name(name) {
        reads::parse_oid(name.as_bytes())?
    } else {
        if !crate::support::refname::valid_branch_name(name)
            || name == "HEAD"
            || std::fs::symlink_metadata(git_dir.join(name)).is_ok()
            || heads::resolve_ref(&git_dir, &format!("refs/{name}"), Reads::Small)?.is_some()
            || heads::resolve_ref(&git_dir, &format!("refs/tags/{name}"), Reads::Small)?.is_some()
        {
            return None;
        }
        heads::resolve_ref(&git_dir, &format!("refs/heads/{name}"), Reads::Small)??
    };
    let store = Objects::open(&git_dir.join("objects"), Reach::All)?;
    matches!(store.commit_or_tag(&oid)?.0, Kind::Commit).then(|| hex(&oid))
}

#[cfg(test)]
mod tests;

#[cfg(test)]
#[expect(
    unsafe_code,
    reason = "the tests' allocator, which measures what a parser asks for"
)]
mod untrusted_bytes;
