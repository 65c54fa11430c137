//! Objects read through gitoxide's object database (`gix-odb`): loose or in a pack, stored whole
//! or as a delta, found through a multi-pack index where there is one. Its parsers are fuzzed and
//! take no size from a file on trust: what one read may allocate is bounded ([`ALLOC_LIMIT`]),
//! and a pack index that lies about its size is refused. The history walks and the checkout
//! proof read commits and annotated tags only; every other kind is `None`, and so is an object
//! whose content does not hash to its name.
//!
//! gitoxide maps the store's files into memory. A file truncated under the map would end runner
//! with SIGBUS; runner reads a repository's objects only where nothing of an item runs in it
//! (before its worker starts, after its processes are gone) and one run works in a repository at
//! a time, so nothing truncates them then.

use gix_object::{Exists, Find};
use gix_odb::Header;
use std::path::Path;

type Oid = [u8; 20];

/// The most one object read may allocate: commits and tags are small, and so are the bases of
/// their deltas.
const ALLOC_LIMIT: usize = 16 << 20;

/// How much a question may read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Reach {
    /// Whatever it takes: loose objects and packs.
    All,
    /// Loose objects whose files are at most this many bytes, and no pack: an answer whose cost
    /// does not grow with the repository.
    Loose(u64),
}

/// The kinds of object a walk reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Commit,
    Tag,
}

/// A repository's object store, opened once for a question (a walk reads thousands of commits).
///
/// Loose objects are looked for first, in their own folder; the whole store — its packs, their
/// indexes, a multi-pack index — is opened only for an object not found loose, and only where
/// the reads are not kept small: opening it lists and maps the packs, which costs more than
/// most questions a plan asks of a repository whose commits are loose.
pub(super) struct Objects {
    loose: gix_odb::loose::Store,
    dir: std::path::PathBuf,
    reach: Reach,
    whole: std::cell::OnceCell<Option<Box<gix_odb::Handle>>>,
}

impl Objects {
    /// The store in `objects` (a repository's `.git/objects`), read as far as `reach`.
    pub(super) fn open(objects: &Path, reach: Reach) -> Option<Objects> {
        Some(Objects {
            loose: gix_odb::loose::Store::at(objects, gix_hash::Kind::Sha1),
            dir: objects.to_path_buf(),
            reach,
            whole: std::cell::OnceCell::new(),
        })
    }

    /// The whole store, opened at its first use; `None` where the reads are kept small, or
    /// where it cannot be opened.
    fn whole(&self) -> Option<&gix_odb::Handle> {
        self.whole
            .get_or_init(|| {
                (self.reach == Reach::All)
                    .then(|| {
                        gix_odb::at_opts(
                            &self.dir,
                            gix_hash::Kind::Sha1,
                            None,
                            gix_odb::store::init::Options {
                                alloc_limit_bytes: Some(ALLOC_LIMIT),
                                ..Default::default()
                            },
                        )
                        .ok()
                    })
                    .flatten()
                    .map(Box::new)
            })
            .as_deref()
    }

    /// Object `oid`'s kind and content when it is a commit or an annotated tag; `None` for
    /// another kind, an object that is not there (or not allowed by the reads), or one that
    /// cannot be read.
    pub(super) fn commit_or_tag(&self, oid: &Oid) -> Option<(Kind, Vec<u8>)> {
        let wanted = |k| matches!(k, gix_object::Kind::Commit | gix_object::Kind::Tag);
        match self.read(oid, wanted)? {
            (gix_object::Kind::Commit, body) => Some((Kind::Commit, body)),
            (gix_object::Kind::Tag, body) => Some((Kind::Tag, body)),
            _ => None,
        }
    }

    /// The tree commit `oid` names; `None` when it is not a commit (or as for
    /// [`Objects::commit_or_tag`]).
    pub(super) fn commit_tree(&self, oid: &Oid) -> Option<Oid> {
        let (kind, body) = self.commit_or_tag(oid)?;
        if kind != Kind::Commit {
            return None;
        }
        let tree = gix_object::CommitRefIter::from_bytes(&body, gix_hash::Kind::Sha1)
            .tree_id()
            .ok()?;
        tree.as_slice().try_into().ok()
    }

