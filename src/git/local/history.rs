//! History walks without a process: whether a marker is an ancestor of a branch, and how far
//! a branch is behind its base, read commit by commit from the object store.

use std::collections::HashSet;
use std::path::Path;

use super::heads::*;
use super::objects::{Kind, Objects, Reach};
use super::reads::*;
use super::repo::*;

/// Whether the commit `marker` names is an ancestor of (or is) the tip of branch ref `rev`
/// (`refs/heads/...`), read from the repository's own files: git's `merge-base --is-ancestor`
/// without a process. `marker` is a full commit id or a ref name, resolved in git's order
/// (`refs/<m>`, `refs/tags/<m>`, `refs/heads/<m>`, `refs/remotes/<m>`, `refs/remotes/<m>/HEAD`),
/// annotated tags peeled. `None` says nothing, and git is asked: a marker with revision syntax or
/// that resolves nowhere here, a shallow clone, alternates, grafts or replace refs, an object
/// that cannot be read, or more than [`WALK_LIMIT`] commits to look at.
pub(crate) fn is_ancestor(dir: &Path, marker: &str, rev: &str) -> Option<bool> {
    let git_dir = walkable(dir)?;
    let target = resolve_marker(&git_dir, marker)?;
    let tip = resolve_ref(
        &git_dir,
        rev.strip_prefix("refs/heads/").map(|_| rev)?,
        Reads::All,
    )??;
    let objects = Objects::open(&git_dir.join("objects"), Reach::All)?;
    walk(
        &objects,
        tip,
        &HashSet::new(),
        &mut HashSet::new(),
        Some(target),
    )
}

/// How many commits `base` has that local branch `branch` lacks (`git rev-list --count
/// refs/heads/<branch>..<base>`), read from the repository's files as [`is_ancestor`] reads
/// them; `None` says nothing, and git is asked.
pub fn behind(dir: &Path, branch: &str, base: &str) -> Option<u64> {
    let git_dir = walkable(dir)?;
    let base = resolve_marker(&git_dir, base)?;
    let tip = resolve_ref(&git_dir, &format!("refs/heads/{branch}"), Reads::All)??;
    if base == tip {
        return Some(0);
    }
    let objects = Objects::open(&git_dir.join("objects"), Reach::All)?;
    let mut on_branch = HashSet::new();
    walk(&objects, tip, &HashSet::new(), &mut on_branch, None)?;
    let mut only_base = HashSet::new();
    walk(&objects, base, &on_branch, &mut only_base, None)?;
    Some(only_base.len() as u64)
}

/// The git dir of the checkout at `dir`, when its history is read here as git reads it: no
/// grafts or replace refs, not a shallow clone, no alternates.
fn walkable(dir: &Path) -> Option<std::path::PathBuf> {
    let (_, git_dir) = plain_checkout(dir, Reads::All)?;
    if rewrites_history(&git_dir, Reads::All)?
        || git_dir.join("shallow").exists()
        || git_dir.join("objects/info/alternates").exists()
    {
        return None;
    }
    Some(git_dir)
}

/// Walk the commits reachable from `from`, not through those in `stop`, adding each to `seen`:
/// `Some(true)` once `target` is reached, `Some(false)` when the walk ends without it. `None`
/// says nothing: an object that cannot be read or is not a commit, or more than
/// [`WALK_LIMIT`] commits.
fn walk(
    objects: &Objects,
    from: Oid,
    stop: &HashSet<Oid>,
    seen: &mut HashSet<Oid>,
    target: Option<Oid>,
) -> Option<bool> {
    let mut todo = vec![from];
    while let Some(c) = todo.pop() {
        if target == Some(c) {
            return Some(true);
        }
        if stop.contains(&c) || !seen.insert(c) {
            continue;
        }
        if seen.len() > WALK_LIMIT {
            return None;
        }
        let (kind, body) = objects.commit_or_tag(&c)?;
        if kind != Kind::Commit {
            return None;
        }
        todo.extend(parents(&body)?);
    }
    Some(false)
}

/// The most commits [`is_ancestor`] reads before it leaves the question to git.
pub(crate) const WALK_LIMIT: usize = 20_000;

/// The commit a marker names, peeling annotated tags.
pub(super) fn resolve_marker(git_dir: &Path, marker: &str) -> Option<Oid> {
    let mut oid = match parse_oid(marker.as_bytes()) {
        Some(o) => o,
        None => {
            // Plain ref names only: anything with revision syntax is git's to read.
            if marker.is_empty()
                || marker.starts_with('-')
                || marker
                    .chars()
                    .any(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/')))
                || marker.contains("..")
                || marker
                    .split('/')
                    .any(|p| p.is_empty() || p.starts_with('.'))
            {
                return None;
            }
            // git looks in $GIT_DIR itself first (HEAD, FETCH_HEAD, …): leave those to git.
            if git_dir.join(marker).exists() {
                return None;
            }
            let mut found = None;
            for candidate in [
                format!("refs/{marker}"),
                format!("refs/tags/{marker}"),
                format!("refs/heads/{marker}"),
                format!("refs/remotes/{marker}"),
                format!("refs/remotes/{marker}/HEAD"),
            ] {
                if let Some(o) = resolve_ref(git_dir, &candidate, Reads::All)? {
                    found = Some(o);
                    break;
                }
            }
            found?
        }
    };
    let objects = Objects::open(&git_dir.join("objects"), Reach::All)?;
    for _ in 0..8 {
        let (kind, body) = objects.commit_or_tag(&oid)?;
        match kind {
            Kind::Commit => return Some(oid),
            Kind::Tag => oid = parse_oid(body.strip_prefix(b"object ")?.get(..40)?)?,
        }
    }
    None
}

/// A commit's parents, from the start of its body (the header lines come first), through
/// gitoxide's commit parser.
pub(super) fn parents(body: &[u8]) -> Option<Vec<Oid>> {
    use gix_object::commit::ref_iter::Token;
    let mut out = Vec::new();
    for token in gix_object::CommitRefIter::from_bytes(body, gix_hash::Kind::Sha1) {
        match token.ok()? {
            Token::Tree { .. } => {}
            Token::Parent { id } => out.push(id.as_slice().try_into().ok()?),
            // The parents end at the author line; a body cut short before it says nothing.
            Token::Author { .. } => return Some(out),
            _ => return None,
        }
    }
    None
}
