//! The PostgreSQL ledger: one queue shared by runners on several machines.
//!
//! What SQLite gets from living on one machine, PostgreSQL gets from the server:
//!
//! - **Claims** are rows; a fresh one is inserted or nothing (`ON CONFLICT DO NOTHING`), and a
//!   claim that exists is examined with `SELECT … FOR UPDATE SKIP LOCKED`, so two runners never
//!   wait on each other for an item: the one that does not get the row moves on.
//! - **Liveness** is a heartbeat: every run's row carries `heartbeat_at`, refreshed every few
//!   seconds by the runner's connection ([`heartbeat`]). A claim whose run has not beaten for
//!   [`lapse`] (or whose holder is provably dead on this host) is taken over.
//! - **A repository's exclusivity** across machines is a session-level advisory lock keyed by
//!   the repository's identity (its url, or its name): held by the runner's connection while an
//!   item runs there, and released by the server when that connection drops — a machine that
//!   dies gives its repositories back at once.
//!
//! The client runs on a thread of its own (the `postgres` crate blocks on a runtime of its own,
//! which may not be entered from runner's event loop); callers send it work and wait for the
//! answer, as they wait on SQLite. Events are buffered and written with the next claim or
//! result, as in SQLite.

use super::*;
use ::postgres::{Client, NoTls};
use std::sync::mpsc;
use std::time::Duration;

/// Numbered migrations, each applied once, under a lock so that runners starting together do
/// not race.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE runs (
    id TEXT PRIMARY KEY,
    manifest TEXT NOT NULL,
    manifest_path TEXT NOT NULL,
    manifest_sha256 TEXT NOT NULL,
    host TEXT NOT NULL,
    pid BIGINT NOT NULL,
    start_time BIGINT,
    started_by TEXT NOT NULL,
    started_at TEXT NOT NULL,
    workers INTEGER NOT NULL,
    run_dir TEXT NOT NULL,
    plan_json TEXT NOT NULL,
    containment TEXT,
    ended_at TEXT,
    ending TEXT,
    cause TEXT,
    stop_requested_by TEXT,
    stop_reason TEXT,
    stop_requested_at TEXT,
    totals TEXT,
    begun_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    heartbeat_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX runs_by_manifest ON runs (manifest, started_at);
CREATE TABLE claims (
    manifest TEXT NOT NULL,
    repo TEXT NOT NULL,
    item TEXT NOT NULL,
    def_hash TEXT NOT NULL,
    run_id TEXT NOT NULL,
    host TEXT NOT NULL,
    pid BIGINT NOT NULL,
    start_time BIGINT,
    claimed_at TEXT NOT NULL,
    PRIMARY KEY (manifest, repo, item, def_hash)
);
CREATE TABLE item_results (
    manifest TEXT NOT NULL,
    repo TEXT NOT NULL,
    item TEXT NOT NULL,
    def_hash TEXT NOT NULL,
    run_id TEXT NOT NULL,
    outcome TEXT NOT NULL,
    reason TEXT,
    cause TEXT,
    ended_at TEXT NOT NULL,
    recorded_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (manifest, repo, item, def_hash, run_id)
);
CREATE TABLE events (
    id BIGSERIAL PRIMARY KEY,
    run_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    at TEXT NOT NULL,
    repo TEXT,
    item TEXT,
    body TEXT NOT NULL
);
CREATE INDEX events_by_run ON events (run_id, seq);
CREATE TABLE pauses (
    manifest TEXT PRIMARY KEY,
    paused_by TEXT NOT NULL,
    reason TEXT,
    paused_at TEXT NOT NULL
);
CREATE TABLE quarantines (
    repo_path TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    reason TEXT NOT NULL,
    at TEXT NOT NULL
);
"#,
    r#"
ALTER TABLE runs ADD COLUMN pruned_at TEXT;
CREATE INDEX item_results_by_run ON item_results (run_id);
"#,
    r#"
CREATE TABLE secrets (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"#,
];

/// The key of the advisory lock that serialises migrations.
const MIGRATION_LOCK: i64 = 0x7275_6e6e_6572_0001;

/// How often a live run's heartbeat is written: a sixth of [`lapse`], at most 5 seconds.
pub fn heartbeat() -> Duration {
    (lapse() / 6).clamp(Duration::from_millis(200), Duration::from_secs(5))
}

/// How long a run may miss its heartbeat before its claims are taken over:
/// `RUNNER_HEARTBEAT_LAPSE` (seconds, e.g. `30` or `30s`), else 30 seconds — six missed beats.
pub fn lapse() -> Duration {
    std::env::var("RUNNER_HEARTBEAT_LAPSE")
        .ok()
        .and_then(|v| v.trim().trim_end_matches('s').parse::<u64>().ok())
        .filter(|s| *s > 0)
        .map_or(Duration::from_secs(30), Duration::from_secs)
}

/// Whether a `--state` names a PostgreSQL database rather than a file.
pub fn is_url(state: &str) -> bool {
    state.starts_with("postgres://") || state.starts_with("postgresql://")
}

/// A url as it may be shown: without its password.
pub fn shown(url: &str) -> String {
    crate::plan::repos::redact_url(url)
}

type Job = Box<dyn FnOnce(&mut Session) + Send>;

/// What the client thread holds: the connection, its prepared statements, and the run it
/// beats for.
struct Session {
    client: Client,
    /// Statements prepared once per connection: a statement prepared anew costs a round trip.
    statements: std::collections::HashMap<&'static str, ::postgres::Statement>,
    /// The run whose heartbeat this connection writes.
    beating: Option<String>,
    /// Where to connect again when the connection is lost.
    url: String,
    /// The repositories' advisory locks this session holds: a lost connection loses them, and a
    /// new one takes them again before anything else.
    locks: std::collections::BTreeSet<i64>,
}

/// How long a lost connection to the server is tried again before the ledger is failed
/// (`RUNNER_LEDGER_RETRY`, a duration; default 3 minutes): a server restarted, failed over or
/// briefly unreachable stops no run.
fn ledger_retry() -> std::time::Duration {
    std::time::Duration::from_millis(LEDGER_RETRY_MS.load(std::sync::atomic::Ordering::Relaxed))
}

static LEDGER_RETRY_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(180_000);

/// Set how long a lost connection is tried again (`RUNNER_LEDGER_RETRY`).
pub fn set_ledger_retry(d: std::time::Duration) {
    LEDGER_RETRY_MS.store(d.as_millis() as u64, std::sync::atomic::Ordering::Relaxed);
}

/// Whether `e` says the connection is gone (or the server is going away), rather than that the
/// statement was wrong: the work is done again on a new connection.
fn connection_lost(e: &::postgres::Error, client: &Client) -> bool {
    if client.is_closed() {
        return true;
    }
    match e.code() {
        // Class 08: connection exceptions; 57P01-57P03: shutdown, crash, cannot connect now.
        Some(c) => c.code().starts_with("08") || matches!(c.code(), "57P01" | "57P02" | "57P03"),
        // No SQL state: an I/O error on the socket.
        None => e.as_db_error().is_none(),
    }
}

