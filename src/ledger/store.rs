//! The ledger a command opens: SQLite (a file, the default) or PostgreSQL (`--state
//! postgres://…`), as one [`Ledger`]: callers never know which.

use super::pg::PgLedger;
use super::sqlite::SqliteLedger;
use super::{Ledger, Result};
use std::path::Path;

/// An open ledger, of either backend.
pub(crate) type Store = Box<dyn Ledger + Send>;

/// The ledger `state` names: a `postgres://` URL, else a SQLite file.
pub fn open(state: &Path) -> Result<Store> {
    let s = state.to_string_lossy();
    if super::pg::is_url(&s) {
        Ok(Box::new(PgLedger::open(&s)?))
    } else {
        Ok(Box::new(SqliteLedger::open(state)?))
    }
}

/// Whether `state` names a shared ledger (a `postgres://` URL) rather than a SQLite file.
pub(crate) fn is_shared(state: &Path) -> bool {
    super::pg::is_url(&state.to_string_lossy())
}

/// The ledger at `state` as it stands, for a command that only reads: a shared PostgreSQL
/// ledger as it is, a SQLite one as a snapshot (no file created or changed); `None` when there
/// is no SQLite ledger yet.
pub(crate) fn open_snapshot(state: &Path) -> Result<Option<Store>> {
    if is_shared(state) {
        open(state).map(Some)
    } else {
        Ok(SqliteLedger::open_snapshot(state)?.map(|l| Box::new(l) as Store))
    }
}

/// The ledger at `state` for a command that reads and may write (cancel, pause, gc): a shared
/// one as it is, a SQLite file only where it exists (such commands never create one); `None`
/// when it does not.
pub(crate) fn open_existing(state: &Path) -> Result<Option<Store>> {
    if is_shared(state) {
        open(state).map(Some)
    } else if state.exists() {
        Ok(Some(Box::new(SqliteLedger::open(state)?)))
    } else {
        Ok(None)
    }
}

/// How long a lost connection to a shared ledger is tried again (`RUNNER_LEDGER_RETRY`).
pub(crate) fn set_retry(d: std::time::Duration) {
    super::pg::set_ledger_retry(d);
}

/// How long a run of a shared ledger may miss its heartbeat before its claims are taken over
/// (`RUNNER_HEARTBEAT_LAPSE`).
pub(crate) fn set_heartbeat_lapse(d: std::time::Duration) {
    super::pg::set_heartbeat_lapse(d);
}
