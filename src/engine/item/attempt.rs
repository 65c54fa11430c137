//! The attempts of an item: the worker run with the model the chain gives, a provider failure
//! rested and moved along the chain, usage read, the gates judged, and the feedback the next
//! attempt is handed.

use super::{
    checkout::{Snapshot, after_worker, finish_work, unchanged_small},
    cx::{
        ItemCx, ItemError, ItemRun, REPORT_TAIL_BYTES, REPORT_TAIL_LINES, Rest, blocking,
        environmental,
    },
    gates::{GatesOutcome, gates},
    launch::{Launch, spawn, usage_path},
    verdict::{AfterWorker, gate_failed, worker_verdict},
};
use crate::engine::chain::{ChainStep, ModelChain};
use crate::engine::classify::{ProviderPolicy, classify};
use crate::engine::stall::HaltSignature;
use crate::events::{Event, Usage};
use crate::git;
use crate::process::{Finished, Stop, output::last_lines};
use crate::vocab::{ItemOutcome, WorkerClass};
use std::path::{Path, PathBuf};
use tracing::Instrument;

/// The attempts loop: worker, then gates, until a pass succeeds, attempts run out, or the chain
/// is exhausted.
/// A provider-class failure on `model`: the run's view of the model learns of it (saying so
/// when that demotes the model), and the item's chain takes the step it calls for.
/// The item's chain by name; a manifest without `models` has one unnamed model.
pub(super) fn chain_names(icx: &ItemCx<'_>) -> Vec<String> {
    icx.eff.models.as_ref().map_or_else(
        || vec![String::new()],
        |m| m.chain().into_iter().map(str::to_string).collect(),
    )
}

/// An item none of whose models can be used, each refused by its provider: held, for the next
/// run to try once the key is fixed; the scheduler admits nothing more.
pub(super) fn refused_everywhere(
    run: &mut ItemRun,
    health: &crate::engine::health::Health,
    names: &[String],
) {
    run.outcome = ItemOutcome::Held;
    run.reason = Some(crate::vocab::HoldReason::ProviderRefused.as_str().into());
    run.cause = Some(health.refusal_cause(names));
}

pub(super) fn provider_failed(
    icx: &ItemCx<'_>,
    model: Option<&str>,
    chain: &mut ModelChain,
) -> ChainStep {
    if let Some(m) = model {
        let mut health = icx.cx.health.lock().unwrap_or_else(|p| p.into_inner());
        let now = std::time::Instant::now();
        let demoted = health.failed(m, &format!("{}/{}", icx.item.repo, icx.item.id), now);
        if let Some(d) = demoted {
            let names = chain_names(icx);
            let next = health
                .start(&names, now)
                .map(|i| names[i].clone())
                .filter(|n| n != m);
            let _ = icx.events.send(Event::ModelDemoted {
                item: icx.idx,
                model: m.to_string(),
                failures: d.failures,
                items: d.items,
                next,
            });
        }
    }
    chain.provider_failure()
}

/// Where the run keeps what attempt `n` of the item at `idx` (its place in the plan) reported.
fn usage_record(cx: &crate::engine::run::RunCx, idx: usize, n: u32) -> PathBuf {
    cx.run_dir
        .join("usage")
        .join(idx.to_string())
        .join(format!("{n}.json"))
}

/// Move what a worker wrote to `$RUNNER_USAGE` to the run's record of it (copied where the two
/// are on different file systems); a file that cannot be kept is left where it is, and goes
/// when the folder is emptied.
fn keep_usage(from: &Path, to: &Path) {
    if let Some(dir) = to.parent()
        && std::fs::create_dir_all(dir).is_ok()
        && std::fs::rename(from, to).is_err()
        && crate::support::fs::copy_regular(from, to).is_ok()
    {
        let _ = std::fs::remove_file(from);
    }
}

/// What reading a worker's `$RUNNER_USAGE` file gave.
pub(super) enum UsageRead {
    /// What it used, and the model it says it used.
    Reported(Usage, Option<String>),
    /// It wrote nothing.
    Missing,
    /// It wrote something that is not a usage object: why.
    Malformed(String),
}

