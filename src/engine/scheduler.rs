//! The scheduler: every decision of the drain, and no effect.
//!
//! Given the queue, the bound, which repositories are busy, blocked by another run's lease or
//! quarantined, and whether admission has stopped (a signal, a stall, a pause, a ledger that
//! failed), it answers one question again and again — what next? — with a [`Decision`]: read
//! the capacity probe, admit an item (claim it and take its repository's lease), settle an item
//! without running it, wait, or end. The effect loop in `engine::drain` performs each decision
//! and reports what came of it ([`Scheduler::admitted`], [`Scheduler::finished`],
//! [`Scheduler::released`], [`Scheduler::signal`], …). Time is handed in, never read, so the
//! scheduler is tested without processes, clocks or files.
//!
//! An item whose worker failed for the provider's reasons rests before its next attempt
//! ([`Scheduler::rest`]): its slot is free for other items meanwhile, its repository stays its
//! own, and when its rest is over it takes the next free slot before any new item
//! ([`Decision::Resume`]).
//!
//! Invariants (proptested below): never more items running than the bound; never two items of
//! one repository at once, counting an item whose results are not yet durable; every pending item
//! is decided exactly once; once admission stops, nothing new is admitted.

use super::stall::{HaltSignature, Observed, StallGuard};
use crate::plan::order::Backlog;
use crate::vocab::{HoldReason, ItemOutcome, RunEnding};
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

/// How often a lease, or a host-wide slot, that another process holds is asked for again while
/// waiting for it: no event announces another process's release, so it is polled, briefly (an
/// ask is a lock file opened and tried). What this run frees is taken at once, without a poll.
pub(crate) const LEASE_RETRY: Duration = Duration::from_millis(25);

/// How long a lease whose holder is no live run of this ledger is asked for again before the
/// repository is held `repo-busy` (unless `--wait-for-locks` waits longer): a lock is found
/// busy, then its record read, and between the two a holder may let go as its run ends, or be
/// replacing the record (removed, then written) as it takes the lease. A process that keeps
/// the repository still has it after this long.
pub(crate) const LEASE_GRACE: Duration = Duration::from_secs(1);

/// What the effect loop is to do next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Read the capacity probe and report it with [`Scheduler::probed`].
    Probe,
    /// Claim the item and take its repository's lease; report with [`Scheduler::admitted`].
    Admit(usize),
    /// A resting item's rest is over and a slot is free: let it go on (it runs again).
    Resume(usize),
    /// The item leaves the queue with this result, without running (or it just finished).
    Settle(Settled),
    /// Nothing to do until an item finishes, a signal arrives or, when set, `until` passes.
    Wait { until: Option<Instant> },
    /// Nothing runs and nothing more will: the drain is over.
    Done,
}

/// An item's result, as the run records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Settled {
    pub item: usize,
    pub outcome: ItemOutcome,
    pub reason: Option<String>,
    pub cause: Option<String>,
}

/// What came of an [`Decision::Admit`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Claimed and leased: the item runs.
    Started,
    /// A live run holds the item's claim: it is working on it.
    ClaimedElsewhere { run: String },
    /// Another run finished it meanwhile, with `outcome`.
    DoneElsewhere { run: String, outcome: String },
    /// The manifest is paused (by whom, when, why): admit nothing more.
    Paused(String),
    /// Another process holds the repository's lease; `holder` says who, when known.
    /// `cooperating`: the holder is a live run of the same ledger, which lets it go when its item
    /// ends: waited for, however long, since it or this run will run what is left.
    LeaseBusy {
        holder: Option<String>,
        cooperating: bool,
    },
    /// runner could not ask (a lease file that cannot be opened, …).
    Failed(String),
    /// Every host-wide worker slot of the manifest is held by its runs: the item stays queued,
    /// and admission is asked again shortly.
    HostFull,
}

/// How an item that ran ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ItemRun {
    pub outcome: ItemOutcome,
    pub reason: Option<String>,
    pub cause: Option<String>,
    /// A gate passed during the item, or it completed: the environment works.
    pub progress: bool,
    /// What the halt looked like, for the stall guard.
    pub halt: Option<HaltSignature>,
    /// Every process it started is proven gone.
    pub tree_gone: bool,
    /// Why its repository is to be quarantined though its processes are gone (it changed the
    /// repository's shared git state).
    pub quarantine: Option<String>,
}

