//! The drain: a capacity-bounded pool over the plan's pending items, one run per repository at
//! a time, across processes too (the repository lease).
//!
//! The scheduler is one loop on one task. It admits items while slots are free (the bound is
//! `workers`, lowered by the capacity probe re-read whenever a slot fills), hands a freed slot
//! straight to the next eligible item, feeds the stall guard, and reacts to signals: the first
//! SIGINT/SIGTERM stops admission and ends running trees with their grace period, a second kills
//! at once. Everything it learns goes out as [`Event`]s; it knows none of their consumers.

pub mod chain;
pub mod classify;
pub mod config;
pub mod item;
pub mod stall;

use crate::events::Event;
use crate::lease::{Lease, Record};
use crate::manifest::LoadedManifest;
use crate::plan::{ItemState, Plan};
use crate::process::output::Redactor;
use crate::process::{self, CensusKey, SpawnSpec, Stop};
use crate::vocab::{ItemOutcome, RunEnding};
use item::ItemRun;
use stall::StallGuard;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

/// What the engine reports to and asks of the world outside it: every event, and the decisions
/// that need durable state (claims, pauses). The engine knows this trait, never what is behind
/// it (the ledger, the report, the progress display).
pub trait RunSink {
    /// Record an event. An `ItemFinished` is the item's result, which may wait for the next
    /// claim or [`RunSink::commit_results`] to become durable.
    fn event(&mut self, ev: &Event);
    /// Claim an item for this run before it starts (which also makes the results recorded so
    /// far durable).
    fn claim(&mut self, item: usize) -> ClaimAnswer;
    /// Make every result recorded so far durable; a repository's lease is released only after.
    fn commit_results(&mut self);
    /// Who asked this run to stop, and why, if anyone did.
    fn stop_requested(&mut self) -> Option<String>;
    /// Set once runner cannot record what it does (the ledger failed); the run then stops.
    fn failure(&self) -> Option<String>;
    /// A repository's processes could not be proven gone: keep it out of later runs until an
    /// operator releases it (`runner unlock`).
    fn quarantine(&mut self, repo: &str, path: &std::path::Path, reason: &str);
}

/// The answer to a claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaimAnswer {
    Claimed,
    /// A live run works on it.
    Busy(String),
    /// Another run completed it meanwhile.
    Done(String),
    /// The manifest is paused (by whom, when, why): admit nothing more.
    Paused(String),
}

/// Everything a run needs, fixed before it starts.
pub struct RunCx {
    pub loaded: LoadedManifest,
    pub plan: Plan,
    pub run_id: String,
    /// Unguessable, in every spawned process's environment, to find escaped descendants.
    pub token: String,
    /// `<reports.dir>/<run-id>`: reports and `logs/`.
    pub run_dir: PathBuf,
    pub workspace: PathBuf,
    pub workers: u32,
    pub wait_for_locks: Option<Duration>,
    pub redactor: Arc<Redactor>,
    /// Repositories that could not be cloned, with the (redacted) git error.
    pub clone_errors: HashMap<String, String>,
}

/// How the drain ended.
#[derive(Debug)]
pub struct DrainEnd {
    pub ending: RunEnding,
    pub cause: Option<String>,
    /// The signal that cancelled the run, if any.
    pub signal: Option<i32>,
}

