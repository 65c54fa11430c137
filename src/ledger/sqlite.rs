//! The SQLite ledger: WAL mode, a busy timeout, numbered migrations, one writer per process.

use super::*;
use rusqlite::{Connection, OptionalExtension, params};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Numbered migrations; `PRAGMA user_version` records how many have run.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE runs (
    id TEXT PRIMARY KEY,
    manifest TEXT NOT NULL,
    manifest_path TEXT NOT NULL,
    manifest_sha256 TEXT NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    start_time INTEGER,
    started_by TEXT NOT NULL,
    started_at TEXT NOT NULL,
    workers INTEGER NOT NULL,
    run_dir TEXT NOT NULL,
    plan_json TEXT NOT NULL,
    ended_at TEXT,
    ending TEXT,
    cause TEXT,
    stop_requested_by TEXT,
    stop_reason TEXT,
    stop_requested_at TEXT
);
CREATE INDEX runs_by_manifest ON runs (manifest, started_at);
CREATE TABLE claims (
    manifest TEXT NOT NULL,
    repo TEXT NOT NULL,
    item TEXT NOT NULL,
    def_hash TEXT NOT NULL,
    run_id TEXT NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    start_time INTEGER,
    claimed_at TEXT NOT NULL,
    PRIMARY KEY (manifest, repo, item, def_hash)
) WITHOUT ROWID;
CREATE TABLE item_results (
    manifest TEXT NOT NULL,
    repo TEXT NOT NULL,
    item TEXT NOT NULL,
    def_hash TEXT NOT NULL,
    run_id TEXT NOT NULL,
    outcome TEXT NOT NULL,
    reason TEXT,
    cause TEXT,
    ended_at TEXT NOT NULL
);
CREATE INDEX item_results_by_item ON item_results (manifest, repo, item, def_hash);
CREATE TABLE events (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    at TEXT NOT NULL,
    repo TEXT,
    item TEXT,
    body TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
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
    // Results keyed by item and run, in one b-tree instead of a table and an index: a result costs
    // one page write instead of two.
    r#"
CREATE TABLE item_results_keyed (
    manifest TEXT NOT NULL,
    repo TEXT NOT NULL,
    item TEXT NOT NULL,
    def_hash TEXT NOT NULL,
    run_id TEXT NOT NULL,
    outcome TEXT NOT NULL,
    reason TEXT,
    cause TEXT,
    ended_at TEXT NOT NULL,
    PRIMARY KEY (manifest, repo, item, def_hash, run_id)
) WITHOUT ROWID;
INSERT OR REPLACE INTO item_results_keyed
    SELECT manifest, repo, item, def_hash, run_id, outcome, reason, cause, ended_at
    FROM item_results ORDER BY rowid;
DROP TABLE item_results;
ALTER TABLE item_results_keyed RENAME TO item_results;
"#,
    // Events in a plain rowid table: an append fills the last page and starts a new one when it
    // is full, where a keyed table rebalanced up to three sibling pages and their parent (a claim
    // wrote five to six pages instead of three). A run reads its events back from the rowid it
    // started at to the one it ended at.
    r#"
CREATE TABLE events_log (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    at TEXT NOT NULL,
    repo TEXT,
    item TEXT,
    body TEXT NOT NULL
);
INSERT INTO events_log (run_id, seq, at, repo, item, body)
    SELECT run_id, seq, at, repo, item, body FROM events ORDER BY run_id, seq;
DROP TABLE events;
ALTER TABLE events_log RENAME TO events;
ALTER TABLE runs ADD COLUMN first_event INTEGER;
ALTER TABLE runs ADD COLUMN last_event INTEGER;
"#,
    // How the run contains its items' processes, for `status`.
    r#"
ALTER TABLE runs ADD COLUMN containment TEXT;
"#,
    // What each run came to, for the run history page without replaying every run's events.
    r#"
ALTER TABLE runs ADD COLUMN totals TEXT;
"#,
    // Retention: a pruned run keeps a row (while a kept result or publication names it) and
    // loses its plan and events.
    r#"
ALTER TABLE runs ADD COLUMN pruned_at TEXT;
"#,
    // Keys runner keeps to itself: the one that authenticates cached gate verdicts.
    r#"
CREATE TABLE secrets (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"#,
];

/// The latest `?2` runs of manifest `?1` that retention kept: the window history is read from.
const RECENT_RUNS: &str = "(SELECT id FROM runs WHERE manifest = ?1 AND pruned_at IS NULL
     ORDER BY started_at DESC, id DESC LIMIT ?2)";

/// An event row waiting to be committed: (run, seq, at, repo, item, json).
type PendingEvent = (String, i64, String, Option<String>, Option<String>, String);

/// What is recorded but not yet committed: it goes out with the next write transaction.
#[derive(Default)]
struct Buffered {
    events: Vec<PendingEvent>,
    results: Vec<PendingResult>,
}

impl Buffered {
    fn has_results(&self) -> bool {
        !self.results.is_empty()
    }

