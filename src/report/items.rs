//! The run's items as a report holds them. An item the run has not touched reads as its plan
//! entry; one in flight is in memory; one that has ended is written to a spill file (its JSON
//! record, in a file without a name that goes when the process does) and read back whenever a
//! format renders it. A run of 100,000 items so holds the items in flight and 16 bytes for each
//! of the others, never every record at once.

use super::item::ItemReport;
use crate::plan::{HoldReason, ItemPlan, ItemState, Plan};
use crate::vocab::ItemOutcome;
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// How many bytes of spilled records a report brings back into memory before it is rendered
/// ([`Items::read_back`]): some 2,000 records of short items, a few hundred with long output.
pub(crate) const READ_BACK_BUDGET: u64 = 1 << 20;

/// Where an item's record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kept {
    /// Untouched: its plan entry says it all.
    Plan,
    /// In memory (in flight, or where no spill file could be had).
    Memory,
    /// In the spill file, `len` bytes at `at`.
    Spilled,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    at: u64,
    len: u32,
    outcome: ItemOutcome,
    kept: Kept,
}

/// The spill file: records appended, read back at their offsets.
struct Spill {
    file: File,
    end: u64,
}

/// How items that never ended read once the run is known not to have recorded an ending (see
/// [`Items::mark_unended`]).
struct Unended {
    died: bool,
    claimed: HashSet<(String, String)>,
}

/// The items of a report, in the plan's order.
#[derive(Default)]
pub struct Items {
    plan: Option<Arc<Plan>>,
    slots: Vec<Slot>,
    memory: HashMap<usize, ItemReport>,
    spill: Option<Spill>,
    /// Where the spill file is made (the run's report folder), when it is not made yet.
    spill_dir: Option<PathBuf>,
    /// Ended items stay in memory: no spill file could be made, or the records were read back
    /// for rendering ([`Items::read_back`]).
    no_spill: bool,
    unended: Option<Unended>,
    /// An item that went to the spill file had started.
    spilled_started: bool,
    /// The first record that could not be read back: the report is not whole.
    read_error: OnceLock<String>,
}

/// What a plan entry reports as before the run touches it: items that will not run with their
/// plan state, pending ones `cancelled` until the run says otherwise (a run that dies early then
/// reports the truth: they did not run).
fn outcome_of(it: &ItemPlan) -> (ItemOutcome, Option<String>) {
    match (it.state, it.reason) {
        (ItemState::Pending, _) => (ItemOutcome::Cancelled, None),
        (ItemState::Done, _) => (ItemOutcome::Skipped, Some("done".to_string())),
        (ItemState::Skipped, r) => (ItemOutcome::Skipped, r.map(|r| r.as_str().to_string())),
        (ItemState::Held, r) => (
            ItemOutcome::Held,
            Some(r.unwrap_or(HoldReason::RepoBusy).as_str().to_string()),
        ),
    }
}

/// An item's record as its plan entry gives it.
fn planned(it: &ItemPlan) -> ItemReport {
    let (outcome, reason) = outcome_of(it);
    ItemReport {
        reason,
        cause: it.detail.clone(),
        branch: it.branch.clone(),
        pull_request: it.pull_request.clone(),
        ..blank(it.repo.clone(), it.id.clone(), outcome)
    }
}

/// A record with nothing in it but its name and outcome.
fn blank(repo: String, id: String, outcome: ItemOutcome) -> ItemReport {
    ItemReport {
        repo,
        id,
        outcome,
        reason: None,
        cause: None,
        model: None,
        branch: None,
        started_at: None,
        ended_at: None,
        attempts: Vec::new(),
        commit: None,
        diffstat: None,
        marks: Vec::new(),
        uncommitted: Vec::new(),
        worktree: None,
        shared: Vec::new(),
        setup: None,
        backup_branch: None,
        leftovers: None,
        publish: None,
        pull_request: None,
        waited: None,
        usage: None,
        denied: Vec::new(),
    }
}

