//! What the ledger and the forges say of a manifest's items before a run — past outcomes, a
//! pause, quarantines, other runs' claims, pull requests — laid over the plan, with what a run
//! killed mid-item left, branches moved on their remote, and the order estimated from history.

use super::parts::Options;
use crate::ledger::store::Store;
use crate::ledger::{ItemKey, PastOutcome};
use crate::manifest::LoadedManifest;
use crate::plan::past::{self, Rerun};
use crate::plan::{ItemState, Plan};
use crate::ui::term::Ui;
use std::collections::HashMap;
use std::path::PathBuf;

/// What the ledger says of a manifest's items before a run: past outcomes, a pause, the
/// quarantines in force and the live claims of other runs.
pub(crate) struct Standing {
    pub past: HashMap<ItemKey, PastOutcome>,
    pub paused: Option<String>,
    pub quarantined: Vec<(String, String, String)>,
    pub claims: Vec<(ItemKey, String)>,
    /// The pull requests earlier runs opened, as their forge tells them now.
    pub pulls: crate::plan::pull::Pulls,
    /// `publish.review_rounds`.
    pub review_rounds: u32,
}

impl Standing {
    /// The standing of manifest `name` in `ledger`.
    pub fn read(ledger: &Store, name: &str) -> crate::ledger::Result<Standing> {
        Ok(Standing {
            past: ledger.past_outcomes(name)?.into_iter().collect(),
            // The host's pause stands over the manifest's.
            paused: match crate::lease::host_pause() {
                Some(h) => Some(h.text()),
                None => ledger.paused(name)?,
            },
            quarantined: ledger.quarantines()?,
            claims: ledger.live_claims_of(name)?,
            pulls: Default::default(),
            review_rounds: crate::manifest::DEFAULT_REVIEW_ROUNDS,
        })
    }

    /// With the state of each pull request of `plan`'s items (`publish.state`).
    pub fn with_pulls(
        mut self,
        loaded: &LoadedManifest,
        plan: &Plan,
        ledger: Option<&Store>,
    ) -> Self {
        self.pulls = super::pulls::read(loaded, plan, ledger);
        self.review_rounds = loaded
            .manifest
            .publish
            .as_ref()
            .map_or(crate::manifest::DEFAULT_REVIEW_ROUNDS, |p| {
                p.review_rounds()
            });
        self
    }

    /// No ledger yet: only the quarantines kept with the repositories hold.
    pub fn none() -> Standing {
        Standing {
            past: HashMap::new(),
            paused: None,
            quarantined: Vec::new(),
            claims: Vec::new(),
            pulls: Default::default(),
            review_rounds: crate::manifest::DEFAULT_REVIEW_ROUNDS,
        }
    }

    /// The plan's items as this standing leaves them: done, held (paused, quarantined) or
    /// taken by another live run. `taken` is false where admission settles claims instead (a
    /// shared ledger, whose claims `apply` takes over when their runner stops).
    pub(crate) fn lay_over(&self, plan: &mut Plan, rerun: Option<Rerun>, taken: bool) {
        past::apply(plan, &self.past, rerun, self.paused.as_deref());
        // Review rounds follow a completion only: a round that halted waits, as any halted item.
        let completed = plan
            .items
            .iter()
            .filter(|it| {
                self.past
                    .get(&past::item_key(&plan.manifest.name, it))
                    .is_some_and(|p| p.outcome == crate::vocab::ItemOutcome::Completed)
            })
            .map(|it| (it.repo.clone(), it.id.clone()))
            .collect();
        crate::plan::pull::overlay(
            plan,
            &self.pulls,
            rerun == Some(Rerun::Rejected),
            self.review_rounds,
            &completed,
        );
        let q = quarantines_of(plan, self.quarantined.clone());
        past::quarantine(plan, &q);
        if taken {
            past::taken(plan, &self.claims);
        }
        // Dependencies last, on every other state: a `done` item they name counts when it
        // completed (a halted one is `done` too, until `--rerun failed`).
        let manifest = plan.manifest.name.clone();
        crate::plan::deps::resolve(plan, |it| {
            self.past
                .get(&past::item_key(&manifest, it))
                .is_none_or(|p| p.outcome == crate::vocab::ItemOutcome::Completed)
        });
    }
}

/// The quarantines in force for `plan`'s repositories: those kept with each repository (seen by
/// every manifest), and those this ledger recorded; as `(path, run, reason)`.
pub(crate) fn quarantines_of(
    plan: &crate::plan::Plan,
    mut recorded: Vec<(String, String, String)>,
) -> Vec<(String, String, String)> {
    for r in &plan.repositories {
        if let Some(common) = &r.common_dir
            && let Some(q) = crate::lease::quarantined(common)
        {
            recorded.push((r.path.display().to_string(), q.run_id, q.reason));
        }
    }
    recorded
}