    /// Write it all, events first, then results (each releasing its item's claim).
    fn write(&mut self, tx: &Connection) -> rusqlite::Result<()> {
        let mut stmt = tx.prepare_cached(
            "INSERT INTO events (run_id, seq, at, repo, item, body) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?;
        for (run, seq, at, repo, item, body) in self.events.drain(..) {
            stmt.execute(params![run, seq, at, repo, item, body])?;
        }
        for r in self.results.drain(..) {
            let k = &r.key;
            exec(tx,
                "INSERT OR REPLACE INTO item_results (manifest, repo, item, def_hash, run_id, outcome, reason, cause, ended_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                params![k.manifest, k.repo, k.item, k.def_hash, r.run_id, r.outcome.as_str(), r.reason, r.cause, r.at],
            )?;
            exec(
                tx,
                "DELETE FROM claims WHERE manifest = ?1 AND repo = ?2 AND item = ?3 AND def_hash = ?4 AND run_id = ?5",
                params![k.manifest, k.repo, k.item, k.def_hash, r.run_id],
            )?;
        }
        Ok(())
    }
}

/// An item's result waiting to be committed; committing it also releases the item's claim.
/// A held item: (repo, item, reason, cause).
pub use super::HeldItem;

pub struct SqliteLedger {
    conn: Connection,
    path: PathBuf,
    buffered: Buffered,
    seq: i64,
    /// Device and inode of the file opened: a ledger deleted or replaced under a run is noticed.
    identity: Option<(u64, u64)>,
}

/// Device and inode of `path`.
fn identity_of(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

pub(super) fn outcome_from(s: &str) -> Option<ItemOutcome> {
    ItemOutcome::ALL.into_iter().find(|o| o.as_str() == s)
}

/// An existing ledger file that is empty: one that lost its contents, not a new one.
fn emptied(path: &Path) -> LedgerError {
    LedgerError::Unusable {
        path: path.display().to_string(),
        message: "the file is empty: a ledger that lost its contents, not a new one (every completed item would run again); move it aside to start a new ledger".into(),
    }
}

impl SqliteLedger {
    /// Open (creating when absent) the ledger at `path`. A ledger that is locked past the busy
    /// timeout, unreadable or corrupt is an error; nothing is deleted or overwritten to "fix" it.
    ///
    /// Only the ledger's own folder is created (`.runner` beside the manifest), never a chain of
    /// them: a `--state` in a folder that does not exist is an error. An existing file that is
    /// empty is a ledger that lost its contents, not a new one, and one that fails SQLite's quick
    /// check is corrupt: both are refused, untouched, since either would run completed work
    /// again.
    pub fn open(path: &Path) -> Result<Self> {
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
            && !dir.is_dir()
        {
            match std::fs::create_dir(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(source) => {
                    return Err(LedgerError::Io {
                        path: dir.display().to_string(),
                        source,
                    });
                }
            }
        }
        if !path.exists() {
            Self::create(path)?;
        }
        let existed = match std::fs::metadata(path) {
            Ok(m) if m.len() == 0 => return Err(emptied(path)),
            Ok(_) => true,
            Err(_) => false,
        };
        let conn = Connection::open(path).map_err(|e| db(path, e))?;
        let mut ledger = SqliteLedger {
            conn,
            path: path.to_path_buf(),
            buffered: Buffered::default(),
            seq: 0,
            identity: None,
        };
        if existed {
            ledger.quick_check()?;
        }
        ledger.setup()?;
        ledger.identity = identity_of(path);
        Ok(ledger)
    }

    /// Make a new ledger at `path`, whole: built beside it under another name and linked into
    /// place only if nothing is there yet, so that no process ever sees a half-made ledger (and
    /// an empty file can only be one that lost its contents). Another runner creating it at the
    /// same moment is not an error: its ledger is the one.
    fn create(path: &Path) -> Result<()> {
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let io = |source| LedgerError::Io {
            path: path.display().to_string(),
            source,
        };
        let tmp = tempfile::Builder::new()
            .prefix(".state-new-")
            .tempfile_in(dir)
            .map_err(io)?;
        {
            let conn = Connection::open(tmp.path()).map_err(|e| db(path, e))?;
            let mut fresh = SqliteLedger {
                conn,
                path: tmp.path().to_path_buf(),
                buffered: Buffered::default(),
                seq: 0,
                identity: None,
            };
            fresh.setup()?;
        }
        match std::fs::hard_link(tmp.path(), path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(io(e)),
        }
    }

    /// SQLite's quick check: a damaged page is refused before anything is read from it.
    fn quick_check(&self) -> Result<()> {
        let rows: Vec<String> = self.rows("PRAGMA quick_check", [], |r| r.get(0))?;
        if rows.len() == 1 && rows[0] == "ok" {
            return Ok(());
        }
        Err(self.unusable(format!(
            "it is damaged (SQLite's quick check: {}); nothing was changed",
            rows.join("; ")
        )))
    }

    /// The ledger is still the file this run opened: not deleted, not replaced.
    fn still_there(&self) -> Result<()> {
        if self.identity.is_some() && identity_of(&self.path) != self.identity {
            return Err(self.unusable(
                "the file was deleted or replaced while this run used it; what it records is no longer kept".into(),
            ));
        }
        Ok(())
    }

    /// Prune a manifest's history: every run that is not among its latest `keep_runs`, or that
    /// started before `cutoff`, and is not live nor `spare`. A pruned run loses its plan and its
    /// events (but publications, which `publish` reads), its claims, and its item results but
    /// each item's latest result and latest completion for each of its definitions (what `done`
    /// and `--rerun` decide by). For an item in `current`, only its current definition's are
    /// kept: a definition it no longer has decides nothing, and an item whose definition changes
    /// every run would otherwise keep a row, and its run, for each. A pruned run's row goes once
    /// nothing names it. Returns the runs pruned, with their report folders.
    fn prune_runs(&mut self, ask: &super::Retention<'_>) -> Result<super::Pruned> {
        let super::Retention {
            manifest,
            keep_runs,
            cutoff,
            at,
            spare,
            current,
        } = *ask;
        let candidates = self.rows(
            "SELECT id, manifest, manifest_path, manifest_sha256, host, pid, start_time, started_by, started_at, ended_at, ending, cause, stop_requested_by, stop_reason, containment, run_dir
             FROM runs WHERE manifest = ?1 AND pruned_at IS NULL ORDER BY started_at DESC, id DESC",
            [manifest],
            |r| Ok((row_to_run(r)?, r.get::<_, String>(15)?)),
        )?;
        let doomed: Vec<(String, String)> = candidates
            .into_iter()
            .enumerate()
            .filter(|(rank, (run, _))| {
                (*rank >= keep_runs as usize || run.started_at.as_str() < cutoff)
                    && run.status() != super::RunStatus::Live
                    // The run pruning as it ends keeps what it just wrote, even when a run that
                    // started after it ended first.
                    && spare != Some(run.id.as_str())
            })
            .map(|(_, (run, dir))| (run.id, dir))
            .collect();
        let mut pruned = super::Pruned::default();
        if doomed.is_empty() {
            return Ok(pruned);
        }
        let path = &self.path;
        let tx = WriteTx::begin(&self.conn).map_err(|e| db(path, e))?;
        self.buffered.write(&tx).map_err(|e| db(path, e))?;
        // One pass over each table for all the runs pruned, whatever their number.
        tx.execute_batch(
            "CREATE TEMP TABLE IF NOT EXISTS doomed (id TEXT PRIMARY KEY) WITHOUT ROWID;
             DELETE FROM temp.doomed;",
        )
        .map_err(|e| db(path, e))?;
        {
            let mut add = tx
                .prepare("INSERT OR IGNORE INTO temp.doomed (id) VALUES (?1)")
                .map_err(|e| db(path, e))?;
            for (id, _) in &doomed {
                add.execute([id]).map_err(|e| db(path, e))?;
            }
        }
        pruned.events = tx
            .execute(
                "DELETE FROM events WHERE run_id IN (SELECT id FROM temp.doomed)
                   AND body NOT LIKE '{\"event\":\"published\"%'",
                [],
            )
            .map_err(|e| db(path, e))?;
        // Each definition's latest result and latest completion, found once: asked per result
        // row, the question scanned every result of the item again (22 s for 200,000 results).
        tx.execute_batch(
            "CREATE TEMP TABLE IF NOT EXISTS latest (repo TEXT, item TEXT, def_hash TEXT,
               last_at TEXT, last_done TEXT, PRIMARY KEY (repo, item, def_hash)) WITHOUT ROWID;
             DELETE FROM temp.latest;",
        )
        .map_err(|e| db(path, e))?;
        tx.execute(
            "INSERT INTO temp.latest (repo, item, def_hash, last_at, last_done)
             SELECT repo, item, def_hash, max(ended_at),
                    max(CASE WHEN outcome = 'completed' THEN ended_at END)
               FROM item_results WHERE manifest = ?1 GROUP BY repo, item, def_hash",
            [manifest],
        )
        .map_err(|e| db(path, e))?;
        pruned.results = tx
            .execute(
                "DELETE FROM item_results AS r WHERE r.manifest = ?1
                   AND r.run_id IN (SELECT id FROM temp.doomed)
                   AND EXISTS (SELECT 1 FROM temp.latest l
                               WHERE l.repo = r.repo AND l.item = r.item AND l.def_hash = r.def_hash
                                 AND r.ended_at < l.last_at
                                 AND (r.outcome <> 'completed' OR r.ended_at < l.last_done))",
                [manifest],
            )
            .map_err(|e| db(path, e))?;
        if !current.is_empty() {
            tx.execute_batch(
                "CREATE TEMP TABLE IF NOT EXISTS current_defs (repo TEXT, item TEXT, def_hash TEXT,
                   PRIMARY KEY (repo, item)) WITHOUT ROWID;
                 DELETE FROM temp.current_defs;",
            )
            .map_err(|e| db(path, e))?;
            {
                let mut add = tx
                    .prepare(
                        "INSERT OR REPLACE INTO temp.current_defs (repo, item, def_hash) VALUES (?1, ?2, ?3)",
                    )
                    .map_err(|e| db(path, e))?;
                for k in current.iter().filter(|k| k.manifest == manifest) {
                    add.execute(params![k.repo, k.item, k.def_hash])
                        .map_err(|e| db(path, e))?;
                }
            }
            pruned.results += tx
                .execute(
                    "DELETE FROM item_results AS r WHERE r.manifest = ?1
                       AND r.run_id IN (SELECT id FROM temp.doomed)
                       AND EXISTS (SELECT 1 FROM temp.current_defs c
                                   WHERE c.repo = r.repo AND c.item = r.item
                                     AND c.def_hash <> r.def_hash)",
                    [manifest],
                )
                .map_err(|e| db(path, e))?;
        }
        // A run pruned is not live: a claim it left names an item nobody works on.
        tx.execute(
            "DELETE FROM claims WHERE run_id IN (SELECT id FROM temp.doomed)",
            [],
        )
        .map_err(|e| db(path, e))?;
        tx.execute(
            "UPDATE runs SET pruned_at = ?1, plan_json = '', totals = NULL
             WHERE id IN (SELECT id FROM temp.doomed)",
            [at],
        )
        .map_err(|e| db(path, e))?;
        // A pruned run's row stays while a kept result or publication names it.
        let mut named: std::collections::HashSet<String> = Default::default();
        {
            let mut q = tx
                .prepare(
                    "SELECT DISTINCT run_id FROM item_results WHERE manifest = ?1
                     UNION SELECT DISTINCT run_id FROM events WHERE body LIKE '{\"event\":\"published\"%'",
                )
                .map_err(|e| db(path, e))?;
            let ids = q
                .query_map([manifest], |r| r.get::<_, String>(0))
                .map_err(|e| db(path, e))?;
            for id in ids {
                named.insert(id.map_err(|e| db(path, e))?);
            }
        }
        for (id, _) in doomed.iter().filter(|(id, _)| !named.contains(id)) {
            tx.execute("DELETE FROM runs WHERE id = ?1", [id])
                .map_err(|e| db(path, e))?;
        }
        tx.commit().map_err(|e| db(path, e))?;
        pruned.runs = doomed;
        Ok(pruned)
    }

