//! What a run session is made of: the options a verb gives it, and a prepared run (what
//! [`super::prepare`] makes, [`super::run`] drains and [`super::finish`] ends).

use crate::engine::RunCx;
use crate::plan::PlanOptions;
use crate::plan::past::Rerun;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// What a verb asks of a run session (`apply`'s flags, without the command line's types).
#[derive(Clone, Debug, Default)]
pub(crate) struct Options {
    /// `-j N`: at most this many items at once (it only lowers `capacity.workers`).
    pub workers: Option<u32>,
    /// Which repositories and items, which shard, and `--fresh`.
    pub plan: PlanOptions,
    /// `--rerun WHICH`.
    pub rerun: Option<Rerun>,
    /// The ledger: a SQLite file or a PostgreSQL url.
    pub state: PathBuf,
    /// `--report-dir`, over the manifest's `reports.dir`.
    pub report_dir: Option<PathBuf>,
    /// `--json`: the report on stdout.
    pub json: bool,
    /// `--events FILE` (`-` for stdout).
    pub events: Option<PathBuf>,
    /// `--no-progress`.
    pub no_progress: bool,
    /// `--wait-for-locks`.
    pub wait_for_locks: Option<Duration>,
    /// `--no-cache`: every gate runs, no cached verdict is used.
    pub no_cache: bool,
    /// `--no-probe`.
    pub no_probe: bool,
    /// `--standing-holds pass`: items still held do not fail a run that ran nothing.
    pub standing_holds_pass: bool,
}

/// A prepared run: its context for the engine, the fan-out its events go through, and what the
/// finish needs.
pub(crate) struct Session {
    pub cx: Arc<RunCx>,
    pub sink: super::fanout::Fanout,
    pub opts: Options,
}
