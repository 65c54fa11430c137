//! The index file: its entries with their stat data and the cached tree, parsed without
//! believing any count or size it gives, nor letting version 4's shared path prefixes expand
//! past a small multiple of the file.
//!
//! Read by hand rather than through `gix-index`: its version 4 decoder appends every expanded
//! path to one buffer with no bound, so a planted index of some 70 bytes an entry whose paths
//! each keep the whole of the one before grows quadratically (tested here:
//! `untrusted_bytes::a_v4_index_whose_paths_grow_past_its_size_is_refused`); this reader
//! answers `None` for anything but the plain entries it needs (no merge stage, no
//! skip-worktree, no split or sparse index), and git answers those.

use std::ffi::OsStr;
use std::io::ErrorKind;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::reads::*;

/// One index entry's path and the stat data git recorded for it.
pub(super) struct Entry {
    pub(super) path: Vec<u8>,
    pub(super) oid: Oid,
    pub(super) ctime: (u32, u32),
    pub(super) mtime: (u32, u32),
    pub(super) ino: u32,
    pub(super) mode: u32,
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) size: u32,
}

pub(super) struct Index {
    pub(super) entries: Vec<Entry>,
    /// The tree the index holds, when git's cached tree covers the whole index.
    pub(super) tree: Option<Oid>,
    /// When the index file was last written: entries changed at or after it are racy.
    pub(super) written: (u32, u32),
}

impl Index {
    /// The index of a repository; an absent file is an empty index. `None` for anything this
    /// reader does not fully understand.
    pub(super) fn read(git_dir: &Path, reads: Reads) -> Option<Index> {
        Index::read_file(&git_dir.join("index"), reads)
    }

    /// [`Index::read`], of the index file at `path`.
    pub(super) fn read_file(path: &Path, reads: Reads) -> Option<Index> {
        // Through the run's kept files its bytes and when it was written are of one stamp;
        // else it is looked at again once read.
        let read = match reads.kept(path) {
            Some(kept) => kept.map(|k| {
                let (secs, nanos) = k.modified();
                (k.bytes.clone(), Some((secs as u32, nanos as u32)))
            }),
            None => reads.bytes(path).map(|data| (data, None)),
        };
        let (data, written) = match read {
            Ok(r) => r,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Some(Index {
                    entries: Vec::new(),
                    tree: Some(EMPTY_TREE),
                    written: (0, 0),
                });
            }
            Err(_) => return None,
        };
        let written = match written {
            Some(w) => w,
            None => {
                let meta = std::fs::metadata(path).ok()?;
                (meta.mtime() as u32, meta.mtime_nsec() as u32)
            }
        };
        let mut index = parse(&data, written)?;
        if index.entries.is_empty() {
            index.tree = Some(EMPTY_TREE);
        }
        Some(index)
    }

    /// Whether every entry's file is still exactly as the index recorded it.
    pub(super) fn worktree_matches(&self, top: &Path) -> bool {
        self.entries.iter().all(|e| {
            let Ok(m) = std::fs::symlink_metadata(top.join(OsStr::from_bytes(&e.path))) else {
                return false;
            };
            let kind = match e.mode >> 12 {
                0o10 => m.file_type().is_file() && (e.mode & 0o100 != 0) == (m.mode() & 0o100 != 0),
                0o12 => m.file_type().is_symlink(),
                _ => false,
            };
            // Without nanoseconds in the index (a git built without them), seconds decide.
            let nanos = e.mtime.1 != 0 || e.ctime.1 != 0;
            let at = |sec: i64, nsec: i64| (sec as u32, if nanos { nsec as u32 } else { 0 });
            let mtime = at(m.mtime(), m.mtime_nsec());
            let written = (self.written.0, if nanos { self.written.1 } else { 0 });
            kind && mtime == e.mtime
                && at(m.ctime(), m.ctime_nsec()) == e.ctime
                && m.ino() as u32 == e.ino
                && m.uid() == e.uid
                && m.gid() == e.gid
                && m.size() as u32 == e.size
                && e.mtime < written
        })
    }
}

