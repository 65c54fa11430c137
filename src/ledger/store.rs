//! The ledger a command opened: SQLite (a file, the default) or PostgreSQL (`--state
//! postgres://…`), behind the operations `apply` needs of either.

use super::pg::PgLedger;
use super::sqlite::SqliteLedger;
use super::*;
use std::collections::HashMap;
use std::path::Path;

pub enum Store {
    Sqlite(SqliteLedger),
    Pg(PgLedger),
}

impl Store {
    /// The ledger `state` names: a `postgres://` URL, else a SQLite file.
    pub fn open(state: &Path) -> Result<Store> {
        let s = state.to_string_lossy();
        if super::pg::is_url(&s) {
            Ok(Store::Pg(PgLedger::open(&s)?))
        } else {
            Ok(Store::Sqlite(SqliteLedger::open(state)?))
        }
    }

    /// Whether several machines' runners share this ledger (PostgreSQL).
    pub fn is_shared(&self) -> bool {
        matches!(self, Store::Pg(_))
    }

    fn ledger(&self) -> &dyn Ledger {
        match self {
            Store::Sqlite(l) => l,
            Store::Pg(l) => l,
        }
    }

    fn ledger_mut(&mut self) -> &mut dyn Ledger {
        match self {
            Store::Sqlite(l) => l,
            Store::Pg(l) => l,
        }
    }

    /// The SQLite ledger, for what only it keeps.
    pub fn sqlite(&self) -> Option<&SqliteLedger> {
        match self {
            Store::Sqlite(l) => Some(l),
            Store::Pg(_) => None,
        }
    }

    pub fn sqlite_mut(&mut self) -> Option<&mut SqliteLedger> {
        match self {
            Store::Sqlite(l) => Some(l),
            Store::Pg(_) => None,
        }
    }

    pub fn run(&self, id: &str) -> Result<Option<RunRow>> {
        match self {
            Store::Sqlite(l) => l.run(id),
            Store::Pg(l) => l.run(id),
        }
    }

    /// Ask a run to stop, recording who asked and why.
    pub fn request_stop(
        &mut self,
        run_id: &str,
        by: &str,
        reason: Option<&str>,
        at: &str,
    ) -> Result<()> {
        match self {
            Store::Sqlite(l) => l.request_stop(run_id, by, reason, at),
            Store::Pg(l) => l.request_stop(run_id, by, reason, at),
        }
    }

    pub fn recent_runs(&self, manifest: Option<&str>, limit: usize) -> Result<Vec<RunRow>> {
        match self {
            Store::Sqlite(l) => l.recent_runs(manifest, limit),
            Store::Pg(l) => l.recent_runs(manifest, limit),
        }
    }

    pub fn verdict_key(&mut self) -> Result<String> {
        match self {
            Store::Sqlite(l) => l.verdict_key(),
            Store::Pg(l) => l.verdict_key(),
        }
    }

    pub fn claimed_by(&self, id: &str) -> Result<Vec<(String, String)>> {
        match self {
            Store::Sqlite(l) => l.claimed_by(id),
            Store::Pg(l) => l.claimed_by(id),
        }
    }

    pub fn counts_of(
        &self,
        id: &str,
    ) -> Result<std::collections::BTreeMap<crate::vocab::ItemOutcome, usize>> {
        match self {
            Store::Sqlite(l) => l.counts_of(id),
            Store::Pg(l) => l.counts_of(id),
        }
    }

    pub fn usage_of(&self, id: &str) -> Result<Option<crate::events::Usage>> {
        match self {
            Store::Sqlite(l) => l.usage_of(id),
            Store::Pg(l) => l.usage_of(id),
        }
    }

    pub fn resting_until(&self, run_id: &str, repo: &str, item: &str) -> Result<Option<String>> {
        match self {
            Store::Sqlite(l) => l.resting_until(run_id, repo, item),
            Store::Pg(l) => l.resting_until(run_id, repo, item),
        }
    }