/// What a worker wrote to `$RUNNER_USAGE`: a JSON object with `input_tokens`, `output_tokens`,
/// `cost_usd` and `model` (the model it actually used), each optional; other fields are ignored.
pub(super) fn read_usage(path: &Path) -> UsageRead {
    #[derive(serde::Deserialize)]
    struct File {
        #[serde(flatten)]
        usage: Usage,
        #[serde(default)]
        model: Option<String>,
    }
    use std::io::Read;
    let mut text = String::new();
    // The worker may write its usage folder: a FIFO there is refused, never waited on.
    let file = match crate::support::fs::open_regular(path, std::fs::OpenOptions::new().read(true))
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return UsageRead::Missing,
        Err(e) => return UsageRead::Malformed(format!("its usage file cannot be read: {e}")),
    };
    if let Err(e) = file.take(64 * 1024).read_to_string(&mut text) {
        return UsageRead::Malformed(format!("its usage file cannot be read: {e}"));
    }
    match serde_json::from_str::<File>(&text) {
        Ok(File { usage: u, model }) if u.cost_usd.is_none_or(|c| c.is_finite() && c >= 0.0) => {
            UsageRead::Reported(u, model.filter(|m| !m.trim().is_empty() && m.len() <= 200))
        }
        Ok(_) => UsageRead::Malformed("its usage file gives a negative or infinite cost".into()),
        Err(e) => UsageRead::Malformed(format!(
            "its usage file is not a JSON object of `input_tokens`, `output_tokens` and `cost_usd`: {e}"
        )),
    }
}

