//! Item dependencies (`after`) over a plan: an item waits for the items it names to complete,
//! in this run or an earlier one. Decided last, once every other state is known: a dependency
//! that completed lets its dependents be; one pending in this plan makes them wait (the drain
//! admits them once it completes); one that halted, failed, or is held or skipped holds them
//! `blocked`, naming it — and their own dependents in turn. Pure: the plan in, the plan out.

use super::{ItemPlan, ItemState, Plan};
use crate::vocab::HoldReason;
use std::collections::HashMap;

/// Settle every item's dependencies. `completed` tells whether a `done` item's last outcome was
/// a completion (a halted item is `done` too until `--rerun failed`).
pub fn resolve(plan: &mut Plan, completed: impl Fn(&ItemPlan) -> bool) {
    if plan.items.iter().all(|it| it.after.is_empty()) {
        return;
    }
    let index = index(plan);
    for i in topological(plan, &index) {
        let mut waiting = Vec::new();
        let mut blocked: Option<String> = None;
        for dep in &plan.items[i].after {
            let Some(&d) = index.get(dep.as_str()) else {
                blocked.get_or_insert_with(|| format!("after `{dep}`, which is not in the plan"));
                continue;
            };
            let it = &plan.items[d];
            match it.state {
                ItemState::Done if completed(it) => {}
                ItemState::Pending => waiting.push(dep.clone()),
                _ => {
                    blocked.get_or_insert_with(|| format!("after `{dep}`, which {}", standing(it)));
                }
            }
        }
        let it = &mut plan.items[i];
        if it.state != ItemState::Pending {
            continue;
        }
        match blocked {
            Some(why) => {
                it.state = ItemState::Held;
                it.reason = Some(HoldReason::Blocked);
                it.detail = Some(why);
            }
            None => it.waiting_on = waiting,
        }
    }
    plan.recount();
}

/// Each pending item's pending dependencies, by item index: what the drain waits for.
pub(crate) fn pending_deps(plan: &Plan) -> Vec<Vec<usize>> {
    if plan.items.iter().all(|it| it.waiting_on.is_empty()) {
        return Vec::new();
    }
    let index = index(plan);
    plan.items
        .iter()
        .map(|it| {
            it.waiting_on
                .iter()
                .filter_map(|d| index.get(d.as_str()).copied())
                .collect()
        })
        .collect()
}

/// `repo/id` of every item of the plan, to its index.
fn index(plan: &Plan) -> HashMap<String, usize> {
    plan.items
        .iter()
        .enumerate()
        .map(|(i, it)| (format!("{}/{}", it.repo, it.id), i))
        .collect()
}

/// What a dependency that is neither completed nor pending is, in words.
fn standing(it: &ItemPlan) -> String {
    let why = |r: Option<HoldReason>| r.map_or(String::new(), |r| format!(" ({})", r.as_str()));
    match it.state {
        ItemState::Done => format!(
            "did not complete: {}",
            it.detail
                .as_deref()
                .unwrap_or("its last run did not complete it")
        ),
        ItemState::Held => format!("is held{}", why(it.reason)),
        ItemState::Skipped => format!("is skipped{}", why(it.reason)),
        ItemState::Pending => "is pending".into(),
    }
}

/// The items in an order where every item comes after those it names (validation rules out
/// cycles; an item caught in one anyway comes last, blocked by what it waits for).
fn topological(plan: &Plan, index: &HashMap<String, usize>) -> Vec<usize> {
    let n = plan.items.len();
    let mut needs = vec![0usize; n];
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, it) in plan.items.iter().enumerate() {
        for dep in &it.after {
            if let Some(&d) = index.get(dep.as_str()) {
                needs[i] += 1;
                dependents[d].push(i);
            }
        }
    }
    let mut order: Vec<usize> = (0..n).filter(|&i| needs[i] == 0).collect();
    let mut k = 0;
    while k < order.len() {
        let d = order[k];
        k += 1;
        for &i in &dependents[d] {
            needs[i] -= 1;
            if needs[i] == 0 {
                order.push(i);
            }
        }
    }
    if order.len() < n {
        let placed: std::collections::HashSet<usize> = order.iter().copied().collect();
        order.extend((0..n).filter(|i| !placed.contains(i)));
    }
    order
}