impl Session {
    /// Connect again, with back-off, until `until`: the schema is there already; the locks
    /// this session held are taken again. `false` when the server did not come back in time.
    fn reconnect(&mut self, until: std::time::Instant) -> bool {
        let mut pause = std::time::Duration::from_millis(100);
        loop {
            if let Ok(mut c) = Client::connect(&self.url, NoTls) {
                let relocked = self.locks.iter().all(|k| {
                    c.query_one("SELECT pg_try_advisory_lock($1)", &[k])
                        .is_ok_and(|r| r.get::<_, bool>(0))
                });
                if !relocked {
                    tracing::error!(
                        "the shared ledger is back, but a repository lock this runner held was taken meanwhile"
                    );
                }
                self.client = c;
                self.statements.clear();
                tracing::warn!("the connection to the shared ledger is back");
                return true;
            }
            if std::time::Instant::now() + pause >= until {
                return false;
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(std::time::Duration::from_secs(5));
        }
    }
}

impl Session {
    /// `sql`, prepared on this connection (once).
    fn statement(
        &mut self,
        sql: &'static str,
    ) -> std::result::Result<::postgres::Statement, ::postgres::Error> {
        if let Some(st) = self.statements.get(sql) {
            return Ok(st.clone());
        }
        let st = self.client.prepare(sql)?;
        self.statements.insert(sql, st.clone());
        Ok(st)
    }
}

/// The SQL of the hot path: one statement for all of a commit's events, one per result.
const INSERT_EVENTS: &str = "INSERT INTO events (run_id, seq, at, repo, item, body)
     SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[])";
const INSERT_RESULT: &str = "INSERT INTO item_results (manifest, repo, item, def_hash, run_id, outcome, reason, cause, ended_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
     ON CONFLICT (manifest, repo, item, def_hash, run_id) DO UPDATE
       SET outcome = $6, reason = $7, cause = $8, ended_at = $9, recorded_at = now()";
const RELEASE_CLAIM: &str = "DELETE FROM claims WHERE manifest = $1 AND repo = $2 AND item = $3 AND def_hash = $4 AND run_id = $5";

/// Why an item may not be claimed, in one round trip: the manifest's pause (who, why, when),
/// and a terminal result another run recorded since this one looked (`$6`, else its start).
const CLAIM_BLOCKED: &str = "SELECT p.paused_by, p.reason, p.paused_at, d.run_id, d.outcome
       FROM (SELECT 1) one
       LEFT JOIN pauses p ON p.manifest = $1
       LEFT JOIN LATERAL (
           SELECT r.run_id, r.outcome FROM item_results r
            WHERE r.manifest = $1 AND r.repo = $2 AND r.item = $3 AND r.def_hash = $4
              AND r.outcome IN ('completed', 'halted', 'failed') AND r.run_id <> $5
              AND r.recorded_at >= coalesce($6::timestamptz, (SELECT begun_at FROM runs WHERE id = $5))
            ORDER BY r.recorded_at DESC LIMIT 1) d ON true";
const CLAIM_INSERT: &str =
    "INSERT INTO claims (manifest, repo, item, def_hash, run_id, host, pid, start_time, claimed_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING";

/// The statements [`write_buffer`] uses.
struct BufferStatements {
    events: ::postgres::Statement,
    result: ::postgres::Statement,
    release: ::postgres::Statement,
}

impl BufferStatements {
    fn of(s: &mut Session) -> std::result::Result<Self, ::postgres::Error> {
        Ok(BufferStatements {
            events: s.statement(INSERT_EVENTS)?,
            result: s.statement(INSERT_RESULT)?,
            release: s.statement(RELEASE_CLAIM)?,
        })
    }
}

/// The ledger in a PostgreSQL database.
pub struct PgLedger {
    url: String,
    jobs: mpsc::Sender<Job>,
    buffered: Buffer,
    seq: u64,
    /// The server's time when this runner last read the past outcomes (its plan): a result
    /// recorded after it is news, whatever the clocks of the machines say.
    as_of: std::sync::Mutex<Option<std::time::SystemTime>>,
}

#[derive(Default)]
struct Buffer {
    events: Vec<PendingEvent>,
    results: Vec<PendingResult>,
}

struct PendingEvent {
    run_id: String,
    seq: i64,
    at: String,
    repo: Option<String>,
    item: Option<String>,
    body: String,
}

