//! Why an item would not run: a pure decision over facts gathered beforehand.
//!
//! Planning first asks the repository what it needs to know (is it there, is the checkout dirty,
//! which branches exist, which critical-base markers each continued branch lacks); then every
//! item's hold is decided here, with no I/O, in one fixed order: filtered, repository not found,
//! not yet cloned (pending: `apply` clones it), then for a branch item the critical base of a
//! continued branch, and for an in-place item the state of the checkout. Exactly one reason per
//! item, or none. A branch item's markers are checked on its branch when it exists, and on the
//! base it would be forked from when it does not.

use super::model::RepoStatus;
use crate::vocab::HoldReason;
use std::collections::{BTreeSet, HashMap};

/// What planning learnt about one repository.
#[derive(Clone, Debug, Default)]
pub struct RepoFacts {
    pub status: Option<RepoStatus>,
    /// Why the repository is not found, when it is not.
    pub note: Option<String>,
    /// Whether the checkout has uncommitted changes; `None` when that could not be told.
    pub dirty: Option<bool>,
    /// The local branches, when they were read.
    pub branches: Option<BTreeSet<String>>,
    /// For each existing branch that was checked: the markers it lacks, or `None` when it
    /// contains them all.
    pub stale: HashMap<String, Option<String>>,
    /// The markers the base lacks, from which new branches are forked (`Some(None)`: none);
    /// `None` when it was not checked.
    pub base_stale: Option<Option<String>>,
}

/// The decision for one item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    pub reason: Option<HoldReason>,
    pub detail: Option<String>,
    /// For a branch item in a found repository: whether its branch exists already.
    pub continues: Option<bool>,
}

const DIRTY: &str =
    "the checkout has uncommitted changes; give the item a `branch` to work in a worktree";
const DIRTY_UNKNOWN: &str = "cannot tell whether the checkout has uncommitted changes";

/// Whether the item's branch exists and must be checked against the markers: what planning
/// asks git before calling [`hold`].
pub(crate) fn needs_marker_check(repo: &RepoFacts, selected: bool, branch: Option<&str>) -> bool {
    selected
        && repo.status == Some(RepoStatus::Found)
        && branch.is_some_and(|b| repo.branches.as_ref().is_some_and(|s| s.contains(b)))
}

/// Whether the item's branch is new, so that the base it would be forked from must be checked
/// against the markers: what planning asks git before calling [`hold`].
pub(crate) fn needs_base_check(repo: &RepoFacts, selected: bool, branch: Option<&str>) -> bool {
    selected
        && repo.status == Some(RepoStatus::Found)
        && branch.is_some_and(|b| !repo.branches.as_ref().is_some_and(|s| s.contains(b)))
}

