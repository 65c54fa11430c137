//! Reports: the run's record, built from the event stream and written whole or not at all.
//!
//! `report.json` follows `schemas/report.schema.json` (generated from these types);
//! `summary.md` is for people, PR comments and `$GITHUB_STEP_SUMMARY`. Every file is written to
//! a temporary file and renamed into `<reports.dir>/<run-id>/`, and `latest` is pointed at it
//! last. A report that fails to write never changes the run's verdict or exit code.

pub mod history;
pub mod html;
pub mod junit;
pub mod markdown;

use crate::events::Event;
use crate::plan::{HoldReason, ItemState, Plan};
use crate::vocab::{GateResult, ItemOutcome, RunEnding, WorkerClass};
use schemars::JsonSchema;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const REPORT_SCHEMA: &str = "runner.report/v1";

/// A timestamp as runner writes them (RFC 3339), or `None` for anything else.
pub(crate) fn timestamp(s: &str) -> Option<jiff::Timestamp> {
    s.parse().ok()
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Report {
    /// Always `runner.report/v1`.
    pub schema: String,
    pub run_id: String,
    pub manifest: ManifestInfo,
    pub runner_version: String,
    /// RFC 3339.
    pub started_at: String,
    pub ended_at: Option<String>,
    pub ending: Option<RunEnding>,
    /// Why the run ended as it did (stall cause, signal), when it is not plain.
    pub cause: Option<String>,
    pub capacity: CapacityInfo,
    /// How each item's processes were kept together: a cgroup each, or process groups.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub containment: Option<crate::events::ContainmentInfo>,
    /// What the run's workers reported they used: in all, and per model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageInfo>,
    /// Models the run demoted for provider failures across items.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub demoted: Vec<Demotion>,
    /// Models whose provider refused the key (authentication, billing), never used again in
    /// the run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<Refusal>,
    /// The probe before the queue (`worker.probe`): each model asked, and what it found.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub probes: Vec<ProbeReport>,
    /// Items per outcome; every outcome is present.
    pub counts: BTreeMap<ItemOutcome, usize>,
    pub items: Vec<ItemReport>,
    /// What planning warned of: a rule that matches nothing, a folder that could not be read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Declared repositories that were not there (and not `optional`): the run exits 1.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing_repositories: Vec<crate::plan::MissingRepository>,
    /// Required gates that never passed in the run while halting items: suspected to be
    /// misconfigured (a misspelt command, a wrong folder).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suspect_gates: Vec<SuspectGate>,
}

#[derive(Clone, Debug, Default, Serialize, JsonSchema)]
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

#[derive(Clone, Debug, Serialize, JsonSchema)]
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

#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Demotion {
    pub model: String,
    /// RFC 3339.
    pub at: String,
    /// Provider failures of the model within the window.
    pub failures: usize,
    /// The items whose failures they were (`repo/id`).
    #[serde(default)]
    pub items: Vec<String>,
    /// The model items started on after it; none when it was the last usable one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// One model's probe before the queue.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ProbeReport {
    pub model: String,
    pub verdict: crate::vocab::ProbeVerdict,
    /// The provider's or the worker's words, when it did not answer (redacted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    pub duration_ms: u64,
}

/// A model whose provider refused the key.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Refusal {
    /// None for a worker run without a model.
    pub model: Option<String>,
    /// RFC 3339.
    pub at: String,
    /// The item whose worker met it (`repo/id`); absent when the probe before the queue did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub item: Option<String>,
    /// What the provider said, as the worker printed it (redacted).
    pub message: String,
}