impl PgLedger {
    /// Connect to `url`, bring its schema up to date, and start the client's thread.
    pub fn open(url: &str) -> Result<Self> {
        let shown_url = shown(url);
        let (jobs, inbox) = mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = mpsc::sync_channel::<std::result::Result<(), String>>(1);
        let target = url.to_string();
        std::thread::Builder::new()
            .name("runner-postgres".into())
            .spawn(move || {
                let client = match Client::connect(&target, NoTls) {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = ready_tx.send(Err(message(&e)));
                        return;
                    }
                };
                let mut session = Session {
                    client,
                    statements: std::collections::HashMap::new(),
                    beating: None,
                    url: target.clone(),
                    locks: Default::default(),
                };
                if let Err(e) = migrate(&mut session.client) {
                    let _ = ready_tx.send(Err(message(&e)));
                    return;
                }
                let _ = ready_tx.send(Ok(()));
                serve(&mut session, &inbox);
            })
            .map_err(|e| LedgerError::Io {
                path: shown_url.clone(),
                source: e,
            })?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(PgLedger {
                url: shown_url,
                jobs,
                buffered: Buffer::default(),
                seq: 0,
                as_of: std::sync::Mutex::new(None),
            }),
            Ok(Err(message)) => Err(LedgerError::Server {
                url: shown_url,
                message,
            }),
            Err(_) => Err(LedgerError::Server {
                url: shown_url,
                message: "the connection thread ended".into(),
            }),
        }
    }

    /// The server, as it may be shown (no password).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Run `f` on the client's thread and wait for its answer. A connection lost on the way is
    /// made again (for [`ledger_retry`], with back-off) and `f` run again on it: a server that
    /// restarts stops no run; the caller waits, so nothing new starts meanwhile.
    fn call<T: Send + 'static>(
        &self,
        mut f: impl FnMut(&mut Session) -> std::result::Result<T, ::postgres::Error> + Send + 'static,
    ) -> Result<T> {
        let (tx, rx) = mpsc::sync_channel(1);
        let job: Job = Box::new(move |s| {
            let mut until = None;
            let answer = loop {
                match f(s) {
                    Err(e) if connection_lost(&e, &s.client) => {
                        let until = *until.get_or_insert_with(|| {
                            tracing::warn!(error = %message(&e), "the connection to the shared ledger was lost: connecting again");
                            std::time::Instant::now() + ledger_retry()
                        });
                        if !s.reconnect(until) {
                            break Err(e);
                        }
                    }
                    r => break r,
                }
            };
            let _ = tx.send(answer.map_err(|e| message(&e)));
        });
        self.jobs.send(job).map_err(|_| self.gone())?;
        match rx.recv() {
            Ok(r) => r.map_err(|message| LedgerError::Server {
                url: self.url.clone(),
                message,
            }),
            Err(_) => Err(self.gone()),
        }
    }

    fn gone(&self) -> LedgerError {
        LedgerError::Server {
            url: self.url.clone(),
            message: "the connection to the server was lost".into(),
        }
    }

    /// The buffered events and results, to write in the next transaction.
    fn take_buffer(&mut self) -> Buffer {
        std::mem::take(&mut self.buffered)
    }

    /// Make everything buffered durable.
    pub fn flush(&mut self) -> Result<()> {
        let buf = self.take_buffer();
        if buf.events.is_empty() && buf.results.is_empty() {
            return Ok(());
        }
        self.call(move |s| {
            let st = BufferStatements::of(s)?;
            let mut tx = s.client.transaction()?;
            write_buffer(&mut tx, &st, &buf)?;
            tx.commit()
        })
    }

    /// An item's latest event in a run: (at, body).
    fn latest_event(
        &self,
        run_id: &str,
        repo: &str,
        item: &str,
    ) -> Result<Option<(String, String)>> {
        let (r, p, i) = (run_id.to_string(), repo.to_string(), item.to_string());
        self.call(move |s| {
            Ok(s.client
                .query_opt(
                    "SELECT at, body FROM events WHERE run_id = $1 AND repo = $2 AND item = $3
                      ORDER BY seq DESC LIMIT 1",
                    &[&r, &p, &i],
                )?
                .map(|row| (row.get(0), row.get(1))))
        })
    }

    /// Prune a manifest's history as [`SqliteLedger::prune`] does, for every machine sharing the
    /// ledger: every run not among its latest `keep_runs`, or that started before `cutoff`, and
    /// neither going on nor `spare`, loses its plan and events (but publications) and its results
    /// but each item's latest result and latest completion per definition (and, for an item in
    /// `current`, its current definition's only); its claims go. A run that recorded no end
    /// counts as over only when its holder is provably dead on this host or its heartbeat has
    /// been silent for [`PRUNE_SILENT`]. Report folders are on the machine each run ran on, so
    /// a pruned run's row stays, marked, until a runner on that host (`host`) has removed its
    /// folder ([`PgLedger::forget`]). Returns the runs pruned now, with their folders where they
    /// are this host's, and in `earlier` this host's runs pruned before, with their folders.
    /// Runners pruning the same manifest at once take turns; one that would wait prunes nothing
    /// this time.
    ///
    /// [`SqliteLedger::prune`]: super::sqlite::SqliteLedger::prune
    pub fn prune_as(&mut self, ask: &Retention<'_>, host: &str) -> Result<Pruned> {
        let Retention {
            manifest,
            keep_runs,
            cutoff,
            at,
            spare,
            current,
        } = *ask;
        let buf = self.take_buffer();
        let m = manifest.to_string();
        let (cutoff, at, host) = (cutoff.to_string(), at.to_string(), host.to_string());
        let spare = spare.map(str::to_string);
        let current: Vec<&ItemKey> = current.iter().filter(|k| k.manifest == manifest).collect();
        let cur_repo: Vec<String> = current.iter().map(|k| k.repo.clone()).collect();
        let cur_item: Vec<String> = current.iter().map(|k| k.item.clone()).collect();
        let cur_def: Vec<String> = current.iter().map(|k| k.def_hash.clone()).collect();
        let lapse = lapse().as_secs_f64();
        self.call(move |s| {
            let st = BufferStatements::of(s)?;
            let mut tx = s.client.transaction()?;
            write_buffer(&mut tx, &st, &buf)?;
            let mut pruned = Pruned::default();
            let turn: bool = tx
                .query_one(
                    "SELECT pg_try_advisory_xact_lock($1)",
                    &[&repo_key(&format!("runner.prune\0{m}"))],
                )?
                .get(0);
            if !turn {
                tx.commit()?;
                pruned.elsewhere = true;
                return Ok(pruned);
            }
            let silent = PRUNE_SILENT.as_secs_f64();
            let candidates = tx.query(
                &format!(
                    "SELECT {RUN_COLUMNS}, run_dir, heartbeat_at < now() - make_interval(secs => $3)
                       FROM runs WHERE manifest = $1 AND pruned_at IS NULL
                      ORDER BY started_at DESC, id DESC"
                ),
                &[&m, &lapse, &silent],
            )?;
            let mut doomed: Vec<String> = Vec::new();
            for (rank, r) in candidates.iter().enumerate() {
                let run = run_of(r);
                // A lapsed heartbeat is enough to take a run's claims over, not to prove it
                // stopped (a network partition): a run that recorded no end is pruned only when
                // its holder is provably dead here, or after a day without a heartbeat.
                let over = run.ended_at.is_some() || run.holder.is_dead() || r.get::<_, bool>(17);
                if (rank >= keep_runs as usize || run.started_at.as_str() < cutoff.as_str())
                    && over
                    && spare.as_deref() != Some(run.id.as_str())
                {
                    let dir: String = r.get(16);
                    let ours = run.holder.host == host;
                    pruned
                        .runs
                        .push((run.id.clone(), if ours { dir } else { String::new() }));
                    doomed.push(run.id);
                }
            }
            if !doomed.is_empty() {
                pruned.events = tx.execute(
                    "DELETE FROM events WHERE run_id = ANY($1)
                       AND body NOT LIKE '{\"event\":\"published\"%'",
                    &[&doomed],
                )? as usize;
                // Each definition's latest result and latest completion, found once.
                pruned.results = tx.execute(
                    "DELETE FROM item_results r
                      USING (SELECT repo, item, def_hash, max(ended_at) AS last_at,
                                    max(ended_at) FILTER (WHERE outcome = 'completed') AS last_done
                               FROM item_results WHERE manifest = $1 GROUP BY repo, item, def_hash) l
                      WHERE r.manifest = $1 AND r.run_id = ANY($2)
                        AND l.repo = r.repo AND l.item = r.item AND l.def_hash = r.def_hash
                        AND r.ended_at < l.last_at
                        AND (r.outcome <> 'completed' OR r.ended_at < l.last_done)",
                    &[&m, &doomed],
                )? as usize;
                if !cur_repo.is_empty() {
                    pruned.results += tx.execute(
                        "DELETE FROM item_results r WHERE r.manifest = $1 AND r.run_id = ANY($2)
                           AND EXISTS (SELECT 1 FROM unnest($3::text[], $4::text[], $5::text[]) c(repo, item, def_hash)
                                       WHERE c.repo = r.repo AND c.item = r.item AND c.def_hash <> r.def_hash)",
                        &[&m, &doomed, &cur_repo, &cur_item, &cur_def],
                    )? as usize;
                }
                tx.execute("DELETE FROM claims WHERE run_id = ANY($1)", &[&doomed])?;
                tx.execute(
                    "UPDATE runs SET pruned_at = $2, plan_json = '', totals = NULL WHERE id = ANY($1)",
                    &[&doomed, &at],
                )?;
            }
            // This host's runs pruned before (by a runner on another machine): their folders
            // may be here.
            let earlier = tx.query(
                "SELECT id, run_dir FROM runs WHERE manifest = $1 AND pruned_at IS NOT NULL
                   AND host = $2 AND NOT (id = ANY($3))",
                &[&m, &host, &doomed],
            )?;
            pruned.earlier = earlier.iter().map(|r| (r.get(0), r.get(1))).collect();
            tx.commit()?;
            Ok(pruned)
        })
    }
}

