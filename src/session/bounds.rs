//! What a run may use: its worker bound (the manifest's, `-j`, and a nested run's inherited
//! ceiling, which fails closed), the repository a nested run is confined to, how its items'
//! processes are kept together (cgroups or process groups) and how the kernel confines them.

use super::failure::Failure;
use crate::manifest::LoadedManifest;
use crate::plan::{self, Plan};
use crate::ui::term::Ui;
use std::path::Path;

/// The most items a run takes at once: the manifest's `capacity.workers` (the machine's cores
/// when it gives none), lowered by `-j`, and by a nested run's inherited ceiling
/// (`RUNNER_MAX_WORKERS`), which fails closed: a ceiling that cannot be read is no licence to
/// run unbounded, or anywhere.
pub(crate) fn settle_workers(
    ui: &Ui,
    loaded: &LoadedManifest,
    j: Option<u32>,
) -> Result<u32, Failure> {
    let mut workers = plan::effective_workers(loaded, j);
    if let Some(j) = j
        && j > workers
    {
        ui.warn(format_args!(
            "`-j {j}` is above the manifest's bound; running at most {workers} at once (`-j` only lowers `capacity.workers`)"
        ));
    }
    let settings = crate::support::settings::current();
    let nested = settings.role.is_some();
    match settings.max_workers {
        Some(max) => workers = workers.min(max.max(1)),
        None if nested => {
            return Err(Failure::invalid(
                "`RUNNER_ROLE` is set but `RUNNER_MAX_WORKERS` is not: the ceiling a nested run inherits cannot be read",
            ));
        }
        None => {}
    }
    if nested && settings.repo_path.is_none() {
        return Err(Failure::invalid(
            "`RUNNER_ROLE` is set but `RUNNER_REPO_PATH` is not: the repository a nested run is confined to is unknown",
        ));
    }
    Ok(workers)
}

/// A runner started by a worker works only inside that worker's repository
/// (`RUNNER_REPO_PATH`): a plan reaching outside it is refused.
pub(super) fn confined(plan: &Plan) -> Result<(), Failure> {
    let settings = crate::support::settings::current();
    if settings.role.is_some()
        && let Some(parent) = &settings.repo_path
        && let Some(r) = plan
            .repositories
            .iter()
            .find(|r| !r.path.starts_with(parent))
    {
        return Err(Failure::Invalid(format!(
            "this runner was started by a worker in `{}` and may not work outside it, but repository `{}` is at `{}`",
            parent.display(),
            r.name,
            r.path.display()
        )));
    }
    Ok(())
}

/// How run `run_id`'s items will be contained: `RUNNER_CONTAINMENT` and `worker.limits` say
/// what is wanted, the machine what it allows.
pub fn containment(
    loaded: &LoadedManifest,
    run_id: &str,
) -> Result<crate::process::cgroup::Contained, crate::process::cgroup::ContainmentError> {
    use crate::process::cgroup::{Contained, Want};
    let limits = loaded
        .manifest
        .worker
        .limits
        .map(|l| l.0)
        .unwrap_or_default();
    Want::parse(crate::support::settings::current().containment.as_deref())
        .and_then(|want| Contained::set_up(run_id, want, limits))
}

/// How items are confined: refused (exit 2) where `required` cannot be had, what is missing
/// said where `best-effort` goes without it.
pub(super) fn sandbox(
    ui: &Ui,
    loaded: &LoadedManifest,
    state: &Path,
    workspace: &Path,
    plan: &Plan,
) -> Result<crate::engine::confine::SandboxPlan, Failure> {
    // Where items' private folders go.
    std::fs::create_dir_all(workspace.join("tmp")).map_err(|e| {
        Failure::internal(format_args!(
            "cannot make the workspace `{}`: {e}; nothing ran",
            workspace.display()
        ))
    })?;
    let sandbox = crate::engine::confine::plan(
        loaded,
        state,
        workspace,
        plan.repositories.iter().map(|r| r.path.clone()).collect(),
    )
    .map_err(|e| Failure::invalid(format_args!("{e}; nothing ran")))?;
    for m in &sandbox.missing {
        ui.warn(format_args!(
            "items are not confined as the manifest asks: {m}"
        ));
    }
    tracing::info!(sandbox = %sandbox.summary, "items are confined");
    Ok(sandbox)
}
