//! The state ledger: what survives the runner process.
//!
//! Behind one narrow interface ([`Ledger`]): runs, claims, item results and the event stream of
//! each run. The engine asks it for decisions (may this run claim this item? is the manifest
//! paused?) and hands it every event; nothing of the engine knows which backend answers. There
//! are two: [`sqlite`] (a file, one machine) and [`pg`] (a PostgreSQL database shared by
//! runners on several machines); [`store`] opens the one `--state` names; while a run drains, [`recorder`] keeps the
//! ledger on a thread of its own, so that the event loop never waits on it. Every change that must survive a crash (a claim, an item's completion) is committed
//! before the effect it records is acted upon; events are buffered and committed with the next
//! such change, or at the end. What is buffered and when it is written (`buffer`), and which
//! runs retention prunes (`PruneRule`), are decided once, here; a backend only stores.

pub(crate) mod buffer;
pub mod pg;
pub(crate) mod recorder;
pub mod sqlite;
pub mod store;

use crate::events::Event;
pub use crate::plan::past::PastOutcome;
pub use crate::support::host::Holder;
pub use crate::vocab::ItemKey;
use crate::vocab::{ItemOutcome, RunEnding};
use serde::Serialize;

/// A run as the ledger knows it.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
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
    /// How the run contains its items' processes: "cgroup (<path>)" or "process-group (<why>)".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub containment: Option<String>,
    /// Its heartbeat lapsed (a ledger shared by several machines): as good as dead, wherever it
    /// ran.
    #[serde(skip)]
    pub lapsed: bool,
}

/// Where a recorded run stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RunStatus {
    /// Its process still runs.
    Live,
    /// It recorded its ending.
    Ended,
    /// Its process is gone without having recorded an ending.
    Died,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Live => "live",
            RunStatus::Ended => "ended",
            RunStatus::Died => "died",
        }
    }
}

impl std::fmt::Display for RunStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

impl RunRow {
    /// Ended, live, or died without ending.
    pub fn status(&self) -> RunStatus {
        if self.ended_at.is_some() {
            RunStatus::Ended
        } else if self.lapsed || self.holder.is_dead() {
            RunStatus::Died
        } else {
            RunStatus::Live
        }
    }
}

/// What a run came to, recorded when its report is written.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize, PartialEq)]
pub struct RunTotals {
    /// Items per outcome.
    pub counts: std::collections::BTreeMap<ItemOutcome, usize>,
    pub duration_ms: Option<u64>,
    /// What its workers reported they cost, when any did.
    pub cost_usd: Option<f64>,
}

/// What retention is asked to keep of a manifest's history.
#[derive(Clone, Copy, Debug)]
pub struct Retention<'a> {
    pub manifest: &'a str,
    /// The latest runs kept, whatever their age.
    pub keep_runs: u32,
    /// Runs started before this (RFC 3339) go, whatever their rank.
    pub cutoff: &'a str,
    /// Now, recorded on the runs pruned.
    pub at: &'a str,
    /// A run kept whatever its rank: the one pruning as it ends keeps what it just wrote, even
    /// when a run that started after it ended first.
    pub spare: Option<&'a str>,
    /// The keys of a plan just run: for these items, only their current definition's results
    /// are kept (empty: every definition's latest result stays).
    pub current: &'a dyn crate::vocab::KeySet,
}

impl Retention<'_> {
    /// Which runs go, owned (to take to a ledger's own thread).
    pub(crate) fn rule(&self) -> PruneRule {
        PruneRule {
            keep_runs: self.keep_runs,
            cutoff: self.cutoff.to_string(),
            spare: self.spare.map(str::to_string),
        }
    }
}

/// The one rule every backend prunes runs by.
#[derive(Clone, Debug)]
pub(crate) struct PruneRule {
    keep_runs: u32,
    cutoff: String,
    spare: Option<String>,
}

impl PruneRule {
    /// Whether a run ranked `rank` among its manifest's (newest first, from 0) goes: it is
    /// outside the latest `keep_runs` or started before `cutoff`, it is `over` (as its backend
    /// can tell), and it is not the `spare` (the run pruning as it ends keeps what it just
    /// wrote, even when a run that started after it ended first).
    pub(crate) fn prunes(&self, rank: usize, run: &RunRow, over: bool) -> bool {
        (rank >= self.keep_runs as usize || run.started_at < self.cutoff)
            && over
            && self.spare.as_deref() != Some(run.id.as_str())
    }
}