/// How long a run that recorded no end must have written no heartbeat before retention prunes
/// it.
const PRUNE_SILENT: Duration = Duration::from_secs(24 * 3600);

/// A manifest's latest runs: `$1` the manifest, `$2` how many.
const RECENT_RUNS: &str = "(SELECT id FROM runs WHERE manifest = $1 AND pruned_at IS NULL
      ORDER BY started_at DESC, id DESC LIMIT $2)";

/// The columns [`run_of`] reads; `$2` is the heartbeat's lapse in seconds.
const RUN_COLUMNS: &str =
    "id, manifest, manifest_path, manifest_sha256, host, pid, start_time, started_by,
     started_at, ended_at, ending, cause, stop_requested_by, stop_reason, containment,
     heartbeat_at > now() - make_interval(secs => $2)";

fn run_of(r: &::postgres::Row) -> RunRow {
    let beating: bool = r.get(15);
    RunRow {
        lapsed: !beating,
        id: r.get(0),
        manifest: r.get(1),
        manifest_path: r.get(2),
        manifest_sha256: r.get(3),
        holder: holder_of(r.get(4), r.get(5), r.get(6)),
        started_by: r.get(7),
        started_at: r.get(8),
        ended_at: r.get(9),
        ending: r.get(10),
        cause: r.get(11),
        stop_requested_by: r.get(12),
        stop_reason: r.get(13),
        containment: r.get(14),
    }
}

/// A lock key for a repository identity: the first 8 bytes of its SHA-256, as PostgreSQL's
/// advisory locks take a 64-bit key.
fn repo_key(identity: &str) -> i64 {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(format!("runner.repository\0{identity}").as_bytes());
    let mut k = [0u8; 8];
    k.copy_from_slice(&d[..8]);
    i64::from_be_bytes(k)
}

fn message(e: &::postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.severity(), db.message()),
        None => {
            // The cause says what went wrong ("Connection refused"); the error only where.
            let mut text = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                text.push_str(&format!(": {s}"));
                source = s.source();
            }
            text
        }
    }
}

/// The client thread: run jobs as they come, and write the heartbeat of the run being served
/// whenever [`heartbeat`] passes without one.
fn serve(s: &mut Session, inbox: &mpsc::Receiver<Job>) {
    let every = heartbeat();
    let mut last_beat = std::time::Instant::now();
    loop {
        let wait = every.saturating_sub(last_beat.elapsed());
        match inbox.recv_timeout(wait) {
            Ok(job) => job(s),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
        if last_beat.elapsed() >= every {
            if let Some(run) = &s.beating {
                let run = run.clone();
                let beat = |s: &mut Session| {
                    s.client.execute(
                        "UPDATE runs SET heartbeat_at = now() WHERE id = $1",
                        &[&run],
                    )
                };
                match beat(s) {
                    Err(e) if connection_lost(&e, &s.client) => {
                        // Back before the others judge this run gone, and its locks with it.
                        tracing::warn!(error = %message(&e), "the connection to the shared ledger was lost: connecting again");
                        if s.reconnect(std::time::Instant::now() + ledger_retry()) {
                            let _ = beat(s);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %message(&e), "the run's heartbeat was not written");
                    }
                    Ok(_) => {}
                }
            }
            last_beat = std::time::Instant::now();
        }
    }
}

fn migrate(c: &mut Client) -> std::result::Result<(), ::postgres::Error> {
    let mut tx = c.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS runner_migrations (version INTEGER PRIMARY KEY, at TIMESTAMPTZ NOT NULL DEFAULT now())",
    )?;
    let done: i32 = tx
        .query_one(
            "SELECT coalesce(max(version), 0) FROM runner_migrations",
            &[],
        )?
        .get(0);
    for (i, m) in MIGRATIONS.iter().enumerate().skip(done as usize) {
        tx.batch_execute(m)?;
        tx.execute(
            "INSERT INTO runner_migrations (version) VALUES ($1)",
            &[&(i as i32 + 1)],
        )?;
    }
    tx.commit()
}

fn write_buffer(
    tx: &mut ::postgres::Transaction<'_>,
    st: &BufferStatements,
    buf: &Buffer,
) -> std::result::Result<(), ::postgres::Error> {
    if !buf.events.is_empty() {
        let col = |f: fn(&PendingEvent) -> Option<&str>| -> Vec<Option<&str>> {
            buf.events.iter().map(f).collect()
        };
        let runs = col(|e| Some(e.run_id.as_str()));
        let seqs: Vec<i64> = buf.events.iter().map(|e| e.seq).collect();
        let ats = col(|e| Some(e.at.as_str()));
        let repos = col(|e| e.repo.as_deref());
        let items = col(|e| e.item.as_deref());
        let bodies = col(|e| Some(e.body.as_str()));
        tx.execute(&st.events, &[&runs, &seqs, &ats, &repos, &items, &bodies])?;
    }
    for r in &buf.results {
        tx.execute(
            &st.result,
            &[
                &r.key.manifest,
                &r.key.repo,
                &r.key.item,
                &r.key.def_hash,
                &r.run_id,
                &r.outcome.as_str(),
                &r.reason,
                &r.cause,
                &r.at,
            ],
        )?;
        // A result releases the item's claim.
        tx.execute(
            &st.release,
            &[
                &r.key.manifest,
                &r.key.repo,
                &r.key.item,
                &r.key.def_hash,
                &r.run_id,
            ],
        )?;
    }
    Ok(())
}

fn pause_of(
    tx: &mut impl ::postgres::GenericClient,
    manifest: &str,
) -> std::result::Result<Option<String>, ::postgres::Error> {
    let row = tx.query_opt(
        "SELECT paused_by, reason, paused_at FROM pauses WHERE manifest = $1",
        &[&manifest],
    )?;
    Ok(row.map(|r| {
        pause_text(
            r.get::<_, &str>(0),
            r.get::<_, Option<&str>>(1),
            r.get::<_, &str>(2),
        )
    }))
}

