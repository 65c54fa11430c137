//! Gate baselines: whether a gate that failed after the worker also fails on the untouched base,
//! so that a failure the work did not cause is told apart from one it did.

use super::{
    checkout::short,
    cx::{ItemCx, ItemError, blocking},
    judge::judged,
    launch::{Launch, command},
    verdict::exit_text,
};
use crate::engine::verdicts;
use crate::events::{CachedFrom, Event, GateFailures};
use crate::failures::{Failure, compare};
use crate::git;
use crate::process::Finished;
use crate::vocab::GateResult;
use std::path::{Path, PathBuf};
use tracing::Instrument;

/// A gate's run on the base commit: which failures the base already has.
#[derive(Clone, Debug)]
pub struct Baseline {
    pub commit: String,
    /// `Passed`, `Failed`, `TimedOut`; `NotRun` when it could not be run at all.
    pub result: GateResult,
    pub failures: Vec<Failure>,
    /// Why it could not be run.
    pub error: Option<String>,
    /// The item that ran it in this run (another item reusing it says so).
    pub ran_for: Option<CachedFrom>,
}

/// What a failing baseline gate comes to once compared with its baseline.
pub(super) enum Baselined {
    Cancelled,
    Judged {
        /// Every failure is one the base has: the gate passes.
        forgiven: bool,
        lists: GateFailures,
        /// Why it still fails, naming only what is new.
        why: Option<String>,
    },
}

/// At most this many new failures are named in an item's cause.
pub(super) const CAUSE_FAILURES: usize = 5;

/// Compare a failed run of `gate` with its run on the base commit.
pub(super) async fn against_baseline(
    icx: &ItemCx<'_>,
    gate: &crate::manifest::Gate,
    n: u32,
    model: Option<&str>,
    feedback: Option<&Path>,
    limit: std::time::Duration,
    fin: &Finished,
) -> Baselined {
    let Some(base) = baseline(icx, gate, n, model, feedback, limit).await else {
        return Baselined::Cancelled;
    };
    let lines = |v: &[Failure]| v.iter().map(|f| f.line.clone()).collect::<Vec<_>>();
    let at = short(&base.commit).to_string();
    let named = |new: &[Failure]| {
        let mut s: Vec<String> = new
            .iter()
            .take(CAUSE_FAILURES)
            .map(|f| f.line.clone())
            .collect();
        if new.len() > CAUSE_FAILURES {
            s.push(format!("and {} more", new.len() - CAUSE_FAILURES));
        }
        s.join("; ")
    };
    let all_new = |why: String| Baselined::Judged {
        forgiven: false,
        lists: GateFailures {
            new: lines(&fin.failures),
            forgiven: Vec::new(),
        },
        why: Some(why),
    };
    match base.result {
        GateResult::Passed => all_new(if fin.failures.is_empty() {
            format!(
                "{} here, and passes on the base commit `{at}`",
                exit_text(fin)
            )
        } else {
            format!(
                "passes on the base commit `{at}`; failing here: {}",
                named(&fin.failures)
            )
        }),
        GateResult::Failed => {
            if fin.failures.is_empty() {
                return all_new(format!(
                    "{}; it fails on the base commit `{at}` too, but no failure line was \
                     recognised here, so nothing is forgiven",
                    exit_text(fin)
                ));
            }
            let cmp = compare(&fin.failures, &base.failures);
            let forgiven = cmp.new.is_empty();
            let why = (!forgiven).then(|| {
                let k = cmp.new.len();
                let old = match cmp.forgiven.len() {
                    0 => format!("none of them fails on the base commit `{at}`"),
                    f => format!(
                        "{f} more fail{} on the base commit `{at}` too",
                        if f == 1 { "s" } else { "" }
                    ),
                };
                format!(
                    "{k} new failure{} ({old}): {}",
                    if k == 1 { "" } else { "s" },
                    named(&cmp.new)
                )
            });
            Baselined::Judged {
                forgiven,
                lists: GateFailures {
                    new: lines(&cmp.new),
                    forgiven: lines(&cmp.forgiven),
                },
                why,
            }
        }
        GateResult::TimedOut => all_new(format!(
            "{}; its baseline on `{at}` timed out, which forgives nothing",
            exit_text(fin)
        )),
        _ => all_new(format!(
            "{}; its baseline could not be run ({}), which forgives nothing",
            exit_text(fin),
            base.error.as_deref().unwrap_or("no base commit")
        )),
    }
}

