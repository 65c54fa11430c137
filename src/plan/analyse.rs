//! One repository at planning time: what git says of it, its items found or discovered, and each
//! item's state (pending, held and why, done, taken), with the markers a continued branch must hold.

use super::discover::{Committed, discover};
use super::model::{ItemPlan, MissingRepository, Origin, PlanOptions, RepoPlan, RepoStatus};
use super::repos::Located;
use super::{holds, shard};
use crate::git::{self, Ancestry};
use crate::manifest::template;
use crate::manifest::{LoadedManifest, Problem, SourceKind};
use crate::support::text::printable;
use globset::GlobSet;
use std::collections::HashMap;
use std::path::Path;

pub(super) struct Analysed {
    pub(super) repo: RepoPlan,
    /// The repository is declared, selected, not optional, and not there.
    pub(super) missing: Option<MissingRepository>,
    pub(super) items: Vec<ItemPlan>,
    pub(super) problems: Vec<Problem>,
    /// What the user should hear: folders that could not be read.
    pub(super) notes: Vec<String>,
    /// Files each `discover` rule matched here.
    pub(super) matched: Vec<usize>,
}

/// One repository: ask git, discover items, compute each item's state.
pub(super) fn analyse(
    g: &crate::git::Repos,
    loaded: &LoadedManifest,
    l: &Located,
    only: Option<&GlobSet>,
    item_filter: Option<&GlobSet>,
    opts: &PlanOptions,
    from_sources: &[ItemPlan],
) -> Analysed {
    let m = &loaded.manifest;
    let mut problems = Vec::new();
    // One git call tells both what the checkout is and whether it is dirty, when in-place items
    // need the latter.
    let wants_dirty = m
        .items
        .iter()
        .any(|it| it.repo == l.name && it.branch.is_none())
        || m.discover.iter().any(|d| d.branch.is_none())
        || from_sources.iter().any(|it| it.branch.is_none());
    let (mut repo, probe, known_dirty) = look(g, loaded, l, wants_dirty);

    // Items: explicit ones first, in manifest order, then discovered ones sorted by path.
    let mut items = explicit_items(loaded, l, &mut problems);
    let mut notes = Vec::new();
    let mut matched = vec![0; m.discover.len()];
    if repo.status == RepoStatus::Found && !m.discover.is_empty() {
        let mut seen = Committed::new(
            g,
            repo.base.clone(),
            probe.as_ref().and_then(|p| p.branch.clone()),
        );
        matched = discover(loaded, l, &mut items, &mut problems, &mut notes, &mut seen);
    }
    // Then the trackers' items, in the order their sources gave them; an id the manifest's own
    // items took is the manifest's. One that lacks a var the commands use is held, named.
    let uses = item_vars_used(loaded, l.entry);
    for it in from_sources {
        if items.iter().any(|i| i.id == it.id) {
            notes.push(format!(
                "item `{}` of source `{}` has the id of an item of repository `{}` already; skipped",
                it.id,
                it.source.as_ref().map_or("", |s| s.name.as_str()),
                l.name
            ));
            continue;
        }
        let mut it = it.clone();
        if let Some(detail) = lacking(&uses, &it) {
            it.state = crate::vocab::ItemState::Held;
            it.reason = Some(crate::vocab::HoldReason::MissingVar);
            it.detail = Some(detail);
        }
        items.push(it);
    }
    if let Some(current) = probe.as_ref().and_then(|p| p.branch.as_deref()) {
        problems.extend(checked_out_branch(current, &items, l));
    }
    let repo_selected = only.is_none_or(|g| g.is_match(l.name.as_str()))
        && opts.shard.is_none_or(|s| s.holds(shard::identity(l)));
    let found = repo.status == RepoStatus::Found;
    let needs_dirty = found && items.iter().any(|i| i.branch.is_none());
    if needs_dirty {
        repo.dirty = known_dirty.or_else(|| git::is_dirty(g, &l.path).ok());
    }
    let selected =
        |it: &ItemPlan| repo_selected && item_filter.is_none_or(|g| g.is_match(it.id.as_str()));
    decide_holds(g, loaded, l, &repo, &mut items, &selected, opts.fresh);
    if found && items.iter().any(|it| it.branch.is_some() && selected(it)) {
        notes.extend(worktree_gaps(g, loaded, l));
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

/// What git says of the repository's checkout: the repository's plan (found or not, and why),
/// the probe, and whether the checkout is dirty when one call could tell it (`wants_dirty`).
fn look(
    g: &crate::git::Repos,
    loaded: &LoadedManifest,
    l: &Located,
    wants_dirty: bool,
) -> (RepoPlan, Option<git::Probe>, Option<bool>) {
    let spec = &loaded.manifest.repositories[l.entry];
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
            git::probe_with_status(g, &l.path)
        } else {
            None
        };
        match combined
            .map(|(p, d)| {
                known_dirty = Some(d);
                Ok(p)
            })
            .unwrap_or_else(|| git::quick_probe(g, &l.path))
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
    (repo, probe, known_dirty)
}

/// The manifest's own items of the repository, in manifest order, their branch templates
/// rendered (a template that cannot be, or names no valid branch, is a problem).
fn explicit_items(
    loaded: &LoadedManifest,
    l: &Located,
    problems: &mut Vec<Problem>,
) -> Vec<ItemPlan> {
    loaded
        .manifest
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
                branch,
                vars: it.vars.clone(),
                after: it
                    .after_items
                    .iter()
                    .map(|(r, i)| format!("{r}/{i}"))
                    .collect(),
                ..ItemPlan::new(l.name.clone(), it.id.clone(), Origin::Explicit)
            }
        })
        .collect()
}