fn holder_of(host: String, pid: i64, start_time: Option<i64>) -> Holder {
    Holder {
        host,
        pid: pid as u32,
        start_time: start_time.map(|t| t as u64),
    }
}

impl Ledger for PgLedger {
    fn flush_all(&mut self) -> Result<()> {
        self.flush()
    }
    fn begin_run(
        &mut self,
        run: &RunRow,
        plan_json: &str,
        workers: u32,
        run_dir: &str,
    ) -> Result<()> {
        let run = run.clone();
        let (plan, dir) = (plan_json.to_string(), run_dir.to_string());
        self.call(move |s| {
            s.client.execute(
                "INSERT INTO runs (id, manifest, manifest_path, manifest_sha256, host, pid, start_time, started_by, started_at, workers, plan_json, run_dir, containment)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
                &[
                    &run.id,
                    &run.manifest,
                    &run.manifest_path,
                    &run.manifest_sha256,
                    &run.holder.host,
                    &i64::from(run.holder.pid),
                    &run.holder.start_time.map(|t| t as i64),
                    &run.started_by,
                    &run.started_at,
                    &(workers as i32),
                    &plan,
                    &dir,
                    &run.containment,
                ],
            )?;
            s.beating = Some(run.id.clone());
            Ok(())
        })
    }

    fn end_run(
        &mut self,
        run_id: &str,
        ending: RunEnding,
        cause: Option<&str>,
        at: &str,
    ) -> Result<()> {
        let buf = self.take_buffer();
        let (id, end, why, when) = (
            run_id.to_string(),
            ending.as_str(),
            cause.map(str::to_string),
            at.to_string(),
        );
        self.call(move |s| {
            let st = BufferStatements::of(s)?;
            let mut tx = s.client.transaction()?;
            write_buffer(&mut tx, &st, &buf)?;
            tx.execute(
                "UPDATE runs SET ended_at = $2, ending = $3, cause = $4 WHERE id = $1",
                &[&id, &when, &end, &why],
            )?;
            // Claims no result released (cancelled items) go with the run.
            tx.execute("DELETE FROM claims WHERE run_id = $1", &[&id])?;
            tx.commit()?;
            if s.beating.as_deref() == Some(id.as_str()) {
                s.beating = None;
            }
            Ok(())
        })
    }

    fn past_outcomes(&self, manifest: &str) -> Result<Vec<(ItemKey, PastOutcome)>> {
        let m = manifest.to_string();
        let (past, as_of) = self.call(move |s| {
            let mut tx = s.client.transaction()?;
            let as_of: std::time::SystemTime = tx.query_one("SELECT now()", &[])?.get(0);
            // The latest terminal result of each item.
            let rows = tx.query(
                "SELECT DISTINCT ON (repo, item, def_hash) repo, item, def_hash, outcome, run_id
                   FROM item_results
                  WHERE manifest = $1 AND outcome IN ('completed', 'halted', 'failed')
                  ORDER BY repo, item, def_hash, recorded_at DESC",
                &[&m],
            )?;
            let past = rows
                .iter()
                .filter_map(|r| {
                    let outcome = sqlite::outcome_from(r.get::<_, &str>(3))?;
                    Some((
                        ItemKey {
                            manifest: m.clone(),
                            repo: r.get(0),
                            item: r.get(1),
                            def_hash: r.get(2),
                        },
                        PastOutcome {
                            outcome,
                            run_id: r.get(4),
                        },
                    ))
                })
                .collect::<Vec<_>>();
            tx.commit()?;
            Ok((past, as_of))
        })?;
        if let Ok(mut a) = self.as_of.lock() {
            *a = Some(as_of);
        }
        Ok(past)
    }

    fn claim(&mut self, key: &ItemKey, run_id: &str, holder: &Holder) -> Result<Claim> {
        let buf = self.take_buffer();
        let (key, run, holder) = (key.clone(), run_id.to_string(), holder.clone());
        let lapse = lapse().as_secs_f64();
        let as_of = self.as_of.lock().ok().and_then(|a| *a);
        self.call(move |s| {
            let st = BufferStatements::of(s)?;
            let blocked = s.statement(CLAIM_BLOCKED)?;
            let insert = s.statement(CLAIM_INSERT)?;
            let mut tx = s.client.transaction()?;
            write_buffer(&mut tx, &st, &buf)?;
            // Paused, or finished by another run since this one looked (read its plan's past
            // outcomes, or else began): nothing to claim. The server's clock decides whether a
            // result is news, not the machines'.
            let row = tx.query_one(
                &blocked,
                &[&key.manifest, &key.repo, &key.item, &key.def_hash, &run, &as_of],
            )?;
            let (paused_by, reason, paused_at): (Option<String>, Option<String>, Option<String>) =
                (row.get(0), row.get(1), row.get(2));
            if let (Some(by), Some(at)) = (paused_by, paused_at) {
                tx.commit()?;
                return Ok(Claim::Paused(pause_text(&by, reason.as_deref(), &at)));
            }
            let (done_by, outcome): (Option<String>, Option<String>) = (row.get(3), row.get(4));
            if let (Some(run_id), Some(outcome)) = (done_by, outcome) {
                tx.commit()?;
                return Ok(Claim::AlreadyDone { run_id, outcome });
            }
            let now = crate::support::clock::now();
            let pid = i64::from(holder.pid);
            let start = holder.start_time.map(|t| t as i64);
            let inserted = tx.execute(
                &insert,
                &[&key.manifest, &key.repo, &key.item, &key.def_hash, &run, &holder.host, &pid, &start, &now],
            )?;
            if inserted == 1 {
                tx.commit()?;
                return Ok(Claim::Claimed);
            }
            // A claim is there: whose, and is its run alive? A row another runner is examining
            // right now is skipped, not waited for.
            let row = tx.query_opt(
                "SELECT c.run_id, c.host, c.pid, c.start_time,
                        coalesce(r.ended_at IS NULL AND r.heartbeat_at > now() - make_interval(secs => $5), false)
                   FROM claims c LEFT JOIN runs r ON r.id = c.run_id
                  WHERE c.manifest = $1 AND c.repo = $2 AND c.item = $3 AND c.def_hash = $4
                  FOR UPDATE OF c SKIP LOCKED",
                &[&key.manifest, &key.repo, &key.item, &key.def_hash, &lapse],
            )?;
            let Some(row) = row else {
                tx.commit()?;
                return Ok(Claim::HeldBy {
                    run_id: "another runner".into(),
                });
            };
            let other: String = row.get(0);
            if other == run {
                tx.commit()?;
                return Ok(Claim::Claimed);
            }
            let other_holder = holder_of(row.get(1), row.get(2), row.get(3));
            let beating: bool = row.get(4);
            if beating && !other_holder.is_dead() {
                tx.commit()?;
                return Ok(Claim::HeldBy { run_id: other });
            }
            // Take over the very claim that was judged dead.
            tx.execute(
                "UPDATE claims SET run_id = $5, host = $6, pid = $7, start_time = $8, claimed_at = $9
                  WHERE manifest = $1 AND repo = $2 AND item = $3 AND def_hash = $4 AND run_id = $10",
                &[&key.manifest, &key.repo, &key.item, &key.def_hash, &run, &holder.host, &pid, &start, &now, &other],
            )?;
            tx.commit()?;
            Ok(Claim::Claimed)
        })
    }

