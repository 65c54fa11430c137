//! The closed vocabularies of SPEC §3: item outcomes, gate results, worker classes, run endings.

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
    pub const ALL: [ItemOutcome; 6] = [
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
}

impl WorkerClass {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerClass::Ok => "ok",
            WorkerClass::Provider => "provider",
            WorkerClass::Timeout => "timeout",
            WorkerClass::Failed => "failed",
            WorkerClass::Cancelled => "cancelled",
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
    /// The consecutive-halt guard fired.
    Stalled,
    Cancelled,
    Paused,
    /// runner itself could not continue.
    Failed,
}

impl RunEnding {
    pub fn as_str(self) -> &'static str {
        match self {
            RunEnding::Drained => "drained",
            RunEnding::NothingFound => "nothing-found",
            RunEnding::Stalled => "stalled",
            RunEnding::Cancelled => "cancelled",
            RunEnding::Paused => "paused",
            RunEnding::Failed => "failed",
        }
    }
}
