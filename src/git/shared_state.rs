//! The repository's shared git state — what every checkout of it runs or trusts: `config`,
//! `hooks/`, `info/`, `refs/` and `packed-refs`, the main checkout's `HEAD` — taken before an
//! item's processes run and compared after, so that a change an item made to it (where no
//! kernel confinement kept it out: an item in the repository's own checkout, a machine without
//! Landlock) is found and named before runner's own git reads the repository again.
//!
//! Read by hand: this is a list of files, what `lstat` says of each and a hash of what a regular
//! one holds, not one of git's formats. A file is opened only when it is a regular file, and
//! without waiting: a FIFO planted in `hooks/` is looked at, never read. The change time is the
//! kernel's and cannot be set back by the file's owner: any write, mode change or replacement
//! after the first capture gives a file a change time no earlier than that capture. Only a
//! rewrite of the same size within one tick of the clock keeps it, so a file is hashed only
//! when its change time is that recent ([`RECENT`]); the sample hooks and the config of a
//! repository nobody touched this second are looked at, not read (a capture of a fresh
//! repository read and hashed some twenty files, twice an item).

use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;

/// What `lstat` says of a file that changes with any change to it — device and inode, type and
/// mode, size, change time (seconds and nanoseconds) — and, for a regular file changed
/// recently, a hash of its bytes.
type Stamp = (u64, u64, u32, u64, i64, i64, Option<[u8; 32]>);

/// How close to a capture a file's change time must be for its bytes to be hashed: well past
/// the coarsest clock tick a file system stamps times with.
const RECENT: i64 = 2;

/// Each file of the shared state, by its path under the common git folder, and its stamp.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SharedState(BTreeMap<String, Stamp>);

/// Files the state is made of (folders taken whole).
const FILES: &[&str] = &["config", "config.worktree", "packed-refs", "commondir"];
const FOLDERS: &[&str] = &["hooks", "info", "refs"];

impl SharedState {
    /// The state of the repository whose common git folder is `common`, leaving out the refs
    /// an item may move (`own`: its work branch, or in its repository's own checkout the branch
    /// checked out there) and, with `head`, including the main checkout's `HEAD`.
    pub fn capture(common: &Path, own: &[String], head: bool) -> SharedState {
        Self::capture_since(common, own, head, None)
    }

    /// The state again after `before` was captured: a file is hashed when `before` hashed it
    /// and its stamp is otherwise the same (a file whose stamp changed has changed, and one
    /// whose old change time was not recent cannot have been rewritten without a new one).
    pub fn capture_after(&self, common: &Path, own: &[String], head: bool) -> SharedState {
        Self::capture_since(common, own, head, Some(self))
    }

    fn capture_since(
        common: &Path,
        own: &[String],
        head: bool,
        before: Option<&SharedState>,
    ) -> SharedState {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(i64::MAX, |d| d.as_secs() as i64);
        let mut out = BTreeMap::new();
        let mut add = |rel: String, path: &Path| {
            use std::os::unix::fs::MetadataExt;
            let Ok(m) = std::fs::symlink_metadata(path) else {
                return;
            };
            let meta = (
                m.dev(),
                m.ino(),
                m.mode(),
                m.size(),
                m.ctime(),
                m.ctime_nsec(),
            );
            let hashed = match before.and_then(|b| b.0.get(&rel)) {
                // Hashed before: hashed again when nothing else tells it changed.
                Some(&(d, i, mo, sz, c, cn, h)) => h.is_some() && (d, i, mo, sz, c, cn) == meta,
                None => m.ctime() >= now.saturating_sub(RECENT),
            };
            let mut hash = None;
            if hashed && m.is_file() {
                let read =
                    crate::support::fs::open_regular(path, std::fs::OpenOptions::new().read(true))
                        .and_then(|mut f| {
                            let mut h = Sha256::new();
                            std::io::copy(&mut f, &mut h)?;
                            Ok(h.finalize())
                        });
                // Unreadable now and readable later (or the other way) is a change too.
                hash = Some(read.map_or([0u8; 32], Into::into));
            }
            let (d, i, mo, sz, c, cn) = meta;
            out.insert(rel, (d, i, mo, sz, c, cn, hash));
        };
        let mut files: Vec<&str> = FILES.to_vec();
        if head {
            files.push("HEAD");
        }
        for f in files {
            add(f.to_string(), &common.join(f));
        }
        for folder in FOLDERS {
            let root = common.join(folder);
            for entry in walkdir::WalkDir::new(&root)
                .follow_links(false)
                .into_iter()
                .flatten()
            {
                if entry.file_type().is_dir() {
                    continue;
                }
                let rel = entry
                    .path()
                    .strip_prefix(common)
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default();
                if own.iter().any(|r| r == &rel) {
                    continue;
                }
                add(rel, entry.path());
            }
        }
        SharedState(out)
    }

