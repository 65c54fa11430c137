//! Files a reader may see while they are being written.

use std::fs::File;
use std::io::Write;
use std::path::Path;

/// Write `bytes` to `path` through a temporary file in the same folder and a rename, so that no
/// reader ever sees it half-written. (Not synced to disk: readers need wholeness, not
/// durability across a power cut; the state ledger is what survives crashes.)
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic_with(path, |w| w.write_all(bytes))
}

/// [`write_atomic`] for content written piece by piece (a large report streamed, never held
/// whole in memory): `fill` writes into a buffered temporary file, renamed over `path` once it
/// succeeded.
pub(crate) fn write_atomic_with(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    // Made as any new file is, mode 0666 less the umask (a temporary file's own 0600 would
    // leave reports and manifests readable by their owner only, where logs beside them are not).
    let tmp = tempfile::Builder::new()
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666))
        .tempfile_in(dir)?;
    let mut w = std::io::BufWriter::with_capacity(64 * 1024, tmp);
    fill(&mut w)?;
    let tmp = w.into_inner().map_err(|e| e.into_error())?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// [`write_atomic`], then synced to the disk with its folder: for what is saved before the
/// only other copy is removed (an uncommitted edit before its checkout is reset).
pub(crate) fn write_durable(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new().tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    File::open(dir)?.sync_all()
}

/// Open `path` without waiting, and only when it is a regular file: a FIFO or a device put in a
/// file's place (a hostile checkout's `.git`) is refused at once, never waited on — an open for
/// reading or writing of a FIFO nobody else has open would wait for ever, on the event loop.
pub(crate) fn open_regular(
    path: &Path,
    options: &mut std::fs::OpenOptions,
) -> std::io::Result<File> {
    open_regular_len(path, options).map(|(file, _)| file)
}

/// [`open_regular`], with the file's length as its one `fstat` found it.
pub(crate) fn open_regular_len(
    path: &Path,
    options: &mut std::fs::OpenOptions,
) -> std::io::Result<(File, u64)> {
    open_regular_meta(path, options).map(|(file, meta)| (file, meta.len()))
}

/// [`open_regular`], with what its one `fstat` found of the file.
pub(crate) fn open_regular_meta(
    path: &Path,
    options: &mut std::fs::OpenOptions,
) -> std::io::Result<(File, std::fs::Metadata)> {
    use std::os::unix::fs::OpenOptionsExt;
    let not_regular = || std::io::Error::other("not a regular file");
    let file = options
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.kind() {
            // Most often asked of a file that may not exist: nothing more to learn.
            std::io::ErrorKind::NotFound => e,
            _ => match std::fs::metadata(path) {
                Ok(m) if !m.is_file() => not_regular(),
                _ => e,
            },
        })?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(not_regular());
    }
    Ok((file, meta))
}

/// The whole of the regular file at `path` ([`open_regular`]); with `limit`, a file longer than
/// that is an error, and no more than one byte past it is read.
///
/// Read in one `read` where the file is as long as its `fstat` said: a read that returns that
/// many bytes into room for one more has reached the end, and is not asked again. (These reads
/// are on every item's path: HEAD, refs, the index, the lease record.)
pub(crate) fn read_regular(path: &Path, limit: Option<u64>) -> std::io::Result<Vec<u8>> {
    read_regular_meta(path, limit).map(|(data, _)| data)
}

