//! The fan-out: one place that hands each event of a run to the progress display, the report
//! builder, the event stream (`--events`) and the ledger, and answers the engine's questions
//! that need durable state (claims, leases, pauses). The engine knows it only as a [`RunSink`].

use crate::engine::{Answer, ClaimAnswer, LockError, RepoLock, RunSink};
use crate::events::Event;
use crate::ledger::recorder::Recorder;
use crate::ledger::store::Store;
use crate::ledger::{Claim, Holder, ItemKey};
use crate::report::ReportBuilder;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Where `--events` lines go.
pub(crate) enum EventsOut {
    Stdout,
    File(std::io::BufWriter<std::fs::File>, PathBuf),
}

impl EventsOut {
    /// The event stream `--events` asks for: stdout (`-`), or a file created now, so that a path
    /// that cannot be written is an error before anything runs.
    pub fn open(path: Option<&Path>, json: bool) -> Result<Option<EventsOut>, String> {
        match path {
            None => Ok(None),
            Some(p) if p == Path::new("-") => {
                if json {
                    return Err(
                        "`--events -` and `--json` both want stdout: give `--events` a file".into(),
                    );
                }
                Ok(Some(EventsOut::Stdout))
            }
            Some(p) => match std::fs::File::create(p) {
                Ok(f) => Ok(Some(EventsOut::File(
                    std::io::BufWriter::new(f),
                    p.to_path_buf(),
                ))),
                Err(e) => Err(format!(
                    "cannot create the events file `{}`: {e}",
                    p.display()
                )),
            },
        }
    }
}

/// The run's consumers and durable decisions: progress, report, ledger.
pub(crate) struct Fanout {
    pub(super) events: Option<EventsOut>,
    pub(super) events_seq: u64,
    /// Why the event stream stopped, when it could not be written.
    pub(super) events_failed: Option<String>,
    /// The first log that could not be written whole: told at the end (exit 4), without
    /// stopping the drain or changing any item's verdict.
    pub(super) log_failed: Option<String>,
    pub(super) progress: crate::ui::Progress,
    pub(super) builder: ReportBuilder,
    /// The ledger: on a thread of its own while the run drains, so that the event loop never
    /// waits on it.
    pub(super) ledger: Recorder,
    /// Events for the ledger not yet handed to it: they go with its next call, or every few
    /// seconds.
    pending: Pending,
    /// A write of what is buffered is under way on the ledger's thread (a tick waits for none).
    flushing: Arc<AtomicBool>,
    /// Items' results (`ItemFinished`) recorded so far, and how many of the first of them a
    /// claim or a commit has made durable: a claim commits every result recorded before it, so
    /// the results of items that ended before the next item was claimed need no call of their
    /// own (one trip to the ledger's thread, and back, an item).
    results_recorded: u64,
    results_durable: u64,
    /// The ledger is shared by runners on several machines.
    shared: bool,
    /// Each repository's identity across machines (its url, else its name), by name.
    pub(super) identities: HashMap<String, String>,
    pub(super) run_id: String,
    pub(super) keys: super::keys::PlanKeys,
    pub(super) holder: Holder,
    /// The first ledger error; the engine stops admitting once it is set.
    pub(super) failure: Option<String>,
    /// What the trackers are told of their items.
    pub(super) writebacks: Option<super::writeback::Writebacks>,
}

