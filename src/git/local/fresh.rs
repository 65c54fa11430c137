//! A new worktree's files and index written from its commit's tree without starting git: what
//! `git reset --hard` does in the empty folder `git worktree add` has just made for it, for a
//! tree git checks out as plain files.
//!
//! Only a tree of plain files, executables and links, into a folder that holds nothing but the
//! worktree's `.git` file, with no setting or attribute that changes what git writes: anything
//! else is `None`, with nothing left written, and the caller runs git. So a tree with a
//! submodule, an empty folder, a name git would refuse or that two entries share (a file and a
//! folder alike), a `.gitattributes` anywhere (filters, line endings, encodings), an attributes
//! file of the repository, the user or the system (the checks before a file is written); an
//! object over 16 MiB or one that does not hash to its name, or a file system that takes two
//! names for one (what was written is then taken away).
//!
//! Written by hand rather than through `gix-index` and `gix-worktree-state`: `gix-index` writes no
//! cache tree (`TREE`), which git writes here and which runner's own proof that a checkout is
//! clean reads (see `index`); and its `State::from_tree` trusts the tree's shape (a file and a
//! folder of one name), which is checked here before anything is written. The index is version
//! 2 with the cache tree, as git writes it; `fresh_worktrees_are_checked_out_as_git_checks_them_out`
//! holds the files, the entries and the cache tree to what git writes for the same commit.

use std::collections::HashSet;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use super::objects::{Objects, Reach};
use super::reads::Oid;

/// The most entries a tree checked out here may have: past it, git does it.
const MOST_ENTRIES: usize = 200_000;

/// One file of the tree: its path from the top, mode and object.
struct File {
    path: Vec<u8>,
    mode: u32,
    oid: Oid,
}

/// A folder of the tree, as the cache tree records it: its name, its tree, how many files are
/// beneath it, and its folders.
struct Folder {
    name: Vec<u8>,
    oid: Oid,
    files: usize,
    folders: Vec<Folder>,
}

/// Check the tree of `commit` out into `top`, a worktree whose own git folder is `own` and whose
/// objects are in `objects`, and write its index: `None` where git is to do it — nothing is left
/// written, even when writing failed part way (a file system that takes two names for one) —
/// and `Some(Err)` where what was written could not be taken away.
pub(crate) fn check_out(
    top: &Path,
    own: &Path,
    objects: &Path,
    commit: &Oid,
) -> Option<std::io::Result<()>> {
    if attributes_elsewhere(objects.parent()?) {
        return None;
    }
    let store = Objects::open(objects, Reach::All)?;
    let root = store.commit_tree(commit)?;
    let mut files = Vec::new();
    let root = walk(&store, root, Vec::new(), &mut files)?;
    // Only `.git` is there: git's own checkout would refuse to write over anything else.
    let mut there = std::fs::read_dir(top).ok()?;
    if !there.all(|e| e.is_ok_and(|e| e.file_name() == ".git")) {
        return None;
    }
    match write_files(top, &files, &store).and_then(|()| write_index(top, own, files, &root)) {
        Ok(()) => Some(Ok(())),
        Err(_) => match clear(top, own) {
            Ok(()) => None,
            Err(e) => Some(Err(e)),
        },
    }
}