/// Read the capacity probe: an integer of free slots, clamped to 1..=workers. Anything else
/// counts as 1 — never 0, never a stall.
async fn probe(cx: &RunCx, stop: &watch::Receiver<Stop>) -> u32 {
    let Some(cmd) = cx
        .loaded
        .manifest
        .capacity
        .as_ref()
        .and_then(|c| c.probe.clone())
    else {
        return cx.workers;
    };
    // Validation admits no placeholder in the probe.
    let argv = match config::command_argv(&cx.loaded, &cmd, |_| None) {
        Ok(a) => a,
        Err(_) => return 1,
    };
    let env = ["PATH", "HOME", "LANG"]
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
        .collect();
    let fin = process::run(
        SpawnSpec {
            argv,
            cwd: cx.loaded.dir.clone(),
            env,
            log_path: cx.run_dir.join("logs").join("probe.log"),
            timeout: Duration::from_secs(10),
            grace: Duration::from_secs(1),
            silence: None,
            redactor: cx.redactor.clone(),
            inherit_fd: None,
            census: CensusKey {
                token: cx.token.clone(),
                repo: String::new(),
            },
        },
        stop.clone(),
    )
    .await;
    let n = if fin.success() {
        fin.tail.trim().parse::<i64>().ok()
    } else {
        None
    };
    match n {
        Some(n) => n.clamp(1, cx.workers as i64) as u32,
        None => 1,
    }
}

