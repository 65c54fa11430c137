//! An item's part of the report as data: its record, its attempts, their worker and gates, and
//! what it waited for. `items` keeps these and the report's model holds them; this names
//! neither.

use crate::vocab::{GateResult, ItemOutcome, WorkerClass};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct Waited {
    pub lease_ms: u64,
    /// Resting after provider failures, as long as each rest asked.
    pub backoff_ms: u64,
    /// After a rest was over, waiting for a free slot (other items held every one).
    #[serde(default)]
    pub slot_ms: u64,
    /// For shared resources (`uses`), over every command of every attempt.
    #[serde(default)]
    pub resources_ms: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct PublishReport {
    pub remote: String,
    pub branch: String,
    pub pushed: bool,
    /// The commit published.
    pub head: Option<String>,
    /// The pull request.
    pub url: Option<String>,
    /// What failed (the branch is kept).
    pub error: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct ItemReport {
    pub repo: String,
    pub id: String,
    pub outcome: ItemOutcome,
    pub reason: Option<String>,
    pub cause: Option<String>,
    /// The model of its last attempt.
    pub model: Option<String>,
    pub branch: Option<String>,
    pub started_at: Option<String>,
    pub ended_at: Option<String>,
    pub attempts: Vec<AttemptReport>,
    /// The commit a completed item produced; absent when its branch did not move.
    pub commit: Option<String>,
    /// What that work changed, from the commit the item started at.
    pub diffstat: Option<Box<Diffstat>>,
    /// `no-change` (the worker changed nothing), `unverified` (no required gate ran and
    /// passed): a completion that is not a checked change says so.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub marks: Vec<String>,
    /// Files left uncommitted (`worker.commit: false`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub uncommitted: Vec<String>,
    /// The worktree the item ran in, while it is kept (an item that did not complete).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worktree: Option<String>,
    /// What of `worktree.share` its worktree got from the checkout (folders linked, files
    /// copied).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared: Vec<String>,
    /// Its worktree's `worktree.setup`, when it ran in this run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<Box<SetupReport>>,
    /// The item started anew from its base (`--fresh`): what its branch held is kept as this
    /// branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_branch: Option<String>,
    /// What an earlier run left uncommitted in that worktree, saved as a patch before this run
    /// started from the branch's committed state (relative to the run's report folder).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leftovers: Option<String>,
    /// What became of its work branch, when the manifest publishes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub publish: Option<Box<PublishReport>>,
    /// The pull request an earlier run opened for it, as its forge told it when the run began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_request: Option<Box<crate::plan::pull::PullRequest>>,
    /// Where its time went besides work: waiting for its repository's lease, for shared
    /// resources, and resting after provider failures, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waited: Option<Box<Waited>>,
    /// What its workers reported they used, over every attempt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Box<crate::events::Usage>>,
    /// What its confined processes tried to write where the sandbox did not let them: a
    /// finding for the reviewer (the first distinct accesses of each process).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub denied: Vec<DeniedReport>,
}

/// One access an item's sandbox denied.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct DeniedReport {
    /// The attempt (0: the worktree's setup).
    pub attempt: u32,
    /// `worker`, `setup`, or the gate's name.
    pub process: String,
    #[serde(flatten)]
    pub access: crate::vocab::DeniedAccess,
    /// The accesses of the same process not listed, past the first ones (on its last entry).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub more: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A worktree's setup (`worktree.setup`), run once before the item's first attempt.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct SetupReport {
    pub ok: bool,
    pub exit: Option<i32>,
    pub duration_ms: u64,
    /// Relative to the run's report folder.
    pub log: Option<String>,
    /// The end of its output when it failed.
    pub output_tail: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct Diffstat {
    pub files: u64,
    pub insertions: u64,
    pub deletions: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct AttemptReport {
    pub n: u32,
    pub model: Option<String>,
    /// The model the worker says it used, when that is not the one asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_used: Option<String>,
    /// How long the item rested before this attempt, after a provider failure (the back-off
    /// asked for).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waited_ms: Option<u64>,
    /// How long it then waited for a free slot before this attempt started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot_wait_ms: Option<u64>,
    pub started_at: String,
    pub worker: Option<WorkerReport>,
    pub gates: Vec<GateReport>,
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct WorkerReport {
    pub exit: Option<i32>,
    pub class: WorkerClass,
    pub duration_ms: u64,
    /// Relative to the run's report folder; none when the worker printed nothing.
    pub log: Option<String>,
    /// Why the log is not all of the output: it could not be created or written whole (a full
    /// disk). The run exits 4.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_error: Option<String>,
    /// Bytes of output past the log's limit (`RUNNER_LOG_LIMIT`, 100 MiB by default), not in
    /// the log: it stops at the limit, says so, and ends with the output's last lines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unlogged_bytes: Option<u64>,
    /// The end of its output when it did not succeed (empty otherwise).
    pub output_tail: String,
    /// Why runner ended it, when it did: `no output for 15s` (`silence`), `timed out after 1h`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct GateReport {
    pub name: String,
    pub result: GateResult,
    pub reason: Option<String>,
    pub duration_ms: u64,
    pub output_tail: String,
    /// Relative to the run's report folder; none when the gate printed nothing or did not run.
    pub log: Option<String>,
    /// Why the log is not all of the output: it could not be created or written whole (a full
    /// disk). The run exits 4.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_error: Option<String>,
    /// Bytes of output past the log's limit (`RUNNER_LOG_LIMIT`, 100 MiB by default), not in
    /// the log: it stops at the limit, says so, and ends with the output's last lines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unlogged_bytes: Option<u64>,
    /// How it exited, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit: Option<i32>,
    /// `false` for a gate that is reported but never decides (`required: false`).
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub required: bool,
    /// The result is a verdict recorded earlier on the same tree, command and environment
    /// (the gate did not run): where it was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cached: Option<crate::events::CachedFrom>,
    /// It failed here, but only with failures its base commit has too: it passes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub forgiven: bool,
    /// For a `baseline: true` gate that failed here: new failures and forgiven ones, as the
    /// lines they were read from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failures: Option<crate::events::GateFailures>,
    /// Its run on the base commit, when one was needed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<BaselineReport>,
}

fn is_true(b: &bool) -> bool {
    *b
}

/// A gate is required unless it says otherwise.
fn yes() -> bool {
    true
}

/// A gate's run on the base commit.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
pub struct BaselineReport {
    pub commit: String,
    /// `passed`, `failed`, `timed-out` (forgives nothing) or `not-run` (could not be run).
    pub result: GateResult,
    /// The failures recognised there.
    pub failures: Vec<String>,
    /// Reused from an earlier run's verdict on the same tree.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cached: bool,
    pub duration_ms: u64,
    pub log: Option<String>,
    /// Why the log is not all of the output: it could not be created or written whole (a full
    /// disk). The run exits 4.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_error: Option<String>,
    /// Bytes of output past the log's limit (`RUNNER_LOG_LIMIT`, 100 MiB by default), not in
    /// the log: it stops at the limit, says so, and ends with the output's last lines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unlogged_bytes: Option<u64>,
}
