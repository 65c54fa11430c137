//! The plan as data: what `plan --json` prints and `apply` performs — repositories with their
//! state, items with theirs, the capacity, and a digest of the manifest and the heads it saw.

use crate::manifest::{ManifestError, SourceKind};
use crate::vocab::{HoldReason, ItemState};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::PathBuf;

pub(crate) const PLAN_SCHEMA: &str = "runner.plan/v1";

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Plan {
    pub schema: String,
    pub manifest: ManifestRef,
    /// SHA-256 over the manifest, the repositories' heads and every item's state: two plans with
    /// the same digest describe the same work.
    pub digest: String,
    pub capacity: CapacityPlan,
    pub repositories: Vec<RepoPlan>,
    /// In admission order.
    pub items: Vec<ItemPlan>,
    pub counts: BTreeMap<ItemState, usize>,
    /// What the user should hear though nothing is wrong enough to stop: a rule that matches
    /// nothing, a folder that could not be read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Declared repositories that are not there (and not `optional`), among those selected: a
    /// typo'd path or a vanished checkout is a failure of the run, never silent success.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing_repositories: Vec<MissingRepository>,
    /// Trackers (`sources`) that could not be read: never "nothing to do"; the run exits 1.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreadable_sources: Vec<UnreadableSource>,
    /// With history: when the drain is expected to end, and the earliest any drain could.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<Expected>,
}

/// A declared repository that is not there.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct MissingRepository {
    pub name: String,
    /// Why: the folder does not exist, is not a git checkout, no `glob` entry produced it.
    pub detail: String,
}

/// A tracker source that could not be read, and why.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct UnreadableSource {
    pub name: String,
    pub detail: String,
    /// The items it gave the last time it was read, now held `source-unreadable`.
    pub held: usize,
}

/// The drain simulated with the estimates.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct Expected {
    pub makespan_ms: u64,
    /// max(total work / workers, the longest repository's total).
    pub lower_bound_ms: u64,
}

impl Plan {
    /// A plan of `items` in manifest `m` (`m.yaml`), for tests of what reads plans.
    #[cfg(test)]
    pub(crate) fn of_items(items: Vec<ItemPlan>, workers: u32) -> Plan {
        Plan {
            schema: "runner.plan/v1".into(),
            manifest: ManifestRef {
                name: "m".into(),
                path: "m.yaml".into(),
                sha256: String::new(),
            },
            digest: String::new(),
            capacity: CapacityPlan {
                workers,
                probe: false,
            },
            repositories: Vec::new(),
            items,
            counts: Default::default(),
            warnings: Vec::new(),
            missing_repositories: Vec::new(),
            unreadable_sources: Vec::new(),
            expected: None,
        }
    }

