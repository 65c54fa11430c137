//! The gates of one attempt: each run in order (or its verdict taken from the cache), the
//! `min_tests` floor, and what their results say of the attempt.

use super::{
    baseline::{Baselined, against_baseline},
    cx::{ItemCx, REPORT_TAIL_BYTES, REPORT_TAIL_LINES},
    judge::judged,
    launch::{Launch, command, shell_words},
    verdict::{gate_result, too_few_tests},
};
use crate::engine::verdicts;
use crate::events::Event;
use crate::git;
use crate::manifest::compile_glob;
use crate::process::{Finished, output::last_lines};
use crate::vocab::GateResult;
use std::path::Path;
use tracing::Instrument;

pub(super) enum GatesOutcome {
    Passed {
        any_passed: bool,
        /// A required gate ran and passed: the work was checked.
        verified: bool,
    },
    Failed {
        gate: String,
        fin: Box<Finished>,
        any_passed: bool,
        timed_out: bool,
        /// Why it failed, when its exit does not say (too few tests).
        why: Option<String>,
    },
    Cancelled,
}

pub(super) async fn gates(
    icx: &ItemCx<'_>,
    n: u32,
    model: Option<&str>,
    feedback: Option<&Path>,
    start: Option<&str>,
    tree: Option<&str>,
) -> GatesOutcome {
    let gates = &icx.eff.gates;
    // The worker's tree, while no gate has run yet.
    let mut untouched = tree.map(str::to_string);
    let changed = changed_files(icx, start).await;
    let mut any_passed = false;
    let mut verified = false;
    let mut decided: Option<(String, Finished, bool, Option<String>)> = None;
    let unrun =
        |gate: &str, result: GateResult, reason: &str| not_run(icx, n, gate, result, reason);
    for gate in gates {
        if decided.is_some() {
            unrun(
                &gate.name,
                GateResult::NotRun,
                "an earlier required gate failed",
            );
            continue;
        }
        if !touches(&gate.paths, changed.as_deref()) {
            unrun(
                &gate.name,
                GateResult::Skipped,
                "no changed file matches its `paths`",
            );
            continue;
        }
        // `timeout: auto` gates have the limit their history gave them.
        let limit = icx
            .cx
            .gate_timeouts
            .get(&gate.name)
            .copied()
            .unwrap_or_else(|| gate.timeout());
        let log = icx.logs.join(format!("{n}-gate-{}.log", gate.name));
        let run = Launch::gate(gate, n, &icx.workdir, log.clone(), limit);
        let ready = command(icx, &gate.run, model, feedback, &run);
        announce(icx, n, gate, limit, ready.as_ref().ok());
        let (fin, cached) = judged(
            icx,
            gate,
            ready,
            run,
            untouched.take(),
            verdicts::Kind::Gate,
        )
        .instrument(tracing::debug_span!("gate", gate = %gate.name))
        .await;
        let result = gate_result(&fin);
        // Too few tests ran: a suite an agent emptied does not pass, however it exited.
        let too_few = gate
            .min_tests
            .as_ref()
            .and_then(|m| too_few_tests(result, fin.counted, m.count, &m.pattern));
        let result = if too_few.is_some() {
            GateResult::Failed
        } else {
            result
        };
        let mut fin = fin;
        if let Some(why) = &too_few {
            fin.tail.push_str(&format!("\nrunner: {why}\n"));
        }
        // A gate failing by its exit, with `baseline: true`: what the base commit fails too is
        // forgiven.
        let mut failures = None;
        let mut why = too_few.clone();
        let mut result = result;
        if result == GateResult::Failed
            && too_few.is_none()
            && gate.baseline()
            && fin.exit.is_some_and(|c| c != 126 && c != 127)
        {
            let judged = against_baseline(icx, gate, n, model, feedback, limit, &fin).await;
            match judged {
                Baselined::Cancelled => return GatesOutcome::Cancelled,
                Baselined::Judged {
                    forgiven,
                    lists,
                    why: w,
                } => {
                    if forgiven {
                        result = GateResult::Passed;
                    }
                    failures = Some(lists);
                    why = w;
                }
            }
        }
        tracing::debug!(gate = %gate.name, result = result.as_str(), exit = fin.exit, "gate finished");
        let tail = match &fin.spawn_error {
            Some(e) => e.clone(),
            None => last_lines(&fin.tail, REPORT_TAIL_LINES, REPORT_TAIL_BYTES),
        };
        let _ = icx.events.send(Event::GateFinished {
            item: icx.idx,
            n,
            gate: gate.name.clone(),
            result,
            reason: fin
                .cancelled
                .then(|| "the run was cancelled".to_string())
                .or(too_few.clone()),
            duration: fin.duration,
            output_tail: tail,
            log: (fin.logged && cached.is_none()).then_some(log),
            log_error: fin.log_error.clone(),
            unlogged_bytes: (fin.unlogged > 0).then_some(fin.unlogged),
            exit: fin.exit,
            cached,
            failures,
        });
        if fin.cancelled {
            return GatesOutcome::Cancelled;
        }
        if result == GateResult::Passed {
            any_passed = true;
            verified |= gate.required();
        } else if gate.required() {
            decided = Some((gate.name.clone(), fin, result == GateResult::TimedOut, why));
        }
    }
    match decided {
        None => GatesOutcome::Passed {
            any_passed,
            verified,
        },
        Some((gate, fin, timed_out, why)) => GatesOutcome::Failed {
            gate,
            fin: Box::new(fin),
            any_passed,
            timed_out,
            why,
        },
    }
}

