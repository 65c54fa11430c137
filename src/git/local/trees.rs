//! `git write-tree` in process: the trees an index holds, hashed and written to the object store
//! (those not there yet) as loose objects, exactly as git writes them. An item's snapshot asks
//! for one tree after every worker pass; a git process for it cost more than the hashing.
//!
//! Only an index this reader fully understands (see [`super::Index`]) in a repository of SHA-1
//! objects is written here; anything else is git's.

use super::{Entry, Index, Oid, Reads, hex, pack_offset};
use sha1::{Digest, Sha1};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// The tree the index file `index` holds, written to `objects` (the repository's object
/// folder), as hex; `None`: ask git.
pub(super) fn write_tree(index: &Path, objects: &Path) -> Option<String> {
    let index = Index::read_file(index, Reads::All)?;
    // git's empty tree needs no object; git's own answer is as cheap to ask for.
    if index.entries.is_empty() {
        return None;
    }
    let store = Store { objects };
    let (oid, used) = tree_of(&index.entries, 0, &store)?;
    (used == index.entries.len()).then(|| hex(&oid))
}

/// Object `body` of kind `kind` written to `objects` (unless there already), as `git
/// hash-object -w` would; its name, as hex. `None`: ask git.
pub(super) fn write_object(objects: &Path, kind: &str, body: &[u8]) -> Option<String> {
    Store { objects }.put(kind, body).map(|oid| hex(&oid))
}

struct Store<'a> {
    objects: &'a Path,
}

impl Store<'_> {
    /// Whether `oid` is in the store already, loose or in a pack; `None` when that cannot be
    /// told.
    fn has(&self, oid: &Oid) -> Option<bool> {
        let name = hex(oid);
        if self.objects.join(&name[..2]).join(&name[2..]).exists() {
            return Some(true);
        }
        let packs = match std::fs::read_dir(self.objects.join("pack")) {
            Ok(p) => p,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Some(false),
            Err(_) => return None,
        };
        for entry in packs {
            let path = entry.ok()?.path();
            if path.extension().is_some_and(|x| x == "idx") && pack_offset(&path, oid)?.is_some() {
                return Some(true);
            }
        }
        Some(false)
    }

    /// Store object `body` of kind `kind` (unless there already); its name.
    fn put(&self, kind: &str, body: &[u8]) -> Option<Oid> {
        let mut raw = format!("{kind} {}\0", body.len()).into_bytes();
        raw.extend_from_slice(body);
        let oid: Oid = Sha1::digest(&raw).into();
        if self.has(&oid)? {
            return Some(oid);
        }
        let name = hex(&oid);
        let dir = self.objects.join(&name[..2]);
        match std::fs::create_dir(&dir) {
            // As git makes it: with the object folder's own mode (a shared repository's is
            // group-writable and set-group-id, for every member's git to write into).
            Ok(()) => {
                let mode = std::fs::metadata(self.objects).ok()?.permissions().mode() & 0o7777;
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).ok()?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(_) => return None,
        }
        // Written whole beside its name, then renamed: a reader sees all of it or none.
        let mut tmp = tempfile::Builder::new()
            .prefix("tmp_obj_")
            .tempfile_in(&dir)
            .ok()?;
        let packed = miniz_oxide::deflate::compress_to_vec_zlib(&raw, 1);
        tmp.write_all(&packed).ok()?;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o444))
            .ok()?;
        tmp.persist(dir.join(&name[2..])).ok()?;
        Some(oid)
    }
}

/// The tree of the entries under the folder whose path (with its `/`) is the first `depth`
/// bytes of `entries[0].path`, written; and how many entries it took.
fn tree_of(entries: &[Entry], depth: usize, store: &Store<'_>) -> Option<(Oid, usize)> {
    let prefix = &entries.first()?.path[..depth];
    // (name, mode, oid), a folder's name ending in `/` for the order git sorts trees in.
    let mut items: Vec<(Vec<u8>, u32, Oid)> = Vec::new();
    let mut i = 0;
    while i < entries.len() && entries[i].path.starts_with(prefix) {
        let rest = &entries[i].path[depth..];
        match rest.iter().position(|&b| b == b'/') {
            None => {
                items.push((rest.to_vec(), entries[i].mode, entries[i].oid));
                i += 1;
            }
            Some(slash) => {
                let mut name = rest[..=slash].to_vec();
                let (oid, used) = tree_of(&entries[i..], depth + slash + 1, store)?;
                items.push((std::mem::take(&mut name), 0o40000, oid));
                i += used;
            }
        }
    }
    items.sort_by(|a, b| a.0.cmp(&b.0));
    let mut body = Vec::with_capacity(items.len() * 40);
    for (name, mode, oid) in &items {
        let name = name.strip_suffix(b"/").unwrap_or(name);
        if name.is_empty() || name.contains(&0) {
            return None;
        }
        body.extend_from_slice(format!("{mode:o} ").as_bytes());
        body.extend_from_slice(name);
        body.push(0);
        body.extend_from_slice(oid);
    }
    Some((store.put("tree", &body)?, i))
}