impl ItemRun {
    /// An item that ended with `outcome`, nothing else known yet.
    pub fn ended(outcome: ItemOutcome) -> Self {
        ItemRun {
            outcome,
            reason: None,
            cause: None,
            progress: false,
            halt: None,
            tree_gone: true,
            quarantine: None,
        }
    }
}

/// What a signal asks of the running process trees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StopLevel {
    /// The first signal: end trees with their grace period.
    Graceful,
    /// A second signal: kill at once.
    Immediate,
}

/// What a run may spend: the least of its own budget and what the manifest's day's and month's
/// caps leave of theirs when it starts.
#[derive(Clone, Debug, PartialEq)]
pub struct BudgetLimit {
    pub usd: f64,
    /// When a cap is what binds: how it is said, with when it resets (the items it keeps from
    /// running are held `budget`, not cancelled).
    pub cap: Option<String>,
    /// What the cap's window had spent before the run began.
    pub before: f64,
}

impl BudgetLimit {
    /// Why nothing more is admitted, once the run has spent `run` (US dollars).
    pub fn spent_cause(&self, run: f64) -> String {
        match &self.cap {
            Some(cap) if run > 0.0 => format!(
                "{cap} is spent: ${:.2} reported, ${run:.2} of it by this run",
                self.before + run
            ),
            Some(cap) => format!("{cap} is spent: ${:.2} reported", self.before),
            None => format!("workers reported ${run:.2} of the ${:.2} budget", self.usd),
        }
    }
}

/// What the scheduler is given at the start.
#[derive(Clone, Debug)]
pub(crate) struct Setup {
    /// The repository of every item of the plan, by item index.
    pub repo_of: Vec<String>,
    /// The pending items, in admission order.
    pub queue: Vec<usize>,
    pub workers: u32,
    /// A capacity probe is configured: read it before each admission while items run.
    pub probe: bool,
    pub wait_for_locks: Option<Duration>,
    pub stall_after: u32,
    /// Repositories that could not be cloned, with the error.
    pub clone_errors: HashMap<String, String>,
    /// The plan holds no item at all.
    pub nothing_found: bool,
    /// The sources that could not be read, and why (`source `issue`: …`): with no item, the
    /// run ends `unreadable`, never `nothing-found`.
    pub unreadable: Option<String>,
    /// The manifest was paused when the run started (by whom, when, why): it ends `paused`.
    pub paused: Option<String>,
    /// What the run may spend: once the workers' reported cost reaches it, nothing new is
    /// admitted.
    pub budget: Option<BudgetLimit>,
    /// What each item (by index) is expected to take, in milliseconds; empty: every item alike.
    pub estimates: Vec<u64>,
    /// By item: the pending items it waits for (`after`); empty: none waits.
    pub after: Vec<Vec<usize>>,
    /// By item: `repo/id`, to name a dependency in what it holds (empty without `after`).
    pub labels: Vec<String>,
}

/// A repository whose lease another process holds.
#[derive(Clone, Copy, Debug)]
struct Blocked {
    /// Since when the lease has been busy with no live run of this ledger holding it; none
    /// while one did at the last look.
    since: Option<Instant>,
    retry_at: Instant,
}

#[derive(Debug)]
pub(crate) struct Scheduler {
    repo_of: Vec<String>,
    labels: Vec<String>,
    /// The pending items, in plan order.
    queue: BTreeSet<usize>,
    backlog: Backlog,
    workers: u32,
    probe: bool,
    /// The probe's answer for the admission about to happen.
    probed: Option<u32>,
    wait_for_locks: Option<Duration>,
    clone_errors: HashMap<String, String>,
    /// Repositories whose failed clone the stall guard has heard of.
    clone_seen: HashSet<String>,
    nothing_found: bool,
    unreadable: Option<String>,
    running: HashMap<usize, String>,
    /// Items resting between attempts: their repository, and until when.
    resting: HashMap<usize, (String, Instant)>,
    /// Repositories with a running item, or a finished one whose lease is not yet released.
    busy: HashSet<String>,
    blocked: HashMap<String, Blocked>,
    /// Repositories quarantined in this run, each with why (said of its later items).
    quarantined: HashMap<String, &'static str>,
    /// The item handed out with [`Decision::Admit`], until its answer comes.
    admitting: Option<usize>,
    outbox: VecDeque<Settled>,
    guard: StallGuard,
    stopping: Option<i32>,
    stalled: Option<String>,
    paused: Option<String>,
    failed: Option<String>,
    /// The budget was spent (how much of what).
    budget: Option<String>,
    /// Every model an item needed was refused by its provider: why.
    refused: Option<String>,
    /// The host's worker slots were all held by other runs of the manifest at the last try: no
    /// admission before then.
    host_retry_at: Option<Instant>,
    budget_usd: Option<BudgetLimit>,
    /// What the workers reported they spent so far.
    spent_usd: f64,
}