    fn event(&mut self, run_id: &str, item: Option<&ItemKey>, ev: &Event, at: &str) -> Result<()> {
        self.seq += 1;
        let body = serde_json::to_string(ev).map_err(|source| LedgerError::Record {
            path: self.url.clone(),
            what: "event to record".into(),
            source,
        })?;
        self.buffered.events.push(PendingEvent {
            run_id: run_id.to_string(),
            seq: self.seq as i64,
            at: at.to_string(),
            repo: item.map(|k| k.repo.clone()),
            item: item.map(|k| k.item.clone()),
            body,
        });
        if let Some(r) = super::result_of(run_id, item, ev, at) {
            self.buffered.results.push(r);
        }
        Ok(())
    }

    fn commit_results(&mut self) -> Result<()> {
        if !self.buffered.results.is_empty() {
            self.flush()?;
        }
        Ok(())
    }

    fn paused(&self, manifest: &str) -> Result<Option<String>> {
        let m = manifest.to_string();
        self.call(move |s| pause_of(&mut s.client, &m))
    }

    fn live_claims_of(&self, manifest: &str) -> Result<Vec<(ItemKey, String)>> {
        let m = manifest.to_string();
        let lapse = lapse().as_secs_f64();
        self.call(move |s| {
            let rows = s.client.query(
                "SELECT c.repo, c.item, c.def_hash, c.run_id, c.host, c.pid, c.start_time
                   FROM claims c JOIN runs r ON r.id = c.run_id
                  WHERE c.manifest = $1 AND r.ended_at IS NULL
                    AND r.heartbeat_at > now() - make_interval(secs => $2)",
                &[&m, &lapse],
            )?;
            Ok(rows
                .iter()
                .filter(|r| !holder_of(r.get(4), r.get(5), r.get(6)).is_dead())
                .map(|r| {
                    (
                        ItemKey {
                            manifest: m.clone(),
                            repo: r.get(0),
                            item: r.get(1),
                            def_hash: r.get(2),
                        },
                        r.get(3),
                    )
                })
                .collect())
        })
    }

    fn run_is_live(&self, run_id: &str) -> Result<bool> {
        let id = run_id.to_string();
        let lapse = lapse().as_secs_f64();
        self.call(move |s| {
            let row = s.client.query_opt(
                "SELECT host, pid, start_time FROM runs
                  WHERE id = $1 AND ended_at IS NULL
                    AND heartbeat_at > now() - make_interval(secs => $2)",
                &[&id, &lapse],
            )?;
            Ok(row.is_some_and(|r| !holder_of(r.get(0), r.get(1), r.get(2)).is_dead()))
        })
    }

    fn set_paused(
        &mut self,
        manifest: &str,
        by: &str,
        reason: Option<&str>,
        at: &str,
    ) -> Result<()> {
        let (m, b, r, a) = (
            manifest.to_string(),
            by.to_string(),
            reason.map(str::to_string),
            at.to_string(),
        );
        self.call(move |s| {
            s.client
                .execute(
                    "INSERT INTO pauses (manifest, paused_by, reason, paused_at) VALUES ($1, $2, $3, $4)
                     ON CONFLICT (manifest) DO UPDATE SET paused_by = $2, reason = $3, paused_at = $4",
                    &[&m, &b, &r, &a],
                )
                .map(|_| ())
        })
    }

    fn clear_paused(&mut self, manifest: &str) -> Result<bool> {
        let m = manifest.to_string();
        self.call(move |s| {
            s.client
                .execute("DELETE FROM pauses WHERE manifest = $1", &[&m])
                .map(|n| n > 0)
        })
    }

    /// A run, as recorded.
    fn run(&self, id: &str) -> Result<Option<RunRow>> {
        let id = id.to_string();
        let lapse = lapse().as_secs_f64();
        self.call(move |s| {
            let row = s.client.query_opt(
                &format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = $1"),
                &[&id, &lapse],
            )?;
            Ok(row.as_ref().map(run_of))
        })
    }

    /// Ask a run to stop, on whichever machine it runs.
    fn request_stop(
        &mut self,
        run_id: &str,
        by: &str,
        reason: Option<&str>,
        at: &str,
    ) -> Result<()> {
        let (id, b, r, a) = (
            run_id.to_string(),
            by.to_string(),
            reason.map(str::to_string),
            at.to_string(),
        );
        self.call(move |s| {
            s.client
                .execute(
                    "UPDATE runs SET stop_requested_by = $2, stop_reason = $3, stop_requested_at = $4 WHERE id = $1",
                    &[&id, &b, &r, &a],
                )
                .map(|_| ())
        })
    }

    /// The latest runs (of `manifest`, or of every manifest), newest first.
    fn recent_runs(&self, manifest: Option<&str>, limit: usize) -> Result<Vec<RunRow>> {
        let m = manifest.map(str::to_string);
        let lapse = lapse().as_secs_f64();
        let limit = limit as i64;
        self.call(move |s| {
            let rows = s.client.query(
                &format!(
                    "SELECT {RUN_COLUMNS} FROM runs WHERE ($1::text IS NULL OR manifest = $1)
                        AND pruned_at IS NULL
                      ORDER BY started_at DESC, id DESC LIMIT $3"
                ),
                &[&m, &lapse, &limit],
            )?;
            Ok(rows.iter().map(run_of).collect())
        })
    }

    /// The key that authenticates the verdicts this ledger's runs cache, made the first time it
    /// is asked for (by whichever runner asks first).
    fn verdict_key(&mut self) -> Result<String> {
        let fresh = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        self.call(move |s| {
            s.client.execute(
                "INSERT INTO secrets (name, value) VALUES ('verdicts', $1) ON CONFLICT DO NOTHING",
                &[&fresh],
            )?;
            Ok(s.client
                .query_one("SELECT value FROM secrets WHERE name = 'verdicts'", &[])?
                .get(0))
        })
    }

    /// The items run `id` still holds claims on (repository, item): what it was working on, if
    /// it died.
    fn claimed_by(&self, id: &str) -> Result<Vec<(String, String)>> {
        let id = id.to_string();
        self.call(move |s| {
            Ok(s.client
                .query("SELECT repo, item FROM claims WHERE run_id = $1", &[&id])?
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect())
        })
    }