/// `gate` on the base commit (the repository's base for an item on a work branch, else the
/// commit the item started from), in a detached worktree of its own: once per run for each
/// repository, gate and commit, and not at all when a verdict on that tree is recorded. `None`
/// when the run was cancelled meanwhile.
pub(super) async fn baseline(
    icx: &ItemCx<'_>,
    gate: &crate::manifest::Gate,
    n: u32,
    model: Option<&str>,
    feedback: Option<&Path>,
    limit: std::time::Duration,
) -> Option<Baseline> {
    let repo = icx.repo.path.clone();
    let unrun = |commit: String, error: String| Baseline {
        commit,
        result: GateResult::NotRun,
        failures: Vec::new(),
        error: Some(error),
        ran_for: None,
    };
    let commit = match (&icx.item.branch, &icx.anchor) {
        (None, Some(anchor)) => Ok(anchor.start.clone()),
        (None, None) => Err("the repository has no commit".to_string()),
        (Some(_), _) => {
            let (g, r, base) = (
                icx.cx.git.clone(),
                repo.clone(),
                icx.repo.base.clone().unwrap_or_else(|| "HEAD".into()),
            );
            blocking(move || git::commit_of(&g, &r, &base).map_err(|e| e.to_string()))
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r)
        }
    };
    let commit = match commit {
        Ok(c) => c,
        Err(e) => return Some(unrun(String::new(), e)),
    };
    let memo = format!("{}\0{}\0{commit}", icx.repo.name, gate.name);
    if let Some(b) = icx
        .cx
        .baselines
        .lock()
        .ok()
        .and_then(|m| m.get(&memo).cloned())
    {
        send_baseline(
            icx,
            n,
            gate,
            &b,
            b.ran_for.clone(),
            std::time::Duration::ZERO,
            (None, None, 0),
        );
        return Some(b);
    }
    let wt = icx.cx.workspace.join("baselines").join(&icx.repo.name);
    let (g, r, w, c) = (icx.cx.git.clone(), repo.clone(), wt.clone(), commit.clone());
    let made = blocking(move || -> Result<String, ItemError> {
        git::add_detached_worktree(&g, &r, &w, &c)?;
        Ok(git::tree_of(&g, &r, &c)?)
    })
    .await
    .and_then(|r| r);
    let tree = match made {
        Ok(t) => t,
        Err(e) => {
            let b = unrun(commit, format!("no worktree of the base commit: {e}"));
            send_baseline(
                icx,
                n,
                gate,
                &b,
                None,
                std::time::Duration::ZERO,
                (None, None, 0),
            );
            return Some(b);
        }
    };
    let log = icx.logs.join(format!("{n}-baseline-{}.log", gate.name));
    let run = Launch::gate(gate, n, &wt, log.clone(), limit);
    let ready = command(icx, &gate.run, model, feedback, &run);
    let (fin, cached) = judged(icx, gate, ready, run, Some(tree), verdicts::Kind::Baseline)
        .instrument(tracing::debug_span!("baseline", gate = %gate.name))
        .await;
    let (g, r, w) = (icx.cx.git.clone(), repo, wt);
    let _ = blocking(move || {
        if let Err(e) = git::remove_worktree(&g, &r, &w) {
            tracing::warn!(path = %w.display(), error = %e, "a baseline worktree could not be removed");
        }
    })
    .await;
    if fin.cancelled {
        return None;
    }
    let b = Baseline {
        commit,
        result: if fin.timed_out {
            GateResult::TimedOut
        } else if fin.spawn_error.is_some() || fin.silenced {
            GateResult::NotRun
        } else if fin.success() {
            GateResult::Passed
        } else {
            GateResult::Failed
        },
        failures: fin.failures.clone(),
        error: fin.spawn_error.clone(),
        ran_for: Some(cached.clone().unwrap_or_else(|| CachedFrom {
            run_id: icx.cx.run_id.clone(),
            repo: icx.item.repo.clone(),
            item: icx.item.id.clone(),
            at: crate::support::clock::now(),
        })),
    };
    let logged = (fin.logged && cached.is_none()).then_some(log);
    send_baseline(
        icx,
        n,
        gate,
        &b,
        cached,
        fin.duration,
        (logged, fin.log_error.clone(), fin.unlogged),
    );
    if let Ok(mut m) = icx.cx.baselines.lock() {
        m.insert(memo, b.clone());
    }
    Some(b)
}

pub(super) fn send_baseline(
    icx: &ItemCx<'_>,
    n: u32,
    gate: &crate::manifest::Gate,
    b: &Baseline,
    cached: Option<CachedFrom>,
    duration: std::time::Duration,
    (log, log_error, unlogged): (Option<PathBuf>, Option<String>, u64),
) {
    let _ = icx.events.send(Event::GateBaseline {
        item: icx.idx,
        n,
        gate: gate.name.clone(),
        commit: b.commit.clone(),
        result: b.result,
        failures: b.failures.iter().map(|f| f.line.clone()).collect(),
        cached,
        duration,
        log,
        log_error,
        unlogged_bytes: (unlogged > 0).then_some(unlogged),
    });
}
