//! Planning: the manifest and the repositories on disk become a [`Plan`] — every item with its
//! state, and a stable order.
//!
//! Planning is shared by `plan` and `apply`, so what `plan` prints is what `apply` does. It only
//! reads: it spawns no worker or gate, takes no lock and writes nothing (git is asked with
//! optional locks off). Repositories are examined in parallel; the result does not depend on
//! which finishes first.

pub mod history;
pub mod holds;
pub mod repos;
pub mod schedule;
pub mod shard;

use crate::git::{self, Ancestry};
use crate::manifest::compile_glob;
use crate::manifest::load::valid_item_id;
use crate::manifest::template;
use crate::manifest::{LoadedManifest, ManifestError, Problem, SourceKind};
use crate::support::text::printable;
pub use crate::vocab::{HoldReason, ItemState};
use globset::{GlobSet, GlobSetBuilder};
use rayon::prelude::*;
use repos::Located;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

pub const PLAN_SCHEMA: &str = "runner.plan/v1";

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

/// The drain simulated with the estimates.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct Expected {
    pub makespan_ms: u64,
    /// max(total work / workers, the longest repository's total).
    pub lower_bound_ms: u64,
}

impl Plan {
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
    /// A pending item's place in the expected admission order (1 = first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<usize>,
    /// What a pending item is expected to take (worker and gates), from its recent runs, else its
    /// repository's, else the manifest's; absent without history.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate_ms: Option<u64>,
}

/// Narrowing given on the command line.
#[derive(Clone, Debug, Default)]
pub struct PlanOptions {
    /// Globs over repository names (`--only`).
    pub only: Vec<String>,
    /// Globs over item ids (`--items`).
    pub items: Vec<String>,
    /// Only the repositories of this shard (`--shard K/N`).
    pub shard: Option<shard::Shard>,
    /// Start items whose work branch exists again from the base (`--fresh`), keeping the old
    /// branch under a backup name.
    pub fresh: bool,
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

/// Names for a message: the first 20, then how many more.
fn listing(names: &[&str]) -> String {
    if names.is_empty() {
        return "none".into();
    }
    let shown: Vec<String> = names.iter().take(20).map(|n| format!("`{n}`")).collect();
    match names.len().saturating_sub(20) {
        0 => shown.join(", "),
        more => format!("{} and {more} more", shown.join(", ")),
    }
}

/// The first of `globs` that matches none of `names`.
fn unmatched<'a>(globs: &'a [String], names: &[&str]) -> Option<&'a String> {
    globs.iter().find(|g| {
        let Ok(m) = globset::GlobBuilder::new(g)
            .literal_separator(false)
            .build()
            .map(|g| g.compile_matcher())
        else {
            return false;
        };
        !names.iter().any(|n| m.is_match(n))
    })
}

fn globset(globs: &[String]) -> Result<Option<GlobSet>, PlanError> {
    if globs.is_empty() {
        return Ok(None);
    }
    let mut b = GlobSetBuilder::new();
    for g in globs {
        let glob = globset::GlobBuilder::new(g)
            .literal_separator(false)
            .build()
            .map_err(|e| PlanError::Filter {
                glob: g.clone(),
                message: e.kind().to_string(),
            })?;
        b.add(glob);
    }
    b.build().map(Some).map_err(|e| PlanError::Filter {
        glob: globs.join(","),
        message: e.to_string(),
    })
}

/// The effective worker bound: the manifest's (default: CPUs) lowered by `-j`, never raised.
pub fn effective_workers(loaded: &LoadedManifest, cli: Option<u32>) -> u32 {
    let manifest = loaded
        .manifest
        .capacity
        .as_ref()
        .and_then(|c| c.workers)
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get() as u32)
                .unwrap_or(1)
        });
    match cli {
        Some(j) => j.clamp(1, manifest),
        None => manifest,
    }
}