    /// Run `id`'s items per outcome: as its report counted them once it ended, else the
    /// results it has recorded so far.
    fn counts_of(&self, id: &str) -> Result<std::collections::BTreeMap<ItemOutcome, usize>> {
        let id = id.to_string();
        let (totals, rows) = self.call(move |s| {
            let totals: Option<String> = s
                .client
                .query_opt("SELECT totals FROM runs WHERE id = $1", &[&id])?
                .and_then(|r| r.get(0));
            let rows: Vec<(String, i64)> = s
                .client
                .query(
                    "SELECT outcome, count(*) FROM item_results WHERE run_id = $1 GROUP BY outcome",
                    &[&id],
                )?
                .iter()
                .map(|r| (r.get(0), r.get(1)))
                .collect();
            Ok((totals, rows))
        })?;
        if let Some(t) = totals.and_then(|t| serde_json::from_str::<RunTotals>(&t).ok()) {
            return Ok(t.counts);
        }
        Ok(rows
            .into_iter()
            .filter_map(|(o, n)| {
                Some((
                    ItemOutcome::ALL.into_iter().find(|x| x.as_str() == o)?,
                    n.max(0) as usize,
                ))
            })
            .collect())
    }

    /// What a run's workers reported they used.
    fn usage_of(&self, id: &str) -> Result<Option<crate::events::Usage>> {
        let id = id.to_string();
        let bodies = self.call(move |s| {
            let rows = s.client.query(
                "SELECT body FROM events WHERE run_id = $1 AND body LIKE '{\"event\":\"usage\"%'",
                &[&id],
            )?;
            Ok(rows
                .iter()
                .map(|r| r.get::<_, String>(0))
                .collect::<Vec<_>>())
        })?;
        Ok(sum_usage(bodies))
    }

    fn resting_until(&self, run_id: &str, repo: &str, item: &str) -> Result<Option<String>> {
        Ok(self
            .latest_event(run_id, repo, item)?
            .and_then(|(at, body)| resting_until_of(&at, &body)))
    }

    fn waiting_for_resource(
        &self,
        run_id: &str,
        repo: &str,
        item: &str,
    ) -> Result<Option<(String, String)>> {
        Ok(self
            .latest_event(run_id, repo, item)?
            .and_then(|(at, body)| waiting_of(&at, &body)))
    }

    /// Items the latest run of `manifest` held at plan time.
    fn held_items(&self, manifest: &str) -> Result<Vec<HeldItem>> {
        let m = manifest.to_string();
        self.call(move |s| {
            let rows = s.client.query(
                "SELECT r.repo, r.item, COALESCE(r.reason, ''), r.cause FROM item_results r
                  WHERE r.manifest = $1 AND r.outcome = 'held' AND r.run_id = (
                    SELECT id FROM runs WHERE manifest = $1 ORDER BY started_at DESC, id DESC LIMIT 1)",
                &[&m],
            )?;
            Ok(rows
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
                .collect())
        })
    }

    /// Claims of live runs, on every machine: (run, repo, item, holder).
    fn live_claims(&self) -> Result<Vec<(String, String, String, Holder)>> {
        let lapse = lapse().as_secs_f64();
        self.call(move |s| {
            let rows = s.client.query(
                "SELECT c.run_id, c.repo, c.item, c.host, c.pid, c.start_time
                   FROM claims c JOIN runs r ON r.id = c.run_id
                  WHERE r.ended_at IS NULL AND r.heartbeat_at > now() - make_interval(secs => $1)
                  ORDER BY c.claimed_at",
                &[&lapse],
            )?;
            Ok(rows
                .iter()
                .map(|r| {
                    (
                        r.get(0),
                        r.get(1),
                        r.get(2),
                        holder_of(r.get(3), r.get(4), r.get(5)),
                    )
                })
                .filter(|c: &(String, String, String, Holder)| !c.3.is_dead())
                .collect())
        })
    }

