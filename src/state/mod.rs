//! The state ledger: what survives the runner process.
//!
//! Behind one narrow interface ([`Ledger`]): runs, claims, item results and the event stream of
//! each run. The engine asks it for decisions (may this run claim this item? is the manifest
//! paused?) and hands it every event; nothing else of the engine knows it is SQLite, so a
//! second backend for drains spread over several machines can be added without touching the
//! engine. Every change that must survive a crash (a claim, an item's completion) is committed
//! before the effect it records is acted upon; events are buffered and committed with the next
//! such change, or at the end.

pub mod sqlite;

use crate::engine::outcome::{ItemOutcome, RunEnding};
use crate::events::Event;
use serde::{Deserialize, Serialize};

/// An item's identity across runs: the manifest's name, the repository, the item id, and a hash
/// of the item's definition (so an edited item is new work).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ItemKey {
    pub manifest: String,
    pub repo: String,
    pub item: String,
    pub def_hash: String,
}

/// Who holds something: a process identified by host, pid and start time (pids are reused).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub host: String,
    pub pid: u32,
    pub start_time: Option<u64>,
}

impl Holder {
    pub fn this_process() -> Self {
        let l = crate::lease::Holder::this_process("", "");
        Holder {
            host: l.host,
            pid: l.pid,
            start_time: l.start_time,
        }
    }

    /// Whether the holder is provably dead: on this host, and its pid is gone or now names a
    /// process that started at another time. A holder on another host is never presumed dead.
    pub fn is_dead(&self) -> bool {
        if self.host != crate::lease::hostname() {
            return false;
        }
        match crate::lease::process_start_time(self.pid) {
            None => true,
            Some(t) => self.start_time.is_some_and(|s| s != t),
        }
    }
}

/// A run as the ledger knows it.
#[derive(Clone, Debug, Serialize)]
pub struct RunRow {
    pub id: String,
    pub manifest: String,
    pub manifest_path: String,
    pub manifest_sha256: String,
    pub holder: Holder,
    pub started_by: String,
    pub started_at: String,
    pub ended_at: Option<String>,
    pub ending: Option<String>,
    pub cause: Option<String>,
    pub stop_requested_by: Option<String>,
    pub stop_reason: Option<String>,
}

impl RunRow {
    /// Ended, live, or died without ending.
    pub fn status(&self) -> &'static str {
        if self.ended_at.is_some() {
            "ended"
        } else if self.holder.is_dead() {
            "died"
        } else {
            "live"
        }
    }
}

/// What a previous run left for an item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PastOutcome {
    pub outcome: ItemOutcome,
    pub run_id: String,
}

/// What is needed to re-render a run's report.
pub struct RunReplay {
    pub plan_json: String,
    pub workers: u32,
    pub run_dir: String,
    pub started_at: String,
    /// `(at, event)` in order.
    pub events: Vec<(String, Event)>,
}

/// The answer to a claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// Claimed by this run (a dead holder's claim was taken over).
    Claimed,
    /// A live run holds it.
    HeldBy { run_id: String },
    /// Another run completed it since this run planned.
    AlreadyDone { run_id: String },
    /// The manifest is paused: by whom, when and why.
    Paused(String),
}

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("state ledger `{path}`: {message}")]
    Db { path: String, message: String },
    #[error("cannot create the state folder `{path}`: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T> = std::result::Result<T, LedgerError>;

/// The ledger's interface: claims, results, runs and events.
pub trait Ledger {
    /// Record a new run; fails if the ledger cannot be written.
    fn begin_run(
        &mut self,
        run: &RunRow,
        plan_json: &str,
        workers: u32,
        run_dir: &str,
    ) -> Result<()>;
    /// Record how a run ended, with its stop provenance when it was cancelled.
    fn end_run(
        &mut self,
        run_id: &str,
        ending: RunEnding,
        cause: Option<&str>,
        at: &str,
    ) -> Result<()>;
    /// The last terminal outcome of every item of `manifest` (completed, halted, failed).
    fn past_outcomes(&self, manifest: &str) -> Result<Vec<(ItemKey, PastOutcome)>>;
    /// Claim `key` for `run_id`, reclaiming a provably dead holder's claim, unless the manifest
    /// is paused. Commits what is buffered in the same transaction.
    fn claim(&mut self, key: &ItemKey, run_id: &str, holder: &Holder) -> Result<Claim>;
    /// Record an event of `run_id`. `item` names the item the event is about, when it is about
    /// one; an `ItemFinished` is the item's result, and committing it releases the item's
    /// claim. Buffered until the next commit: a claim, [`Ledger::commit_results`] or the end of
    /// the run.
    fn event(&mut self, run_id: &str, item: Option<&ItemKey>, ev: &Event, at: &str) -> Result<()>;
    /// Make every result recorded so far durable (with the events before it). Nothing acts on
    /// a result — releasing the repository's lease — before this returns.
    fn commit_results(&mut self) -> Result<()>;
    /// Whether the manifest is paused, and by whom and why.
    fn paused(&self, manifest: &str) -> Result<Option<String>>;
}
