//! Files a reader may see while they are being written.

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