    /// What is needed to render a run's report again.
    fn run_events(&self, id: &str) -> Result<Option<RunReplay>> {
        let id = id.to_string();
        let url = self.url.clone();
        let got = self.call(move |s| {
            let Some(head) = s.client.query_opt(
                "SELECT plan_json, workers, run_dir, started_at FROM runs WHERE id = $1 AND pruned_at IS NULL",
                &[&id],
            )?
            else {
                return Ok(None);
            };
            let rows = s.client.query(
                "SELECT at, body FROM events WHERE run_id = $1 ORDER BY seq",
                &[&id],
            )?;
            let events: Vec<(String, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
            Ok(Some((
                head.get::<_, String>(0),
                head.get::<_, i32>(1),
                head.get::<_, String>(2),
                head.get::<_, String>(3),
                events,
                id.clone(),
            )))
        })?;
        let Some((plan_json, workers, run_dir, started_at, raw, id)) = got else {
            return Ok(None);
        };
        let mut events = Vec::with_capacity(raw.len());
        for (at, body) in raw {
            let ev: Event = serde_json::from_str(&body).map_err(|source| LedgerError::Record {
                path: url.clone(),
                what: format!("event of run `{id}`"),
                source,
            })?;
            events.push((at, ev));
        }
        Ok(Some(RunReplay {
            plan_json,
            workers: workers as u32,
            run_dir,
            started_at,
            events,
        }))
    }

    /// When retention pruned a run, if it did.
    fn pruned_at(&self, id: &str) -> Result<Option<String>> {
        let id = id.to_string();
        self.call(move |s| {
            Ok(s.client
                .query_opt("SELECT pruned_at FROM runs WHERE id = $1", &[&id])?
                .and_then(|r| r.get(0)))
        })
    }

    /// The report folder a run wrote to.
    fn run_dir(&self, id: &str) -> Result<Option<String>> {
        let id = id.to_string();
        self.call(move |s| {
            Ok(s.client
                .query_opt("SELECT run_dir FROM runs WHERE id = $1", &[&id])?
                .map(|r| r.get(0)))
        })
    }

    /// Quarantined repositories: (path, run, reason).
    fn quarantines(&self) -> Result<Vec<(String, String, String)>> {
        self.call(|s| {
            let rows = s.client.query(
                "SELECT repo_path, run_id, reason FROM quarantines ORDER BY at",
                &[],
            )?;
            Ok(rows
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2)))
                .collect())
        })
    }

    /// Record that a repository's processes could not be proven gone.
    fn quarantine(&mut self, path: &str, run_id: &str, reason: &str, at: &str) -> Result<()> {
        let (p, r, why, when) = (
            path.to_string(),
            run_id.to_string(),
            reason.to_string(),
            at.to_string(),
        );
        self.call(move |s| {
            s.client
                .execute(
                    "INSERT INTO quarantines (repo_path, run_id, reason, at) VALUES ($1, $2, $3, $4)
                     ON CONFLICT (repo_path) DO UPDATE SET run_id = $2, reason = $3, at = $4",
                    &[&p, &r, &why, &when],
                )
                .map(|_| ())
        })
    }

    /// Lift a quarantine; whether there was one.
    fn release_quarantine(&mut self, path: &str) -> Result<bool> {
        let p = path.to_string();
        self.call(move |s| {
            s.client
                .execute("DELETE FROM quarantines WHERE repo_path = $1", &[&p])
                .map(|n| n > 0)
        })
    }

    /// Record what a run came to.
    fn record_totals(&mut self, id: &str, totals: &RunTotals) -> Result<()> {
        let json = serde_json::to_string(totals).map_err(|source| LedgerError::Record {
            path: self.url.clone(),
            what: "run totals".into(),
            source,
        })?;
        let id = id.to_string();
        self.call(move |s| {
            s.client
                .execute("UPDATE runs SET totals = $2 WHERE id = $1", &[&id, &json])
                .map(|_| ())
        })
    }

    /// What each item's worker and gates took together in each of `manifest`'s latest `limit`
    /// runs: milliseconds by `(repo, item)`.
    fn item_durations(
        &self,
        manifest: &str,
        limit: usize,
    ) -> Result<std::collections::HashMap<(String, String), Vec<u64>>> {
        let m = manifest.to_string();
        let limit = limit as i64;
        let rows = self.call(move |s| {
            let rows = s.client.query(
                &format!(
                    "SELECT run_id, repo, item, body FROM events
                      WHERE (body LIKE '{{\"event\":\"worker-finished\"%' OR body LIKE '{{\"event\":\"gate-finished\"%')
                        AND repo IS NOT NULL AND item IS NOT NULL AND run_id IN {RECENT_RUNS}"
                ),
                &[&m, &limit],
            )?;
            Ok(rows
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
                .collect::<Vec<(String, String, String, String)>>())
        })?;
        Ok(item_durations_of(rows))
    }

    /// How long each gate took when it passed, in `manifest`'s latest `limit` runs.
    fn gate_durations(
        &self,
        manifest: &str,
        limit: usize,
    ) -> Result<std::collections::HashMap<String, Vec<u64>>> {
        let m = manifest.to_string();
        let limit = limit as i64;
        let bodies = self.call(move |s| {
            let rows = s.client.query(
                &format!(
                    "SELECT body FROM events WHERE body LIKE '{{\"event\":\"gate-finished\"%'
                        AND run_id IN {RECENT_RUNS}"
                ),
                &[&m, &limit],
            )?;
            Ok(rows
                .iter()
                .map(|r| r.get::<_, String>(0))
                .collect::<Vec<_>>())
        })?;
        Ok(gate_durations_of(bodies))
    }

    /// What each item's work branch was last published as.
    fn publications_of(&self, manifest: &str) -> Result<Publications> {
        let m = manifest.to_string();
        let rows = self.call(move |s| {
            let rows = s.client.query(
                "SELECT e.repo, e.item, e.body FROM events e JOIN runs r ON r.id = e.run_id
                  WHERE r.manifest = $1 AND e.body LIKE '{\"event\":\"published\"%'
                  ORDER BY e.id",
                &[&m],
            )?;
            Ok(rows
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2)))
                .collect::<Vec<(Option<String>, Option<String>, String)>>())
        })?;
        Ok(publications_from(rows))
    }

    /// Runs pruned whose report folders are gone: their rows go too, unless a kept result or
    /// publication names them.
    fn forget(&mut self, ids: &[String]) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let ids = ids.to_vec();
        self.call(move |s| {
            s.client
                .execute(
                    "DELETE FROM runs r WHERE r.id = ANY($1) AND r.pruned_at IS NOT NULL
                       AND NOT EXISTS (SELECT 1 FROM item_results n WHERE n.run_id = r.id)
                       AND NOT EXISTS (SELECT 1 FROM events e WHERE e.run_id = r.id
                                         AND e.body LIKE '{\"event\":\"published\"%')",
                    &[&ids],
                )
                .map(|_| ())
        })
    }

    /// Take the repository's lock for this runner (every machine's runners share it), unless
    /// another holds it. Held until [`PgLedger::unlock_repo`] or until this runner's connection
    /// ends.
    fn try_lock_repo(&self, identity: &str) -> Result<bool> {
        let key = repo_key(identity);
        self.call(move |s| {
            let st = s.statement("SELECT pg_try_advisory_lock($1)")?;
            let got = s.client.query_one(&st, &[&key])?.get::<_, bool>(0);
            if got {
                s.locks.insert(key);
            }
            Ok(got)
        })
    }

    /// Let a repository's lock go.
    fn unlock_repo(&self, identity: &str) -> Result<()> {
        let key = repo_key(identity);
        self.call(move |s| {
            s.locks.remove(&key);
            let st = s.statement("SELECT pg_advisory_unlock($1)")?;
            s.client.query_one(&st, &[&key]).map(|_| ())
        })
    }

    fn shown(&self) -> String {
        self.url().to_string()
    }

    fn is_shared(&self) -> bool {
        true
    }

    fn prune(&mut self, ask: &Retention<'_>) -> Result<Pruned> {
        self.prune_as(ask, &crate::support::host::hostname())
    }
}

impl Drop for PgLedger {
    fn drop(&mut self) {
        // What is buffered is written before the connection goes.
        let _ = self.flush();
    }
}

impl History for PgLedger {
    /// The latest `limit` runs of `manifest`, for the history page, newest first.
    fn run_history(&self, manifest: &str, limit: usize) -> Result<Vec<RunHistory>> {
        let m = manifest.to_string();
        let lapse = lapse().as_secs_f64();
        let limit = limit as i64;
        self.call(move |s| {
            let rows = s.client.query(
                &format!(
                    "SELECT {RUN_COLUMNS}, run_dir, totals FROM runs WHERE manifest = $1
                        AND pruned_at IS NULL
                      ORDER BY started_at DESC, id DESC LIMIT $3"
                ),
                &[&m, &lapse, &limit],
            )?;
            Ok(rows
                .iter()
                .map(|r| RunHistory {
                    run: run_of(r),
                    run_dir: r.get(16),
                    totals: r
                        .get::<_, Option<String>>(17)
                        .and_then(|t| serde_json::from_str(&t).ok()),
                })
                .collect())
        })
    }

    /// The results of `manifest`'s items in its latest `limit` runs: (repo, item, run,
    /// outcome), oldest first.
    fn recent_item_results(
        &self,
        manifest: &str,
        limit: usize,
    ) -> Result<Vec<(String, String, String, ItemOutcome)>> {
        let m = manifest.to_string();
        let limit = limit as i64;
        self.call(move |s| {
            let rows = s.client.query(
                &format!(
                    "SELECT repo, item, run_id, outcome FROM item_results
                      WHERE manifest = $1 AND run_id IN {RECENT_RUNS} ORDER BY recorded_at"
                ),
                &[&m, &limit],
            )?;
            Ok(rows
                .iter()
                .filter_map(|r| {
                    let o = sqlite::outcome_from(r.get::<_, &str>(3))?;
                    Some((r.get(0), r.get(1), r.get(2), o))
                })
                .collect())
        })
    }
}
