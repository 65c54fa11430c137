//! Planning: the manifest and the repositories on disk become a [`Plan`] — every item with its
//! state, and a stable order.
//!
//! Planning is shared by `plan` and `apply`, so what `plan` prints is what `apply` does. It only
//! reads: it spawns no worker or gate, takes no lock and writes nothing (git is asked with
//! optional locks off). Repositories are examined in parallel; the result does not depend on
//! which finishes first.

mod analyse;
pub mod deps;
mod discover;
pub mod holds;
pub mod matrix;
mod model;
pub mod order;
pub mod past;
mod pr;
pub mod pull;
pub mod repos;
pub mod shard;
pub mod source;
mod tracked;

pub use analyse::backup_branch;
use analyse::{Analysed, analyse};
pub(crate) use analyse::{Tip, missing_markers};
use model::digest;
pub(crate) use model::*;

use crate::manifest::{LoadedManifest, Problem};
pub use crate::vocab::HoldReason;
pub use crate::vocab::ItemState;
use globset::{GlobSet, GlobSetBuilder};
use rayon::prelude::*;
use repos::Located;
use std::collections::{BTreeMap, HashMap};

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
pub(crate) fn effective_workers(loaded: &LoadedManifest, cli: Option<u32>) -> u32 {
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
pub fn plan(
    g: &crate::git::Repos,
    loaded: &LoadedManifest,
    opts: &PlanOptions,
) -> Result<Plan, PlanError> {
    let only = globset(&opts.only)?;
    let item_filter = globset(&opts.items)?;
    let (located, located_notes) = repos::locate_noting(loaded);
    let (by_name, mut problems) = by_name(loaded, &located);
    let names: Vec<&str> = located.iter().map(|l| l.name.as_str()).collect();
    let routed = source::route(&loaded.manifest.sources, &opts.sources, &names);

    let analyse_all = || -> Vec<Analysed> {
        located
            .par_iter()
            .map(|l| {
                let from_sources = routed.by_repo.get(&l.name).map_or(&[][..], Vec::as_slice);
                analyse(
                    g,
                    loaded,
                    l,
                    only.as_ref(),
                    item_filter.as_ref(),
                    opts,
                    from_sources,
                )
            })
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
    warnings.extend(routed.warnings);
    let unreadable_sources = routed.unreadable;
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
    let filters = Filters {
        only: only.as_ref(),
        items: item_filter.as_ref(),
        shard: opts.shard,
    };
    for spec in &loaded.manifest.items {
        if !by_name.contains_key(spec.repo.as_str()) {
            per_repo.push(vec![without_repository(
                spec,
                &filters,
                &mut missing_repositories,
                &mut warnings,
            )]);
        }
    }
    // Tracker items held whatever their repository's state: unroutable, or from a source that
    // could not be read.
    if !routed.held.is_empty() {
        per_repo.push(routed.held);
    }
    if !problems.is_empty() {
        return Err(PlanError::Invalid(loaded.error(problems)));
    }
    selects_something(opts, loaded, &located, &per_repo)?;
    let items = round_robin(per_repo);
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
        unreadable_sources,
    })
}

/// The located repositories by name. Two sources naming one repository would let two runs share
/// a checkout: each second one is a problem.
fn by_name<'l>(
    loaded: &LoadedManifest,
    located: &'l [Located],
) -> (HashMap<&'l str, &'l Located>, Vec<Problem>) {
    let mut problems = Vec::new();
    let mut by_name: HashMap<&str, &Located> = HashMap::new();
    for l in located {
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
    (by_name, problems)
}

/// What `--only`, `--items` and `--shard` select.
struct Filters<'a> {
    only: Option<&'a GlobSet>,
    items: Option<&'a GlobSet>,
    shard: Option<shard::Shard>,
}

/// An explicit item whose repository no source produced: skipped, as filtered out or as its
/// repository not found (then named among the missing, once).
fn without_repository(
    spec: &crate::manifest::ItemSpec,
    filters: &Filters<'_>,
    missing: &mut Vec<MissingRepository>,
    warnings: &mut Vec<String>,
) -> ItemPlan {
    let filtered = filters
        .only
        .is_some_and(|g| !g.is_match(spec.repo.as_str()))
        || filters.shard.is_some_and(|s| !s.holds(&spec.repo))
        || filters.items.is_some_and(|g| !g.is_match(spec.id.as_str()));
    let detail = "no `glob` entry matched a checkout of this name";
    if !filtered && !missing.iter().any(|m| m.name == spec.repo) {
        let m = MissingRepository {
            name: spec.repo.clone(),
            detail: detail.into(),
        };
        warnings.push(format!(
            "repository `{}`, which item `{}` names, is not there: {}; its items are skipped",
            m.name, spec.id, m.detail
        ));
        missing.push(m);
    }
    ItemPlan {
        state: ItemState::Skipped,
        reason: Some(if filtered {
            HoldReason::Filtered
        } else {
            HoldReason::RepoNotFound
        }),
        detail: (!filtered).then(|| detail.to_string()),
        vars: spec.vars.clone(),
        after: spec
            .after_items
            .iter()
            .map(|(r, i)| format!("{r}/{i}"))
            .collect(),
        ..ItemPlan::new(spec.repo.clone(), spec.id.clone(), Origin::Explicit)
    }
}

/// A filter that selects nothing is a mistake to name, not an empty plan to report.
fn selects_something(
    opts: &PlanOptions,
    loaded: &LoadedManifest,
    located: &[Located],
    per_repo: &[Vec<ItemPlan>],
) -> Result<(), PlanError> {
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
    Ok(())
}

/// Round-robin over repositories: one run per repository at a time, so interleaving lets the
/// pool fill from the first slot on.
fn round_robin(per_repo: Vec<Vec<ItemPlan>>) -> Vec<ItemPlan> {
    // Moved, not copied: a plan of 100,000 items is never held twice.
    let mut items = Vec::with_capacity(per_repo.iter().map(Vec::len).sum());
    let mut lists: Vec<_> = per_repo.into_iter().map(Vec::into_iter).collect();
    loop {
        let before = items.len();
        items.extend(lists.iter_mut().filter_map(Iterator::next));
        if items.len() == before {
            break;
        }
    }
    items
}