impl Scheduler {
    pub fn new(s: Setup) -> Self {
        Scheduler {
            backlog: Backlog::new(&s.repo_of, &s.queue, s.estimates, &s.after),
            repo_of: s.repo_of,
            labels: s.labels,
            queue: s.queue.into_iter().collect(),
            workers: s.workers.max(1),
            probe: s.probe,
            probed: None,
            wait_for_locks: s.wait_for_locks,
            clone_errors: s.clone_errors,
            clone_seen: HashSet::new(),
            nothing_found: s.nothing_found,
            unreadable: s.unreadable.clone(),
            running: HashMap::new(),
            resting: HashMap::new(),
            busy: HashSet::new(),
            blocked: HashMap::new(),
            quarantined: HashMap::new(),
            admitting: None,
            outbox: VecDeque::new(),
            guard: StallGuard::new(s.stall_after),
            stopping: None,
            stalled: None,
            paused: s.paused,
            failed: None,
            // A cap spent before the run began: nothing is admitted.
            budget: s
                .budget
                .as_ref()
                .filter(|b| b.usd <= 0.0)
                .map(|b| b.spent_cause(0.0)),
            refused: None,
            host_retry_at: None,
            budget_usd: s.budget,
            spent_usd: 0.0,
        }
    }

    /// Items running now.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Whether admission has stopped for good: a signal, a stall, a pause or a ledger failure.
    pub fn halted(&self) -> bool {
        self.stopping.is_some()
            || self.stalled.is_some()
            || self.paused.is_some()
            || self.failed.is_some()
            || self.budget.is_some()
            || self.refused.is_some()
    }

    /// A worker reported what it cost: once the total reaches the budget, admit nothing more.
    /// Returns the cause when this report is the one that spent it.
    pub fn spent(&mut self, cost_usd: f64) -> Option<String> {
        self.spent_usd += cost_usd;
        let limit = self.budget_usd.as_ref()?;
        let budget = limit.usd;
        if self.budget.is_some() || self.spent_usd < budget {
            return None;
        }
        let cause = limit.spent_cause(self.spent_usd);
        self.budget = Some(cause.clone());
        Some(cause)
    }

    /// A worker's spend cannot be known: with a budget, admit nothing more (a cost that cannot
    /// be counted is not taken for zero). Returns the cause when this stopped admission.
    pub(crate) fn cost_unknown(&mut self, why: &str) -> Option<String> {
        let budget = self.budget_usd.as_ref()?.usd;
        if self.budget.is_some() {
            return None;
        }
        let cause = format!(
            "the ${budget:.2} budget cannot be kept: what a worker used is unknown ({why})"
        );
        self.budget = Some(cause.clone());
        Some(cause)
    }

