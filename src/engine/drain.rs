//! The effect loop: performs the [`Scheduler`]'s decisions and reports back what came of them.
//!
//! One loop on one task. It asks the scheduler what next and does it — reads the capacity probe,
//! claims an item and takes its repository's lease, starts the item's task, records an item's
//! result — and otherwise waits for an item to finish, a signal, or a lease to be asked for
//! again. A finished item's lease is released only once its result is durable
//! ([`RunSink::commit_results`]); a lease whose tree was not proven gone is kept until runner
//! exits and the repository quarantined. Nothing here decides; nothing here blocks.

use super::config;
use super::item::{self, ItemRun};
use super::run::{ClaimAnswer, DrainEnd, RepoLock, RunCx, RunSink};
use super::scheduler::{Admission, Decision, Scheduler, Settled, Setup, StopLevel};
use crate::events::Event;
use crate::lease::{Lease, Record};
use crate::plan::ItemState;
use crate::process::{self, CensusKey, SpawnSpec, Stop};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tracing::{Instrument, debug, info, trace};

/// How often a run on a shared ledger looks for a stop asked for from another machine.
const STOP_POLL: Duration = Duration::from_secs(2);

/// The item tasks of a run, and the leases they hold.
struct Pool {
    tasks: JoinSet<(usize, ItemRun)>,
    task_items: HashMap<tokio::task::Id, usize>,
    leases: HashMap<usize, Lease>,
    /// Leases of finished items, released once their results are durable.
    settling: Vec<(String, Lease)>,
    /// Leases kept because a tree was not proven gone: released only when runner exits.
    kept: Vec<Lease>,
    /// Dead runs and repositories whose leftovers were ended (or found gone) already.
    reaped: std::collections::HashSet<(String, String)>,
    /// Tokens of dead runs no process carries any more (each was scanned for once).
    tokens_ended: std::collections::HashSet<String>,
    /// Where item tasks ask to rest between attempts.
    rest_tx: mpsc::UnboundedSender<item::Rest>,
    /// Resting items, each woken through its sender when it may go on.
    resting: HashMap<usize, tokio::sync::oneshot::Sender<()>>,
    /// Items whose repository's lease another process held when they were first admitted, and
    /// since when.
    lease_wait: HashMap<usize, Instant>,
}

/// Drain the plan. `sink` receives every event, in order, on this task.
pub async fn drain(cx: Arc<RunCx>, sink: &mut dyn RunSink) -> DrainEnd {
    let span = tracing::info_span!("run", run = %cx.run_id);
    drain_in_span(cx, sink).instrument(span).await
}

/// `repo/id` of an item, for logs.
fn label(cx: &RunCx, idx: usize) -> String {
    let it = &cx.plan.items[idx];
    format!("{}/{}", it.repo, it.id)
}

