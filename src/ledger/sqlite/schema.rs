//! The SQLite ledger's schema: numbered migrations, each run once, in order.

/// Numbered migrations; `PRAGMA user_version` records how many have run.
pub(super) const MIGRATIONS: &[&str] = &[
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
    cost_usd REAL NOT NULL,
    PRIMARY KEY (manifest, day)
);
"#,
    // A notice no notifier took: how many deliveries failed, since when (`notify.fallback`).
    r#"
ALTER TABLE incidents ADD COLUMN failures INTEGER NOT NULL DEFAULT 0;
ALTER TABLE incidents ADD COLUMN failed_since TEXT;
"#,
];