    /// The next decision at `now`.
    pub fn next(&mut self, now: Instant) -> Decision {
        debug_assert!(self.admitting.is_none(), "an admission is unanswered");
        if let Some(s) = self.outbox.pop_front() {
            return Decision::Settle(s);
        }
        // A rested item goes on before anything new starts; under a stop at once, so that it
        // ends.
        if let Some(item) = self.due_rest(now) {
            let repo = self
                .resting
                .remove(&item)
                .map_or_else(|| self.repo_of[item].clone(), |(r, _)| r);
            self.running.insert(item, repo);
            return Decision::Resume(item);
        }
        if !self.halted()
            && let Some(d) = self.admission(now)
        {
            return d;
        }
        self.probed = None;
        let waiting_for_lock = !self.halted()
            && !self.blocked.is_empty()
            && self
                .queue
                .iter()
                .any(|&i| self.blocked.contains_key(&self.repo_of[i]));
        // Other runs of the manifest hold the host's slots: what is queued waits for one.
        let waiting_for_host =
            !self.halted() && !self.queue.is_empty() && self.host_retry_at.is_some_and(|t| t > now);
        if self.running.is_empty() && self.busy.is_empty() && !waiting_for_lock && !waiting_for_host
        {
            return Decision::Done;
        }
        // The earliest rest still to come (one already due waits for a slot: an item ending).
        let rest = self
            .resting
            .values()
            .map(|(_, until)| *until)
            .filter(|until| *until > now)
            .min();
        let until = waiting_for_lock.then(|| {
            let soonest = self
                .queue
                .iter()
                .filter_map(|&i| self.blocked.get(&self.repo_of[i]))
                .map(|b| b.retry_at)
                .min()
                .unwrap_or(now);
            // A retry already due waits for a slot; ask again a little later, never spin.
            if soonest > now {
                soonest
            } else {
                now + LEASE_RETRY
            }
        });
        let until = [until, rest, self.host_retry_at.filter(|_| waiting_for_host)]
            .into_iter()
            .flatten()
            .min();
        Decision::Wait { until }
    }

    /// The resting item to go on now: the one whose rest ended first, when a slot is free (under
    /// a stop, every resting item, whatever the slots: it only ends).
    fn due_rest(&self, now: Instant) -> Option<usize> {
        let bound = self.probed.unwrap_or(self.workers).min(self.workers);
        let stopping = self.stopping.is_some();
        if !stopping && self.running.len() as u32 >= bound {
            return None;
        }
        self.resting
            .iter()
            .filter(|(_, (_, until))| stopping || *until <= now)
            .min_by_key(|(i, (_, until))| (*until, **i))
            .map(|(i, _)| *i)
    }

    /// Running item `item` rests until `until` before its next attempt: its slot is free
    /// meanwhile; its repository stays busy.
    pub fn rest(&mut self, item: usize, until: Instant) {
        if let Some(repo) = self.running.remove(&item) {
            self.resting.insert(item, (repo, until));
        }
    }

    /// Items resting now.
    /// For the unit tests.
    #[cfg(test)]
    pub fn resting(&self) -> usize {
        self.resting.len()
    }

    /// Admission: the first queued item whose repository is free and not waiting to be asked
    /// again, while a slot is free.
    fn admission(&mut self, now: Instant) -> Option<Decision> {
        let bound = self.probed.unwrap_or(self.workers).min(self.workers);
        if self.running.len() as u32 >= bound || self.host_retry_at.is_some_and(|t| now < t) {
            return None;
        }
        let idx = self.backlog.pick(|repo| {
            !self.busy.contains(repo) && self.blocked.get(repo).is_none_or(|b| now >= b.retry_at)
        })?;
        let repo = self.repo_of[idx].clone();
        if let Some(&why) = self.quarantined.get(&repo) {
            self.dequeue(idx);
            self.block_dependents(idx, "is held (quarantined)");
            return Some(settle(
                idx,
                ItemOutcome::Held,
                Some("quarantined"),
                Some(why),
            ));
        }
        if let Some(err) = self.clone_errors.get(&repo).cloned() {
            self.dequeue(idx);
            self.block_dependents(idx, "is held (environment)");
            // The environment's fault, not the work's: held, and tried again by the next run.
            // The stall guard hears of each repository once: one unreachable remote is not a
            // broken environment, every remote failing is.
            if self.clone_seen.insert(repo.clone()) {
                self.environmental(HaltSignature::of("clone", &err, None));
            }
            return Some(settle(
                idx,
                ItemOutcome::Held,
                Some(HoldReason::Environment.as_str()),
                Some(&err),
            ));
        }
        if self.probe && !self.running.is_empty() && self.probed.is_none() {
            return Some(Decision::Probe);
        }
        self.admitting = Some(idx);
        Some(Decision::Admit(idx))
    }

    /// An item held for the environment's fault: the stall guard counts it as it counts a halt
    /// (a broken environment holds every item, and should not go through the whole queue).
    fn environmental(&mut self, halt: HaltSignature) {
        let seen = Observed {
            outcome: ItemOutcome::Held,
            progress: false,
            halt: Some(halt),
        };
        if let Some(c) = self.guard.observe(&seen)
            && self.stalled.is_none()
        {
            self.stalled = Some(c);
        }
    }