/// What retention removed from the ledger.
#[derive(Clone, Debug, Default)]
pub struct Pruned {
    /// The runs pruned, with their report folders as they recorded them.
    pub runs: Vec<(String, String)>,
    pub events: usize,
    pub results: usize,
    /// Runs pruned before, by a runner on another machine sharing the ledger, whose report
    /// folders are on this one: with their folders, to remove.
    pub earlier: Vec<(String, String)>,
    /// Another runner was pruning the manifest's history at that moment: nothing was looked at.
    pub elsewhere: bool,
}

/// An incident of a manifest as the ledger keeps it (`notify`): open until a later run no
/// longer sees its cause, and owing a notice (`raised`, `resolved`) until one is delivered.
#[derive(Clone, Debug, PartialEq)]
pub struct IncidentRow {
    /// What tells it apart: its kind and what it is about (`quarantined:api`).
    pub cause: String,
    pub kind: String,
    /// The notice as last seen (JSON).
    pub body: String,
    pub first_seen: String,
    pub last_seen: String,
    /// Runs that saw it.
    pub count: u32,
    /// The notice still to deliver: `raised` or `resolved`.
    pub owed: Option<String>,
    pub resolved_at: Option<String>,
    /// Deliveries of the notice owed that no notifier took, since one last went out.
    pub failures: u32,
    /// When the first of them was.
    pub failed_since: Option<String>,
}

/// The statements of incidents and spend caps, in PostgreSQL's `$n` placeholders (SQLite's numbered
/// `?n` once `$` is replaced).
pub(crate) mod incident_sql {
    pub const LIST: &str =
        "SELECT cause, kind, body, first_seen, last_seen, count, owed, resolved_at, failures,
            failed_since
          FROM incidents WHERE manifest = $1 ORDER BY first_seen, cause";
    pub const SEE: &str = "INSERT INTO incidents
            (manifest, cause, kind, body, first_seen, last_seen, count, owed, resolved_at)
          VALUES ($1, $2, $3, $4, $5, $5, 1, 'raised', NULL)
          ON CONFLICT (manifest, cause) DO UPDATE SET
            count = incidents.count + 1, last_seen = excluded.last_seen, body = excluded.body,
            kind = excluded.kind,
            owed = CASE WHEN incidents.owed = 'resolved' THEN NULL ELSE incidents.owed END,
            failures = CASE WHEN incidents.owed = 'resolved' THEN 0 ELSE incidents.failures END,
            failed_since = CASE WHEN incidents.owed = 'resolved' THEN NULL
              ELSE incidents.failed_since END,
            resolved_at = NULL
          RETURNING cause, kind, body, first_seen, last_seen, count, owed, resolved_at, failures,
            failed_since";
    /// Never told, and never tried in vain: forgotten without a word (one whose notice no
    /// notifier took is resolved, so that the next notice that gets through names it).
    pub const FORGET_UNTOLD: &str = "DELETE FROM incidents
          WHERE manifest = $1 AND cause = $2 AND resolved_at IS NULL AND owed = 'raised'
            AND failures = 0";
    pub const RESOLVE: &str = "UPDATE incidents SET resolved_at = $3, owed = 'resolved'
          WHERE manifest = $1 AND cause = $2 AND resolved_at IS NULL";
    pub const TAKE: &str = "UPDATE incidents SET owed = NULL
          WHERE manifest = $1 AND cause = $2 AND owed = $3";
    pub const OWE: &str = "UPDATE incidents SET owed = $3, failures = failures + 1,
            failed_since = coalesce(failed_since, $4)
          WHERE manifest = $1 AND cause = $2 AND owed IS NULL";
    pub const SENT: &str = "UPDATE incidents SET failures = 0, failed_since = NULL
          WHERE manifest = $1 AND cause = $2";
    pub const FORGET: &str = "DELETE FROM incidents
          WHERE manifest = $1 AND cause = $2 AND resolved_at IS NOT NULL AND owed IS NULL";
    pub const ADD_SPEND: &str = "INSERT INTO spend (manifest, day, cost_usd) VALUES ($1, $2, $3)
          ON CONFLICT (manifest, day) DO UPDATE SET cost_usd = spend.cost_usd + excluded.cost_usd";
    pub const SPEND_SINCE: &str =
        "SELECT coalesce(sum(cost_usd), 0) FROM spend WHERE manifest = $1 AND day >= $2";
}

