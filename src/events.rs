//! The one stream of what happens during a run.
//!
//! The engine emits [`Event`]s; the progress display, the report builder and the state ledger
//! consume them. None of the consumers touches a process, and the engine knows none of
//! them.

use crate::vocab::{Containment, GateResult, ItemOutcome, RunEnding, WorkerClass};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// How a run contains the processes of its items.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ContainmentInfo {
    pub mode: Containment,
    /// The run's cgroup, or why cgroups are not used.
    pub detail: String,
    /// What confines each item's processes (`landlock ABI 7, user namespace, network open`,
    /// `off`, or what is missing); absent from runs recorded before runner confined items.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
}

/// What a worker reported it used, in `$RUNNER_USAGE`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Usage {
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    /// What it cost; none when the worker did not say (unknown, never taken for zero). A sum
    /// with an unknown part is unknown.
    #[serde(default)]
    pub cost_usd: Option<f64>,
}

/// Nothing used yet: no tokens, and a cost known to be zero (what sums start from).
impl Default for Usage {
    fn default() -> Self {
        Usage {
            input_tokens: 0,
            output_tokens: 0,
            cost_usd: Some(0.0),
        }
    }
}

impl Usage {
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cost_usd = self.cost_usd.zip(other.cost_usd).map(|(a, b)| a + b);
    }

    /// The cost as people read it: `$0.42`, or `cost unknown`.
    pub(crate) fn cost_text(&self) -> String {
        self.cost_usd
            .map_or_else(|| "cost unknown".to_string(), |c| format!("${c:.2}"))
    }
}

/// Where a reused gate verdict was first given.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CachedFrom {
    pub run_id: String,
    pub repo: String,
    pub item: String,
    /// When, as RFC 3339.
    pub at: String,
}

/// A baseline gate's failures: those the base commit lacks, and those it has (forgiven).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct GateFailures {
    pub new: Vec<String>,
    pub forgiven: Vec<String>,
}

