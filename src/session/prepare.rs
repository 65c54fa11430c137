//! The preparation of a run, in order: its worker bound settled ([`super::bounds`]) before
//! anything is estimated from it, `url` repositories cloned ([`super::workspace`]), the manifest
//! planned with the trackers' items, the ledger's standing laid over the plan
//! ([`super::standing`]), the run begun in the ledger, holds decided at plan time recorded, and
//! what the engine is handed (its context, the fan-out of its events).

use super::bounds::{confined, containment, sandbox, settle_workers};
use super::failure::Failure;
use super::fanout::{EventsOut, Fanout};
use super::operator::who;
use super::parts::{Options, Session};
use super::standing::{Standing, estimate_order, published, settle_plan};
use super::workspace::{clone_missing, reports_dir};
use crate::engine::RunCx;
use crate::events::Event;
use crate::ledger::store::Store;
use crate::ledger::{Holder, RunRow};
use crate::manifest::LoadedManifest;
use crate::plan::repos;
use crate::plan::{ItemState, Plan};
use crate::report::ReportBuilder;
use crate::ui::term::Ui;
use crate::vocab::ItemOutcome;
use std::collections::HashMap;
use std::io::IsTerminal;
use std::sync::Arc;

/// The limits of the manifest's `timeout: auto` gates, from how long each took when it passed in
/// the latest runs; each said on stderr.
fn auto_gate_timeouts(
    ui: &Ui,
    loaded: &crate::manifest::LoadedManifest,
    ledger: &Store,
) -> HashMap<String, std::time::Duration> {
    use crate::manifest::{
        AUTO_TIMEOUT_SAMPLES, DEFAULT_GATE_TIMEOUT, format_approx, format_duration,
    };
    let mut names: Vec<&str> = loaded
        .manifest
        .gates
        .iter()
        .chain(
            loaded
                .manifest
                .repositories
                .iter()
                .flat_map(|r| r.gates.iter().flatten()),
        )
        .filter(|g| g.timeout_is_auto())
        .map(|g| g.name.as_str())
        .collect();
    names.sort_unstable();
    names.dedup();
    let mut out = HashMap::new();
    if names.is_empty() {
        return out;
    }
    let durations = match ledger.gate_durations(&loaded.manifest.name, 50) {
        Ok(d) => d,
        Err(e) => {
            ui.warn(format_args!(
                "`timeout: auto` gates get the default ({}): their history cannot be read: {e}",
                format_duration(DEFAULT_GATE_TIMEOUT)
            ));
            return out;
        }
    };
    for name in names {
        let samples = durations.get(name).map_or(&[][..], Vec::as_slice);
        match crate::engine::config::auto_timeout(samples) {
            Some((limit, p95)) => {
                eprintln!(
                    "runner: gate `{name}`: timeout auto = {} (p95 {} over {} passing runs)",
                    format_duration(limit),
                    format_approx(p95),
                    samples.len()
                );
                out.insert(name.to_string(), limit);
            }
            None => eprintln!(
                "runner: gate `{name}`: timeout auto = {}, the default, until {AUTO_TIMEOUT_SAMPLES} passing runs are recorded ({} so far)",
                format_duration(DEFAULT_GATE_TIMEOUT),
                samples.len()
            ),
        }
    }
    out
}

/// `YYYYMMDDTHHMMSSZ-xxxxxx`: sortable by time, unique across concurrent runs.
fn new_run_id() -> String {
    let now = jiff::Timestamp::now();
    let stamp = now.strftime("%Y%m%dT%H%M%SZ").to_string();
    let rand = uuid::Uuid::new_v4().simple().to_string();
    format!("{stamp}-{}", &rand[..6])
}