impl Unended {
    /// An item that never finished is not `cancelled` — nothing cancelled it — but was running,
    /// or not yet started, when the run died (`died`) or is so now (a live run).
    fn mark(&self, it: &mut ItemReport) {
        if it.outcome != ItemOutcome::Cancelled || it.ended_at.is_some() {
            return;
        }
        let started =
            it.started_at.is_some() || self.claimed.contains(&(it.repo.clone(), it.id.clone()));
        it.reason = Some(if self.died { "run-died" } else { "in-progress" }.to_string());
        it.cause = Some(
            match (self.died, started) {
                (true, true) => "in flight when the run died: its result was never recorded",
                (true, false) => "not started: the run died first",
                (false, true) => "running",
                (false, false) => "not started yet",
            }
            .to_string(),
        );
    }
}

impl Items {
    /// The items of `plan`, each as its plan entry until the run touches it; ended ones are
    /// spilled into a file without a name in `spill_dir` (or the temporary folder).
    pub(crate) fn of_plan(plan: Arc<Plan>, spill_dir: &Path) -> Items {
        let slots = plan
            .items
            .iter()
            .map(|it| Slot {
                at: 0,
                len: 0,
                outcome: outcome_of(it).0,
                kept: Kept::Plan,
            })
            .collect();
        Items {
            plan: Some(plan),
            slots,
            spill_dir: Some(spill_dir.to_path_buf()),
            ..Items::default()
        }
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Item `i`'s outcome, without reading its record.
    pub fn outcome(&self, i: usize) -> Option<ItemOutcome> {
        self.slots.get(i).map(|s| s.outcome)
    }

    /// Item `i`'s repository and id, without reading its record.
    pub fn name(&self, i: usize) -> Option<(&str, &str)> {
        if let Some(it) = self.plan.as_ref().and_then(|p| p.items.get(i)) {
            return Some((&it.repo, &it.id));
        }
        self.memory
            .get(&i)
            .map(|it| (it.repo.as_str(), it.id.as_str()))
    }

    /// The first record that could not be read back from the spill file, when one could not:
    /// what was rendered in its place names the error.
    pub fn read_error(&self) -> Option<&str> {
        self.read_error.get().map(String::as_str)
    }

    /// Item `i`'s record.
    pub fn get(&self, i: usize) -> Option<Cow<'_, ItemReport>> {
        let slot = self.slots.get(i)?;
        Some(match slot.kept {
            Kept::Memory => Cow::Borrowed(self.memory.get(&i)?),
            Kept::Plan => {
                let mut it = planned(self.plan.as_ref()?.items.get(i)?);
                if let Some(u) = &self.unended {
                    u.mark(&mut it);
                }
                Cow::Owned(it)
            }
            Kept::Spilled => Cow::Owned(self.read(i, slot)),
        })
    }

    fn read(&self, i: usize, slot: &Slot) -> ItemReport {
        let read = || -> Result<ItemReport, String> {
            let spill = self.spill.as_ref().ok_or("no spill file")?;
            let mut buf = vec![0; slot.len as usize];
            spill
                .file
                .read_exact_at(&mut buf, slot.at)
                .map_err(|e| e.to_string())?;
            serde_json::from_slice(&buf).map_err(|e| e.to_string())
        };
        read().unwrap_or_else(|e| {
            let _ = self.read_error.set(format!(
                "the record of item {i} could not be read back from the report's spill file: {e}"
            ));
            let mut it = match self.plan.as_ref().and_then(|p| p.items.get(i)) {
                Some(p) => planned(p),
                None => blank(String::new(), String::new(), slot.outcome),
            };
            it.outcome = slot.outcome;
            it.cause = Some(format!("its record could not be read back: {e}"));
            it
        })
    }

    /// Item `i`'s record to change: brought into memory (from its plan entry or the spill file)
    /// until [`Items::settle`] puts it away again.
    pub fn get_mut(&mut self, i: usize) -> Option<&mut ItemReport> {
        let slot = *self.slots.get(i)?;
        if slot.kept != Kept::Memory {
            let it = self.get(i)?.into_owned();
            self.memory.insert(i, it);
            self.slots[i].kept = Kept::Memory;
        }
        self.memory.get_mut(&i)
    }