#[derive(Clone, Debug, Default, Serialize, JsonSchema)]
pub struct UsageInfo {
    pub total: crate::events::Usage,
    /// Keyed by model (`-` for a worker run without one).
    pub by_model: BTreeMap<String, crate::events::Usage>,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct ManifestInfo {
    pub name: String,
    pub path: String,
    pub sha256: String,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct CapacityInfo {
    pub workers: u32,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
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
    pub diffstat: Option<Diffstat>,
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
    pub setup: Option<SetupReport>,
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
    pub publish: Option<PublishReport>,
    /// Where its time went besides work: waiting for its repository's lease, for shared
    /// resources, and resting after provider failures, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waited: Option<Waited>,
    /// What its workers reported they used, over every attempt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::events::Usage>,
}

/// A worktree's setup (`worktree.setup`), run once before the item's first attempt.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct SetupReport {
    pub ok: bool,
    pub exit: Option<i32>,
    pub duration_ms: u64,
    /// Relative to the run's report folder.
    pub log: Option<String>,
    /// The end of its output when it failed.
    pub output_tail: String,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct Diffstat {
    pub files: u64,
    pub insertions: u64,
    pub deletions: u64,
}

#[derive(Clone, Debug, Serialize, JsonSchema)]
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

#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct WorkerReport {
    pub exit: Option<i32>,
    pub class: WorkerClass,
    pub duration_ms: u64,
    /// Relative to the run's report folder (an empty file when the worker printed nothing).
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

#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct GateReport {
    pub name: String,
    pub result: GateResult,
    pub reason: Option<String>,
    pub duration_ms: u64,
    pub output_tail: String,
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

/// What a log lacks, when it lacks anything: why it could not be written whole, or how much
/// output went past its limit.
pub fn log_gap(error: Option<&str>, unlogged: Option<u64>) -> Option<String> {
    match (error, unlogged) {
        (Some(e), _) => Some(e.to_string()),
        (None, Some(b)) => Some(format!(
            "{b} bytes of output past its limit were not logged (RUNNER_LOG_LIMIT); its last lines end it"
        )),
        (None, None) => None,
    }
}

fn is_true(b: &bool) -> bool {
    *b
}

/// `1 item`, `3 items`.
fn plural_items(n: usize) -> String {
    format!("{n} item{}", if n == 1 { "" } else { "s" })
}

/// A gate is required unless it says otherwise.
fn yes() -> bool {
    true
}

/// A gate's run on the base commit.
#[derive(Clone, Debug, Serialize, JsonSchema)]
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

/// A required gate that passed nowhere in the run while its failures halted items: more likely
/// its command or setting is wrong than every item's work.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct SuspectGate {
    pub gate: String,
    /// Its command line (redacted), as last run.
    pub command: Option<String>,
    /// The folder it last ran in.
    pub dir: Option<String>,
    /// Its last exit code (127: the command was not found).
    pub exit: Option<i32>,
    /// The items its failures halted, as `repo/id`.
    pub halted: Vec<String>,
}

/// What the builder knows of one gate across the run.
#[derive(Clone, Debug, Default)]
struct GateTally {
    /// The program it runs (`cargo`, `npm`, `python3 -m pytest`'s `python3`).
    program: String,
    /// Passes anywhere: on an item, or on a base commit (which proves the command can pass).
    passed: usize,
    command: Option<String>,
    dir: Option<String>,
    exit: Option<i32>,
    halted: Vec<String>,
}

impl GateTally {
    /// Never passed, and either halted more than one item or could not even be started (exit
    /// 126 or 127): one item halted by a real failure is the gate doing its work.
    fn suspect(&self) -> bool {
        self.passed == 0
            && (self.halted.len() > 1
                || (!self.halted.is_empty() && matches!(self.exit, Some(126 | 127))))
    }
}

/// Consumes events into a [`Report`].
pub struct ReportBuilder {
    report: Report,
    run_dir: PathBuf,
    /// Per gate name, in order of first sight.
    gates: Vec<(String, GateTally)>,
    /// What `gate-started` said, until the gate's `gate-finished`: (item, attempt, gate) →
    /// required.
    started: std::collections::HashMap<(usize, u32, String), bool>,
    /// A baseline run, until its gate's `gate-finished`.
    baselines: std::collections::HashMap<(usize, u32, String), BaselineReport>,
    /// The program each item's gate last ran, by (item, gate).
    programs: std::collections::HashMap<(usize, String), String>,
    /// The rest each resting item asked for, until its next attempt starts.
    rests: std::collections::HashMap<usize, std::time::Duration>,
}

impl ReportBuilder {
    /// Start from the plan: items that will not run are recorded with their plan state, pending
    /// ones as `cancelled` until the engine says otherwise (a run that dies early then reports
    /// the truth: they did not run).
    pub fn new(plan: &Plan, run_id: &str, run_dir: &Path, workers: u32, started_at: &str) -> Self {
        let items = plan
            .items
            .iter()
            .map(|it| {
                let (outcome, reason) = match (it.state, it.reason) {
                    (ItemState::Pending, _) => (ItemOutcome::Cancelled, None),
                    (ItemState::Done, _) => (ItemOutcome::Skipped, Some("done".to_string())),
                    (ItemState::Skipped, r) => {
                        (ItemOutcome::Skipped, r.map(|r| r.as_str().to_string()))
                    }
                    (ItemState::Held, r) => (
                        ItemOutcome::Held,
                        Some(r.unwrap_or(HoldReason::RepoBusy).as_str().to_string()),
                    ),
                };
                ItemReport {
                    repo: it.repo.clone(),
                    id: it.id.clone(),
                    outcome,
                    reason,
                    cause: it.detail.clone(),
                    model: None,
                    branch: it.branch.clone(),
                    started_at: None,
                    ended_at: None,
                    attempts: Vec::new(),
                    commit: None,
                    diffstat: None,
                    marks: Vec::new(),
                    uncommitted: Vec::new(),
                    worktree: None,
                    shared: Vec::new(),
                    setup: None,
                    backup_branch: None,
                    leftovers: None,
                    publish: None,
                    waited: None,
                    usage: None,
                }
            })
            .collect();
        let mut b = ReportBuilder {
            report: Report {
                demoted: Vec::new(),
                refused: Vec::new(),
                probes: Vec::new(),
                containment: None,
                usage: None,
                schema: REPORT_SCHEMA.into(),
                run_id: run_id.into(),
                manifest: ManifestInfo {
                    name: plan.manifest.name.clone(),
                    path: plan.manifest.path.display().to_string(),
                    sha256: plan.manifest.sha256.clone(),
                },
                runner_version: env!("CARGO_PKG_VERSION").into(),
                started_at: started_at.to_string(),
                ended_at: None,
                ending: None,
                cause: None,
                capacity: CapacityInfo { workers },
                counts: BTreeMap::new(),
                items,
                warnings: plan.warnings.clone(),
                missing_repositories: plan.missing_repositories.clone(),
                suspect_gates: Vec::new(),
            },
            run_dir: run_dir.to_path_buf(),
            gates: Vec::new(),
            started: std::collections::HashMap::new(),
            baselines: std::collections::HashMap::new(),
            programs: std::collections::HashMap::new(),
            rests: std::collections::HashMap::new(),
        };
        b.recount();
        b
    }