impl Fanout {
    /// The fan-out of run `run_id` over `plan`'s items (`keys`, in the plan's order).
    #[expect(
        clippy::too_many_arguments,
        reason = "each is one consumer or fact of the run, named"
    )]
    pub(super) fn new(
        events: Option<EventsOut>,
        progress: crate::ui::Progress,
        builder: ReportBuilder,
        ledger: Store,
        plan: &crate::plan::Plan,
        run_id: &str,
        keys: super::keys::PlanKeys,
        holder: Holder,
    ) -> Fanout {
        Fanout {
            events,
            events_seq: 0,
            events_failed: None,
            log_failed: None,
            progress,
            builder,
            shared: ledger.is_shared(),
            ledger: Recorder::new(ledger),
            pending: Vec::new(),
            flushing: Arc::new(AtomicBool::new(false)),
            results_recorded: 0,
            results_durable: 0,
            // Each repository's identity across machines: its url, else its name.
            identities: plan
                .repositories
                .iter()
                .map(|r| {
                    let identity = match r.source {
                        crate::manifest::SourceKind::Url => r.location.clone(),
                        _ => r.name.clone(),
                    };
                    (r.name.clone(), identity)
                })
                .collect(),
            run_id: run_id.to_string(),
            keys,
            holder,
            failure: None,
            writebacks: None,
        }
    }

    fn fail(&mut self, e: impl std::fmt::Display) {
        if self.failure.is_none() {
            self.failure = Some(format!("runner cannot record its work: {e}"));
        }
    }

    /// The first failure to record the run's work, if any.
    pub(super) fn failed(&self) -> Option<String> {
        self.failure.clone().or_else(|| {
            self.ledger
                .failure()
                .map(|e| format!("runner cannot record its work: {e}"))
        })
    }

    /// While the run drains, the ledger works on a thread of its own.
    pub(super) fn drain_begins(&mut self) {
        self.ledger.start();
    }

    /// The drain is over: every event handed to the ledger and written, the ledger back on this
    /// thread, its failures the run's.
    pub(super) fn drain_ended(&mut self) {
        self.hand_over();
        self.ledger.stop();
        if let Some(e) = self.ledger.failure() {
            self.fail(e);
        }
    }

    /// The events not yet handed to the ledger, handed over (written with its next call).
    fn hand_over(&mut self) {
        if !self.pending.is_empty() {
            self.tell_ledger(|_| Ok(()));
        }
    }

    /// A call of the ledger's whose answer nobody waits for, after the events recorded so far
    /// (one job for the ledger's thread: each job handed over wakes it).
    fn tell_ledger(
        &mut self,
        call: impl FnOnce(&mut Store) -> crate::ledger::Result<()> + Send + 'static,
    ) {
        let (batch, run_id) = (std::mem::take(&mut self.pending), self.run_id.clone());
        self.ledger.send(move |l| {
            let written = write_events(l, &run_id, &batch);
            let called = call(l);
            written.and(called)
        });
    }

    /// A call of the ledger's to await, after the events recorded so far; `Err` says why it
    /// has no answer.
    fn ask_ledger<T: Send + 'static>(
        &mut self,
        call: impl FnOnce(&mut Store) -> crate::ledger::Result<T> + Send + 'static,
    ) -> impl std::future::Future<Output = Result<T, String>> + 'static {
        let (batch, run_id) = (std::mem::take(&mut self.pending), self.run_id.clone());
        let answer = self.ledger.ask(move |l| {
            write_events(l, &run_id, &batch)
                .and_then(|()| call(l))
                .map_err(|e| e.to_string())
        });
        async move {
            answer
                .await
                .unwrap_or_else(|| Err("the ledger's thread is gone".into()))
        }
    }
}

impl Fanout {
    /// [`Fanout::ask_ledger`], made here and now where the ledger can answer at once
    /// ([`Recorder::ask_soon`]); `call` may be made a second time, on the ledger's thread, when
    /// the first gave up on another writer's lock, having changed nothing.
    fn ask_ledger_soon<T: Send + 'static>(
        &mut self,
        mut call: impl FnMut(&mut Store) -> crate::ledger::Result<T> + Send + 'static,
    ) -> impl std::future::Future<Output = Result<T, String>> + 'static {
        let (batch, run_id) = (std::mem::take(&mut self.pending), self.run_id.clone());
        let mut batch = Some(batch);
        let events = batch.as_ref().map_or(0, Vec::len);
        let answer = self.ledger.ask_soon(events, move |l| {
            // Recorded once: a call that gave up did so after they were in the buffer.
            if let Some(b) = batch.take() {
                write_events(l, &run_id, &b)?;
            }
            call(l)
        });
        async move {
            match answer.await {
                Some(answer) => answer.map_err(|e| e.to_string()),
                None => Err("the ledger's thread is gone".into()),
            }
        }
    }
}

/// Events recorded on the loop, for the ledger: the item's key, the event, when.
type Pending = Vec<(Option<ItemKey>, Event, String)>;

/// `batch` into the ledger (which buffers it until its next write).
fn write_events(l: &mut Store, run_id: &str, batch: &Pending) -> crate::ledger::Result<()> {
    for (key, ev, at) in batch {
        l.event(run_id, key.as_ref(), ev, at)?;
    }
    Ok(())
}

fn item_of(ev: &Event) -> Option<usize> {
    match ev {
        Event::ItemStarted { item }
        | Event::AttemptStarted { item, .. }
        | Event::WorkerFinished { item, .. }
        | Event::GateStarted { item, .. }
        | Event::GateFinished { item, .. }
        | Event::GateBaseline { item, .. }
        | Event::Work { item, .. }
        | Event::Worktree { item, .. }
        | Event::Reaped { item, .. }
        | Event::Leftovers { item, .. }
        | Event::Denied { item, .. }
        | Event::Resting { item, .. }
        | Event::Usage { item, .. }
        | Event::UsageUnknown { item, .. }
        | Event::SetupFinished { item, .. }
        | Event::ModelDemoted { item, .. }
        | Event::ModelRefused { item, .. }
        | Event::Published { item, .. }
        | Event::PullRequestSettled { item, .. }
        | Event::LeaseWaited { item, .. }
        | Event::LeaseWaiting { item, .. }
        | Event::ResourceWaiting { item, .. }
        | Event::ResourceAcquired { item, .. }
        | Event::ItemFinished { item, .. } => Some(*item),
        Event::RunStarted { .. }
        | Event::RunEnded { .. }
        | Event::Probed { .. }
        | Event::Watched { .. } => None,
    }
}