/// Prepare a run of `loaded`: see [`Session::prepare`].
pub(super) fn prepare(ui: &Ui, loaded: LoadedManifest, opts: Options) -> Result<Session, Failure> {
    let workers = settle_workers(ui, &loaded, opts.workers)?;
    // What this run learns of its repositories' git folders, from the plan to the last item.
    let git = crate::git::Repos::default();
    let clone_errors = clone_missing(&git, &loaded, opts.plan.shard);
    let mut ledger = crate::ledger::store::open(&opts.state)?;
    // The trackers are read now, and what they gave remembered: a later run that cannot read
    // one holds these items instead of dropping them.
    let mut plan_opts = opts.plan.clone();
    plan_opts.sources = super::sources::read_all(&loaded, Some(&ledger));
    let mut plan = planned(ui, &git, &loaded, &plan_opts)?;
    super::sources::remember(&mut ledger, &loaded, &plan_opts.sources)?;
    // The key that seals cached verdicts: the ledger's, never in a child's reach.
    let verdict_key = ledger.verdict_key()?;
    confined(&plan)?;

    // The run's view of the ledger is taken now: a result another run records after this
    // moment (while this one plans) is one this run will not repeat.
    let started_at = crate::support::clock::now();
    let standing =
        Standing::read(&ledger, &loaded.manifest.name)?.with_pulls(&loaded, &plan, Some(&ledger));
    let dead_leftovers = settle_plan(ui, &git, &mut plan, &ledger, &standing, &loaded, &opts);
    estimate_order(ui, &mut plan, workers, &ledger);

    let run_id = new_run_id();
    // How each item's processes are kept together: a cgroup each where the machine allows it.
    let contained = Arc::new(
        containment(&loaded, &run_id)
            .map_err(|e| Failure::invalid(format_args!("{e}; nothing ran")))?,
    );
    tracing::info!(containment = %contained.describe(), "processes are contained");
    let reports_dir = reports_dir(&loaded, opts.report_dir.as_deref());
    let run_dir = reports_dir.join(&run_id);
    std::fs::create_dir_all(&run_dir).map_err(|e| {
        Failure::internal(format_args!(
            "cannot create the report folder `{}`: {e}",
            run_dir.display()
        ))
    })?;
    let redactor = Arc::new(super::adapter::redactor(&loaded));
    let workspace = repos::workspace_dir(&loaded);
    let sandbox = sandbox(ui, &loaded, &opts.state, &workspace, &plan)?;
    // Bars on an interactive terminal only (NO_COLOR takes the colour out, not the bars).
    let fancy = !opts.no_progress
        && std::io::stderr().is_terminal()
        && std::env::var("TERM").map_or(true, |t| t != "dumb")
        && std::env::var_os("CI").is_none();
    let row = RunRow {
        id: run_id.clone(),
        manifest: loaded.manifest.name.clone(),
        manifest_path: loaded.path.display().to_string(),
        manifest_sha256: loaded.sha256.clone(),
        holder: Holder::this_process(),
        started_by: who("apply"),
        started_at: started_at.clone(),
        ended_at: None,
        ending: None,
        cause: None,
        stop_requested_by: None,
        stop_reason: None,
        containment: Some(sandbox.with(contained.describe())),
        lapsed: false,
    };
    let plan = Arc::new(plan);
    let keys = super::keys::PlanKeys::new(&loaded.manifest.name, Arc::clone(&plan));
    let plan_json = serde_json::to_string(&*plan).map_err(|e| {
        Failure::internal(format_args!("cannot encode the plan for the ledger: {e}"))
    })?;
    ledger.begin_run(&row, &plan_json, workers, &run_dir.display().to_string())?;
    // The event stream: stdout (`-`), or a file created now (an error before anything runs).
    let events = EventsOut::open(opts.events.as_deref(), opts.json).map_err(Failure::invalid)?;
    let mut sink = Fanout::new(
        events,
        crate::ui::Progress::new(&plan, fancy, ui.color),
        ReportBuilder::new(Arc::clone(&plan), &run_id, &run_dir, workers, &started_at),
        ledger,
        &plan,
        &run_id,
        keys,
        row.holder.clone(),
    );
    sink.writebacks = super::writeback::Writebacks::start(
        &loaded,
        &plan,
        &opts.state,
        &run_id,
        run_dir.join("logs"),
        Arc::clone(&redactor),
    );
    record_plan_holds(&plan, &mut sink)?;
    let ledger = sink.ledger.lock();
    let mut previous_feedback =
        super::feedback::previous(&plan, &standing.past, &sink.keys, &**ledger);
    super::feedback::review(&plan, &run_dir, &mut previous_feedback);
    say_held(&plan);
    let published = published(&plan, &ledger)?;
    let (health, gate_timeouts) = (health_of(&loaded), auto_gate_timeouts(ui, &loaded, &ledger));
    let budget = super::budget::budget_limit(&loaded, &**ledger, jiff::Timestamp::now());
    drop(ledger);
    let cx = Arc::new(RunCx {
        git,
        spares: crate::engine::item::Spares::new(&plan),
        dead_leftovers: std::sync::Mutex::new(dead_leftovers),
        captures: Default::default(),
        planted_listings: Default::default(),
        gate_timeouts,
        loaded,
        plan,
        run_id,
        token: uuid::Uuid::new_v4().simple().to_string(),
        run_dir,
        verdicts: crate::engine::verdicts::Verdicts::new(&workspace, !opts.no_cache, &verdict_key),
        baselines: std::sync::Mutex::new(HashMap::new()),
        workspace,
        sandbox,
        workers,
        wait_for_locks: opts.wait_for_locks,
        redactor,
        clone_errors,
        paused: standing.paused.clone(),
        budget: budget?,
        previous_feedback,
        contained,
        health: std::sync::Mutex::new(health),
        probe_models: !opts.no_probe,
        published,
        parent_token: crate::support::settings::current().parent_token.clone(),
    });
    Ok(Session { cx, sink, opts })
}