/// Build the plan. Reads the disk and asks git; changes nothing.
pub fn plan(loaded: &LoadedManifest, opts: &PlanOptions) -> Result<Plan, PlanError> {
    let only = globset(&opts.only)?;
    let item_filter = globset(&opts.items)?;
    let (located, located_notes) = repos::locate_noting(loaded);
    let mut problems = Vec::new();

    // Two sources naming one repository would let two runs share a checkout.
    let mut by_name: HashMap<&str, &Located> = HashMap::new();
    for l in &located {
        if let Some(first) = by_name.insert(&l.name, l) {
            let spec = &loaded.manifest.repositories[l.entry];
            problems.push(
                Problem::new(
                    "duplicate",
                    format!("repositories[{}]", l.entry),
                    format!(
                        "`{}` matches `{}`, but a repository named `{}` is already declared at `repositories[{}]`",
                        l.location,
                        l.path.display(),
                        l.name,
                        first.entry
                    ),
                )
                .at(spec.span)
                .help("repository names must be unique"),
            );
        }
    }

    let analyse_all = || -> Vec<Analysed> {
        located
            .par_iter()
            .map(|l| analyse(loaded, l, only.as_ref(), item_filter.as_ref(), opts))
            .collect()
    };
    // A pool of its own that ends with the plan: the drain that follows then has no idle threads,
    // each of which would be one more task list to read in every census and one more CPU to
    // tell of every unmapped page.
    let analysed = match rayon::ThreadPoolBuilder::new().build() {
        Ok(pool) => pool.install(analyse_all),
        Err(_) => analyse_all(),
    };

    let mut repositories = Vec::with_capacity(analysed.len());
    let mut per_repo: Vec<Vec<ItemPlan>> = Vec::with_capacity(analysed.len());
    let mut warnings = located_notes;
    let mut missing_repositories = Vec::new();
    let mut matched = vec![0usize; loaded.manifest.discover.len()];
    let any_found = analysed.iter().any(|a| a.repo.status == RepoStatus::Found);
    for a in analysed {
        problems.extend(a.problems);
        warnings.extend(a.notes);
        if let Some(m) = a.missing {
            warnings.push(format!(
                "repository `{}` is not there: {}; its items are skipped (`optional: true` on the repository makes that expected)",
                m.name, m.detail
            ));
            missing_repositories.push(m);
        }
        for (total, n) in matched.iter_mut().zip(&a.matched) {
            *total += n;
        }
        repositories.push(a.repo);
        per_repo.push(a.items);
    }
    if any_found {
        for (i, (d, n)) in loaded.manifest.discover.iter().zip(&matched).enumerate() {
            if *n == 0 {
                warnings.push(format!(
                    "`discover[{i}]` `{}` matches no file in any repository",
                    d.glob
                ));
            }
        }
    }

    // Explicit items whose repository no source produced.
    for (i, spec) in loaded.manifest.items.iter().enumerate() {
        if !by_name.contains_key(spec.repo.as_str()) {
            let reason_filtered = only
                .as_ref()
                .is_some_and(|g| !g.is_match(spec.repo.as_str()))
                || opts.shard.is_some_and(|s| !s.holds(&spec.repo))
                || item_filter
                    .as_ref()
                    .is_some_and(|g| !g.is_match(spec.id.as_str()));
            let _ = i;
            if !reason_filtered
                && !missing_repositories
                    .iter()
                    .any(|m: &MissingRepository| m.name == spec.repo)
            {
                let m = MissingRepository {
                    name: spec.repo.clone(),
                    detail: "no `glob` entry matched a checkout of this name".into(),
                };
                warnings.push(format!(
                    "repository `{}`, which item `{}` names, is not there: {}; its items are skipped",
                    m.name, spec.id, m.detail
                ));
                missing_repositories.push(m);
            }
            per_repo.push(vec![ItemPlan {
                start: None,
                estimate_ms: None,
                repo: spec.repo.clone(),
                id: spec.id.clone(),
                origin: Origin::Explicit,
                state: ItemState::Skipped,
                reason: Some(if reason_filtered {
                    HoldReason::Filtered
                } else {
                    HoldReason::RepoNotFound
                }),
                detail: (!reason_filtered)
                    .then(|| "no `glob` entry matched a checkout of this name".to_string()),
                branch: None,
                continues: None,
                behind: None,
                replaces: None,
                vars: spec.vars.clone(),
                matched: None,
            }]);
        }
    }

    if !problems.is_empty() {
        return Err(PlanError::Invalid(loaded.error(problems)));
    }

    // A filter that selects nothing is a mistake to name, not an empty plan to report.
    let mut repo_names: Vec<&str> = located.iter().map(|l| l.name.as_str()).collect();
    repo_names.extend(loaded.manifest.items.iter().map(|i| i.repo.as_str()));
    repo_names.sort();
    repo_names.dedup();
    if let Some(g) = unmatched(&opts.only, &repo_names) {
        return Err(PlanError::NoMatch {
            flag: "--only",
            glob: g.clone(),
            what: "repository",
            known: listing(&repo_names),
        });
    }
    let mut ids: Vec<&str> = per_repo.iter().flatten().map(|i| i.id.as_str()).collect();
    ids.sort();
    ids.dedup();
    if let Some(g) = unmatched(&opts.items, &ids) {
        return Err(PlanError::NoMatch {
            flag: "--items",
            glob: g.clone(),
            what: "item id",
            known: listing(&ids),
        });
    }

    // Round-robin over repositories: one run per repository at a time, so interleaving lets the
    // pool fill from the first slot on.
    let mut items = Vec::new();
    let mut round = 0;
    loop {
        let mut any = false;
        for list in &per_repo {
            if let Some(it) = list.get(round) {
                items.push(it.clone());
                any = true;
            }
        }
        if !any {
            break;
        }
        round += 1;
    }

    let mut counts = BTreeMap::new();
    for it in &items {
        *counts.entry(it.state).or_insert(0) += 1;
    }
    let capacity = CapacityPlan {
        workers: effective_workers(loaded, None),
        probe: loaded
            .manifest
            .capacity
            .as_ref()
            .is_some_and(|c| c.probe.is_some()),
    };
    let digest = digest(&loaded.sha256, &repositories, &items);
    Ok(Plan {
        expected: None,
        schema: PLAN_SCHEMA.to_string(),
        manifest: ManifestRef {
            name: loaded.manifest.name.clone(),
            path: loaded.path.clone(),
            sha256: loaded.sha256.clone(),
        },
        digest,
        capacity,
        repositories,
        items,
        counts,
        warnings,
        missing_repositories,
    })
}

