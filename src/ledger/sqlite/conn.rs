//! The SQLite ledger's connection: opened (WAL, a busy timeout, migrations) or read as a
//! snapshot, its buffered writes, its one kind of write transaction, retention, and the row
//! readers the queries share.

use super::schema::MIGRATIONS;
use crate::ledger::buffer::Buffer;
use crate::ledger::*;
use rusqlite::{Connection, OptionalExtension, params};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a call waits for another writer's lock, where it waits at all.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The pages of write-ahead log past which a commit folds it into the database (SQLite's own
/// default).
const WAL_PAGES: i64 = 1000;

/// The latest `?2` runs of manifest `?1` that retention kept: the window history is read from.
pub(super) const RECENT_RUNS: &str =
    "(SELECT id FROM runs WHERE manifest = ?1 AND pruned_at IS NULL
     ORDER BY started_at DESC, id DESC LIMIT ?2)";

/// Write a ledger's buffer in transaction `tx`: events first, then results (each releasing its
/// item's claim).
pub(super) fn write_buffer(buf: &mut Buffer, tx: &Connection) -> rusqlite::Result<()> {
    let mut stmt = tx.prepare_cached(
        "INSERT INTO events (run_id, seq, at, repo, item, body) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    for e in buf.events.drain(..) {
        stmt.execute(params![e.run_id, e.seq, e.at, e.repo, e.item, e.body])?;
    }
    for r in buf.results.drain(..) {
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

pub struct SqliteLedger {
    pub(super) conn: Connection,
    pub(super) path: PathBuf,
    pub(super) buffered: Buffer,
    /// Device and inode of the file opened: a ledger deleted or replaced under a run is noticed.
    pub(super) identity: Option<(u64, u64)>,
    /// Told not to wait ([`SqliteLedger::set_waits`]): no busy timeout, no checkpoint on commit.
    pub(super) gives_up: bool,
}

/// Device and inode of `path`.
pub(super) fn identity_of(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// An existing ledger file that is empty: one that lost its contents, not a new one.
pub(super) fn emptied(path: &Path) -> LedgerError {
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
            buffered: Buffer::default(),
            identity: None,
            gives_up: false,
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
    pub(super) fn create(path: &Path) -> Result<()> {
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
                buffered: Buffer::default(),
                identity: None,
                gives_up: false,
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
    pub(super) fn quick_check(&self) -> Result<()> {
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
    pub(super) fn still_there(&self) -> Result<()> {
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
    pub(super) fn prune_runs(
        &mut self,
        ask: &crate::ledger::Retention<'_>,
    ) -> Result<crate::ledger::Pruned> {
        let crate::ledger::Retention {
            manifest,
            at,
            current,
            ..
        } = *ask;
        let rule = ask.rule();
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
                rule.prunes(*rank, run, run.status() != crate::ledger::RunStatus::Live)
            })
            .map(|(_, (run, dir))| (run.id, dir))
            .collect();
        let mut pruned = crate::ledger::Pruned::default();
        if doomed.is_empty() {
            return Ok(pruned);
        }
        let path = &self.path;
        let tx = WriteTx::begin(&self.conn).map_err(|e| db(path, e))?;
        write_buffer(&mut self.buffered, &tx).map_err(|e| db(path, e))?;
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
            current_defs(&tx, manifest, current).map_err(|e| db(path, e))?;
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

    pub(super) fn err(&self, e: rusqlite::Error) -> LedgerError {
        db(&self.path, e)
    }

    pub(super) fn unusable(&self, message: String) -> LedgerError {
        LedgerError::Unusable {
            path: self.path.display().to_string(),
            message,
        }
    }

    /// Every row of a query, through the statement cache.
    pub(super) fn rows<T>(
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
    pub(super) fn write(&self, sql: &str, p: impl rusqlite::Params) -> Result<usize> {
        self.conn.execute(sql, p).map_err(|e| self.err(e))
    }

    pub(super) fn setup(&mut self) -> Result<()> {
        self.conn
            .busy_timeout(BUSY_TIMEOUT)
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

    /// Whether the calls that follow wait for another writer's lock (up to the busy timeout)
    /// and fold the write-ahead log into the database when a commit has made it long (which
    /// syncs the file). Told not to, a call that would wait gives up at once with SQLite's
    /// `SQLITE_BUSY`, before its transaction changed anything, and a commit leaves the log as
    /// it is, for [`SqliteLedger::fold_large_log`].
    pub(super) fn set_waits(&mut self, wait: bool) -> Result<()> {
        if self.gives_up != wait {
            return Ok(());
        }
        let (timeout, pages) = if wait {
            (BUSY_TIMEOUT, WAL_PAGES)
        } else {
            (Duration::ZERO, 0)
        };
        self.conn.busy_timeout(timeout).map_err(|e| self.err(e))?;
        self.conn
            .pragma_update(None, "wal_autocheckpoint", pages)
            .map_err(|e| self.err(e))?;
        self.gives_up = !wait;
        Ok(())
    }

    /// Fold the write-ahead log into the database when it holds more than SQLite's own
    /// threshold for that ([`WAL_PAGES`]), without waiting on readers.
    pub(super) fn fold_large_log(&mut self) -> Result<()> {
        let mut wal = self.path.clone().into_os_string();
        wal.push("-wal");
        let large = std::fs::metadata(&wal).is_ok_and(|m| m.len() > WAL_PAGES as u64 * 4096);
        if large {
            self.conn
                .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
                .map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    /// Commit everything buffered.
    pub(crate) fn flush(&mut self) -> Result<()> {
        if self.buffered.is_empty() {
            return Ok(());
        }
        self.still_there()?;
        let path = &self.path;
        let tx = WriteTx::begin(&self.conn).map_err(|e| db(path, e))?;
        write_buffer(&mut self.buffered, &tx).map_err(|e| db(path, e))?;
        tx.commit().map_err(|e| db(path, e))
    }

    /// Open an existing ledger for reading only, without creating or changing any file (for
    /// `plan`). What the last run has not yet checkpointed may be missing.
    pub(crate) fn open_snapshot(path: &Path) -> Result<Option<Self>> {
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
            buffered: Buffer::default(),
            identity: None,
            gives_up: false,
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
pub(super) struct WriteTx<'c> {
    pub(super) conn: &'c Connection,
    pub(super) committed: bool,
}

impl<'c> WriteTx<'c> {
    pub(super) fn begin(conn: &'c Connection) -> rusqlite::Result<Self> {
        conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        Ok(WriteTx {
            conn,
            committed: false,
        })
    }

    pub(super) fn commit(mut self) -> rusqlite::Result<()> {
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
pub(super) fn exec(
    tx: &Connection,
    sql: &str,
    p: impl rusqlite::Params,
) -> rusqlite::Result<usize> {
    tx.prepare_cached(sql)?.execute(p)
}

pub(super) fn query<T>(
    tx: &Connection,
    sql: &str,
    p: impl rusqlite::Params,
    f: impl FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    tx.prepare_cached(sql)?.query_row(p, f)
}

pub(super) fn db(path: &Path, source: rusqlite::Error) -> LedgerError {
    LedgerError::Db {
        path: path.display().to_string(),
        source,
    }
}

/// The holder stored in columns `at` (host), `at + 1` (pid) and `at + 2` (start time) of `r`.
pub(super) fn holder_at(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<Holder> {
    Ok(Holder {
        host: r.get(at)?,
        pid: r.get(at + 1)?,
        start_time: r.get::<_, Option<i64>>(at + 2)?.map(|t| t as u64),
        pid_ns: None,
    })
}

pub(super) fn row_to_run(r: &rusqlite::Row<'_>) -> rusqlite::Result<RunRow> {
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

/// Who paused `manifest`, when and why, if it is paused.
pub(super) fn pause_of(conn: &Connection, manifest: &str) -> rusqlite::Result<Option<String>> {
    conn.prepare_cached("SELECT paused_by, reason, paused_at FROM pauses WHERE manifest = ?1")?
        .query_row([manifest], |r| {
            let (by, reason, at): (String, Option<String>, String) =
                (r.get(0)?, r.get(1)?, r.get(2)?);
            Ok(crate::ledger::pause_text(&by, reason.as_deref(), &at))
        })
        .optional()
}

/// `temp.current_defs`: the definitions of `manifest`'s items in `current`, one row each.
fn current_defs(
    tx: &Connection,
    manifest: &str,
    current: &dyn crate::vocab::KeySet,
) -> rusqlite::Result<()> {
    tx.execute_batch(
        "CREATE TEMP TABLE IF NOT EXISTS current_defs (repo TEXT, item TEXT, def_hash TEXT,
           PRIMARY KEY (repo, item)) WITHOUT ROWID;
         DELETE FROM temp.current_defs;",
    )?;
    let mut add = tx.prepare(
        "INSERT OR REPLACE INTO temp.current_defs (repo, item, def_hash) VALUES (?1, ?2, ?3)",
    )?;
    let mut failed = None;
    current.each(&mut |k| {
        if failed.is_none() && k.manifest == manifest {
            failed = add.execute(params![k.repo, k.item, k.def_hash]).err();
        }
    });
    failed.map_or(Ok(()), Err)
}
