//! Snapshots of a working tree: the tree it holds written through a temporary index (the
//! checkout's own index and files left as they are), the working tree brought back to one, and
//! what a command can read there that the tree does not show (the verdict key's other half).

use super::command::GitError;
use super::command::{checked, command, failed, run};
use super::local;
use super::repos::Repos;
use std::path::Path;

/// Folders of what tools derive from the tree and keep as their own cache: left out of
/// [`hidden_inputs`].
pub(crate) const DERIVED: &[&str] = &[
    "__pycache__",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".hypothesis",
    "target",
    ".cache",
];

/// What a command run in `dir` can read that the git tree of `dir` does not show, as a digest:
/// the ignored files (their names, sizes, times and modes; a link's target too), and where a
/// tracked link leads outside `dir`, the file it leads to. `None` when a submodule has changes
/// of its own (what a gate reads there is not in the tree either): nothing should be judged
/// from the tree alone then.
pub(crate) fn hidden_inputs(g: &Repos, dir: &Path) -> Result<Option<String>, GitError> {
    use sha2::{Digest, Sha256};
    use std::os::unix::fs::MetadataExt;
    let list = |args: &[&str]| paths(dir, args, run(g, dir, args)?);
    // An index read whole in process has no submodule, and says whether any entry is a link.
    let plain = local::plain_index(dir);
    let staged = match &plain {
        Some(p) if !p.links => Vec::new(),
        _ => list(&["ls-files", "-z", "-s"])?,
    };
    // A submodule (a gitlink, mode 160000) may have changes of its own: asked of `status`.
    if plain.is_none() && staged.iter().any(|e| e.starts_with("160000 ")) {
        let status = list(&[
            "status",
            "--porcelain=v2",
            "-z",
            "--untracked-files=no",
            "--ignore-submodules=none",
        ])?;
        // `1 XY S<c><m><u> …`: a submodule whose commit moved, or with changes or new files
        // inside.
        let dirty_submodule = status.iter().any(|l| {
            l.split(' ')
                .nth(2)
                .is_some_and(|s| s.starts_with('S') && s != "S...")
        });
        if dirty_submodule {
            return Ok(None);
        }
    }
    let mut h = Sha256::new();
    let stat = |h: &mut Sha256, p: &Path| match std::fs::metadata(p) {
        Ok(m) => h.update(format!(
            "{} {} {} {}\0",
            m.len(),
            m.mtime(),
            m.mtime_nsec(),
            m.mode()
        )),
        Err(_) => h.update(b"-\0"),
    };
    // Ignored files are untracked ones: a checkout whose every file is in its index has none,
    // and git need not be asked (a short item's codemod leaves such a checkout).
    let mut ignored = if plain.is_some() && local::no_untracked_file(dir) {
        Vec::new()
    } else {
        list(&[
            "ls-files",
            "-z",
            "--others",
            "--ignored",
            "--exclude-standard",
        ])?
    };
    // What tools write from the tree and read back as a cache of it (bytecode, a test runner's
    // last-failed list, build output) is no input of its own, and changes with every run.
    ignored.retain(|rel| !rel.split('/').any(|c| DERIVED.contains(&c)));
    ignored.sort();
    for rel in &ignored {
        let p = dir.join(rel);
        h.update(rel.as_bytes());
        h.update(b"\0");
        if let Ok(target) = std::fs::read_link(&p) {
            h.update(target.as_os_str().as_encoded_bytes());
            h.update(b"\0");
        }
        stat(&mut h, &p);
    }
    let top = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    for entry in staged {
        let Some((meta, rel)) = entry.split_once('\t') else {
            continue;
        };
        if !meta.starts_with("120000 ") {
            continue;
        }
        let p = dir.join(rel);
        let leads_out = std::fs::canonicalize(&p).map_or(true, |t| !t.starts_with(&top));
        if leads_out {
            h.update(b"link\0");
            h.update(rel.as_bytes());
            h.update(b"\0");
            stat(&mut h, &p);
        }
    }
    Ok(Some(crate::support::hex(&h.finalize())))
}

/// The tree of the working tree of `dir` as it stands (tracked changes, deletions and untracked
/// files that are not ignored), written to the object store through a temporary index: the
/// checkout's own index and files are left as they are.
pub(crate) fn snapshot_tree(g: &Repos, dir: &Path) -> Result<String, GitError> {
    snapshot(g, dir).map(|(tree, _)| tree)
}