    fn rel(&self, p: &Path) -> String {
        p.strip_prefix(&self.run_dir)
            .unwrap_or(p)
            .display()
            .to_string()
    }

    fn recount(&mut self) {
        let mut counts: BTreeMap<ItemOutcome, usize> =
            ItemOutcome::ALL.iter().map(|o| (*o, 0)).collect();
        for it in &self.report.items {
            *counts.entry(it.outcome).or_insert(0) += 1;
        }
        self.report.counts = counts;
    }

    /// Apply one event that happened at `at` (RFC 3339). Timestamps come from the caller so that
    /// replaying the ledger's events reproduces the report exactly.
    pub fn on(&mut self, ev: &Event, at: &str) {
        match ev {
            Event::RunStarted { containment, .. } => {
                self.report.containment = containment.clone();
            }
            Event::Probed {
                model,
                verdict,
                message,
                duration,
            } => {
                self.report.probes.push(ProbeReport {
                    model: model.clone(),
                    verdict: *verdict,
                    message: message.clone(),
                    duration_ms: duration.as_millis() as u64,
                });
                let said = message.as_deref().unwrap_or("no message");
                match verdict {
                    crate::vocab::ProbeVerdict::Refused => {
                        self.report.refused.push(Refusal {
                            model: Some(model.clone()),
                            at: at.to_string(),
                            item: None,
                            message: said.to_string(),
                        });
                        self.report.warnings.push(format!(
                            "the provider refused model `{model}` when probed before the queue ({said}): no item used it in the run"
                        ));
                    }
                    crate::vocab::ProbeVerdict::Unavailable
                    | crate::vocab::ProbeVerdict::Failed => {
                        self.report.warnings.push(format!(
                            "the probe of model `{model}` before the queue did not answer ({}: {said}); the run went on",
                            verdict.as_str()
                        ));
                    }
                    crate::vocab::ProbeVerdict::Ok => {}
                }
            }
            Event::Reaped { item, run, pids } => {
                let repo = self
                    .report
                    .items
                    .get(*item)
                    .map_or(String::new(), |i| i.repo.clone());
                self.report.warnings.push(format!(
                    "ended {} process{} that dead run `{run}` had left in repository `{repo}` (pids {})",
                    pids.len(),
                    if pids.len() == 1 { "" } else { "es" },
                    pids.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(", ")
                ));
            }
            Event::Worktree {
                item,
                path,
                backup,
                shared,
                unshared,
            } => {
                if let Some(it) = self.report.items.get_mut(*item) {
                    it.worktree = Some(path.display().to_string());
                    it.shared = shared.clone();
                    for u in unshared {
                        self.report.warnings.push(format!(
                            "{}/{}: `worktree.share` not given to its worktree: {u}",
                            it.repo, it.id
                        ));
                    }
                    if let Some(b) = backup {
                        it.backup_branch = Some(b.clone());
                        let branch = it.branch.clone().unwrap_or_default();
                        self.report.warnings.push(format!(
                            "{}/{} started anew from its base (`--fresh`): what `{branch}` held is kept as `{b}`",
                            it.repo, it.id
                        ));
                    }
                }
            }
            Event::Leftovers { item, patch } => {
                let rel = self.rel(patch);
                if let Some(it) = self.report.items.get_mut(*item) {
                    it.leftovers = Some(rel);
                }
            }
            Event::Work {
                item,
                commit,
                files,
                insertions,
                deletions,
                no_change,
                unverified,
                uncommitted,
            } => {
                if let Some(it) = self.report.items.get_mut(*item) {
                    it.commit = commit.clone();
                    it.diffstat = Some(Diffstat {
                        files: *files,
                        insertions: *insertions,
                        deletions: *deletions,
                    });
                    it.marks = [(*no_change, "no-change"), (*unverified, "unverified")]
                        .iter()
                        .filter(|(on, _)| *on)
                        .map(|(_, m)| m.to_string())
                        .collect();
                    it.uncommitted = uncommitted.clone();
                    // A completed item's worktree is removed unless work was left in it.
                    if uncommitted.is_empty() {
                        it.worktree = None;
                    }
                }
            }
            Event::ItemStarted { item } => {
                if let Some(it) = self.report.items.get_mut(*item) {
                    it.started_at = Some(at.to_string());
                }
            }
            Event::Resting { item, wait, .. } => {
                self.rests.insert(*item, *wait);
            }
            Event::ResourceWaiting { .. } => {}
            Event::ResourceAcquired { item, waited, .. } => {
                if let Some(it) = self.report.items.get_mut(*item) {
                    it.waited.get_or_insert_with(Default::default).resources_ms +=
                        waited.as_millis() as u64;
                }
            }
            Event::LeaseWaited { item, waited } => {
                if let Some(it) = self.report.items.get_mut(*item) {
                    it.waited.get_or_insert_with(Default::default).lease_ms =
                        waited.as_millis() as u64;
                }
            }
            Event::Published {
                item,
                remote,
                branch,
                pushed,
                head,
                url,
                error,
            } => {
                if let Some(it) = self.report.items.get_mut(*item) {
                    it.publish = Some(PublishReport {
                        remote: remote.clone(),
                        branch: branch.clone(),
                        pushed: *pushed,
                        head: head.clone(),
                        url: url.clone(),
                        error: error.clone(),
                    });
                }
            }
            Event::ModelDemoted {
                model,
                failures,
                items,
                next,
                ..
            } => {
                self.report.demoted.push(Demotion {
                    model: model.clone(),
                    at: at.to_string(),
                    failures: *failures,
                    items: items.clone(),
                    next: next.clone(),
                });
                let then = match next {
                    Some(n) => format!("items started after {at} began on `{n}`"),
                    None => "it is the last model of the chain, so items went on with it".into(),
                };
                self.report.warnings.push(format!(
                    "model `{model}` failed for the provider's reasons {failures} times, for {} ({}): {then}",
                    plural_items(items.len()),
                    items.join(", ")
                ));
            }
            Event::ModelRefused {
                item,
                model,
                message,
            } => {
                let name = self
                    .report
                    .items
                    .get(*item)
                    .map(|i| format!("{}/{}", i.repo, i.id))
                    .unwrap_or_default();
                self.report.refused.push(Refusal {
                    model: model.clone(),
                    at: at.to_string(),
                    item: Some(name),
                    message: message.clone(),
                });
                self.report.warnings.push(format!(
                    "the provider refused {} ({message}): no item used it again in the run",
                    model.as_deref().map_or_else(
                        || "the worker's key".to_string(),
                        |m| format!("model `{m}`")
                    )
                ));
            }
            Event::SetupFinished {
                item,
                exit,
                ok,
                duration,
                log,
                output_tail,
            } => {
                let log = log.as_ref().map(|l| self.rel(l));
                if let Some(it) = self.report.items.get_mut(*item) {
                    it.setup = Some(SetupReport {
                        ok: *ok,
                        exit: *exit,
                        duration_ms: duration.as_millis() as u64,
                        log,
                        output_tail: output_tail.clone(),
                    });
                }
            }
            Event::UsageUnknown { item, n, why } => {
                if let Some(it) = self.report.items.get(*item) {
                    self.report.warnings.push(format!(
                        "{}/{} attempt {n}: what its worker used is unknown: {why}",
                        it.repo, it.id
                    ));
                }
            }
            Event::Usage {
                item,
                n,
                model,
                usage,
                used_model,
            } => {
                if let Some(it) = self.report.items.get_mut(*item) {
                    it.usage.get_or_insert_with(Default::default).add(usage);
                    if let Some(used) = used_model
                        && Some(used) != model.as_ref()
                    {
                        if let Some(a) = it.attempts.iter_mut().rev().find(|a| a.n == *n) {
                            a.model_used = Some(used.clone());
                        }
                        let asked = model.as_deref().unwrap_or("none");
                        self.report.warnings.push(format!(
                            "{}/{} attempt {n}: asked for model `{asked}`, the worker used `{used}`",
                            it.repo, it.id
                        ));
                    }
                }
                let run = self.report.usage.get_or_insert_with(Default::default);
                run.total.add(usage);
                run.by_model
                    .entry(model.clone().unwrap_or_else(|| "-".into()))
                    .or_default()
                    .add(usage);
            }
            Event::AttemptStarted {
                item,
                n,
                model,
                waited,
            } => {
                // The wait before the attempt: the rest it asked for, then a free slot.
                let split = waited.map(|w| {
                    let rest = self.rests.remove(item).map_or(w, |r| r.min(w));
                    (rest.as_millis() as u64, (w - rest).as_millis() as u64)
                });
                if let Some(it) = self.report.items.get_mut(*item) {
                    if let Some((rest, slot)) = split {
                        let w = it.waited.get_or_insert_with(Default::default);
                        w.backoff_ms += rest;
                        w.slot_ms += slot;
                    }
                    it.model = model.clone();
                    // Most items make one attempt: room for one, not the four a first push
                    // would reserve (10,000 items: about 6 MB).
                    it.attempts.reserve_exact(1);
                    it.attempts.push(AttemptReport {
                        n: *n,
                        model: model.clone(),
                        waited_ms: split.map(|(rest, _)| rest),
                        slot_wait_ms: split.map(|(_, slot)| slot).filter(|s| *s > 0),
                        model_used: None,
                        started_at: at.to_string(),
                        worker: None,
                        gates: Vec::new(),
                    });
                }
            }
            Event::WorkerFinished {
                item,
                n,
                exit,
                class,
                duration,
                log,
                output_tail,
                log_error,
                unlogged_bytes,
                ended,
            } => {
                let log = log.as_ref().map(|l| self.rel(l));
                if let Some(a) = self.attempt(*item, *n) {
                    a.worker = Some(WorkerReport {
                        ended: ended.clone(),
                        exit: *exit,
                        class: *class,
                        duration_ms: duration.as_millis() as u64,
                        log,
                        log_error: log_error.clone(),
                        unlogged_bytes: *unlogged_bytes,
                        output_tail: output_tail.clone(),
                    });
                }
            }
            Event::GateStarted {
                item,
                n,
                gate,
                command,
                dir,
                required,
                ..
            } => {
                self.started.insert((*item, *n, gate.clone()), *required);
                if let Some(c) = command {
                    self.programs
                        .insert((*item, gate.clone()), program_of(c).to_string());
                }
                let t = self.tally(*item, gate);
                if command.is_some() {
                    t.command = command.clone();
                }
                t.dir = dir.as_ref().map(|d| d.display().to_string());
            }
            Event::GateBaseline {
                item,
                n,
                gate,
                commit,
                result,
                failures,
                cached,
                duration,
                log,
                log_error,
                unlogged_bytes,
            } => {
                let log = log.as_ref().map(|l| self.rel(l));
                if *result == GateResult::Passed {
                    self.tally(*item, gate).passed += 1;
                    self.name_suspects();
                }
                self.baselines.insert(
                    (*item, *n, gate.clone()),
                    BaselineReport {
                        commit: commit.clone(),
                        result: *result,
                        failures: failures.clone(),
                        cached: cached.is_some(),
                        duration_ms: duration.as_millis() as u64,
                        log,
                        log_error: log_error.clone(),
                        unlogged_bytes: *unlogged_bytes,
                    },
                );
            }
            Event::GateFinished {
                item,
                n,
                gate,
                result,
                reason,
                duration,
                output_tail,
                log,
                exit,
                cached,
                failures,
                log_error,
                unlogged_bytes,
            } => {
                let log = log.as_ref().map(|l| self.rel(l));
                let key = (*item, *n, gate.clone());
                let required = self.started.remove(&key).unwrap_or(true);
                let baseline = self.baselines.remove(&key);
                let t = self.tally(*item, gate);
                if exit.is_some() {
                    t.exit = *exit;
                }
                if *result == GateResult::Passed {
                    t.passed += 1;
                    if t.passed == 1 && !t.halted.is_empty() {
                        self.name_suspects();
                    }
                }
                if let Some(a) = self.attempt(*item, *n) {
                    a.gates.reserve_exact(1);
                    a.gates.push(GateReport {
                        name: gate.clone(),
                        result: *result,
                        reason: reason.clone(),
                        duration_ms: duration.as_millis() as u64,
                        output_tail: output_tail.clone(),
                        log,
                        log_error: log_error.clone(),
                        unlogged_bytes: *unlogged_bytes,
                        exit: *exit,
                        required,
                        cached: cached.clone(),
                        forgiven: *result == GateResult::Passed
                            && failures.as_ref().is_some_and(|f| !f.forgiven.is_empty()),
                        failures: failures.clone(),
                        baseline,
                    });
                }
            }
            Event::ItemFinished {
                item,
                outcome,
                reason,
                cause,
            } => {
                if let Some(it) = self.report.items.get_mut(*item) {
                    let before = it.outcome;
                    it.outcome = *outcome;
                    it.reason = reason.clone();
                    it.cause = cause.clone();
                    it.ended_at = Some(at.to_string());
                    if let Some(c) = self.report.counts.get_mut(&before) {
                        *c = c.saturating_sub(1);
                    }
                    *self.report.counts.entry(*outcome).or_insert(0) += 1;
                }
                if matches!(outcome, ItemOutcome::Halted | ItemOutcome::Failed) {
                    self.halted_by_gate(*item);
                }
            }
            Event::RunEnded { ending, cause } => {
                self.report.ending = Some(*ending);
                self.report.cause = cause.clone();
                self.report.ended_at = Some(at.to_string());
            }
        }
    }