    /// The ledger's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self, e: rusqlite::Error) -> LedgerError {
        db(&self.path, e)
    }

    fn unusable(&self, message: String) -> LedgerError {
        LedgerError::Unusable {
            path: self.path.display().to_string(),
            message,
        }
    }

    /// Every row of a query, through the statement cache.
    fn rows<T>(
        &self,
        sql: &str,
        p: impl rusqlite::Params,
        f: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<Vec<T>> {
        let mut stmt = self.conn.prepare_cached(sql).map_err(|e| self.err(e))?;
        stmt.query_map(p, f)
            .map_err(|e| self.err(e))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| self.err(e))
    }

    /// One write outside a transaction; the number of rows it changed.
    fn write(&self, sql: &str, p: impl rusqlite::Params) -> Result<usize> {
        self.conn.execute(sql, p).map_err(|e| self.err(e))
    }

    fn setup(&mut self) -> Result<()> {
        self.conn
            .busy_timeout(Duration::from_secs(10))
            .map_err(|e| self.err(e))?;
        // Reading the mode also proves the file is a database at all. Switching a new file to
        // WAL needs a moment alone with it, and SQLite does not wait for that itself: when
        // several runners open a new ledger together, ask again for up to the busy timeout.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mode: String = loop {
            match self
                .conn
                .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            {
                Ok(m) => break m,
                Err(rusqlite::Error::SqliteFailure(e, _))
                    if e.code == rusqlite::ErrorCode::DatabaseBusy
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(self.err(e)),
            }
        };
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(self.unusable(format!("cannot switch to WAL mode (got `{mode}`)")));
        }
        // WAL with NORMAL sync survives any crash of runner itself; only a power cut can lose
        // the last commits.
        self.conn
            .execute_batch("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;")
            .map_err(|e| self.err(e))?;
        let version: i64 = self
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| self.err(e))?;
        if version as usize > MIGRATIONS.len() {
            return Err(self.unusable(format!(
                "it was written by a newer runner (schema {version}, this runner knows {})",
                MIGRATIONS.len()
            )));
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            let tx = WriteTx::begin(&self.conn).map_err(|e| db(&self.path, e))?;
            // Another process may have migrated while this one waited for the write lock.
            let now: i64 = tx
                .query_row("PRAGMA user_version", [], |r| r.get(0))
                .map_err(|e| db(&self.path, e))?;
            if now as usize > i {
                continue;
            }
            tx.execute_batch(sql).map_err(|e| db(&self.path, e))?;
            tx.execute_batch(&format!("PRAGMA user_version = {}", i + 1))
                .map_err(|e| db(&self.path, e))?;
            tx.commit().map_err(|e| db(&self.path, e))?;
        }
        Ok(())
    }

    /// Commit everything buffered.
    pub fn flush(&mut self) -> Result<()> {
        if self.buffered.events.is_empty() && !self.buffered.has_results() {
            return Ok(());
        }
        self.still_there()?;
        let path = &self.path;
        let tx = WriteTx::begin(&self.conn).map_err(|e| db(path, e))?;
        self.buffered.write(&tx).map_err(|e| db(path, e))?;
        tx.commit().map_err(|e| db(path, e))
    }

    /// Open an existing ledger for reading only, without creating or changing any file (for
    /// `plan`). What the last run has not yet checkpointed may be missing.
    pub fn open_snapshot(path: &Path) -> Result<Option<Self>> {
        match std::fs::metadata(path) {
            Err(_) => return Ok(None),
            // Read as `apply` would refuse it: an empty ledger lost its contents, and reading it
            // as no history would show every completed item pending.
            Ok(m) if m.len() == 0 => return Err(emptied(path)),
            Ok(_) => {}
        }
        // A URI, so the few characters that mean something in one are escaped.
        let escaped = path
            .display()
            .to_string()
            .replace('%', "%25")
            .replace('?', "%3f")
            .replace('#', "%23");
        // With no write-ahead log beside it (no run has it open), the file alone is the whole
        // ledger and is read as immutable: nothing is created. With one, a live run's commits
        // are in it and must be seen (a claim, a result): read-only through the log.
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        let uri = if Path::new(&wal).exists() {
            format!("file:{escaped}?mode=ro")
        } else {
            format!("file:{escaped}?immutable=1")
        };
        let conn = Connection::open_with_flags(
            uri,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_URI,
        )
        .map_err(|e| db(path, e))?;
        let ledger = SqliteLedger {
            conn,
            path: path.to_path_buf(),
            buffered: Buffered::default(),
            seq: 0,
            identity: None,
        };
        let version: i64 = ledger
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| ledger.err(e))?;
        if version == 0 {
            return Ok(None);
        }
        Ok(Some(ledger))
    }

}

/// An immediate write transaction (the write lock taken at `BEGIN`, so that it never fails
/// halfway for want of it) whose `BEGIN` and `COMMIT` are cached statements: the claim path runs
/// one per item, and `rusqlite::Transaction` parses both anew each time. Rolled back unless
/// committed. Every write transaction of the ledger is one of these.
struct WriteTx<'c> {
    conn: &'c Connection,
    committed: bool,
}

impl<'c> WriteTx<'c> {
    fn begin(conn: &'c Connection) -> rusqlite::Result<Self> {
        conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        Ok(WriteTx {
            conn,
            committed: false,
        })
    }

    fn commit(mut self) -> rusqlite::Result<()> {
        self.conn.prepare_cached("COMMIT")?.execute([])?;
        self.committed = true;
        Ok(())
    }
}