/// [`read_regular`], with what the `fstat` of the file read found of it.
pub(crate) fn read_regular_meta(
    path: &Path,
    limit: Option<u64>,
) -> std::io::Result<(Vec<u8>, std::fs::Metadata)> {
    use std::io::Read;
    let (mut file, meta) = open_regular_meta(path, std::fs::OpenOptions::new().read(true))?;
    let len = meta.len();
    let cap = limit.map_or(u64::MAX, |l| l + 1);
    let mut data = vec![0u8; (len.saturating_add(1)).min(cap) as usize];
    let mut n = 0;
    loop {
        if n == data.len() {
            // Longer than it was when looked at (or than the limit allows).
            if n as u64 >= cap {
                break;
            }
            let grown = (n.max(64) * 2).min(usize::try_from(cap).unwrap_or(usize::MAX));
            data.resize(grown, 0);
        }
        match file.read(&mut data[n..]) {
            Ok(0) => break,
            Ok(k) => {
                n += k;
                if n as u64 == len && n < data.len() {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    data.truncate(n);
    if limit.is_some_and(|l| n as u64 > l) {
        return Err(std::io::Error::other("larger than this read takes"));
    }
    Ok((data, meta))
}

/// Lexically normalise a path (`a/./b/../c` -> `a/c`) without touching the disk.
pub(crate) fn normalize(p: &Path) -> std::path::PathBuf {
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

/// Make `dir` an empty folder: made where it is missing, its entries removed where it is not
/// (links removed, never followed). A folder kept and emptied costs no new inode, where removing
/// it and making it again does.
pub(crate) fn empty_dir(dir: &Path) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return std::fs::create_dir_all(dir),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            std::fs::remove_dir_all(entry.path())?;
        } else {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// Copy the regular file `from` to `to`; anything else at `from` (a link, a FIFO) is refused.
pub(crate) fn copy_regular(from: &Path, to: &Path) -> std::io::Result<u64> {
    if !std::fs::symlink_metadata(from)?.is_file() {
        return Err(std::io::Error::other(format!(
            "`{}` is not a regular file",
            from.display()
        )));
    }
    std::fs::copy(from, to)
}

/// What `lstat` says of a regular file that changes with any change to it: device, inode, size,
/// modification and change times (seconds, nanoseconds). A file written, replaced or touched
/// has another (its owner cannot set the change time back).
pub(crate) type FileStamp = (u64, u64, u64, i64, i64, i64, i64);

/// The [`FileStamp`] of `m`.
pub(crate) fn file_stamp(m: &std::fs::Metadata) -> FileStamp {
    use std::os::unix::fs::MetadataExt;
    (
        m.dev(),
        m.ino(),
        m.size(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec(),
    )
}

/// The [`FileStamp`] of the regular file at `path`, not following a link; `None` when there is
/// none.
pub(crate) fn regular_file_stamp(path: &Path) -> Option<FileStamp> {
    let m = std::fs::symlink_metadata(path).ok()?;
    m.is_file().then(|| file_stamp(&m))
}

/// Whether something whose change time is `secs` and `nanos` (a folder's: the kernel's, which
/// its owner cannot set back) had been unchanged for a second at `at`: a listing taken then
/// still holds while the change time stays. A change within the same clock tick as the last
/// keeps the time, which the second guards against.
pub(crate) fn settled(secs: i64, nanos: i64, at: std::time::SystemTime) -> bool {
    let changed = std::time::UNIX_EPOCH
        + std::time::Duration::new(
            u64::try_from(secs).unwrap_or(0),
            u32::try_from(nanos).unwrap_or(0),
        );
    at.duration_since(changed)
        .is_ok_and(|age| age >= std::time::Duration::from_secs(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regular_file_is_read_whole_within_its_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        for size in [0usize, 1, 63, 64, 4096, 100_000] {
            let bytes: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
            std::fs::write(&path, &bytes).unwrap();
            assert_eq!(read_regular(&path, None).unwrap(), bytes, "size {size}");
            assert_eq!(
                read_regular(&path, Some(size as u64)).unwrap(),
                bytes,
                "size {size}"
            );
            if size > 0 {
                let over = read_regular(&path, Some(size as u64 - 1)).unwrap_err();
                assert_eq!(over.to_string(), "larger than this read takes");
            }
        }
    }

    #[test]
    fn a_file_longer_than_its_size_says_is_read_whole() {
        // The kernel's files say they are empty and are not.
        let status = read_regular(Path::new("/proc/self/status"), None).unwrap();
        assert!(status.starts_with(b"Name:") && status.len() > 256);
        let over = read_regular(Path::new("/proc/self/status"), Some(16)).unwrap_err();
        assert_eq!(over.to_string(), "larger than this read takes");
    }

    #[test]
    fn what_is_not_a_regular_file_is_refused_and_a_missing_one_is_not_found() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert_eq!(
            read_regular(&fifo, None).unwrap_err().to_string(),
            "not a regular file"
        );
        assert_eq!(
            read_regular(dir.path(), None).unwrap_err().to_string(),
            "not a regular file"
        );
        let gone = read_regular(&dir.path().join("gone"), None).unwrap_err();
        assert_eq!(gone.kind(), std::io::ErrorKind::NotFound);
    }
}