/// The index of a checkout as it was before an item's processes ran, copied where they cannot
/// write: its snapshots start from the copy, not from the checkout's index, which they may
/// rewrite. A snapshot trusts an index entry's stat data (a file whose stat data matches is not
/// hashed again): an entry a worker rewrote to name other content, its stat data left as the
/// file's, once had runner commit content no gate saw.
pub struct BaseIndex {
    /// The copy; `None`: the checkout had no index.
    copy: Option<Kept>,
    /// The checkout's index file, and what `lstat` said of it when it was copied.
    path: std::path::PathBuf,
    stamp: Option<IndexStamp>,
}

/// What `lstat` said of the index ([`crate::support::fs::FileStamp`]).
type IndexStamp = crate::support::fs::FileStamp;

fn index_stamp(path: &Path) -> Option<IndexStamp> {
    crate::support::fs::regular_file_stamp(path)
}

fn stamp_of(m: &std::fs::Metadata) -> IndexStamp {
    crate::support::fs::file_stamp(m)
}

/// Where the copy of an index is kept.
enum Kept {
    /// A small index, in memory, with the original's modification time: most items leave their
    /// checkout's index untouched and never need the copy as a file, whose making and removal
    /// cost more than the rest of a short item's checks.
    Bytes(Vec<u8>, std::time::SystemTime),
    /// A file (its modification time the original's).
    File(tempfile::TempPath),
}

impl BaseIndex {
    /// Whether the checkout's index is still the file that was copied, untouched: then what it
    /// says is runner's, and a proof read from it holds.
    pub fn untouched(&self) -> bool {
        index_stamp(&self.path) == self.stamp
    }

    /// Copy the index at `path`: into memory when `in_memory` (it is at most [`SMALL_INDEX`]
    /// bytes long), else into a file.
    fn of(path: std::path::PathBuf, in_memory: bool) -> std::io::Result<BaseIndex> {
        let m = std::fs::symlink_metadata(&path).ok();
        Self::of_looked(path, in_memory, m)
    }

    /// [`BaseIndex::of`], `lstat` of the index given (`None`: there is none).
    fn of_looked(
        path: std::path::PathBuf,
        in_memory: bool,
        m: Option<std::fs::Metadata>,
    ) -> std::io::Result<BaseIndex> {
        let Some(m) = m.filter(std::fs::Metadata::is_file) else {
            return Ok(BaseIndex {
                copy: None,
                path,
                stamp: None,
            });
        };
        let stamp = Some(stamp_of(&m));
        // A regular file, not a link: its own modification time.
        let written = m.modified()?;
        let copy = Some(if in_memory {
            let bytes = crate::support::fs::read_regular(&path, Some(SMALL_INDEX))?;
            Kept::Bytes(bytes, written)
        } else {
            let tmp = tempfile::NamedTempFile::new()?.into_temp_path();
            crate::support::fs::copy_regular(&path, &tmp)?;
            std::fs::File::options()
                .write(true)
                .open(&tmp)?
                .set_modified(written)?;
            Kept::File(tmp)
        });
        Ok(BaseIndex { copy, path, stamp })
    }
}

/// How large an index [`base_index_small`] copies: a copy that costs less than a trip to the
/// blocking pool.
const SMALL_INDEX: u64 = 64 * 1024;

/// [`base_index`] of a checkout whose index is found from small files and is small itself;
/// `None`: ask [`base_index`] on the blocking pool.
pub fn base_index_small(dir: &Path) -> Option<BaseIndex> {
    base_index_small_at(local::index_file(dir)?)
}