    /// The tally of gate `gate` as item `item` last started it: a gate is judged by the program
    /// it runs, so one name over repositories with different commands (npm, pytest, cargo) is
    /// one gate each, and one command over many repositories is one gate.
    fn tally(&mut self, item: usize, gate: &str) -> &mut GateTally {
        let program = self
            .programs
            .get(&(item, gate.to_string()))
            .cloned()
            .unwrap_or_default();
        let i = match self
            .gates
            .iter()
            .position(|(g, t)| g == gate && t.program == program)
        {
            Some(i) => i,
            None => {
                self.gates.push((
                    gate.to_string(),
                    GateTally {
                        program,
                        ..GateTally::default()
                    },
                ));
                self.gates.len() - 1
            }
        };
        &mut self.gates[i].1
    }

    /// An item halted or failed: when a required gate's failure decided its last attempt, that
    /// gate is charged with it; then the suspects are named anew.
    fn halted_by_gate(&mut self, item: usize) {
        let Some(it) = self.report.items.get(item) else {
            return;
        };
        let decided = it.attempts.last().and_then(|a| {
            a.gates
                .iter()
                .find(|g| {
                    g.required && matches!(g.result, GateResult::Failed | GateResult::TimedOut)
                })
                .map(|g| g.name.clone())
        });
        let Some(gate) = decided else {
            return;
        };
        let name = format!("{}/{}", it.repo, it.id);
        self.tally(item, &gate).halted.push(name);
        self.name_suspects();
    }

