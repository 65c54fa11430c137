//! The documents verbs print for machines and `runner schema` describes: here, not in the verb
//! that prints them, so that no verb reaches into another.

use crate::ledger::RunRow;
use serde::Serialize;
use std::path::PathBuf;

/// The tag of `status --json`'s format.
pub(crate) const STATUS_SCHEMA: &str = "runner.status/v1";

#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct Status {
    /// Always [`STATUS_SCHEMA`].
    pub(super) schema: &'static str,
    pub(super) ledger: String,
    pub(super) paused: Option<String>,
    /// The host's pause (`runner pause --host`): who, when and why; it stands over every
    /// manifest's drains on this host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) host_pause: Option<crate::lease::HostPause>,
    pub(super) runs: Vec<RunView>,
    pub(super) running: Vec<Running>,
    pub(super) held: Vec<Held>,
    pub(super) quarantined: Vec<Quarantined>,
    pub(super) leases: Vec<LeaseStatus>,
    /// With a manifest: its host-wide worker slots, held by every run of it on this host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) slots: Option<Slots>,
    /// With a manifest: the pull requests of its items as its latest run found them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) pull_requests: Vec<PullView>,
    /// With a manifest whose `budget` caps a day or a month: spend against each cap, over every
    /// run of the manifest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) spend: Vec<SpendView>,
    /// With a manifest that has `notify`: the notices of its incidents not delivered yet, with
    /// the deliveries no notifier took.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) notices_owed: Vec<OwedNotice>,
    /// Items of live runs waiting for their repository's lease, which another process holds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) waiting_for_lease: Vec<LeaseWaitView>,
}

#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct LeaseWaitView {
    pub(super) repo: String,
    pub(super) item: String,
    /// The run whose item waits.
    pub(super) run_id: String,
    /// Since when (RFC 3339).
    pub(super) since: String,
    /// Whose lease it is (a run, its pid and host), when its record could be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) holder: Option<String>,
}

#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct OwedNotice {
    /// The incident's cause (`quarantined:api`).
    pub(super) cause: String,
    /// `raised` or `resolved`.
    pub(super) notice: String,
    /// The incident's line for a person.
    pub(super) summary: String,
    /// Deliveries no notifier (nor fallback) took; 0: not tried yet.
    pub(super) failed_attempts: u32,
    /// When the first of them was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) failing_since: Option<String>,
}

#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct SpendView {
    /// `daily` or `monthly`.
    pub(super) window: String,
    pub(super) cap_usd: f64,
    /// What workers reported since the window began (UTC).
    pub(super) spent_usd: f64,
    /// When the next window begins.
    pub(super) resets_at: String,
}

#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct PullView {
    pub(super) repo: String,
    pub(super) item: String,
    /// The run whose start read it.
    pub(super) run_id: String,
    #[serde(flatten)]
    pub(super) pull_request: crate::plan::pull::PullRequest,
}

#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct Slots {
    /// Items running on this host now, over every run of the manifest.
    pub(super) in_use: usize,
    /// `capacity.workers`: the most that may.
    pub(super) bound: u32,
}

#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct Quarantined {
    pub(super) path: String,
    pub(super) run_id: String,
    pub(super) reason: String,
    /// What the latest run to keep watch over it found of its item's processes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) watch: Option<crate::lease::Watch>,
}

#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct RunView {
    #[serde(flatten)]
    pub(super) run: RunRow,
    pub(super) status: crate::ledger::RunStatus,
    /// Its items per outcome (so far, for a live run): a run's ending is never named without
    /// them.
    pub(super) counts: std::collections::BTreeMap<crate::vocab::ItemOutcome, usize>,
    /// What its workers reported they used so far.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) usage: Option<crate::events::Usage>,
}

#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct Running {
    pub(super) run_id: String,
    pub(super) repo: String,
    pub(super) item: String,
    pub(super) pid: u32,
    pub(super) host: String,
    /// After a provider failure, the item rests (its slot free) until then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) resting_until: Option<String>,
    /// The shared resource one of its commands waits for, and since when.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) waiting_for: Option<Waiting>,
}

#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct Waiting {
    pub(super) resource: String,
    pub(super) since: String,
}

#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct Held {
    pub(super) repo: String,
    pub(super) item: String,
    pub(super) reason: String,
    pub(super) cause: Option<String>,
}

#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct LeaseStatus {
    pub(super) repo: String,
    pub(super) path: PathBuf,
    pub(super) held: bool,
    /// The holder's record: the current holder while `held`, else the last one.
    pub(super) holder: Option<crate::lease::Record>,
    /// While a dead holder's lease is still held: the processes of its run that keep it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) survivors: Vec<Survivor>,
}

#[derive(Serialize, schemars::JsonSchema)]
pub(crate) struct Survivor {
    pub(super) pid: i32,
    pub(super) command: String,
}