fn yes() -> bool {
    true
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Items are named by their index in the plan's item list.
pub(crate) type ItemIndex = usize;

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum Event {
    RunStarted {
        run_id: String,
        workers: u32,
        pending: usize,
        /// How the run keeps each item's processes together (absent from runs recorded before
        /// runner said so).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        containment: Option<ContainmentInfo>,
    },
    ItemStarted {
        item: ItemIndex,
    },
    AttemptStarted {
        item: ItemIndex,
        n: u32,
        model: Option<String>,
        /// How long the item rested before this attempt (back-off after a provider failure,
        /// and waiting for a slot after it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        waited: Option<Duration>,
    },
    /// `failures` provider failures of `model` within the window (the last one on this item):
    /// What attempt `n`'s worker used cannot be known: it wrote no usage to `RUNNER_USAGE`, or
    /// wrote something that is not a usage object (`why`). With a budget, nothing new is
    /// admitted: a spend that cannot be counted is not assumed to be nothing.
    UsageUnknown {
        item: ItemIndex,
        n: u32,
        why: String,
    },
    /// items that start from now on begin on the next model of their chain, until it is quiet.
    ModelDemoted {
        item: ItemIndex,
        model: String,
        failures: usize,
        /// The items whose failures demoted it (`repo/id`), at least two.
        #[serde(default)]
        items: Vec<String>,
        /// The model new items of this item's chain start on now; none when the demoted model
        /// is the last usable one, which they go on trying.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        next: Option<String>,
    },
    /// The provider refused `model`'s key (authentication, or billing: `message` says which,
    /// in the provider's words as the worker printed them): no item uses the model again in
    /// this run. Said once per model; `model` is none for a worker run without one.
    ModelRefused {
        item: ItemIndex,
        model: Option<String>,
        message: String,
    },
    /// The probe before the queue asked `model` its question (`worker.probe`): what it found,
    /// and, when it did not answer, the provider's or the worker's words (`message`). A
    /// refused model is used by no item of the run.
    Probed {
        model: String,
        verdict: crate::vocab::ProbeVerdict,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        duration: Duration,
    },
    /// A quarantined repository was watched before the run's first item: processes the item
    /// that quarantined it (in run `run`) had left — proven its by the lease's lock, its cgroup
    /// or its run's token and repository — were ended, or are still `left`.
    Watched {
        repo: String,
        run: String,
        ended: Vec<i32>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        left: Vec<i32>,
    },
    /// A completed item's work branch was published (pushed, and its pull request opened or
    /// updated), or `error` says what failed; the branch is kept either way.
    Published {
        item: ItemIndex,
        remote: String,
        branch: String,
        pushed: bool,
        /// The commit the branch pointed at.
        head: Option<String>,
        url: Option<String>,
        error: Option<String>,
        /// The review feedback this publication answers (a review round's): the fingerprints
        /// of the comments it was given and the head whose checks it saw.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answered: Option<AnsweredFeedback>,
        /// The tracker's item the work is for: its pull request is followed until merged or
        /// closed, whether or not the tracker still lists the item.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        source: Option<PublishedSource>,
    },
    /// A pull request of an item its tracker no longer lists was seen merged or closed: it is
    /// not asked again.
    PullRequestSettled {
        item: ItemIndex,
        url: String,
        /// `merged` or `closed`.
        state: String,
    },
    /// The item waits for its repository's lease, held by another process: `holder` says whose
    /// (a run, its pid and host), when its record could be read. Said again when the holder
    /// changes.
    LeaseWaiting {
        item: ItemIndex,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        holder: Option<String>,
    },
    /// The item waited this long for its repository's lease, held by another process, before it
    /// started.
    LeaseWaited {
        item: ItemIndex,
        waited: Duration,
    },
    /// A command of attempt `n` (the worker, or gate `gate`) waits for a unit of a shared
    /// resource that other commands hold, on this host.
    ResourceWaiting {
        item: ItemIndex,
        n: u32,
        resource: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        gate: Option<String>,
    },
    /// ... and got it after waiting this long; its time limit starts now.
    ResourceAcquired {
        item: ItemIndex,
        n: u32,
        resource: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        gate: Option<String>,
        waited: Duration,
    },
    /// What attempt `n`'s worker reported it used.
    Usage {
        item: ItemIndex,
        n: u32,
        model: Option<String>,
        usage: Usage,
        /// The model the worker says it actually used, when it says so.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        used_model: Option<String>,
    },
    /// A provider-class failure: the item rests for `wait` before attempt `n + 1`, its slot
    /// free for other items meanwhile. `hinted`: the wait is the one the provider asked for.
    Resting {
        item: ItemIndex,
        n: u32,
        wait: Duration,
        hinted: bool,
    },
    WorkerFinished {
        item: ItemIndex,
        n: u32,
        exit: Option<i32>,
        class: WorkerClass,
        duration: Duration,
        /// The worker's log.
        log: Option<PathBuf>,
        /// The end of its output, when it did not succeed.
        #[serde(default)]
        output_tail: String,
        /// Why its log is not all of its output: it could not be created or written whole
        /// (a full disk).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        log_error: Option<String>,
        /// Bytes of its output past the log's limit (`RUNNER_LOG_LIMIT`), not in its log,
        /// which ends with the output's last lines instead.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        unlogged_bytes: Option<u64>,
        /// Why runner ended it, when it did: `no output for 15s` (`silence`), `timed out
        /// after 1h`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ended: Option<String>,
    },
    GateStarted {
        item: ItemIndex,
        n: u32,
        gate: String,
        /// Its time limit (for `timeout: auto`, the one its history gave it).
        #[serde(default)]
        limit: Duration,
        /// Its command line (redacted) and the folder it runs in.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        command: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dir: Option<PathBuf>,
        /// Whether its failure decides the attempt (`required`, the default).
        #[serde(default = "yes")]
        required: bool,
    },
    GateFinished {
        item: ItemIndex,
        n: u32,
        gate: String,
        result: GateResult,
        /// Why a gate was skipped or not run.
        reason: Option<String>,
        duration: Duration,
        output_tail: String,
        log: Option<PathBuf>,
        /// How it exited, when it did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit: Option<i32>,
        /// The result is a verdict recorded earlier on the same tree, command and environment:
        /// where it was given. The gate did not run.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cached: Option<CachedFrom>,
        /// For a gate with `baseline: true` that failed here: its failures, new ones and those
        /// the base commit has too (then forgiven), as the lines they were read from.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failures: Option<GateFailures>,
        /// Why its log is not all of its output: it could not be created or written whole
        /// (a full disk).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        log_error: Option<String>,
        /// Bytes of its output past the log's limit (`RUNNER_LOG_LIMIT`), not in its log,
        /// which ends with the output's last lines instead.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        unlogged_bytes: Option<u64>,
    },
    /// A gate with `baseline: true` failed, and was run (or its verdict found) on the base
    /// commit, in a detached worktree, to tell which failures the base already has.
    GateBaseline {
        item: ItemIndex,
        n: u32,
        gate: String,
        commit: String,
        /// `passed`, `failed` or `timed-out` (which forgives nothing).
        result: GateResult,
        /// The failures recognised on the base, as the lines they were read from.
        failures: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cached: Option<CachedFrom>,
        duration: Duration,
        log: Option<PathBuf>,
        /// Why its log is not all of its output: it could not be created or written whole
        /// (a full disk).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        log_error: Option<String>,
        /// Bytes of its output past the log's limit (`RUNNER_LOG_LIMIT`), not in its log,
        /// which ends with the output's last lines instead.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        unlogged_bytes: Option<u64>,
    },
    /// A confined process of the item tried to write where its sandbox does not let it: what
    /// it tried, in the first distinct accesses (`more` past those). `process` is `worker`,
    /// `setup` or the gate's name. A finding for the reviewer: the item ran on regardless.
    Denied {
        item: ItemIndex,
        n: u32,
        process: String,
        accesses: Vec<crate::vocab::DeniedAccess>,
        #[serde(default, skip_serializing_if = "is_zero")]
        more: u64,
    },
    /// Before the item started, processes a dead run had left in its repository were ended.
    Reaped {
        item: ItemIndex,
        run: String,
        pids: Vec<i32>,
    },
    /// The item runs in a worktree of runner's, kept until it completes.
    Worktree {
        item: ItemIndex,
        path: PathBuf,
        /// The item started anew from the base (`--fresh`): its old branch is kept as this.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        backup: Option<String>,
        /// What of `worktree.share` the worktree got from the checkout.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        shared: Vec<String>,
        /// What of it it did not get, and why.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        unshared: Vec<String>,
    },
    /// The worktree's `worktree.setup` ran, before the item's first attempt: `ok`, or its
    /// failure holds the item.
    SetupFinished {
        item: ItemIndex,
        exit: Option<i32>,
        ok: bool,
        duration: Duration,
        log: Option<PathBuf>,
        output_tail: String,
    },
    /// What an earlier run left uncommitted in the item's worktree — or, cut short, in the
    /// repository's own checkout — saved as a patch before this run started from the committed
    /// state.
    Leftovers {
        item: ItemIndex,
        patch: PathBuf,
    },
    /// What a completed item's work left in git, just before it finishes.
    Work {
        item: ItemIndex,
        /// The commit the item produced (by runner or by the worker); `None` when its branch did
        /// not move.
        commit: Option<String>,
        files: u64,
        insertions: u64,
        deletions: u64,
        /// The worker changed nothing.
        no_change: bool,
        /// No required gate ran and passed.
        unverified: bool,
        /// Files left uncommitted (`worker.commit: false`).
        uncommitted: Vec<String>,
    },
    ItemFinished {
        item: ItemIndex,
        outcome: ItemOutcome,
        reason: Option<String>,
        cause: Option<String>,
    },
    RunEnded {
        ending: RunEnding,
        cause: Option<String>,
    },
}

impl Event {
    /// A command whose log is not all of its output: its item, attempt, what it was, and why.
    pub fn log_error(&self) -> Option<(ItemIndex, u32, String, &str)> {
        match self {
            Event::WorkerFinished {
                item,
                n,
                log_error: Some(e),
                ..
            } => Some((*item, *n, "worker".into(), e)),
            Event::GateFinished {
                item,
                n,
                gate,
                log_error: Some(e),
                ..
            } => Some((*item, *n, format!("gate `{gate}`"), e)),
            Event::GateBaseline {
                item,
                n,
                gate,
                log_error: Some(e),
                ..
            } => Some((*item, *n, format!("gate `{gate}` on the base commit"), e)),
            _ => None,
        }
    }
}

impl Event {
    /// What a watch over a quarantine did, in words (`None` for every other event).
    pub fn watched(&self) -> Option<String> {
        let Event::Watched {
            repo,
            run,
            ended,
            left,
        } = self
        else {
            return None;
        };
        let pids = |p: &[i32]| {
            p.iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut text = format!("repository `{repo}` is quarantined (run `{run}`)");
        if !ended.is_empty() {
            text.push_str(&format!(
                ": ended {} process(es) its item had left (pids {})",
                ended.len(),
                pids(ended)
            ));
        }
        if !left.is_empty() {
            text.push_str(&format!(
                "{} {} of its item's processes could not be ended (pids {})",
                if ended.is_empty() { ":" } else { ";" },
                left.len(),
                pids(left)
            ));
        }
        Some(text)
    }

    /// A command that printed more than its log keeps: its item, attempt, what it was, and the
    /// bytes not logged.
    pub fn unlogged(&self) -> Option<(ItemIndex, u32, String, u64)> {
        match self {
            Event::WorkerFinished {
                item,
                n,
                unlogged_bytes: Some(b),
                ..
            } => Some((*item, *n, "worker".into(), *b)),
            Event::GateFinished {
                item,
                n,
                gate,
                unlogged_bytes: Some(b),
                ..
            } => Some((*item, *n, format!("gate `{gate}`"), *b)),
            Event::GateBaseline {
                item,
                n,
                gate,
                unlogged_bytes: Some(b),
                ..
            } => Some((*item, *n, format!("gate `{gate}` on the base commit"), *b)),
            _ => None,
        }
    }
}

/// The tag of `apply --events`' format.
pub(crate) const EVENTS_SCHEMA: &str = "runner.events/v1";

/// One line of `apply --events`: an event with its run, its place in the run and its time.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct EventLine {
    /// Always `runner.events/v1`.
    pub schema: String,
    pub run_id: String,
    /// 1, 2, … in the order the run recorded them.
    pub seq: u64,
    /// RFC 3339.
    pub at: String,
    /// The item's repository and id, for an item's event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub item_id: Option<String>,
    #[serde(flatten)]
    pub event: Event,
}

/// The JSON Schema of an `apply --events` line, as checked in at `schemas/events.schema.json`.
pub(crate) fn events_schema_json() -> Result<String, serde_json::Error> {
    let schema = schemars::schema_for!(EventLine);
    Ok(serde_json::to_string_pretty(&schema)? + "\n")
}

/// The review feedback a round was given, kept so that the next drain starts a round only on
/// feedback that is new.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AnsweredFeedback {
    #[serde(default)]
    pub comments: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
}

/// The tracker's item a publication is for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PublishedSource {
    /// The source's name.
    pub name: String,
    /// The tracker's id of the item.
    pub id: String,
    pub title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}
