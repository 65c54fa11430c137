//! `git write-tree` in process: the trees an index holds, hashed and written to the object store
//! (those not there yet) as loose objects, exactly as git writes them. An item's snapshot asks
//! for one tree after every worker pass; a git process for it cost more than the hashing.
//!
//! Only an index the checkout reader fully understands, in a repository of SHA-1 objects, is
//! written here; anything else is git's.
//!
//! Trees (and the commits `super::super::commit_in_process` makes) are encoded and hashed by
//! gitoxide's `gix-object`, which orders a tree's entries as git does and refuses a name with a
//! NUL (an empty one is refused here). Objects are read through gitoxide too
//! (`super::objects`). Only the writing of a loose object stays here: a new fan-out folder takes
//! the object folder's own mode, as git makes it in a shared repository, without reading
//! `core.sharedRepository` (gitoxide's loose store makes it with the process's umask). The
//! trees are differential-tested against `git write-tree`.

use gix_object::WriteTo;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

type Oid = [u8; 20];

/// An index entry: its path, mode and object.
pub(super) type Entry<'a> = (&'a [u8], u32, Oid);

/// Whether the repository's object store holds an object, loose or packed (`None`: that cannot
/// be told).
pub(super) type Packed<'a> = &'a dyn Fn(&Oid) -> Option<bool>;

/// The tree index `entries` (in the index's order) hold, written to `objects` (the repository's
/// object folder), as hex; `None`: ask git.
pub(super) fn write_tree(
    entries: &[Entry<'_>],
    objects: &Path,
    packed: Packed<'_>,
) -> Option<String> {
    // git's empty tree needs no object; git's own answer is as cheap to ask for.
    if entries.is_empty() {
        return None;
    }
    let store = Store { objects, packed };
    let (oid, used) = tree_of(entries, 0, &store)?;
    (used == entries.len()).then(|| hex(&oid))
}

/// Object `body` of kind `kind` written to `objects` (unless there already), as `git
/// hash-object -w` would; its name, as hex. `None`: ask git.
pub(super) fn write_object(
    objects: &Path,
    kind: &str,
    body: &[u8],
    packed: Packed<'_>,
) -> Option<String> {
    Store { objects, packed }
        .put(kind, body)
        .map(|oid| hex(&oid))
}

fn hex(oid: &Oid) -> String {
    oid.iter().map(|b| format!("{b:02x}")).collect()
}

struct Store<'a> {
    objects: &'a Path,
    packed: Packed<'a>,
}

impl Store<'_> {
    /// Whether `oid` is in the store already, loose or in a pack; `None` when that cannot be
    /// told.
    fn has(&self, oid: &Oid) -> Option<bool> {
        let name = hex(oid);
        if self.objects.join(&name[..2]).join(&name[2..]).exists() {
            return Some(true);
        }
        (self.packed)(oid)
    }

    /// Store object `body` of kind `kind` (unless there already); its name.
    fn put(&self, kind: &str, body: &[u8]) -> Option<Oid> {
        let kind = gix_object::Kind::from_bytes(kind.as_bytes()).ok()?;
        let oid: Oid = gix_object::compute_hash(gix_hash::Kind::Sha1, kind, body)
            .ok()?
            .as_slice()
            .try_into()
            .ok()?;
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
        let mut raw = gix_object::encode::loose_header(kind, body.len() as u64).to_vec();
        raw.extend_from_slice(body);
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
fn tree_of(entries: &[Entry<'_>], depth: usize, store: &Store<'_>) -> Option<(Oid, usize)> {
    use gix_object::tree;
    let prefix = &entries.first()?.0[..depth];
    let mut items: Vec<tree::Entry> = Vec::new();
    let mut i = 0;
    while i < entries.len() && entries[i].0.starts_with(prefix) {
        let rest = &entries[i].0[depth..];
        let (name, mode, oid) = match rest.iter().position(|&b| b == b'/') {
            None => {
                let (_, mode, oid) = entries[i];
                i += 1;
                (rest, tree::EntryMode::try_from(mode).ok()?, oid)
            }
            Some(slash) => {
                let (oid, used) = tree_of(&entries[i..], depth + slash + 1, store)?;
                i += used;
                (&rest[..slash], tree::EntryKind::Tree.into(), oid)
            }
        };
        // git writes no nameless entry (a path with `//`, or ending in `/`); gitoxide would.
        if name.is_empty() {
            return None;
        }
        items.push(tree::Entry {
            mode,
            filename: name.into(),
            oid: gix_hash::ObjectId::from_bytes_or_panic(&oid),
        });
    }
    // git's order: by name, a folder's name read as if it ended in `/`.
    items.sort();
    let mut body = Vec::with_capacity(items.len() * 40);
    gix_object::Tree { entries: items }
        .write_to(&mut body)
        .ok()?;
    Some((store.put("tree", &body)?, i))
}