/// [`base_index_small_at`], an index of at most 8 KiB through the run's kept files
/// ([`super::kept::KeptFiles`]): one unchanged since the item before is not read again.
pub fn base_index_small_kept(g: &Repos, path: std::path::PathBuf) -> Option<BaseIndex> {
    match g.kept_files().read(&path, local::SMALL_FILE) {
        Ok(kept) => {
            let (secs, nanos) = kept.modified();
            let written = std::time::UNIX_EPOCH
                + std::time::Duration::new(u64::try_from(secs).ok()?, u32::try_from(nanos).ok()?);
            Some(BaseIndex {
                copy: Some(Kept::Bytes(kept.bytes.clone(), written)),
                stamp: Some(kept.identity()),
                path,
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            BaseIndex::of_looked(path, true, None).ok()
        }
        Err(_) => base_index_small_at(path),
    }
}

/// [`base_index_small`] of the index at `path`.
pub fn base_index_small_at(path: std::path::PathBuf) -> Option<BaseIndex> {
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.is_file() && m.len() <= SMALL_INDEX => {
            BaseIndex::of_looked(path, true, Some(m)).ok()
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            BaseIndex::of_looked(path, true, None).ok()
        }
        _ => None,
    }
}

/// Copy the index of the checkout at `dir` ([`BaseIndex`]).
pub fn base_index(g: &Repos, dir: &Path) -> Result<BaseIndex, GitError> {
    Ok(BaseIndex::of(index_path(g, dir)?, false)?)
}

/// Where the index of the checkout at `dir` is.
fn index_path(g: &Repos, dir: &Path) -> Result<std::path::PathBuf, GitError> {
    Ok(match local::index_file(dir) {
        Some(i) => i,
        None => checked(
            g,
            dir,
            &["rev-parse", "--path-format=absolute", "--git-path", "index"],
        )?
        .trim()
        .into(),
    })
}

/// [`snapshot_tree`], with the temporary index it was written through: the snapshot's files
/// with the stat data they had, so that [`restore_snapshot`] can tell later what changed
/// without hashing anything unchanged. The index is removed when the path is dropped.
pub fn snapshot(g: &Repos, dir: &Path) -> Result<(String, tempfile::TempPath), GitError> {
    snapshot_from(g, dir, None)
}

/// [`snapshot`], starting from `base` (the index before an item's processes ran) rather than
/// the checkout's own index.
pub fn snapshot_from(
    g: &Repos,
    dir: &Path,
    base: Option<&BaseIndex>,
) -> Result<(String, tempfile::TempPath), GitError> {
    // None: there was no index; every file is hashed.
    let (index, kept): (Option<std::path::PathBuf>, _) = match base.map(|b| &b.copy) {
        Some(Some(Kept::File(c))) => (Some(c.to_path_buf()), None),
        Some(Some(Kept::Bytes(bytes, written))) => (None, Some((bytes, *written))),
        Some(None) => (None, None),
        None => (Some(index_path(g, dir)?), None),
    };
    let tmp = tempfile::NamedTempFile::new()?.into_temp_path();
    // Starting from the checkout's index keeps its stat data: only changed files are hashed.
    // The copy keeps the index's own time too. git (built, as by default, without nanosecond
    // timestamps) trusts the stat data of an entry only when its second is older than the index
    // file's; an entry of the very second the index was written is "racy" and its content is
    // read. A copy stamped now would make such an entry look settled, and a file rewritten with
    // as many bytes in that second would read as unchanged. The time is read first: an index
    // rewritten meanwhile only makes more entries racy.
    let written = match (kept, &index) {
        (Some((bytes, written)), _) => {
            std::fs::write(&tmp, bytes)?;
            Some(written)
        }
        (None, Some(index)) => match std::fs::metadata(index) {
            Ok(m) => {
                let written = m.modified()?;
                std::fs::copy(index, &tmp)?;
                Some(written)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e.into()),
        },
        (None, None) => None,
    };
    match written {
        Some(written) => std::fs::File::options()
            .write(true)
            .open(&tmp)?
            .set_modified(written)?,
        // git reads an empty file as a broken index, and a missing one as an empty index.
        None => std::fs::remove_file(&tmp)?,
    }
    // Flags that tell git a file did not change (`assume-unchanged`, and `skip-worktree` on a
    // file that is there after all) would hide its edits from the snapshot: cleared in the copy.
    // An index read whole in process has none.
    let hidden = match local::plain_index_file(&tmp) {
        Some(_) if written.is_some() => Vec::new(),
        _ => flagged(g, dir, Some(&tmp))?,
    };
    for chunk in hidden.chunks(256) {
        let mut args = vec![
            "update-index",
            "--no-assume-unchanged",
            "--no-skip-worktree",
            "--",
        ];
        args.extend(chunk.iter().map(String::as_str));
        with_index(g, dir, Some(&tmp), &args)?;
    }
    with_index(g, dir, Some(&tmp), &["add", "-A"])?;
    let tree = match local::write_index_tree(dir, &tmp) {
        Some(tree) => tree,
        None => with_index(g, dir, Some(&tmp), &["write-tree"])?,
    };
    Ok((tree, tmp))
}

/// The index entries whose flags keep git from looking at the file: `assume-unchanged` ones,
/// and `skip-worktree` ones whose file is in the working tree (a sparse checkout's absent files
/// are left as they are).
pub(super) fn flagged(
    g: &Repos,
    dir: &Path,
    index: Option<&Path>,
) -> Result<Vec<String>, GitError> {
    let mut cmd = command(g, dir);
    if let Some(i) = index {
        cmd.env("GIT_INDEX_FILE", i);
    }
    let out = crate::process::spawn_helper(cmd.args(["ls-files", "-z", "-v"]))?;
    if !out.status.success() {
        return Err(failed("ls-files -v", dir, &out));
    }
    Ok(out
        .stdout
        .split(|b| *b == 0)
        .filter_map(|e| {
            let e = std::str::from_utf8(e).ok()?;
            let (tag, path) = e.split_once(' ')?;
            let assumed = tag.chars().all(|c| c.is_ascii_lowercase());
            let skipped = tag.eq_ignore_ascii_case("s") && dir.join(path).exists();
            (assumed || skipped).then(|| path.to_string())
        })
        .collect())
}

/// Run git in `dir` with `GIT_INDEX_FILE` set to `index` (the checkout's own index when
/// `None`); its output, trimmed.
fn with_index(
    g: &Repos,
    dir: &Path,
    index: Option<&Path>,
    args: &[&str],
) -> Result<String, GitError> {
    let mut cmd = command(g, dir);
    if let Some(i) = index {
        cmd.env("GIT_INDEX_FILE", i);
    }
    let out = crate::process::spawn_helper(cmd.args(args))?;
    if !out.status.success() {
        return Err(failed(args.join(" "), dir, &out));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// What [`restore_snapshot`] put back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Restored {
    /// Files that were not in the snapshot (not ignored either), removed.
    pub removed: Vec<String>,
    /// Files of the snapshot that were changed or deleted, written back.
    pub restored: Vec<String>,
}

/// Bring the working tree of `dir` back to a snapshot: the one whose index `index` holds (see
/// [`snapshot`]), or with `None` what the checkout's own index holds (a checkout that was
/// clean). Files that are not in it and not ignored are removed — exactly what appeared since
/// — and its files that changed or went are written back; ignored files are left alone, as the
/// snapshot left them out. Only changed files are read: the index's stat data says which.
pub(crate) fn restore_snapshot(
    g: &Repos,
    dir: &Path,
    index: Option<&Path>,
) -> Result<Restored, GitError> {
    let list = |args: &[&str]| -> Result<Vec<String>, GitError> {
        let mut cmd = command(g, dir);
        if let Some(i) = index {
            cmd.env("GIT_INDEX_FILE", i);
        }
        paths(dir, args, crate::process::spawn_helper(cmd.args(args))?)
    };
    let mut restored = list(&["diff-files", "-z", "--name-only", "--no-renames"])?;
    restored.sort();
    restored.dedup();
    let removed = list(&["ls-files", "-z", "--others", "--exclude-standard"])?;
    for rel in &removed {
        let path = dir.join(rel);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
        // Folders the removed files alone filled go too (git tracks no empty folder).
        let mut parent = path.parent();
        while let Some(p) = parent {
            if p == dir || std::fs::remove_dir(p).is_err() {
                break;
            }
            parent = p.parent();
        }
    }
    for chunk in restored.chunks(256) {
        let mut args = vec!["checkout-index", "--force", "--"];
        args.extend(chunk.iter().map(String::as_str));
        with_index(g, dir, index, &args)?;
    }
    Ok(Restored { removed, restored })
}

/// The NUL-separated paths git printed for `args` in `dir`, or its failure.
fn paths(dir: &Path, args: &[&str], out: std::process::Output) -> Result<Vec<String>, GitError> {
    if !out.status.success() {
        return Err(failed(args.join(" "), dir, &out));
    }
    Ok(out
        .stdout
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect())
}