/// Drain the plan. `sink` receives every event, in order, on this task.
pub async fn drain(cx: Arc<RunCx>, sink: &mut dyn RunSink) -> DrainEnd {
    let (stop_tx, stop_rx) = watch::channel(Stop::Run);
    let (ev_tx, mut ev_rx) = mpsc::unbounded_channel::<Event>();
    let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).ok();
    let mut sigterm =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();

    let mut queue: Vec<usize> = cx
        .plan
        .items
        .iter()
        .enumerate()
        .filter(|(_, it)| it.state == ItemState::Pending)
        .map(|(i, _)| i)
        .collect();
    sink.event(&Event::RunStarted {
        run_id: cx.run_id.clone(),
        workers: cx.workers,
        pending: queue.len(),
    });

    let stall_after = cx
        .loaded
        .manifest
        .stall
        .as_ref()
        .and_then(|s| s.after)
        .unwrap_or(crate::manifest::DEFAULT_STALL_AFTER);
    let mut guard = StallGuard::new(stall_after);
    let mut busy: HashSet<String> = HashSet::new();
    let mut quarantined: HashSet<String> = HashSet::new();
    let mut leases: HashMap<usize, Lease> = HashMap::new();
    // Leases of finished items, released once their results are durable.
    let mut settling: Vec<(String, Lease)> = Vec::new();
    // Leases kept because a tree was not proven gone: released only when runner exits.
    let mut kept: Vec<Lease> = Vec::new();
    // Repositories whose lease another run holds: since when, and when to ask again.
    let mut blocked_since: HashMap<String, Instant> = HashMap::new();
    let mut retry_at: HashMap<String, Instant> = HashMap::new();
    let mut running: JoinSet<(usize, ItemRun)> = JoinSet::new();
    let mut task_items: HashMap<tokio::task::Id, usize> = HashMap::new();
    let mut stopping: Option<i32> = None;
    let mut stalled: Option<String> = None;
    let mut paused: Option<String> = None;
    let mut failed: Option<String> = None;

    loop {
        // Admission: fill free slots, the probe re-read each time one fills.
        let mut waiting_for_lock = false;
        if failed.is_none()
            && let Some(f) = sink.failure()
        {
            failed = Some(f);
        }
        if !halted(&stopping, &stalled, &paused, &failed) {
            // A repository is asked for its lease at most once per pass, so that waiting for
            // leases never keeps the loop from the items that finished meanwhile.
            let mut tried: HashSet<String> = HashSet::new();
            loop {
                if running.len() as u32 >= cx.workers {
                    break;
                }
                let Some(pos) = queue.iter().position(|&i| {
                    let repo = &cx.plan.items[i].repo;
                    !busy.contains(repo)
                        && !tried.contains(repo)
                        && retry_at.get(repo).is_none_or(|t| Instant::now() >= *t)
                }) else {
                    break;
                };
                let idx = queue[pos];
                let repo_name = cx.plan.items[idx].repo.clone();
                if quarantined.contains(&repo_name) {
                    queue.remove(pos);
                    finish(sink, idx, ItemOutcome::Held, Some("quarantined"), Some("an earlier item's processes in this repository could not be proven gone".into()));
                    continue;
                }
                if let Some(err) = cx.clone_errors.get(&repo_name) {
                    queue.remove(pos);
                    finish(sink, idx, ItemOutcome::Failed, None, Some(err.clone()));
                    if let Some(c) = guard.halted(stall::HaltSignature {
                        stage: "clone".into(),
                        failure: stall::fingerprint(err, None),
                    }) {
                        stalled = Some(c);
                        break;
                    }
                    continue;
                }
                if !running.is_empty()
                    && cx
                        .loaded
                        .manifest
                        .capacity
                        .as_ref()
                        .is_some_and(|c| c.probe.is_some())
                {
                    // The probe may take a while: let finished items' repositories go first.
                    release_settled(sink, &mut settling, &mut busy);
                    let bound = probe(&cx, &stop_rx).await;
                    if running.len() as u32 >= bound {
                        break;
                    }
                }
                let Some(repo) = cx.plan.repositories.iter().find(|r| r.name == repo_name) else {
                    queue.remove(pos);
                    finish(
                        sink,
                        idx,
                        ItemOutcome::Failed,
                        None,
                        Some("repository missing from the plan".into()),
                    );
                    continue;
                };
                let common = match &repo.common_dir {
                    Some(c) => c.clone(),
                    None => match crate::git::probe(&repo.path) {
                        Ok(p) => p.common_dir,
                        Err(e) => {
                            queue.remove(pos);
                            finish(sink, idx, ItemOutcome::Failed, None, Some(e.to_string()));
                            continue;
                        }
                    },
                };
                // An item another run holds or has completed leaves the queue with that reason.
                let not_ours = match sink.claim(idx) {
                    ClaimAnswer::Claimed => None,
                    ClaimAnswer::Busy(run) => Some((
                        ItemOutcome::Held,
                        "repo-busy",
                        format!("claimed by live run `{run}`"),
                    )),
                    ClaimAnswer::Done(run) => Some((
                        ItemOutcome::Skipped,
                        "done",
                        format!("completed by run `{run}`"),
                    )),
                    ClaimAnswer::Paused(p) => {
                        paused = Some(p);
                        break;
                    }
                };
                if let Some((outcome, reason, cause)) = not_ours {
                    queue.remove(pos);
                    finish(sink, idx, outcome, Some(reason), Some(cause));
                    continue;
                }
                match acquire(&common, Record::this_process(&cx.run_id, &repo_name)).await {
                    Ok(Some(lease)) => {
                        queue.remove(pos);
                        blocked_since.remove(&repo_name);
                        retry_at.remove(&repo_name);
                        busy.insert(repo_name);
                        let fd = lease.fd();
                        leases.insert(idx, lease);
                        let cx2 = cx.clone();
                        let tx = ev_tx.clone();
                        let st = stop_rx.clone();
                        let handle = running.spawn(async move {
                            (idx, item::run_item(cx2, idx, fd, tx, st).await)
                        });
                        task_items.insert(handle.id(), idx);
                    }
                    Ok(None) => {
                        let first = *blocked_since
                            .entry(repo_name.clone())
                            .or_insert_with(Instant::now);
                        let within = cx.wait_for_locks.is_some_and(|w| first.elapsed() < w);
                        if within {
                            waiting_for_lock = true;
                            tried.insert(repo_name.clone());
                            retry_at.insert(repo_name.clone(), Instant::now() + LEASE_RETRY);
                        } else {
                            // Every item of this repository is held: its lease belongs to another run.
                            let holder =
                                crate::lease::read_record(&common.join(crate::lease::RECORD_FILE));
                            let detail = match holder {
                                Some(h) => format!("leased by {h}"),
                                None => "its lease is held by another process".to_string(),
                            };
                            queue.retain(|&i| {
                                if cx.plan.items[i].repo == repo_name {
                                    finish(
                                        sink,
                                        i,
                                        ItemOutcome::Held,
                                        Some("repo-busy"),
                                        Some(detail.clone()),
                                    );
                                    false
                                } else {
                                    true
                                }
                            });
                        }
                    }
                    Err(e) => {
                        queue.remove(pos);
                        finish(sink, idx, ItemOutcome::Failed, None, Some(e.to_string()));
                    }
                }
            }
            if !queue.is_empty()
                && blocked_since
                    .keys()
                    .any(|r| queue.iter().any(|&i| &cx.plan.items[i].repo == r))
            {
                waiting_for_lock = true;
            }
        }

        // Finished items' results became durable with the claims just made, or now; only then
        // are their leases let go, and their repositories may take the next item at once.
        if !settling.is_empty() {
            release_settled(sink, &mut settling, &mut busy);
            continue;
        }

        if running.is_empty() {
            // Nothing runs; go on only to wait for a lease another run holds.
            let can_wait = waiting_for_lock
                && !halted(&stopping, &stalled, &paused, &failed)
                && !queue.is_empty();
            if !can_wait {
                break;
            }
        }

        tokio::select! {
            Some(ev) = ev_rx.recv() => sink.event(&ev),
            Some(joined) = running.join_next(), if !running.is_empty() => {
                // Events sent before the task ended come first.
                while let Ok(ev) = ev_rx.try_recv() {
                    sink.event(&ev);
                }
                let (idx, run) = match joined {
                    Ok((idx, run)) => {
                        task_items.retain(|_, i| *i != idx);
                        (idx, run)
                    }
                    Err(e) => {
                        // A panicked item task: record it as failed; the run goes on. Its
                        // processes were not accounted for, so its repository is quarantined.
                        let Some(idx) = task_items.get(&e.id()).copied() else {
                            continue;
                        };
                        (idx, ItemRun { outcome: ItemOutcome::Failed, reason: None, cause: Some(format!("internal error: {e}")), progress: false, halt: None, tree_gone: false })
                    }
                };
                let repo = cx.plan.items[idx].repo.clone();
                let outcome = run.outcome;
                let cause = if !run.tree_gone {
                    Some(format!("{}; its processes could not be proven gone, so repository `{repo}` is quarantined", run.cause.clone().unwrap_or_default()))
                } else {
                    run.cause.clone()
                };
                // Recorded before the lease is let go: the next holder must see the result. The
                // repository stays busy until then.
                finish(sink, idx, outcome, run.reason.as_deref(), cause);
                match leases.remove(&idx) {
                    Some(lease) if run.tree_gone => settling.push((repo.clone(), lease)),
                    None => {
                        busy.remove(&repo);
                    }
                    Some(lease) => {
                        busy.remove(&repo);
                        quarantined.insert(repo.clone());
                        if let Some(r) = cx.plan.repositories.iter().find(|r| r.name == repo) {
                            sink.quarantine(
                                &repo,
                                &r.path,
                                "processes of an item could not be proven gone",
                            );
                        }
                        kept.push(lease);
                    }
                }
                if run.progress {
                    guard.progress();
                }
                if matches!(outcome, ItemOutcome::Halted | ItemOutcome::Failed)
                    && let Some(sig) = run.halt
                    && let Some(c) = guard.halted(sig)
                    && stalled.is_none()
                {
                    stalled = Some(c);
                }
            }
            _ = recv_signal(&mut sigint) => {
                on_signal(&mut stopping, libc::SIGINT, &stop_tx);
            }
            _ = recv_signal(&mut sigterm) => {
                on_signal(&mut stopping, libc::SIGTERM, &stop_tx);
            }
            _ = tokio::time::sleep(LEASE_RETRY), if waiting_for_lock => {}
        }
    }
    while let Ok(ev) = ev_rx.try_recv() {
        sink.event(&ev);
    }
    let stop_by = if stopping.is_some() {
        sink.stop_requested()
    } else {
        None
    };
    let leftover_cause = match (&stopping, &stalled, &failed) {
        (Some(sig), _, _) => format!(
            "not started: the run was cancelled by {}",
            signal_name(*sig)
        ),
        (None, Some(_), _) => "not started: the run stalled".to_string(),
        (None, None, Some(_)) => "not started: runner could not record its work".to_string(),
        _ => "not started".to_string(),
    };
    for idx in queue {
        match &paused {
            Some(p) if stopping.is_none() && stalled.is_none() && failed.is_none() => finish(
                sink,
                idx,
                ItemOutcome::Held,
                Some("paused"),
                Some(p.clone()),
            ),
            _ => finish(
                sink,
                idx,
                ItemOutcome::Cancelled,
                None,
                Some(leftover_cause.clone()),
            ),
        }
    }
    drop(kept);
    let (ending, cause) = if let Some(sig) = stopping {
        let who = match stop_by {
            Some(by) => format!("cancelled by {by} ({})", signal_name(sig)),
            None => format!("cancelled by {} (unattributed)", signal_name(sig)),
        };
        (RunEnding::Cancelled, Some(who))
    } else if let Some(f) = failed {
        (RunEnding::Failed, Some(f))
    } else if let Some(c) = stalled {
        (RunEnding::Stalled, Some(c))
    } else if let Some(p) = paused {
        (RunEnding::Paused, Some(p))
    } else if cx.plan.items.is_empty() {
        (
            RunEnding::NothingFound,
            Some("no work item was found in any repository".to_string()),
        )
    } else {
        (RunEnding::Drained, None)
    };
    sink.event(&Event::RunEnded {
        ending,
        cause: cause.clone(),
    });
    DrainEnd {
        ending,
        cause,
        signal: stopping,
    }
}