impl Plan {
    /// Recompute counts and digest after item states changed.
    pub fn recount(&mut self) {
        let mut counts = BTreeMap::new();
        for it in &self.items {
            *counts.entry(it.state).or_insert(0) += 1;
        }
        self.counts = counts;
        self.digest = digest(&self.manifest.sha256, &self.repositories, &self.items);
    }
}

fn digest(manifest_sha: &str, repos: &[RepoPlan], items: &[ItemPlan]) -> String {
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

struct Analysed {
    repo: RepoPlan,
    /// The repository is declared, selected, not optional, and not there.
    missing: Option<MissingRepository>,
    items: Vec<ItemPlan>,
    problems: Vec<Problem>,
    /// What the user should hear: folders that could not be read.
    notes: Vec<String>,
    /// Files each `discover` rule matched here.
    matched: Vec<usize>,
}

/// One repository: ask git, discover items, compute each item's state.
fn analyse(
    loaded: &LoadedManifest,
    l: &Located,
    only: Option<&GlobSet>,
    item_filter: Option<&GlobSet>,
    opts: &PlanOptions,
) -> Analysed {
    let shard = opts.shard;
    let m = &loaded.manifest;
    let spec = &m.repositories[l.entry];
    let mut problems = Vec::new();
    let mut repo = RepoPlan {
        name: l.name.clone(),
        entry: l.entry,
        source: l.source,
        location: l.location.clone(),
        path: l.path.clone(),
        status: RepoStatus::NotFound,
        head: None,
        base: spec.base.clone(),
        common_dir: None,
        dirty: None,
        note: None,
        optional: spec.optional,
    };
    // One git call tells both what the checkout is and whether it is dirty, when in-place items
    // need the latter.
    let wants_dirty = m
        .items
        .iter()
        .any(|it| it.repo == l.name && it.branch.is_none())
        || m.discover.iter().any(|d| d.branch.is_none());
    let mut known_dirty = None;
    let special = if l.path.is_dir() {
        git::special_file(&l.path)
    } else {
        None
    };
    let probe = if let Some(why) = special {
        repo.note = Some(why);
        None
    } else if l.path.is_dir() {
        let combined = if wants_dirty {
            git::probe_with_status(&l.path)
        } else {
            None
        };
        match combined
            .map(|(p, d)| {
                known_dirty = Some(d);
                Ok(p)
            })
            .unwrap_or_else(|| git::quick_probe(&l.path))
        {
            Ok(p) if same_dir(&p.toplevel, &l.path) => Some(p),
            Ok(p) => {
                repo.note = Some(format!(
                    "not the top of a git checkout (it lies inside `{}`)",
                    p.toplevel.display()
                ));
                None
            }
            Err(e) => {
                repo.note = Some(format!("not a git checkout: {e}"));
                None
            }
        }
    } else {
        repo.note = Some(match l.source {
            SourceKind::Url => format!("not cloned yet; `apply` clones it from `{}`", l.location),
            _ => format!(
                "`{}` does not exist{}",
                l.path.display(),
                near_miss(&l.path)
            ),
        });
        None
    };
    if let Some(p) = &probe {
        repo.status = RepoStatus::Found;
        repo.head = p.head.clone();
        repo.common_dir = Some(p.common_dir.clone());
        if repo.base.is_none() {
            repo.base = p.branch.clone();
        }
    } else if l.source == SourceKind::Url {
        repo.status = RepoStatus::ToClone;
    }

    // Items: explicit ones first, in manifest order, then discovered ones sorted by path.
    let mut items: Vec<ItemPlan> = m
        .items
        .iter()
        .filter(|it| it.repo == l.name)
        .map(|it| {
            let branch = it.branch.as_ref().map(|b| {
                template::render(b, |name| match name {
                    "repo" => Some(l.name.clone()),
                    "item" => Some(it.id.clone()),
                    other => other
                        .strip_prefix("item.")
                        .and_then(|v| it.vars.get(v).cloned()),
                })
            });
            let branch = match branch {
                Some(Ok(b)) => match crate::support::refname::work_branch_problem(&b) {
                    None => Some(b),
                    Some(why) => {
                        problems.push(
                            Problem::new(
                                "invalid-branch",
                                "items",
                                format!("item `{}` would use branch `{b}`: {why}", it.id),
                            )
                            .at(it.span),
                        );
                        None
                    }
                },
                Some(Err(e)) => {
                    problems.push(Problem::new("invalid-template", "items", e).at(it.span));
                    None
                }
                None => None,
            };
            ItemPlan {
                start: None,
                estimate_ms: None,
                repo: l.name.clone(),
                id: it.id.clone(),
                origin: Origin::Explicit,
                state: ItemState::Pending,
                reason: None,
                detail: None,
                branch,
                continues: None,
                behind: None,
                replaces: None,
                vars: it.vars.clone(),
                matched: None,
            }
        })
        .collect();
    let mut notes = Vec::new();
    let mut matched = vec![0; m.discover.len()];
    if repo.status == RepoStatus::Found && !m.discover.is_empty() {
        let mut seen = Committed::new(
            repo.base.clone(),
            probe.as_ref().and_then(|p| p.branch.clone()),
        );
        matched = discover(loaded, l, &mut items, &mut problems, &mut notes, &mut seen);
    }

    // A work branch runs in a worktree of its own: the branch the checkout itself is on cannot be
    // one (git refuses to check a branch out twice, and runner never works in the user's place).
    if let Some(current) = probe.as_ref().and_then(|p| p.branch.as_deref()) {
        for it in &items {
            if it.branch.as_deref() == Some(current) {
                problems.push(Problem::new(
                    "checked-out-branch",
                    "items",
                    format!(
                        "item `{}` would work on branch `{current}`, which the checkout `{}` itself is on; give it a branch of its own, or no `branch` to work in the checkout",
                        it.id,
                        l.path.display()
                    ),
                ));
            }
        }
    }
    let repo_selected = only.is_none_or(|g| g.is_match(l.name.as_str()))
        && shard.is_none_or(|s| s.holds(shard::identity(l)));
    let found = repo.status == RepoStatus::Found;
    let needs_branches = found && items.iter().any(|i| i.branch.is_some());
    let mut branches = if needs_branches {
        git::local_branches(&l.path).ok()
    } else {
        None
    };
    // `--fresh`: an existing branch is kept under a backup name and the item starts anew from
    // the base, so it is judged as a new branch.
    let mut replaced: HashMap<String, String> = HashMap::new();
    if opts.fresh
        && let Some(set) = branches.as_mut()
    {
        for it in &items {
            if let Some(b) = &it.branch
                && set.contains(b)
                && let Ok(tip) = git::branch_tip(&l.path, b)
            {
                replaced.insert(b.clone(), backup_branch(b, &tip));
            }
        }
        for b in replaced.keys() {
            set.remove(b);
        }
    }
    let needs_dirty = found && items.iter().any(|i| i.branch.is_none());
    if needs_dirty {
        repo.dirty = known_dirty.or_else(|| git::is_dirty(&l.path).ok());
    }
    // The facts first (the only git questions), then each item's hold, decided purely.
    let mut facts = holds::RepoFacts {
        status: Some(repo.status),
        note: repo.note.clone(),
        dirty: repo.dirty,
        branches,
        stale: HashMap::new(),
        base_stale: None,
    };
    let selected =
        |it: &ItemPlan| repo_selected && item_filter.is_none_or(|g| g.is_match(it.id.as_str()));
    for it in &items {
        if let Some(b) = &it.branch
            && holds::needs_marker_check(&facts, selected(it), Some(b))
            && !facts.stale.contains_key(b)
        {
            let lacks = missing_markers(&l.path, Tip::Branch(b), &spec.critical_base);
            facts.stale.insert(b.clone(), lacks);
        }
    }
    // A new branch is forked from the base: the base must hold every marker too.
    if items
        .iter()
        .any(|it| holds::needs_base_check(&facts, selected(it), it.branch.as_deref()))
    {
        let base = repo.base.clone().unwrap_or_else(|| "HEAD".into());
        facts.base_stale = Some(missing_markers(
            &l.path,
            Tip::Base(&base),
            &spec.critical_base,
        ));
    }
    let base = repo.base.clone().unwrap_or_else(|| "HEAD".into());
    for it in &mut items {
        let h = holds::hold(&facts, selected(it), it.branch.as_deref());
        it.continues = h.continues;
        if let Some(r) = h.reason {
            it.state = r.state();
            it.reason = Some(r);
            it.detail = h.detail;
        }
        if let Some(b) = &it.branch {
            it.replaces = replaced.get(b).cloned();
            if it.continues == Some(true) && selected(it) {
                it.behind = git::behind(&l.path, b, &base).ok();
            }
        }
    }
    if found && items.iter().any(|it| it.branch.is_some() && selected(it)) {
        notes.extend(worktree_gaps(loaded, l));
    }
    // Missing matters where this run would have worked: the repository is selected, and
    // `--items` (when given) selects one of its items.
    let wanted = repo_selected && (item_filter.is_none() || items.iter().any(selected));
    let missing = (wanted && !repo.optional && repo.status == RepoStatus::NotFound).then(|| {
        MissingRepository {
            name: repo.name.clone(),
            detail: repo.note.clone().unwrap_or_else(|| "not found".into()),
        }
    });
    Analysed {
        repo,
        missing,
        items,
        problems,
        notes,
        matched,
    }
}

/// `; did you mean `textkit`?` when a git checkout beside a missing path has a name a typo
/// away from it; nothing otherwise.
fn near_miss(path: &Path) -> String {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str()))
    else {
        return String::new();
    };
    let Ok(entries) = std::fs::read_dir(parent) else {
        return String::new();
    };
    let names: Vec<String> = entries
        .flatten()
        .filter(|e| git::looks_like_checkout(&e.path()))
        .filter_map(|e| e.file_name().into_string().ok())
        .take(10_000)
        .collect();
    let known: Vec<&str> = names.iter().map(String::as_str).collect();
    match crate::manifest::load::suggest(name, &known) {
        Some(near) => format!(" (did you mean `{}`?)", printable(near)),
        None => String::new(),
    }
}

