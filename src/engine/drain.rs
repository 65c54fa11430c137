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
    lease_wait: HashMap<usize, (Instant, Option<String>)>,
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
    let mut d = Drain::start(cx, sink);
    // What quarantined repositories' items left is looked for, and ended, first (not by a run
    // nested in a worker, which stays inside its own repository).
    if d.cx.parent_token.is_none() {
        super::watch::keep_watch(&d.cx, d.sink).await;
    }
    // Each model asked its probe question before the first item starts: a refused key stops
    // the run here, with every item held; a stop meanwhile ends the probes.
    if d.cx.probe_models {
        d.probe_models_first().await;
    }
    let mut stop_poll = tokio::time::interval(STOP_POLL);
    stop_poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let until = match d.step().await {
            Step::Again => continue,
            Step::Done => break,
            Step::Wait(until) => until,
        };
        // Finished items' results became durable with the claims just made, or now; only then
        // are their leases let go, and their repositories may take the next item at once.
        if !d.pool.settling.is_empty() {
            release_settled(&d.cx, d.sink, &mut d.pool, &mut d.sched).await;
            continue;
        }
        // What no longer runs (finished, resting) gives its host slot back, now that the loop
        // waits and no item of this run takes it: until then a slot goes from an item that
        // ended to the next without being let go (given back and taken again, it could be found
        // still locked by a copy of runner's descriptors in a child that has not yet closed
        // them, and the next item would wait for a poll; and taking it again costs a lock file
        // opened and locked an item).
        if let Some(s) = d.slots.as_mut() {
            s.trim(d.sched.running());
        }
        d.wait(until, &mut stop_poll).await;
    }
    d.end().await
}

/// A stop signal as the event loop hears of it: which, and who sent it (read when it came, while
/// the sender may still run).
struct Heard {
    sig: i32,
    from: Option<String>,
}

/// Stop signals heeded whatever the event loop is doing (awaiting a ledger whose server is
/// away, say): the items are told at once (the first signal stops them gracefully, a later one
/// at once), runner's own git calls end, and the loop hears of it to stop admitting.
fn heed_signals(cx: &RunCx, stop: watch::Sender<Stop>) -> mpsc::UnboundedReceiver<Heard> {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut signals = Signals::listen();
    let redactor = cx.redactor.clone();
    tokio::spawn(async move {
        loop {
            let sig = signals.next().await;
            let from = process::signals::sender_of(sig).map(|s| s.describe(|t| redactor.redact(t)));
            // runner's own git calls in flight end too (a clone of a large repository, a hung
            // filter).
            process::stop_helpers();
            let level = if *stop.borrow() == Stop::Run {
                Stop::Graceful
            } else {
                Stop::Immediate
            };
            let _ = stop.send(level);
            if tx.send(Heard { sig, from }).is_err() {
                break;
            }
        }
    });
    rx
}

/// The signals that stop a run. A closed terminal or SSH session (SIGHUP) is stopped like
/// SIGTERM, never killed outright.
struct Signals {
    int: Option<tokio::signal::unix::Signal>,
    term: Option<tokio::signal::unix::Signal>,
    hup: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn listen() -> Signals {
        use tokio::signal::unix::{SignalKind, signal};
        // Who sends a stop signal is recorded from the signal itself.
        process::signals::record_senders();
        Signals {
            int: signal(SignalKind::interrupt()).ok(),
            term: signal(SignalKind::terminate()).ok(),
            hup: signal(SignalKind::hangup()).ok(),
        }
    }

    /// The next stop signal to arrive.
    async fn next(&mut self) -> i32 {
        tokio::select! {
            _ = recv_signal(&mut self.int) => libc::SIGINT,
            _ = recv_signal(&mut self.term) => libc::SIGTERM,
            _ = recv_signal(&mut self.hup) => libc::SIGHUP,
        }
    }
}

