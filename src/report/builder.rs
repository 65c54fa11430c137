//! The report builder: it consumes the run's events, in order, into a [`Report`]; every format
//! renders that one value.
//!
//! [`ReportBuilder::on`] is longer than the house's 150 lines on purpose: it is one flat `match`
//! over the closed vocabulary of [`Event`], each arm what that event adds to the report, and
//! reads straight through.

use super::items::Items;
use super::model::{
    AttemptReport, BaselineReport, CapacityInfo, Demotion, DeniedReport, Diffstat, GateReport,
    ManifestInfo, ProbeReport, PublishReport, REPORT_SCHEMA, Refusal, Report, SetupReport,
    SuspectGate, WorkerReport, plural_items,
};
use crate::events::Event;
use crate::plan::Plan;
use crate::vocab::{GateResult, ItemOutcome};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What the builder knows of one gate across the run.
#[derive(Clone, Debug, Default)]
struct GateTally {
    /// The repository it runs in.
    repo: String,
    /// The command line it runs (redacted), as its item started it.
    line: String,
    /// Passes in this run: on an item, or on a base commit (which proves the command can pass).
    passed: usize,
    /// An item of its repository completed in an earlier run: its required gates passed there.
    passed_before: bool,
    /// Its runs that failed or timed out.
    failed: usize,
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
            && !self.passed_before
            && (self.halted.len() > 1
                || (!self.halted.is_empty() && matches!(self.exit, Some(126 | 127))))
    }
}

/// Consumes events into a [`Report`].
pub(crate) struct ReportBuilder {
    report: Report,
    run_dir: PathBuf,
    /// Per gate name, repository and command line, in order of first sight.
    gates: Vec<(String, GateTally)>,
    /// The repository of each item, by its index in the plan.
    repos: Vec<String>,
    /// Repositories with an item an earlier run completed.
    done_before: std::collections::HashSet<String>,
    /// What `gate-started` said, until the gate's `gate-finished`: (item, attempt, gate) →
    /// required.
    started: std::collections::HashMap<(usize, u32, String), bool>,
    /// A baseline run, until its gate's `gate-finished`.
    baselines: std::collections::HashMap<(usize, u32, String), BaselineReport>,
    /// The command line each item's gate last ran, by (item, gate).
    lines: std::collections::HashMap<(usize, String), String>,
    /// The rest each resting item asked for, until its next attempt starts.
    rests: std::collections::HashMap<usize, std::time::Duration>,
}