/// How many bytes of paths an index may expand to for each byte of it (version 4).
const PATHS_PER_BYTE: usize = 8;

/// Parse an index file (versions 2 to 4).
pub(super) fn parse(data: &[u8], written: (u32, u32)) -> Option<Index> {
    let u32_at = |i: usize| -> Option<u32> {
        Some(u32::from_be_bytes(data.get(i..i + 4)?.try_into().ok()?))
    };
    if data.get(..4)? != b"DIRC" || data.len() < 12 + 20 {
        return None;
    }
    let version = u32_at(4)?;
    if !(2..=4).contains(&version) {
        return None;
    }
    let count = u32_at(8)? as usize;
    let end = data.len() - 20;
    // The count is the file's word: no more entries are made room for than its bytes can hold
    // (every entry takes at least 62).
    let mut entries: Vec<Entry> = Vec::with_capacity(count.min(end.saturating_sub(12) / 62));
    // Version 4 keeps of each path what the one before shares with it: a planted file whose
    // every path keeps the whole of the one before and adds a byte would expand quadratically
    // (a 50 MB index to 300 GB). Paths are read up to [`PATHS_PER_BYTE`] times the file's
    // size, which no index git writes comes near; past that, ask git.
    let mut budget = data
        .len()
        .saturating_mul(PATHS_PER_BYTE)
        .saturating_add(64 * 1024);
    let mut i = 12;
    for _ in 0..count {
        let start = i;
        let flags = u16::from_be_bytes(data.get(i + 60..i + 62)?.try_into().ok()?);
        let mut name_at = i + 62;
        // Assume-valid, an extended entry (skip-worktree, intent-to-add) or a merge stage:
        // left to git.
        if flags & 0xf000 != 0 {
            return None;
        }
        let mode = u32_at(i + 24)?;
        if !matches!(mode >> 12, 0o10 | 0o12) {
            return None;
        }
        let path = if version == 4 {
            let prev: &[u8] = entries.last().map_or(&[], |e| &e.path);
            let strip = varint(data, &mut name_at)?;
            let keep = prev.len().checked_sub(strip)?;
            let len = data.get(name_at..end)?.iter().position(|&b| b == 0)?;
            budget = budget.checked_sub(keep + len)?;
            let mut path = Vec::with_capacity(keep + len);
            path.extend_from_slice(&prev[..keep]);
            path.extend_from_slice(&data[name_at..name_at + len]);
            i = name_at + len + 1;
            path
        } else {
            let len = data.get(name_at..end)?.iter().position(|&b| b == 0)?;
            let path = data[name_at..name_at + len].to_vec();
            // Entries are padded with 1 to 8 NULs to a multiple of eight bytes.
            i = start + ((62 + len + 8) & !7);
            path
        };
        if path.is_empty() || i > end {
            return None;
        }
        entries.push(Entry {
            path,
            oid: data.get(start + 40..start + 60)?.try_into().ok()?,
            ctime: (u32_at(start)?, u32_at(start + 4)?),
            mtime: (u32_at(start + 8)?, u32_at(start + 12)?),
            ino: u32_at(start + 20)?,
            mode,
            uid: u32_at(start + 28)?,
            gid: u32_at(start + 32)?,
            size: u32_at(start + 36)?,
        });
    }
    let mut tree = None;
    while i < end {
        let sig = data.get(i..i + 4)?;
        let len = u32_at(i + 4)? as usize;
        let body = data.get(i + 8..(i + 8).checked_add(len)?)?;
        match sig {
            b"TREE" => tree = root_tree(body),
            // A lowercase signature is an extension git requires readers to understand
            // (a split index, a sparse index): not this one.
            [c, ..] if c.is_ascii_lowercase() => return None,
            _ => {}
        }
        i += 8 + len;
    }
    (i == end).then_some(Index {
        entries,
        tree,
        written,
    })
}