/// Rest `wait` after attempt `n` failed for the provider's reasons, the item's slot free
/// meanwhile: until the drain lets it go on. `false` when the run stopped instead.
pub(super) async fn rest(icx: &ItemCx<'_>, n: u32, wait: std::time::Duration, tail: &str) -> bool {
    if wait.is_zero() {
        return true;
    }
    let _ = icx.events.send(Event::Resting {
        item: icx.idx,
        n,
        wait,
        hinted: crate::engine::backoff::retry_hint(tail).is_some(),
    });
    let (wake, woken) = tokio::sync::oneshot::channel();
    if icx
        .rest
        .send(Rest {
            item: icx.idx,
            wait,
            wake,
        })
        .is_err()
    {
        return false;
    }
    let mut stop = icx.stop.clone();
    let stopped = async move {
        loop {
            if *stop.borrow_and_update() != Stop::Run {
                return;
            }
            if stop.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        r = woken => r.is_ok() && *icx.stop.borrow() == Stop::Run,
        () = stopped => false,
    }
}

/// The item's model chain, starting past the models the run found failing; the item held when
/// none of them can be used.
fn chain_of(icx: &ItemCx<'_>) -> Result<ModelChain, Box<ItemRun>> {
    let mut chain = ModelChain::new(
        icx.eff
            .models
            .as_ref()
            .map(|m| m.chain().into_iter().map(str::to_string).collect())
            .unwrap_or_default(),
        icx.eff.models.as_ref().map_or(2, |m| m.threshold()),
    );
    // Models the run found failing are skipped by items that start now.
    if let Some(models) = icx.eff.models.as_ref() {
        let names: Vec<String> = models.chain().into_iter().map(str::to_string).collect();
        let mut health = icx.cx.health.lock().unwrap_or_else(|p| p.into_inner());
        match health.start(&names, std::time::Instant::now()) {
            Some(start) => chain.start_at(start),
            None => {
                let mut run = ItemRun::ended(ItemOutcome::Held);
                refused_everywhere(&mut run, &health, &names);
                return Err(Box::new(run));
            }
        }
    }
    Ok(chain)
}

/// Where the item's changes start, for gates with `paths`; not asked for when none has them.
async fn paths_start(icx: &ItemCx<'_>) -> Option<String> {
    if !icx.eff.gates.iter().any(|gate| !gate.paths.is_empty()) {
        return None;
    }
    let (g, w) = (icx.cx.git.clone(), icx.workdir.clone());
    tokio::task::spawn_blocking(move || git::head(&g, &w).ok())
        .await
        .ok()
        .flatten()
}

/// A rerun's first attempt is told how the previous run's last attempt failed: its feedback,
/// copied among this attempt's logs.
fn previous_feedback(icx: &ItemCx<'_>) -> Option<PathBuf> {
    let prev = icx.cx.previous_feedback.get(&icx.idx)?;
    let here = icx.logs.join("0-feedback.txt");
    std::fs::create_dir_all(&icx.logs).ok()?;
    std::fs::copy(prev, &here).ok()?;
    Some(here)
}

/// The back-off between provider failures, as the manifest sets it.
fn backoff_of(icx: &ItemCx<'_>) -> crate::engine::backoff::Backoff {
    let (initial, max) = icx.eff.models.as_ref().map_or(
        (
            crate::manifest::DEFAULT_BACKOFF_INITIAL,
            crate::manifest::DEFAULT_BACKOFF_MAX,
        ),
        |m| m.backoff(),
    );
    crate::engine::backoff::Backoff { initial, max }
}

pub(super) async fn attempts(icx: &ItemCx<'_>) -> ItemRun {
    let max_attempts = icx.eff.worker.attempts();
    let policy = ProviderPolicy::from_models(icx.eff.models.as_ref());
    let mut chain = match chain_of(icx) {
        Ok(c) => c,
        Err(held) => return *held,
    };
    let start = paths_start(icx).await;
    let markers = icx.cx.loaded.manifest.repositories[icx.repo.entry]
        .critical_base
        .clone();
    let mut used = 0u32;
    let mut n = 0u32;
    let mut feedback = previous_feedback(icx);
    let mut run = ItemRun::ended(ItemOutcome::Halted);
    // Provider failures in a row, for the back-off; and when the last rest began.
    let mut provider_streak = 0u32;
    let mut rested_since: Option<std::time::Instant> = None;
    let backoff = backoff_of(icx);
    loop {
        if used >= max_attempts {
            run.outcome = ItemOutcome::Halted;
            run.reason = Some("attempts-exhausted".into());
            return run;
        }
        if moved_past_refused(icx, &mut chain, &mut run) {
            return run;
        }
        n += 1;
        let model = chain.current().map(str::to_string);
        let _ = icx.events.send(Event::AttemptStarted {
            item: icx.idx,
            n,
            model: model.clone(),
            waited: rested_since.take().map(|t| t.elapsed()),
        });
        let attempt_span = tracing::debug_span!("attempt", n, model = model.as_deref());
        let log = icx.logs.join(format!("{n}-worker.log"));
        let silence = icx
            .eff
            .models
            .as_ref()
            .and_then(|m| m.provider_failure.as_ref())
            .and_then(|p| p.silence)
            .map(|d| d.0);
        let run_worker = Launch {
            gate: None,
            n,
            log: log.clone(),
            timeout: icx.eff.worker.timeout(),
            grace: icx.eff.worker.grace(),
            silence,
            dir: &icx.workdir,
        };
        let fin = spawn(
            icx,
            &icx.eff.worker.run,
            model.as_deref(),
            feedback.as_deref(),
            run_worker,
        )
        .instrument(attempt_span.clone())
        .await;
        let class = classify(&fin, &policy);
        // A key the provider refused was billed nothing, nor was a worker that never started.
        let billed = class != WorkerClass::Refused && fin.spawn_error.is_none();
        report_usage(icx, n, model.as_deref(), billed);
        tracing::debug!(parent: &attempt_span, class = class.as_str(), exit = fin.exit, "worker finished");
        run.tree_gone &= fin.tree_gone;
        worker_finished(icx, n, class, &fin, log, silence);
        match worker_verdict(class, &fin, icx.eff.worker.timeout()) {
            AfterWorker::Unstarted(e) => {
                run.outcome = ItemOutcome::Failed;
                run.halt = Some(HaltSignature::described("worker", &e));
                run.cause = Some(e);
                return run;
            }
            AfterWorker::Cancelled => {
                run.outcome = ItemOutcome::Cancelled;
                return run;
            }
            AfterWorker::Refused => {
                provider_streak = 0;
                if refused(icx, model.as_deref(), &fin.tail, &mut chain, &mut run) == Next::Done {
                    return run;
                }
            }
            AfterWorker::Provider => match provider_failed(icx, model.as_deref(), &mut chain) {
                ChainStep::Stay | ChainStep::Moved => {
                    provider_streak += 1;
                    let wait =
                        backoff.delay(provider_streak, &fin.tail, crate::engine::backoff::unit());
                    rested_since = Some(std::time::Instant::now());
                    if !rest(icx, n, wait, &fin.tail).await {
                        run.outcome = ItemOutcome::Cancelled;
                        return run;
                    }
                    continue;
                }
                ChainStep::Unavailable => {
                    run.outcome = ItemOutcome::Held;
                    run.reason = Some(
                        crate::vocab::HoldReason::ProviderUnavailable
                            .as_str()
                            .into(),
                    );
                    run.cause = Some(format!(
                        "model `{}` failed for the provider's reasons {} times in a row and the chain has no fallback; the next run tries again",
                        model.as_deref().unwrap_or("(none)"),
                        crate::engine::chain::NO_FALLBACK_LIMIT
                    ));
                    return run;
                }
                ChainStep::Exhausted => {
                    run.outcome = ItemOutcome::Halted;
                    run.reason = Some("fallback-exhausted".into());
                    run.cause = Some(format!(
                        "every model of the chain failed for the provider's reasons ({})",
                        chain.tried().join(", ")
                    ));
                    run.halt = Some(HaltSignature::of("worker (provider)", &fin.tail, fin.exit));
                    return run;
                }
            },
            AfterWorker::Failed { cause, halt } => {
                chain.other_outcome();
                provider_streak = 0;
                used += 1;
                run.cause = Some(cause);
                run.halt = Some(halt);
                feedback = write_feedback(icx, n, "the worker", &fin.tail);
            }
            AfterWorker::Judge => {
                chain.other_outcome();
                provider_streak = 0;
                used += 1;
                let at = Attempt {
                    n,
                    model: model.as_deref(),
                    start: start.as_deref(),
                    markers: &markers,
                    span: &attempt_span,
                };
                if judge_work(icx, &at, &mut run, &mut feedback).await == Next::Done {
                    return run;
                }
            }
        }
    }
}

/// Tell the event stream how attempt `n`'s worker ended (`log` its log, `silence` the limit
/// that may have ended it).
fn worker_finished(
    icx: &ItemCx<'_>,
    n: u32,
    class: WorkerClass,
    fin: &Finished,
    log: PathBuf,
    silence: Option<std::time::Duration>,
) {
    let _ = icx.events.send(Event::WorkerFinished {
        item: icx.idx,
        n,
        exit: fin.exit,
        class,
        duration: fin.duration,
        log: fin.logged.then_some(log),
        log_error: fin.log_error.clone(),
        unlogged_bytes: (fin.unlogged > 0).then_some(fin.unlogged),
        ended: ended_note(fin, silence, icx.eff.worker.timeout()),
        output_tail: match (&fin.spawn_error, class) {
            (Some(e), _) => e.clone(),
            (None, WorkerClass::Ok) => String::new(),
            (None, _) => last_lines(&fin.tail, REPORT_TAIL_LINES, REPORT_TAIL_BYTES),
        },
    });
}

/// The provider refused `model`'s key: not retried on it, by this item or any other; the next
/// usable model of the chain goes on at once (`Again`), and with none left the item is held
/// (`Done`).
fn refused(
    icx: &ItemCx<'_>,
    model: Option<&str>,
    tail: &str,
    chain: &mut ModelChain,
    run: &mut ItemRun,
) -> Next {
    let names = chain_names(icx);
    let message = crate::engine::classify::refusal_message(tail);
    let mut health = icx.cx.health.lock().unwrap_or_else(|p| p.into_inner());
    if health.refuse(model.unwrap_or_default(), &message) {
        let _ = icx.events.send(Event::ModelRefused {
            item: icx.idx,
            model: model.map(str::to_string),
            message,
        });
    }
    match health.usable(&names, chain.position() + 1) {
        Some(next) => {
            chain.move_to(next);
            Next::Again
        }
        None => {
            refused_everywhere(run, &health, &names);
            Next::Done
        }
    }
}

/// When the chain's model was refused since the last attempt (by another item's), the next
/// attempt is not started on it: move to the next usable one; `true` when none is left (the item
/// is then held, `run` says why).
fn moved_past_refused(icx: &ItemCx<'_>, chain: &mut ModelChain, run: &mut ItemRun) -> bool {
    let health = icx.cx.health.lock().unwrap_or_else(|p| p.into_inner());
    if !chain.current().is_some_and(|m| health.is_refused(m)) {
        return false;
    }
    let names = chain_names(icx);
    match health.usable(&names, chain.position()) {
        Some(next) => {
            chain.move_to(next);
            false
        }
        None => {
            refused_everywhere(run, &health, &names);
            true
        }
    }
}

/// Where an attempt stands once its worker finished: what the gates and the checks after them
/// need to know of it.
struct Attempt<'a> {
    n: u32,
    model: Option<&'a str>,
    /// Where the item's changes start, for gates with `paths`.
    start: Option<&'a str>,
    /// The repository's critical-base markers.
    markers: &'a [String],
    span: &'a tracing::Span,
}

