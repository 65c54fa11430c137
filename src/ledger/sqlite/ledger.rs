//! The SQLite ledger's answers to the [`Ledger`] and [`History`] traits: runs, claims,
//! events, results, pauses, quarantines and the history read back.

use super::conn::{
    RECENT_RUNS, SqliteLedger, WriteTx, db, exec, holder_at, pause_of, query, row_to_run,
    write_buffer,
};
use crate::ledger::*;
use rusqlite::{OptionalExtension, params};
use std::collections::HashMap;

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
        write_buffer(&mut self.buffered, &tx).map_err(|e| db(path, e))?;
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
            .is_some_and(|r| r.status() == crate::ledger::RunStatus::Live))
    }

    fn claim(&mut self, key: &ItemKey, run_id: &str, holder: &Holder) -> Result<Claim> {
        self.still_there()?;
        let path = self.path.clone();
        let tx = WriteTx::begin(&self.conn).map_err(|e| db(&path, e))?;
        write_buffer(&mut self.buffered, &tx).map_err(|e| db(&path, e))?;
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
        let path = self.path.display().to_string();
        if self.buffered.record(run_id, item, ev, at, &path)? {
            self.flush()?;
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

    fn add_spend(&mut self, manifest: &str, day: &str, usd: f64) -> Result<()> {
        self.write(&lite(incident_sql::ADD_SPEND), params![manifest, day, usd])?;
        Ok(())
    }

    fn spend_since(&self, manifest: &str, day: &str) -> Result<f64> {
        self.conn
            .query_row(
                &lite(incident_sql::SPEND_SINCE),
                params![manifest, day],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))
    }

    fn incidents(&self, manifest: &str) -> Result<Vec<IncidentRow>> {
        let mut st = self
            .conn
            .prepare_cached(&lite(incident_sql::LIST))
            .map_err(|e| self.err(e))?;
        let rows = st
            .query_map([manifest], incident_row)
            .map_err(|e| self.err(e))?;
        rows.collect::<rusqlite::Result<_>>()
            .map_err(|e| self.err(e))
    }

    fn see_incident(
        &mut self,
        manifest: &str,
        cause: &str,
        kind: &str,
        body: &str,
        at: &str,
    ) -> Result<IncidentRow> {
        self.conn
            .query_row(
                &lite(incident_sql::SEE),
                params![manifest, cause, kind, body, at],
                incident_row,
            )
            .map_err(|e| self.err(e))
    }

    fn resolve_incident(&mut self, manifest: &str, cause: &str, at: &str) -> Result<bool> {
        if self.write(&lite(incident_sql::FORGET_UNTOLD), params![manifest, cause])? == 1 {
            return Ok(true);
        }
        Ok(self.write(&lite(incident_sql::RESOLVE), params![manifest, cause, at])? == 1)
    }

    fn take_notice(&mut self, manifest: &str, cause: &str, owed: &str) -> Result<bool> {
        Ok(self.write(&lite(incident_sql::TAKE), params![manifest, cause, owed])? == 1)
    }

    fn owe_notice(&mut self, manifest: &str, cause: &str, owed: &str, at: &str) -> Result<()> {
        self.write(&lite(incident_sql::OWE), params![manifest, cause, owed, at])?;
        Ok(())
    }

    fn notice_sent(&mut self, manifest: &str, cause: &str) -> Result<()> {
        self.write(&lite(incident_sql::SENT), params![manifest, cause])?;
        Ok(())
    }

    fn forget_incident(&mut self, manifest: &str, cause: &str) -> Result<()> {
        self.write(&lite(incident_sql::FORGET), params![manifest, cause])?;
        Ok(())
    }

    fn writeback(&self, manifest: &str, key: &str) -> Result<Option<(String, String)>> {
        self.conn
            .query_row(
                "SELECT state, run_id FROM writebacks WHERE manifest = ?1 AND key = ?2",
                [manifest, key],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    fn swap_writeback(
        &mut self,
        manifest: &str,
        key: &str,
        expect: Option<(&str, &str)>,
        state: &str,
        run_id: &str,
        error: Option<&str>,
        at: &str,
    ) -> Result<bool> {
        let n = match expect {
            None => self.write(
                "INSERT INTO writebacks (manifest, key, state, run_id, error, at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (manifest, key) DO NOTHING",
                params![manifest, key, state, run_id, error, at],
            )?,
            Some((was, by)) => self.write(
                "UPDATE writebacks SET state = ?3, run_id = ?4, error = ?5, at = ?6
                  WHERE manifest = ?1 AND key = ?2 AND state = ?7 AND run_id = ?8",
                params![manifest, key, state, run_id, error, at, was, by],
            )?,
        };
        Ok(n == 1)
    }

    fn set_writeback_job(&mut self, manifest: &str, key: &str, job: &str) -> Result<()> {
        self.write(
            "UPDATE writebacks SET job = ?3 WHERE manifest = ?1 AND key = ?2",
            params![manifest, key, job],
        )?;
        Ok(())
    }

    fn unfinished_writebacks(&self, manifest: &str) -> Result<Vec<(String, String)>> {
        let mut st = self
            .conn
            .prepare(
                "SELECT key, job FROM writebacks
                  WHERE manifest = ?1 AND state != 'done' AND job IS NOT NULL ORDER BY at",
            )
            .map_err(|e| self.err(e))?;
        st.query_map([manifest], |r| Ok((r.get(0)?, r.get(1)?)))
            .and_then(|rows| rows.collect())
            .map_err(|e| self.err(e))
    }

    fn source_items(&self, manifest: &str, source: &str) -> Result<Option<String>> {
        self.conn
            .query_row(
                "SELECT items FROM source_items WHERE manifest = ?1 AND source = ?2",
                [manifest, source],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.err(e))
    }

    fn set_source_items(
        &mut self,
        manifest: &str,
        source: &str,
        items: &str,
        at: &str,
    ) -> Result<()> {
        self.write(
            "INSERT INTO source_items (manifest, source, items, read_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (manifest, source) DO UPDATE SET items = ?3, read_at = ?4",
            params![manifest, source, items, at],
        )?;
        Ok(())
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
            .and_then(|t| serde_json::from_str::<crate::ledger::RunTotals>(&t).ok())
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
        Ok(crate::ledger::sum_usage(bodies))
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
        Ok(latest.and_then(|(at, body)| crate::ledger::resting_until_of(&at, &body)))
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
        Ok(latest.and_then(|(at, body)| crate::ledger::waiting_of(&at, &body)))
    }

    fn lease_waits(&self, id: &str) -> Result<Vec<crate::ledger::LeaseWait>> {
        let sql = lite(crate::ledger::LEASE_WAITS_SQL).replace(
            "FIRST_EVENT",
            "AND e.rowid > coalesce((SELECT first_event FROM runs WHERE id = ?1), 0)",
        );
        let rows = self.rows(&sql, [id], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })?;
        Ok(crate::ledger::lease_waits_of(rows))
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
    fn record_totals(&mut self, id: &str, totals: &crate::ledger::RunTotals) -> Result<()> {
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

    /// Write everything recorded so far, events included, now; and fold the write-ahead log
    /// into the database once it is large, which the commits made without waiting leave to
    /// this call ([`SqliteLedger::set_waits`]).
    fn flush_all(&mut self) -> Result<()> {
        self.flush()?;
        self.fold_large_log()
    }

    fn waits(&mut self, wait: bool) -> bool {
        self.set_waits(wait).is_ok()
    }

    fn room(&self) -> usize {
        self.buffered.room()
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
        Ok(crate::ledger::item_durations_of(rows))
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
        Ok(crate::ledger::gate_durations_of(bodies))
    }

    /// The latest successful publication of each item of `manifest`, by (repository, item id):
    /// (branch, commit, pull request URL).
    fn publications_of(&self, manifest: &str) -> Result<crate::ledger::Publications> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT e.repo, e.item, e.body FROM events e JOIN runs r ON r.id = e.run_id
                 WHERE r.manifest = ?1 AND (e.body LIKE '{\"event\":\"published\"%'
                       OR e.body LIKE '{\"event\":\"pull-request-settled\"%')
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
        Ok(crate::ledger::publications_from(rows))
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

    fn prune(&mut self, ask: &crate::ledger::Retention<'_>) -> Result<crate::ledger::Pruned> {
        self.prune_runs(ask)
    }
}

impl History for SqliteLedger {
    /// The latest `limit` runs of `manifest`, newest first, with their report folders and what
    /// they came to (absent for a run that died or predates the record).
    fn run_history(&self, manifest: &str, limit: usize) -> Result<Vec<crate::ledger::RunHistory>> {
        let rows = self.rows(
            "SELECT id, manifest, manifest_path, manifest_sha256, host, pid, start_time, started_by, started_at, ended_at, ending, cause, stop_requested_by, stop_reason, containment, run_dir, totals
             FROM runs WHERE manifest = ?1 AND pruned_at IS NULL ORDER BY started_at DESC, id DESC LIMIT ?2",
            params![manifest, limit as i64],
            |r| Ok((row_to_run(r)?, r.get::<_, String>(15)?, r.get::<_, Option<String>>(16)?)),
        )?;
        Ok(rows
            .into_iter()
            .map(|(run, run_dir, totals)| crate::ledger::RunHistory {
                run,
                run_dir,
                // A record this version cannot read is shown as unknown, not as an error.
                totals: totals.and_then(|t| serde_json::from_str(&t).ok()),
            })
            .collect())
    }

    /// The recorded results of `manifest`'s items in its latest `limit` runs, each item's
    /// oldest first.
    fn recent_item_results(
        &self,
        manifest: &str,
        limit: usize,
    ) -> Result<Vec<crate::ledger::RecentResults>> {
        let sql = format!(
            "SELECT repo, item, run_id, outcome FROM item_results
             WHERE manifest = ?1 AND run_id IN
                 {RECENT_RUNS}
             ORDER BY repo, item, ended_at"
        );
        let mut stmt = self.conn.prepare_cached(&sql).map_err(|e| self.err(e))?;
        let mut rows = stmt
            .query(params![manifest, limit as i64])
            .map_err(|e| self.err(e))?;
        // Row by row, borrowed: the rows are never held as strings.
        let mut gather = crate::ledger::RecentGather::default();
        while let Some(r) = rows.next().map_err(|e| self.err(e))? {
            let text = |i| {
                r.get_ref(i)
                    .ok()
                    .and_then(|v| v.as_str().ok())
                    .unwrap_or("")
            };
            gather.row(text(0), text(1), text(2), text(3));
        }
        Ok(gather.done())
    }
}

/// An incident as the statements of [`incident_sql`] select it.
fn incident_row(r: &rusqlite::Row) -> rusqlite::Result<IncidentRow> {
    Ok(IncidentRow {
        cause: r.get(0)?,
        kind: r.get(1)?,
        body: r.get(2)?,
        first_seen: r.get(3)?,
        last_seen: r.get(4)?,
        count: r.get(5)?,
        owed: r.get(6)?,
        resolved_at: r.get(7)?,
        failures: r.get(8)?,
        failed_since: r.get(9)?,
    })
}

/// A statement of [`incident_sql`] with SQLite's numbered placeholders (`?3` binds the third
/// parameter wherever it stands; `$3` would be numbered by where it first appears).
fn lite(sql: &str) -> String {
    sql.replace('$', "?")
}
