//! The keys of a run's items, kept compact: the plan holds each item's repository and id, so a
//! key is its definition's hash (16 bytes) until one is asked for.

use crate::plan::Plan;
use crate::plan::past;
use crate::vocab::{ItemKey, KeySet};
use std::sync::Arc;

#[derive(Debug)]
pub(crate) struct PlanKeys {
    manifest: String,
    plan: Arc<Plan>,
    defs: Vec<[u8; 16]>,
}

impl PlanKeys {
    /// The keys of `plan`'s items, as items of `manifest`.
    pub(crate) fn new(manifest: &str, plan: Arc<Plan>) -> PlanKeys {
        let defs = plan.items.iter().map(past::def_hash).collect();
        PlanKeys {
            manifest: manifest.to_string(),
            plan,
            defs,
        }
    }

    /// Item `i`'s key.
    pub(crate) fn get(&self, i: usize) -> Option<ItemKey> {
        let it = self.plan.items.get(i)?;
        Some(past::key_of(&self.manifest, it, self.defs.get(i)?))
    }

    pub(crate) fn manifest(&self) -> &str {
        &self.manifest
    }
}

impl KeySet for PlanKeys {
    fn is_empty(&self) -> bool {
        self.defs.is_empty()
    }

    fn each(&self, f: &mut dyn FnMut(ItemKey)) {
        for i in 0..self.defs.len() {
            if let Some(k) = self.get(i) {
                f(k);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{ItemPlan, Origin};

    #[test]
    fn a_compact_key_is_the_key_the_item_always_had() {
        let mut a = ItemPlan::new("r".into(), "a".into(), Origin::Explicit);
        a.branch = Some("runner/a".into());
        a.vars.insert("k".into(), "v".into());
        let b = ItemPlan::new("r".into(), "b".into(), Origin::Discovered);
        let plan = Arc::new(Plan::of_items(vec![a.clone(), b.clone()], 1));
        let keys = PlanKeys::new("m", plan);
        assert_eq!(keys.get(0), Some(past::item_key("m", &a)));
        assert_eq!(keys.get(1), Some(past::item_key("m", &b)));
        assert_eq!(keys.get(2), None);
        let mut all = Vec::new();
        keys.each(&mut |k| all.push(k));
        assert_eq!(all, [past::item_key("m", &a), past::item_key("m", &b)]);
        assert_eq!(all[0].def_hash.len(), 32);
    }
}