impl std::ops::Deref for WriteTx<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl Drop for WriteTx<'_> {
    fn drop(&mut self) {
        if !self.committed {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
    }
}

/// Run a statement through the connection's statement cache: the drain runs the same few
/// statements thousands of times.
fn exec(tx: &Connection, sql: &str, p: impl rusqlite::Params) -> rusqlite::Result<usize> {
    tx.prepare_cached(sql)?.execute(p)
}

fn query<T>(
    tx: &Connection,
    sql: &str,
    p: impl rusqlite::Params,
    f: impl FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    tx.prepare_cached(sql)?.query_row(p, f)
}

fn db(path: &Path, source: rusqlite::Error) -> LedgerError {
    LedgerError::Db {
        path: path.display().to_string(),
        source,
    }
}

/// The holder stored in columns `at` (host), `at + 1` (pid) and `at + 2` (start time) of `r`.
fn holder_at(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<Holder> {
    Ok(Holder {
        host: r.get(at)?,
        pid: r.get(at + 1)?,
        start_time: r.get::<_, Option<i64>>(at + 2)?.map(|t| t as u64),
    })
}

fn row_to_run(r: &rusqlite::Row<'_>) -> rusqlite::Result<RunRow> {
    Ok(RunRow {
        id: r.get(0)?,
        manifest: r.get(1)?,
        manifest_path: r.get(2)?,
        manifest_sha256: r.get(3)?,
        holder: holder_at(r, 4)?,
        started_by: r.get(7)?,
        started_at: r.get(8)?,
        ended_at: r.get(9)?,
        ending: r.get(10)?,
        cause: r.get(11)?,
        stop_requested_by: r.get(12)?,
        stop_reason: r.get(13)?,
        containment: r.get(14)?,
        lapsed: false,
    })
}

impl Ledger for SqliteLedger {
    fn begin_run(
        &mut self,
        run: &RunRow,
        plan_json: &str,
        workers: u32,
        run_dir: &str,
    ) -> Result<()> {
        self.write("INSERT INTO runs (id, manifest, manifest_path, manifest_sha256, host, pid, start_time, started_by, started_at, workers, plan_json, run_dir, containment, first_event)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, (SELECT coalesce(max(rowid), 0) FROM events))",
                params![
                    run.id,
                    run.manifest,
                    run.manifest_path,
                    run.manifest_sha256,
                    run.holder.host,
                    run.holder.pid,
                    run.holder.start_time.map(|t| t as i64),
                    run.started_by,
                    run.started_at,
                    workers,
                    plan_json,
                    run_dir,
                    run.containment
                ])?;
        Ok(())
    }

    fn end_run(
        &mut self,
        run_id: &str,
        ending: RunEnding,
        cause: Option<&str>,
        at: &str,
    ) -> Result<()> {
        let path = &self.path;
        let tx = WriteTx::begin(&self.conn).map_err(|e| db(path, e))?;
        self.buffered.write(&tx).map_err(|e| db(path, e))?;
        tx.execute(
            "UPDATE runs SET ended_at = ?2, ending = ?3, cause = ?4,
                 last_event = (SELECT max(rowid) FROM events) WHERE id = ?1",
            params![run_id, at, ending.as_str(), cause],
        )
        .map_err(|e| db(path, e))?;
        // Claims of this run that no result released (a cancelled item) go with it.
        tx.execute("DELETE FROM claims WHERE run_id = ?1", [run_id])
            .map_err(|e| db(path, e))?;
        tx.commit().map_err(|e| db(path, e))
    }

    fn past_outcomes(&self, manifest: &str) -> Result<Vec<(ItemKey, PastOutcome)>> {
        let rows = self.rows(
            "SELECT repo, item, def_hash, outcome, run_id FROM item_results
                 WHERE manifest = ?1 AND outcome IN ('completed', 'halted', 'failed')
                 ORDER BY ended_at",
            [manifest],
            |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, String>(4)?,
                ))
            },
        )?;
        // Later results replace earlier ones; a completion is never replaced by a later
        // failure of a re-run, which still shows as the latest outcome.
        let mut last: std::collections::HashMap<ItemKey, PastOutcome> = Default::default();
        for (repo, item, def_hash, outcome, run_id) in rows {
            let Some(outcome) = outcome_from(&outcome) else {
                continue;
            };
            last.insert(
                ItemKey {
                    manifest: manifest.to_string(),
                    repo,
                    item,
                    def_hash,
                },
                PastOutcome { outcome, run_id },
            );
        }
        Ok(last.into_iter().collect())
    }

    fn live_claims_of(&self, manifest: &str) -> Result<Vec<(ItemKey, String)>> {
        let rows = self.rows(
            "SELECT repo, item, def_hash, run_id, host, pid, start_time FROM claims WHERE manifest = ?1",
            [manifest],
            |r| {
                Ok((
                    ItemKey {
                        manifest: manifest.to_string(),
                        repo: r.get(0)?,
                        item: r.get(1)?,
                        def_hash: r.get(2)?,
                    },
                    r.get::<_, String>(3)?,
                    holder_at(r, 4)?,
                ))
            },
        )?;
        Ok(rows
            .into_iter()
            .filter(|(_, _, h)| !h.is_dead())
            .map(|(k, run, _)| (k, run))
            .collect())
    }

    fn run_is_live(&self, run_id: &str) -> Result<bool> {
        Ok(self
            .run(run_id)?
            .is_some_and(|r| r.status() == super::RunStatus::Live))
    }

    fn claim(&mut self, key: &ItemKey, run_id: &str, holder: &Holder) -> Result<Claim> {
        self.still_there()?;
        let path = self.path.clone();
        let tx = WriteTx::begin(&self.conn).map_err(|e| db(&path, e))?;
        self.buffered.write(&tx).map_err(|e| db(&path, e))?;
        if let Some(p) = pause_of(&tx, &key.manifest).map_err(|e| db(&path, e))? {
            tx.commit().map_err(|e| db(&path, e))?;
            return Ok(Claim::Paused(p));
        }
        let existing: Option<(String, Holder)> = query(&tx,
                "SELECT run_id, host, pid, start_time FROM claims WHERE manifest = ?1 AND repo = ?2 AND item = ?3 AND def_hash = ?4",
                params![key.manifest, key.repo, key.item, key.def_hash],
                |r| {
                    Ok((
                        r.get(0)?,
                        holder_at(r, 1)?,
                    ))
                },
            )
            .optional()
            .map_err(|e| db(&path, e))?;
        if let Some((other, h)) = &existing {
            if other != run_id && !h.is_dead() {
                tx.commit().map_err(|e| db(&path, e))?;
                return Ok(Claim::HeldBy {
                    run_id: other.clone(),
                });
            }
            // Reclaim only the very claim that was judged dead.
            exec(&tx,
                "DELETE FROM claims WHERE manifest = ?1 AND repo = ?2 AND item = ?3 AND def_hash = ?4 AND run_id = ?5",
                params![key.manifest, key.repo, key.item, key.def_hash, other],
            )
            .map_err(|e| db(&path, e))?;
        }
        let done: Option<(String, String)> = query(&tx,
                "SELECT run_id, outcome FROM item_results WHERE manifest = ?1 AND repo = ?2 AND item = ?3 AND def_hash = ?4 AND outcome IN ('completed', 'halted', 'failed') AND run_id != ?5 AND ended_at >= (SELECT started_at FROM runs WHERE id = ?5) ORDER BY ended_at DESC LIMIT 1",
                params![key.manifest, key.repo, key.item, key.def_hash, run_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(|e| db(&path, e))?;
        if let Some((other, outcome)) = done {
            tx.commit().map_err(|e| db(&path, e))?;
            return Ok(Claim::AlreadyDone {
                run_id: other,
                outcome,
            });
        }
        exec(&tx,
            "INSERT INTO claims (manifest, repo, item, def_hash, run_id, host, pid, start_time, claimed_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            params![
                key.manifest,
                key.repo,
                key.item,
                key.def_hash,
                run_id,
                holder.host,
                holder.pid,
                holder.start_time.map(|t| t as i64),
                crate::support::clock::now()
            ],
        )
        .map_err(|e| db(&path, e))?;
        tx.commit().map_err(|e| db(&path, e))?;
        Ok(Claim::Claimed)
    }

    fn event(&mut self, run_id: &str, item: Option<&ItemKey>, ev: &Event, at: &str) -> Result<()> {
        self.seq += 1;
        let body = serde_json::to_string(ev).map_err(|source| LedgerError::Record {
            path: self.path.display().to_string(),
            what: "event to record".into(),
            source,
        })?;
        self.buffered.events.push((
            run_id.to_string(),
            self.seq,
            at.to_string(),
            item.map(|k| k.repo.clone()),
            item.map(|k| k.item.clone()),
            body,
        ));
        if let Some(r) = super::result_of(run_id, item, ev, at) {
            self.buffered.results.push(r);
        }
        Ok(())
    }

    fn commit_results(&mut self) -> Result<()> {
        if self.buffered.has_results() {
            self.flush()?;
        }
        Ok(())
    }

    fn paused(&self, manifest: &str) -> Result<Option<String>> {
        pause_of(&self.conn, manifest).map_err(|e| self.err(e))
    }

    fn set_paused(
        &mut self,
        manifest: &str,
        by: &str,
        reason: Option<&str>,
        at: &str,
    ) -> Result<()> {
        self.write(
            "INSERT INTO pauses (manifest, paused_by, reason, paused_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (manifest) DO UPDATE SET paused_by = ?2, reason = ?3, paused_at = ?4",
            params![manifest, by, reason, at],
        )?;
        Ok(())
    }

    /// Lift a pause; whether there was one.
    fn clear_paused(&mut self, manifest: &str) -> Result<bool> {
        let n = self
            .conn
            .execute("DELETE FROM pauses WHERE manifest = ?1", [manifest])
            .map_err(|e| self.err(e))?;
        Ok(n > 0)
    }

    fn run(&self, id: &str) -> Result<Option<RunRow>> {
        self.conn
            .query_row(
                "SELECT id, manifest, manifest_path, manifest_sha256, host, pid, start_time, started_by, started_at, ended_at, ending, cause, stop_requested_by, stop_reason, containment FROM runs WHERE id = ?1",
                [id],
                row_to_run,
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    /// Ask a run to stop: record who and why (the caller signals the process).
    fn request_stop(
        &mut self,
        run_id: &str,
        by: &str,
        reason: Option<&str>,
        at: &str,
    ) -> Result<()> {
        self.write("UPDATE runs SET stop_requested_by = ?2, stop_reason = ?3, stop_requested_at = ?4 WHERE id = ?1",
                params![run_id, by, reason, at])?;
        Ok(())
    }

    /// The most recent runs, newest first (of one manifest, when given).
    fn recent_runs(&self, manifest: Option<&str>, limit: usize) -> Result<Vec<RunRow>> {
        let rows = self.rows("SELECT id, manifest, manifest_path, manifest_sha256, host, pid, start_time, started_by, started_at, ended_at, ending, cause, stop_requested_by, stop_reason, containment FROM runs WHERE (?1 IS NULL OR manifest = ?1) AND pruned_at IS NULL ORDER BY started_at DESC, id DESC LIMIT ?2", params![manifest, limit as i64], row_to_run)?;
        Ok(rows)
    }

    /// The key that authenticates the verdicts this ledger's runs cache, made the first time it
    /// is asked for.
    fn verdict_key(&mut self) -> Result<String> {
        let fresh = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        self.write(
            "INSERT OR IGNORE INTO secrets (name, value) VALUES ('verdicts', ?1)",
            params![fresh],
        )?;
        self.conn
            .query_row(
                "SELECT value FROM secrets WHERE name = 'verdicts'",
                [],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))
    }

    /// The items run `id` still holds claims on (repository, item): what it was working on, if
    /// it died.
    fn claimed_by(&self, id: &str) -> Result<Vec<(String, String)>> {
        self.rows(
            "SELECT repo, item FROM claims WHERE run_id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
    }

    /// Run `id`'s items per outcome: as its report counted them once it ended, else the
    /// results it has recorded so far.
    fn counts_of(&self, id: &str) -> Result<std::collections::BTreeMap<ItemOutcome, usize>> {
        let totals: Option<Option<String>> = self
            .conn
            .query_row("SELECT totals FROM runs WHERE id = ?1", [id], |r| r.get(0))
            .optional()
            .map_err(|e| self.err(e))?;
        if let Some(t) = totals
            .flatten()
            .and_then(|t| serde_json::from_str::<super::RunTotals>(&t).ok())
        {
            return Ok(t.counts);
        }
        let rows = self.rows(
            "SELECT outcome, count(*) FROM item_results WHERE run_id = ?1 GROUP BY outcome",
            [id],
            |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)),
        )?;
        Ok(rows
            .into_iter()
            .filter_map(|(o, n)| Some((outcome_from(&o)?, n.max(0) as usize)))
            .collect())
    }

    /// What run `id`'s workers reported they used so far (as far as it is recorded), or `None`
    /// when they reported nothing.
    fn usage_of(&self, id: &str) -> Result<Option<crate::events::Usage>> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT body FROM events
                 WHERE rowid > coalesce((SELECT first_event FROM runs WHERE id = ?1), 0)
                   AND run_id = ?1 AND body LIKE '{\"event\":\"usage\"%'",
            )
            .map_err(|e| self.err(e))?;
        let bodies = stmt
            .query_map([id], |r| r.get::<_, String>(0))
            .map_err(|e| self.err(e))?
            .collect::<rusqlite::Result<Vec<String>>>()
            .map_err(|e| self.err(e))?;
        Ok(super::sum_usage(bodies))
    }

    /// Until when item `item` of `repo` in run `run_id` rests, when its latest event is a rest
    /// (RFC 3339).
    fn resting_until(&self, run_id: &str, repo: &str, item: &str) -> Result<Option<String>> {
        let latest: Option<(String, String)> = self
            .conn
            .query_row(
                "SELECT at, body FROM events WHERE run_id = ?1 AND repo = ?2 AND item = ?3
                 ORDER BY rowid DESC LIMIT 1",
                params![run_id, repo, item],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(|e| self.err(e))?;
        Ok(latest.and_then(|(at, body)| super::resting_until_of(&at, &body)))
    }

    /// What item `item` of `repo` in run `run_id` waits for, when its latest event is a wait
    /// for a shared resource: (resource, since when, RFC 3339).
    fn waiting_for_resource(
        &self,
        run_id: &str,
        repo: &str,
        item: &str,
    ) -> Result<Option<(String, String)>> {
        let latest: Option<(String, String)> = self
            .conn
            .query_row(
                "SELECT at, body FROM events WHERE run_id = ?1 AND repo = ?2 AND item = ?3
                 ORDER BY rowid DESC LIMIT 1",
                params![run_id, repo, item],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(|e| self.err(e))?;
        Ok(latest.and_then(|(at, body)| super::waiting_of(&at, &body)))
    }

    /// Items whose last result in their latest run is `held`, with reason and cause.
    fn held_items(&self, manifest: &str) -> Result<Vec<HeldItem>> {
        let rows = self.rows("SELECT r.repo, r.item, COALESCE(r.reason, ''), r.cause FROM item_results r
                 WHERE r.manifest = ?1 AND r.outcome = 'held' AND r.run_id = (
                   SELECT id FROM runs WHERE manifest = ?1 ORDER BY started_at DESC, id DESC LIMIT 1)", [manifest], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })?;
        Ok(rows)
    }

    /// Claims whose holders live: (run, repo, item, holder).
    fn live_claims(&self) -> Result<Vec<(String, String, String, Holder)>> {
        let rows = self.rows(
            "SELECT run_id, repo, item, host, pid, start_time FROM claims ORDER BY claimed_at",
            [],
            |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    holder_at(r, 3)?,
                ))
            },
        )?;
        Ok(rows.into_iter().filter(|c| !c.3.is_dead()).collect())
    }

    /// The plan snapshot, worker bound, report folder and events of a run, for re-rendering
    /// its report.
    fn run_events(&self, id: &str) -> Result<Option<RunReplay>> {
        let head: Option<(String, u32, String, String)> = self
            .conn
            .query_row(
                "SELECT plan_json, workers, run_dir, started_at FROM runs WHERE id = ?1 AND pruned_at IS NULL",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .optional()
            .map_err(|e| self.err(e))?;
        let Some((plan, workers, run_dir, started_at)) = head else {
            return Ok(None);
        };
        // Between the last event before the run began and the last one when it ended (a run
        // that did not end, or one from before these bounds, is looked for to the end).
        let mut stmt = self
            .conn
            .prepare(
                "SELECT at, body FROM events
                 WHERE rowid > coalesce((SELECT first_event FROM runs WHERE id = ?1), 0)
                   AND rowid <= coalesce((SELECT last_event FROM runs WHERE id = ?1), 9223372036854775807)
                   AND run_id = ?1
                 ORDER BY seq",
            )
            .map_err(|e| self.err(e))?;
        let mut events = Vec::new();
        let rows = stmt
            .query_map([id], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
            })
            .map_err(|e| self.err(e))?;
        for row in rows {
            let (at, body) = row.map_err(|e| self.err(e))?;
            let ev: Event = serde_json::from_str(&body).map_err(|source| LedgerError::Record {
                path: self.path.display().to_string(),
                what: format!("event of run `{id}`"),
                source,
            })?;
            events.push((at, ev));
        }
        Ok(Some(RunReplay {
            plan_json: plan,
            workers,
            run_dir,
            started_at,
            events,
        }))
    }

    /// When run `id` was pruned by retention, if it was.
    fn pruned_at(&self, id: &str) -> Result<Option<String>> {
        Ok(self
            .rows("SELECT pruned_at FROM runs WHERE id = ?1", [id], |r| {
                r.get::<_, Option<String>>(0)
            })?
            .into_iter()
            .next()
            .flatten())
    }

    /// The report folder of run `id`, as it recorded it.
    fn run_dir(&self, id: &str) -> Result<Option<String>> {
        Ok(self
            .rows("SELECT run_dir FROM runs WHERE id = ?1", [id], |r| r.get(0))?
            .into_iter()
            .next())
    }

    /// Quarantined repositories: (path, run, reason).
    fn quarantines(&self) -> Result<Vec<(String, String, String)>> {
        let rows = self.rows(
            "SELECT repo_path, run_id, reason FROM quarantines ORDER BY at",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?;
        Ok(rows)
    }

    /// Record that a repository's processes could not be proven gone.
    fn quarantine(&mut self, path: &str, run_id: &str, reason: &str, at: &str) -> Result<()> {
        self.write(
            "INSERT INTO quarantines (repo_path, run_id, reason, at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (repo_path) DO UPDATE SET run_id = ?2, reason = ?3, at = ?4",
            params![path, run_id, reason, at],
        )?;
        Ok(())
    }

    /// Lift a quarantine; whether there was one.
    fn release_quarantine(&mut self, path: &str) -> Result<bool> {
        let n = self
            .conn
            .execute("DELETE FROM quarantines WHERE repo_path = ?1", [path])
            .map_err(|e| self.err(e))?;
        Ok(n > 0)
    }

    /// Record what run `id` came to (its report's counts, duration and cost).
    fn record_totals(&mut self, id: &str, totals: &super::RunTotals) -> Result<()> {
        let json = serde_json::to_string(totals).map_err(|source| LedgerError::Record {
            path: self.path.display().to_string(),
            what: format!("totals of run `{id}`"),
            source,
        })?;
        self.write(
            "UPDATE runs SET totals = ?2 WHERE id = ?1",
            params![id, json],
        )?;
        Ok(())
    }

    /// Write everything recorded so far, events included, now.
    fn flush_all(&mut self) -> Result<()> {
        self.flush()
    }

    /// What each item's worker and gates took together in each of the latest `limit` runs of
    /// `manifest` it ran in: milliseconds by `(repo, item)`, one value per run.
    fn item_durations(
        &self,
        manifest: &str,
        limit: usize,
    ) -> Result<HashMap<(String, String), Vec<u64>>> {
        let rows = self.rows(
            &format!(
                "SELECT run_id, repo, item, body FROM events
                 WHERE (body LIKE '{{\"event\":\"worker-finished\"%' OR body LIKE '{{\"event\":\"gate-finished\"%')
                   AND repo IS NOT NULL AND item IS NOT NULL AND run_id IN {RECENT_RUNS}"
            ),
            params![manifest, limit as i64],
            |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                ))
            },
        )?;
        Ok(super::item_durations_of(rows))
    }

    /// How long each gate took when it passed, in the latest `limit` runs of `manifest`:
    /// milliseconds by gate name.
    fn gate_durations(&self, manifest: &str, limit: usize) -> Result<HashMap<String, Vec<u64>>> {
        let bodies = self.rows(
            &format!(
                "SELECT body FROM events WHERE body LIKE '{{\"event\":\"gate-finished\"%' AND run_id IN {RECENT_RUNS}"
            ),
            params![manifest, limit as i64],
            |r| r.get::<_, String>(0),
        )?;
        Ok(super::gate_durations_of(bodies))
    }

    /// The latest successful publication of each item of `manifest`, by (repository, item id):
    /// (branch, commit, pull request URL).
    #[allow(clippy::type_complexity)]
    fn publications_of(&self, manifest: &str) -> Result<super::Publications> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT e.repo, e.item, e.body FROM events e JOIN runs r ON r.id = e.run_id
                 WHERE r.manifest = ?1 AND e.body LIKE '{\"event\":\"published\"%'
                 ORDER BY e.rowid",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([manifest], |r| {
                Ok((
                    r.get::<_, Option<String>>(0)?,
                    r.get::<_, Option<String>>(1)?,
                    r.get::<_, String>(2)?,
                ))
            })
            .map_err(|e| self.err(e))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| self.err(e))?;
        Ok(super::publications_from(rows))
    }

    /// Fold the write-ahead log into the database file, so that snapshot readers see it all.
    fn checkpoint(&mut self) -> Result<()> {
        self.flush()?;
        self.conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .map_err(|e| self.err(e))
    }

    fn shown(&self) -> String {
        self.path().display().to_string()
    }

    fn prune(&mut self, ask: &super::Retention<'_>) -> Result<super::Pruned> {
        self.prune_runs(ask)
    }
}