/// What the repository's checkout has, ignored, that its gates likely need and a worktree of it
/// will lack (a worktree holds committed files only): a warning each, with the fix. Nothing
/// when `worktree.setup` prepares worktrees, or `worktree.share` gives the path.
fn worktree_gaps(loaded: &LoadedManifest, l: &Located) -> Vec<String> {
    let m = &loaded.manifest;
    let prep = m.repositories[l.entry]
        .worktree
        .clone()
        .or_else(|| m.worktree.clone())
        .unwrap_or_default();
    if prep.setup.is_some() {
        return Vec::new();
    }
    let candidates: Vec<String> = ["node_modules", ".venv", "venv", "Cargo.lock"]
        .iter()
        .filter(|p| !prep.share.iter().any(|s| s == *p))
        .filter(|p| std::fs::symlink_metadata(l.path.join(p)).is_ok())
        .map(|p| p.to_string())
        .collect();
    let Ok(ignored) = git::ignored_of(&l.path, &candidates) else {
        return Vec::new();
    };
    ignored
        .iter()
        .map(|p| {
            let make = if p == "node_modules" {
                " or a `worktree.setup` that makes it (`npm ci`)"
            } else {
                ""
            };
            format!(
                "items of repository `{}` work in worktrees, which hold committed files only and so will lack `{p}` (ignored in `{}`): add it to `worktree.share`{make}",
                l.name,
                l.path.display()
            )
        })
        .collect()
}