impl ReportBuilder {
    /// Start from the plan: items that will not run are recorded with their plan state, pending
    /// ones as `cancelled` until the engine says otherwise (a run that dies early then reports
    /// the truth: they did not run).
    pub fn new(
        plan: Arc<Plan>,
        run_id: &str,
        run_dir: &Path,
        workers: u32,
        started_at: &str,
    ) -> Self {
        let repos = plan.items.iter().map(|i| i.repo.clone()).collect();
        let done_before = plan
            .items
            .iter()
            .filter(|i| i.state == crate::vocab::ItemState::Done)
            .map(|i| i.repo.clone())
            .collect();
        let mut b = ReportBuilder {
            repos,
            done_before,
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
                warnings: plan.warnings.clone(),
                missing_repositories: plan.missing_repositories.clone(),
                unreadable_sources: plan.unreadable_sources.clone(),
                items: Items::of_plan(plan, run_dir),
                suspect_gates: Vec::new(),
            },
            run_dir: run_dir.to_path_buf(),
            gates: Vec::new(),
            started: std::collections::HashMap::new(),
            baselines: std::collections::HashMap::new(),
            lines: std::collections::HashMap::new(),
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
        for i in 0..self.report.items.len() {
            if let Some(o) = self.report.items.outcome(i) {
                *counts.entry(o).or_insert(0) += 1;
            }
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
                    .name(*item)
                    .map_or(String::new(), |(r, _)| r.to_string());
                self.report.warnings.push(format!(
                    "ended {} process{} that dead run `{run}` had left in repository `{repo}` (pids {})",
                    pids.len(),
                    if pids.len() == 1 { "" } else { "es" },
                    pids.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(", ")
                ));
            }
            Event::Watched { .. } => {
                self.report.warnings.extend(ev.watched());
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
            Event::Denied {
                item,
                n,
                process,
                accesses,
                more,
            } => {
                if let Some(it) = self.report.items.get_mut(*item) {
                    let last = accesses.len().saturating_sub(1);
                    it.denied
                        .extend(accesses.iter().enumerate().map(|(i, a)| DeniedReport {
                            attempt: *n,
                            process: process.clone(),
                            access: a.clone(),
                            more: if i == last { *more } else { 0 },
                        }));
                    self.report.warnings.push(format!(
                        "{}/{}: the sandbox denied its {process} {} access{} outside the item (listed under \"Denied by the sandbox\")",
                        it.repo,
                        it.id,
                        accesses.len() as u64 + more,
                        if accesses.len() as u64 + more == 1 { "" } else { "es" },
                    ));
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
                    it.diffstat = Some(Box::new(Diffstat {
                        files: *files,
                        insertions: *insertions,
                        deletions: *deletions,
                    }));
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
            Event::ResourceWaiting { .. } | Event::LeaseWaiting { .. } => {}
            Event::ResourceAcquired { item, waited, .. } => {
                if let Some(it) = self.report.items.get_mut(*item) {
                    it.waited.get_or_insert_with(Default::default).resources_ms +=
                        waited.as_millis() as u64;
                }
            }
            Event::PullRequestSettled { .. } => {}
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
                ..
            } => {
                if let Some(it) = self.report.items.get_mut(*item) {
                    it.publish = Some(Box::new(PublishReport {
                        remote: remote.clone(),
                        branch: branch.clone(),
                        pushed: *pushed,
                        head: head.clone(),
                        url: url.clone(),
                        error: error.clone(),
                    }));
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
                    .name(*item)
                    .map(|(r, i)| format!("{r}/{i}"))
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
                    it.setup = Some(Box::new(SetupReport {
                        ok: *ok,
                        exit: *exit,
                        duration_ms: duration.as_millis() as u64,
                        log,
                        output_tail: output_tail.clone(),
                    }));
                }
            }
            Event::UsageUnknown { item, n, why } => {
                if let Some((repo, id)) = self.report.items.name(*item) {
                    let w =
                        format!("{repo}/{id} attempt {n}: what its worker used is unknown: {why}");
                    self.report.warnings.push(w);
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
                    self.lines.insert((*item, gate.clone()), c.clone());
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
                if matches!(result, GateResult::Failed | GateResult::TimedOut) {
                    t.failed += 1;
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
        // What ended goes to the spill file: the items in flight are all that stay in memory.
        self.report.items.settle();
    }

    /// The tally of gate `gate` as item `item` last started it: a gate is judged as one
    /// command in one repository, so one name over repositories (each its own `test`), or one
    /// name with another command line, is a gate of its own.
    fn tally(&mut self, item: usize, gate: &str) -> &mut GateTally {
        let line = self
            .lines
            .get(&(item, gate.to_string()))
            .cloned()
            .unwrap_or_default();
        let repo = self.repos.get(item).cloned().unwrap_or_default();
        let i = match self
            .gates
            .iter()
            .position(|(g, t)| g == gate && t.repo == repo && t.line == line)
        {
            Some(i) => i,
            None => {
                let passed_before = self.done_before.contains(&repo);
                self.gates.push((
                    gate.to_string(),
                    GateTally {
                        repo,
                        line,
                        passed_before,
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
        // Named in order, not in the order the pool happened to finish them: a report says the
        // same of the same run.
        let halted = &mut self.tally(item, &gate).halted;
        if let Err(at) = halted.binary_search(&name) {
            halted.insert(at, name);
        }
        self.name_suspects();
    }

    fn name_suspects(&mut self) {
        self.report.suspect_gates = self
            .gates
            .iter()
            .filter(|(_, t)| t.suspect())
            .map(|(g, t)| SuspectGate {
                gate: g.clone(),
                repo: t.repo.clone(),
                failed: t.failed,
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

    /// Something the user should hear of the run, found after its events (a tracker that could
    /// not be written back to).
    pub(crate) fn warn(&mut self, w: String) {
        self.report.warnings.push(w);
    }

    pub fn report(&self) -> &Report {
        &self.report
    }

    /// Ready the report to render in every format: a small run's records brought back into
    /// memory ([`super::items::Items::read_back`]).
    pub fn report_to_render(&mut self) {
        self.report.items.read_back(super::items::READ_BACK_BUDGET);
    }

    /// The run recorded no ending: its items that never finished are not `cancelled` — nothing
    /// cancelled them — but were running, or not yet started, when the run died (`died`) or are
    /// so now (a live run).
    /// `claimed` lists the items (repository, id) the run held claims on: those it had started.
    pub(crate) fn unended(&mut self, died: bool, claimed: &[(String, String)]) {
        if self.report.ending.is_none() {
            self.report.items.mark_unended(died, claimed);
        }
    }

    /// The report, for keeping.
    pub fn into_report(self) -> Report {
        self.report
    }

    /// Let go of the items (the bulk of a report) once nothing needs them any more.
    pub fn release(&mut self) {
        self.report.items = Items::default();
        self.gates = Vec::new();
        self.started = Default::default();
        self.baselines = Default::default();
        self.lines = Default::default();
    }
}