    fn name_suspects(&mut self) {
        self.report.suspect_gates = self
            .gates
            .iter()
            .filter(|(_, t)| t.suspect())
            .map(|(g, t)| SuspectGate {
                gate: g.clone(),
                command: t.command.clone(),
                dir: t.dir.clone(),
                exit: t.exit,
                halted: t.halted.clone(),
            })
            .collect();
    }

    fn attempt(&mut self, item: usize, n: u32) -> Option<&mut AttemptReport> {
        self.report
            .items
            .get_mut(item)?
            .attempts
            .iter_mut()
            .rev()
            .find(|a| a.n == n)
    }

    pub fn report(&self) -> &Report {
        &self.report
    }

    /// The run recorded no ending: its items that never finished are not `cancelled` — nothing
    /// cancelled them — but were running, or not yet started, when the run died (`died`) or are
    /// so now (a live run).
    /// `claimed` lists the items (repository, id) the run held claims on: those it had started.
    pub fn unended(&mut self, died: bool, claimed: &[(String, String)]) {
        if self.report.ending.is_some() {
            return;
        }
        for it in &mut self.report.items {
            if it.outcome != ItemOutcome::Cancelled || it.ended_at.is_some() {
                continue;
            }
            let started = it.started_at.is_some()
                || claimed.iter().any(|(r, i)| *r == it.repo && *i == it.id);
            it.reason = Some(if died { "run-died" } else { "in-progress" }.to_string());
            it.cause = Some(
                match (died, started) {
                    (true, true) => "in flight when the run died: its result was never recorded",
                    (true, false) => "not started: the run died first",
                    (false, true) => "running",
                    (false, false) => "not started yet",
                }
                .to_string(),
            );
        }
    }

