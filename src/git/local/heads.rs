//! HEAD and refs, loose or packed, read from the repository's files.
//!
//! Read here rather than through gitoxide's `gix-ref`, which opens a loose ref or `packed-refs`
//! with a plain `open` and reads it to its end: a worker that leaves a FIFO where a ref goes
//! makes that wait for ever (tried: `try_find("refs/heads/planted")` on such a repository was
//! still waiting when killed). Every file here is read through
//! [`crate::support::fs::read_regular`], which opens without waiting and refuses anything but a
//! regular file; a ref this does not read plainly (symbolic, broken, a name git would refuse)
//! is left to git, which runs with a deadline.

use std::collections::BTreeSet;
use std::io::ErrorKind;
use std::path::Path;

use super::reads::*;
use super::repo::*;
use crate::support::refname::valid_branch_name;

/// The commit HEAD of `head_dir` names (`None` on a branch without commits) and its branch
/// (`None` when detached), resolved among the refs of `refs_dir` (the same folder for a plain
/// checkout; for a linked worktree, the main repository's).
pub(super) fn read_head(
    head_dir: &Path,
    refs_dir: &Path,
    reads: Reads,
) -> Option<(Option<Oid>, Option<String>)> {
    let text = reads.text(&head_dir.join("HEAD")).ok()?;
    let text = text.strip_suffix('\n').unwrap_or(&text);
    match text.strip_prefix("ref: ") {
        Some(target) => {
            let branch = target.strip_prefix("refs/heads/")?;
            if !valid_branch_name(branch) {
                return None;
            }
            Some((
                resolve_ref(refs_dir, target, reads)?,
                Some(branch.to_string()),
            ))
        }
        None => Some((Some(parse_oid(text.as_bytes())?), None)),
    }
}

/// The commit a ref names: `Some(None)` when the ref does not exist.
pub(super) fn resolve_ref(git_dir: &Path, name: &str, reads: Reads) -> Option<Option<Oid>> {
    match reads.bytes(&git_dir.join(name)) {
        Ok(t) => return Some(Some(parse_oid(t.strip_suffix(b"\n").unwrap_or(&t))?)),
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(_) => return None,
    }
    let packed = match reads.text(&git_dir.join("packed-refs")) {
        Ok(t) => t,
        Err(e) if e.kind() == ErrorKind::NotFound => return Some(None),
        Err(_) => return None,
    };
    for line in packed.lines() {
        if let Some((oid, r)) = line.split_once(' ')
            && r == name
            && !line.starts_with('#')
            && !line.starts_with('^')
        {
            return Some(Some(parse_oid(oid.as_bytes())?));
        }
    }
    Some(None)
}

/// The names of the local branches of the checkout at `dir`, as `git for-each-ref refs/heads/`
/// lists them: loose refs and packed ones. `None` for anything unusual (a symbolic or broken
/// ref, a name git would not accept): ask git.
pub fn branches(dir: &Path) -> Option<BTreeSet<String>> {
    let (_, git_dir) = plain_checkout(dir, Reads::All)?;
    let mut names = BTreeSet::new();
    let heads = git_dir.join("refs/heads");
    let mut dirs = vec![String::new()];
    while let Some(prefix) = dirs.pop() {
        let listing = match std::fs::read_dir(heads.join(&prefix)) {
            Ok(l) => l,
            Err(e) if e.kind() == ErrorKind::NotFound && prefix.is_empty() => break,
            Err(_) => return None,
        };
        for entry in listing {
            let entry = entry.ok()?;
            let name = format!("{prefix}{}", entry.file_name().to_str()?);
            if entry.file_type().ok()?.is_dir() {
                dirs.push(format!("{name}/"));
                continue;
            }
            let content = Reads::All.bytes(&entry.path()).ok()?;
            parse_oid(content.strip_suffix(b"\n").unwrap_or(&content))?;
            if !valid_branch_name(&name) {
                return None;
            }
            names.insert(name);
        }
    }
    match Reads::All.text(&git_dir.join("packed-refs")) {
        Ok(packed) => {
            for line in packed.lines() {
                if line.starts_with('#') || line.starts_with('^') {
                    continue;
                }
                let (oid, name) = line.split_once(' ')?;
                parse_oid(oid.as_bytes())?;
                if let Some(branch) = name.strip_prefix("refs/heads/") {
                    if !valid_branch_name(branch) {
                        return None;
                    }
                    names.insert(branch.to_string());
                }
            }
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(_) => return None,
    }
    Some(names)
}

/// The commit the ref `name` of `git_dir` names, loose or packed: `Some(None)` when there is no
/// such ref, `None` when it cannot be read here (a symbolic ref, say).
pub(crate) fn ref_target(git_dir: &Path, name: &str) -> Option<Option<String>> {
    Some(resolve_ref(git_dir, name, Reads::All)?.map(|oid| hex(&oid)))
}
