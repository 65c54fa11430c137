//! How the PostgreSQL ledger writes what it buffered ([`crate::ledger::buffer`]) with the next
//! claim or result, and the statements of its hot path.

use super::session::Session;
use crate::ledger::buffer::{Buffer, PendingEvent};

/// The SQL of the hot path: one statement for all of a commit's events, one per result.
pub(super) const INSERT_EVENTS: &str = "INSERT INTO events (run_id, seq, at, repo, item, body)
     SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[])";

pub(super) const INSERT_RESULT: &str = "INSERT INTO item_results (manifest, repo, item, def_hash, run_id, outcome, reason, cause, ended_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
     ON CONFLICT (manifest, repo, item, def_hash, run_id) DO UPDATE
       SET outcome = $6, reason = $7, cause = $8, ended_at = $9, recorded_at = now()";

pub(super) const RELEASE_CLAIM: &str = "DELETE FROM claims WHERE manifest = $1 AND repo = $2 AND item = $3 AND def_hash = $4 AND run_id = $5";

/// Why an item may not be claimed, in one round trip: the manifest's pause (who, why, when),
/// and a terminal result another run recorded since this one looked (`$6`, else its start).
pub(super) const CLAIM_BLOCKED: &str = "SELECT p.paused_by, p.reason, p.paused_at, d.run_id, d.outcome
       FROM (SELECT 1) one
       LEFT JOIN pauses p ON p.manifest = $1
       LEFT JOIN LATERAL (
           SELECT r.run_id, r.outcome FROM item_results r
            WHERE r.manifest = $1 AND r.repo = $2 AND r.item = $3 AND r.def_hash = $4
              AND r.outcome IN ('completed', 'halted', 'failed') AND r.run_id <> $5
              AND r.recorded_at >= coalesce($6::timestamptz, (SELECT begun_at FROM runs WHERE id = $5))
            ORDER BY r.recorded_at DESC LIMIT 1) d ON true";

pub(super) const CLAIM_INSERT: &str =
    "INSERT INTO claims (manifest, repo, item, def_hash, run_id, host, pid, start_time, claimed_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING";

/// The statements [`write_buffer`] uses.
pub(super) struct BufferStatements {
    pub(super) events: ::postgres::Statement,
    pub(super) result: ::postgres::Statement,
    pub(super) release: ::postgres::Statement,
}

impl BufferStatements {
    pub(super) fn of(s: &mut Session) -> std::result::Result<Self, ::postgres::Error> {
        Ok(BufferStatements {
            events: s.statement(INSERT_EVENTS)?,
            result: s.statement(INSERT_RESULT)?,
            release: s.statement(RELEASE_CLAIM)?,
        })
    }
}

pub(super) fn write_buffer(
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
