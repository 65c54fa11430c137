//! The PostgreSQL ledger's handle: opened, its calls sent to the client thread, retention,
//! and the pieces of SQL its queries share.

use super::{
    buffer::{BufferStatements, write_buffer},
    schema::migrate,
    session::{Job, Session, connection_lost, lapse, ledger_retry, message, serve, shown},
};
use crate::ledger::buffer::Buffer;
use crate::ledger::*;
use ::postgres::{Client, NoTls};
use std::sync::mpsc;
use std::time::Duration;

/// The ledger in a PostgreSQL database.
pub struct PgLedger {
    pub(super) url: String,
    pub(super) jobs: mpsc::Sender<Job>,
    pub(super) buffered: Buffer,
    /// The server's time when this runner last read the past outcomes (its plan): a result
    /// recorded after it is news, whatever the clocks of the machines say.
    pub(super) as_of: std::sync::Mutex<Option<std::time::SystemTime>>,
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
    pub(super) fn call<T: Send + 'static>(
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

    pub(super) fn gone(&self) -> LedgerError {
        LedgerError::Server {
            url: self.url.clone(),
            message: "the connection to the server was lost".into(),
        }
    }

    /// The buffered events and results, to write in the next transaction.
    pub(super) fn take_buffer(&mut self) -> Buffer {
        self.buffered.take()
    }

    /// Make everything buffered durable.
    pub(crate) fn flush(&mut self) -> Result<()> {
        let buf = self.take_buffer();
        if buf.is_empty() {
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
    pub(super) fn latest_event(
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
    /// [`SqliteLedger::prune`]: crate::ledger::sqlite::SqliteLedger::prune
    pub(crate) fn prune_as(&mut self, ask: &Retention<'_>, host: &str) -> Result<Pruned> {
        let Retention {
            manifest,
            at,
            current,
            ..
        } = *ask;
        let rule = ask.rule();
        let buf = self.take_buffer();
        let m = manifest.to_string();
        let (at, host) = (at.to_string(), host.to_string());
        let (mut cur_repo, mut cur_item, mut cur_def) = (Vec::new(), Vec::new(), Vec::new());
        current.each(&mut |k| {
            if k.manifest == manifest {
                cur_repo.push(k.repo);
                cur_item.push(k.item);
                cur_def.push(k.def_hash);
            }
        });
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
                if rule.prunes(rank, &run, over) {
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
pub(super) const PRUNE_SILENT: Duration = Duration::from_secs(24 * 3600);

/// A manifest's latest runs: `$1` the manifest, `$2` how many.
pub(super) const RECENT_RUNS: &str =
    "(SELECT id FROM runs WHERE manifest = $1 AND pruned_at IS NULL
      ORDER BY started_at DESC, id DESC LIMIT $2)";

/// The columns [`run_of`] reads; `$2` is the heartbeat's lapse in seconds.
pub(super) const RUN_COLUMNS: &str =
    "id, manifest, manifest_path, manifest_sha256, host, pid, start_time, started_by,
     started_at, ended_at, ending, cause, stop_requested_by, stop_reason, containment,
     heartbeat_at > now() - make_interval(secs => $2)";

pub(super) fn run_of(r: &::postgres::Row) -> RunRow {
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
pub(super) fn repo_key(identity: &str) -> i64 {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(format!("runner.repository\0{identity}").as_bytes());
    let mut k = [0u8; 8];
    k.copy_from_slice(&d[..8]);
    i64::from_be_bytes(k)
}

pub(super) fn pause_of(
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

pub(super) fn holder_of(host: String, pid: i64, start_time: Option<i64>) -> Holder {
    Holder {
        host,
        pid: pid as u32,
        start_time: start_time.map(|t| t as u64),
        pid_ns: None,
    }
}