/// Items that will not run for a reason the user can clear: named before the drain starts.
fn say_held(plan: &Plan) {
    let held: Vec<String> = plan
        .items
        .iter()
        .filter(|it| it.state == ItemState::Held)
        .map(|it| {
            format!(
                "runner:   {}/{} ({}){}",
                it.repo,
                it.id,
                it.reason.map_or("held", |r| r.as_str()),
                it.detail
                    .as_deref()
                    .map(|d| format!(": {d}"))
                    .unwrap_or_default()
            )
        })
        .collect();
    if !held.is_empty() {
        eprintln!(
            "runner: {} item{} held at plan time:\n{}",
            held.len(),
            if held.len() == 1 { "" } else { "s" },
            held.join("\n")
        );
    }
}

/// [`planned`] with no filter, no tracker read, and a handle of its own on the repositories: what
/// a verb that only looks (`validate`, `doctor`) plans.
pub fn planned_whole(ui: &Ui, loaded: &LoadedManifest) -> Result<crate::plan::Plan, Failure> {
    planned(
        ui,
        &crate::git::Repos::default(),
        loaded,
        &crate::plan::PlanOptions::default(),
    )
}

/// Plan a loaded manifest, its warnings said; `Err` says why it cannot be planned (a manifest
/// diagnostic, as a load error is).
pub fn planned(
    ui: &Ui,
    git: &crate::git::Repos,
    loaded: &LoadedManifest,
    opts: &crate::plan::PlanOptions,
) -> Result<crate::plan::Plan, Failure> {
    match crate::plan::plan(git, loaded, opts) {
        Ok(p) => {
            for w in &p.warnings {
                ui.warn(w);
            }
            Ok(p)
        }
        Err(crate::plan::PlanError::Invalid(e)) => {
            Err(Failure::Manifest(crate::manifest::LoadError::Invalid(e)))
        }
        Err(e) => Err(Failure::invalid(e)),
    }
}

/// Holds decided at plan time are the run's results too: recorded (so `status` shows them), in
/// the report and in the event stream, as the engine's events are.
fn record_plan_holds(plan: &Plan, sink: &mut Fanout) -> Result<(), Failure> {
    for (i, it) in plan.items.iter().enumerate() {
        // A pull request of an item its source no longer lists, seen merged or closed: settled,
        // not asked again.
        if let (Some(s), Some(pr)) = (&it.source, &it.pull_request)
            && s.unlisted
        {
            let state = match pr.state {
                crate::plan::pull::PrStatus::Merged => Some("merged"),
                crate::plan::pull::PrStatus::Closed => Some("closed"),
                _ => None,
            };
            if let Some(state) = state {
                eprintln!(
                    "runner: {}/{}: pull request {state}: {}",
                    it.repo,
                    it.id,
                    crate::support::text::printable(&pr.url)
                );
                sink.record(&Event::PullRequestSettled {
                    item: i,
                    url: pr.url.clone(),
                    state: state.to_string(),
                });
            }
        }
        if it.state != ItemState::Held {
            continue;
        }
        sink.record(&Event::ItemFinished {
            item: i,
            outcome: ItemOutcome::Held,
            reason: it.reason.map(|r| r.as_str().to_string()),
            cause: it.detail.clone(),
        });
        if let Some(e) = sink.failed() {
            return Err(Failure::internal(e));
        }
    }
    Ok(())
}

/// Provider health for the run, with the manifest's demotion threshold.
fn health_of(loaded: &LoadedManifest) -> crate::engine::health::Health {
    crate::engine::health::Health::new(
        loaded
            .manifest
            .models
            .as_ref()
            .map_or(crate::manifest::DEFAULT_THRESHOLD, |m| m.threshold()),
        crate::engine::health::WINDOW,
        crate::engine::health::QUIET,
    )
}