/// Take away what a checkout that failed part way wrote: everything in `top` but its `.git`
/// file, and the index.
fn clear(top: &Path, own: &Path) -> std::io::Result<()> {
    for e in std::fs::read_dir(top)? {
        let e = e?;
        if e.file_name() == ".git" {
            continue;
        }
        if e.file_type()?.is_dir() {
            std::fs::remove_dir_all(e.path())?;
        } else {
            std::fs::remove_file(e.path())?;
        }
    }
    for name in ["index", "index.lock"] {
        match std::fs::remove_file(own.join(name)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

/// Whether an attributes file outside the tree may apply: the repository's (`info/attributes`
/// of its common folder `common`), the user's (the default place; a configured one is seen by
/// the caller), or the system's.
pub(super) fn attributes_elsewhere(common: &Path) -> bool {
    let home = std::env::var_os("XDG_CONFIG_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".config")));
    let mut places = vec![
        common.join("info/attributes"),
        "/etc/gitattributes".into(),
        "/usr/local/etc/gitattributes".into(),
    ];
    places.extend(home.map(|h| h.join("git/attributes")));
    places.iter().any(|p| std::fs::symlink_metadata(p).is_ok())
}

/// Whether git checks out a file or folder named `name` as this module does: a name git accepts
/// on any file system it protects by default, and not one whose content changes how git checks
/// files out.
fn plain_name(name: &[u8]) -> bool {
    let lower = name.to_ascii_lowercase();
    let trimmed = {
        let end = lower
            .iter()
            .rposition(|b| !matches!(b, b' ' | b'.'))
            .map_or(0, |i| i + 1);
        &lower[..end]
    };
    !name.is_empty()
        && name != b"."
        && name != b".."
        && !name.iter().any(|b| matches!(b, b'/' | b'\\' | b':' | 0))
        && trimmed != b".git"
        && lower != b"git~1"
        && lower != b".gitattributes"
        && lower != b".gitmodules"
}

/// The folder `oid` at `prefix` (`a/b/`, empty at the top): its files added to `files` in the
/// tree's order, and the folder as the cache tree records it. `None` for anything
/// [`check_out`] leaves to git.
fn walk(store: &Objects, oid: Oid, prefix: Vec<u8>, files: &mut Vec<File>) -> Option<Folder> {
    use gix_object::tree::EntryKind;
    let body = store.of_kind(&oid, gix_object::Kind::Tree)?;
    let mut folder = Folder {
        name: prefix
            .strip_suffix(b"/")
            .and_then(|p| p.rsplit(|b| *b == b'/').next())
            .unwrap_or_default()
            .to_vec(),
        oid,
        files: 0,
        folders: Vec::new(),
    };
    let mut names = HashSet::new();
    for entry in gix_object::TreeRefIter::from_bytes(&body, gix_hash::Kind::Sha1) {
        let entry = entry.ok()?;
        let name: &[u8] = entry.filename.as_ref();
        if !plain_name(name) || !names.insert(name.to_vec()) || files.len() >= MOST_ENTRIES {
            return None;
        }
        let mut path = prefix.clone();
        path.extend_from_slice(name);
        let id: Oid = entry.oid.as_bytes().try_into().ok()?;
        let mode = match entry.mode.kind() {
            EntryKind::Tree => {
                path.push(b'/');
                let before = files.len();
                let sub = walk(store, id, path, files)?;
                // An empty folder: git writes no entry for it, and no cache tree that says so.
                if files.len() == before {
                    return None;
                }
                folder.files += sub.files;
                folder.folders.push(sub);
                continue;
            }
            EntryKind::Blob => 0o100644,
            EntryKind::BlobExecutable => 0o100755,
            EntryKind::Link => 0o120000,
            EntryKind::Commit => return None,
        };
        folder.files += 1;
        files.push(File {
            path,
            mode,
            oid: id,
        });
    }
    Some(folder)
}

/// Write every file under `top`, its folders made as they come: a file with the mode git gives
/// it (read and write, and execute for an executable, as the umask allows), a link to what its
/// blob names. Links come last, as git makes them, and each only in a folder that is the one its
/// path names, not one reached through a link: on a file system that takes two names for one, a
/// link `A` written first would otherwise carry `a/x` out of the worktree. A blob that cannot be
/// read here (over 16 MiB, not there, not hashing to its name) fails it, for git to do.
fn write_files(top: &Path, files: &[File], store: &Objects) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let real_top = std::fs::canonicalize(top)?;
    // Folders found to be the ones their paths name. A folder stays so: nothing here removes
    // one, and a link cannot be made where one is.
    let mut named: HashSet<&Path> = HashSet::new();
    let (links, plain): (Vec<&File>, Vec<&File>) = files.iter().partition(|f| f.mode == 0o120000);
    for f in plain.into_iter().chain(links) {
        let blob = store
            .of_kind(&f.oid, gix_object::Kind::Blob)
            .ok_or_else(|| std::io::Error::other("a blob this checkout does not read"))?;
        let rel = Path::new(std::ffi::OsStr::from_bytes(&f.path));
        let path = top.join(rel);
        if let Some(parent) = path.parent()
            && !parent.is_dir()
        {
            std::fs::create_dir_all(parent)?;
        }
        let rel_parent = rel.parent().unwrap_or(Path::new(""));
        if !named.contains(rel_parent) {
            let parent_named = real_top.join(rel_parent);
            if std::fs::canonicalize(path.parent().unwrap_or(top))? != parent_named {
                return Err(std::io::Error::other("a folder reached through a link"));
            }
            named.insert(rel_parent);
        }
        if f.mode == 0o120000 {
            std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(&blob), &path)?;
            continue;
        }
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(if f.mode == 0o100755 { 0o777 } else { 0o666 })
            .open(&path)?;
        out.write_all(&blob)?;
    }
    Ok(())
}

/// Write the index of the worktree at `top` (its own git folder `own`): one entry for each of
/// `files` with what the file system now says of it, in git's order, then the cache tree of
/// `root`, then the checksum; written to `index.lock` and renamed into place, as git does.
fn write_index(top: &Path, own: &Path, mut files: Vec<File>, root: &Folder) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let mut out = Vec::with_capacity(64 + files.len() * 96);
    out.extend_from_slice(b"DIRC");
    out.extend_from_slice(&2u32.to_be_bytes());
    out.extend_from_slice(&u32::try_from(files.len()).unwrap_or(u32::MAX).to_be_bytes());
    for f in &files {
        let m = std::fs::symlink_metadata(top.join(std::ffi::OsStr::from_bytes(&f.path)))?;
        let start = out.len();
        // git keeps the low 32 bits of each (its `stat_data`).
        for v in [
            m.ctime() as u32,
            m.ctime_nsec() as u32,
            m.mtime() as u32,
            m.mtime_nsec() as u32,
            m.dev() as u32,
            m.ino() as u32,
            f.mode,
            m.uid(),
            m.gid(),
            m.size() as u32,
        ] {
            out.extend_from_slice(&v.to_be_bytes());
        }
        out.extend_from_slice(&f.oid);
        let len = f.path.len().min(0xFFF) as u16;
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&f.path);
        // NUL-padded to a multiple of eight, at least one NUL.
        let used = out.len() - start;
        out.resize(start + (used + 8) / 8 * 8, 0);
    }
    let mut tree = Vec::new();
    cache_tree(root, &mut tree);
    out.extend_from_slice(b"TREE");
    out.extend_from_slice(&u32::try_from(tree.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(&tree);
    let mut hasher = gix_hash::hasher(gix_hash::Kind::Sha1);
    hasher.update(&out);
    let sum = hasher
        .try_finalize()
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    out.extend_from_slice(sum.as_slice());
    let lock = own.join("index.lock");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&lock)?;
    let written = file.write_all(&out);
    drop(file);
    match written.and_then(|()| std::fs::rename(&lock, own.join("index"))) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&lock);
            Err(e)
        }
    }
}