    /// Every item, in the plan's order.
    pub fn iter(&self) -> impl Iterator<Item = Cow<'_, ItemReport>> {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// The items whose outcome `keep` accepts, with their index: the others are not read.
    pub fn iter_where(
        &self,
        keep: impl Fn(ItemOutcome) -> bool,
    ) -> impl Iterator<Item = (usize, Cow<'_, ItemReport>)> {
        (0..self.len())
            .filter(move |i| keep(self.slots[*i].outcome))
            .filter_map(|i| Some((i, self.get(i)?)))
    }

    /// Whether any item's outcome is one `what` accepts.
    pub fn any_outcome(&self, what: impl Fn(ItemOutcome) -> bool) -> bool {
        self.slots.iter().any(|s| what(s.outcome))
    }

    /// Whether any item started in the run.
    pub fn any_started(&self) -> bool {
        self.spilled_started || self.memory.values().any(|it| it.started_at.is_some())
    }

    /// After a change: every item in memory has its outcome noted, and those that have ended go
    /// to the spill file (where one can be had; otherwise they stay).
    pub fn settle(&mut self) {
        if self.memory.is_empty() {
            return;
        }
        let ended: Vec<usize> = self
            .memory
            .iter()
            .map(|(i, it)| {
                self.slots[*i].outcome = it.outcome;
                *i
            })
            .filter(|i| self.memory[i].ended_at.is_some())
            .collect();
        for i in ended {
            self.put_away(i);
        }
    }

    fn put_away(&mut self, i: usize) {
        if self.no_spill {
            return;
        }
        if self.spill.is_none() {
            let made = self
                .spill_dir
                .as_deref()
                .map_or_else(tempfile::tempfile, tempfile::tempfile_in)
                .or_else(|_| tempfile::tempfile());
            match made {
                Ok(file) => self.spill = Some(Spill { file, end: 0 }),
                Err(_) => {
                    self.no_spill = true;
                    return;
                }
            }
        }
        let (Some(spill), Some(it)) = (self.spill.as_mut(), self.memory.get(&i)) else {
            return;
        };
        let Ok(bytes) = serde_json::to_vec(it) else {
            return;
        };
        let Ok(len) = u32::try_from(bytes.len()) else {
            return;
        };
        if spill.file.write_all_at(&bytes, spill.end).is_err() {
            // A full disk: this item stays in memory, and so do the rest.
            self.no_spill = true;
            return;
        }
        self.slots[i] = Slot {
            at: spill.end,
            len,
            outcome: it.outcome,
            kept: Kept::Spilled,
        };
        spill.end += u64::from(len);
        self.spilled_started |= it.started_at.is_some();
        self.memory.remove(&i);
    }

    /// Every spilled record back in memory, read and parsed once, when the spill file holds at
    /// most `budget` bytes; items are not spilled after it. A report is rendered in several passes
    /// over its items (each format, the counts, the annotations), each of which would otherwise
    /// read and parse every record again: for a run of 2,000 short items, a tenth of its wall
    /// time, spent after its last item ended. A record that does not parse stays spilled, to be
    /// named when it is read.
    pub fn read_back(&mut self, budget: u64) {
        let Some(spill) = &self.spill else {
            return;
        };
        let Ok(len) = usize::try_from(spill.end) else {
            return;
        };
        if spill.end > budget {
            return;
        }
        let mut all = vec![0; len];
        if spill.file.read_exact_at(&mut all, 0).is_err() {
            return;
        }
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if slot.kept != Kept::Spilled {
                continue;
            }
            let Some(bytes) = usize::try_from(slot.at)
                .ok()
                .and_then(|at| all.get(at..at + slot.len as usize))
            else {
                continue;
            };
            if let Ok(it) = serde_json::from_slice::<ItemReport>(bytes) {
                self.memory.insert(i, it);
                slot.kept = Kept::Memory;
            }
        }
        self.no_spill = true;
    }

    /// The run recorded no ending: items that never finished read as running or not started
    /// (`died`: as left by a dead run). `claimed` names the items (repository, id) the run held
    /// claims on: those it had started.
    pub fn mark_unended(&mut self, died: bool, claimed: &[(String, String)]) {
        let u = Unended {
            died,
            claimed: claimed.iter().cloned().collect(),
        };
        for it in self.memory.values_mut() {
            u.mark(it);
        }
        self.unended = Some(u);
    }
}

