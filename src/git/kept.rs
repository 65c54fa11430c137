//! The small files of the run's checkouts (HEAD, refs, the configuration, a small index) as they
//! were last read, each kept with the stamp `lstat` gave it then: read again only when the
//! stamp moved, and what a reader concluded of them (whether a configuration is one the
//! checkout reader reads, [`KeptFile::plain`]) concluded once. An item in a checkout reads them
//! before its worker starts and again after it ended; for a short item that was some twenty
//! system calls and a parse of the configuration each time, where one `lstat` a file now
//! answers.
//!
//! Why a kept file is never stale: it is kept only when its change time was a second old before
//! it was read (the kernel sets that time on any write, truncation, rename over or mode change,
//! and its owner cannot set it back), so any change after the read gives the file a later change
//! time — a new stamp — and a change between the `lstat` and the read is one the `fstat` of the
//! file read sees (the two must agree). A file replaced by another has another inode, a link or
//! a FIFO put in its place is not a regular file: neither is answered from what was kept. Only
//! a rewrite within one clock tick of the last change keeps a stamp, and such a file is never
//! kept (the same rule the shared state and the plant walk follow, `support::fs::settled`).
//!
//! Kept per run, in the run's handle ([`crate::git::Repos`]); past [`KEPT_BYTES`] in all, the
//! memory starts again.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use crate::support::fs::FileStamp;

/// What `lstat` says of a regular file that changes with any change to it: its mode (a file
/// made unreadable is read again, and fails), and its [`FileStamp`].
type Stamp = (u32, FileStamp);

fn stamp(m: &std::fs::Metadata) -> Stamp {
    (m.mode(), crate::support::fs::file_stamp(m))
}

/// The most bytes of files kept at once.
const KEPT_BYTES: usize = 4 << 20;

/// The small files a run read, by path.
#[derive(Default)]
pub struct KeptFiles {
    files: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    by_path: HashMap<PathBuf, Arc<KeptFile>>,
    bytes: usize,
}

impl std::fmt::Debug for KeptFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeptFiles").finish_non_exhaustive()
    }
}

/// One file as it was read.
#[derive(Debug)]
pub(crate) struct KeptFile {
    stamp: Stamp,
    /// Its bytes.
    pub(crate) bytes: Vec<u8>,
    /// Whether, as a repository's configuration, it is one the checkout reader reads
    /// (`repo::plain_config`), once asked.
    pub(crate) plain: OnceLock<bool>,
}

impl KeptFile {
    /// When the file was last modified, as git's index records it (seconds, nanoseconds).
    pub(crate) fn modified(&self) -> (i64, i64) {
        (self.stamp.1.3, self.stamp.1.4)
    }

    /// What `lstat` says of the file kept for as long as it is unchanged.
    pub(crate) fn identity(&self) -> FileStamp {
        self.stamp.1
    }
}

impl KeptFiles {
    /// The regular file at `path`, of at most `limit` bytes, as it is now: what was kept of it
    /// when its stamp is the one kept, else read (and kept when it had settled). Errors as
    /// [`crate::support::fs::read_regular`] gives them: not found, not a regular file (never
    /// opened), larger than `limit`.
    pub(crate) fn read(&self, path: &Path, limit: u64) -> std::io::Result<Arc<KeptFile>> {
        let at = std::time::SystemTime::now();
        let m = std::fs::symlink_metadata(path)?;
        if !m.is_file() {
            return Err(std::io::Error::other("not a regular file"));
        }
        if m.size() > limit {
            return Err(std::io::Error::other("larger than this read takes"));
        }
        let seen = stamp(&m);
        if let Some(kept) = self.lock().by_path.get(path)
            && kept.stamp == seen
        {
            return Ok(kept.clone());
        }
        let (bytes, read) = crate::support::fs::read_regular_meta(path, Some(limit))?;
        let file = Arc::new(KeptFile {
            stamp: stamp(&read),
            bytes,
            plain: OnceLock::new(),
        });
        if file.stamp == seen && crate::support::fs::settled(m.ctime(), m.ctime_nsec(), at) {
            let mut kept = self.lock();
            if kept.bytes + file.bytes.len() > KEPT_BYTES {
                *kept = Kept::default();
            }
            kept.bytes += file.bytes.len();
            if let Some(old) = kept.by_path.insert(path.to_path_buf(), file.clone()) {
                kept.bytes -= old.bytes.len();
            }
        }
        Ok(file)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.files.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of `bytes` at `name` (settled once the test has waited a second: its change time
    /// cannot be set back).
    fn settled_file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    #[test]
    fn a_settled_file_is_answered_from_what_was_kept_until_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let p = settled_file(dir.path(), "HEAD", b"ref: refs/heads/main\n");
        std::thread::sleep(std::time::Duration::from_millis(1100));
        let kept = KeptFiles::default();
        let first = kept.read(&p, 1024).unwrap();
        assert_eq!(first.bytes, b"ref: refs/heads/main\n");
        let again = kept.read(&p, 1024).unwrap();
        assert!(
            Arc::ptr_eq(&first, &again),
            "a settled file unchanged is not read again"
        );
        // The same size, the same instant as far as the test can make it: a new change time.
        std::fs::write(&p, b"ref: refs/heads/work\n").unwrap();
        let changed = kept.read(&p, 1024).unwrap();
        assert_eq!(changed.bytes, b"ref: refs/heads/work\n");
        // Just changed: read each time until it has settled.
        let unsettled = kept.read(&p, 1024).unwrap();
        assert!(!Arc::ptr_eq(&changed, &unsettled));
        assert_eq!(unsettled.bytes, b"ref: refs/heads/work\n");
    }

    #[test]
    fn a_file_replaced_by_a_link_or_a_fifo_or_grown_past_the_limit_is_not_answered() {
        let dir = tempfile::tempdir().unwrap();
        let p = settled_file(dir.path(), "config", b"[core]\n");
        let other = settled_file(dir.path(), "elsewhere", b"[core]\n");
        std::thread::sleep(std::time::Duration::from_millis(1100));
        let kept = KeptFiles::default();
        kept.read(&p, 1024).unwrap();
        std::fs::remove_file(&p).unwrap();
        std::os::unix::fs::symlink(&other, &p).unwrap();
        assert!(kept.read(&p, 1024).is_err(), "a link is not a regular file");
        std::fs::remove_file(&p).unwrap();
        nix::unistd::mkfifo(&p, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(
            kept.read(&p, 1024).is_err(),
            "a FIFO is refused, never opened"
        );
        std::fs::remove_file(&p).unwrap();
        assert_eq!(
            kept.read(&p, 1024).unwrap_err().kind(),
            std::io::ErrorKind::NotFound
        );
        std::fs::write(&p, vec![b'x'; 2048]).unwrap();
        assert!(kept.read(&p, 1024).is_err(), "larger than the limit");
    }
}