async fn drain_in_span(cx: Arc<RunCx>, sink: &mut dyn RunSink) -> DrainEnd {
    let (stop_tx, stop_rx) = watch::channel(Stop::Run);
    let (ev_tx, mut ev_rx) = mpsc::unbounded_channel::<Event>();
    let (rest_tx, mut rest_rx) = mpsc::unbounded_channel::<item::Rest>();
    // Who sends a stop signal is recorded from the signal itself.
    process::signals::record_senders();
    let mut signal_from: Option<String> = None;
    let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).ok();
    let mut sigterm =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    // A closed terminal or SSH session: stopped like SIGTERM, never killed outright.
    let mut sighup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();

    let queue: Vec<usize> = cx
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
        containment: Some(crate::events::ContainmentInfo {
            mode: cx.contained.mode,
            detail: cx.contained.detail(),
        }),
    });
    let m = &cx.loaded.manifest;
    let mut sched = Scheduler::new(Setup {
        repo_of: cx.plan.items.iter().map(|it| it.repo.clone()).collect(),
        queue,
        workers: cx.workers,
        probe: m.capacity.as_ref().is_some_and(|c| c.probe.is_some()),
        wait_for_locks: cx.wait_for_locks,
        stall_after: m
            .stall
            .as_ref()
            .and_then(|s| s.after)
            .unwrap_or(crate::manifest::DEFAULT_STALL_AFTER),
        clone_errors: cx.clone_errors.clone(),
        nothing_found: cx.plan.items.is_empty(),
        paused: cx.paused.clone(),
        budget: m.budget.map(|b| b.cost_usd),
        estimates: cx.plan.estimates(),
    });
    let mut pool = Pool {
        tasks: JoinSet::new(),
        task_items: HashMap::new(),
        leases: HashMap::new(),
        settling: Vec::new(),
        kept: Vec::new(),
        reaped: Default::default(),
        tokens_ended: Default::default(),
        rest_tx,
        resting: HashMap::new(),
        lease_wait: HashMap::new(),
    };

    // The manifest's bound holds across its runs on this host: each running item holds one of
    // `capacity.workers` host-wide slots. A nested run (started by a worker) runs inside its
    // parent's item and its slot.
    let mut slots = cx.parent_token.is_none().then(|| {
        crate::lease::HostSlots::new(&m.name, crate::plan::effective_workers(&cx.loaded, None))
    });
    // Each model asked its probe question before the first item starts: a refused key stops
    // the run here, with every item held; a stop meanwhile ends the probes.
    if cx.probe_models {
        let probing = probe_models(&cx, sink, &stop_rx);
        tokio::pin!(probing);
        let refusal = loop {
            tokio::select! {
                r = &mut probing => break r,
                _ = recv_signal(&mut sigint) => on_signal(&cx, &mut sched, libc::SIGINT, &stop_tx, &mut signal_from),
                _ = recv_signal(&mut sigterm) => on_signal(&cx, &mut sched, libc::SIGTERM, &stop_tx, &mut signal_from),
                _ = recv_signal(&mut sighup) => on_signal(&cx, &mut sched, libc::SIGHUP, &stop_tx, &mut signal_from),
            }
        };
        if let Some(cause) = refusal {
            sched.refused_before_start(cause);
        }
    }
    let polls_stop = sink.polls_stop();
    let mut stop_poll = tokio::time::interval(STOP_POLL);
    stop_poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if let Some(f) = sink.failure() {
            sched.ledger_failed(f);
        }
        // What no longer runs (finished, resting) gives its host slot back.
        if let Some(s) = slots.as_mut() {
            s.trim(sched.running());
        }
        let until = match sched.next(Instant::now()) {
            Decision::Probe => {
                // The probe may take a while: let finished items' repositories go first.
                release_settled(&cx, sink, &mut pool, &mut sched);
                let bound = probe(&cx, &stop_rx).await;
                debug!(bound, running = sched.running(), "capacity probe read");
                sched.probed(bound);
                continue;
            }
            Decision::Resume(idx) => {
                // A host slot first: the scheduler counts the item as running again.
                let slot = slots
                    .as_mut()
                    .map_or(Ok(true), |s| s.ensure(sched.running()));
                if !matches!(slot, Ok(true)) && sched.stopped_by().is_none() {
                    debug!(item = %label(&cx, idx), "rest over, but the host's slots are taken: resting a little more");
                    sched.rest(idx, Instant::now() + crate::engine::scheduler::LEASE_RETRY);
                    continue;
                }
                debug!(item = %label(&cx, idx), "rest over: the item goes on");
                if let Some(wake) = pool.resting.remove(&idx) {
                    let _ = wake.send(());
                }
                continue;
            }
            Decision::Admit(idx) => {
                let slot = slots
                    .as_mut()
                    .map_or(Ok(true), |s| s.ensure(sched.running() + 1));
                let answer = match slot {
                    Ok(true) => admit(&cx, sink, &mut pool, idx, &ev_tx, &stop_rx).await,
                    Ok(false) => Admission::HostFull,
                    Err(e) => Admission::Failed(format!(
                        "cannot take a host-wide worker slot of the manifest: {e}"
                    )),
                };
                debug!(item = %label(&cx, idx), ?answer, running = sched.running(), "admission");
                // How long an item waited for its repository's lease, once it has it.
                match &answer {
                    Admission::LeaseBusy { .. } => {
                        pool.lease_wait.entry(idx).or_insert_with(Instant::now);
                    }
                    Admission::Started => {
                        if let Some(since) = pool.lease_wait.remove(&idx) {
                            sink.event(&Event::LeaseWaited {
                                item: idx,
                                waited: since.elapsed(),
                            });
                        }
                    }
                    _ => {
                        pool.lease_wait.remove(&idx);
                    }
                }
                sched.admitted(idx, answer, Instant::now());
                continue;
            }
            Decision::Settle(s) => {
                debug!(
                    item = %label(&cx, s.item),
                    outcome = s.outcome.as_str(),
                    reason = s.reason.as_deref(),
                    cause = s.cause.as_deref(),
                    "item settled"
                );
                finish(sink, s);
                continue;
            }
            Decision::Done => {
                debug!("nothing runs and nothing more will: the drain is over");
                break;
            }
            Decision::Wait { until } => {
                trace!(running = sched.running(), ?until, "waiting");
                until
            }
        };
        // Finished items' results became durable with the claims just made, or now; only then
        // are their leases let go, and their repositories may take the next item at once.
        if !pool.settling.is_empty() {
            release_settled(&cx, sink, &mut pool, &mut sched);
            continue;
        }
        let sleep = async {
            match until {
                Some(t) => tokio::time::sleep_until(t.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            Some(ev) = ev_rx.recv() => pass(sink, &mut sched, &ev),
            Some(rest) = rest_rx.recv() => {
                // Events sent before the request (the attempt that failed) come first.
                while let Ok(ev) = ev_rx.try_recv() {
                    pass(sink, &mut sched, &ev);
                }
                let until = Instant::now() + rest.wait;
                debug!(item = %label(&cx, rest.item), wait_ms = rest.wait.as_millis() as u64, "item rests");
                sched.rest(rest.item, until);
                pool.resting.insert(rest.item, rest.wake);
            }
            Some(joined) = pool.tasks.join_next(), if !pool.tasks.is_empty() => {
                // Events sent before the task ended come first.
                while let Ok(ev) = ev_rx.try_recv() {
                    pass(sink, &mut sched, &ev);
                }
                let (idx, run) = match joined {
                    Ok((idx, run)) => {
                        pool.task_items.retain(|_, i| *i != idx);
                        (idx, run)
                    }
                    Err(e) => {
                        // A panicked item task: record it as failed; the run goes on. Its
                        // processes were not accounted for, so its repository is quarantined.
                        let Some(idx) = pool.task_items.remove(&e.id()) else {
                            continue;
                        };
                        let mut run = ItemRun::ended(crate::vocab::ItemOutcome::Failed);
                        run.cause = Some(format!("internal error: {e}"));
                        run.tree_gone = false;
                        (idx, run)
                    }
                };
                item_ended(&cx, sink, &mut pool, &mut sched, idx, run);
            }
            _ = recv_signal(&mut sigint) => on_signal(&cx, &mut sched, libc::SIGINT, &stop_tx, &mut signal_from),
            _ = recv_signal(&mut sigterm) => on_signal(&cx, &mut sched, libc::SIGTERM, &stop_tx, &mut signal_from),
            _ = recv_signal(&mut sighup) => on_signal(&cx, &mut sched, libc::SIGHUP, &stop_tx, &mut signal_from),
            _ = stop_poll.tick(), if polls_stop && sched.stopped_by().is_none() => {
                // `runner cancel` on another machine records its request in the shared ledger;
                // it stops this run as SIGTERM would.
                if let Some(by) = sink.stop_requested() {
                    signal_from.get_or_insert(by);
                    on_signal(&cx, &mut sched, libc::SIGTERM, &stop_tx, &mut signal_from);
                }
            }
            _ = sleep => {}
        }
    }
    while let Ok(ev) = ev_rx.try_recv() {
        pass(sink, &mut sched, &ev);
    }
    let signal = sched.stopped_by();
    // An operator's recorded request (`runner cancel`) names who and why; otherwise the signal's
    // sender, as the kernel gave it.
    let stop_by = signal.and_then(|_| sink.stop_requested().or(signal_from));
    let (left, ending, cause) = sched.finish(stop_by);
    for s in left {
        finish(sink, s);
    }
    // Orphans no item could claim (they cleared their environment while several items ran)
    // end with the run.
    process::census::end_adopted(Duration::from_secs(2)).await;
    drop(pool);
    sink.event(&Event::RunEnded {
        ending,
        cause: cause.clone(),
    });
    DrainEnd {
        ending,
        cause,
        signal,
    }
}