impl std::fmt::Debug for Items {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Items")
            .field("len", &self.len())
            .field("in_memory", &self.memory.len())
            .finish()
    }
}

impl serde::Serialize for Items {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = s.serialize_seq(Some(self.len()))?;
        for it in self.iter() {
            seq.serialize_element(&*it)?;
        }
        seq.end()
    }
}

/// In the schema, the items are the array they are written as.
impl schemars::JsonSchema for Items {
    fn inline_schema() -> bool {
        <Vec<ItemReport>>::inline_schema()
    }

    fn schema_name() -> Cow<'static, str> {
        <Vec<ItemReport>>::schema_name()
    }

    fn schema_id() -> Cow<'static, str> {
        <Vec<ItemReport>>::schema_id()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        <Vec<ItemReport>>::json_schema(generator)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Origin;
    use crate::report::{AttemptReport, GateReport, WorkerReport};
    use crate::vocab::{GateResult, WorkerClass};

    fn plan(n: usize) -> Arc<Plan> {
        let items = (0..n)
            .map(|i| {
                let mut it =
                    ItemPlan::new(format!("r{}", i % 3), format!("t{i}"), Origin::Explicit);
                it.branch = Some(format!("runner/t{i}"));
                it
            })
            .collect();
        Arc::new(Plan::of_items(items, 2))
    }

    /// A record with every field that can be absent present.
    fn full(it: &mut ItemReport) {
        it.outcome = ItemOutcome::Halted;
        it.reason = Some("gate-failed".into());
        it.cause = Some("gate `test` failed: \"quoted\"\nand a second line ✓".into());
        it.model = Some("opus".into());
        it.started_at = Some("2026-12-03T10:00:00Z".into());
        it.ended_at = Some("2026-12-03T10:01:00Z".into());
        it.commit = Some("0123abcd".into());
        it.diffstat = Some(Box::new(crate::report::Diffstat {
            files: 1,
            insertions: 2,
            deletions: 3,
        }));
        it.marks = vec!["unverified".into()];
        it.uncommitted = vec!["a.txt".into()];
        it.worktree = Some("/w/t".into());
        it.shared = vec!["node_modules".into()];
        it.backup_branch = Some("runner/t-backup".into());
        it.leftovers = Some("leftovers/t.patch".into());
        it.waited = Some(Box::default());
        it.attempts = vec![AttemptReport {
            n: 1,
            model: Some("opus".into()),
            model_used: Some("sonnet".into()),
            waited_ms: Some(5),
            slot_wait_ms: Some(6),
            started_at: "2026-12-03T10:00:01Z".into(),
            worker: Some(WorkerReport {
                exit: Some(0),
                class: WorkerClass::Ok,
                duration_ms: 7,
                log: Some("logs/w.log".into()),
                log_error: Some("disk full".into()),
                unlogged_bytes: Some(9),
                output_tail: "tail".into(),
                ended: Some("silence".into()),
            }),
            gates: vec![GateReport {
                name: "test".into(),
                result: GateResult::Failed,
                reason: Some("exit 1".into()),
                duration_ms: 8,
                output_tail: "FAIL".into(),
                log: None,
                log_error: None,
                unlogged_bytes: None,
                exit: Some(1),
                required: false,
                cached: None,
                forgiven: false,
                failures: None,
                baseline: None,
            }],
        }];
    }

    #[test]
    fn an_ended_item_leaves_memory_and_reads_back_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let mut items = Items::of_plan(plan(5), dir.path());
        full(items.get_mut(1).unwrap());
        let before = serde_json::to_string(&*items.get(1).unwrap()).unwrap();
        items.settle();
        assert!(items.memory.is_empty(), "an ended item stays in memory");
        assert_eq!(items.slots[1].kept, Kept::Spilled);
        assert_eq!(
            serde_json::to_string(&*items.get(1).unwrap()).unwrap(),
            before
        );
        assert_eq!(items.outcome(1), Some(ItemOutcome::Halted));
        assert!(items.any_started());
        // An untouched item is its plan entry; one in flight stays in memory.
        assert_eq!(items.get(0).unwrap().outcome, ItemOutcome::Cancelled);
        assert_eq!(items.get(0).unwrap().branch.as_deref(), Some("runner/t0"));
        items.get_mut(2).unwrap().started_at = Some("2026-12-03T10:02:00Z".into());
        items.settle();
        assert_eq!(items.slots[2].kept, Kept::Memory);
        // A change after the end (its publication) brings it back, and it goes again.
        items.get_mut(1).unwrap().commit = Some("fedc".into());
        items.settle();
        assert_eq!(items.slots[1].kept, Kept::Spilled);
        assert_eq!(items.get(1).unwrap().commit.as_deref(), Some("fedc"));
        assert_eq!(items.read_error(), None);
        let halted: Vec<usize> = items
            .iter_where(|o| o == ItemOutcome::Halted)
            .map(|(i, _)| i)
            .collect();
        assert_eq!(halted, [1]);
        // Serialised, the items are the array they always were, in the plan's order.
        let all: Vec<serde_json::Value> =
            serde_json::from_str(&serde_json::to_string(&items).unwrap()).unwrap();
        let ids: Vec<&str> = all.iter().map(|v| v["id"].as_str().unwrap()).collect();
        assert_eq!(ids, ["t0", "t1", "t2", "t3", "t4"]);
    }

    #[test]
    fn a_small_runs_records_are_read_back_once_and_read_as_they_were() {
        let dir = tempfile::tempdir().unwrap();
        let mut items = Items::of_plan(plan(4), dir.path());
        full(items.get_mut(1).unwrap());
        full(items.get_mut(3).unwrap());
        items.get_mut(3).unwrap().id = "t3".into();
        items.settle();
        let before = serde_json::to_string(&items).unwrap();
        // Past the budget, nothing is read back.
        items.read_back(10);
        assert_eq!(items.slots[1].kept, Kept::Spilled);
        items.read_back(READ_BACK_BUDGET);
        assert_eq!(items.slots[1].kept, Kept::Memory);
        assert_eq!(items.slots[3].kept, Kept::Memory);
        assert_eq!(items.slots[0].kept, Kept::Plan);
        assert_eq!(serde_json::to_string(&items).unwrap(), before);
        assert_eq!(items.read_error(), None);
        // A change after it stays in memory: nothing is spilled again.
        items.get_mut(1).unwrap().commit = Some("fedc".into());
        items.settle();
        assert_eq!(items.slots[1].kept, Kept::Memory);
        assert_eq!(items.get(1).unwrap().commit.as_deref(), Some("fedc"));
    }

    #[test]
    fn items_a_dead_run_never_ended_read_as_such() {
        let dir = tempfile::tempdir().unwrap();
        let mut items = Items::of_plan(plan(3), dir.path());
        items.get_mut(0).unwrap().started_at = Some("2026-12-03T10:00:00Z".into());
        items.mark_unended(true, &[("r1".into(), "t1".into())]);
        let cause = |i| items.get(i).unwrap().cause.clone().unwrap();
        assert_eq!(
            cause(0),
            "in flight when the run died: its result was never recorded"
        );
        assert_eq!(
            cause(1),
            "in flight when the run died: its result was never recorded"
        );
        assert_eq!(cause(2), "not started: the run died first");
        assert_eq!(items.get(2).unwrap().reason.as_deref(), Some("run-died"));
    }

    #[test]
    fn a_record_that_cannot_be_read_back_is_named_not_lost_silently() {
        let dir = tempfile::tempdir().unwrap();
        let mut items = Items::of_plan(plan(2), dir.path());
        full(items.get_mut(0).unwrap());
        items.settle();
        // The spill file is cut short under the report (as a disk error would).
        items.spill.as_ref().unwrap().file.set_len(3).unwrap();
        items.read_back(READ_BACK_BUDGET);
        let it = items.get(0).unwrap();
        assert_eq!(it.outcome, ItemOutcome::Halted);
        assert!(
            it.cause
                .as_deref()
                .unwrap()
                .contains("could not be read back")
        );
        assert!(items.read_error().unwrap().contains("item 0"));
    }
}