/// The cache tree entry of `folder` and those beneath it, as git writes them: the name, the
/// number of files beneath and of folders in it, the tree's name; its folders in git's order
/// for them (shorter names first, then byte by byte).
fn cache_tree(folder: &Folder, out: &mut Vec<u8>) {
    out.extend_from_slice(&folder.name);
    out.push(0);
    out.extend_from_slice(format!("{} {}\n", folder.files, folder.folders.len()).as_bytes());
    out.extend_from_slice(&folder.oid);
    let mut folders: Vec<&Folder> = folder.folders.iter().collect();
    folders.sort_by(|a, b| a.name.len().cmp(&b.name.len()).then(a.name.cmp(&b.name)));
    for f in folders {
        cache_tree(f, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A folder of the worktree reached through a link (what a link `A` and a path `a/x` make on
    /// a file system that takes two names for one) is refused: nothing is written beyond it.
    #[test]
    fn nothing_is_written_through_a_link_the_checkout_made() {
        let t = tempfile::tempdir().unwrap();
        let (repo, top, outside) = (t.path().join("r"), t.path().join("top"), t.path().join("o"));
        for d in [&repo, &top, &outside] {
            std::fs::create_dir(d).unwrap();
        }
        let git = |args: &[&str]| {
            let out = std::process::Command::new("git")
                .arg("-C")
                .arg(&repo)
                .args(args)
                .output()
                .unwrap();
            assert!(out.status.success());
            String::from_utf8(out.stdout).unwrap().trim().to_string()
        };
        git(&["init", "-q"]);
        std::fs::write(t.path().join("target"), outside.to_str().unwrap()).unwrap();
        let hex = git(&[
            "hash-object",
            "-w",
            t.path().join("target").to_str().unwrap(),
        ]);
        let oid: Oid = (0..20)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
            .collect::<Vec<_>>()
            .try_into()
            .unwrap();
        let link = |path: &str| File {
            path: path.as_bytes().to_vec(),
            mode: 0o120000,
            oid,
        };
        let store = Objects::open(&repo.join(".git/objects"), Reach::All).unwrap();
        let written = write_files(&top, &[link("L"), link("L/x")], &store);
        assert!(written.is_err());
        assert_eq!(
            std::fs::read_dir(&outside).unwrap().count(),
            0,
            "written outside"
        );
    }
}