    /// The capacity probe's answer: free provider slots (clamped to `1..=workers`).
    pub(crate) fn probed(&mut self, bound: u32) {
        self.probed = Some(bound.clamp(1, self.workers));
    }

    /// `item` leaves the queue.
    fn dequeue(&mut self, item: usize) {
        self.queue.remove(&item);
        let repo = self.repo_of[item].clone();
        self.backlog.remove(&repo, item);
    }

    /// `repo/id` of `item`.
    fn label(&self, item: usize) -> String {
        self.labels
            .get(item)
            .cloned()
            .unwrap_or_else(|| format!("{}/#{item}", self.repo_of[item]))
    }

    /// `item` left the queue, or ran, and did not complete (it `what`): every pending item that
    /// waits for it, and every one waiting for those in turn, is held `blocked`, naming it.
    fn block_dependents(&mut self, item: usize, what: &str) {
        let mut stack = vec![(item, what.to_string())];
        while let Some((d, what)) = stack.pop() {
            for i in self.backlog.dependents(d) {
                self.dequeue(i);
                self.outbox.push_back(Settled {
                    item: i,
                    outcome: ItemOutcome::Held,
                    reason: Some(HoldReason::Blocked.as_str().into()),
                    cause: Some(format!("after `{}`, which {what}", self.label(d))),
                });
                stack.push((i, "is held (blocked)".into()));
            }
        }
    }

    /// What became of an item that left the queue or ran: those waiting for it go on, or are
    /// held.
    fn resolved(&mut self, item: usize, outcome: ItemOutcome, reason: Option<&str>) {
        if outcome == ItemOutcome::Completed {
            self.backlog.completed(item, &self.repo_of);
            return;
        }
        let what = match reason {
            Some(r) => format!("{} ({r})", outcome.as_str()),
            None => outcome.as_str().to_string(),
        };
        self.block_dependents(item, &what);
    }

    /// What came of admitting `item`.
    pub fn admitted(&mut self, item: usize, answer: Admission, now: Instant) {
        debug_assert_eq!(self.admitting, Some(item));
        self.admitting = None;
        self.probed = None;
        let repo = self.repo_of[item].clone();
        let leave = |s: &mut Self, outcome, reason: Option<&str>, cause: String| {
            s.dequeue(item);
            s.outbox.push_back(Settled {
                item,
                outcome,
                reason: reason.map(str::to_string),
                cause: Some(cause),
            });
            // Those waiting for it are held: it did not complete here (see `DoneElsewhere`).
            s.resolved(item, outcome, reason);
        };
        if answer != Admission::HostFull {
            self.host_retry_at = None;
        }
        match answer {
            Admission::HostFull => self.host_retry_at = Some(now + LEASE_RETRY),
            Admission::Started => {
                self.dequeue(item);
                self.blocked.remove(&repo);
                self.busy.insert(repo.clone());
                self.running.insert(item, repo);
            }
            Admission::ClaimedElsewhere { run } => leave(
                self,
                ItemOutcome::Skipped,
                Some("taken"),
                format!("claimed by live run `{run}`, which runs it"),
            ),
            // Completed elsewhere is completed: those waiting for it go on.
            Admission::DoneElsewhere { run, outcome }
                if outcome == ItemOutcome::Completed.as_str() =>
            {
                self.dequeue(item);
                self.outbox.push_back(Settled {
                    item,
                    outcome: ItemOutcome::Skipped,
                    reason: Some("done".into()),
                    cause: Some(format!("{outcome} by run `{run}` meanwhile")),
                });
                self.backlog.completed(item, &self.repo_of);
            }
            Admission::DoneElsewhere { run, outcome } => leave(
                self,
                ItemOutcome::Skipped,
                Some("done"),
                format!("{outcome} by run `{run}` meanwhile"),
            ),
            Admission::Paused(p) => self.paused = Some(p),
            Admission::Failed(e) => {
                self.environmental(HaltSignature::of("admission", &e, None));
                leave(
                    self,
                    ItemOutcome::Held,
                    Some(HoldReason::Environment.as_str()),
                    e,
                )
            }
            Admission::LeaseBusy {
                holder,
                cooperating,
            } => {
                let b = self.blocked.entry(repo.clone()).or_insert(Blocked {
                    since: None,
                    retry_at: now,
                });
                // A live run's lease is waited for however long; what follows it (the run
                // ended, or another holder) is judged from then.
                b.since = if cooperating {
                    None
                } else {
                    Some(b.since.unwrap_or(now))
                };
                let waited = b
                    .since
                    .map_or(Duration::ZERO, |s| now.saturating_duration_since(s));
                let within = cooperating
                    || waited < LEASE_GRACE
                    || self.wait_for_locks.is_some_and(|w| waited < w);
                if within {
                    b.retry_at = now + LEASE_RETRY;
                } else {
                    // Every item of this repository is held: its lease belongs to another run.
                    let detail = match holder {
                        Some(h) => format!("leased by {h}"),
                        None => "its lease is held by another process".to_string(),
                    };
                    let gone: Vec<usize> = self
                        .queue
                        .iter()
                        .copied()
                        .filter(|&i| self.repo_of[i] == repo)
                        .collect();
                    for &i in &gone {
                        self.queue.remove(&i);
                        self.outbox.push_back(Settled {
                            item: i,
                            outcome: ItemOutcome::Held,
                            reason: Some("repo-busy".into()),
                            cause: Some(detail.clone()),
                        });
                    }
                    self.backlog.clear_repo(&repo, &self.repo_of);
                    for i in gone {
                        self.block_dependents(i, "is held (repo-busy)");
                    }
                }
            }
        }
    }

