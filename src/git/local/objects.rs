//! Objects read through gitoxide's object database (`gix-odb`): loose or in a pack, stored whole
//! or as a delta, found through a multi-pack index where there is one. Its parsers are fuzzed and
//! take no size from a file on trust: what one read may allocate is bounded ([`ALLOC_LIMIT`]),
//! and a pack index that lies about its size is refused. The history walks and the checkout
//! proof read commits and annotated tags only; every other kind is `None`.
//!
//! gitoxide maps the store's files into memory. A file truncated under the map would end runner
//! with SIGBUS; runner reads a repository's objects only where nothing of an item runs in it
//! (before its worker starts, after its processes are gone) and one run works in a repository at
//! a time, so nothing truncates them then.

use super::{Oid, Reads, SMALL_FILE};
use gix_object::{Exists, Find};
use gix_odb::Header;
use std::path::Path;

/// The most one object read may allocate: commits and tags are small, and so are the bases of
/// their deltas.
const ALLOC_LIMIT: usize = 16 << 20;

/// The kinds of object a walk reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Commit,
    Tag,
}

/// A repository's object store, opened once for a question (a walk reads thousands of commits).
pub(super) enum Objects {
    /// Whatever it takes: loose objects and packs.
    All(Box<gix_odb::Handle>),
    /// Loose objects of at most [`SMALL_FILE`] bytes only: a pack's index can be large
    /// ([`Reads::Small`]).
    Small(gix_odb::loose::Store, std::path::PathBuf),
}

impl Objects {
    /// The store in `objects` (a repository's `.git/objects`), read as `reads` allows.
    pub(super) fn open(objects: &Path, reads: Reads) -> Option<Objects> {
        let hash = gix_hash::Kind::Sha1;
        Some(match reads {
            Reads::All => Objects::All(Box::new(
                gix_odb::at_opts(
                    objects,
                    hash,
                    None,
                    gix_odb::store::init::Options {
                        alloc_limit_bytes: Some(ALLOC_LIMIT),
                        ..Default::default()
                    },
                )
                .ok()?,
            )),
            Reads::Small => Objects::Small(
                gix_odb::loose::Store::at_opts(
                    objects,
                    hash,
                    gix_odb::loose::Options {
                        alloc_limit_bytes: Some(SMALL_FILE as usize * 64),
                        ..Default::default()
                    },
                ),
                objects.to_path_buf(),
            ),
        })
    }

    /// Object `oid`'s kind and content when it is a commit or an annotated tag; `None` for
    /// another kind, an object that is not there (or not allowed by the reads), or one that
    /// cannot be read.
    pub(super) fn commit_or_tag(&self, oid: &Oid) -> Option<(Kind, Vec<u8>)> {
        let id = gix_hash::ObjectId::from_bytes_or_panic(oid);
        let mut buf = Vec::new();
        let data = match self {
            Objects::All(odb) => {
                let header = odb.try_header(&id).ok()??;
                if !matches!(
                    header.kind(),
                    gix_object::Kind::Commit | gix_object::Kind::Tag
                ) {
                    return None;
                }
                odb.try_find(&id, &mut buf).ok()??
            }
            Objects::Small(loose, dir) => {
                let name = super::hex(oid);
                let meta = std::fs::symlink_metadata(dir.join(&name[..2]).join(&name[2..])).ok()?;
                if !meta.is_file() || meta.len() > SMALL_FILE {
                    return None;
                }
                loose.try_find(&id, &mut buf).ok()??
            }
        };
        let kind = match data.kind {
            gix_object::Kind::Commit => Kind::Commit,
            gix_object::Kind::Tag => Kind::Tag,
            _ => return None,
        };
        Some((kind, data.data.to_vec()))
    }

    /// Whether the store holds `oid`, loose or in a pack.
    pub(super) fn contains(&self, oid: &Oid) -> bool {
        let id = gix_hash::ObjectId::from_bytes_or_panic(oid);
        match self {
            Objects::All(odb) => odb.exists(&id),
            Objects::Small(loose, _) => loose.contains(&id),
        }
    }
}
