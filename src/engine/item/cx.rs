//! What every part of an item's lifecycle shares: the item's context, how it asks to rest, the
//! errors that keep it from running, an item the environment failed, where its work must stay
//! ([`Anchor`]), what its shared git state was ([`Watched`]), what it could plant in git's
//! folders ([`Planted`]) and the trip to the blocking pool.
//! It names no other part, and each part names only what it uses: no circle among them.

use crate::engine::config::Effective;
use crate::engine::run::RunCx;
use crate::engine::stall::HaltSignature;
use crate::events::Event;
use crate::git;
use crate::plan::{ItemPlan, RepoPlan};
use crate::process::Stop;
use crate::vocab::ItemOutcome;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::{mpsc, watch};

/// How an item ended: what the scheduler is told.
pub(crate) use crate::engine::scheduler::ItemRun;

/// Lines of a failing gate's output kept in the report.
pub(super) const REPORT_TAIL_LINES: usize = 40;

pub(super) const REPORT_TAIL_BYTES: usize = 4096;

/// An item asks to rest for `wait` before its next attempt, freeing its slot; it goes on when
/// `wake` is sent (or the run stops).
#[derive(Debug)]
pub(crate) struct Rest {
    pub item: usize,
    pub wait: std::time::Duration,
    pub wake: tokio::sync::oneshot::Sender<()>,
}

pub(super) struct ItemCx<'a> {
    pub(super) cx: &'a RunCx,
    pub(super) idx: usize,
    pub(super) item: &'a ItemPlan,
    pub(super) repo: &'a RepoPlan,
    pub(super) eff: Effective,
    pub(super) workdir: PathBuf,
    pub(super) logs: PathBuf,
    pub(super) lease_fd: i32,
    /// Where the item asks to rest between attempts.
    pub(super) rest: mpsc::UnboundedSender<Rest>,
    /// The item's cgroup, when the run contains items in cgroups.
    pub(super) cgroup: Option<Arc<crate::process::cgroup::ItemCgroup>>,
    pub(super) events: &'a mpsc::UnboundedSender<Event>,
    pub(super) stop: watch::Receiver<Stop>,
    /// Where the work started; `None` in a repository without a commit.
    pub(super) anchor: Option<Anchor>,
    /// What its commands may touch, when items are confined.
    pub(super) rules: Option<crate::engine::confine::ItemRules>,
    /// Its repository's shared git state before it ran.
    pub(super) watched: Option<Watched>,
    /// What its processes could plant in git's folders, looked at after them.
    pub(super) planted: Option<Planted>,
    /// Its checkout's index before its processes ran, where they cannot write: what its
    /// snapshots start from ([`git::BaseIndex`]).
    pub(super) base_index: Option<Arc<git::BaseIndex>>,
}

/// An item the environment failed (git, the cgroup file system, the disk): held, not failed —
/// nothing was wrong with the work, and the next run tries it again. The stall guard counts it.
pub(super) fn environmental(cause: String) -> ItemRun {
    let mut r = ItemRun::ended(ItemOutcome::Held);
    r.reason = Some(crate::vocab::HoldReason::Environment.as_str().into());
    r.halt = Some(HaltSignature::described("environment", &cause));
    r.cause = Some(cause);
    r
}

pub(super) enum Prepared {
    Held(&'static str, String),
    Failed(ItemError),
}

/// What keeps runner from running or finishing an item (its outcome is then `failed`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ItemError {
    #[error(transparent)]
    Git(#[from] git::GitError),
    /// A task on the blocking pool ended without an answer (it panicked or was cancelled).
    #[error("a git task of the item ended early: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// Where an item's work must stay: the branch it runs on and the commit it started from.
#[derive(Clone, Debug)]
pub(super) struct Anchor {
    pub(super) branch: Option<String>,
    pub(super) start: String,
}

/// The git folders an item's processes may write — the object store, its worktree's own git
/// folder, or in the repository's own checkout the whole git folder — looked at after them for
/// what runner's own git would wait on (`git::planted`); and its worktree's `.git` file, which
/// must still lead where it led.
pub(crate) struct Planted {
    pub(super) common: PathBuf,
    pub(super) own: Option<PathBuf>,
    /// The worktree's `.git` file and what it held.
    pub(super) dot_git: Option<(PathBuf, Vec<u8>)>,
    /// When the item began, in seconds of the epoch.
    pub(super) since: i64,
    /// Whether git's folders are walked: `false` where the kernel keeps out all the walk looks
    /// for.
    pub(super) walk: bool,
}

/// What an item's check compares against.
pub(crate) struct Watched {
    pub(super) before: crate::git::SharedState,
    pub(super) own: Vec<String>,
    pub(super) head: bool,
}

/// Run `f` on the blocking pool.
pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ItemError> {
    Ok(tokio::task::spawn_blocking(f).await?)
}
