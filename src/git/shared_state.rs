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
//! when its change time is that recent ([`RECENT`]); the config of a repository nobody touched
//! this second is looked at, not read. A folder's change time moves with every name added,
//! removed or renamed in it, so the capture after an item lists again only the folders whose
//! stamp moved (or was recent before), and the sample hooks, which git never runs, are not
//! looked at (a capture of a fresh repository read and hashed some twenty files and listed
//! five folders, twice an item).

use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;

/// What `lstat` says of a file that changes with any change to it — device and inode, type and
/// mode, size, change time (seconds and nanoseconds) — and, for a regular file changed
/// recently, a hash of its bytes.
type Stamp = (u64, u64, u32, u64, i64, i64, Option<[u8; 32]>);

/// What `lstat` says of a folder: device and inode, type and mode, change time. A name added to
/// it, removed or renamed gives it a new change time.
type FolderStamp = (u64, u64, u32, i64, i64);

/// How close to a capture a file's change time must be for its bytes to be hashed (and a
/// folder's for its names to be listed again): well past the coarsest clock tick a file system
/// stamps times with.
const RECENT: i64 = 2;

/// Each file of the shared state, by its path under the common git folder, and its stamp; and
/// each folder walked, with what it held.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SharedState {
    files: BTreeMap<String, Stamp>,
    folders: BTreeMap<String, Folder>,
}

/// A folder as a capture found it: its stamp, whether its change time was recent then (a name
/// added within the same clock tick would not change it), and its names, each with whether it
/// is a folder.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Folder {
    stamp: FolderStamp,
    recent: bool,
    /// Shared with the captures after, while the folder is unchanged.
    names: std::sync::Arc<[(String, bool)]>,
}

/// Files the state is made of (folders taken whole).
const FILES: &[&str] = &["config", "config.worktree", "packed-refs", "commondir"];
const FOLDERS: &[&str] = &["hooks", "info", "refs"];

impl SharedState {
    /// The state of the repository whose common git folder is `common`, leaving out the refs
    /// an item may move (`own`: its work branch, or in its repository's own checkout the branch
    /// checked out there) and, with `head`, including the main checkout's `HEAD`.
    pub fn capture(common: &Path, own: &[String], head: bool) -> SharedState {
        Self::capture_since(common, own, head, None, now())
    }

    /// The state again after `before` was captured: a file is hashed when `before` hashed it
    /// and its stamp is otherwise the same (a file whose stamp changed has changed, and one
    /// whose old change time was not recent cannot have been rewritten without a new one); a
    /// folder whose stamp is the same and was not recent then holds the same names, which are
    /// not listed again.
    pub fn capture_after(&self, common: &Path, own: &[String], head: bool) -> SharedState {
        Self::capture_since(common, own, head, Some(self), now())
    }

    fn capture_since(
        common: &Path,
        own: &[String],
        head: bool,
        before: Option<&SharedState>,
        now: i64,
    ) -> SharedState {
        let mut walk = Walk {
            common,
            own,
            before,
            recent_since: now.saturating_sub(RECENT),
            out: SharedState::default(),
        };
        let mut files: Vec<&str> = FILES.to_vec();
        if head {
            files.push("HEAD");
        }
        for f in files {
            walk.file(f.to_string());
        }
        for folder in FOLDERS {
            // The folder itself may be a link (hooks kept elsewhere): followed, as git does.
            if let Ok(m) = std::fs::metadata(common.join(folder))
                && m.is_dir()
            {
                walk.folder(folder.to_string(), &m);
            }
        }
        walk.out
    }

    /// What differs in `after`: each path added, changed or removed, in path order. A new
    /// local branch is not a change: nothing runs from it, no other checkout is on it, and an
    /// attempt that leaves HEAD there fails as any move of HEAD does.
    pub fn changes(&self, after: &SharedState) -> Vec<String> {
        let mut out = Vec::new();
        for (path, hash) in &after.files {
            match self.files.get(path) {
                None if path.starts_with("refs/heads/") => {}
                None => out.push(format!("`{path}` added")),
                Some(h) if h != hash => out.push(format!("`{path}` changed")),
                Some(_) => {}
            }
        }
        for path in self.files.keys() {
            if !after.files.contains_key(path) {
                out.push(format!("`{path}` removed"));
            }
        }
        out.sort();
        out
    }
}