/// What the loop does after a decision.
enum Step {
    /// Ask the scheduler again at once.
    Again,
    /// Nothing runs and nothing more will.
    Done,
    /// Wait for an item, a signal, or this instant.
    Wait(Option<Instant>),
}

/// A drain under way: the scheduler that decides, and what its decisions act on.
struct Drain<'s> {
    cx: Arc<RunCx>,
    sink: &'s mut dyn RunSink,
    sched: Scheduler,
    pool: Pool,
    /// The manifest's host-wide worker slots (none for a nested run).
    slots: Option<crate::lease::HostSlots>,
    stop_tx: watch::Sender<Stop>,
    stop_rx: watch::Receiver<Stop>,
    /// The stop signals received.
    heard: mpsc::UnboundedReceiver<Heard>,
    ev_tx: mpsc::UnboundedSender<Event>,
    ev_rx: mpsc::UnboundedReceiver<Event>,
    rest_rx: mpsc::UnboundedReceiver<item::Rest>,
    /// Who sent the first stop signal.
    signal_from: Option<String>,
    /// The ledger is shared: a stop may be asked for from another machine.
    polls_stop: bool,
}

impl<'s> Drain<'s> {
    /// The queue of pending items handed to a new scheduler, and the run's start told.
    fn start(cx: Arc<RunCx>, sink: &'s mut dyn RunSink) -> Drain<'s> {
        let (stop_tx, stop_rx) = watch::channel(Stop::Run);
        let (ev_tx, ev_rx) = mpsc::unbounded_channel::<Event>();
        let (rest_tx, rest_rx) = mpsc::unbounded_channel::<item::Rest>();
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
                sandbox: Some(cx.sandbox.summary.clone()),
            }),
        });
        let m = &cx.loaded.manifest;
        let sched = Scheduler::new(Setup {
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
            unreadable: (!cx.plan.unreadable_sources.is_empty()).then(|| {
                cx.plan
                    .unreadable_sources
                    .iter()
                    .map(|s| format!("source `{}` could not be read: {}", s.name, s.detail))
                    .collect::<Vec<_>>()
                    .join("; ")
            }),
            paused: cx.paused.clone(),
            budget: cx.budget.clone(),
            estimates: cx.plan.estimates(),
            after: crate::plan::deps::pending_deps(&cx.plan),
            labels: if cx.plan.items.iter().any(|it| !it.waiting_on.is_empty()) {
                cx.plan
                    .items
                    .iter()
                    .map(|it| format!("{}/{}", it.repo, it.id))
                    .collect()
            } else {
                Vec::new()
            },
        });
        let pool = Pool {
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
        // The manifest's bound holds across its runs on this host: each running item holds one
        // of `capacity.workers` host-wide slots. A nested run (started by a worker) runs inside
        // its parent's item and its slot.
        let slots = cx.parent_token.is_none().then(|| {
            crate::lease::HostSlots::new(&m.name, crate::plan::effective_workers(&cx.loaded, None))
        });
        let polls_stop = sink.polls_stop();
        let heard = heed_signals(&cx, stop_tx.clone());
        Drain {
            cx,
            sink,
            sched,
            pool,
            slots,
            stop_tx,
            stop_rx,
            heard,
            ev_tx,
            ev_rx,
            rest_rx,
            signal_from: None,
            polls_stop,
        }
    }

    /// A stop asked for through the ledger (`runner cancel` on another machine): as SIGTERM.
    fn on_cancel(&mut self, by: String) {
        self.signal_from.get_or_insert(by);
        on_signal(&self.cx, &mut self.sched, libc::SIGTERM, &self.stop_tx);
    }

    /// The models' probes, a stop signal heeded meanwhile; a refused key everywhere ends the run
    /// before its first item.
    async fn probe_models_first(&mut self) {
        let probing = probe_models(&self.cx, self.sink, &self.stop_rx);
        tokio::pin!(probing);
        let refusal = loop {
            tokio::select! {
                r = &mut probing => break r,
                Some(h) = self.heard.recv() => heard(&mut self.sched, h, &mut self.signal_from),
            }
        };
        if let Some(cause) = refusal {
            self.sched.refused_before_start(cause);
        }
    }

    /// Ask the scheduler what next, and do it.
    async fn step(&mut self) -> Step {
        if let Some(f) = self.sink.failure() {
            self.sched.ledger_failed(f);
        }
        // A stop signal heard while the loop awaited something else (a ledger away): the items
        // were told at once; the scheduler learns of it before it decides anything.
        while let Ok(h) = self.heard.try_recv() {
            heard(&mut self.sched, h, &mut self.signal_from);
        }
        match self.sched.next(Instant::now()) {
            Decision::Probe => {
                // The probe may take a while: let finished items' repositories go first.
                release_settled(&self.cx, self.sink, &mut self.pool, &mut self.sched).await;
                let bound = probe(&self.cx, &self.stop_rx).await;
                debug!(bound, running = self.sched.running(), "capacity probe read");
                self.sched.probed(bound);
                Step::Again
            }
            Decision::Resume(idx) => {
                self.resume(idx);
                Step::Again
            }
            Decision::Admit(idx) => {
                self.admit(idx).await;
                Step::Again
            }
            Decision::Settle(s) => {
                debug!(
                    item = %label(&self.cx, s.item),
                    outcome = s.outcome.as_str(),
                    reason = s.reason.as_deref(),
                    cause = s.cause.as_deref(),
                    "item settled"
                );
                finish(self.sink, s);
                Step::Again
            }
            Decision::Done => {
                debug!("nothing runs and nothing more will: the drain is over");
                Step::Done
            }
            Decision::Wait { until } => {
                trace!(running = self.sched.running(), ?until, "waiting");
                Step::Wait(until)
            }
        }
    }

    /// A rest is over: the item goes on once it has a host slot again (the scheduler counts it
    /// as running already).
    fn resume(&mut self, idx: usize) {
        let slot = self
            .slots
            .as_mut()
            .map_or(Ok(true), |s| s.ensure(self.sched.running()));
        if !matches!(slot, Ok(true)) && self.sched.stopped_by().is_none() {
            debug!(item = %label(&self.cx, idx), "rest over, but the host's slots are taken: resting a little more");
            self.sched
                .rest(idx, Instant::now() + crate::engine::scheduler::LEASE_RETRY);
            return;
        }
        debug!(item = %label(&self.cx, idx), "rest over: the item goes on");
        if let Some(wake) = self.pool.resting.remove(&idx) {
            let _ = wake.send(());
        }
    }

    /// Start an item: a host slot, its claim and its repository's lease, its task; what came of
    /// it told to the scheduler.
    async fn admit(&mut self, idx: usize) {
        let slot = self
            .slots
            .as_mut()
            .map_or(Ok(true), |s| s.ensure(self.sched.running() + 1));
        let answer = match slot {
            Ok(true) => {
                admit(
                    &self.cx,
                    self.sink,
                    &mut self.pool,
                    idx,
                    &self.ev_tx,
                    &self.stop_rx,
                )
                .await
            }
            Ok(false) => Admission::HostFull,
            Err(e) => Admission::Failed(format!(
                "cannot take a host-wide worker slot of the manifest: {e}"
            )),
        };
        debug!(item = %label(&self.cx, idx), ?answer, running = self.sched.running(), "admission");
        // How long an item waited for its repository's lease, once it has it.
        match &answer {
            Admission::LeaseBusy { holder, .. } => {
                // Said when the wait begins, and again when the holder changes.
                let told = self.pool.lease_wait.remove(&idx);
                if told.as_ref().map(|(_, h)| h) != Some(holder) {
                    self.sink.event(&Event::LeaseWaiting {
                        item: idx,
                        holder: holder.clone(),
                    });
                }
                let since = told.map_or_else(Instant::now, |(s, _)| s);
                self.pool.lease_wait.insert(idx, (since, holder.clone()));
            }
            Admission::Started => {
                if let Some((since, _)) = self.pool.lease_wait.remove(&idx) {
                    self.sink.event(&Event::LeaseWaited {
                        item: idx,
                        waited: since.elapsed(),
                    });
                }
            }
            _ => {
                self.pool.lease_wait.remove(&idx);
            }
        }
        self.sched.admitted(idx, answer, Instant::now());
    }

    /// Hand on the events items sent so far.
    fn pass_sent(&mut self) {
        while let Ok(ev) = self.ev_rx.try_recv() {
            pass(self.sink, &mut self.sched, &ev);
        }
    }

    /// Wait for what comes first: an item's event, a rest asked for, an item's end, a stop
    /// signal, a stop asked for from another machine, or `until`.
    async fn wait(&mut self, until: Option<Instant>, stop_poll: &mut tokio::time::Interval) {
        let sleep = async {
            match until {
                Some(t) => tokio::time::sleep_until(t.into()).await,
                None => std::future::pending().await,
            }
        };
        let polls_stop = self.polls_stop && self.sched.stopped_by().is_none();
        tokio::select! {
            Some(ev) = self.ev_rx.recv() => pass(self.sink, &mut self.sched, &ev),
            Some(rest) = self.rest_rx.recv() => {
                // Events sent before the request (the attempt that failed) come first.
                self.pass_sent();
                let until = Instant::now() + rest.wait;
                debug!(item = %label(&self.cx, rest.item), wait_ms = rest.wait.as_millis() as u64, "item rests");
                self.sched.rest(rest.item, until);
                self.pool.resting.insert(rest.item, rest.wake);
            }
            Some(joined) = self.pool.tasks.join_next(), if !self.pool.tasks.is_empty() => {
                // Events sent before the task ended come first.
                self.pass_sent();
                self.joined(joined);
            }
            Some(h) = self.heard.recv() => heard(&mut self.sched, h, &mut self.signal_from),
            _ = stop_poll.tick() => {
                self.sink.tick();
                // `runner cancel` on another machine records its request in the shared ledger;
                // it stops this run as SIGTERM would.
                if polls_stop && let Some(by) = self.sink.stop_requested().await {
                    self.on_cancel(by);
                }
            }
            _ = sleep => {}
        }
    }

    /// An item's task ended: its run recorded. A panicked task is recorded as failed and the
    /// run goes on; its processes were not accounted for, so its repository is quarantined.
    fn joined(&mut self, joined: Result<(usize, ItemRun), tokio::task::JoinError>) {
        let (idx, run) = match joined {
            Ok((idx, run)) => {
                self.pool.task_items.retain(|_, i| *i != idx);
                (idx, run)
            }
            Err(e) => {
                let Some(idx) = self.pool.task_items.remove(&e.id()) else {
                    return;
                };
                let mut run = ItemRun::ended(crate::vocab::ItemOutcome::Failed);
                run.cause = Some(format!("internal error: {e}"));
                run.tree_gone = false;
                (idx, run)
            }
        };
        item_ended(
            &self.cx,
            self.sink,
            &mut self.pool,
            &mut self.sched,
            idx,
            run,
        );
    }

    /// The drain is over: the items left settled, the orphans ended, the run's end told.
    async fn end(mut self) -> DrainEnd {
        self.pass_sent();
        let signal = self.sched.stopped_by();
        // An operator's recorded request (`runner cancel`) names who and why; otherwise the
        // signal's sender, as the kernel gave it.
        let stop_by = match signal {
            Some(_) => self.sink.stop_requested().await.or(self.signal_from.take()),
            None => None,
        };
        let (left, ending, cause) = self.sched.finish(stop_by);
        for s in left {
            finish(self.sink, s);
        }
        // Orphans no item could claim (they cleared their environment while several items ran)
        // end with the run.
        process::census::end_adopted(Duration::from_secs(2)).await;
        let Drain { sink, pool, .. } = self;
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
        let since = prev.holder.start_time;
        found.extend(crate::process::census::end_token(&prev.token, grace, since).await?);
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
        && !sink.ended(&prev.run_id).await
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
            Err(left) if left.is_empty() => {
                return Admission::Failed(format!(
                    "what dead run `{}` left in repository `{repo_name}` cannot be read (its processes or its cgroup): it is not taken for gone",
                    prev.run_id
                ));
            }
            Err(left) => {
                return Admission::Failed(format!(
                    "processes {left:?} that dead run `{}` left in repository `{repo_name}` could not be ended or read",
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
            let cooperating = match &holder {
                Some(h) => sink.live_run(&h.run_id).await,
                None => false,
            };
            return Admission::LeaseBusy {
                holder: holder.map(|h| h.to_string()),
                cooperating,
            };
        }
        Err(e) => return Admission::Failed(e.to_string()),
    };
    // Runners on other machines share the ledger, not this checkout's lease.
    let shared = match sink.lock_repo(repo_name).await {
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
            return Admission::Failed(e.to_string());
        }
    };
    let not_ours = match sink.claim(idx).await {
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
    let handle = pool.tasks.spawn(crate::support::blocking::on_loop(
        async move { (idx, item::run_item(cx2, idx, fd, tx, rest, st).await) }.instrument(span),
    ));
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
    let tampered = run.quarantine.clone();
    debug!(
        item = %label(cx, idx),
        outcome = run.outcome.as_str(),
        tree_gone,
        progress = run.progress,
        "item ended"
    );
    let settled = sched.finished(idx, run);
    finish(sink, settled);
    if let Some(reason) = &tampered {
        quarantine(cx, sink, &repo, reason);
    }
    let Some(lease) = pool.leases.remove(&idx) else {
        sched.released(&repo);
        return;
    };
    if tree_gone {
        pool.settling.push((repo, lease));
    } else {
        quarantine(
            cx,
            sink,
            &repo,
            "processes of an item could not be proven gone",
        );
        pool.kept.push(lease);
    }
}

/// Quarantine repository `repo` for `reason`: kept with the repository, where every manifest's
/// run sees it; and in the ledger.
fn quarantine(cx: &RunCx, sink: &mut dyn RunSink, repo: &str, reason: &str) {
    let Some(r) = cx.plan.repositories.iter().find(|r| r.name == repo) else {
        return;
    };
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
    sink.quarantine(repo, &r.path, reason);
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
            confine: None,
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
async fn release_settled(
    cx: &RunCx,
    sink: &mut dyn RunSink,
    pool: &mut Pool,
    sched: &mut Scheduler,
) {
    if pool.settling.is_empty() {
        return;
    }
    sink.commit_results().await;
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

/// A stop signal heard: the scheduler admits nothing more (the items were told already). The
/// first stop's sender is the one that ended the run.
fn heard(sched: &mut Scheduler, h: Heard, from: &mut Option<String>) {
    let level = sched.signal(h.sig);
    if from.is_none() {
        *from = h.from;
    }
    info!(
        signal = super::scheduler::signal_name(h.sig),
        ?level,
        from = from.as_deref(),
        "stop requested"
    );
}

/// A stop the loop itself decided on (`runner cancel` through the ledger): as signal `sig`.
fn on_signal(cx: &RunCx, sched: &mut Scheduler, sig: i32, stop: &watch::Sender<Stop>) {
    let level = sched.signal(sig);
    info!(
        run = %cx.run_id,
        signal = super::scheduler::signal_name(sig),
        ?level,
        "stop requested through the ledger"
    );
    // runner's own git calls in flight end too (a clone of a large repository, a hung filter).
    process::stop_helpers();
    let _ = stop.send(match level {
        StopLevel::Graceful => Stop::Graceful,
        StopLevel::Immediate => Stop::Immediate,
    });
}