/// What the attempt loop does next.
#[derive(PartialEq, Eq)]
enum Next {
    /// The attempt is spent: another may follow.
    Again,
    /// The item ended: `run` says how.
    Done,
}

/// A worker that finished: where it left HEAD and what it changed checked, its work judged by
/// the gates (whose writes are undone), and kept or handed back with feedback.
async fn judge_work(
    icx: &ItemCx<'_>,
    at: &Attempt<'_>,
    run: &mut ItemRun,
    feedback: &mut Option<PathBuf>,
) -> Next {
    let (n, g) = (at.n, &icx.cx.git);
    // Nothing of runner's reads the repository again before its shared state is proven as it
    // was.
    if !super::tamper::unchanged(icx, run) {
        return Next::Done;
    }
    // Where the worker left HEAD, and what it changed, before any gate runs.
    let snap = match &icx.anchor {
        Some(anchor)
            if let Some(s) = unchanged_small(
                g,
                &icx.workdir,
                anchor,
                at.markers,
                icx.base_index.as_deref(),
            ) =>
        {
            Some(s)
        }
        Some(anchor) => {
            let (dir, a, m) = (icx.workdir.clone(), anchor.clone(), at.markers.to_vec());
            let (g, base) = (g.clone(), icx.base_index.clone());
            match blocking(move || after_worker(&g, &dir, &a, &m, base.as_deref())).await {
                Ok(Ok(s)) => Some(s),
                Ok(Err(why)) => {
                    attempt_failed(icx, run, feedback, n, "worker", why.to_string());
                    return Next::Again;
                }
                Err(e) => {
                    attempt_failed(icx, run, feedback, n, "worker", e.to_string());
                    return Next::Again;
                }
            }
        }
        None => None,
    };
    if icx.eff.worker.require_change() && snap.as_ref().is_some_and(|s| !s.changed) {
        let why = "the worker changed nothing (`worker.require_change`)".to_string();
        attempt_failed(icx, run, feedback, n, "worker", why);
        return Next::Again;
    }
    // The first gate runs on exactly the tree the worker left: its verdict key needs no new
    // snapshot (a later gate's does: an earlier gate may have written files).
    let tree = snap.as_ref().and_then(|s| s.tree.as_deref());
    let judged = gates(icx, n, at.model, feedback.as_deref(), at.start, tree)
        .instrument(at.span.clone())
        .await;
    // What the gates wrote (bytecode, build output, a formatter's edits) goes: the
    // next worker pass, the commit and a halted item's leftovers hold the worker's
    // tree only. Work that passed in a worktree of its own is committed from the worker's
    // tree (the snapshot), and the worktree then removed with whatever the gates wrote: the
    // undoing waits until the commit did not happen after all. (With no gate, nothing ran
    // since the shared state was last proven unchanged.)
    if !icx.eff.gates.is_empty() && !super::tamper::unchanged(icx, run) {
        return Next::Done;
    }
    let passed = matches!(judged, GatesOutcome::Passed { .. });
    let removed_on_success = passed
        && icx.item.branch.is_some()
        && icx.eff.worker.commit()
        && icx.anchor.as_ref().is_some_and(|a| a.branch.is_some());
    if !icx.eff.gates.is_empty()
        && !removed_on_success
        && let Some(s) = &snap
        && let Err(e) = undo_gates(icx, s).await
    {
        hold_for_environment(run, e.to_string());
        return Next::Done;
    }
    match judged {
        GatesOutcome::Passed {
            any_passed,
            verified,
        } => {
            run.progress |= any_passed;
            // The gates must not have moved HEAD either; then the work is kept.
            let gates_ran = !icx.eff.gates.is_empty();
            let kept = finish_work(icx, snap.clone(), !verified, at.markers, gates_ran).await;
            if removed_on_success
                && gates_ran
                && !matches!(kept, Ok(Ok(_)))
                && let Some(s) = &snap
                && let Err(e) = undo_gates(icx, s).await
            {
                hold_for_environment(run, e.to_string());
                return Next::Done;
            }
            match kept {
                Ok(Ok(work)) => {
                    let _ = icx.events.send(work);
                }
                Ok(Err(moved)) => {
                    let why = format!("after the gates: {moved}");
                    attempt_failed(icx, run, feedback, n, "gates", why);
                    return Next::Again;
                }
                Err(e) => {
                    // The work passed; git could not keep it. The next run tries
                    // the item again.
                    hold_for_environment(run, e.to_string());
                    return Next::Done;
                }
            }
            run.outcome = ItemOutcome::Completed;
            run.progress = true;
            run.reason = None;
            run.cause = None;
            run.halt = None;
            Next::Done
        }
        GatesOutcome::Cancelled => {
            run.outcome = ItemOutcome::Cancelled;
            Next::Done
        }
        GatesOutcome::Failed {
            gate,
            fin,
            any_passed,
            timed_out,
            why,
        } => {
            run.progress |= any_passed;
            run.tree_gone &= fin.tree_gone;
            let failed = gate_failed(&gate, &fin, timed_out, why.as_deref());
            run.cause = Some(failed.cause);
            run.halt = Some(failed.halt);
            *feedback = write_feedback(icx, n, &failed.stage, &fin.tail);
            Next::Again
        }
    }
}