/// The last capture of each repository's shared state in a run, by its common folder: an
/// item's capture before it runs starts from the one after the item before it in the same
/// repository ([`SharedState::capture_after`]), so the folders nothing changed since are looked
/// at, not listed again — or is that capture itself, when it was taken moments ago
/// ([`RECENT_ENOUGH`]) of the same refs, and the repository's lease record is the one it was
/// then ([`LeaseMark`]): between the two items only this run held the repository, and what it
/// did there (its results, the lease given back and taken again, a commit of the item's work,
/// which moves only the item's own ref) is none of the shared state. A change someone made
/// without the lease in those moments is then named as the next item's, as one made while an
/// item runs is.
#[derive(Debug, Default)]
pub struct LastCaptures {
    by_common: std::sync::Mutex<std::collections::HashMap<std::path::PathBuf, Last>>,
}

/// What says which run held a repository since: the stamp of its lease record
/// ([`crate::support::fs::FileStamp`]), which every run that takes the lease writes anew unless
/// it is its own, and which is always replaced whole.
pub type LeaseMark = crate::support::fs::FileStamp;

/// How long after a capture the next item of the repository may start from it as it is.
pub const RECENT_ENOUGH: std::time::Duration = std::time::Duration::from_millis(100);

#[derive(Debug)]
struct Last {
    state: SharedState,
    own: Vec<String>,
    head: bool,
    at: std::time::Instant,
    lease: Option<LeaseMark>,
}

impl LastCaptures {
    /// The state of the repository whose common git folder is `common`, as
    /// [`SharedState::capture`] takes it; `lease`: its lease record's stamp now.
    pub fn capture(
        &self,
        common: &Path,
        own: &[String],
        head: bool,
        lease: Option<LeaseMark>,
    ) -> SharedState {
        let last = self
            .by_common
            .lock()
            .ok()
            .and_then(|mut m| m.remove(common));
        match last {
            Some(last)
                if last.own == own
                    && last.head == head
                    && last.lease.is_some()
                    && last.lease == lease
                    && last.at.elapsed() <= RECENT_ENOUGH =>
            {
                tracing::debug!(common = %common.display(), "the shared git state as the item before left it");
                last.state
            }
            Some(last) => last.state.capture_after(common, own, head),
            None => SharedState::capture(common, own, head),
        }
    }

    /// Keep `state`, captured of `common` just now leaving out `own` (with `head`, as
    /// [`SharedState::capture`] takes them), for the next capture; `lease`: its lease record's
    /// stamp now.
    pub fn keep(
        &self,
        common: &Path,
        state: SharedState,
        own: &[String],
        head: bool,
        lease: Option<LeaseMark>,
    ) {
        if let Ok(mut m) = self.by_common.lock() {
            m.insert(
                common.to_path_buf(),
                Last {
                    state,
                    own: own.to_vec(),
                    head,
                    at: std::time::Instant::now(),
                    lease,
                },
            );
        }
    }
}

/// Seconds since the epoch.
fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(i64::MAX, |d| d.as_secs() as i64)
}

/// One capture in progress.
struct Walk<'a> {
    common: &'a Path,
    own: &'a [String],
    before: Option<&'a SharedState>,
    /// A change time at or after this is recent.
    recent_since: i64,
    out: SharedState,
}

