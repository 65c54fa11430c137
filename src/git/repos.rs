//! The handle one run holds on its repositories' git folders: what it has learnt of them, kept
//! for that run and no longer.
//!
//! Runner asks a repository's configuration before its git calls (the filter drivers it turns
//! off, who commits, how refs are logged, settings that leave a checkout or a diff to git), a
//! commit's tree after every worker pass, and a checkout's small files (HEAD, its ref, the
//! configuration, a small index) before and after every item. Each is learnt once per folder,
//! commit or file stamp and kept here, not in process-wide statics: every run (each round of
//! `apply --loop`, which may sleep an hour between rounds while someone edits `~/.gitconfig` or
//! a repository's `.git/config`) starts from what the files say then, and a test's lookups
//! cannot leak into another's.
//!
//! A handle is cheap to clone (one shared map); the session opens one before it plans and the
//! drain's items share it.
//!
//! It holds what was read, never an open object store: gitoxide maps a pack's files, and a map
//! kept from one item to the next would let a worker that truncates a pack in place end runner
//! with `SIGBUS` at its next read. Each in-process read of objects opens the store and lets it
//! go.

use super::looked::{Entry, Looked};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// What one run has learnt of its repositories' git folders.
#[derive(Clone, Default)]
pub struct Repos(Arc<Known>);

impl std::fmt::Debug for Repos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Repos").finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Known {
    /// Each folder's configuration, as far as runner reads it, by the folder asked about.
    seen: Mutex<HashMap<PathBuf, Looked>>,
    /// The scopes every repository shares (system, global, then the command line's), as git
    /// gave them with the first repository's own: those before a repository's own entries, and
    /// those after. `None` inside when they may differ between repositories (an include, which
    /// may be conditional) or git could not say which scope an entry came from.
    outer: OnceLock<Option<(Vec<Entry>, Vec<Entry>)>>,
    /// Held by lookups made before git has answered once, so that they wait for that answer
    /// rather than each start git.
    first: Mutex<()>,
    /// The tree each commit names. A commit is named by its content (and every commit runner
    /// reads in process is hashed against its name), so its tree never changes.
    trees: Mutex<HashMap<[u8; 20], [u8; 20]>>,
    /// The small files of the checkouts read this run, kept while unchanged.
    kept: super::kept::KeptFiles,
}

/// The most commits a run remembers the trees of; past it the memory starts again (forgetting
/// costs one read).
const TREES_KEPT: usize = 65_536;

impl Repos {
    /// The small files of the checkouts read this run ([`super::kept::KeptFiles`]).
    pub(super) fn kept_files(&self) -> &super::kept::KeptFiles {
        &self.0.kept
    }

    /// What was looked up of `dir`'s configuration this run.
    pub(super) fn looked(&self, dir: &Path) -> Option<Looked> {
        lock(&self.0.seen).get(dir).cloned()
    }

    /// Remember what `dir`'s configuration says.
    pub(super) fn remember(&self, dir: &Path, looked: Looked) {
        lock(&self.0.seen).insert(dir.to_path_buf(), looked);
    }

    /// A worktree runner just added at `worktree` reads the configuration of the repository at
    /// `repo` (a fresh worktree has none of its own): it is known without asking git again.
    pub(super) fn same_as(&self, repo: &Path, worktree: &Path) {
        let mut seen = lock(&self.0.seen);
        if let Some(looked) = seen.get(repo).cloned() {
            seen.insert(worktree.to_path_buf(), looked);
        }
    }

    /// Forget what was looked up of `dir`'s configuration (it changed).
    #[cfg(test)]
    pub(super) fn forget(&self, dir: &Path) {
        lock(&self.0.seen).remove(dir);
    }

    /// The shared scopes, once git has told them (see [`Known::outer`]).
    pub(super) fn outer(&self) -> Option<&Option<(Vec<Entry>, Vec<Entry>)>> {
        self.0.outer.get()
    }

    /// Set the shared scopes, where not set already.
    pub(super) fn set_outer(&self, outer: Option<(Vec<Entry>, Vec<Entry>)>) {
        let _ = self.0.outer.set(outer);
    }

    /// Held while the first lookup asks git.
    pub(super) fn first_lookup(&self) -> std::sync::MutexGuard<'_, ()> {
        lock(&self.0.first)
    }

    /// The tree of `commit`, where this run has read it.
    pub(super) fn tree(&self, commit: &[u8; 20]) -> Option<[u8; 20]> {
        lock(&self.0.trees).get(commit).copied()
    }

    /// Remember the tree of `commit`.
    pub(super) fn remember_tree(&self, commit: [u8; 20], tree: [u8; 20]) {
        let mut trees = lock(&self.0.trees);
        if trees.len() >= TREES_KEPT {
            trees.clear();
        }
        trees.insert(commit, tree);
    }
}

/// A lock whose holder panicked still guards plain data: the maps hold only whole entries.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