/// Take a repository's lease. A lock can be held for an instant by a process of runner's own
/// that is between `fork` and `exec` (the descriptor is copied, then closed at exec), so a busy
/// answer is asked again a few times over a short moment before it counts.
async fn acquire(
    common: &std::path::Path,
    holder: Record,
) -> Result<Option<Lease>, crate::lease::LeaseError> {
    for _ in 0..5 {
        if let Some(l) = Lease::try_acquire(common, holder.clone())? {
            return Ok(Some(l));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Lease::try_acquire(common, holder)
}

/// Make the finished items' results durable, then release their leases and free their
/// repositories.
fn release_settled(
    sink: &mut dyn RunSink,
    settling: &mut Vec<(String, Lease)>,
    busy: &mut HashSet<String>,
) {
    if settling.is_empty() {
        return;
    }
    sink.commit_results();
    for (repo, lease) in settling.drain(..) {
        lease.release();
        busy.remove(&repo);
    }
}

/// Whether admission has stopped for good: a signal, a stall, a pause or a ledger failure.
fn halted(
    stopping: &Option<i32>,
    stalled: &Option<String>,
    paused: &Option<String>,
    failed: &Option<String>,
) -> bool {
    stopping.is_some() || stalled.is_some() || paused.is_some() || failed.is_some()
}

/// How often a lease another run holds is asked for again while waiting for it.
const LEASE_RETRY: Duration = Duration::from_millis(100);

fn finish(
    sink: &mut dyn RunSink,
    item: usize,
    outcome: ItemOutcome,
    reason: Option<&str>,
    cause: Option<String>,
) {
    sink.event(&Event::ItemFinished {
        item,
        outcome,
        reason: reason.map(str::to_string),
        cause,
    });
}

async fn recv_signal(s: &mut Option<tokio::signal::unix::Signal>) {
    match s {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending::<()>().await,
    }
}

fn on_signal(stopping: &mut Option<i32>, sig: i32, stop: &watch::Sender<Stop>) {
    if stopping.is_some() {
        // Second signal: kill at once.
        let _ = stop.send(Stop::Immediate);
    } else {
        *stopping = Some(sig);
        let _ = stop.send(Stop::Graceful);
    }
}

pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        _ => "a signal",
    }
}