/// A run for the history page.
#[derive(Clone, Debug)]
pub struct RunHistory {
    pub run: RunRow,
    pub run_dir: String,
    pub totals: Option<RunTotals>,
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

/// An outcome as the ledger stores it, read back.
pub(crate) fn outcome_from(s: &str) -> Option<crate::vocab::ItemOutcome> {
    crate::vocab::ItemOutcome::ALL
        .into_iter()
        .find(|o| o.as_str() == s)
}

/// How a pause reads: by whom, when, and why when a reason was given.
pub(crate) fn pause_text(by: &str, reason: Option<&str>, at: &str) -> String {
    match reason {
        Some(reason) => format!("paused by {by} at {at}: {reason}"),
        None => format!("paused by {by} at {at}"),
    }
}

/// What a run's workers reported they used, summed over the bodies of its `usage` events.
pub(crate) fn sum_usage(bodies: impl IntoIterator<Item = String>) -> Option<crate::events::Usage> {
    let mut total: Option<crate::events::Usage> = None;
    for body in bodies {
        if let Ok(Event::Usage { usage, .. }) = serde_json::from_str::<Event>(&body) {
            total.get_or_insert_with(Default::default).add(&usage);
        }
    }
    total
}

/// Until when an item rests, when its latest event (recorded `at`) says it does.
pub(crate) fn resting_until_of(at: &str, body: &str) -> Option<String> {
    let Ok(Event::Resting { wait, .. }) = serde_json::from_str::<Event>(body) else {
        return None;
    };
    let at = at.parse::<jiff::Timestamp>().ok()?;
    let until = jiff::SignedDuration::try_from(wait)
        .ok()
        .and_then(|w| at.checked_add(w).ok());
    until.map(crate::support::clock::stamp)
}

/// The shared resource an item waits for, and since when, when its latest event says so.
pub(crate) fn waiting_of(at: &str, body: &str) -> Option<(String, String)> {
    match serde_json::from_str::<Event>(body) {
        Ok(Event::ResourceWaiting { resource, .. }) => Some((resource, at.to_string())),
        _ => None,
    }
}

/// An item waiting for its repository's lease: repo, item, since when (RFC 3339), whose lease
/// it is (when its record could be read).
pub type LeaseWait = (String, String, String, Option<String>);

/// The lease waits among `rows` (repo, item, at, body): each item's whose body is its
/// `lease-waiting` event, as [`Ledger::lease_waits`] gives them.
pub(crate) fn lease_waits_of(rows: Vec<(String, String, String, String)>) -> Vec<LeaseWait> {
    rows.into_iter()
        .filter_map(|(repo, item, at, body)| match serde_json::from_str(&body) {
            Ok(Event::LeaseWaiting { holder, .. }) => Some((repo, item, at, holder)),
            _ => None,
        })
        .collect()
}

/// The items of a run whose latest event is a `lease-waiting` one, in either backend's SQL (`$1`:
/// the run; SQLite bounds the scan by the run's first event).
pub(crate) const LEASE_WAITS_SQL: &str = "SELECT e.repo, e.item, e.at, e.body FROM events e
     WHERE e.run_id = $1 AND e.body LIKE '{\"event\":\"lease-waiting\"%' FIRST_EVENT
       AND NOT EXISTS (SELECT 1 FROM events l
         WHERE l.run_id = e.run_id AND l.repo = e.repo AND l.item = e.item AND l.seq > e.seq)
     ORDER BY e.seq";

/// What each item's worker and gates took together in each run, from the bodies of
/// `worker-finished` and `gate-finished` events (run, repo, item, body): milliseconds by
/// `(repo, item)`, one value per run. A gate whose verdict came from the cache did not run (it
/// took no time there): it counts as what that gate took, as a median, where it did run — the
/// next run's changed work runs it again.
pub(crate) fn item_durations_of(
    rows: impl IntoIterator<Item = (String, String, String, String)>,
) -> std::collections::HashMap<(String, String), Vec<u64>> {
    use std::collections::HashMap;
    /// What a part of an item's run took: milliseconds, or as long as the cached gate named.
    enum Took {
        Ms(u64),
        Cached(String),
    }
    let mut parts: Vec<((String, String, String), Took)> = Vec::new();
    let mut ran: HashMap<String, Vec<u64>> = HashMap::new();
    for (run, repo, item, body) in rows {
        let took = match serde_json::from_str::<Event>(&body) {
            Ok(Event::WorkerFinished { duration, .. }) => Took::Ms(duration.as_millis() as u64),
            Ok(Event::GateFinished {
                gate,
                duration,
                cached,
                ..
            }) => match cached {
                Some(_) => Took::Cached(gate),
                None => {
                    let ms = duration.as_millis() as u64;
                    ran.entry(gate).or_default().push(ms);
                    Took::Ms(ms)
                }
            },
            _ => continue,
        };
        parts.push(((run, repo, item), took));
    }
    let typical: HashMap<String, u64> = ran
        .into_iter()
        .map(|(gate, mut ms)| {
            ms.sort_unstable();
            (gate, ms[ms.len() / 2])
        })
        .collect();
    let mut per_run: HashMap<(String, String, String), u64> = HashMap::new();
    for (key, took) in parts {
        let ms = match took {
            Took::Ms(ms) => ms,
            Took::Cached(gate) => typical.get(&gate).copied().unwrap_or(0),
        };
        *per_run.entry(key).or_default() += ms;
    }
    let mut out: std::collections::HashMap<(String, String), Vec<u64>> = HashMap::new();
    for ((_, repo, item), ms) in per_run {
        out.entry((repo, item)).or_default().push(ms);
    }
    out
}

/// How long each gate took when it ran and passed, from `gate-finished` event bodies:
/// milliseconds by gate name. A verdict reused from the cache did not run the gate (it took no
/// time): it is not a sample, or cached passes would pull a slow gate's limit down to the floor.
pub(crate) fn gate_durations_of(
    bodies: impl IntoIterator<Item = String>,
) -> std::collections::HashMap<String, Vec<u64>> {
    let mut out: std::collections::HashMap<String, Vec<u64>> = Default::default();
    for body in bodies {
        if let Ok(Event::GateFinished {
            gate,
            result: crate::vocab::GateResult::Passed,
            duration,
            cached: None,
            ..
        }) = serde_json::from_str::<Event>(&body)
        {
            out.entry(gate)
                .or_default()
                .push(duration.as_millis() as u64);
        }
    }
    out
}

/// What each item's work branch was last published as, by `(repo, item)`, from `published`
/// events in the order they happened.
pub type Publications = std::collections::HashMap<(String, String), Publication>;

/// An item's last publication.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Publication {
    pub branch: String,
    /// The commit pushed.
    pub head: Option<String>,
    /// The pull request.
    pub url: Option<String>,
    /// How many times its pull request was updated since it was opened: its review rounds.
    pub rounds: u32,
    /// The feedback its review rounds were given.
    pub answered: crate::plan::pull::Answered,
    /// The tracker's item it is for, when one is.
    pub source: Option<crate::events::PublishedSource>,
    /// `merged` or `closed`, once its pull request was seen so after the tracker stopped
    /// listing the item: it is not asked again.
    pub settled: Option<String>,
}