impl Fanout {
    /// An event into the report, the event stream and the ledger.
    pub(super) fn record(&mut self, ev: &Event) {
        let at = crate::support::clock::now();
        self.builder.on(ev, &at);
        if let Some(w) = self.writebacks.as_mut() {
            w.on(ev);
        }
        // Spend, counted by UTC day for the manifest's caps over every run (`budget.daily_usd`).
        if let Event::Usage { usage, item, .. } = ev
            && let Some(cost) = usage.cost_usd.filter(|c| *c > 0.0)
            && self.keys.get(*item).is_some()
        {
            let (manifest, day) = (self.keys.manifest().to_string(), at[..10].to_string());
            self.tell_ledger(move |l| l.add_spend(&manifest, &day, cost));
        }
        let key = item_of(ev).and_then(|i| self.keys.get(i));
        let key = key.as_ref();
        if self.log_failed.is_none()
            && let Some((_, n, what, e)) = ev.log_error()
        {
            self.log_failed = Some(format!(
                "a log could not be written whole ({}/{} attempt {n}, the {what}'s): {e}",
                key.map_or("", |k| k.repo.as_str()),
                key.map_or("", |k| k.item.as_str()),
            ));
        }
        if self.events.is_some() {
            self.events_seq += 1;
            let line = crate::events::EventLine {
                schema: crate::events::EVENTS_SCHEMA.into(),
                run_id: self.run_id.clone(),
                seq: self.events_seq,
                at: at.clone(),
                repo: key.map(|k| k.repo.clone()),
                item_id: key.map(|k| k.item.clone()),
                event: ev.clone(),
            };
            let written = serde_json::to_string(&line)
                .map_err(std::io::Error::other)
                .and_then(|json| match &mut self.events {
                    Some(EventsOut::Stdout) => {
                        use std::io::Write;
                        let mut out = std::io::stdout().lock();
                        writeln!(out, "{json}").and_then(|()| out.flush())
                    }
                    Some(EventsOut::File(f, _)) => {
                        use std::io::Write;
                        writeln!(f, "{json}").and_then(|()| f.flush())
                    }
                    None => Ok(()),
                });
            if let Err(e) = written {
                let whereto = match &self.events {
                    Some(EventsOut::File(_, p)) => format!("`{}`", p.display()),
                    _ => "stdout".into(),
                };
                // A closed stdout ends the stream quietly; a file that cannot be written is a
                // failure of runner's, told at the end (exit 4), without stopping the drain.
                if e.kind() != std::io::ErrorKind::BrokenPipe {
                    self.events_failed =
                        Some(format!("the event stream to {whereto} stopped: {e}"));
                }
                self.events = None;
            }
        }
        if matches!(ev, Event::ItemFinished { .. }) {
            self.results_recorded += 1;
        }
        self.pending.push((key.cloned(), ev.clone(), at));
        // A rest or a wait for a shared resource or a lease can last minutes: recorded at once, so that
        // `status` shows it. A burst (a cancelled run settling every item at once) is handed
        // over as it comes, not held.
        if matches!(
            ev,
            Event::Resting { .. } | Event::ResourceWaiting { .. } | Event::LeaseWaiting { .. }
        ) {
            self.tell_ledger(|l| l.flush_all());
        } else if !self.ledger.is_away()
            || self.pending.len() >= crate::ledger::buffer::EVENTS_BUFFERED
        {
            self.hand_over();
        }
    }
}

impl RunSink for Fanout {
    fn event(&mut self, ev: &Event) {
        self.progress.on(ev);
        self.record(ev);
    }