    /// Each item's estimate by index, for the scheduler (1 each without history: the order then
    /// follows item counts).
    pub fn estimates(&self) -> Vec<u64> {
        self.items
            .iter()
            .map(|it| it.estimate_ms.unwrap_or(1).max(1))
            .collect()
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ManifestRef {
    pub name: String,
    pub path: PathBuf,
    pub sha256: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CapacityPlan {
    pub workers: u32,
    pub probe: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RepoStatus {
    /// A git checkout on disk.
    Found,
    /// Missing, or not a git checkout.
    NotFound,
    /// A `url` repository that `apply` will clone.
    ToClone,
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RepoPlan {
    pub name: String,
    /// Index of its `repositories` entry.
    pub entry: usize,
    pub source: SourceKind,
    pub location: String,
    pub path: PathBuf,
    pub status: RepoStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
    /// Base for new work branches: the manifest's `base`, else the branch HEAD is on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub common_dir: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dirty: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Declared `optional`: when it is missing, its items are skipped without failing the run.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Origin {
    Explicit,
    Discovered,
    /// Read from a tracker (`sources`).
    Source,
}

#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ItemPlan {
    pub repo: String,
    pub id: String,
    pub origin: Origin,
    pub state: ItemState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<HoldReason>,
    /// Human detail for the reason (missing markers, git errors).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// Whether the work branch exists already (a continuation).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub continues: Option<bool>,
    /// For a continued branch: how many commits of the base it lacks (what a rerun that
    /// continues it will not see).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub behind: Option<u64>,
    /// With `--fresh`: the item starts again from the base, and its existing branch is kept
    /// under this name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub vars: BTreeMap<String, String>,
    /// For discovered items, the matched file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub matched: Option<String>,
    /// For items of a tracker, the source and the tracker's item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Box<super::tracked::SourceRef>>,
    /// The pull request an earlier run opened for it, as its forge tells it now
    /// (`publish.state`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_request: Option<Box<super::pr::PullRequest>>,
    /// The items it waits for (`after`), as `repo/id`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
    /// Those of `after` not completed yet and pending in this plan: a pending item waits for
    /// them to complete in this run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting_on: Vec<String>,
    /// A pending item's place in the expected admission order (1 = first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<usize>,
    /// What a pending item is expected to take (worker and gates), from its recent runs, else its
    /// repository's, else the manifest's; absent without history.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate_ms: Option<u64>,
}

impl ItemPlan {
    /// A pending item of `repo` with id `id`, nothing yet known of its branch, history or
    /// estimate.
    pub(crate) fn new(repo: String, id: String, origin: Origin) -> ItemPlan {
        ItemPlan {
            repo,
            id,
            origin,
            state: ItemState::Pending,
            reason: None,
            detail: None,
            branch: None,
            continues: None,
            behind: None,
            replaces: None,
            vars: BTreeMap::new(),
            matched: None,
            source: None,
            pull_request: None,
            after: Vec::new(),
            waiting_on: Vec::new(),
            start: None,
            estimate_ms: None,
        }
    }
}

/// Narrowing given on the command line.
#[derive(Clone, Debug, Default)]
pub struct PlanOptions {
    /// Globs over repository names (`--only`).
    pub only: Vec<String>,
    /// Globs over item ids (`--items`).
    pub items: Vec<String>,
    /// Only the repositories of this shard (`--shard K/N`).
    pub shard: Option<super::shard::Shard>,
    /// Start items whose work branch exists again from the base (`--fresh`), keeping the old
    /// branch under a backup name.
    pub fresh: bool,
    /// What each of the manifest's `sources` gave (read by the caller: planning runs nothing).
    pub sources: Vec<super::tracked::SourceRead>,
}

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// Problems only visible against the disk (ids two matches share, bad branch names).
    #[error("{0}")]
    Invalid(ManifestError),
    #[error("bad filter `{glob}`: {message}")]
    Filter { glob: String, message: String },
    /// A filter that matches nothing: a typo, most likely.
    #[error("`{flag} {glob}` matches no {what}; known: {known}")]
    NoMatch {
        flag: &'static str,
        glob: String,
        what: &'static str,
        known: String,
    },
}

impl Plan {
    /// Recompute counts and digest after item states changed.
    pub(crate) fn recount(&mut self) {
        let mut counts = BTreeMap::new();
        for it in &self.items {
            *counts.entry(it.state).or_insert(0) += 1;
        }
        self.counts = counts;
        self.digest = digest(&self.manifest.sha256, &self.repositories, &self.items);
    }
}

pub(super) fn digest(manifest_sha: &str, repos: &[RepoPlan], items: &[ItemPlan]) -> String {
    let mut h = Sha256::new();
    h.update(manifest_sha.as_bytes());
    for r in repos {
        h.update(b"\0repo\0");
        h.update(r.name.as_bytes());
        h.update(b"\0");
        h.update(r.head.as_deref().unwrap_or("-").as_bytes());
    }
    for i in items {
        h.update(b"\0item\0");
        h.update(i.repo.as_bytes());
        h.update(b"\0");
        h.update(i.id.as_bytes());
        h.update(b"\0");
        h.update(i.state.as_str().as_bytes());
        h.update(b"\0");
        h.update(i.reason.map_or("-", HoldReason::as_str).as_bytes());
    }
    crate::support::hex(&h.finalize())
}