pub(crate) fn publications_from(
    rows: impl IntoIterator<Item = (Option<String>, Option<String>, String)>,
) -> Publications {
    let mut out = Publications::new();
    for (repo, item, body) in rows {
        let (Some(repo), Some(item)) = (repo, item) else {
            continue;
        };
        let event = serde_json::from_str::<Event>(&body);
        if let Ok(Event::PullRequestSettled { url, state, .. }) = &event {
            if let Some(p) = out.get_mut(&(repo.clone(), item.clone()))
                && p.url.as_ref() == Some(url)
            {
                p.settled = Some(state.clone());
            }
            continue;
        }
        if let Ok(Event::Published {
            branch,
            head,
            url,
            error: None,
            answered,
            source,
            ..
        }) = event
        {
            let (rounds, mut seen) = match out.remove(&(repo.clone(), item.clone())) {
                Some(p) if p.url.is_some() && p.url == url => (p.rounds + 1, p.answered),
                _ => (0, Default::default()),
            };
            if let Some(a) = answered {
                seen.comments.extend(a.comments);
                seen.heads.extend(a.head);
            }
            out.insert(
                (repo, item),
                Publication {
                    branch,
                    head,
                    url,
                    rounds,
                    answered: seen,
                    source,
                    settled: None,
                },
            );
        }
    }
    out
}

