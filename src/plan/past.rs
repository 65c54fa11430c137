//! What earlier runs left, folded into a plan: completed items are `done`, a paused manifest
//! holds everything.
//!
//! Shared by `plan` and `apply`, so `plan` shows exactly what `apply` would skip.

use super::{HoldReason, ItemPlan, ItemState, Plan};
use crate::vocab::ItemKey;
use crate::vocab::ItemOutcome;
use sha2::{Digest, Sha256};
use std::collections::HashMap;

/// What a previous run left for an item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PastOutcome {
    pub outcome: ItemOutcome,
    pub run_id: String,
}

/// Which finished items `apply` runs again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Rerun {
    /// Items that halted or failed in an earlier run.
    Failed,
    /// Every item, completed ones too.
    All,
    /// Items whose pull request was closed without merge.
    Rejected,
}

/// An item's identity in the ledger: its definition (repository, id, branch, vars) is hashed so
/// that an edited item is new work.
pub(crate) fn item_key(manifest: &str, it: &ItemPlan) -> ItemKey {
    key_of(manifest, it, &def_hash(it))
}

/// The hash of an item's definition, as its key carries it in hex.
pub(crate) fn def_hash(it: &ItemPlan) -> [u8; 16] {
    let def = serde_json::json!({
        "repo": it.repo,
        "id": it.id,
        "branch": it.branch,
        "vars": it.vars,
    });
    let hash = Sha256::digest(def.to_string().as_bytes());
    let mut out = [0; 16];
    out.copy_from_slice(&hash[..16]);
    out
}

/// The key of item `it` of `manifest`, its definition's hash `def` given.
pub(crate) fn key_of(manifest: &str, it: &ItemPlan, def: &[u8; 16]) -> ItemKey {
    ItemKey {
        manifest: manifest.to_string(),
        repo: it.repo.clone(),
        item: it.id.clone(),
        def_hash: crate::support::hex(def),
    }
}

/// Mark items done (or held as paused) from the ledger's history. An earlier outcome wins over
/// a hold: an item an earlier run finished is `done`, whatever its checkout looks like now.
pub fn apply(
    plan: &mut Plan,
    past: &HashMap<ItemKey, PastOutcome>,
    rerun: Option<Rerun>,
    paused: Option<&str>,
) {
    let manifest = plan.manifest.name.clone();
    for it in &mut plan.items {
        if !matches!(it.state, ItemState::Pending | ItemState::Held) {
            continue;
        }
        // A source that cannot be read holds every item it gave: what became of one is told,
        // but nothing is decided for it (no round, no write-back) until the source answers.
        if it.reason == Some(HoldReason::SourceUnreadable) {
            if let Some(p) = past.get(&item_key(&manifest, it)) {
                let last = format!(
                    "; its last outcome: {} in run `{}`",
                    p.outcome.as_str(),
                    p.run_id
                );
                it.detail.get_or_insert_with(String::new).push_str(&last);
            }
            continue;
        }
        if let Some(p) = past.get(&item_key(&manifest, it)) {
            let again = match p.outcome {
                ItemOutcome::Completed => rerun == Some(Rerun::All),
                _ => matches!(rerun, Some(Rerun::Failed | Rerun::All)),
            };
            if !again {
                it.state = ItemState::Done;
                it.reason = None;
                // Not run: its branch is neither continued nor replaced.
                if it.replaces.take().is_some() {
                    it.continues = Some(true);
                }
                it.detail = Some(match p.outcome {
                    ItemOutcome::Completed => format!("completed in run `{}`", p.run_id),
                    o => format!(
                        "{} in run `{}`; `--rerun failed` runs it again",
                        o.as_str(),
                        p.run_id
                    ),
                });
                continue;
            }
        }
        if it.state != ItemState::Pending {
            continue;
        }
        if let Some(why) = paused {
            it.state = ItemState::Held;
            it.reason = Some(HoldReason::Paused);
            it.detail = Some(why.to_string());
        }
    }
    plan.recount();
}

/// Hold every pending item `budget`: a spend cap is already spent (`why` says which, how much
/// and when it resets), so a run would start none of them.
pub fn budget_spent(plan: &mut Plan, why: &str) {
    for it in &mut plan.items {
        if it.state == ItemState::Pending {
            it.state = ItemState::Held;
            it.reason = Some(HoldReason::Budget);
            it.detail = Some(format!("not started: {why}"));
        }
    }
    plan.recount();
}

/// Skip the pending items another live run has claimed (`(item, run)` from the ledger): that
/// run is working on them.
pub fn taken(plan: &mut Plan, claims: &[(ItemKey, String)]) {
    if claims.is_empty() {
        return;
    }
    let manifest = plan.manifest.name.clone();
    for it in &mut plan.items {
        if it.state != ItemState::Pending {
            continue;
        }
        let key = item_key(&manifest, it);
        if let Some((_, run)) = claims.iter().find(|(k, _)| *k == key) {
            it.state = ItemState::Skipped;
            it.reason = Some(HoldReason::Taken);
            it.detail = Some(format!("claimed by live run `{run}`, which runs it"));
        }
    }
    plan.recount();
}

/// Hold the items of quarantined repositories (`(path, run, reason)` from the ledger).
pub fn quarantine(plan: &mut Plan, quarantined: &[(String, String, String)]) {
    if quarantined.is_empty() {
        return;
    }
    let held: HashMap<String, String> = plan
        .repositories
        .iter()
        .filter_map(|r| {
            let p = r.path.display().to_string();
            quarantined
                .iter()
                .find(|(q, _, _)| *q == p)
                .map(|(_, run, why)| {
                    (
                        r.name.clone(),
                        format!("{why} (run `{run}`); `runner unlock {p}` releases it"),
                    )
                })
        })
        .collect();
    for it in &mut plan.items {
        if it.state == ItemState::Pending
            && let Some(why) = held.get(&it.repo)
        {
            it.state = ItemState::Held;
            it.reason = Some(HoldReason::Quarantined);
            it.detail = Some(why.clone());
        }
    }
    plan.recount();
}