    pub fn waiting_for_resource(
        &self,
        run_id: &str,
        repo: &str,
        item: &str,
    ) -> Result<Option<(String, String)>> {
        match self {
            Store::Sqlite(l) => l.waiting_for_resource(run_id, repo, item),
            Store::Pg(l) => l.waiting_for_resource(run_id, repo, item),
        }
    }

    pub fn held_items(&self, manifest: &str) -> Result<Vec<HeldItem>> {
        match self {
            Store::Sqlite(l) => l.held_items(manifest),
            Store::Pg(l) => l.held_items(manifest),
        }
    }

    pub fn live_claims(&self) -> Result<Vec<(String, String, String, Holder)>> {
        match self {
            Store::Sqlite(l) => l.live_claims(),
            Store::Pg(l) => l.live_claims(),
        }
    }

    pub fn run_events(&self, id: &str) -> Result<Option<RunReplay>> {
        match self {
            Store::Sqlite(l) => l.run_events(id),
            Store::Pg(l) => l.run_events(id),
        }
    }

    /// When retention pruned a run, if it did.
    pub fn pruned_at(&self, id: &str) -> Result<Option<String>> {
        match self {
            Store::Sqlite(l) => l.pruned_at(id),
            Store::Pg(l) => l.pruned_at(id),
        }
    }

    /// Retention over a manifest's history (see [`SqliteLedger::prune`]); on a shared ledger,
    /// over every machine's runs, with the folders that are this machine's to remove (then
    /// [`Store::forget`] those removed).
    pub fn prune(&mut self, ask: &Retention<'_>) -> Result<Pruned> {
        match self {
            Store::Sqlite(l) => l.prune(ask),
            Store::Pg(l) => l.prune(ask, &crate::support::host::hostname()),
        }
    }

    /// Pruned runs whose report folders are gone: a shared ledger kept their rows until now.
    pub fn forget(&mut self, ids: &[String]) -> Result<()> {
        match self {
            Store::Sqlite(_) => Ok(()),
            Store::Pg(l) => l.forget(ids),
        }
    }

    /// Where the ledger is, as it may be shown.
    pub fn shown(&self) -> String {
        match self {
            Store::Sqlite(l) => l.path().display().to_string(),
            Store::Pg(l) => l.url().to_string(),
        }
    }

    pub fn run_dir(&self, id: &str) -> Result<Option<String>> {
        match self {
            Store::Sqlite(l) => l.run_dir(id),
            Store::Pg(l) => l.run_dir(id),
        }
    }

    pub fn quarantines(&self) -> Result<Vec<(String, String, String)>> {
        match self {
            Store::Sqlite(l) => l.quarantines(),
            Store::Pg(l) => l.quarantines(),
        }
    }

    pub fn quarantine(&mut self, path: &str, run_id: &str, reason: &str, at: &str) -> Result<()> {
        match self {
            Store::Sqlite(l) => l.quarantine(path, run_id, reason, at),
            Store::Pg(l) => l.quarantine(path, run_id, reason, at),
        }
    }

    /// Lift a quarantine; whether there was one.
    pub fn release_quarantine(&mut self, path: &str) -> Result<bool> {
        match self {
            Store::Sqlite(l) => l.release_quarantine(path),
            Store::Pg(l) => l.release_quarantine(path),
        }
    }

    pub fn record_totals(&mut self, id: &str, totals: &RunTotals) -> Result<()> {
        match self {
            Store::Sqlite(l) => l.record_totals(id, totals),
            Store::Pg(l) => l.record_totals(id, totals),
        }
    }

    /// Everything buffered, durable now.
    pub fn flush_all(&mut self) -> Result<()> {
        match self {
            Store::Sqlite(l) => l.flush_all(),
            Store::Pg(l) => l.flush(),
        }
    }

    pub fn checkpoint(&mut self) -> Result<()> {
        match self {
            Store::Sqlite(l) => l.checkpoint(),
            Store::Pg(_) => Ok(()),
        }
    }