/// Whether the index file at `path` is a version 4 index whose paths expand to more than
/// [`PATHS_PER_BYTE`] times its size (and 64 KiB): one no git writes for a real tree, made to
/// exhaust the memory of whatever reads it — git's own commands hold every expanded path. Its
/// entries are walked without expanding anything. A file that is not such an index (another
/// version, unreadable, cut short) is `false`: what reads it next says what is wrong with it.
pub(crate) fn overexpands(path: &Path) -> bool {
    use std::io::Read;
    let Ok(mut file) =
        crate::support::fs::open_regular_len(path, std::fs::OpenOptions::new().read(true))
            .map(|(f, _)| f)
    else {
        return false;
    };
    let mut head = [0u8; 12];
    if file.read_exact(&mut head).is_err() || &head[..4] != b"DIRC" || head[4..8] != [0, 0, 0, 4] {
        return false;
    }
    let mut data = head.to_vec();
    file.read_to_end(&mut data).is_ok() && overexpands_bytes(&data)
}

/// [`overexpands`] of an index's bytes.
pub(super) fn overexpands_bytes(data: &[u8]) -> bool {
    if data.len() < 12 + 20 || data[..4] != *b"DIRC" || data[4..8] != [0, 0, 0, 4] {
        return false;
    }
    let head = &data[..12];
    let count = u32::from_be_bytes([head[8], head[9], head[10], head[11]]) as u64;
    let budget = (data.len() as u64)
        .saturating_mul(PATHS_PER_BYTE as u64)
        .saturating_add(64 * 1024);
    let end = data.len() - 20;
    let (mut i, mut prev, mut total) = (12usize, 0u64, 0u64);
    for _ in 0..count {
        let Some(flags) = data.get(i + 60..i + 62) else {
            return false;
        };
        // An extended entry has two more bytes of flags.
        let mut at = i + 62 + if flags[0] & 0x40 != 0 { 2 } else { 0 };
        let Some(strip) = varint(data, &mut at) else {
            return false;
        };
        let Some(len) = data
            .get(at..end)
            .and_then(|d| d.iter().position(|&b| b == 0))
        else {
            return false;
        };
        let Some(keep) = prev.checked_sub(strip as u64) else {
            return false;
        };
        prev = keep + len as u64;
        total = total.saturating_add(prev);
        if total > budget {
            return true;
        }
        i = at + len + 1;
    }
    false
}

/// The root of a cached tree: `None` when it was invalidated since it was computed.
pub(super) fn root_tree(body: &[u8]) -> Option<Oid> {
    // "<path>\0<entry count> <subtrees>\n<oid>", the root first with an empty path.
    let rest = body.strip_prefix(b"\0")?;
    let nl = rest.iter().position(|&b| b == b'\n')?;
    let counts = std::str::from_utf8(&rest[..nl]).ok()?;
    let entries: i64 = counts.split(' ').next()?.parse().ok()?;
    if entries < 0 {
        return None;
    }
    rest.get(nl + 1..nl + 21)?.try_into().ok()
}

/// git's offset varint (index version 4 path prefixes).
pub(super) fn varint(data: &[u8], at: &mut usize) -> Option<usize> {
    let mut c = *data.get(*at)?;
    *at += 1;
    let mut value = usize::from(c & 0x7f);
    while c & 0x80 != 0 {
        c = *data.get(*at)?;
        *at += 1;
        value = value.checked_add(1)?.checked_mul(128)? | usize::from(c & 0x7f);
    }
    Some(value)
}

/// See [`plain_index`].
pub(crate) struct PlainIndex {
    pub links: bool,
}

/// [`plain_index`], of the index file at `path`.
pub(crate) fn plain_index_file(path: &Path) -> Option<PlainIndex> {
    let index = Index::read_file(path, Reads::All)?;
    Some(PlainIndex {
        links: index.entries.iter().any(|e| e.mode >> 12 == 0o12),
    })
}