/// End what dead run `prev` left: the processes in the item's cgroup (when it had one) and every
/// process carrying its token, wherever it is. The pids found, or `Err` with those left.
pub(crate) async fn end_left(prev: &Record) -> Result<Vec<i32>, Vec<i32>> {
    end_left_in(prev, true).await
}

/// [`end_left`]; with `by_token` false, only what is in the item's cgroups (the processes
/// carrying the dead run's token were ended already, for another of its repositories).
async fn end_left_in(prev: &Record, by_token: bool) -> Result<Vec<i32>, Vec<i32>> {
    let grace = Duration::from_secs(5);
    let mut found = crate::process::cgroup::end_left(&prev.cgroups, grace).await?;
    if by_token && !prev.token.is_empty() {
        found.extend(crate::process::census::end_token(&prev.token, grace).await?);
    }
    found.sort_unstable();
    found.dedup();
    Ok(found)
}

/// Claim item `idx`, take its repository's lease, and start it.
async fn admit(
    cx: &Arc<RunCx>,
    sink: &mut dyn RunSink,
    pool: &mut Pool,
    idx: usize,
    ev_tx: &mpsc::UnboundedSender<Event>,
    stop_rx: &watch::Receiver<Stop>,
) -> Admission {
    let repo_name = &cx.plan.items[idx].repo;
    let Some(repo) = cx.plan.repositories.iter().find(|r| &r.name == repo_name) else {
        return Admission::Failed("repository missing from the plan".into());
    };
    // Planning found the repository; its git common dir (where the lease lives) came with it.
    let Some(common) = &repo.common_dir else {
        return Admission::Failed(format!(
            "repository `{repo_name}` has no git common dir in the plan"
        ));
    };
    // A run that died (killed, the machine's power) left its processes behind, perhaps still
    // working here: they are ended before anything starts in the repository.
    let own = Record::this_process(&cx.run_id, repo_name, &cx.token)
        .in_cgroups(cx.contained.item_dirs(repo_name));
    if let Some(prev) = crate::lease::recorded_other(common, &own)
        && prev.run_id != cx.run_id
        && (!prev.token.is_empty() || !prev.cgroups.is_empty())
        && !pool
            .reaped
            .contains(&(prev.run_id.clone(), repo_name.clone()))
        && prev.holder.is_dead()
        && !sink.ended(&prev.run_id)
    {
        // A dead run's token is the same in all its repositories, and once no process carries
        // it none ever will again (only its carriers and the dead runner could start one): the
        // whole machine is scanned for it once, not once per repository.
        let by_token = !pool.tokens_ended.contains(&prev.token);
        match end_left_in(&prev, by_token).await {
            Ok(pids) => {
                pool.reaped.insert((prev.run_id.clone(), repo_name.clone()));
                pool.tokens_ended.insert(prev.token.clone());
                if !pids.is_empty() {
                    tracing::info!(run = %prev.run_id, ?pids, repo = %repo_name, "ended processes a dead run left");
                    sink.event(&Event::Reaped {
                        item: idx,
                        run: prev.run_id.clone(),
                        pids,
                    });
                }
            }
            Err(left) => {
                return Admission::Failed(format!(
                    "processes {left:?} that dead run `{}` left in repository `{repo_name}` could not be ended",
                    prev.run_id
                ));
            }
        }
    }
    // The lease first, then the claim: a claim is never held without the lease, so an item
    // another run has claimed is one that run is working on. A busy lease is not waited for
    // here, on the loop: the scheduler asks again (a lock is also held for an instant by a
    // process of runner's own between `fork` and `exec`, which copies the descriptor).
    let lease = match Lease::try_acquire(common, own) {
        Ok(Some(lease)) => lease,
        Ok(None)
            if let Some(lease) = cx
                .parent_token
                .as_deref()
                .and_then(|t| Lease::reenter(common, t)) =>
        {
            lease
        }
        Ok(None) => {
            let holder = crate::lease::read_held_record(&common.join(crate::lease::RECORD_FILE));
            let cooperating = holder.as_ref().is_some_and(|h| sink.live_run(&h.run_id));
            return Admission::LeaseBusy {
                holder: holder.map(|h| h.to_string()),
                cooperating,
            };
        }
        Err(e) => return Admission::Failed(e.to_string()),
    };
    // Runners on other machines share the ledger, not this checkout's lease.
    let shared = match sink.lock_repo(repo_name) {
        Ok(RepoLock::Held) => true,
        Ok(RepoLock::NoSharedLock) => false,
        Ok(RepoLock::Busy) => {
            lease.release();
            return Admission::LeaseBusy {
                holder: Some("a runner on another machine (the shared ledger's lock)".into()),
                cooperating: true,
            };
        }
        Err(e) => {
            lease.release();
            return Admission::Failed(e);
        }
    };
    let not_ours = match sink.claim(idx) {
        ClaimAnswer::Claimed => None,
        // Holding the repository's shared lock, which whoever works there holds until its
        // result is recorded: the claim is a stopped runner's (a machine gone). Waited for until
        // the ledger judges it dead (its heartbeat lapsed) and lets it be taken over, so its
        // items are not left undone.
        ClaimAnswer::Taken(run) if shared => Some(Admission::LeaseBusy {
            holder: Some(format!(
                "a claim of run `{run}`, whose runner holds no lock on the repository (waiting for its heartbeat to lapse)"
            )),
            cooperating: true,
        }),
        ClaimAnswer::Taken(run) => Some(Admission::ClaimedElsewhere { run }),
        ClaimAnswer::Done { run, outcome } => Some(Admission::DoneElsewhere { run, outcome }),
        ClaimAnswer::Paused(p) => Some(Admission::Paused(p)),
        ClaimAnswer::Failed(e) => Some(Admission::Failed(e)),
    };
    if let Some(answer) = not_ours {
        sink.unlock_repo(repo_name);
        lease.release();
        return answer;
    }
    let fd = lease.fd();
    pool.leases.insert(idx, lease);
    let (cx2, tx, st, rest) = (
        cx.clone(),
        ev_tx.clone(),
        stop_rx.clone(),
        pool.rest_tx.clone(),
    );
    let span = tracing::info_span!("item", repo = %repo_name, item = %cx.plan.items[idx].id);
    let handle = pool.tasks.spawn(
        async move { (idx, item::run_item(cx2, idx, fd, tx, rest, st).await) }.instrument(span),
    );
    pool.task_items.insert(handle.id(), idx);
    Admission::Started
}