/// Tell that `gate` starts (its command redacted, when it could be written).
fn announce(
    icx: &ItemCx<'_>,
    n: u32,
    gate: &crate::manifest::Gate,
    limit: std::time::Duration,
    ready: Option<&super::launch::Ready>,
) {
    let _ = icx.events.send(Event::GateStarted {
        item: icx.idx,
        n,
        gate: gate.name.clone(),
        limit,
        command: ready.map(|r| icx.cx.redactor.redact(&shell_words(&r.argv))),
        dir: Some(icx.workdir.clone()),
        required: gate.required(),
    });
}

/// The files the item changed, for gates with `paths`: since the merge base with the base
/// branch for an item on a work branch, else since where it started. `None` when no gate has
/// `paths` or git could not tell.
async fn changed_files(icx: &ItemCx<'_>, start: Option<&str>) -> Option<Vec<String>> {
    if !icx.eff.gates.iter().any(|g| !g.paths.is_empty()) {
        return None;
    }
    let dir = icx.workdir.clone();
    let since = match (&icx.item.branch, &icx.repo.base) {
        (Some(_), Some(base)) => {
            let (g, d, b) = (icx.cx.git.clone(), dir.clone(), base.clone());
            tokio::task::spawn_blocking(move || git::merge_base(&g, &d, &b, "HEAD"))
                .await
                .ok()
                .flatten()
        }
        _ => None,
    }
    .or_else(|| start.map(str::to_string))?;
    let g = icx.cx.git.clone();
    tokio::task::spawn_blocking(move || git::changed_files(&g, &dir, &since).ok())
        .await
        .ok()
        .flatten()
}

/// Whether a gate with `paths` is concerned by the `changed` files; unknown changes (git could
/// not tell) fail closed: the gate runs. A gate without `paths` always is.
fn touches(paths: &[String], changed: Option<&[String]>) -> bool {
    if paths.is_empty() {
        return true;
    }
    let matchers: Vec<_> = paths.iter().filter_map(|p| compile_glob(p).ok()).collect();
    changed.is_none_or(|files| files.iter().any(|f| matchers.iter().any(|m| m.is_match(f))))
}

/// A gate of attempt `n` that did not run: its result and why, with no output and no time.
fn not_run(icx: &ItemCx<'_>, n: u32, gate: &str, result: GateResult, reason: &str) {
    let _ = icx.events.send(Event::GateFinished {
        item: icx.idx,
        n,
        gate: gate.to_string(),
        result,
        reason: Some(reason.to_string()),
        duration: std::time::Duration::ZERO,
        output_tail: String::new(),
        log: None,
        exit: None,
        cached: None,
        failures: None,
        log_error: None,
        unlogged_bytes: None,
    });
}

#[cfg(test)]
mod tests {
    use super::touches;

    #[test]
    fn a_gate_with_paths_runs_for_a_matching_change_or_when_changes_are_unknown() {
        let paths = vec!["src/**".to_string()];
        let changed = |f: &[&str]| f.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(touches(&paths, Some(&changed(&["src/lib.rs"]))));
        assert!(!touches(&paths, Some(&changed(&["README.md"]))));
        // Git could not tell: fail closed, the gate runs.
        assert!(touches(&paths, None));
        // No `paths`: every change concerns it.
        assert!(touches(&[], Some(&changed(&["README.md"]))));
    }
}
