//! What an item run again is told of its last try: the feedback file the previous run wrote
//! for an item that halted or failed, and a review round's comments and failing checks, handed
//! to the item's first attempt as `RUNNER_FEEDBACK`.

use super::keys::PlanKeys;
use crate::ledger::{ItemKey, Ledger, PastOutcome};
use crate::plan::{ItemState, Plan};
use crate::vocab::ItemOutcome;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A review round's first attempt is told what the review asks: the reviewers' comments and the
/// failing checks, in a file of the item's logs, as `RUNNER_FEEDBACK`.
pub(super) fn review(plan: &Plan, run_dir: &Path, feedback: &mut HashMap<usize, PathBuf>) {
    for (i, it) in plan.items.iter().enumerate() {
        let Some(pr) = &it.pull_request else {
            continue;
        };
        if it.state != ItemState::Pending || !pr.wants_a_round() {
            continue;
        }
        let dir = run_dir.join("logs").join(&it.repo).join(&it.id);
        let path = dir.join("0-review.md");
        let written = std::fs::create_dir_all(&dir)
            .and_then(|()| crate::support::fs::write_atomic(&path, pr.feedback().as_bytes()));
        if written.is_ok() {
            feedback.insert(i, path);
        }
    }
}

/// Items run again after a halt or failure: the previous run's last word on them, by item.
pub(super) fn previous(
    plan: &Plan,
    past: &HashMap<ItemKey, PastOutcome>,
    keys: &PlanKeys,
    ledger: &dyn Ledger,
) -> HashMap<usize, PathBuf> {
    let mut feedback = HashMap::new();
    for (i, it) in plan.items.iter().enumerate() {
        if it.state != ItemState::Pending {
            continue;
        }
        let Some(p) = keys.get(i).and_then(|k| past.get(&k)) else {
            continue;
        };
        if p.outcome == ItemOutcome::Completed {
            continue;
        }
        if let Ok(Some(dir)) = ledger.run_dir(&p.run_id)
            && let Some(f) = last_feedback(&PathBuf::from(dir), &it.repo, &it.id)
        {
            feedback.insert(i, f);
        }
    }
    feedback
}

/// The last feedback file an earlier run wrote for an item (`logs/<repo>/<item>/<n>-feedback.txt`
/// under its report folder).
fn last_feedback(run_dir: &Path, repo: &str, item: &str) -> Option<PathBuf> {
    let dir = run_dir.join("logs").join(repo).join(item);
    std::fs::read_dir(&dir)
        .ok()?
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let n: u32 = name.strip_suffix("-feedback.txt")?.parse().ok()?;
            Some((n, dir.join(name)))
        })
        .max_by_key(|(n, _)| *n)
        .map(|(_, p)| p)
}
