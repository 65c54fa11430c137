//! What a question of the checkout reader may read ([`Reads`]), and object names.

use std::path::Path;

use super::objects::Reach;

/// A SHA-1 object name.
pub(super) type Oid = [u8; 20];

/// The tree of an empty index.
pub(super) const EMPTY_TREE: Oid = [
    0x4b, 0x82, 0x5d, 0xc6, 0x42, 0xcb, 0x6e, 0xb9, 0xa0, 0x60, 0xe5, 0x4b, 0xf8, 0xd6, 0x92, 0x88,
    0xfb, 0xee, 0x49, 0x04,
];

/// How much a question may read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reads {
    /// Whatever it takes.
    All,
    /// Only files of at most `SMALL_FILE` bytes, and no pack: an answer whose cost does not
    /// grow with the repository (an index that small names a few hundred files at most), cheap
    /// enough to be had on the event loop. A larger file ends the attempt with `None`.
    Small,
}

/// The largest file a [`Reads::Small`] question reads.
pub(crate) const SMALL_FILE: u64 = 8 * 1024;

impl Reads {
    /// A FIFO or device in place of a file is not waited on: it is left to git, which runs with
    /// a deadline.
    pub(super) fn bytes(self, path: &Path) -> std::io::Result<Vec<u8>> {
        let limit = (self == Reads::Small).then_some(SMALL_FILE);
        crate::support::fs::read_regular(path, limit)
    }

    /// The objects a question may read.
    pub(super) fn reach(self) -> Reach {
        match self {
            Reads::All => Reach::All,
            Reads::Small => Reach::Loose(SMALL_FILE),
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