    /// An item that ran has ended: its result, and the stall guard fed. Its repository stays
    /// busy until [`Scheduler::released`] when its tree is gone; otherwise the repository is
    /// quarantined for the rest of the run.
    pub fn finished(&mut self, item: usize, f: ItemRun) -> Settled {
        let repo = self
            .running
            .remove(&item)
            .or_else(|| self.resting.remove(&item).map(|(r, _)| r))
            .unwrap_or_else(|| self.repo_of[item].clone());
        let cause = if f.quarantine.is_some() {
            self.quarantined.insert(
                repo.clone(),
                "an earlier item in this repository changed or left in its git folders what runner's git would trust or wait on",
            );
            f.cause
        } else if f.tree_gone {
            f.cause
        } else {
            self.busy.remove(&repo);
            self.quarantined.insert(
                repo.clone(),
                "an earlier item's processes in this repository could not be proven gone",
            );
            let said = format!(
                "its processes could not be proven gone, so repository `{repo}` is quarantined"
            );
            Some(match f.cause.filter(|c| !c.is_empty()) {
                Some(c) => format!("{c}; {said}"),
                None => said,
            })
        };
        let seen = Observed {
            outcome: f.outcome,
            progress: f.progress,
            halt: f.halt,
        };
        if let Some(c) = self.guard.observe(&seen)
            && self.stalled.is_none()
        {
            self.stalled = Some(c);
        }
        // No model is left that the provider accepts: nothing more is admitted.
        if f.reason.as_deref() == Some(HoldReason::ProviderRefused.as_str())
            && self.refused.is_none()
        {
            self.refused = Some(cause.clone().unwrap_or_default());
        }
        self.resolved(item, f.outcome, f.reason.as_deref());
        Settled {
            item,
            outcome: f.outcome,
            reason: f.reason,
            cause,
        }
    }

    /// The probe before the queue found no model any pending item may use (`cause`): nothing
    /// is admitted, and every item is held for the next run.
    pub(crate) fn refused_before_start(&mut self, cause: String) {
        self.refused.get_or_insert(cause);
    }

    /// A finished item's result is durable and its repository's lease released.
    pub fn released(&mut self, repo: &str) {
        self.busy.remove(repo);
    }

    /// Whether nothing more of `repo` will run in this drain: no item of it pending, being
    /// admitted, running or resting, and its lease released.
    pub(crate) fn done_with(&self, repo: &str) -> bool {
        !self.backlog.pending_in(repo)
            && !self.busy.contains(repo)
            && self.admitting.is_none_or(|i| self.repo_of[i] != repo)
            && !self.running.values().any(|r| r == repo)
            && !self.resting.values().any(|(r, _)| r == repo)
    }

    /// A stop signal arrived.
    pub fn signal(&mut self, sig: i32) -> StopLevel {
        if self.stopping.is_some() {
            StopLevel::Immediate
        } else {
            self.stopping = Some(sig);
            StopLevel::Graceful
        }
    }

    /// The signal that stopped the run, if one did.
    pub(crate) fn stopped_by(&self) -> Option<i32> {
        self.stopping
    }

