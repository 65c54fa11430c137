//! The closed vocabularies every layer shares: item outcomes, item states with their hold and
//! skip reasons, gate results, worker classes, run endings, and the key that names an item across
//! runs. Their spellings are the product's contract: reports, the ledger and
//! scripts read them. This module imports nothing of runner's, so every other module may import it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum ItemOutcome {
    Completed,
    /// Attempts exhausted, or the model chain (`fallback-exhausted`).
    Halted,
    /// runner could not run it (spawn error, git error).
    Failed,
    Skipped,
    Held,
    Cancelled,
}

impl ItemOutcome {
    pub(crate) const ALL: [ItemOutcome; 6] = [
        ItemOutcome::Completed,
        ItemOutcome::Halted,
        ItemOutcome::Failed,
        ItemOutcome::Skipped,
        ItemOutcome::Held,
        ItemOutcome::Cancelled,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            ItemOutcome::Completed => "completed",
            ItemOutcome::Halted => "halted",
            ItemOutcome::Failed => "failed",
            ItemOutcome::Skipped => "skipped",
            ItemOutcome::Held => "held",
            ItemOutcome::Cancelled => "cancelled",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum GateResult {
    Passed,
    Failed,
    TimedOut,
    /// Never counts as passed.
    Skipped,
    NotRun,
}

impl GateResult {
    pub fn as_str(self) -> &'static str {
        match self {
            GateResult::Passed => "passed",
            GateResult::Failed => "failed",
            GateResult::TimedOut => "timed-out",
            GateResult::Skipped => "skipped",
            GateResult::NotRun => "not-run",
        }
    }
}

/// How a worker pass ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum WorkerClass {
    Ok,
    /// The provider's fault: an exit code, an output pattern, or silence.
    Provider,
    Timeout,
    Failed,
    /// Ended by a cancel; not a verdict on the work.
    Cancelled,
    /// The provider refused the key (authentication, billing): the model is not used again in
    /// the run; not a verdict on the work.
    Refused,
}

impl WorkerClass {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerClass::Ok => "ok",
            WorkerClass::Provider => "provider",
            WorkerClass::Timeout => "timeout",
            WorkerClass::Failed => "failed",
            WorkerClass::Cancelled => "cancelled",
            WorkerClass::Refused => "refused",
        }
    }
}

/// What the probe of a model before the queue found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ProbeVerdict {
    /// It answered.
    Ok,
    /// Its provider refused the key: no item uses the model in this run.
    Refused,
    /// Its provider failed for a while (rate limit, overload, silence, timeout): the run goes
    /// on, and its items meet the failure as usual.
    Unavailable,
    /// The worker failed for a reason of its own: the run goes on.
    Failed,
}

impl ProbeVerdict {
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeVerdict::Ok => "ok",
            ProbeVerdict::Refused => "refused",
            ProbeVerdict::Unavailable => "unavailable",
            ProbeVerdict::Failed => "failed",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RunEnding {
    /// Every pending item was processed.
    Drained,
    /// No item was ever found; never reported as drained.
    NothingFound,
    /// A tracker source could not be read, and nothing else was there to run: never reported
    /// as nothing found.
    Unreadable,
    /// The consecutive-halt guard fired.
    Stalled,
    Cancelled,
    Paused,
    /// runner itself could not continue.
    Failed,
    /// The manifest's budget was spent: nothing new was admitted.
    Budget,
    /// Every model an item needed was refused by its provider (a key refused or expired,
    /// billing): nothing new was admitted, and what could not run is held.
    Refused,
}

impl RunEnding {
    pub fn as_str(self) -> &'static str {
        match self {
            RunEnding::Drained => "drained",
            RunEnding::NothingFound => "nothing-found",
            RunEnding::Unreadable => "unreadable",
            RunEnding::Stalled => "stalled",
            RunEnding::Cancelled => "cancelled",
            RunEnding::Paused => "paused",
            RunEnding::Failed => "failed",
            RunEnding::Budget => "budget",
            RunEnding::Refused => "refused",
        }
    }
}

/// What `plan` decided for one item.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum ItemState {
    /// Will run.
    Pending,
    /// Completed by an earlier run; not run again unless asked.
    Done,
    /// Held back for a reason that may clear (see [`HoldReason`]).
    Held,
    /// Not run in this run (repository missing, or filtered out).
    Skipped,
}

/// Why an item is not pending: exactly one reason per item.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum HoldReason {
    RepoNotFound,
    StaleBase,
    RepoBusy,
    DirtyTree,
    Quarantined,
    Paused,
    Filtered,
    /// Claimed by another live run, which runs it.
    Taken,
    /// The environment failed the item (a clone or fetch, a git call past its deadline, a lease
    /// record that cannot be written, the ledger): not the work's fault; the next run tries it
    /// again.
    Environment,
    /// The only model of a chain without fallbacks kept failing for the provider's reasons:
    /// the next run tries again.
    ProviderUnavailable,
    /// Every model of the item's chain was refused by its provider (a key refused or expired,
    /// billing): the next run tries again, once the key is fixed.
    ProviderRefused,
    /// An item of a tracker that no declared repository takes.
    Unroutable,
    /// An item a tracker gave before, whose source could not be read this time.
    SourceUnreadable,
    /// Its pull request was closed without merge: not run again unless asked.
    Rejected,
    /// Its pull request's state cannot be read: never taken as merged or closed.
    PrUnknown,
    /// Its pull request still asks for changes after `publish.review_rounds` rounds.
    NeedsHuman,
    /// A tracker's item that lacks a var its repository's worker or gates use (`{item.<var>}`):
    /// the commands could not be written for it.
    MissingVar,
    /// An item it waits for (`after`) halted, failed, or is held or skipped: it cannot run
    /// until that one completes.
    Blocked,
    /// The manifest's daily or monthly spend cap is reached: held until the window resets.
    Budget,
}