/// Decide an item's hold. `selected`: the item passes `--only` and `--items`.
pub fn hold(repo: &RepoFacts, selected: bool, branch: Option<&str>) -> Hold {
    let held = |r: HoldReason, detail: Option<String>| Hold {
        reason: Some(r),
        detail,
        continues: None,
    };
    let free = Hold {
        reason: None,
        detail: None,
        continues: None,
    };
    if !selected {
        return held(HoldReason::Filtered, None);
    }
    match repo.status {
        Some(RepoStatus::Found) => {}
        Some(RepoStatus::NotFound) | None => {
            return held(HoldReason::RepoNotFound, repo.note.clone());
        }
        Some(RepoStatus::ToClone) => return free,
    }
    match branch {
        Some(b) => {
            let exists = repo.branches.as_ref().is_some_and(|s| s.contains(b));
            // A branch, continued or new, never checked is held: fail closed.
            let stale = if exists {
                repo.stale
                    .get(b)
                    .cloned()
                    .unwrap_or_else(|| Some(format!("branch `{b}` was not checked")))
            } else {
                repo.base_stale.clone().unwrap_or_else(|| {
                    Some(format!("the base of new branch `{b}` was not checked"))
                })
            };
            Hold {
                reason: stale.is_some().then_some(HoldReason::StaleBase),
                detail: stale,
                continues: Some(exists),
            }
        }
        None => match repo.dirty {
            Some(false) => free,
            Some(true) => held(HoldReason::DirtyTree, Some(DIRTY.into())),
            None => held(HoldReason::DirtyTree, Some(DIRTY_UNKNOWN.into())),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn found() -> RepoFacts {
        RepoFacts {
            status: Some(RepoStatus::Found),
            dirty: Some(false),
            branches: Some(["old".to_string()].into()),
            base_stale: Some(None),
            ..RepoFacts::default()
        }
    }

    #[test]
    fn a_continued_branch_lacking_a_marker_is_stale() {
        let mut r = found();
        r.stale
            .insert("old".into(), Some("branch `old` lacks `v2`".into()));
        let h = hold(&r, true, Some("old"));
        assert_eq!(h.reason, Some(HoldReason::StaleBase));
        assert_eq!(h.detail.as_deref(), Some("branch `old` lacks `v2`"));
        assert_eq!(h.continues, Some(true));
        let new = hold(&r, true, Some("new"));
        assert_eq!((new.reason, new.continues), (None, Some(false)));
    }

    #[test]
    fn an_unknown_checkout_state_holds_in_place_items() {
        let mut r = found();
        r.dirty = None;
        assert_eq!(hold(&r, true, None).reason, Some(HoldReason::DirtyTree));
        // A branch item runs in a worktree: the checkout's state does not matter.
        assert_eq!(hold(&r, true, Some("new")).reason, None);
    }

    fn status() -> impl Strategy<Value = Option<RepoStatus>> {
        prop_oneof![
            Just(None),
            Just(Some(RepoStatus::Found)),
            Just(Some(RepoStatus::NotFound)),
            Just(Some(RepoStatus::ToClone)),
        ]
    }

    proptest! {
        /// Against the order `docs/commands.md` documents (`plan`), written as plainly as it can be.
        #[test]
        fn one_reason_in_the_documented_order(
            st in status(),
            dirty in proptest::option::of(any::<bool>()),
            exists in any::<bool>(),
            checked in any::<bool>(),
            lacks in any::<bool>(),
            base_checked in any::<bool>(),
            base_lacks in any::<bool>(),
            selected in any::<bool>(),
            branch_item in any::<bool>(),
        ) {
            let mut r = RepoFacts { status: st, dirty, ..RepoFacts::default() };
            r.branches = Some(if exists { ["b".to_string()].into() } else { BTreeSet::new() });
            if checked {
                r.stale.insert("b".into(), lacks.then(|| "lacks".to_string()));
            }
            if base_checked {
                r.base_stale = Some(base_lacks.then(|| "base lacks".to_string()));
            }
            let branch = branch_item.then_some("b");
            let want = if !selected {
                Some(HoldReason::Filtered)
            } else if st != Some(RepoStatus::Found) && st != Some(RepoStatus::ToClone) {
                Some(HoldReason::RepoNotFound)
            } else if st == Some(RepoStatus::ToClone) {
                None
            } else if branch_item && exists {
                (!checked || lacks).then_some(HoldReason::StaleBase)
            } else if branch_item {
                (!base_checked || base_lacks).then_some(HoldReason::StaleBase)
            } else {
                (dirty != Some(false)).then_some(HoldReason::DirtyTree)
            };
            let h = hold(&r, selected, branch);
            prop_assert_eq!(h.reason, want);
            prop_assert_eq!(h.reason.is_some(), h.detail.is_some() || h.reason == Some(HoldReason::Filtered) || (h.reason == Some(HoldReason::RepoNotFound)));
            prop_assert_eq!(
                needs_marker_check(&r, selected, branch),
                selected && st == Some(RepoStatus::Found) && branch_item && exists
            );
            prop_assert_eq!(
                needs_base_check(&r, selected, branch),
                selected && st == Some(RepoStatus::Found) && branch_item && !exists
            );
        }
    }
}