    pub fn item_durations(
        &self,
        manifest: &str,
        limit: usize,
    ) -> Result<HashMap<(String, String), Vec<u64>>> {
        match self {
            Store::Sqlite(l) => l.item_durations(manifest, limit),
            Store::Pg(l) => l.item_durations(manifest, limit),
        }
    }

    pub fn gate_durations(
        &self,
        manifest: &str,
        limit: usize,
    ) -> Result<HashMap<String, Vec<u64>>> {
        match self {
            Store::Sqlite(l) => l.gate_durations(manifest, limit),
            Store::Pg(l) => l.gate_durations(manifest, limit),
        }
    }

    pub fn publications_of(&self, manifest: &str) -> Result<Publications> {
        match self {
            Store::Sqlite(l) => l.publications_of(manifest),
            Store::Pg(l) => l.publications_of(manifest),
        }
    }

    /// Take a repository's lock across machines (PostgreSQL); always granted on one machine,
    /// where the lease in the repository is the lock.
    pub fn try_lock_repo(&self, identity: &str) -> Result<bool> {
        match self {
            Store::Sqlite(_) => Ok(true),
            Store::Pg(l) => l.try_lock_repo(identity),
        }
    }

    pub fn unlock_repo(&self, identity: &str) -> Result<()> {
        match self {
            Store::Sqlite(_) => Ok(()),
            Store::Pg(l) => l.unlock_repo(identity),
        }
    }
}

impl Ledger for Store {
    fn begin_run(
        &mut self,
        run: &RunRow,
        plan_json: &str,
        workers: u32,
        run_dir: &str,
    ) -> Result<()> {
        self.ledger_mut()
            .begin_run(run, plan_json, workers, run_dir)
    }

    fn end_run(
        &mut self,
        run_id: &str,
        ending: RunEnding,
        cause: Option<&str>,
        at: &str,
    ) -> Result<()> {
        self.ledger_mut().end_run(run_id, ending, cause, at)
    }

    fn past_outcomes(&self, manifest: &str) -> Result<Vec<(ItemKey, PastOutcome)>> {
        self.ledger().past_outcomes(manifest)
    }

    fn claim(&mut self, key: &ItemKey, run_id: &str, holder: &Holder) -> Result<Claim> {
        self.ledger_mut().claim(key, run_id, holder)
    }

    fn event(&mut self, run_id: &str, item: Option<&ItemKey>, ev: &Event, at: &str) -> Result<()> {
        self.ledger_mut().event(run_id, item, ev, at)
    }

    fn commit_results(&mut self) -> Result<()> {
        self.ledger_mut().commit_results()
    }

    fn paused(&self, manifest: &str) -> Result<Option<String>> {
        self.ledger().paused(manifest)
    }

    fn live_claims_of(&self, manifest: &str) -> Result<Vec<(ItemKey, String)>> {
        self.ledger().live_claims_of(manifest)
    }

    fn run_is_live(&self, run_id: &str) -> Result<bool> {
        self.ledger().run_is_live(run_id)
    }

    fn set_paused(
        &mut self,
        manifest: &str,
        by: &str,
        reason: Option<&str>,
        at: &str,
    ) -> Result<()> {
        self.ledger_mut().set_paused(manifest, by, reason, at)
    }

    fn clear_paused(&mut self, manifest: &str) -> Result<bool> {
        self.ledger_mut().clear_paused(manifest)
    }
}

impl History for Store {
    fn run_history(&self, manifest: &str, limit: usize) -> Result<Vec<RunHistory>> {
        match self {
            Store::Sqlite(l) => l.run_history(manifest, limit),
            Store::Pg(l) => l.run_history(manifest, limit),
        }
    }

    fn recent_item_results(
        &self,
        manifest: &str,
        limit: usize,
    ) -> Result<Vec<(String, String, String, ItemOutcome)>> {
        match self {
            Store::Sqlite(l) => l.recent_item_results(manifest, limit),
            Store::Pg(l) => l.recent_item_results(manifest, limit),
        }
    }
}
