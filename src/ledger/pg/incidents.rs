//! The PostgreSQL ledger's incidents (`notify`) and spend by day (`budget.daily_usd`): the
//! statements of [`incident_sql`](crate::ledger::incident_sql), run on the client's thread.

use super::client::PgLedger;
use crate::ledger::{IncidentRow, Result, incident_sql};

/// Run `sql` with text parameters `p`; the rows it changed.
pub(super) fn execute(l: &PgLedger, sql: &'static str, p: &[&str]) -> Result<u64> {
    let p: Vec<String> = p.iter().map(|s| s.to_string()).collect();
    l.call(move |s| {
        let params: Vec<&(dyn ::postgres::types::ToSql + Sync)> = p
            .iter()
            .map(|v| v as &(dyn ::postgres::types::ToSql + Sync))
            .collect();
        s.client.execute(sql, &params)
    })
}

pub(super) fn add_spend(l: &PgLedger, manifest: &str, day: &str, usd: f64) -> Result<()> {
    let (m, d) = (manifest.to_string(), day.to_string());
    l.call(move |s| {
        s.client.execute(incident_sql::ADD_SPEND, &[&m, &d, &usd])?;
        Ok(())
    })
}

pub(super) fn spend_since(l: &PgLedger, manifest: &str, day: &str) -> Result<f64> {
    let (m, d) = (manifest.to_string(), day.to_string());
    l.call(move |s| {
        Ok(s.client
            .query_one(incident_sql::SPEND_SINCE, &[&m, &d])?
            .get(0))
    })
}

pub(super) fn list(l: &PgLedger, manifest: &str) -> Result<Vec<IncidentRow>> {
    let m = manifest.to_string();
    l.call(move |s| {
        let rows = s.client.query(incident_sql::LIST, &[&m])?;
        Ok(rows.iter().map(incident_row).collect())
    })
}

/// `[manifest, cause, kind, body, at]`.
pub(super) fn see(l: &PgLedger, p: [&str; 5]) -> Result<IncidentRow> {
    let p = p.map(str::to_string);
    l.call(move |s| {
        let r = s
            .client
            .query_one(incident_sql::SEE, &[&p[0], &p[1], &p[2], &p[3], &p[4]])?;
        Ok(incident_row(&r))
    })
}

/// `[manifest, cause, at]`: forgotten when never told, else resolved; whether it was either.
pub(super) fn resolve(l: &PgLedger, p: [&str; 3]) -> Result<bool> {
    let p = p.map(str::to_string);
    l.call(move |s| {
        if s.client
            .execute(incident_sql::FORGET_UNTOLD, &[&p[0], &p[1]])?
            == 1
        {
            return Ok(true);
        }
        Ok(s.client
            .execute(incident_sql::RESOLVE, &[&p[0], &p[1], &p[2]])?
            == 1)
    })
}

/// An incident as the statements of [`incident_sql`] select it.
fn incident_row(r: &::postgres::Row) -> IncidentRow {
    IncidentRow {
        cause: r.get(0),
        kind: r.get(1),
        body: r.get(2),
        first_seen: r.get(3),
        last_seen: r.get(4),
        count: r.get::<_, i32>(5).max(0) as u32,
        owed: r.get(6),
        resolved_at: r.get(7),
        failures: r.get::<_, i32>(8).max(0) as u32,
        failed_since: r.get(9),
    }
}
