//! The PostgreSQL ledger's schema: numbered migrations, run under an advisory lock so that
//! runners starting together migrate once.

use ::postgres::Client;

/// Numbered migrations, each applied once, under a lock so that runners starting together do
/// not race.
pub(super) const MIGRATIONS: &[&str] = &[
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
    // What each tracker source gave the last time it was read.
    r#"
CREATE TABLE source_items (
    manifest TEXT NOT NULL,
    source TEXT NOT NULL,
    items TEXT NOT NULL,
    read_at TEXT NOT NULL,
    PRIMARY KEY (manifest, source)
);
"#,
    // Write-backs to trackers, each done exactly once.
    r#"
CREATE TABLE writebacks (
    manifest TEXT NOT NULL,
    key TEXT NOT NULL,
    state TEXT NOT NULL,
    run_id TEXT NOT NULL,
    error TEXT,
    at TEXT NOT NULL,
    job TEXT,
    PRIMARY KEY (manifest, key)
);
"#,
    // Incidents (`notify`): one per cause, open until a later run no longer sees it.
    r#"
CREATE TABLE incidents (
    manifest TEXT NOT NULL,
    cause TEXT NOT NULL,
    kind TEXT NOT NULL,
    body TEXT NOT NULL,
    first_seen TEXT NOT NULL,
    last_seen TEXT NOT NULL,
    count INTEGER NOT NULL,
    owed TEXT,
    resolved_at TEXT,
    PRIMARY KEY (manifest, cause)
);
"#,
    // What workers reported they spent, by manifest and UTC day, for `budget.daily_usd` and
    // `budget.monthly_usd` (kept apart from the runs, which retention prunes).
    r#"
CREATE TABLE spend (
    manifest TEXT NOT NULL,
    day TEXT NOT NULL,
    cost_usd DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (manifest, day)
);
"#,
    // A notice no notifier took: how many deliveries failed, since when (`notify.fallback`).
    r#"
ALTER TABLE incidents ADD COLUMN failures INTEGER NOT NULL DEFAULT 0;
ALTER TABLE incidents ADD COLUMN failed_since TEXT;
"#,
];
/// The key of the advisory lock that serialises migrations.
pub(super) const MIGRATION_LOCK: i64 = 0x7275_6e6e_6572_0001;

pub(super) fn migrate(c: &mut Client) -> std::result::Result<(), ::postgres::Error> {
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