    fn claim(&mut self, item: usize) -> Answer<'_, ClaimAnswer> {
        let Some(key) = self.keys.get(item) else {
            let why = format!("item {item} is not in the plan");
            return Box::pin(std::future::ready(ClaimAnswer::Failed(why)));
        };
        // A pause of the whole host, given while the run drains: nothing more is admitted.
        if let Some(h) = crate::lease::host_pause() {
            return Box::pin(std::future::ready(ClaimAnswer::Paused(h.text())));
        }
        let (run_id, holder) = (self.run_id.clone(), self.holder.clone());
        let recorded = self.results_recorded;
        let answer = self.ask_ledger_soon(move |l| {
            let asked = std::time::Instant::now();
            let answer = l.claim(&key, &run_id, &holder);
            // How long claims take: what a shared ledger costs each item (`RUNNER_LOG=debug`).
            tracing::debug!(
                claim_us = asked.elapsed().as_micros() as u64,
                repo = %key.repo,
                item = %key.item,
                "claim answered"
            );
            answer
        });
        Box::pin(async move {
            let answer = answer.await;
            // Whatever the claim says, it committed what was recorded before it.
            if answer.is_ok() {
                self.results_durable = self.results_durable.max(recorded);
            }
            match answer {
                Ok(Claim::Claimed) => ClaimAnswer::Claimed,
                Ok(Claim::HeldBy { run_id }) => ClaimAnswer::Taken(run_id),
                Ok(Claim::AlreadyDone { run_id, outcome }) => ClaimAnswer::Done {
                    run: run_id,
                    outcome,
                },
                Ok(Claim::Paused(by)) => ClaimAnswer::Paused(by),
                Err(why) => {
                    self.fail(&why);
                    ClaimAnswer::Failed(why)
                }
            }
        })
    }

    fn ended(&mut self, run_id: &str) -> Answer<'_, bool> {
        let id = run_id.to_string();
        let answer = self.ask_ledger(move |l| l.run(&id));
        Box::pin(async move {
            answer
                .await
                .ok()
                .flatten()
                .is_some_and(|r| r.status() == crate::ledger::RunStatus::Ended)
        })
    }

    fn live_run(&mut self, run_id: &str) -> Answer<'_, bool> {
        if run_id == self.run_id {
            return Box::pin(std::future::ready(false));
        }
        let id = run_id.to_string();
        let answer = self.ask_ledger(move |l| l.run_is_live(&id));
        Box::pin(async move { answer.await.unwrap_or(false) })
    }

    fn commit_results(&mut self) -> Answer<'_, ()> {
        // Made durable already by a claim since they were recorded.
        if self.results_durable >= self.results_recorded {
            return Box::pin(std::future::ready(()));
        }
        let recorded = self.results_recorded;
        let answer = self.ask_ledger_soon(|l| l.commit_results());
        Box::pin(async move {
            match answer.await {
                Ok(()) => self.results_durable = self.results_durable.max(recorded),
                Err(e) => self.fail(e),
            }
        })
    }

    fn tick(&mut self) {
        // A write still under way (a server away) is not asked for again.
        if self.flushing.swap(true, Ordering::AcqRel) {
            return;
        }
        let flushing = self.flushing.clone();
        self.tell_ledger(move |l| {
            let r = l.flush_all();
            flushing.store(false, Ordering::Release);
            r
        });
    }

    fn stop_requested(&mut self) -> Answer<'_, Option<String>> {
        let id = self.run_id.clone();
        let answer = self.ask_ledger(move |l| l.run(&id));
        Box::pin(async move {
            let run = answer.await.ok().flatten()?;
            let by = run.stop_requested_by?;
            Some(match run.stop_reason {
                Some(r) => format!("{by}: {r}"),
                None => by,
            })
        })
    }

    fn failure(&self) -> Option<String> {
        self.failed()
    }

    fn polls_stop(&self) -> bool {
        self.shared
    }

    fn lock_repo(&mut self, repo: &str) -> Answer<'_, Result<RepoLock, LockError>> {
        if !self.shared {
            return Box::pin(std::future::ready(Ok(RepoLock::NoSharedLock)));
        }
        let identity = self
            .identities
            .get(repo)
            .map_or(repo, String::as_str)
            .to_string();
        let answer = self.ask_ledger(move |l| l.try_lock_repo(&identity));
        Box::pin(async move {
            match answer.await {
                Ok(true) => Ok(RepoLock::Held),
                Ok(false) => Ok(RepoLock::Busy),
                Err(e) => {
                    self.fail(&e);
                    Err(LockError(e.into()))
                }
            }
        })
    }

    fn unlock_repo(&mut self, repo: &str) {
        if !self.shared {
            return;
        }
        let identity = self
            .identities
            .get(repo)
            .map_or(repo, String::as_str)
            .to_string();
        self.tell_ledger(move |l| l.unlock_repo(&identity));
    }

    fn quarantine(&mut self, repo: &str, path: &std::path::Path, reason: &str) {
        let (path, run_id) = (path.display().to_string(), self.run_id.clone());
        let reason = format!("repository `{repo}`: {reason}");
        let at = crate::support::clock::now();
        self.tell_ledger(move |l| l.quarantine(&path, &run_id, &reason, &at));
    }
}