/// Who paused `manifest`, when and why, if it is paused.
fn pause_of(conn: &Connection, manifest: &str) -> rusqlite::Result<Option<String>> {
    conn.prepare_cached("SELECT paused_by, reason, paused_at FROM pauses WHERE manifest = ?1")?
        .query_row([manifest], |r| {
            let (by, reason, at): (String, Option<String>, String) =
                (r.get(0)?, r.get(1)?, r.get(2)?);
            Ok(super::pause_text(&by, reason.as_deref(), &at))
        })
        .optional()
}

impl History for SqliteLedger {
    /// The latest `limit` runs of `manifest`, newest first, with their report folders and what
    /// they came to (absent for a run that died or predates the record).
    fn run_history(&self, manifest: &str, limit: usize) -> Result<Vec<super::RunHistory>> {
        let rows = self.rows(
            "SELECT id, manifest, manifest_path, manifest_sha256, host, pid, start_time, started_by, started_at, ended_at, ending, cause, stop_requested_by, stop_reason, containment, run_dir, totals
             FROM runs WHERE manifest = ?1 AND pruned_at IS NULL ORDER BY started_at DESC, id DESC LIMIT ?2",
            params![manifest, limit as i64],
            |r| Ok((row_to_run(r)?, r.get::<_, String>(15)?, r.get::<_, Option<String>>(16)?)),
        )?;
        Ok(rows
            .into_iter()
            .map(|(run, run_dir, totals)| super::RunHistory {
                run,
                run_dir,
                // A record this version cannot read is shown as unknown, not as an error.
                totals: totals.and_then(|t| serde_json::from_str(&t).ok()),
            })
            .collect())
    }

