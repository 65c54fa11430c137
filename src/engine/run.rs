//! What a drain runs with and reports to: the run's context ([`RunCx`]), the sink that takes
//! every event and answers the decisions that need durable state ([`RunSink`]), the answers it
//! gives, and how a drain ended.

use crate::events::Event;
use crate::manifest::LoadedManifest;
use crate::plan::Plan;
use crate::process::redact::Redactor;
use crate::vocab::RunEnding;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// An answer the engine awaits while the rest of the run goes on (timers, kill ladders, output,
/// signals): what is behind the sink may take minutes to answer.
pub type Answer<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + 'a>>;

/// What the engine reports to and asks of the world outside it: every event, and the decisions
/// that need durable state (claims, pauses). The engine knows this trait, never what is behind
/// it (the ledger, the report, the progress display). Nothing here blocks: what needs no answer
/// is handed over, and what does is an [`Answer`] to await.
pub trait RunSink {
    /// Record an event. An `ItemFinished` is the item's result, which may wait for the next
    /// claim or [`RunSink::commit_results`] to become durable.
    fn event(&mut self, ev: &Event);
    /// Claim an item for this run before it starts, its repository's lease already held (which
    /// also makes the results recorded so far durable).
    fn claim(&mut self, item: usize) -> Answer<'_, ClaimAnswer>;
    /// Whether `run_id` is a live run of this ledger: a lease it holds will be let go, and its
    /// items are worth waiting for rather than holding as `repo-busy`.
    fn live_run(&mut self, run_id: &str) -> Answer<'_, bool>;
    /// Whether `run_id` recorded its ending (its processes were then proven gone or its
    /// repositories quarantined): nothing of it is left to end.
    fn ended(&mut self, run_id: &str) -> Answer<'_, bool>;
    /// Make every result recorded so far durable; a repository's lease is released only after.
    fn commit_results(&mut self) -> Answer<'_, ()>;
    /// Every few seconds: what is buffered is written, so that `status --watch` sees an item
    /// start and change phase while it runs, not only at the next claim or result.
    fn tick(&mut self) {}
    /// Who asked this run to stop, and why, if anyone did.
    fn stop_requested(&mut self) -> Answer<'_, Option<String>>;
    /// Set once runner cannot record what it does (the ledger failed); the run then stops.
    fn failure(&self) -> Option<String>;
    /// A repository's processes could not be proven gone: keep it out of later runs until an
    /// operator releases it (`runner unlock`).
    fn quarantine(&mut self, repo: &str, path: &std::path::Path, reason: &str);
    /// Take repository `repo`'s lock shared by every runner of the ledger, on whatever machine
    /// (its lease lives in one checkout; other machines have checkouts of their own). A ledger
    /// on one machine has no such lock: the lease is the lock.
    fn lock_repo(&mut self, _repo: &str) -> Answer<'_, Result<RepoLock, LockError>> {
        Box::pin(std::future::ready(Ok(RepoLock::NoSharedLock)))
    }
    /// Let the lock of [`RunSink::lock_repo`] go.
    fn unlock_repo(&mut self, _repo: &str) {}
    /// Whether a stop may be asked for from another machine, which cannot signal this process:
    /// then the drain asks [`RunSink::stop_requested`] every few seconds.
    fn polls_stop(&self) -> bool {
        false
    }
}

/// A repository's lock shared by the runners of one ledger ([`RunSink::lock_repo`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepoLock {
    /// Taken: whoever works on an item of the repository holds it until the item's result is
    /// recorded, so a claim another run still holds there is a run that stopped.
    Held,
    /// Another runner holds it.
    Busy,
    /// The ledger has no such lock (one machine: the lease is the lock).
    NoSharedLock,
}

/// The ledger could not take a repository's shared lock ([`RunSink::lock_repo`]): its own
/// error, which the engine does not name.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct LockError(pub Box<dyn std::error::Error + Send + Sync>);

/// The answer to a claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaimAnswer {
    Claimed,
    /// A live run works on it.
    Taken(String),
    /// Another run finished it meanwhile: the run, and the outcome.
    Done {
        run: String,
        outcome: String,
    },
    /// The manifest is paused (by whom, when, why): admit nothing more.
    Paused(String),
    /// The ledger could not answer.
    Failed(String),
}

/// Everything a run needs, fixed before it starts.
pub struct RunCx {
    pub loaded: LoadedManifest,
    /// What the run has learnt of its repositories' git folders.
    pub git: crate::git::Repos,
    /// The limits of `timeout: auto` gates, from their history (absent: the default).
    pub gate_timeouts: std::collections::HashMap<String, std::time::Duration>,
    pub plan: Arc<Plan>,
    pub run_id: String,
    /// Unguessable, in every spawned process's environment, to find escaped descendants.
    pub token: String,
    /// `<reports.dir>/<run-id>`: reports and `logs/`.
    pub run_dir: PathBuf,
    pub workspace: PathBuf,
    /// How items are confined.
    pub sandbox: super::confine::SandboxPlan,
    pub workers: u32,
    pub wait_for_locks: Option<Duration>,
    pub redactor: Arc<Redactor>,
    /// Repositories that could not be cloned, with the (redacted) git error.
    pub clone_errors: HashMap<String, String>,
    /// The manifest was paused when the run started: by whom, when, why.
    pub paused: Option<String>,
    /// What the run may spend (`budget`, and what its day's and month's caps leave).
    pub budget: Option<super::scheduler::BudgetLimit>,
    /// For items run again after a halt or failure: the previous run's last feedback file.
    pub previous_feedback: HashMap<usize, PathBuf>,
    /// How each item's processes are kept together (a cgroup each, or process groups).
    pub contained: Arc<crate::process::cgroup::Contained>,
    /// For a run started inside a worker or gate: that run's token, with which this one may
    /// re-enter the lease it holds on their repository.
    pub parent_token: Option<String>,
    /// Pull requests earlier runs opened, by item: the publish command updates them.
    pub published: HashMap<usize, String>,
    /// Probe each model before the queue (`worker.probe`; off with `apply --no-probe`).
    pub probe_models: bool,
    /// The run's view of each model's provider, shared by its items.
    pub health: std::sync::Mutex<super::health::Health>,
    /// Recorded gate verdicts, reused on the same tree, command and environment.
    pub verdicts: super::verdicts::Verdicts,
    /// Baselines run so far, by repository, gate and base commit.
    pub baselines: std::sync::Mutex<HashMap<String, super::item::Baseline>>,
    /// The worktree each repository keeps between its items.
    pub(crate) spares: super::item::Spares,
    /// Repositories whose own checkout holds what a dead run's in-place item left, proven its
    /// own when the run was planned: by repository, that run. The first in-place item of the
    /// repository proves it again under the lease, saves it as a patch and resets the checkout.
    pub(crate) dead_leftovers: std::sync::Mutex<std::collections::HashMap<String, String>>,
    /// Each repository's shared git state as last captured, what the next item's capture
    /// starts from.
    pub(crate) captures: crate::git::LastCaptures,
    /// The git folders looked at for what an item planted, as last listed.
    pub(crate) planted_listings: crate::git::PlantedListings,
}

/// How the drain ended.
#[derive(Debug)]
pub struct DrainEnd {
    pub ending: RunEnding,
    pub cause: Option<String>,
    /// The signal that cancelled the run, if any.
    pub signal: Option<i32>,
}