/// The plan's worker bound set to `workers`, then the order items start in and the expected
/// duration estimated from what they took in the manifest's recent runs (none without a
/// ledger), with that bound: what `plan` shows is what `apply` does.
pub fn estimate(
    plan: &mut Plan,
    workers: u32,
    ledger: Option<&Store>,
) -> crate::ledger::Result<()> {
    plan.capacity.workers = workers;
    let durations = match ledger {
        Some(l) => l.item_durations(&plan.manifest.name, super::records::HISTORY_RUNS)?,
        None => Default::default(),
    };
    crate::plan::order::estimate(plan, &durations);
    Ok(())
}

/// The plan as this run will drain it: what a run killed mid-item left in a repository's own
/// checkout, proven its own, taken over (saved and reset by this run, rather than its items held
/// `dirty-tree`: by repository, that run); the ledger's standing laid over it — against a
/// shared ledger, an item another runner claimed is left to admission, which waits for that
/// runner's repository lock and takes the claim over if its runner stops —; work branches
/// moved on their remote taken (see [`estimate_order`] for what follows).
pub(super) fn settle_plan(
    ui: &Ui,
    git: &crate::git::Repos,
    plan: &mut Plan,
    ledger: &Store,
    standing: &Standing,
    loaded: &LoadedManifest,
    opts: &Options,
) -> HashMap<String, String> {
    let dead = dead_leftovers(ui, git, plan, ledger);
    standing.lay_over(plan, opts.rerun, !ledger.is_shared());
    take_moved_heads(git, loaded, plan);
    dead
}

/// The settled plan's start order and expected durations ([`estimate`]); plan order, said, where
/// the ledger cannot tell them.
pub(super) fn estimate_order(ui: &Ui, plan: &mut Plan, workers: u32, ledger: &Store) {
    if let Err(e) = estimate(plan, workers, Some(ledger)) {
        ui.warn(format_args!("items start in plan order: {e}"));
    }
}

/// The repositories whose own checkout holds only what a run killed mid-item left there
/// (`engine::inplace`), said, with that run: their items held `dirty-tree` are pending.
pub(super) fn dead_leftovers(
    ui: &Ui,
    git: &crate::git::Repos,
    plan: &mut Plan,
    ledger: &Store,
) -> HashMap<String, String> {
    let proven = crate::engine::inplace::adopt(
        git,
        plan,
        |run| !matches!(ledger.run(run), Ok(Some(r)) if r.status() != crate::ledger::RunStatus::Ended),
    );
    proven
        .into_iter()
        .map(|(repo, p)| {
            ui.warn(format_args!(
                "`{repo}`: run `{}` died while its item `{}` worked in the repository's own checkout; what it left uncommitted ({} path{}) is saved as a patch and the checkout reset before this run's first item there",
                p.run_id,
                p.item,
                p.paths.len(),
                if p.paths.len() == 1 { "" } else { "s" }
            ));
            (repo, p.run_id)
        })
        .collect()
}

/// A review round whose pull request's branch someone else pushed to starts from what they
/// pushed: the local branch is moved forward to the remote head (never the remote rewound); one
/// that cannot be is held, saying why.
pub(super) fn take_moved_heads(git: &crate::git::Repos, loaded: &LoadedManifest, plan: &mut Plan) {
    let remote = loaded
        .manifest
        .publish
        .as_ref()
        .map_or("origin", |p| p.remote())
        .to_string();
    let paths: HashMap<String, PathBuf> = plan
        .repositories
        .iter()
        .map(|r| (r.name.clone(), r.path.clone()))
        .collect();
    for it in &mut plan.items {
        let (Some(pr), Some(branch)) = (&it.pull_request, &it.branch) else {
            continue;
        };
        let moved = pr.head.is_some() && pr.pushed.is_some() && pr.head != pr.pushed;
        if it.state != ItemState::Pending || !pr.wants_a_round() || !moved {
            continue;
        }
        let Some(dir) = paths.get(&it.repo) else {
            continue;
        };
        match crate::git::take_remote_head(git, dir, &remote, branch) {
            Ok(head) => {
                tracing::info!(item = %it.id, %head, "the review round starts from the remote head");
                let note = format!(
                    "; the branch on `{remote}` moved (someone else pushed): the round starts from it, `{}`",
                    &head[..head.len().min(10)]
                );
                if let Some(d) = it.detail.as_mut() {
                    d.push_str(&note);
                }
            }
            Err(e) => {
                it.state = ItemState::Held;
                it.reason = Some(crate::vocab::HoldReason::Environment);
                it.detail = Some(format!("review round not started: {e}"));
            }
        }
    }
    let mut counts = std::collections::BTreeMap::new();
    for it in &plan.items {
        *counts.entry(it.state).or_insert(0) += 1;
    }
    plan.counts = counts;
}

/// Pull requests earlier runs opened for the plan's items, by item: publishing updates them.
pub(super) fn published(
    plan: &Plan,
    ledger: &Store,
) -> crate::ledger::Result<HashMap<usize, String>> {
    let p = ledger.publications_of(&plan.manifest.name)?;
    Ok(plan
        .items
        .iter()
        .enumerate()
        .filter_map(|(i, it)| {
            p.get(&(it.repo.clone(), it.id.clone()))
                .and_then(|p| p.url.clone())
                .map(|u| (i, u))
        })
        .collect())
}