/// An item's task ended: record its result before its lease is let go (the next holder must
/// see it); a lease whose tree was not proven gone is kept and the repository quarantined.
fn item_ended(
    cx: &RunCx,
    sink: &mut dyn RunSink,
    pool: &mut Pool,
    sched: &mut Scheduler,
    idx: usize,
    run: ItemRun,
) {
    let repo = cx.plan.items[idx].repo.clone();
    let tree_gone = run.tree_gone;
    debug!(
        item = %label(cx, idx),
        outcome = run.outcome.as_str(),
        tree_gone,
        progress = run.progress,
        "item ended"
    );
    let settled = sched.finished(idx, run);
    finish(sink, settled);
    let Some(lease) = pool.leases.remove(&idx) else {
        sched.released(&repo);
        return;
    };
    if tree_gone {
        pool.settling.push((repo, lease));
    } else {
        if let Some(r) = cx.plan.repositories.iter().find(|r| r.name == repo) {
            let reason = "processes of an item could not be proven gone";
            // Kept with the repository, where every manifest's run sees it; and in the ledger.
            if let Some(common) = &r.common_dir {
                let q = crate::lease::Quarantine {
                    run_id: cx.run_id.clone(),
                    reason: format!("repository `{repo}`: {reason}"),
                    at: crate::support::clock::now(),
                    lifted: None,
                };
                if let Err(e) = crate::lease::quarantine(common, &q) {
                    tracing::error!(%repo, "cannot record the quarantine: {e}");
                }
            }
            sink.quarantine(&repo, &r.path, reason);
        }
        pool.kept.push(lease);
    }
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
            count_lines: None,
            failure_roots: None,
            cgroup: None,
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

/// Make the finished items' results durable, then release their leases and free their
/// repositories.
fn release_settled(cx: &RunCx, sink: &mut dyn RunSink, pool: &mut Pool, sched: &mut Scheduler) {
    if pool.settling.is_empty() {
        return;
    }
    sink.commit_results();
    for (repo, lease) in pool.settling.drain(..) {
        debug!(%repo, "results durable: lease released");
        sink.unlock_repo(&repo);
        lease.release();
        sched.released(&repo);
        if sched.done_with(&repo) {
            cx.contained.done_with(&repo);
        }
    }
}

fn finish(sink: &mut dyn RunSink, s: Settled) {
    sink.event(&Event::ItemFinished {
        item: s.item,
        outcome: s.outcome,
        reason: s.reason,
        cause: s.cause,
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

/// Hand an item's event on to the sink; a worker's reported cost is the scheduler's to weigh
/// against the budget.
fn pass(sink: &mut dyn RunSink, sched: &mut Scheduler, ev: &Event) {
    sink.event(ev);
    let cause = match ev {
        Event::Usage { usage, .. } => match usage.cost_usd {
            Some(c) => sched.spent(c),
            None => sched.cost_unknown("its worker reported tokens but no cost"),
        },
        Event::UsageUnknown { why, .. } => sched.cost_unknown(why),
        _ => None,
    };
    if let Some(cause) = cause {
        info!(%cause, "budget spent: no new item starts");
    }
}

/// The probe before the queue (`worker.probe`) of every model the pending items would use; a
/// refused model is dropped for the run. When no pending item has a model left, why.
async fn probe_models(
    cx: &RunCx,
    sink: &mut dyn RunSink,
    stop: &watch::Receiver<process::Stop>,
) -> Option<String> {
    let mut entries: Vec<usize> = Vec::new();
    for it in cx
        .plan
        .items
        .iter()
        .filter(|it| it.state == ItemState::Pending)
    {
        if let Some(r) = cx.plan.repositories.iter().find(|r| r.name == it.repo)
            && !entries.contains(&r.entry)
        {
            entries.push(r.entry);
        }
    }
    if !super::preflight::wanted(&cx.loaded, &entries) {
        return None;
    }
    let probes = super::preflight::probe_models(
        &cx.loaded,
        &entries,
        super::preflight::ProbeRun {
            redactor: cx.redactor.clone(),
            token: &cx.token,
            run_id: &cx.run_id,
            logs: &cx.run_dir.join("logs"),
            scratch_in: &cx.workspace.join("probes"),
        },
        stop.clone(),
    )
    .await;
    let mut health = cx.health.lock().unwrap_or_else(|p| p.into_inner());
    for p in probes {
        if p.verdict == crate::vocab::ProbeVerdict::Refused {
            health.refuse(&p.model, p.message.as_deref().unwrap_or("no message"));
        }
        sink.event(&Event::Probed {
            model: p.model,
            verdict: p.verdict,
            message: p.message,
            duration: p.duration,
        });
    }
    if *stop.borrow() != process::Stop::Run {
        return None;
    }
    // Nothing to stop for while one item has a model its provider accepts.
    let now = Instant::now();
    let mut causes = Vec::new();
    for &entry in &entries {
        let chain: Vec<String> = super::config::effective(&cx.loaded, entry)
            .models
            .map(|m| m.chain().into_iter().map(str::to_string).collect())
            .unwrap_or_default();
        if chain.is_empty() || health.start(&chain, now).is_some() {
            return None;
        }
        let cause = health.refusal_cause(&chain);
        if !causes.contains(&cause) {
            causes.push(cause);
        }
    }
    (!causes.is_empty()).then(|| causes.join("; "))
}

fn on_signal(
    cx: &RunCx,
    sched: &mut Scheduler,
    sig: i32,
    stop: &watch::Sender<Stop>,
    from: &mut Option<String>,
) {
    let level = sched.signal(sig);
    // The first stop's sender is the one that ended the run; read now, while it may still run.
    if from.is_none() {
        *from = process::signals::sender_of(sig).map(|s| s.describe(|t| cx.redactor.redact(t)));
    }
    info!(
        signal = super::run::signal_name(sig),
        ?level,
        from = from.as_deref(),
        "stop requested"
    );
    // runner's own git calls in flight end too (a clone of a large repository, a hung filter).
    process::stop_helpers();
    let _ = stop.send(match level {
        StopLevel::Graceful => Stop::Graceful,
        StopLevel::Immediate => Stop::Immediate,
    });
}