    /// runner can no longer record what it does.
    pub(crate) fn ledger_failed(&mut self, why: String) {
        if self.failed.is_none() {
            self.failed = Some(why);
        }
    }

    /// The end of the drain: what becomes of the items never admitted, and how the run ended.
    /// `stop_by` names who asked for the stop, when a signal stopped the run.
    pub fn finish(self, stop_by: Option<String>) -> (Vec<Settled>, RunEnding, Option<String>) {
        let leftover_cause = match (&self.stopping, &self.stalled, &self.failed) {
            (Some(sig), _, _) => format!(
                "not started: the run was cancelled by {}",
                signal_name(*sig)
            ),
            (None, Some(_), _) => "not started: the run stalled".to_string(),
            (None, None, Some(_)) => "not started: runner could not record its work".to_string(),
            _ if self.budget.is_some() => "not started: the budget was spent".to_string(),
            _ => "not started".to_string(),
        };
        // Items a refused key kept from running are held: the next run, with the key fixed,
        // takes them (a signal, a stall or a ledger failure still cancels them).
        let held_refused = self.stopping.is_none()
            && self.stalled.is_none()
            && self.failed.is_none()
            && self.refused.is_some();
        // Items a spent day's or month's cap kept from running are held until it resets.
        let held_budget = self.stopping.is_none()
            && self.stalled.is_none()
            && self.failed.is_none()
            && self.refused.is_none()
            && self.budget.is_some()
            && self.budget_usd.as_ref().is_some_and(|b| b.cap.is_some());
        let held_paused = self.stopping.is_none()
            && self.stalled.is_none()
            && self.failed.is_none()
            && self.budget.is_none()
            && self.paused.is_some();
        let left = self
            .queue
            .iter()
            .map(|&item| match (&self.paused, &self.refused) {
                (_, Some(r)) if held_refused => Settled {
                    item,
                    outcome: ItemOutcome::Held,
                    reason: Some(HoldReason::ProviderRefused.as_str().into()),
                    cause: Some(format!("not started: {r}")),
                },
                _ if held_budget => Settled {
                    item,
                    outcome: ItemOutcome::Held,
                    reason: Some(HoldReason::Budget.as_str().into()),
                    cause: self.budget.as_ref().map(|b| format!("not started: {b}")),
                },
                (Some(p), _) if held_paused => Settled {
                    item,
                    outcome: ItemOutcome::Held,
                    reason: Some("paused".into()),
                    cause: Some(p.clone()),
                },
                _ => Settled {
                    item,
                    outcome: ItemOutcome::Cancelled,
                    reason: None,
                    cause: Some(leftover_cause.clone()),
                },
            })
            .collect();
        let (ending, cause) = if let Some(sig) = self.stopping {
            let who = match stop_by {
                Some(by) => format!("cancelled by {by} ({})", signal_name(sig)),
                None => format!("cancelled by {} (unattributed)", signal_name(sig)),
            };
            (RunEnding::Cancelled, Some(who))
        } else if let Some(f) = self.failed {
            (RunEnding::Failed, Some(f))
        } else if let Some(c) = self.stalled {
            (RunEnding::Stalled, Some(c))
        } else if let Some(r) = self.refused {
            (RunEnding::Refused, Some(r))
        } else if let Some(b) = self.budget {
            (RunEnding::Budget, Some(b))
        } else if let Some(p) = self.paused {
            (RunEnding::Paused, Some(p))
        } else if let Some(u) = self.unreadable.clone().filter(|_| self.nothing_found) {
            (RunEnding::Unreadable, Some(u))
        } else if self.nothing_found {
            (
                RunEnding::NothingFound,
                Some("no work item was found in any repository".to_string()),
            )
        } else {
            (RunEnding::Drained, None)
        };
        (left, ending, cause)
    }
}

fn settle(
    item: usize,
    outcome: ItemOutcome,
    reason: Option<&'static str>,
    cause: Option<&str>,
) -> Decision {
    Decision::Settle(Settled {
        item,
        outcome,
        reason: reason.map(str::to_string),
        cause: cause.map(str::to_string),
    })
}

/// The name of a stopping signal, as the run's ending and its items' causes say it.
pub(crate) fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        _ => "a signal",
    }
}

#[cfg(test)]
mod tests;