/// A work branch runs in a worktree of its own: the branch the checkout itself is on (`current`)
/// cannot be one (git refuses to check a branch out twice, and runner never works in the user's
/// place).
fn checked_out_branch(current: &str, items: &[ItemPlan], l: &Located) -> Vec<Problem> {
    items
        .iter()
        .filter(|it| it.branch.as_deref() == Some(current))
        .map(|it| {
            Problem::new(
                "checked-out-branch",
                "items",
                format!(
                    "item `{}` would work on branch `{current}`, which the checkout `{}` itself is on; give it a branch of its own, or no `branch` to work in the checkout",
                    it.id,
                    l.path.display()
                ),
            )
        })
        .collect()
}

/// Each item's state: the facts first (the only git questions: branches, markers, how far a
/// continued branch is behind), then each item's hold, decided purely by [`holds::hold`].
/// With `fresh`, an existing branch is kept under a backup name and the item starts anew from
/// the base, so it is judged as a new branch.
fn decide_holds(
    g: &crate::git::Repos,
    loaded: &LoadedManifest,
    l: &Located,
    repo: &RepoPlan,
    items: &mut [ItemPlan],
    selected: &dyn Fn(&ItemPlan) -> bool,
    fresh: bool,
) {
    let spec = &loaded.manifest.repositories[l.entry];
    let found = repo.status == RepoStatus::Found;
    let needs_branches = found && items.iter().any(|i| i.branch.is_some());
    let mut branches = if needs_branches {
        git::local_branches(g, &l.path).ok()
    } else {
        None
    };
    let mut replaced: HashMap<String, String> = HashMap::new();
    if fresh && let Some(set) = branches.as_mut() {
        for it in items.iter() {
            if let Some(b) = &it.branch
                && set.contains(b)
                && let Ok(tip) = git::branch_tip(g, &l.path, b)
            {
                replaced.insert(b.clone(), backup_branch(b, &tip));
            }
        }
        for b in replaced.keys() {
            set.remove(b);
        }
    }
    let mut facts = holds::RepoFacts {
        status: Some(repo.status),
        note: repo.note.clone(),
        dirty: repo.dirty,
        branches,
        stale: HashMap::new(),
        base_stale: None,
    };
    for it in items.iter() {
        if let Some(b) = &it.branch
            && holds::needs_marker_check(&facts, selected(it), Some(b))
            && !facts.stale.contains_key(b)
        {
            let lacks = missing_markers(g, &l.path, Tip::Branch(b), &spec.critical_base);
            facts.stale.insert(b.clone(), lacks);
        }
    }
    let base = repo.base.clone().unwrap_or_else(|| "HEAD".into());
    // A new branch is forked from the base: the base must hold every marker too.
    if items
        .iter()
        .any(|it| holds::needs_base_check(&facts, selected(it), it.branch.as_deref()))
    {
        facts.base_stale = Some(missing_markers(
            g,
            &l.path,
            Tip::Base(&base),
            &spec.critical_base,
        ));
    }
    for it in items.iter_mut() {
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
                it.behind = git::behind(g, &l.path, b, &base).ok();
            }
        }
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
fn worktree_gaps(g: &crate::git::Repos, loaded: &LoadedManifest, l: &Located) -> Vec<String> {
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
    let Ok(ignored) = git::ignored_of(g, &l.path, &candidates) else {
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
pub(crate) enum Tip<'a> {
    /// An existing work branch, continued.
    Branch(&'a str),
    /// The base a new work branch is forked from (a branch, tag, commit or `HEAD`).
    Base(&'a str),
}

/// Which `critical_base` markers `tip` lacks, as a detail naming them, or `None` when it
/// contains them all. Shared by `plan` and the checks just before an attempt.
pub(crate) fn missing_markers(
    g: &crate::git::Repos,
    dir: &Path,
    tip: Tip<'_>,
    markers: &[String],
) -> Option<String> {
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
        match git::ancestry(g, dir, marker, &rev) {
            Ok(Ancestry::Contained) => {}
            Ok(Ancestry::Missing) => missing.push(format!("`{marker}`")),
            Ok(Ancestry::Unresolvable) => missing.push(format!("`{marker}` (unresolvable)")),
            Err(e) => missing.push(format!("`{marker}` ({e})")),
        }
    }
    (!missing.is_empty()).then(|| format!("{what} lacks {}", missing.join(", ")))
}

/// The `{item.<var>}` names the worker (its command and env) and gates of repository `entry` use,
/// each with the command that uses it first.
fn item_vars_used(loaded: &LoadedManifest, entry: usize) -> Vec<(String, String)> {
    let eff = crate::manifest::effective::effective(loaded, entry);
    let mut templates: Vec<(String, &str)> = Vec::new();
    for t in eff.worker.run.parts() {
        templates.push(("the worker's command".into(), t));
    }
    for t in eff.worker.env.values() {
        templates.push(("the worker's env".into(), t.as_str()));
    }
    for g in &eff.gates {
        for t in g.run.parts() {
            templates.push((format!("gate `{}`", g.name), t));
        }
    }
    let mut uses: Vec<(String, String)> = Vec::new();
    for (owner, t) in templates {
        for name in template::placeholders(t).unwrap_or_default() {
            let name = name.strip_prefix(template::RAW).unwrap_or(&name);
            if let Some(var) = name.strip_prefix("item.")
                && !uses.iter().any(|(v, _)| v == var)
            {
                uses.push((var.to_string(), owner.clone()));
            }
        }
    }
    uses
}

/// Why a tracker's item cannot be run by commands using `uses`: the first var it lacks.
fn lacking(uses: &[(String, String)], it: &ItemPlan) -> Option<String> {
    let has = |var: &str| {
        it.vars.contains_key(var)
            || it.source.as_ref().is_some_and(|s| match var {
                "title" | "source_id" => true,
                "url" => s.url.is_some(),
                _ => false,
            })
    };
    uses.iter().find(|(v, _)| !has(v)).map(|(var, owner)| {
        format!("{owner} uses `{{item.{var}}}`, which this item does not define (its vars: give `{var}`)")
    })
}
