//! Files a reader may see while they are being written.

use std::fs::File;
use std::io::Write;
use std::path::Path;

/// Write `bytes` to `path` through a temporary file in the same folder and a rename, so that no
/// reader ever sees it half-written. (Not synced to disk: readers need wholeness, not
/// durability across a power cut; the state ledger is what survives crashes.)
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic_with(path, |w| w.write_all(bytes))
}

/// [`write_atomic`] for content written piece by piece (a large report streamed, never held
/// whole in memory): `fill` writes into a buffered temporary file, renamed over `path` once it
/// succeeded.
pub fn write_atomic_with(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = tempfile::NamedTempFile::new_in(dir)?;
    let mut w = std::io::BufWriter::with_capacity(64 * 1024, tmp);
    fill(&mut w)?;
    let tmp = w.into_inner().map_err(|e| e.into_error())?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Open `path` without waiting, and only when it is a regular file: a FIFO or a device put in a
/// file's place (a hostile checkout's `.git`) is refused at once, never waited on — an open for
/// reading or writing of a FIFO nobody else has open would wait for ever, on the event loop.
pub fn open_regular(path: &Path, options: &mut std::fs::OpenOptions) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let not_regular = || std::io::Error::other("not a regular file");
    let file = options
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match std::fs::metadata(path) {
            Ok(m) if !m.is_file() => not_regular(),
            _ => e,
        })?;
    if !file.metadata()?.is_file() {
        return Err(not_regular());
    }
    Ok(file)
}

/// The whole of the regular file at `path` ([`open_regular`]); with `limit`, a file longer than
/// that is an error, and no more than one byte past it is read.
pub fn read_regular(path: &Path, limit: Option<u64>) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let file = open_regular(path, std::fs::OpenOptions::new().read(true))?;
    let len = file.metadata()?.len();
    let cap = limit.map_or(u64::MAX, |l| l + 1);
    let mut data = Vec::with_capacity(len.min(cap) as usize);
    file.take(cap).read_to_end(&mut data)?;
    if limit.is_some_and(|l| data.len() as u64 > l) {
        return Err(std::io::Error::other("larger than this read takes"));
    }
    Ok(data)
}

/// Lexically normalise a path (`a/./b/../c` -> `a/c`) without touching the disk.
pub fn normalize(p: &Path) -> std::path::PathBuf {
    use std::path::Component;
    let mut out = std::path::PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}
