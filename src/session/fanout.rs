//! The fan-out: one place that hands each event of a run to the progress display, the report
//! builder, the event stream (`--events`) and the ledger, and answers the engine's questions
//! that need durable state (claims, leases, pauses). The engine knows it only as a [`RunSink`].

use crate::engine::{ClaimAnswer, LockError, RepoLock, RunSink};
use crate::events::Event;
use crate::ledger::store::Store;
use crate::ledger::{Claim, Holder};
use crate::report::ReportBuilder;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

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
    pub(super) ledger: Store,
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
            ledger,
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
            && let Err(e) = self.ledger.add_spend(self.keys.manifest(), &at[..10], cost)
        {
            self.fail(e);
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
        if let Err(e) = self.ledger.event(&self.run_id, key, ev, &at) {
            self.fail(e);
        }
        // A rest or a wait for a shared resource can last minutes: recorded at once, so that
        // `status` shows it.
        if matches!(ev, Event::Resting { .. } | Event::ResourceWaiting { .. })
            && let Err(e) = self.ledger.flush_all()
        {
            self.fail(e);
        }
    }
}

impl RunSink for Fanout {
    fn event(&mut self, ev: &Event) {
        self.progress.on(ev);
        self.record(ev);
    }

    fn claim(&mut self, item: usize) -> ClaimAnswer {
        let Some(key) = self.keys.get(item) else {
            return ClaimAnswer::Failed(format!("item {item} is not in the plan"));
        };
        // A pause of the whole host, given while the run drains: nothing more is admitted.
        if let Some(h) = crate::lease::host_pause() {
            return ClaimAnswer::Paused(h.text());
        }
        let asked = std::time::Instant::now();
        let answer = self.ledger.claim(&key, &self.run_id, &self.holder);
        // How long claims take: what a shared ledger costs each item (`RUNNER_LOG=debug`).
        tracing::debug!(
            claim_us = asked.elapsed().as_micros() as u64,
            repo = %key.repo,
            item = %key.item,
            "claim answered"
        );
        match answer {
            Ok(Claim::Claimed) => ClaimAnswer::Claimed,
            Ok(Claim::HeldBy { run_id }) => ClaimAnswer::Taken(run_id),
            Ok(Claim::AlreadyDone { run_id, outcome }) => ClaimAnswer::Done {
                run: run_id,
                outcome,
            },
            Ok(Claim::Paused(by)) => ClaimAnswer::Paused(by),
            Err(e) => {
                let why = e.to_string();
                self.fail(e);
                ClaimAnswer::Failed(why)
            }
        }
    }

    fn ended(&mut self, run_id: &str) -> bool {
        self.ledger
            .run(run_id)
            .ok()
            .flatten()
            .is_some_and(|r| r.status() == crate::ledger::RunStatus::Ended)
    }

    fn live_run(&mut self, run_id: &str) -> bool {
        run_id != self.run_id && self.ledger.run_is_live(run_id).unwrap_or(false)
    }

    fn commit_results(&mut self) {
        if let Err(e) = self.ledger.commit_results() {
            self.fail(e);
        }
    }

    fn tick(&mut self) {
        if let Err(e) = self.ledger.flush_all() {
            self.fail(e);
        }
    }

    fn stop_requested(&mut self) -> Option<String> {
        let run = self.ledger.run(&self.run_id).ok().flatten()?;
        let by = run.stop_requested_by?;
        Some(match run.stop_reason {
            Some(r) => format!("{by}: {r}"),
            None => by,
        })
    }

    fn failure(&self) -> Option<String> {
        self.failure.clone()
    }

    fn polls_stop(&self) -> bool {
        self.ledger.is_shared()
    }

    fn lock_repo(&mut self, repo: &str) -> Result<RepoLock, LockError> {
        if !self.ledger.is_shared() {
            return Ok(RepoLock::NoSharedLock);
        }
        let identity = self.identities.get(repo).map_or(repo, String::as_str);
        match self.ledger.try_lock_repo(identity) {
            Ok(true) => Ok(RepoLock::Held),
            Ok(false) => Ok(RepoLock::Busy),
            Err(e) => {
                self.fail(&e);
                Err(LockError(Box::new(e)))
            }
        }
    }

    fn unlock_repo(&mut self, repo: &str) {
        let identity = self.identities.get(repo).map_or(repo, String::as_str);
        if let Err(e) = self.ledger.unlock_repo(identity) {
            self.fail(e);
        }
    }

    fn quarantine(&mut self, repo: &str, path: &std::path::Path, reason: &str) {
        let r = self.ledger.quarantine(
            &path.display().to_string(),
            &self.run_id,
            &format!("repository `{repo}`: {reason}"),
            &crate::support::clock::now(),
        );
        if let Err(e) = r {
            self.fail(e);
        }
    }
}
