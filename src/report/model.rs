//! The report as data: `report.json`'s types (its schema is generated from them; an item's
//! record and its attempts are `item`'s, named here) and the phrases every format shares (an
//! ending with its counts, a suspect gate, a log gap).

use crate::vocab::{ItemOutcome, RunEnding};
use schemars::JsonSchema;
use serde::Serialize;
use std::collections::BTreeMap;

pub use super::item::{
    AttemptReport, BaselineReport, DeniedReport, Diffstat, GateReport, ItemReport, PublishReport,
    SetupReport, Waited, WorkerReport,
};

pub(crate) const REPORT_SCHEMA: &str = "runner.report/v1";

/// A timestamp as runner writes them (RFC 3339), or `None` for anything else.
pub(crate) fn timestamp(s: &str) -> Option<jiff::Timestamp> {
    s.parse().ok()
}

#[derive(Debug, Serialize, JsonSchema)]
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
    // In the plan's order; the run's ended items are kept in a spill file, not in memory.
    pub items: super::items::Items,
    /// What planning warned of: a rule that matches nothing, a folder that could not be read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Declared repositories that were not there (and not `optional`): the run exits 1.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing_repositories: Vec<crate::plan::MissingRepository>,
    /// Trackers (`sources`) that could not be read: the run exits 1.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreadable_sources: Vec<crate::plan::UnreadableSource>,
    /// Required gates that never passed in the run while halting items: suspected to be
    /// misconfigured (a misspelt command, a wrong folder).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suspect_gates: Vec<SuspectGate>,
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

/// What a log lacks, when it lacks anything: why it could not be written whole, or how much
/// output went past its limit.
pub(crate) fn log_gap(error: Option<&str>, unlogged: Option<u64>) -> Option<String> {
    match (error, unlogged) {
        (Some(e), _) => Some(e.to_string()),
        (None, Some(b)) => Some(format!(
            "{b} bytes of output past its limit were not logged (RUNNER_LOG_LIMIT); its last lines end it"
        )),
        (None, None) => None,
    }
}

/// `1 item`, `3 items`.
pub(super) fn plural_items(n: usize) -> String {
    format!("{n} item{}", if n == 1 { "" } else { "s" })
}

/// A required gate that passed nowhere in the run while its failures halted items: more likely
/// its command or setting is wrong than every item's work.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct SuspectGate {
    pub gate: String,
    /// The repository it ran in: a gate is suspected as one command in one repository.
    #[serde(default)]
    pub repo: String,
    /// Its runs in this run that failed or timed out (none passed, here or, for an item of
    /// this repository that completed, in an earlier run).
    #[serde(default)]
    pub failed: usize,
    /// Its command line (redacted), as last run.
    pub command: Option<String>,
    /// The folder it last ran in.
    pub dir: Option<String>,
    /// Its last exit code (127: the command was not found).
    pub exit: Option<i32>,
    /// The items its failures halted, as `repo/id`, in order.
    pub halted: Vec<String>,
}

/// The run's ending with its counts, as every place that names an ending gives it: `drained: 3
/// completed, 1 halted`.
pub(crate) fn ending_with_counts(r: &Report) -> String {
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
            .iter_where(|o| o == ItemOutcome::Cancelled)
            .any(|(_, i)| i.reason.as_deref() == Some("run-died"))
}

/// One line saying why a gate is suspected of being misconfigured.
pub(crate) fn suspect_line(s: &SuspectGate) -> String {
    let mut line = format!("`{}` of `{}`", s.gate, s.repo);
    if let Some(c) = &s.command {
        line.push_str(&format!(" (`{c}`"));
        if let Some(d) = &s.dir {
            line.push_str(&format!(" in `{d}`"));
        }
        line.push(')');
    }
    line.push_str(&format!(
        " never passed: it failed {} time{} in this run, passed on no item or base commit, and no item of `{}` completed in an earlier run",
        s.failed,
        if s.failed == 1 { "" } else { "s" },
        s.repo
    ));
    match s.exit {
        Some(127) => line.push_str("; exit 127: command not found"),
        Some(126) => line.push_str("; exit 126: not executable"),
        Some(c) => line.push_str(&format!("; last exit {c}")),
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
pub(crate) fn gate_notes(a: &AttemptReport) -> Vec<String> {
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

/// `3 completed`, `1 halted`, …: every outcome that occurred, in the vocabulary's order.
pub(crate) fn nonzero_counts(counts: &BTreeMap<ItemOutcome, usize>) -> Vec<String> {
    counts
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(o, n)| format!("{n} {}", o.as_str()))
        .collect()
}

/// The counts of a run in one line, every outcome that occurred, with the reasons of held and
/// skipped items: `8 completed, 1 halted, 2 held (stale-base 1, dirty-tree 1)`.
pub(crate) fn counts_line(report: &Report) -> String {
    /// One outcome's items: how many, with each mark and each reason.
    #[derive(Default)]
    struct Tally {
        n: usize,
        marks: [usize; 2],
        reasons: Vec<(String, usize)>,
        any_reason: bool,
    }
    const MARKS: [&str; 2] = ["no-change", "unverified"];
    // One pass: a run's records are read back once, not once per outcome.
    let mut by: BTreeMap<ItemOutcome, Tally> = BTreeMap::new();
    for it in report.items.iter() {
        let t = by.entry(it.outcome).or_default();
        t.n += 1;
        for (k, m) in MARKS.iter().enumerate() {
            t.marks[k] += usize::from(it.marks.iter().any(|x| x == m));
        }
        t.any_reason |= it.reason.is_some();
        let r = it.reason.as_deref().unwrap_or("no reason");
        match t.reasons.iter_mut().find(|(name, _)| name == r) {
            Some((_, n)) => *n += 1,
            None => t.reasons.push((r.to_string(), 1)),
        }
    }
    let mut parts = Vec::new();
    for outcome in ItemOutcome::ALL {
        let Some(t) = by.get(&outcome) else {
            continue;
        };
        let mut part = format!("{} {}", t.n, outcome.as_str());
        if outcome == ItemOutcome::Completed {
            let marks: Vec<String> = MARKS
                .iter()
                .zip(t.marks)
                .filter(|(_, n)| *n > 0)
                .map(|(m, n)| format!("{m} {n}"))
                .collect();
            if !marks.is_empty() {
                part.push_str(&format!(" ({})", marks.join(", ")));
            }
        }
        if matches!(
            outcome,
            ItemOutcome::Held | ItemOutcome::Skipped | ItemOutcome::Cancelled
        ) && t.any_reason
        {
            let list: Vec<String> = t.reasons.iter().map(|(r, n)| format!("{r} {n}")).collect();
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