/// The name an existing work branch is kept under when its item starts again from the base
/// (`--fresh`): the branch and the commit it was at, so that backing up one tip twice is one
/// backup.
pub fn backup_branch(branch: &str, tip: &str) -> String {
    format!("{branch}.backup-{}", &tip[..tip.len().min(12)])
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// What the `critical_base` markers are checked against.
#[derive(Clone, Copy, Debug)]
pub enum Tip<'a> {
    /// An existing work branch, continued.
    Branch(&'a str),
    /// The base a new work branch is forked from (a branch, tag, commit or `HEAD`).
    Base(&'a str),
}

/// Which `critical_base` markers `tip` lacks, as a detail naming them, or `None` when it
/// contains them all. Shared by `plan` and the checks just before an attempt.
pub fn missing_markers(dir: &Path, tip: Tip<'_>, markers: &[String]) -> Option<String> {
    if markers.is_empty() {
        return None;
    }
    let (rev, what) = match tip {
        Tip::Branch(b) => (format!("refs/heads/{b}"), format!("branch `{b}`")),
        Tip::Base(b) => (
            b.to_string(),
            format!("base `{b}`, from which the new branch would be forked,"),
        ),
    };
    let mut missing = Vec::new();
    for marker in markers {
        match git::ancestry(dir, marker, &rev) {
            Ok(Ancestry::Contained) => {}
            Ok(Ancestry::Missing) => missing.push(format!("`{marker}`")),
            Ok(Ancestry::Unresolvable) => missing.push(format!("`{marker}` (unresolvable)")),
            Err(e) => missing.push(format!("`{marker}` ({e})")),
        }
    }
    (!missing.is_empty()).then(|| format!("{what} lacks {}", missing.join(", ")))
}

/// The matches of rule `di` an item on a work branch will see: on the base, the checkout's
/// matches that are committed there (edited ones kept, with a note); off it, the base's own
/// matching files. What the item would not see is named, with the fix.
fn seen_on_branch(
    l: &Located,
    di: usize,
    glob: &str,
    matcher: &globset::GlobMatcher,
    matches: Vec<String>,
    committed: &mut Committed,
    notes: &mut Vec<String>,
) -> Vec<String> {
    let (root, _) = glob_root(glob);
    let roots = vec![root.to_string_lossy().replace('\\', "/")];
    let base = committed.base.clone().unwrap_or_else(|| "HEAD".into());
    let files = match committed.files(&l.path, &roots) {
        Ok(None) => return matches,
        Ok(Some(f)) => f,
        Err(e) => {
            if !matches.is_empty() {
                notes.push(format!(
                    "`discover[{di}]` in repository `{}`: {e}; its {} match{} are not run",
                    l.name,
                    matches.len(),
                    if matches.len() == 1 { "" } else { "es" }
                ));
            }
            return Vec::new();
        }
    };
    let candidates: Vec<String> = if files.on_base {
        matches
    } else {
        let mut c: Vec<String> = files
            .tree
            .keys()
            .filter(|p| matcher.is_match(p.as_str()))
            .cloned()
            .collect();
        c.sort();
        c
    };
    let mut kept = Vec::new();
    let mut absent = Vec::new();
    for rel in candidates {
        if files.tree.get(&rel) == Some(&true) {
            notes.push(format!(
                "`discover[{di}]` in repository `{}`: `{}` is a symbolic link in `{base}`; skipped",
                l.name,
                printable(&rel)
            ));
            continue;
        }
        match files.seen(&rel) {
            Seen::Committed => kept.push(rel),
            Seen::Edited => {
                notes.push(format!(
                    "`discover[{di}]` in repository `{}`: `{}` has edits that are not committed; its item works on a branch from `{base}` and sees the committed version: commit them",
                    l.name,
                    printable(&rel)
                ));
                kept.push(rel);
            }
            Seen::Absent => absent.push(rel),
        }
    }
    if !absent.is_empty() {
        let shown: Vec<String> = absent
            .iter()
            .take(5)
            .map(|p| format!("`{}`", printable(p)))
            .collect();
        let more = absent.len().saturating_sub(5);
        notes.push(format!(
            "`discover[{di}]` in repository `{}`: {}{} {} not committed on `{base}`, from which {} work branch{} made, so {} not run: commit {} (`git add` and `git commit` in `{}`)",
            l.name,
            shown.join(", "),
            if more > 0 { format!(" and {more} more") } else { String::new() },
            if absent.len() == 1 { "is" } else { "are" },
            if absent.len() == 1 { "its" } else { "their" },
            if absent.len() == 1 { " is" } else { "es are" },
            if absent.len() == 1 { "it is" } else { "they are" },
            if absent.len() == 1 { "it" } else { "them" },
            l.path.display()
        ));
    }
    kept
}

/// Literal folder prefix of a glob, and how deep below it a match can be (`None`: unbounded).
fn glob_root(glob: &str) -> (PathBuf, Option<usize>) {
    let mut base = PathBuf::new();
    let mut depth = 0;
    let mut unbounded = false;
    let mut in_pattern = false;
    let segs: Vec<&str> = glob.split('/').filter(|s| !s.is_empty()).collect();
    for (i, seg) in segs.iter().enumerate() {
        let last = i + 1 == segs.len();
        if !in_pattern && !last && !seg.contains(['*', '?', '[', '{']) {
            base.push(seg);
        } else {
            in_pattern = true;
            depth += 1;
            if seg.contains("**") {
                unbounded = true;
            }
        }
    }
    (base, (!unbounded).then_some(depth))
}

/// What an item on a work branch will see of a repository: the committed tree of the base its
/// worktree is made from, not the checkout's files. Asked of git once, only when the checkout's
/// own files cannot prove it is that tree (clean, on the base).
struct Committed {
    /// The base new work branches are forked from (`None`: HEAD).
    base: Option<String>,
    /// The branch the checkout is on.
    head_branch: Option<String>,
    /// `Some(None)`: the checkout is proven to be its HEAD commit, on the base; `Some(Some(..))`:
    /// the base's files and the checkout's uncommitted ones, as git gave them; `None`: not yet
    /// asked.
    view: Option<Option<CommittedFiles>>,
}

struct CommittedFiles {
    /// The base's files (`true`: a symbolic link).
    tree: HashMap<String, bool>,
    /// The checkout's files that differ from its HEAD commit, when the checkout is on the
    /// base; empty otherwise.
    uncommitted: std::collections::HashSet<String>,
    /// The checkout is on the base: its files are the candidates.
    on_base: bool,
}

/// How a file a `discover` rule matched stands for an item on a work branch.
enum Seen {
    /// The item sees it as it is here.
    Committed,
    /// Committed, but with edits in the checkout the item will not see.
    Edited,
    /// Not in the base's tree: the item would not see it.
    Absent,
}

impl Committed {
    fn new(base: Option<String>, head_branch: Option<String>) -> Self {
        Committed {
            base,
            head_branch,
            view: None,
        }
    }

    fn on_base(&self) -> bool {
        self.base.is_none() || self.base == self.head_branch
    }

    /// The base's files and what the checkout holds uncommitted, under `roots`; `None` when the
    /// checkout is proven to be the base's tree already.
    fn files(&mut self, dir: &Path, roots: &[String]) -> Result<Option<&CommittedFiles>, String> {
        if self.view.is_none() {
            let on_base = self.on_base();
            if on_base && git::proven_clean(dir).is_some() {
                self.view = Some(None);
            } else {
                let rev = self.base.clone().unwrap_or_else(|| "HEAD".into());
                let tree = git::tree_files(dir, &rev, roots)
                    .map_err(|e| format!("cannot read the files of `{rev}`: {e}"))?
                    .into_iter()
                    .map(|f| (f.path, f.symlink))
                    .collect();
                let uncommitted = if on_base {
                    git::uncommitted_under(dir, roots)
                        .map_err(|e| format!("cannot tell which files are committed: {e}"))?
                } else {
                    Default::default()
                };
                self.view = Some(Some(CommittedFiles {
                    tree,
                    uncommitted,
                    on_base,
                }));
            }
        }
        Ok(self.view.as_ref().and_then(Option::as_ref))
    }
}

impl CommittedFiles {
    fn seen(&self, rel: &str) -> Seen {
        match (self.tree.contains_key(rel), self.uncommitted.contains(rel)) {
            (false, _) => Seen::Absent,
            (true, true) => Seen::Edited,
            (true, false) => Seen::Committed,
        }
    }
}

/// Discover items in one repository: every file matching a `discover` glob becomes an item.
/// Returns how many files each rule matched; a folder it could not read is noted. A rule whose
/// items work on a branch matches what their worktree will hold — the committed files of the
/// base — and names a match the checkout has that the base does not (untracked, ignored, or
/// only staged): the fix is to commit it.
fn discover(
    loaded: &LoadedManifest,
    l: &Located,
    items: &mut Vec<ItemPlan>,
    problems: &mut Vec<Problem>,
    notes: &mut Vec<String>,
    committed: &mut Committed,
) -> Vec<usize> {
    let mut matched = vec![0; loaded.manifest.discover.len()];
    let repo_root = std::fs::canonicalize(&l.path).ok();
    let m = &loaded.manifest;
    let mut ids: HashMap<String, String> = items
        .iter()
        .map(|i| (i.id.clone(), "an explicit item".to_string()))
        .collect();
    for (di, d) in m.discover.iter().enumerate() {
        let Ok(matcher) = compile_glob(&d.glob) else {
            continue;
        };
        let (base, depth) = glob_root(&d.glob);
        let root = l.path.join(&base);
        if !root.is_dir() {
            continue;
        }
        // The folder the walk starts from is inside the repository, or nothing is matched
        // under it: a tracked link to a folder elsewhere (`tasks -> /x/tasks`) would make
        // files outside the repository work items.
        if let Some(top) = &repo_root
            && !std::fs::canonicalize(&root).is_ok_and(|r| r.starts_with(top))
        {
            notes.push(format!(
                "`discover[{di}]` in repository `{}`: `{}` leads outside the repository (a link); nothing under it is matched",
                l.name,
                printable(&base.to_string_lossy())
            ));
            continue;
        }
        let mut walker = walkdir::WalkDir::new(&root).min_depth(1);
        if let Some(depth) = depth {
            walker = walker.max_depth(depth);
        }
        let mut matches = Vec::new();
        let mut it = walker.into_iter();
        while let Some(entry) = it.next() {
            let entry = match entry {
                Ok(e) => e,
                Err(e) => {
                    let at = e.path().unwrap_or(&root).display().to_string();
                    notes.push(format!(
                        "`discover[{di}]` in repository `{}`: cannot read `{at}`: {e}",
                        l.name
                    ));
                    continue;
                }
            };
            if entry.file_type().is_dir() {
                if entry.file_name() == ".git" {
                    it.skip_current_dir();
                }
                continue;
            }
            let Ok(rel) = entry.path().strip_prefix(&l.path) else {
                continue;
            };
            let rel = rel.to_string_lossy().replace('\\', "/");
            if matcher.is_match(&rel) {
                // Discovery never leaves the repository: a link that resolves outside it (or
                // nowhere) is not work to hand a worker.
                if entry.path_is_symlink() {
                    let inside = match (std::fs::canonicalize(entry.path()), &repo_root) {
                        (Ok(target), Some(root)) => target.starts_with(root),
                        _ => false,
                    };
                    if !inside {
                        notes.push(format!(
                            "`discover[{di}]` in repository `{}`: `{}` is a link that leads outside the repository; skipped",
                            l.name,
                            printable(&rel)
                        ));
                        continue;
                    }
                }
                matches.push(rel);
            }
        }
        // What the rule matched here, committed or not: a rule that matches nothing anywhere
        // is warned of apart from files it matched that are not committed.
        matched[di] = matches.len();
        matches.sort();
        if d.branch.is_some() {
            matches = seen_on_branch(l, di, &d.glob, &matcher, matches, committed, notes);
        }
        for rel in matches {
            // A path is named in messages with its control characters escaped: a folder name
            // can hold a newline or a terminal escape.
            let shown = printable(&rel);
            let p = Path::new(&rel);
            let dir = p
                .parent()
                .map(|d| d.to_string_lossy().to_string())
                .filter(|d| !d.is_empty())
                .unwrap_or_else(|| ".".into());
            let name = p
                .file_name()
                .map(|f| f.to_string_lossy().to_string())
                .unwrap_or_default();
            let stem = p
                .file_stem()
                .map(|f| f.to_string_lossy().to_string())
                .unwrap_or_default();
            let parent = p
                .parent()
                .and_then(|d| d.file_name())
                .map(|f| f.to_string_lossy().to_string())
                .unwrap_or_else(|| l.name.clone());
            let lookup = |n: &str| -> Option<String> {
                match n {
                    "repo" => Some(l.name.clone()),
                    "match.path" => Some(rel.clone()),
                    "match.dir" => Some(dir.clone()),
                    "match.name" => Some(name.clone()),
                    "match.stem" => Some(stem.clone()),
                    "match.parent" => Some(parent.clone()),
                    _ => None,
                }
            };
            let id = match template::render(&d.id, lookup) {
                Ok(id) => id,
                Err(e) => {
                    problems.push(
                        Problem::new("invalid-template", format!("discover[{di}].id"), e)
                            .at(d.span),
                    );
                    continue;
                }
            };
            if !valid_item_id(&id) {
                problems.push(
                    Problem::new(
                        "invalid-id",
                        format!("discover[{di}].id"),
                        format!("`{shown}` in repository `{}` yields the id `{}`, which is not a valid item id", l.name, printable(&id)),
                    )
                    .at(d.span),
                );
                continue;
            }
            if let Some(first) = ids.insert(id.clone(), format!("`{shown}`")) {
                problems.push(
                    Problem::new(
                        "duplicate",
                        format!("discover[{di}].id"),
                        format!("`{shown}` in repository `{}` yields the id `{id}`, already taken by {first}", l.name),
                    )
                    .at(d.span)
                    .help("make the `id` template distinguish these matches, e.g. with `{match.dir}`"),
                );
                continue;
            }
            let mut vars = BTreeMap::new();
            let mut ok = true;
            for (k, v) in &d.vars {
                match template::render(v, lookup) {
                    Ok(s) => {
                        vars.insert(k.clone(), s);
                    }
                    Err(e) => {
                        problems.push(
                            Problem::new("invalid-template", format!("discover[{di}].vars.{k}"), e)
                                .at(d.span),
                        );
                        ok = false;
                    }
                }
            }
            let branch = match &d.branch {
                Some(b) => {
                    let r = template::render(b, |n| {
                        if n == "item" {
                            Some(id.clone())
                        } else {
                            lookup(n)
                        }
                    });
                    match r {
                        Ok(b) if crate::support::refname::work_branch_problem(&b).is_none() => {
                            Some(b)
                        }
                        Ok(b) => {
                            problems.push(
                                Problem::new(
                                    "invalid-branch",
                                    format!("discover[{di}].branch"),
                                    format!(
                                        "`{shown}` yields branch `{}`, which git does not accept",
                                        printable(&b)
                                    ),
                                )
                                .at(d.span),
                            );
                            ok = false;
                            None
                        }
                        Err(e) => {
                            problems.push(
                                Problem::new(
                                    "invalid-template",
                                    format!("discover[{di}].branch"),
                                    e,
                                )
                                .at(d.span),
                            );
                            ok = false;
                            None
                        }
                    }
                }
                None => None,
            };
            if ok {
                items.push(ItemPlan {
                    start: None,
                    estimate_ms: None,
                    repo: l.name.clone(),
                    id,
                    origin: Origin::Discovered,
                    state: ItemState::Pending,
                    reason: None,
                    detail: None,
                    branch,
                    continues: None,
                    behind: None,
                    replaces: None,
                    vars,
                    matched: Some(rel.clone()),
                });
            }
        }
    }
    matched
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_roots() {
        assert_eq!(
            glob_root("changes/*/proposal.md"),
            (PathBuf::from("changes"), Some(2))
        );
        assert_eq!(glob_root("docs/**/*.md"), (PathBuf::from("docs"), None));
        assert_eq!(glob_root("TODO.md"), (PathBuf::new(), Some(1)));
        assert_eq!(glob_root("a/b/c.md"), (PathBuf::from("a/b"), Some(1)));
    }
}