    /// The recorded results of `manifest`'s items in its latest `limit` runs: (repo, item, run,
    /// outcome), oldest first.
    fn recent_item_results(
        &self,
        manifest: &str,
        limit: usize,
    ) -> Result<Vec<(String, String, String, ItemOutcome)>> {
        let sql = format!(
            "SELECT repo, item, run_id, outcome FROM item_results
             WHERE manifest = ?1 AND run_id IN
                 {RECENT_RUNS}
             ORDER BY ended_at"
        );
        let mut stmt = self.conn.prepare_cached(&sql).map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![manifest, limit as i64], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                ))
            })
            .map_err(|e| self.err(e))?;
        // One pass: a manifest of thousands of items is not held twice.
        let mut out = Vec::new();
        for row in rows {
            let (repo, item, run, o) = row.map_err(|e| self.err(e))?;
            if let Some(o) = outcome_from(&o) {
                out.push((repo, item, run, o));
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(item: &str) -> ItemKey {
        ItemKey {
            manifest: "m".into(),
            repo: "r".into(),
            item: item.into(),
            def_hash: "h".into(),
        }
    }

    /// Record item `item`'s result in run `run` (buffered, as the engine does).
    fn finished(ledger: &mut SqliteLedger, run: &str, item: &str, outcome: ItemOutcome) {
        let ev = Event::ItemFinished {
            item: 0,
            outcome,
            reason: None,
            cause: None,
        };
        ledger
            .event(run, Some(&key(item)), &ev, &crate::support::clock::now())
            .unwrap();
    }

    fn run(ledger: &mut SqliteLedger, id: &str) {
        run_by(ledger, id, Holder::this_process());
    }

    fn run_by(ledger: &mut SqliteLedger, id: &str, holder: Holder) {
        ledger
            .begin_run(
                &RunRow {
                    id: id.into(),
                    manifest: "m".into(),
                    manifest_path: "/m.yaml".into(),
                    manifest_sha256: "x".into(),
                    holder,
                    started_by: "me".into(),
                    started_at: crate::support::clock::now(),
                    ended_at: None,
                    ending: None,
                    cause: None,
                    stop_requested_by: None,
                    stop_reason: None,
                    containment: None,
                    lapsed: false,
                },
                "{}",
                1,
                "/tmp",
            )
            .unwrap();
    }

    #[test]
    fn a_live_claim_is_never_taken_and_a_dead_one_is() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = SqliteLedger::open(&dir.path().join("state.db")).unwrap();
        run(&mut l, "a");
        run(&mut l, "b");
        let me = Holder::this_process();
        assert_eq!(l.claim(&key("x"), "a", &me).unwrap(), Claim::Claimed);
        assert_eq!(
            l.claim(&key("x"), "b", &me).unwrap(),
            Claim::HeldBy { run_id: "a".into() }
        );
        // A holder whose start time differs is a reused pid: dead.
        let ghost = Holder {
            start_time: me.start_time.map(|t| t + 1),
            ..me.clone()
        };
        assert_eq!(l.claim(&key("y"), "a", &ghost).unwrap(), Claim::Claimed);
        assert_eq!(l.claim(&key("y"), "b", &me).unwrap(), Claim::Claimed);
    }

    /// Retention keeping the latest run of manifest `m`, whatever the age of the others.
    fn keep_latest(l: &mut SqliteLedger) -> super::super::Pruned {
        l.prune(&Retention {
            manifest: "m",
            keep_runs: 1,
            cutoff: "",
            at: &crate::support::clock::now(),
            spare: None,
            current: &[],
        })
        .unwrap()
    }

    #[test]
    fn pruning_keeps_each_items_latest_result_and_latest_completion() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = SqliteLedger::open(&dir.path().join("state.db")).unwrap();
        // x: completed, halted, halted, then a live run; y: halted, completed, completed.
        let runs = [
            ("r1", ItemOutcome::Completed, ItemOutcome::Halted),
            ("r2", ItemOutcome::Halted, ItemOutcome::Completed),
            ("r3", ItemOutcome::Halted, ItemOutcome::Completed),
        ];
        for (id, x, y) in runs {
            run(&mut l, id);
            finished(&mut l, id, "x", x);
            finished(&mut l, id, "y", y);
            l.end_run(id, RunEnding::Drained, None, &crate::support::clock::now())
                .unwrap();
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        run(&mut l, "live");
        let pruned = keep_latest(&mut l);
        let mut gone: Vec<&str> = pruned.runs.iter().map(|(id, _)| id.as_str()).collect();
        gone.sort();
        assert_eq!(gone, ["r1", "r2", "r3"]);
        let left: Vec<(String, String)> = l
            .rows(
                "SELECT item, run_id FROM item_results ORDER BY item, run_id",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        let left: Vec<(&str, &str)> = left.iter().map(|(i, r)| (i.as_str(), r.as_str())).collect();
        // x: r1's completion (its latest) and r3's halt (its latest result); y: r3's completion,
        // both at once.
        assert_eq!(left, [("x", "r1"), ("x", "r3"), ("y", "r3")]);
    }

    #[test]
    fn a_dead_run_pruned_leaves_no_claim_behind() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = SqliteLedger::open(&dir.path().join("state.db")).unwrap();
        let me = Holder::this_process();
        // A run whose runner died mid-item (a reused pid: dead), with its claim still there.
        let ghost = Holder {
            start_time: me.start_time.map(|t| t + 1),
            ..me.clone()
        };
        run_by(&mut l, "dead", ghost.clone());
        assert_eq!(l.claim(&key("x"), "dead", &ghost).unwrap(), Claim::Claimed);
        std::thread::sleep(std::time::Duration::from_millis(5));
        run(&mut l, "live");
        assert_eq!(l.claim(&key("y"), "live", &me).unwrap(), Claim::Claimed);
        let claims = |l: &SqliteLedger| -> Vec<String> {
            l.rows("SELECT run_id FROM claims ORDER BY run_id", [], |r| {
                r.get(0)
            })
            .unwrap()
        };
        assert_eq!(claims(&l), ["dead", "live"]);
        let pruned = keep_latest(&mut l);
        assert_eq!(pruned.runs.len(), 1);
        assert_eq!(pruned.runs[0].0, "dead");
        assert_eq!(claims(&l), ["live"], "the live run's claim stays");
    }

    /// A ledger as a runner that knew only the first `version` migrations left it.
    fn at_schema(path: &Path, version: usize) -> Connection {
        let c = Connection::open(path).unwrap();
        for sql in &MIGRATIONS[..version] {
            c.execute_batch(sql).unwrap();
        }
        c.execute_batch(&format!("PRAGMA user_version = {version}"))
            .unwrap();
        c
    }

    #[test]
    fn a_first_schema_ledger_is_migrated_with_its_results() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        {
            let c = at_schema(&path, 1);
            for (run, outcome, at) in [
                ("r1", "failed", "2026-01-01T00:00:00.000Z"),
                ("r2", "completed", "2026-01-02T00:00:00.000Z"),
            ] {
                c.execute(
                    "INSERT INTO item_results (manifest, repo, item, def_hash, run_id, outcome, ended_at)
                     VALUES ('m', 'r', 'x', 'h', ?1, ?2, ?3)",
                    params![run, outcome, at],
                )
                .unwrap();
            }
        }
        let l = SqliteLedger::open(&path).unwrap();
        let version: i64 = l
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version as usize, MIGRATIONS.len());
        let past = l.past_outcomes("m").unwrap();
        assert_eq!(past.len(), 1);
        assert_eq!(past[0].1.outcome, ItemOutcome::Completed);
        assert_eq!(past[0].1.run_id, "r2");
        let rows: i64 = l
            .conn
            .query_row("SELECT count(*) FROM item_results", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 2, "every result survives the migration");
    }

    /// The items of a run's replayed events, in order.
    fn replayed(ledger: &SqliteLedger, run: &str) -> Vec<usize> {
        let replay = ledger.run_events(run).unwrap().expect("the run is known");
        replay
            .events
            .into_iter()
            .map(|(_, ev)| match ev {
                Event::ItemStarted { item } => item,
                other => panic!("unexpected event {other:?}"),
            })
            .collect()
    }

    #[test]
    fn interleaved_runs_replay_their_own_events_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = SqliteLedger::open(&dir.path().join("state.db")).unwrap();
        let started = |l: &mut SqliteLedger, run: &str, item| {
            l.event(run, None, &Event::ItemStarted { item }, "now")
                .unwrap();
            l.flush().unwrap();
        };
        started(&mut l, "before", 99);
        run(&mut l, "a");
        started(&mut l, "a", 1);
        run(&mut l, "b");
        started(&mut l, "b", 10);
        started(&mut l, "a", 2);
        started(&mut l, "b", 11);
        l.end_run("a", RunEnding::Drained, None, "now").unwrap();
        started(&mut l, "b", 12);
        started(&mut l, "a", 3);
        assert_eq!(
            replayed(&l, "a"),
            [1, 2],
            "what came after its end is not its own"
        );
        assert_eq!(replayed(&l, "b"), [10, 11, 12]);
    }

    #[test]
    fn a_second_schema_ledger_is_migrated_with_its_events() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        {
            let c = at_schema(&path, 2);
            for id in ["a", "b"] {
                c.execute(
                    "INSERT INTO runs (id, manifest, manifest_path, manifest_sha256, host, pid,
                         started_by, started_at, workers, plan_json, run_dir)
                     VALUES (?1, 'm', '/m.yaml', 'x', 'h', 1, 'me', 'then', 1, '{}', '/tmp')",
                    [id],
                )
                .unwrap();
            }
            // Written out of order: the keyed table kept them by run and sequence.
            for (run, seq, item) in [("b", 2, 11), ("a", 2, 2), ("a", 1, 1), ("b", 1, 10)] {
                let body = serde_json::to_string(&Event::ItemStarted { item }).unwrap();
                c.execute(
                    "INSERT INTO events (run_id, seq, at, body) VALUES (?1, ?2, 'then', ?3)",
                    params![run, seq, body],
                )
                .unwrap();
            }
        }
        let l = SqliteLedger::open(&path).unwrap();
        assert_eq!(replayed(&l, "a"), [1, 2]);
        assert_eq!(replayed(&l, "b"), [10, 11]);
    }

    #[test]
    fn a_finished_item_releases_its_claim_and_is_remembered() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = SqliteLedger::open(&dir.path().join("state.db")).unwrap();
        run(&mut l, "a");
        let me = Holder::this_process();
        l.claim(&key("x"), "a", &me).unwrap();
        finished(&mut l, "a", "x", ItemOutcome::Completed);
        assert_eq!(
            l.live_claims().unwrap().len(),
            1,
            "buffered until committed"
        );
        l.commit_results().unwrap();
        assert!(l.live_claims().unwrap().is_empty());
        let past = l.past_outcomes("m").unwrap();
        assert_eq!(past.len(), 1);
        assert_eq!(past[0].1.outcome, ItemOutcome::Completed);
    }

    #[test]
    fn a_claim_commits_the_results_recorded_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let mut l = SqliteLedger::open(&path).unwrap();
        run(&mut l, "a");
        let me = Holder::this_process();
        l.claim(&key("x"), "a", &me).unwrap();
        finished(&mut l, "a", "x", ItemOutcome::Failed);
        let other = SqliteLedger::open(&path).unwrap();
        assert!(other.past_outcomes("m").unwrap().is_empty());
        assert_eq!(l.claim(&key("y"), "a", &me).unwrap(), Claim::Claimed);
        let past = other.past_outcomes("m").unwrap();
        assert_eq!(past.len(), 1, "the result went out with the claim");
        assert_eq!(past[0].1.outcome, ItemOutcome::Failed);
        let claims = other.live_claims().unwrap();
        assert_eq!(claims.len(), 1);
        assert_eq!(claims[0].2, "y");
    }

    #[test]
    fn nothing_is_claimed_while_the_manifest_is_paused() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = SqliteLedger::open(&dir.path().join("state.db")).unwrap();
        run(&mut l, "a");
        l.set_paused("m", "ops", Some("maintenance"), "2026-01-01T00:00:00.000Z")
            .unwrap();
        let me = Holder::this_process();
        match l.claim(&key("x"), "a", &me).unwrap() {
            Claim::Paused(why) => assert!(why.contains("ops") && why.contains("maintenance")),
            other => panic!("claimed while paused: {other:?}"),
        }
        assert!(l.live_claims().unwrap().is_empty());
        assert!(l.clear_paused("m").unwrap());
        assert_eq!(l.claim(&key("x"), "a", &me).unwrap(), Claim::Claimed);
    }

    #[test]
    fn a_write_transaction_is_rolled_back_unless_committed() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = SqliteLedger::open(&dir.path().join("state.db")).unwrap();
        let pause = |m: &str| {
            let tx = WriteTx::begin(&ledger.conn).unwrap();
            exec(
                &tx,
                "INSERT INTO pauses (manifest, paused_by, paused_at) VALUES (?1, 'me', 'now')",
                [m],
            )
            .unwrap();
            tx
        };
        drop(pause("dropped"));
        pause("kept").commit().unwrap();
        let names: Vec<String> = ledger
            .rows("SELECT manifest FROM pauses", [], |r| r.get(0))
            .unwrap();
        assert_eq!(names, ["kept"]);
    }

    #[test]
    fn a_corrupt_file_is_an_error_and_is_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("state.db");
        std::fs::write(&p, b"this is not a database, and it must survive").unwrap();
        assert!(SqliteLedger::open(&p).is_err());
        assert_eq!(
            std::fs::read(&p).unwrap(),
            b"this is not a database, and it must survive"
        );
    }
}