    /// Let go of the items (the bulk of a report) once nothing needs them any more.
    pub fn release(&mut self) {
        self.report.items = Vec::new();
        self.gates = Vec::new();
        self.started = Default::default();
        self.baselines = Default::default();
        self.programs = Default::default();
    }
}

/// The run's ending with its counts, as every place that names an ending gives it: `drained: 3
/// completed, 1 halted`.
pub fn ending_with_counts(r: &Report) -> String {
    let ending = match r.ending {
        Some(e) => e.as_str(),
        None if died(r) => "died",
        None => "unfinished",
    };
    format!("{ending}: {}", counts_line(r))
}

/// The run recorded no ending and died (see [`ReportBuilder::unended`]).
pub fn died(r: &Report) -> bool {
    r.ending.is_none()
        && r.items
            .iter()
            .any(|i| i.reason.as_deref() == Some("run-died"))
}

/// `3 completed`, `1 halted`, …: every outcome that occurred, in the vocabulary's order.
/// The program a command line runs: its first word, or under `sh -c`/`bash -c` the script's
/// first word (`cargo` of `sh -c 'cargo test -q'`), leading `VAR=value` words passed over.
fn program_of(command: &str) -> &str {
    let words: Vec<&str> = command
        .split_whitespace()
        .map(|w| w.trim_matches(|c| c == '\'' || c == '"'))
        .filter(|w| !w.is_empty())
        .collect();
    let mut rest: &[&str] = &words;
    if let [shell, "-c", tail @ ..] = rest
        && matches!(*shell, "sh" | "bash" | "/bin/sh" | "/bin/bash")
    {
        rest = tail;
    }
    rest.iter()
        .copied()
        .find(|w| !w.contains('=') || w.starts_with('='))
        .unwrap_or("")
}

/// One line saying why a gate is suspected of being misconfigured.
pub fn suspect_line(s: &SuspectGate) -> String {
    let mut line = format!("`{}`", s.gate);
    if let Some(c) = &s.command {
        line.push_str(&format!(" (`{c}`"));
        if let Some(d) = &s.dir {
            line.push_str(&format!(" in `{d}`"));
        }
        line.push(')');
    }
    line.push_str(" never passed");
    match s.exit {
        Some(127) => line.push_str(", exit 127: command not found"),
        Some(126) => line.push_str(", exit 126: not executable"),
        Some(c) => line.push_str(&format!(", last exit {c}")),
        None => {}
    }
    let n = s.halted.len();
    line.push_str(&format!(
        "; it halted {n} item{}: {}",
        if n == 1 { "" } else { "s" },
        s.halted.join(", ")
    ));
    line
}

/// What an attempt's gates add to an item's line: verdicts reused, failures forgiven.
pub fn gate_notes(a: &AttemptReport) -> Vec<String> {
    let mut notes = Vec::new();
    for g in &a.gates {
        if g.forgiven {
            let n = g.failures.as_ref().map_or(0, |f| f.forgiven.len());
            notes.push(format!(
                "gate `{}` forgiven {n} failure{} the base commit has too",
                g.name,
                if n == 1 { "" } else { "s" }
            ));
        }
        if let Some(c) = &g.cached {
            notes.push(format!("gate `{}` cached from run `{}`", g.name, c.run_id));
        }
    }
    notes
}

pub fn nonzero_counts(counts: &BTreeMap<ItemOutcome, usize>) -> Vec<String> {
    counts
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(o, n)| format!("{n} {}", o.as_str()))
        .collect()
}

