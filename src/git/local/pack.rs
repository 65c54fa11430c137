//! Objects whole in a pack, and the zlib streams of objects: the start of a commit or tag (for
//! the history walks of the checkout reader) and whether a pack holds an object (so the tree
//! writer does not write it loose again).
//!
//! Hand-written because the reader needs only the start of an object stored whole, read without
//! a git process; a delta, a version-1 index or anything this reader does not trust is `None`,
//! and the caller asks git. Every size comes from a file a worker can write: nothing is read or
//! allocated past what the file holds.

use std::ffi::OsStr;
use std::fs::File;
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;
use std::path::Path;

type Oid = [u8; 20];

/// The first `limit` bytes of a zlib stream's content.
pub(super) fn inflate_up_to(data: &[u8], limit: usize) -> Option<Vec<u8>> {
    use miniz_oxide::inflate::stream::{InflateState, inflate};
    let mut state = InflateState::new_boxed(miniz_oxide::DataFormat::Zlib);
    let mut out = vec![0u8; limit];
    let r = inflate(&mut state, data, &mut out, miniz_oxide::MZFlush::None);
    r.status.ok()?;
    out.truncate(r.bytes_written);
    Some(out)
}

/// The type and start of an object stored whole (not as a delta) in one of the packs.
pub(super) fn packed_object_start(
    objects: &Path,
    oid: &Oid,
    limit: usize,
) -> Option<(String, Vec<u8>)> {
    for entry in std::fs::read_dir(objects.join("pack")).ok()? {
        let path = entry.ok()?.path();
        if path.extension() != Some(OsStr::new("idx")) {
            continue;
        }
        let Some(offset) = pack_offset(&path, oid)? else {
            continue;
        };
        let pack = File::open(path.with_extension("pack")).ok()?;
        let mut buf = vec![0u8; limit + 64];
        let n = pack.read_at(&mut buf, offset).ok()?;
        let buf = &buf[..n];
        let first = *buf.first()?;
        let kind = match (first >> 4) & 7 {
            1 => "commit",
            4 => "tag",
            // A tree, a blob or a delta: not for this reader.
            _ => return None,
        };
        let mut i = 0;
        let mut c = first;
        while c & 0x80 != 0 {
            i += 1;
            c = *buf.get(i)?;
        }
        return Some((kind.to_string(), inflate_up_to(&buf[i + 1..], limit)?));
    }
    None
}

/// The first bytes of a zlib stream's content.
pub(super) fn inflate_start(data: &[u8]) -> Option<Vec<u8>> {
    use miniz_oxide::inflate::stream::{InflateState, inflate};
    let mut state = InflateState::new_boxed(miniz_oxide::DataFormat::Zlib);
    let mut out = vec![0u8; 128];
    let r = inflate(&mut state, data, &mut out, miniz_oxide::MZFlush::None);
    r.status.ok()?;
    out.truncate(r.bytes_written);
    Some(out)
}

/// The start of a commit stored whole in one of the packs.
pub(super) fn packed_commit_start(objects: &Path, commit: &Oid) -> Option<Vec<u8>> {
    for entry in std::fs::read_dir(objects.join("pack")).ok()? {
        let path = entry.ok()?.path();
        if path.extension() != Some(OsStr::new("idx")) {
            continue;
        }
        let Some(offset) = pack_offset(&path, commit)? else {
            continue;
        };
        let pack = File::open(path.with_extension("pack")).ok()?;
        let mut buf = vec![0u8; 4096];
        let n = pack.read_at(&mut buf, offset).ok()?;
        let buf = &buf[..n];
        // The entry header: type in bits 4–6 of the first byte, then the size as a varint.
        let mut i = 0;
        let first = *buf.first()?;
        if (first >> 4) & 7 != 1 {
            return None;
        }
        let mut c = first;
        while c & 0x80 != 0 {
            i += 1;
            c = *buf.get(i)?;
        }
        return inflate_start(&buf[i + 1..]);
    }
    None
}

/// Where a pack index (version 2) puts `oid` in its pack: `Some(None)` when it is not there,
/// `None` when the file is not a pack index this reader trusts.
///
/// A worker can write pack indexes, so nothing here believes the file: the fan-out table must
/// rise, the tables it implies must fit in the file, and the names are searched in place, one
/// 20-byte read a probe, so no size taken from the file is ever allocated.
pub(super) fn pack_offset(idx: &Path, oid: &Oid) -> Option<Option<u64>> {
    /// The header (magic and version), the fan-out table, and where the names begin.
    const NAMES_AT: u64 = 8 + 256 * 4;
    /// Each object's name, checksum and 4-byte offset, in bytes.
    const PER_OBJECT: u64 = 20 + 4 + 4;
    /// The pack's and the index's own checksums at the end.
    const TRAILER: u64 = 20 + 20;
    let f = File::open(idx).ok()?;
    let len = f.metadata().ok()?.len();
    let mut head = [0u8; NAMES_AT as usize];
    f.read_exact_at(&mut head, 0).ok()?;
    if head[..8] != [0xff, b't', b'O', b'c', 0, 0, 0, 2] {
        return None;
    }
    let fanout: Vec<u64> = head[8..]
        .chunks_exact(4)
        .map(|b| u64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]])))
        .collect();
    if fanout.windows(2).any(|w| w[1] < w[0]) {
        return None;
    }
    let total = fanout[255];
    if NAMES_AT + total * PER_OBJECT + TRAILER > len {
        return None;
    }
    let first = usize::from(oid[0]);
    let (mut lo, mut hi) = (
        if first == 0 { 0 } else { fanout[first - 1] },
        fanout[first],
    );
    let mut name = [0u8; 20];
    let k = loop {
        if lo >= hi {
            return Some(None);
        }
        let mid = lo + (hi - lo) / 2;
        f.read_exact_at(&mut name, NAMES_AT + mid * 20).ok()?;
        match name[..].cmp(&oid[..]) {
            std::cmp::Ordering::Less => lo = mid + 1,
            std::cmp::Ordering::Greater => hi = mid,
            std::cmp::Ordering::Equal => break mid,
        }
    };
    let offsets_at = NAMES_AT + total * 24;
    let mut small = [0u8; 4];
    f.read_exact_at(&mut small, offsets_at + k * 4).ok()?;
    let small = u32::from_be_bytes(small);
    if small & 0x8000_0000 == 0 {
        return Some(Some(u64::from(small)));
    }
    let mut large = [0u8; 8];
    let at = offsets_at + total * 4 + u64::from(small & 0x7fff_ffff) * 8;
    if at + 8 + TRAILER > len {
        return None;
    }
    f.read_exact_at(&mut large, at).ok()?;
    Some(Some(u64::from_be_bytes(large)))
}

/// Whether one of the packs in `objects` holds `oid` (`None`: that cannot be told).
pub(super) fn in_pack(objects: &Path, oid: &Oid) -> Option<bool> {
    let packs = match std::fs::read_dir(objects.join("pack")) {
        Ok(p) => p,
        Err(e) if e.kind() == ErrorKind::NotFound => return Some(false),
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