impl HoldReason {
    pub fn as_str(self) -> &'static str {
        match self {
            HoldReason::RepoNotFound => "repo-not-found",
            HoldReason::StaleBase => "stale-base",
            HoldReason::RepoBusy => "repo-busy",
            HoldReason::DirtyTree => "dirty-tree",
            HoldReason::Quarantined => "quarantined",
            HoldReason::Paused => "paused",
            HoldReason::Filtered => "filtered",
            HoldReason::Taken => "taken",
            HoldReason::Environment => "environment",
            HoldReason::ProviderUnavailable => "provider-unavailable",
            HoldReason::ProviderRefused => "provider-refused",
            HoldReason::Unroutable => "unroutable",
            HoldReason::SourceUnreadable => "source-unreadable",
            HoldReason::Rejected => "rejected",
            HoldReason::PrUnknown => "pr-unknown",
            HoldReason::NeedsHuman => "needs-human",
            HoldReason::MissingVar => "missing-var",
            HoldReason::Blocked => "blocked",
            HoldReason::Budget => "budget",
        }
    }
    /// The state an item with this reason is in.
    pub fn state(self) -> ItemState {
        match self {
            HoldReason::RepoNotFound
            | HoldReason::Filtered
            | HoldReason::Taken
            | HoldReason::Rejected => ItemState::Skipped,
            _ => ItemState::Held,
        }
    }
}

impl ItemState {
    pub fn as_str(self) -> &'static str {
        match self {
            ItemState::Pending => "pending",
            ItemState::Done => "done",
            ItemState::Held => "held",
            ItemState::Skipped => "skipped",
        }
    }
}

/// An item's identity across runs: the manifest's name, the repository, the item id, and a hash
/// of the item's definition (so an edited item is new work).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ItemKey {
    pub manifest: String,
    pub repo: String,
    pub item: String,
    pub def_hash: String,
}

/// Item keys read one at a time: a list, or a plan's kept compact (a plan of 100,000 items is
/// not held twice as keys).
pub trait KeySet: std::fmt::Debug {
    fn is_empty(&self) -> bool;
    /// Each key, in order.
    fn each(&self, f: &mut dyn FnMut(ItemKey));
}

impl KeySet for Vec<ItemKey> {
    fn is_empty(&self) -> bool {
        <[ItemKey]>::is_empty(self)
    }

    fn each(&self, f: &mut dyn FnMut(ItemKey)) {
        for k in self {
            f(k.clone());
        }
    }
}

/// How a run keeps the processes of each item together, so that it can end all of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Containment {
    /// A cgroup per item: nothing the item starts can leave it (`setsid`, double forks and a
    /// cleared environment included), and it is ended at once.
    Cgroup,
    /// A process group per process, runner as child subreaper, and a census of the run token
    /// in every process's environment.
    ProcessGroup,
}

impl Containment {
    pub fn as_str(self) -> &'static str {
        match self {
            Containment::Cgroup => "cgroup",
            Containment::ProcessGroup => "process-group",
        }
    }
}

/// What a process runner spawns for an item is (`RUNNER_ROLE`): the worker, or a gate (named in
/// `RUNNER_GATE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    Worker,
    Gate,
}

impl Role {
    pub(crate) const ALL: [Role; 2] = [Role::Worker, Role::Gate];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Worker => "worker",
            Role::Gate => "gate",
        }
    }

    /// The role a `RUNNER_ROLE` value names, if it is one.
    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

/// The exit codes every verb shares (`docs/commands.md`'s table): 0 success, 1 the command ran but found
/// failures, 2 a bad invocation or an invalid manifest, 3 stalled, 4 runner itself failed, 5 a
/// budget stopped the run, 6 the provider refused the models; 129/130/143 cancelled by
/// SIGHUP/SIGINT/SIGTERM.
pub(crate) const EXIT_OK: i32 = 0;
pub(crate) const EXIT_FAILURES: i32 = 1;
pub(crate) const EXIT_INVALID: i32 = 2;
pub(crate) const EXIT_STALLED: i32 = 3;
pub const EXIT_INTERNAL: i32 = 4;
pub(crate) const EXIT_BUDGET: i32 = 5;
/// `apply`: every model an item needed was refused by its provider (a key refused or expired,
/// billing): nothing more was admitted, and the items that could not run are held.
pub(crate) const EXIT_REFUSED: i32 = 6;

/// One access the sandbox denied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeniedAccess {
    /// What it tried: `write`, `create folder`, `remove`, `rename`, `link`, `symlink`,
    /// `create node`, `truncate`, `change metadata` (mode, owner, times, extended
    /// attributes), or `connect` (a host not in `sandbox.network`).
    pub access: String,
    /// The path, resolved as the process named it (its folder joined, links followed); for
    /// `connect`, `host:port`.
    pub path: String,
    /// The program that tried (its name as the kernel keeps it; `?` where runner cannot
    /// tell, as for a connection through the proxy).
    pub program: String,
}
