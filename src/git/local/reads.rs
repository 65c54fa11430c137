//! What a question of the checkout reader may read ([`Reads`]), and object names.

use std::path::Path;
use std::sync::Arc;

use super::objects::Reach;
use crate::git::kept::{KeptFile, KeptFiles};

/// A SHA-1 object name.
pub(super) type Oid = [u8; 20];

/// The tree of an empty index.
pub(super) const EMPTY_TREE: Oid = [
    0x4b, 0x82, 0x5d, 0xc6, 0x42, 0xcb, 0x6e, 0xb9, 0xa0, 0x60, 0xe5, 0x4b, 0xf8, 0xd6, 0x92, 0x88,
    0xfb, 0xee, 0x49, 0x04,
];

/// How much a question may read.
#[derive(Clone, Copy, Debug)]
pub enum Reads<'a> {
    /// Whatever it takes.
    All,
    /// Only files of at most `SMALL_FILE` bytes, and no pack: an answer whose cost does not
    /// grow with the repository (an index that small names a few hundred files at most), cheap
    /// enough to be had on the event loop. A larger file ends the attempt with `None`.
    Small,
    /// As [`Reads::Small`], each file through what the run keeps of the files it read
    /// ([`KeptFiles`]): a file unchanged since is not read again.
    Kept(&'a KeptFiles),
}

/// The largest file a [`Reads::Small`] question reads.
pub(crate) const SMALL_FILE: u64 = 8 * 1024;

impl Reads<'_> {
    /// A FIFO or device in place of a file is not waited on: it is left to git, which runs with
    /// a deadline.
    pub(super) fn bytes(self, path: &Path) -> std::io::Result<Vec<u8>> {
        match self {
            Reads::All => crate::support::fs::read_regular(path, None),
            Reads::Small => crate::support::fs::read_regular(path, Some(SMALL_FILE)),
            Reads::Kept(files) => Ok(files.read(path, SMALL_FILE)?.bytes.clone()),
        }
    }

    /// The file at `path` as [`Reads::Kept`] keeps it; `None` for the other reads.
    pub(super) fn kept(self, path: &Path) -> Option<std::io::Result<Arc<KeptFile>>> {
        match self {
            Reads::Kept(files) => Some(files.read(path, SMALL_FILE)),
            _ => None,
        }
    }

    /// The objects a question may read.
    pub(super) fn reach(self) -> Reach {
        match self {
            Reads::All => Reach::All,
            Reads::Small | Reads::Kept(_) => Reach::Loose(SMALL_FILE),
        }
    }

    pub(super) fn text(self, path: &Path) -> std::io::Result<String> {
        String::from_utf8(self.bytes(path)?).map_err(std::io::Error::other)
    }
}

pub(super) fn parse_oid(text: &[u8]) -> Option<Oid> {
    if text.len() != 40 {
        return None;
    }
    let mut oid = [0u8; 20];
    for (i, pair) in text.chunks_exact(2).enumerate() {
        let digit = |c: u8| (c as char).to_digit(16);
        oid[i] = (digit(pair[0])? * 16 + digit(pair[1])?) as u8;
    }
    Some(oid)
}

pub(super) fn hex(oid: &Oid) -> String {
    oid.iter().map(|b| format!("{b:02x}")).collect()
}