/// The counts of a run in one line, every outcome that occurred, with the reasons of held and
/// skipped items: `8 completed, 1 halted, 2 held (stale-base 1, dirty-tree 1)`.
pub fn counts_line(report: &Report) -> String {
    let mut parts = Vec::new();
    for outcome in ItemOutcome::ALL {
        let items: Vec<&ItemReport> = report
            .items
            .iter()
            .filter(|i| i.outcome == outcome)
            .collect();
        if items.is_empty() {
            continue;
        }
        let mut part = format!("{} {}", items.len(), outcome.as_str());
        if outcome == ItemOutcome::Completed {
            let marks: Vec<String> = ["no-change", "unverified"]
                .iter()
                .filter_map(|m| {
                    let n = items
                        .iter()
                        .filter(|i| i.marks.iter().any(|x| x == m))
                        .count();
                    (n > 0).then(|| format!("{m} {n}"))
                })
                .collect();
            if !marks.is_empty() {
                part.push_str(&format!(" ({})", marks.join(", ")));
            }
        }
        if matches!(
            outcome,
            ItemOutcome::Held | ItemOutcome::Skipped | ItemOutcome::Cancelled
        ) && items.iter().any(|i| i.reason.is_some())
        {
            let mut reasons: Vec<(&str, usize)> = Vec::new();
            for i in &items {
                let r = i.reason.as_deref().unwrap_or("no reason");
                match reasons.iter_mut().find(|(name, _)| *name == r) {
                    Some((_, n)) => *n += 1,
                    None => reasons.push((r, 1)),
                }
            }
            let list: Vec<String> = reasons.iter().map(|(r, n)| format!("{r} {n}")).collect();
            part.push_str(&format!(" ({})", list.join(", ")));
        }
        parts.push(part);
    }
    if parts.is_empty() {
        "no items".to_string()
    } else {
        parts.join(", ")
    }
}