/// An item a run held at plan time: (repo, item, reason, cause).
pub(crate) type HeldItem = (String, String, String, Option<String>);

/// The answer to a claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claim {
    /// Claimed by this run (a dead holder's claim was taken over).
    Claimed,
    /// A live run holds it.
    HeldBy { run_id: String },
    /// Another run finished it (completed, halted or failed) since this run started.
    AlreadyDone { run_id: String, outcome: String },
    /// The manifest is paused: by whom, when and why.
    Paused(String),
}

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("state ledger `{path}`: {source}")]
    Db {
        path: String,
        #[source]
        source: rusqlite::Error,
    },
    /// The ledger is readable but not usable by this runner (a newer schema, no WAL mode).
    #[error("state ledger `{path}`: {message}")]
    Unusable { path: String, message: String },
    /// A record the ledger holds does not decode.
    #[error("state ledger `{path}`: unreadable {what}: {source}")]
    Record {
        path: String,
        what: String,
        #[source]
        source: serde_json::Error,
    },
    /// The PostgreSQL server refused or could not be reached.
    #[error("state ledger `{url}`: {message}")]
    Server { url: String, message: String },
    #[error("state ledger: `{path}`: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

pub(crate) type Result<T> = std::result::Result<T, LedgerError>;

impl LedgerError {
    /// Whether the call gave up on another writer's lock (told not to wait, [`Ledger::waits`]),
    /// having changed nothing.
    pub(crate) fn is_busy(&self) -> bool {
        matches!(
            self,
            LedgerError::Db {
                source: rusqlite::Error::SqliteFailure(e, _),
                ..
            } if matches!(
                e.code,
                rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
            )
        )
    }
}

/// What the run-history page reads of a ledger.
pub trait History {
    /// The latest `limit` runs of `manifest`, newest first.
    fn run_history(&self, manifest: &str, limit: usize) -> Result<Vec<RunHistory>>;
    /// The results of `manifest`'s items in its latest `limit` runs, each item's oldest first,
    /// the items by repository and id.
    fn recent_item_results(&self, manifest: &str, limit: usize) -> Result<Vec<RecentResults>>;
}

/// One item's outcomes in a manifest's latest runs, oldest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecentResults {
    pub repo: String,
    pub item: String,
    /// (run, outcome); the run's id is shared by every item of the run.
    pub outcomes: Vec<(std::sync::Arc<str>, ItemOutcome)>,
}

/// Gathers rows ordered by repository, item and time into [`RecentResults`]: one record an
/// item, one copy of each run's id (a manifest of 100,000 items is read as 100,000 records,
/// not as a row each with its strings).
#[derive(Default)]
pub(crate) struct RecentGather {
    out: Vec<RecentResults>,
    runs: Vec<std::sync::Arc<str>>,
}

impl RecentGather {
    pub(crate) fn row(&mut self, repo: &str, item: &str, run: &str, outcome: &str) {
        let Some(outcome) = outcome_from(outcome) else {
            return;
        };
        let run = match self.runs.iter().find(|r| &***r == run) {
            Some(r) => std::sync::Arc::clone(r),
            None => {
                let r: std::sync::Arc<str> = run.into();
                self.runs.push(std::sync::Arc::clone(&r));
                r
            }
        };
        match self.out.last_mut() {
            Some(last) if last.repo == repo && last.item == item => {
                last.outcomes.push((run, outcome));
            }
            _ => {
                // Room for one: most items have one result in the runs kept.
                self.out.push(RecentResults {
                    repo: repo.to_string(),
                    item: item.to_string(),
                    outcomes: vec![(run, outcome)],
                });
            }
        }
    }