    /// What differs in `after`: each path added, changed or removed, in path order. A new
    /// local branch is not a change: nothing runs from it, no other checkout is on it, and an
    /// attempt that leaves HEAD there fails as any move of HEAD does.
    pub fn changes(&self, after: &SharedState) -> Vec<String> {
        let mut out = Vec::new();
        for (path, hash) in &after.0 {
            match self.0.get(path) {
                None if path.starts_with("refs/heads/") => {}
                None => out.push(format!("`{path}` added")),
                Some(h) if h != hash => out.push(format!("`{path}` changed")),
                Some(_) => {}
            }
        }
        for path in self.0.keys() {
            if !after.0.contains_key(path) {
                out.push(format!("`{path}` removed"));
            }
        }
        out.sort();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_anywhere_but_the_items_own_ref_is_named() {
        let d = tempfile::tempdir().unwrap();
        let g = d.path();
        for dir in ["hooks", "info", "refs/heads/runner", "refs/tags"] {
            std::fs::create_dir_all(g.join(dir)).unwrap();
        }
        std::fs::write(g.join("config"), "[core]\n").unwrap();
        std::fs::write(g.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(g.join("refs/heads/main"), "a\n").unwrap();
        std::fs::write(g.join("refs/heads/runner/x"), "b\n").unwrap();
        // A FIFO planted among the hooks is looked at, not waited on.
        nix::unistd::mkfifo(&g.join("hooks/fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let own = vec!["refs/heads/runner/x".to_string()];
        let before = SharedState::capture(g, &own, true);
        // The item's own branch moves: nothing to say.
        std::fs::write(g.join("refs/heads/runner/x"), "c\n").unwrap();
        assert!(
            before
                .changes(&before.capture_after(g, &own, true))
                .is_empty()
        );
        // A rewrite of the same size within the clock's tick keeps the change time: the hash of
        // a recently changed file catches it.
        std::fs::write(g.join("refs/heads/main"), "z\n").unwrap();
        assert_eq!(
            before.changes(&before.capture_after(g, &own, true)),
            ["`refs/heads/main` changed"]
        );
        std::fs::write(g.join("refs/heads/main"), "a\n").unwrap();
        std::fs::write(g.join("config"), "[core]\n\tfsmonitor = evil\n").unwrap();
        std::fs::write(g.join("hooks/post-checkout"), "evil").unwrap();
        std::fs::write(g.join("refs/tags/planted"), "d\n").unwrap();
        std::fs::write(g.join("refs/heads/new-branch"), "e\n").unwrap();
        std::fs::remove_file(g.join("refs/heads/main")).unwrap();
        std::fs::write(g.join("HEAD"), "ref: refs/heads/other\n").unwrap();
        assert_eq!(
            before.changes(&before.capture_after(g, &own, true)),
            [
                "`HEAD` changed",
                "`config` changed",
                "`hooks/post-checkout` added",
                "`refs/heads/main` removed",
                "`refs/tags/planted` added",
            ]
        );
    }
}
