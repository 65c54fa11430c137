//! The preparation of a run: the worker bound settled (the manifest's, `-j`, and a nested run's
//! ceiling) into the plan before anything is estimated from it, the ledger's standing (past
//! outcomes, pauses, quarantines, claims) laid over the plan, and what the engine is handed.

use super::failure::Failure;
use super::fanout::{EventsOut, Fanout};
use super::parts::{Options, Session};
use crate::engine::RunCx;
use crate::events::Event;
use crate::ledger::store::Store;
use crate::ledger::{Holder, ItemKey, PastOutcome, RunRow};
use crate::manifest::{LoadedManifest, SourceKind};
use crate::plan::past::{self, Rerun};
use crate::plan::{self, repos};
use crate::plan::{ItemState, Plan};
use crate::report::ReportBuilder;
use crate::ui::term::Ui;
use crate::vocab::ItemOutcome;
use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The state ledger's path: `--state` / `RUNNER_STATE`, else `.runner/state.db` beside the
/// manifest, else in the current folder.
/// The manifest's reports folder, or `given` (`--report-dir`).
pub(crate) fn reports_dir(loaded: &LoadedManifest, given: Option<&Path>) -> std::path::PathBuf {
    match given {
        Some(d) => std::path::absolute(d).unwrap_or_else(|_| d.to_path_buf()),
        None => loaded.resolve(
            loaded
                .manifest
                .reports
                .as_ref()
                .and_then(|r| r.dir.as_deref())
                .unwrap_or(crate::manifest::DEFAULT_REPORTS_DIR),
        ),
    }
}