impl Walk<'_> {
    /// Folder `rel` (whose `lstat` is `m`) and everything under it, but the item's own refs and
    /// the sample hooks (git never runs a hook by a name ending in `.sample`; renaming one to
    /// its real name changes the folder, which is listed again).
    fn folder(&mut self, rel: String, m: &std::fs::Metadata) {
        use std::os::unix::fs::MetadataExt;
        let stamp = (m.dev(), m.ino(), m.mode(), m.ctime(), m.ctime_nsec());
        let known = self
            .before
            .and_then(|b| b.folders.get(&rel))
            .filter(|f| f.stamp == stamp && !f.recent);
        let names = match known {
            Some(f) => f.names.clone(),
            None => {
                let Ok(list) = std::fs::read_dir(self.common.join(&rel)) else {
                    return;
                };
                let hooks = rel == "hooks";
                let mut names: Vec<(String, bool)> = list
                    .flatten()
                    .map(|e| {
                        let dir = e.file_type().is_ok_and(|t| t.is_dir());
                        (e.file_name().to_string_lossy().into_owned(), dir)
                    })
                    // The sample hooks are not kept: their folder's stamp says when one is
                    // renamed to its real name.
                    .filter(|(name, dir)| *dir || !(hooks && name.ends_with(".sample")))
                    .collect();
                names.sort();
                names.into()
            }
        };
        for (name, dir) in names.iter() {
            let child = format!("{rel}/{name}");
            // A name listed as a folder that no longer is one is looked at as a file (its
            // change names it).
            if *dir
                && let Ok(cm) = std::fs::symlink_metadata(self.common.join(&child))
                && cm.is_dir()
            {
                self.folder(child, &cm);
                continue;
            }
            if self.own.iter().any(|r| r == &child) {
                continue;
            }
            self.file(child);
        }
        let recent = m.ctime() >= self.recent_since;
        self.out.folders.insert(
            rel,
            Folder {
                stamp,
                recent,
                names,
            },
        );
    }

    /// File `rel`: its stamp and, when it changed recently (or was hashed before and looks the
    /// same), a hash of its bytes.
    fn file(&mut self, rel: String) {
        use std::os::unix::fs::MetadataExt;
        let path = self.common.join(&rel);
        let Ok(m) = std::fs::symlink_metadata(&path) else {
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
        let hashed = match self.before.and_then(|b| b.files.get(&rel)) {
            // Hashed before: hashed again when nothing else tells it changed.
            Some(&(d, i, mo, sz, c, cn, h)) => h.is_some() && (d, i, mo, sz, c, cn) == meta,
            None => m.ctime() >= self.recent_since,
        };
        let mut hash = None;
        if hashed && m.is_file() {
            let read =
                crate::support::fs::open_regular(&path, std::fs::OpenOptions::new().read(true))
                    .and_then(|mut f| {
                        let mut h = Sha256::new();
                        std::io::copy(&mut f, &mut h)?;
                        Ok(h.finalize())
                    });
            // Unreadable now and readable later (or the other way) is a change too.
            hash = Some(read.map_or([0u8; 32], Into::into));
        }
        let (d, i, mo, sz, c, cn) = meta;
        self.out.files.insert(rel, (d, i, mo, sz, c, cn, hash));
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

    #[test]
    fn a_folder_not_changed_is_not_listed_again_and_its_files_are_still_looked_at() {
        let d = tempfile::tempdir().unwrap();
        let g = d.path();
        for dir in ["hooks", "info", "refs/heads", "refs/tags"] {
            std::fs::create_dir_all(g.join(dir)).unwrap();
        }
        std::fs::write(g.join("hooks/pre-commit"), "#!/bin/sh\n").unwrap();
        std::fs::write(g.join("hooks/pre-push.sample"), "#!/bin/sh\n").unwrap();
        std::fs::write(g.join("refs/heads/main"), "a\n").unwrap();
        // Everything is taken as old (a capture a minute later), and the changes below come
        // well after the clock tick of the set-up.
        let later = now() + 60;
        let before = SharedState::capture_since(g, &[], false, None, later);
        assert!(before.folders.values().all(|f| !f.recent));
        assert!(!before.files.contains_key("hooks/pre-push.sample"));
        std::thread::sleep(std::time::Duration::from_millis(50));
        let after = |b: &SharedState| SharedState::capture_since(g, &[], false, Some(b), later);
        // Nothing changed: the same state, the names of each folder taken from before.
        assert_eq!(before.changes(&after(&before)), Vec::<String>::new());
        // A hook rewritten in place leaves its folder as it was: still seen.
        std::fs::write(g.join("hooks/pre-commit"), "#!/bin/sh\nevil\n").unwrap();
        assert_eq!(
            before.changes(&after(&before)),
            ["`hooks/pre-commit` changed"]
        );
        // A name added to a folder changes the folder: it is listed again. A sample hook is
        // never run by git: rewriting one is not a change; renaming it to its real name is.
        std::fs::write(g.join("hooks/pre-push.sample"), "evil\n").unwrap();
        std::fs::write(g.join("refs/tags/planted"), "d\n").unwrap();
        assert_eq!(
            before.changes(&after(&before)),
            ["`hooks/pre-commit` changed", "`refs/tags/planted` added"]
        );
        std::fs::rename(g.join("hooks/pre-push.sample"), g.join("hooks/pre-push")).unwrap();
        assert_eq!(
            before.changes(&after(&before)),
            [
                "`hooks/pre-commit` changed",
                "`hooks/pre-push` added",
                "`refs/tags/planted` added"
            ]
        );
    }

    #[test]
    fn a_capture_from_the_last_one_sees_what_a_fresh_one_sees() {
        let d = tempfile::tempdir().unwrap();
        let g = d.path();
        for dir in ["hooks", "info", "refs/heads", "refs/tags"] {
            std::fs::create_dir_all(g.join(dir)).unwrap();
        }
        std::fs::write(g.join("config"), "[core]\n").unwrap();
        std::fs::write(g.join("hooks/pre-commit"), "#!/bin/sh\n").unwrap();
        std::fs::write(g.join("refs/heads/main"), "a\n").unwrap();
        std::fs::write(g.join("refs/heads/one"), "b\n").unwrap();
        let last = LastCaptures::default();
        // One item's state, kept after it; the next item (another branch of its own) starts
        // from it, after a change made between the two.
        let one = ["refs/heads/one".to_string()];
        let first = last.capture(g, &one, true, None);
        last.keep(g, first.capture_after(g, &one, true), &one, true, None);
        std::fs::write(g.join("hooks/pre-commit"), "#!/bin/sh\nx\n").unwrap();
        std::fs::write(g.join("refs/tags/v1"), "c\n").unwrap();
        let two = ["refs/heads/two".to_string()];
        let chained = last.capture(g, &two, false, None);
        let fresh = SharedState::capture(g, &two, false);
        assert_eq!(
            chained.files.keys().collect::<Vec<_>>(),
            fresh.files.keys().collect::<Vec<_>>()
        );
        assert!(chained.files.contains_key("refs/heads/one"));
        assert!(chained.files.contains_key("refs/tags/v1"));
        assert!(!chained.files.contains_key("HEAD"));
        // What the item then changes is named alike from either.
        std::fs::write(g.join("hooks/pre-commit"), "#!/bin/sh\ny\n").unwrap();
        std::fs::write(g.join("refs/heads/two"), "d\n").unwrap();
        std::fs::write(g.join("info/exclude"), "e\n").unwrap();
        let after = chained.capture_after(g, &two, false);
        assert_eq!(
            chained.changes(&after),
            ["`hooks/pre-commit` changed", "`info/exclude` added"]
        );
        assert_eq!(
            fresh.changes(&fresh.capture_after(g, &two, false)),
            chained.changes(&after)
        );
    }

    /// The capture after an item stands for the next one's before only moments later, of the
    /// same refs, with the repository's lease record as it was: a change another run made in
    /// between (it wrote its own record) or made longer ago is not put on the next item.
    #[test]
    fn the_last_capture_stands_for_the_next_only_moments_later_with_no_other_run_between() {
        let d = tempfile::tempdir().unwrap();
        let g = d.path();
        for dir in ["hooks", "info", "refs/heads", "refs/tags"] {
            std::fs::create_dir_all(g.join(dir)).unwrap();
        }
        std::fs::write(g.join("config"), "[core]\n").unwrap();
        std::fs::write(g.join("refs/heads/main"), "a\n").unwrap();
        let own = ["refs/heads/main".to_string()];
        let ours: LeaseMark = (1, 2, 3, 4, 5, 6, 7);
        let theirs: LeaseMark = (1, 9, 3, 4, 5, 6, 7);
        let last = LastCaptures::default();
        let kept = |last: &LastCaptures| {
            let state = SharedState::capture(g, &own, false);
            last.keep(g, state.clone(), &own, false, Some(ours));
            state
        };
        let tag = |n: &str| std::fs::write(g.join("refs/tags").join(n), "t\n").unwrap();
        // The same run, moments later: the kept state as it is (a tag made in between is the
        // next item's to answer for, as one made while it runs would be).
        let state = kept(&last);
        tag("between");
        assert_eq!(last.capture(g, &own, false, Some(ours)), state);
        // Another run took the lease in between: taken anew.
        let state = kept(&last);
        tag("other-run");
        let anew = last.capture(g, &own, false, Some(theirs));
        assert_eq!(state.changes(&anew), ["`refs/tags/other-run` added"]);
        // No lease record, other refs, or later than moments: taken anew.
        for (n, (lease, refs, wait)) in [
            (None, &own[..], false),
            (Some(ours), &[][..], false),
            (Some(ours), &own[..], true),
        ]
        .into_iter()
        .enumerate()
        {
            kept(&last);
            if wait {
                std::thread::sleep(RECENT_ENOUGH + std::time::Duration::from_millis(20));
            }
            tag(&format!("t{n}"));
            let got = last.capture(g, refs, false, lease);
            assert!(
                got.files.contains_key(&format!("refs/tags/t{n}")),
                "{lease:?} {refs:?} {wait}"
            );
        }
    }
}
