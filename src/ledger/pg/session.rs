//! The PostgreSQL client's thread: the connection, the retries of a lost one
//! (`RUNNER_LEDGER_RETRY`), the heartbeat and how long a run may miss it.

use ::postgres::{Client, NoTls};
use std::sync::mpsc;
use std::time::Duration;

/// How often a live run's heartbeat is written: a sixth of [`lapse`], at most 5 seconds.
pub fn heartbeat() -> Duration {
    (lapse() / 6).clamp(Duration::from_millis(200), Duration::from_secs(5))
}

/// How long a run may miss its heartbeat before its claims are taken over:
/// `RUNNER_HEARTBEAT_LAPSE` (read once, at the start of a command), else 30 seconds — six
/// missed beats.
pub fn lapse() -> Duration {
    Duration::from_millis(LAPSE_MS.load(std::sync::atomic::Ordering::Relaxed))
}

static LAPSE_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(30_000);

/// Set how long a run may miss its heartbeat (`RUNNER_HEARTBEAT_LAPSE`).
pub(crate) fn set_heartbeat_lapse(d: Duration) {
    LAPSE_MS.store(
        u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// Whether a `--state` names a PostgreSQL database rather than a file.
pub(crate) fn is_url(state: &str) -> bool {
    state.starts_with("postgres://") || state.starts_with("postgresql://")
}

/// A url as it may be shown: without its password.
pub fn shown(url: &str) -> String {
    crate::plan::repos::redact_url(url)
}

pub(super) type Job = Box<dyn FnOnce(&mut Session) + Send>;

/// What the client thread holds: the connection, its prepared statements, and the run it
/// beats for.
pub(super) struct Session {
    pub(super) client: Client,
    /// Statements prepared once per connection: a statement prepared anew costs a round trip.
    pub(super) statements: std::collections::HashMap<&'static str, ::postgres::Statement>,
    /// The run whose heartbeat this connection writes.
    pub(super) beating: Option<String>,
    /// Where to connect again when the connection is lost.
    pub(super) url: String,
    /// The repositories' advisory locks this session holds: a lost connection loses them, and a
    /// new one takes them again before anything else.
    pub(super) locks: std::collections::BTreeSet<i64>,
}

/// How long a lost connection to the server is tried again before the ledger is failed
/// (`RUNNER_LEDGER_RETRY`, a duration; default 3 minutes): a server restarted, failed over or
/// briefly unreachable stops no run.
pub(super) fn ledger_retry() -> std::time::Duration {
    std::time::Duration::from_millis(LEDGER_RETRY_MS.load(std::sync::atomic::Ordering::Relaxed))
}

pub(super) static LEDGER_RETRY_MS: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(180_000);

/// Set how long a lost connection is tried again (`RUNNER_LEDGER_RETRY`).
pub(crate) fn set_ledger_retry(d: std::time::Duration) {
    LEDGER_RETRY_MS.store(d.as_millis() as u64, std::sync::atomic::Ordering::Relaxed);
}

/// Whether `e` says the connection is gone (or the server is going away), rather than that the
/// statement was wrong: the work is done again on a new connection.
pub(super) fn connection_lost(e: &::postgres::Error, client: &Client) -> bool {
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
    pub(super) fn reconnect(&mut self, until: std::time::Instant) -> bool {
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
    pub(super) fn statement(
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

pub(super) fn message(e: &::postgres::Error) -> String {
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
pub(super) fn serve(s: &mut Session, inbox: &mpsc::Receiver<Job>) {
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