/// Who is asking, for provenance: `alice (uid 1000)@host`, the user named by the process's real
/// uid (never `$USER`, which anyone can set), `as worker` when a worker or gate asks (its
/// `RUNNER_ROLE`), and `via `runner cancel`` naming the control used.
pub fn who(control: &str) -> String {
    let uid = nix::unistd::getuid();
    let user = nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map(|u| format!("{} (uid {uid})", u.name))
        .unwrap_or_else(|| format!("uid {uid}"));
    let role = crate::support::settings::current()
        .role
        .clone()
        .filter(|r| {
            !r.is_empty()
                && r.len() <= 32
                && r.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
        .map(|r| format!(" as {r}"))
        .unwrap_or_default();
    format!(
        "{user}@{}{role} via `runner {control}`",
        crate::support::host::hostname()
    )
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

/// Values to redact: every variable named as a secret, every passed variable whose name says it
/// is one (`TOKEN`, `SECRET`, `PASSWORD`, `KEY`), and every value the manifest sets in
/// `worker.env` under such a name.
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

/// Clone every `url` repository not yet in the workspace, and fetch the ones that are. Failures
/// are recorded per repository (their items fail with the git error, credentials removed); the
/// run goes on. A failed clone leaves no folder behind (git removes it).
/// Clone (or fetch) the manifest's url repositories — only the shard's, with `--shard`.
fn clone_missing(
    loaded: &LoadedManifest,
    shard: Option<crate::plan::shard::Shard>,
) -> HashMap<String, String> {
    let workspace = repos::workspace_dir(loaded);
    let mut errors = HashMap::new();
    for spec in &loaded.manifest.repositories {
        if spec.source_kind() != SourceKind::Url {
            continue;
        }
        let (Some(name), Some(url)) = (&spec.name, &spec.url) else {
            continue;
        };
        if shard.is_some_and(|s| !s.holds(&repos::redact_url(url))) {
            continue;
        }
        let dest = repos::clone_dir(&workspace, name);
        // A local bundle or repository path resolves against the manifest's folder.
        let local = loaded.resolve(url);
        let source = if !url.contains("://") && local.exists() {
            local.to_string_lossy().to_string()
        } else {
            url.clone()
        };
        let result = if dest.join(".git").exists() {
            crate::git::fetch(&dest)
        } else {
            crate::git::clone_repo(&source, &dest)
        };
        if let Err(e) = result {
            let fresh = !dest.join(".git").exists();
            let shown = repos::redact_url(url);
            let msg = e.to_string().replace(url.as_str(), &shown);
            let what = if fresh { "clone" } else { "fetch" };
            errors.insert(
                name.clone(),
                format!("cannot {what} `{shown}`: {}", redact_credentials(&msg)),
            );
        }
    }
    errors
}

/// Remove `user:password@` from any url inside a message.
fn redact_credentials(msg: &str) -> String {
    msg.split(' ')
        .map(|w| {
            if w.contains("://") {
                repos::redact_url(w)
            } else {
                w.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The most items a run takes at once: the manifest's `capacity.workers` (the machine's cores
/// when it gives none), lowered by `-j`, and by a nested run's inherited ceiling
/// (`RUNNER_MAX_WORKERS`), which fails closed: a ceiling that cannot be read is no licence to
/// run unbounded, or anywhere. `Err` is the exit code, the reason said.
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

/// Prepare a run of `loaded`: see [`Session::prepare`].
pub(super) fn prepare(ui: &Ui, loaded: LoadedManifest, opts: Options) -> Result<Session, Failure> {
    let workers = settle_workers(ui, &loaded, opts.workers)?;
    let clone_errors = clone_missing(&loaded, opts.plan.shard);
    let mut ledger = crate::ledger::store::open(&opts.state)?;
    // The trackers are read now, and what they gave remembered: a later run that cannot read
    // one holds these items instead of dropping them.
    let mut plan_opts = opts.plan.clone();
    plan_opts.sources = super::sources::read_all(&loaded, Some(&ledger));
    let mut plan = planned(ui, &loaded, &plan_opts)?;
    super::sources::remember(&mut ledger, &loaded, &plan_opts.sources)?;
    // The key that seals cached verdicts: the ledger's, never in a child's reach.
    let verdict_key = ledger.verdict_key()?;
    confined(&plan)?;

    // The run's view of the ledger is taken now: a result another run records after this
    // moment (while this one plans) is one this run will not repeat.
    let started_at = crate::support::clock::now();
    let standing =
        Standing::read(&ledger, &loaded.manifest.name)?.with_pulls(&loaded, &plan, Some(&ledger));
    let dead_leftovers = settle_plan(ui, &mut plan, &ledger, &standing, &loaded, &opts, workers);

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
        spares: crate::engine::item::Spares::new(&plan),
        dead_leftovers: std::sync::Mutex::new(dead_leftovers),
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

/// The plan as this run will drain it: what a run killed mid-item left in a repository's own
/// checkout, proven its own, taken over (saved and reset by this run, rather than its items held
/// `dirty-tree`: by repository, that run); the ledger's standing laid over it — against a
/// shared ledger, an item another runner claimed is left to admission, which waits for that
/// runner's repository lock and takes the claim over if its runner stops —; work branches
/// moved on their remote taken; and the order estimated.
fn settle_plan(
    ui: &Ui,
    plan: &mut Plan,
    ledger: &Store,
    standing: &Standing,
    loaded: &LoadedManifest,
    opts: &Options,
    workers: u32,
) -> HashMap<String, String> {
    let dead = dead_leftovers(ui, plan, ledger);
    standing.lay_over(plan, opts.rerun, !ledger.is_shared());
    take_moved_heads(loaded, plan);
    if let Err(e) = estimate(plan, workers, Some(ledger)) {
        ui.warn(format_args!("items start in plan order: {e}"));
    }
    dead
}

/// The repositories whose own checkout holds only what a run killed mid-item left there
/// (`engine::inplace`), said, with that run: their items held `dirty-tree` are pending.
fn dead_leftovers(ui: &Ui, plan: &mut Plan, ledger: &Store) -> HashMap<String, String> {
    let proven = crate::engine::inplace::adopt(
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

/// How items are confined: refused (exit 2) where `required` cannot be had, what is missing
/// said where `best-effort` goes without it.
fn sandbox(
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

/// Plan a loaded manifest, its warnings said; `Err` says why it cannot be planned (a manifest
/// diagnostic, as a load error is).
pub fn planned(
    ui: &Ui,
    loaded: &LoadedManifest,
    opts: &crate::plan::PlanOptions,
) -> Result<crate::plan::Plan, Failure> {
    match crate::plan::plan(loaded, opts) {
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

/// A review round whose pull request's branch someone else pushed to starts from what they
/// pushed: the local branch is moved forward to the remote head (never the remote rewound); one
/// that cannot be is held, saying why.
fn take_moved_heads(loaded: &LoadedManifest, plan: &mut Plan) {
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
        match crate::git::take_remote_head(dir, &remote, branch) {
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
fn published(plan: &Plan, ledger: &Store) -> crate::ledger::Result<HashMap<usize, String>> {
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

/// A runner started by a worker works only inside that worker's repository
/// (`RUNNER_REPO_PATH`): a plan reaching outside it is refused.
fn confined(plan: &Plan) -> Result<(), Failure> {
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