    /// The content of `oid` when it is an object of `kind` (a tree, a blob) of at most 16 MiB;
    /// `None` as for [`Objects::commit_or_tag`].
    pub(super) fn of_kind(&self, oid: &Oid, kind: gix_object::Kind) -> Option<Vec<u8>> {
        self.read(oid, |k| k == kind).map(|(_, body)| body)
    }

    /// Object `oid`'s kind and content when `wanted` takes its kind, its content hashing to its
    /// name.
    fn read(
        &self,
        oid: &Oid,
        wanted: impl Fn(gix_object::Kind) -> bool,
    ) -> Option<(gix_object::Kind, Vec<u8>)> {
        let name: String = oid.iter().map(|b| format!("{b:02x}")).collect();
        let path = self.dir.join(&name[..2]).join(&name[2..]);
        // A file no longer than its content may be (zlib adds a few bytes to what it cannot
        // compress), and no longer than the reads allow.
        let most = match self.reach {
            Reach::All => ALLOC_LIMIT as u64 + 1024,
            Reach::Loose(file) => file,
        };
        let (kind, body) = match crate::support::fs::read_regular(&path, Some(most)) {
            Ok(bytes) => loose(&bytes, self.limit())?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let whole = self.whole()?;
                let id = gix_hash::ObjectId::from_bytes_or_panic(oid);
                // Packs a worker may have written, read by gitoxide: should its reader panic on
                // one (as its inflate did on a loose object: see [`loose`]), the object is
                // refused, not the run ended.
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    let header = whole.try_header(&id).ok()??;
                    if !wanted(header.kind()) || header.size() > ALLOC_LIMIT as u64 {
                        return None;
                    }
                    let mut buf = Vec::new();
                    let data = whole.try_find(&id, &mut buf).ok()??;
                    Some((data.kind, data.data.to_vec()))
                }))
                .ok()??
            }
            Err(_) => return None,
        };
        if !wanted(kind) {
            return None;
        }
        // An object is its name: one whose content hashes to another name was written by
        // something other than git (a worker can write the store) and is not believed, as git
        // does not believe it.
        let named = gix_object::compute_hash(gix_hash::Kind::Sha1, kind, &body).ok()?;
        (named.as_slice() == oid.as_slice()).then_some((kind, body))
    }

    /// The most one read may allocate.
    fn limit(&self) -> usize {
        match self.reach {
            Reach::All => ALLOC_LIMIT,
            Reach::Loose(file) => usize::try_from(file)
                .unwrap_or(usize::MAX)
                .saturating_mul(64),
        }
    }

    /// Whether the store holds `oid`, loose or in a pack (where the reads allow packs).
    pub(super) fn contains(&self, oid: &Oid) -> bool {
        let id = gix_hash::ObjectId::from_bytes_or_panic(oid);
        self.loose.contains(&id) || self.whole().is_some_and(|w| w.exists(&id))
    }
}

/// A loose object from the bytes of its file: its kind and content, through gitoxide's inflate
/// and header parser; `None` for anything they refuse, or content over `limit` bytes. The file
/// is read rather than mapped (as `gix_odb::loose` does): a map and an unmap for each small
/// object cost more than the read — plan over 1,000 repositories took 1.2x as long mapped.
fn loose(bytes: &[u8], limit: usize) -> Option<(gix_object::Kind, Vec<u8>)> {
    // The longest header: a kind, a space, a size of up to 20 digits, a NUL.
    let mut header = [0u8; 32];
    let mut inflate = gix_zlib::Inflate::default();
    let (status, used, written) = inflate.prefix(bytes, &mut header).ok()?;
    let (kind, size, header_len) = gix_object::decode::loose_header(&header[..written]).ok()?;
    let size = usize::try_from(size).ok().filter(|s| *s <= limit)?;
    // More content inflated with the header than the header claims: not an object git wrote
    // (and gix-zlib 0.4.1's `rest` would index past the room it makes for `size`, and panic).
    if written.checked_sub(header_len)? > size {
        return None;
    }
    let mut out = Vec::new();
    if status == gix_zlib::Status::StreamEnd {
        out.extend_from_slice(header.get(header_len..written)?);
    } else {
        inflate
            .rest(
                bytes.get(used..)?,
                &header[..written],
                header_len,
                &mut out,
                size,
            )
            .ok()?;
    }
    (out.len() == size).then_some((kind, out))
}