    pub(crate) fn done(self) -> Vec<RecentResults> {
        self.out
    }
}

/// The ledger's interface: claims, results, runs and events.
pub trait Ledger: History {
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
    /// The items of `manifest` claimed by a live run, with that run.
    fn live_claims_of(&self, manifest: &str) -> Result<Vec<(ItemKey, String)>>;
    /// Whether `run_id` is a run of this ledger whose process still lives.
    fn run_is_live(&self, run_id: &str) -> Result<bool>;
    /// Whether run `run_id` recorded its end — or cannot be shown not to have: a run this
    /// ledger does not know, or a ledger that cannot be read, counts as ended.
    fn ended_or_unknown(&self, run_id: &str) -> bool {
        !matches!(self.run(run_id), Ok(Some(r)) if r.status() != RunStatus::Ended)
    }
    /// Pause `manifest` (recording by whom, why and when): no run of it claims anything more.
    fn set_paused(
        &mut self,
        manifest: &str,
        by: &str,
        reason: Option<&str>,
        at: &str,
    ) -> Result<()>;
    /// Lift a pause; whether there was one.
    fn clear_paused(&mut self, manifest: &str) -> Result<bool>;
    /// Count `usd` workers of `manifest` reported on UTC day `day` (`YYYY-MM-DD`).
    fn add_spend(&mut self, manifest: &str, day: &str, usd: f64) -> Result<()>;
    /// What workers of `manifest` reported from UTC day `day` on, every run's.
    fn spend_since(&self, manifest: &str, day: &str) -> Result<f64>;
    /// The incidents of `manifest`: open ones, and resolved ones still owing their notice.
    fn incidents(&self, manifest: &str) -> Result<Vec<IncidentRow>>;
    /// A run saw incident `cause`: opened (count 1, owing `raised`), or counted — reopened when
    /// it was resolved, owing nothing when its `resolved` notice had not gone out yet. The row
    /// after.
    fn see_incident(
        &mut self,
        manifest: &str,
        cause: &str,
        kind: &str,
        body: &str,
        at: &str,
    ) -> Result<IncidentRow>;
    /// A run no longer sees open incident `cause`: resolved, owing `resolved` — or forgotten when
    /// its `raised` notice never went out (nobody heard of it). Whether this call ended it.
    fn resolve_incident(&mut self, manifest: &str, cause: &str, at: &str) -> Result<bool>;
    /// Take the notice `owed` on incident `cause` to deliver it: a compare and swap, so two
    /// runners never both send it.
    fn take_notice(&mut self, manifest: &str, cause: &str, owed: &str) -> Result<bool>;
    /// A notice taken could not be delivered at `at`: owed again, for the next run, its failed
    /// deliveries counted.
    fn owe_notice(&mut self, manifest: &str, cause: &str, owed: &str, at: &str) -> Result<()>;
    /// A notice taken went out: its failed deliveries are forgotten.
    fn notice_sent(&mut self, manifest: &str, cause: &str) -> Result<()>;
    /// A resolved incident whose notice went out is forgotten.
    fn forget_incident(&mut self, manifest: &str, cause: &str) -> Result<()>;
    /// A write-back to a tracker (`key`, unique within `manifest`): its state (`pending`, `done`,
    /// `failed`) and the run that last took it on.
    fn writeback(&self, manifest: &str, key: &str) -> Result<Option<(String, String)>>;
    /// Set write-back `key` to `state` for `run_id` (with `error` for a failed one) — but only
    /// if it stands as `expect` says (`None`: not recorded at all). Whether it did: a compare
    /// and swap, so two runs never both take one on.
    #[expect(
        clippy::too_many_arguments,
        reason = "the row and the state it must be in, named"
    )]
    fn swap_writeback(
        &mut self,
        manifest: &str,
        key: &str,
        expect: Option<(&str, &str)>,
        state: &str,
        run_id: &str,
        error: Option<&str>,
        at: &str,
    ) -> Result<bool>;
    /// Keep what write-back `key` is to do (`job`), for a later run to do it if this one cannot.
    fn set_writeback_job(&mut self, manifest: &str, key: &str, job: &str) -> Result<()>;
    /// The write-backs of `manifest` not done yet (failed, or taken on by a run that may have
    /// died), with what each is to do.
    fn unfinished_writebacks(&self, manifest: &str) -> Result<Vec<(String, String)>>;
    /// Take write-back `key` on for `run_id`, exactly once over every run: when nobody has, when
    /// an earlier attempt failed, or when the run that took it on died before recording that it
    /// was done (the tracker's adapter then finds its own comment and posts none again). `false`:
    /// it is done, or a live run has it.
    fn claim_writeback(
        &mut self,
        manifest: &str,
        key: &str,
        run_id: &str,
        at: &str,
    ) -> Result<bool> {
        match self.writeback(manifest, key)? {
            None => self.swap_writeback(manifest, key, None, "pending", run_id, None, at),
            Some((state, _)) if state == "done" => Ok(false),
            Some((state, by)) if state == "failed" => self.swap_writeback(
                manifest,
                key,
                Some((&state, &by)),
                "pending",
                run_id,
                None,
                at,
            ),
            Some((_, by)) if by == run_id => Ok(true),
            Some((state, by)) => {
                if self.run_is_live(&by)? {
                    return Ok(false);
                }
                self.swap_writeback(
                    manifest,
                    key,
                    Some((&state, &by)),
                    "pending",
                    run_id,
                    None,
                    at,
                )
            }
        }
    }
    /// What source `source` of `manifest` gave the last time a run read it (`runner.items/v1`
    /// JSON), if a run ever did.
    fn source_items(&self, manifest: &str, source: &str) -> Result<Option<String>>;
    /// Remember what source `source` of `manifest` gave now: held `source-unreadable` by a later
    /// run that cannot read it.
    fn set_source_items(
        &mut self,
        manifest: &str,
        source: &str,
        items: &str,
        at: &str,
    ) -> Result<()>;

    /// Whether several machines' runners share this ledger (PostgreSQL).
    fn is_shared(&self) -> bool {
        false
    }

    fn run(&self, id: &str) -> Result<Option<RunRow>>;

    /// Ask a run to stop, recording who asked and why.
    fn request_stop(
        &mut self,
        run_id: &str,
        by: &str,
        reason: Option<&str>,
        at: &str,
    ) -> Result<()>;

    fn recent_runs(&self, manifest: Option<&str>, limit: usize) -> Result<Vec<RunRow>>;

    fn verdict_key(&mut self) -> Result<String>;

    fn claimed_by(&self, id: &str) -> Result<Vec<(String, String)>>;

    fn counts_of(
        &self,
        id: &str,
    ) -> Result<std::collections::BTreeMap<crate::vocab::ItemOutcome, usize>>;

    fn usage_of(&self, id: &str) -> Result<Option<crate::events::Usage>>;

    fn resting_until(&self, run_id: &str, repo: &str, item: &str) -> Result<Option<String>>;

    fn waiting_for_resource(
        &self,
        run_id: &str,
        repo: &str,
        item: &str,
    ) -> Result<Option<(String, String)>>;

    /// Items of run `id` whose latest event is a wait for their repository's lease: (repo,
    /// item, since when, whose lease), from the `lease-waiting` events.
    fn lease_waits(&self, id: &str) -> Result<Vec<LeaseWait>>;

    fn held_items(&self, manifest: &str) -> Result<Vec<HeldItem>>;

    fn live_claims(&self) -> Result<Vec<(String, String, String, Holder)>>;

    fn run_events(&self, id: &str) -> Result<Option<RunReplay>>;

    /// When retention pruned a run, if it did.
    fn pruned_at(&self, id: &str) -> Result<Option<String>>;

    /// Retention over a manifest's history (see [`SqliteLedger::prune`]); on a shared ledger,
    /// over every machine's runs, with the folders that are this machine's to remove (then
    /// [`Store::forget`] those removed).
    fn prune(&mut self, ask: &Retention<'_>) -> Result<Pruned>;

    /// Pruned runs whose report folders are gone: a shared ledger kept their rows until now.
    fn forget(&mut self, ids: &[String]) -> Result<()> {
        let _ = ids;
        Ok(())
    }

    /// Where the ledger is, as it may be shown.
    fn shown(&self) -> String;

    fn run_dir(&self, id: &str) -> Result<Option<String>>;

    fn quarantines(&self) -> Result<Vec<(String, String, String)>>;

    fn quarantine(&mut self, path: &str, run_id: &str, reason: &str, at: &str) -> Result<()>;

    /// Lift a quarantine; whether there was one.
    fn release_quarantine(&mut self, path: &str) -> Result<bool>;

    fn record_totals(&mut self, id: &str, totals: &RunTotals) -> Result<()>;

    /// Everything buffered, durable now.
    fn flush_all(&mut self) -> Result<()>;

    /// Whether the calls that follow may wait on others: with `false`, a ledger that can give
    /// up at once where it would wait (SQLite: another writer's lock, and the checkpoint a
    /// commit may start, with its `fsync`) does so, with an error that
    /// [`LedgerError::is_busy`], having changed nothing; it says whether it can. A ledger that
    /// cannot (a server, which may be away for minutes) says `false` and is never asked to.
    fn waits(&mut self, wait: bool) -> bool {
        let _ = wait;
        false
    }

    /// How many more events it buffers before recording one writes them.
    fn room(&self) -> usize {
        0
    }

    fn checkpoint(&mut self) -> Result<()> {
        Ok(())
    }

    fn item_durations(
        &self,
        manifest: &str,
        limit: usize,
    ) -> Result<std::collections::HashMap<(String, String), Vec<u64>>>;

    fn gate_durations(
        &self,
        manifest: &str,
        limit: usize,
    ) -> Result<std::collections::HashMap<String, Vec<u64>>>;

    fn publications_of(&self, manifest: &str) -> Result<Publications>;

    /// Take a repository's lock across machines (PostgreSQL); always granted on one machine,
    /// where the lease in the repository is the lock.
    fn try_lock_repo(&self, identity: &str) -> Result<bool> {
        let _ = identity;
        Ok(true)
    }

    fn unlock_repo(&self, identity: &str) -> Result<()> {
        let _ = identity;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::{GateResult, WorkerClass};
    use std::time::Duration;

    fn worker(ms: u64) -> String {
        serde_json::to_string(&Event::WorkerFinished {
            item: 0,
            n: 1,
            exit: Some(0),
            class: WorkerClass::Ok,
            duration: Duration::from_millis(ms),
            log: None,
            output_tail: String::new(),
            log_error: None,
            unlogged_bytes: None,
            ended: None,
        })
        .unwrap()
    }

    fn gate(name: &str, ms: u64, cached: bool) -> String {
        serde_json::to_string(&Event::GateFinished {
            item: 0,
            n: 1,
            gate: name.into(),
            result: GateResult::Passed,
            reason: None,
            duration: Duration::from_millis(ms),
            output_tail: String::new(),
            log: None,
            exit: Some(0),
            cached: cached.then(|| crate::events::CachedFrom {
                run_id: "r1".into(),
                repo: "r".into(),
                item: "x".into(),
                at: "2026-12-01T00:00:00.000Z".into(),
            }),
            failures: None,
            log_error: None,
            unlogged_bytes: None,
        })
        .unwrap()
    }

    #[test]
    fn a_cached_gate_counts_as_long_as_the_gate_takes_where_it_runs() {
        let row = |run: &str, item: &str, body: String| {
            (run.to_string(), "r".to_string(), item.to_string(), body)
        };
        let rows = vec![
            row("r1", "x", worker(100)),
            row("r1", "x", gate("test", 5000, false)),
            row("r1", "y", worker(200)),
            row("r1", "y", gate("test", 7000, false)),
            row("r1", "y", gate("lint", 300, false)),
            // The next run found both verdicts of `x` cached, and `lint` never ran uncached
            // for it: a gate with no run anywhere counts as nothing.
            row("r2", "x", worker(100)),
            row("r2", "x", gate("test", 0, true)),
            row("r2", "x", gate("fmt", 0, true)),
        ];
        let got = item_durations_of(rows);
        let mut x = got[&("r".to_string(), "x".to_string())].clone();
        x.sort_unstable();
        // `test` took 5000 and 7000 where it ran: its median (the upper one of two) stands in.
        assert_eq!(x, [5100, 7100]);
        assert_eq!(got[&("r".to_string(), "y".to_string())], [7500]);
    }
}
