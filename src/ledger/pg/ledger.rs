//! The PostgreSQL ledger's answers to the [`Ledger`] and [`History`] traits.

use super::{
    buffer::{BufferStatements, CLAIM_BLOCKED, CLAIM_INSERT, write_buffer},
    client::{PgLedger, RECENT_RUNS, RUN_COLUMNS, holder_of, pause_of, repo_key, run_of},
    session::lapse,
};
use crate::ledger::*;

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
                    let outcome = outcome_from(r.get::<_, &str>(3))?;
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
        let url = self.url.clone();
        if self.buffered.record(run_id, item, ev, at, &url)? {
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

    fn add_spend(&mut self, manifest: &str, day: &str, usd: f64) -> Result<()> {
        super::incidents::add_spend(self, manifest, day, usd)
    }

    fn spend_since(&self, manifest: &str, day: &str) -> Result<f64> {
        super::incidents::spend_since(self, manifest, day)
    }

    fn incidents(&self, manifest: &str) -> Result<Vec<IncidentRow>> {
        super::incidents::list(self, manifest)
    }

    fn see_incident(
        &mut self,
        manifest: &str,
        cause: &str,
        kind: &str,
        body: &str,
        at: &str,
    ) -> Result<IncidentRow> {
        super::incidents::see(self, [manifest, cause, kind, body, at])
    }

    fn resolve_incident(&mut self, manifest: &str, cause: &str, at: &str) -> Result<bool> {
        super::incidents::resolve(self, [manifest, cause, at])
    }

    fn take_notice(&mut self, manifest: &str, cause: &str, owed: &str) -> Result<bool> {
        super::incidents::execute(self, incident_sql::TAKE, &[manifest, cause, owed])
            .map(|n| n == 1)
    }

    fn owe_notice(&mut self, manifest: &str, cause: &str, owed: &str, at: &str) -> Result<()> {
        super::incidents::execute(self, incident_sql::OWE, &[manifest, cause, owed, at]).map(drop)
    }

    fn notice_sent(&mut self, manifest: &str, cause: &str) -> Result<()> {
        super::incidents::execute(self, incident_sql::SENT, &[manifest, cause]).map(drop)
    }

    fn forget_incident(&mut self, manifest: &str, cause: &str) -> Result<()> {
        super::incidents::execute(self, incident_sql::FORGET, &[manifest, cause]).map(drop)
    }

    fn writeback(&self, manifest: &str, key: &str) -> Result<Option<(String, String)>> {
        let (m, k) = (manifest.to_string(), key.to_string());
        self.call(move |s| {
            let row = s.client.query_opt(
                "SELECT state, run_id FROM writebacks WHERE manifest = $1 AND key = $2",
                &[&m, &k],
            )?;
            Ok(row.map(|r| (r.get(0), r.get(1))))
        })
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
        let (m, k, st, r, e, a) = (
            manifest.to_string(),
            key.to_string(),
            state.to_string(),
            run_id.to_string(),
            error.map(str::to_string),
            at.to_string(),
        );
        let expect = expect.map(|(w, b)| (w.to_string(), b.to_string()));
        self.call(move |s| {
            let n = match &expect {
                None => s.client.execute(
                    "INSERT INTO writebacks (manifest, key, state, run_id, error, at)
                         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (manifest, key) DO NOTHING",
                    &[&m, &k, &st, &r, &e, &a],
                )?,
                Some((was, by)) => s.client.execute(
                    "UPDATE writebacks SET state = $3, run_id = $4, error = $5, at = $6
                      WHERE manifest = $1 AND key = $2 AND state = $7 AND run_id = $8",
                    &[&m, &k, &st, &r, &e, &a, was, by],
                )?,
            };
            Ok(n == 1)
        })
    }

    fn set_writeback_job(&mut self, manifest: &str, key: &str, job: &str) -> Result<()> {
        let (m, k, j) = (manifest.to_string(), key.to_string(), job.to_string());
        self.call(move |s| {
            s.client
                .execute(
                    "UPDATE writebacks SET job = $3 WHERE manifest = $1 AND key = $2",
                    &[&m, &k, &j],
                )
                .map(|_| ())
        })
    }

    fn unfinished_writebacks(&self, manifest: &str) -> Result<Vec<(String, String)>> {
        let m = manifest.to_string();
        self.call(move |s| {
            let rows = s.client.query(
                "SELECT key, job FROM writebacks
                  WHERE manifest = $1 AND state != 'done' AND job IS NOT NULL ORDER BY at",
                &[&m],
            )?;
            Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
        })
    }

    fn source_items(&self, manifest: &str, source: &str) -> Result<Option<String>> {
        let (m, src) = (manifest.to_string(), source.to_string());
        self.call(move |s| {
            let row = s.client.query_opt(
                "SELECT items FROM source_items WHERE manifest = $1 AND source = $2",
                &[&m, &src],
            )?;
            Ok(row.map(|r| r.get(0)))
        })
    }

    fn set_source_items(
        &mut self,
        manifest: &str,
        source: &str,
        items: &str,
        at: &str,
    ) -> Result<()> {
        let (m, src, i, a) = (
            manifest.to_string(),
            source.to_string(),
            items.to_string(),
            at.to_string(),
        );
        self.call(move |s| {
            s.client
                .execute(
                    "INSERT INTO source_items (manifest, source, items, read_at) VALUES ($1, $2, $3, $4)
                     ON CONFLICT (manifest, source) DO UPDATE SET items = $3, read_at = $4",
                    &[&m, &src, &i, &a],
                )
                .map(|_| ())
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

    fn lease_waits(&self, id: &str) -> Result<Vec<crate::ledger::LeaseWait>> {
        let id = id.to_string();
        let rows = self.call(move |s| {
            let sql = crate::ledger::LEASE_WAITS_SQL.replace("FIRST_EVENT", "");
            Ok(s.client
                .query(&sql, &[&id])?
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
                .collect())
        })?;
        Ok(crate::ledger::lease_waits_of(rows))
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
                  WHERE r.manifest = $1 AND (e.body LIKE '{\"event\":\"published\"%'
                       OR e.body LIKE '{\"event\":\"pull-request-settled\"%')
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
    ) -> Result<Vec<crate::ledger::RecentResults>> {
        let m = manifest.to_string();
        let limit = limit as i64;
        self.call(move |s| {
            let rows = s.client.query(
                &format!(
                    "SELECT repo, item, run_id, outcome FROM item_results
                      WHERE manifest = $1 AND run_id IN {RECENT_RUNS}
                      ORDER BY repo, item, recorded_at"
                ),
                &[&m, &limit],
            )?;
            let mut gather = crate::ledger::RecentGather::default();
            for r in &rows {
                gather.row(r.get(0), r.get(1), r.get(2), r.get(3));
            }
            Ok(gather.done())
        })
    }
}