/// Why a report could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("cannot encode the report: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("cannot write `{path}`: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// `report.json`'s text.
pub fn to_json(report: &Report) -> Result<String, serde_json::Error> {
    Ok(serde_json::to_string_pretty(report)? + "\n")
}

/// Which files a run's report folder gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Formats {
    pub json: bool,
    pub markdown: bool,
    pub junit: bool,
    pub html: bool,
}

impl Default for Formats {
    fn default() -> Self {
        Formats {
            json: true,
            markdown: true,
            junit: true,
            html: true,
        }
    }
}

/// Whether any item of the run started: a run that only found its items done or held ran no
/// work.
pub fn ran_work(report: &Report) -> bool {
    report.items.iter().any(|i| i.started_at.is_some())
}

/// Write the report in `formats` into `run_dir` (`report.json`, `summary.md`, `junit.xml`,
/// `index.html`), then point `latest` at it — when the run ran work, or nothing is `latest` yet:
/// a cron run that found nothing to do is recorded, and `latest` stays the last run that did
/// something. Returns the first error; what was written stays whole.
pub fn write(report: &Report, run_dir: &Path, formats: Formats) -> Result<(), ReportError> {
    write_files(report, run_dir, formats)?;
    if let Some(parent) = run_dir.parent()
        && let Some(name) = run_dir.file_name()
        && (ran_work(report) || std::fs::symlink_metadata(parent.join("latest")).is_err())
    {
        let tmp = parent.join(format!(".latest-{}", std::process::id()));
        // A leftover of an earlier process with this pid; absent as a rule.
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(name, &tmp).map_err(io_at(&tmp))?;
        let latest = parent.join("latest");
        std::fs::rename(&tmp, &latest).map_err(io_at(&latest))?;
    }
    if let Ok(summary) = std::env::var("GITHUB_STEP_SUMMARY")
        && !summary.is_empty()
    {
        use std::io::Write;
        let path = PathBuf::from(summary);
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&path)
            .and_then(|mut f| f.write_all(markdown::render(report).as_bytes()))
            .map_err(io_at(&path))?;
    }
    Ok(())
}

fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> ReportError {
    let path = path.to_path_buf();
    move |source| ReportError::Io { path, source }
}

fn write_one(path: &Path, text: &str) -> Result<(), ReportError> {
    crate::support::fs::write_atomic(path, text.as_bytes()).map_err(io_at(path))
}

/// Only the files of `formats` into `dir` (created when missing): no `latest`, no step summary.
pub fn write_files(report: &Report, dir: &Path, formats: Formats) -> Result<(), ReportError> {
    std::fs::create_dir_all(dir).map_err(io_at(dir))?;
    if formats.json {
        // Streamed: a report of thousands of items is never held as text too.
        let path = dir.join("report.json");
        crate::support::fs::write_atomic_with(&path, |w| {
            serde_json::to_writer_pretty(&mut *w, report).map_err(std::io::Error::other)?;
            w.write_all(b"\n")
        })
        .map_err(io_at(&path))?;
    }
    if formats.markdown {
        write_one(&dir.join("summary.md"), &markdown::render(report))?;
    }
    if formats.junit {
        let path = dir.join("junit.xml");
        crate::support::fs::write_atomic_with(&path, |w| junit::render_to(report, w))
            .map_err(io_at(&path))?;
    }
    if formats.html {
        let path = dir.join("index.html");
        crate::support::fs::write_atomic_with(&path, |w| html::render_to(report, w))
            .map_err(io_at(&path))?;
    }
    Ok(())
}

/// The report's JSON Schema, as checked in at `schemas/report.schema.json`.
pub fn report_schema_json() -> Result<String, serde_json::Error> {
    let schema = schemars::schema_for!(Report);
    Ok(serde_json::to_string_pretty(&schema)? + "\n")
}

#[cfg(test)]
mod tests {
    use super::program_of;

    #[test]
    fn a_gate_is_known_by_the_program_it_runs() {
        assert_eq!(program_of("sh -c 'cargo test --offline -q'"), "cargo");
        assert_eq!(program_of("npm test"), "npm");
        assert_eq!(
            program_of("sh -c 'PYTHONPATH=src python3 -m pytest'"),
            "python3"
        );
        assert_eq!(program_of("test -f done/a.txt"), "test");
        assert_eq!(program_of(""), "");
    }
}