/// What the gates wrote could not be undone: the item is held for the environment.
#[derive(Debug, thiserror::Error)]
pub(super) enum UndoFailed {
    #[error("cannot undo what the gates wrote in `{}`: {source}", dir.display())]
    Git {
        dir: PathBuf,
        #[source]
        source: git::GitError,
    },
    #[error(transparent)]
    Task(#[from] ItemError),
}

/// Put the worker's tree back after the gates: remove what they created (not ignored) and write
/// back what they changed, as the snapshot holds it.
pub(super) async fn undo_gates(icx: &ItemCx<'_>, snap: &Snapshot) -> Result<(), UndoFailed> {
    // A checkout that was clean and still is: nothing to undo, and its files say so.
    if snap.index.is_none() && git::proven_clean_small(&icx.cx.git, &icx.workdir).is_some() {
        return Ok(());
    }
    let g = icx.cx.git.clone();
    let dir = icx.workdir.clone();
    let index = snap.index.clone();
    let restored =
        blocking(move || git::restore_snapshot(&g, &dir, index.as_deref().map(|p| &**p)))
            .await?
            .map_err(|source| UndoFailed::Git {
                dir: icx.workdir.clone(),
                source,
            })?;
    if !restored.removed.is_empty() || !restored.restored.is_empty() {
        tracing::debug!(
            removed = restored.removed.len(),
            restored = restored.restored.len(),
            "what the gates wrote is undone"
        );
    }
    Ok(())
}

/// An attempt failed for a reason of runner's finding (HEAD moved, nothing changed): it counts
/// as a failed attempt, and the next one is told why.
pub(super) fn attempt_failed(
    icx: &ItemCx<'_>,
    run: &mut ItemRun,
    feedback: &mut Option<PathBuf>,
    n: u32,
    stage: &str,
    why: String,
) {
    run.halt = Some(HaltSignature::described(stage, &why));
    let at = match stage {
        "worker" => "the worker",
        "gates" => "the gates",
        other => other,
    };
    *feedback = write_feedback(icx, n, at, &why);
    run.cause = Some(why);
}

/// Write `<n>-feedback.txt`: `attempt N failed at <stage>; the end of its output:` (the stage
/// is ``gate `test` `` or `the worker`), a blank line, the output's last lines.
pub(super) fn write_feedback(icx: &ItemCx<'_>, n: u32, stage: &str, tail: &str) -> Option<PathBuf> {
    let path = icx.logs.join(format!("{n}-feedback.txt"));
    let text = format!(
        "attempt {n} failed at {stage}; the end of its output:\n\n{}\n",
        last_lines(tail, 200, 32 * 1024)
    );
    let written = std::fs::create_dir_all(&icx.logs)
        .and_then(|()| crate::support::fs::write_atomic(&path, text.as_bytes()));
    match written {
        Ok(()) => Some(path),
        Err(e) => {
            // The next attempt runs without `RUNNER_FEEDBACK`: said, not silent.
            tracing::warn!(
                "{}/{}: the next attempt gets no feedback: cannot write `{}`: {e}",
                icx.item.repo,
                icx.item.id,
                path.display()
            );
            None
        }
    }
}

/// What the worker of attempt `n` (on `model`) reported using, priced at `models.prices` when
/// it gave tokens without a cost, as an event; or that its usage is unknown, where a budget
/// needs it and the attempt may have been `billed`.
fn report_usage(icx: &ItemCx<'_>, n: u32, model: Option<&str>, billed: bool) {
    let path = usage_path(icx, n);
    let read = read_usage(&path);
    if !matches!(read, UsageRead::Missing) {
        keep_usage(&path, &usage_record(icx.cx, icx.idx, n));
    }
    match read {
        UsageRead::Reported(mut usage, used_model) => {
            // Tokens without a cost are priced at `models.prices`, for the model the worker
            // says it used, else the attempt's.
            if usage.cost_usd.is_none() {
                usage.cost_usd = icx.eff.models.as_ref().and_then(|m| {
                    let price = used_model
                        .as_deref()
                        .or(model)
                        .and_then(|name| m.prices.get(name))?;
                    Some(price.cost(usage.input_tokens, usage.output_tokens))
                });
            }
            let _ = icx.events.send(Event::Usage {
                item: icx.idx,
                n,
                model: model.map(str::to_string),
                usage,
                used_model,
            });
        }
        // Most workers report nothing; with a budget, nothing is not zero.
        UsageRead::Missing if icx.cx.loaded.manifest.budget.is_none() || !billed => {}
        UsageRead::Missing => {
            let _ = icx.events.send(Event::UsageUnknown {
                item: icx.idx,
                n,
                why: "its worker wrote no usage to `RUNNER_USAGE`".into(),
            });
        }
        UsageRead::Malformed(why) => {
            let _ = icx.events.send(Event::UsageUnknown {
                item: icx.idx,
                n,
                why,
            });
        }
    }
}

/// Why runner ended a worker, as the attempt shows it: silence or its timeout; `None` when it
/// ended by itself.
fn ended_note(
    fin: &Finished,
    silence: Option<std::time::Duration>,
    timeout: std::time::Duration,
) -> Option<String> {
    if fin.silenced {
        silence.map(|d| {
            format!(
                "no output for {} (`models.provider_failure.silence`)",
                crate::manifest::format_duration(d)
            )
        })
    } else if fin.timed_out {
        Some(format!(
            "timed out after {}",
            crate::manifest::format_duration(timeout)
        ))
    } else {
        None
    }
}

/// `run` held for the environment (git could not keep the work, the gates' byproducts could not
/// be undone), keeping what it learnt (progress, the tree's end) so far.
fn hold_for_environment(run: &mut ItemRun, cause: String) {
    let held = environmental(cause);
    run.outcome = held.outcome;
    run.reason = held.reason;
    run.cause = held.cause;
    run.halt = held.halt;
}
