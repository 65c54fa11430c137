//! `runner apply M`: clone what is missing, plan, drain, report, and exit with the code the README documents.

use super::{EXIT_FAILURES, EXIT_INTERNAL, EXIT_INVALID, EXIT_OK, EXIT_STALLED, Ui, load};
use crate::cli::ApplyArgs;
use crate::engine::{self, RunCx, config};
use crate::engine::{ClaimAnswer, RepoLock, RunSink};
use crate::events::Event;
use crate::ledger::sqlite::SqliteLedger;
use crate::ledger::store::Store;
use crate::ledger::{Claim, Holder, ItemKey, Ledger, RunRow};
use crate::manifest::{LoadedManifest, SourceKind};
use crate::plan::history;
use crate::plan::{self, PlanOptions, repos};
use crate::process::redact::Redactor;
use crate::report::{self, ReportBuilder};
use crate::vocab::{ItemOutcome, RunEnding};
use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;

pub fn run(ui: &Ui, args: &ApplyArgs) -> i32 {
    let loaded = match load(ui, &args.manifest) {
        Ok(l) => l,
        Err(code) => return code,
    };
    // A nested run inherits its parent's ceiling (README, "Environment").
    let mut workers = plan::effective_workers(&loaded, args.workers);
    if let Some(j) = args.workers
        && j > workers
    {
        ui.warn(format_args!(
            "`-j {j}` is above the manifest's bound; running at most {workers} at once (`-j` only lowers `capacity.workers`)"
        ));
    }
    // Inside a worker or gate the parent's ceiling holds, and it fails closed: a ceiling that
    // cannot be read is no licence to run unbounded, or anywhere.
    let nested = std::env::var_os("RUNNER_ROLE").is_some();
    match std::env::var("RUNNER_MAX_WORKERS") {
        Ok(v) => match v.parse::<u32>() {
            Ok(max) => workers = workers.min(max.max(1)),
            Err(_) => {
                ui.error(format_args!(
                    "`RUNNER_MAX_WORKERS` is `{v}`, not a number: the ceiling a nested run inherits cannot be read"
                ));
                return EXIT_INVALID;
            }
        },
        Err(_) if nested => {
            ui.error("`RUNNER_ROLE` is set but `RUNNER_MAX_WORKERS` is not: the ceiling a nested run inherits cannot be read");
            return EXIT_INVALID;
        }
        Err(_) => {}
    }
    if nested && std::env::var_os("RUNNER_REPO_PATH").is_none() {
        ui.error("`RUNNER_ROLE` is set but `RUNNER_REPO_PATH` is not: the repository a nested run is confined to is unknown");
        return EXIT_INVALID;
    }
    let clone_errors = clone_missing(&loaded, args.shard);
    let opts = PlanOptions {
        only: args.filter.only.clone(),
        items: args.filter.items.clone(),
        shard: args.shard,
        fresh: args.fresh,
    };
    let state_path = super::state_path(&args.state, Some(&args.manifest));
    let mut ledger = match Store::open(&state_path) {
        Ok(l) => l,
        Err(e) => {
            ui.error(e);
            return EXIT_INTERNAL;
        }
    };
    let Some(mut plan) = super::plan(ui, &loaded, &opts) else {
        return EXIT_INVALID;
    };
    // The key that seals cached verdicts: the ledger's, never in a child's reach.
    let verdict_key = match ledger.verdict_key() {
        Ok(k) => k,
        Err(e) => {
            ui.error(e);
            return EXIT_INTERNAL;
        }
    };
    if std::env::var_os("RUNNER_ROLE").is_some()
        && let Ok(parent) = std::env::var("RUNNER_REPO_PATH")
    {
        let parent = PathBuf::from(parent);
        if let Some(r) = plan
            .repositories
            .iter()
            .find(|r| !r.path.starts_with(&parent))
        {
            ui.error(format_args!(
                "this runner was started by a worker in `{}` and may not work outside it, but repository `{}` is at `{}`",
                parent.display(),
                r.name,
                r.path.display()
            ));
            return EXIT_INVALID;
        }
    }

    // The run's view of the ledger is taken now: a result another run records after this
    // moment (while this one plans) is one this run will not repeat.
    let started_at = crate::support::clock::now();
    let past = match ledger.past_outcomes(&loaded.manifest.name) {
        Ok(p) => p.into_iter().collect(),
        Err(e) => {
            ui.error(e);
            return EXIT_INTERNAL;
        }
    };
    let paused = match ledger.paused(&loaded.manifest.name) {
        Ok(p) => p,
        Err(e) => {
            ui.error(e);
            return EXIT_INTERNAL;
        }
    };
    let quarantined = match ledger.quarantines() {
        Ok(q) => q,
        Err(e) => {
            ui.error(e);
            return EXIT_INTERNAL;
        }
    };
    let claims = match ledger.live_claims_of(&loaded.manifest.name) {
        Ok(c) => c,
        Err(e) => {
            ui.error(e);
            return EXIT_INTERNAL;
        }
    };
    history::apply(&mut plan, &past, args.rerun, paused.as_deref());
    let quarantined = super::quarantines_of(&plan, quarantined);
    history::quarantine(&mut plan, &quarantined);
    // Against a shared ledger, an item another runner claimed is left to admission, which waits
    // for that runner's repository lock and takes the claim over if its runner stops.
    if !ledger.is_shared() {
        history::taken(&mut plan, &claims);
    }
    // The order items start in: from what they took in recent runs.
    match ledger.item_durations(&loaded.manifest.name, super::HISTORY_RUNS) {
        Ok(d) => crate::plan::schedule::estimate(&mut plan, &d),
        Err(e) => ui.warn(format_args!("items start in plan order: {e}")),
    }

    let run_id = new_run_id();
    // How each item's processes are kept together: a cgroup each where the machine allows it.
    let contained = match containment(&loaded, &run_id) {
        Ok(c) => Arc::new(c),
        Err(e) => {
            ui.error(format_args!("{e}; nothing ran"));
            return EXIT_INVALID;
        }
    };
    tracing::info!(containment = %contained.describe(), "processes are contained");
    let reports_dir = super::reports_dir(&loaded, args.report_dir.as_deref());
    let run_dir = reports_dir.join(&run_id);
    if let Err(e) = std::fs::create_dir_all(&run_dir) {
        ui.error(format_args!(
            "cannot create the report folder `{}`: {e}",
            run_dir.display()
        ));
        return EXIT_INTERNAL;
    }
    let redactor = Arc::new(redactor(&loaded));
    let workspace = repos::workspace_dir(&loaded);
    // Bars on an interactive terminal only (NO_COLOR takes the colour out, not the bars).
    let fancy = !args.no_progress
        && std::io::stderr().is_terminal()
        && std::env::var("TERM").map_or(true, |t| t != "dumb")
        && std::env::var_os("CI").is_none();
    let keys: Vec<ItemKey> = plan
        .items
        .iter()
        .map(|it| history::item_key(&loaded.manifest.name, it))
        .collect();
    let row = RunRow {
        id: run_id.clone(),
        manifest: loaded.manifest.name.clone(),
        manifest_path: loaded.path.display().to_string(),
        manifest_sha256: loaded.sha256.clone(),
        holder: Holder::this_process(),
        started_by: super::who("apply"),
        started_at: started_at.clone(),
        ended_at: None,
        ending: None,
        cause: None,
        stop_requested_by: None,
        stop_reason: None,
        containment: Some(contained.describe()),
        lapsed: false,
    };
    let plan_json = match serde_json::to_string(&plan) {
        Ok(j) => j,
        Err(e) => {
            ui.error(format_args!("cannot encode the plan for the ledger: {e}"));
            return EXIT_INTERNAL;
        }
    };
    if let Err(e) = ledger.begin_run(&row, &plan_json, workers, &run_dir.display().to_string()) {
        ui.error(e);
        return EXIT_INTERNAL;
    }
    // The event stream: stdout (`-`), or a file created now (an error before anything runs).
    let events: Option<EventsOut> = match args.events.as_deref() {
        None => None,
        Some(p) if p == std::path::Path::new("-") => {
            if args.json {
                ui.error("`--events -` and `--json` both want stdout: give `--events` a file");
                return EXIT_INVALID;
            }
            Some(EventsOut::Stdout)
        }
        Some(p) => match std::fs::File::create(p) {
            Ok(f) => Some(EventsOut::File(std::io::BufWriter::new(f), p.to_path_buf())),
            Err(e) => {
                ui.error(format_args!(
                    "cannot create the events file `{}`: {e}",
                    p.display()
                ));
                return EXIT_INVALID;
            }
        },
    };
    let mut sink = ApplySink {
        events,
        events_seq: 0,
        events_failed: None,
        log_failed: None,
        progress: crate::ui::Progress::new(&plan, fancy, ui.color),
        builder: ReportBuilder::new(&plan, &run_id, &run_dir, workers, &started_at),
        ledger,
        identities: plan
            .repositories
            .iter()
            .map(|r| {
                let identity = match r.source {
                    crate::manifest::SourceKind::Url => r.location.clone(),
                    _ => r.name.clone(),
                };
                (r.name.clone(), identity)
            })
            .collect(),
        run_id: run_id.clone(),
        keys,
        holder: row.holder.clone(),
        failure: None,
    };
    // Holds decided at plan time are the run's results too: recorded (so `status` shows them),
    // in the report and in the event stream, as the engine's events are.
    for (i, it) in plan.items.iter().enumerate() {
        if it.state != crate::plan::ItemState::Held {
            continue;
        }
        sink.record(&Event::ItemFinished {
            item: i,
            outcome: ItemOutcome::Held,
            reason: it.reason.map(|r| r.as_str().to_string()),
            cause: it.detail.clone(),
        });
        if let Some(e) = &sink.failure {
            ui.error(e);
            return EXIT_INTERNAL;
        }
    }
    // Items run again after a halt or failure: the previous run's last word on them.
    let mut previous_feedback = HashMap::new();
    for (i, it) in plan.items.iter().enumerate() {
        if it.state != crate::plan::ItemState::Pending {
            continue;
        }
        let Some(p) = past.get(&sink.keys[i]) else {
            continue;
        };
        if p.outcome == ItemOutcome::Completed {
            continue;
        }
        if let Ok(Some(dir)) = sink.ledger.run_dir(&p.run_id)
            && let Some(f) = last_feedback(&PathBuf::from(dir), &it.repo, &it.id)
        {
            previous_feedback.insert(i, f);
        }
    }
    // Items that will not run for a reason the user can clear: named before the drain starts.
    let held: Vec<String> = plan
        .items
        .iter()
        .filter(|it| it.state == crate::plan::ItemState::Held)
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
    // Pull requests earlier runs opened for these items: publishing updates them.
    let published = match sink.ledger.publications_of(&loaded.manifest.name) {
        Ok(p) => plan
            .items
            .iter()
            .enumerate()
            .filter_map(|(i, it)| {
                p.get(&(it.repo.clone(), it.id.clone()))
                    .and_then(|(_, _, url)| url.clone())
                    .map(|u| (i, u))
            })
            .collect(),
        Err(e) => {
            ui.error(e);
            return EXIT_INTERNAL;
        }
    };
    let health = engine::health::Health::new(
        loaded
            .manifest
            .models
            .as_ref()
            .map_or(crate::manifest::DEFAULT_THRESHOLD, |m| m.threshold()),
        engine::health::WINDOW,
        engine::health::QUIET,
    );
    // Where each repository is, for annotations naming a file in it.
    let repo_paths: HashMap<String, PathBuf> = plan
        .repositories
        .iter()
        .map(|r| (r.name.clone(), r.path.clone()))
        .collect();
    let gate_timeouts = auto_gate_timeouts(ui, &loaded, &sink.ledger);
    let cx = Arc::new(RunCx {
        gate_timeouts,
        loaded,
        plan,
        run_id: run_id.clone(),
        token: uuid::Uuid::new_v4().simple().to_string(),
        run_dir: run_dir.clone(),
        verdicts: engine::verdicts::Verdicts::new(&workspace, !args.no_cache, &verdict_key),
        baselines: std::sync::Mutex::new(HashMap::new()),
        workspace,
        workers,
        wait_for_locks: args.wait_for_locks,
        redactor,
        clone_errors,
        paused: paused.clone(),
        previous_feedback,
        contained: contained.clone(),
        health: std::sync::Mutex::new(health),
        probe_models: !args.no_probe,
        published,
        parent_token: std::env::var_os("RUNNER_ROLE")
            .and_then(|_| std::env::var("RUNNER_TOKEN").ok()),
    });

    crate::process::become_subreaper();
    // One event loop on this thread; git questions on a blocking pool whose threads are named
    // for what they are and end soon after their work.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name("runner-blocking")
        .thread_keep_alive(std::time::Duration::from_secs(1))
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            ui.error(format_args!("cannot start the runtime: {e}"));
            return EXIT_INTERNAL;
        }
    };
    let end = crate::support::blocking::as_event_loop(|| {
        runtime.block_on(engine::drain(cx.clone(), &mut sink))
    });
    if let Err(e) = sink
        .ledger
        .end_run(
            &run_id,
            end.ending,
            end.cause.as_deref(),
            &crate::support::clock::now(),
        )
        .and_then(|()| sink.ledger.checkpoint())
    {
        ui.error(e);
        sink.failure
            .get_or_insert_with(|| "the ledger failed".into());
    }
    if let Some(e) = sink.events_failed.take() {
        ui.error(&e);
        sink.failure.get_or_insert(e);
    }
    if let Some(e) = sink.log_failed.take() {
        sink.failure.get_or_insert(e);
    }
    // `reports.formats`, exactly; every one by default.
    let listed = cx
        .loaded
        .manifest
        .reports
        .as_ref()
        .and_then(|r| r.formats.clone());
    let formats = match &listed {
        None => report::Formats::default(),
        Some(f) => report::Formats {
            json: f.contains(&crate::manifest::ReportFormat::Json),
            markdown: f.contains(&crate::manifest::ReportFormat::Markdown),
            junit: f.contains(&crate::manifest::ReportFormat::Junit),
            html: f.contains(&crate::manifest::ReportFormat::Html),
        },
    };
    let report = sink.builder.report();
    for s in &report.suspect_gates {
        ui.warn(format_args!(
            "suspected misconfigured gate: {}",
            report::suspect_line(s)
        ));
    }
    // A report that fails to write never changes an item's verdict, and is never a silent
    // success: the run exits 4.
    if let Err(e) = report::write(report, &run_dir, formats) {
        ui.error(format_args!(
            "the report of run `{run_id}` was not written: {e}"
        ));
        sink.failure
            .get_or_insert_with(|| "the report could not be written".into());
    } else {
        let shown = if formats.markdown {
            run_dir.join("summary.md")
        } else {
            run_dir.clone()
        };
        eprintln!("runner: report in {}", shown.display());
    }
    if std::env::var("GITHUB_ACTIONS").is_ok_and(|v| v == "true") {
        github_annotations(report, &repo_paths);
    }
    if args.json {
        match serde_json::to_string_pretty(report) {
            Ok(s) => outln!("{s}"),
            Err(e) => ui.error(format_args!("cannot encode the report: {e}")),
        }
    }
    // The run history: what the run came to, then the reports folder's page of runs.
    let totals = super::report::totals_of(report);
    let (code, why) = verdict(
        end.ending,
        end.signal,
        report,
        sink.failure.as_deref(),
        args.standing_holds,
    );
    let last = format!("{} — exit {code}: {why}", report::counts_line(report));
    // Everything the report is needed for is done: its items are let go before the history
    // page reads the ledger, so the two are never in memory together.
    sink.builder.release();
    if let Err(e) = sink.ledger.record_totals(&run_id, &totals) {
        ui.warn(format_args!("the run history was not updated: {e}"));
    } else if let Some(reports) = run_dir.parent() {
        // Retention (`reports.keep`), then the history page of what is kept.
        let keep = super::gc::keep_of(&cx.loaded);
        match super::gc::retain(
            &mut sink.ledger,
            &cx.loaded.manifest.name,
            &keep,
            reports,
            Some(&run_id),
            &sink.keys,
        ) {
            Ok(r) => {
                if !r.runs.is_empty() {
                    tracing::info!(pruned = r.runs.len(), "{}", r.line(&keep));
                }
                for l in &r.left {
                    ui.warn(format_args!("a report folder could not be removed: {l}"));
                }
            }
            Err(e) => ui.warn(format_args!("older runs were not pruned: {e}")),
        }
        super::gc::prune_verdicts(&cx.loaded, &keep);
        if formats.html
            && let Err(e) =
                super::report::write_history(&sink.ledger, &cx.loaded.manifest.name, reports)
        {
            ui.warn(format_args!("the run history page was not written: {e}"));
        }
    }
    if let Some(f) = &sink.failure {
        ui.error(f);
    }
    // The last line: what happened, and why the exit code is what it is.
    eprintln!("runner: {last}");
    code
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
        match engine::config::auto_timeout(samples) {
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

/// `apply --loop`: rounds of plan-and-drain until a plan finds nothing pending. A round that
/// ends other than drained (a stall, a cancel, a paused manifest, a spent budget, runner's own
/// failure) ends the loop with its exit code; otherwise the loop's exit code is the last
/// round's (0, or 1 when an item halted, failed or was held).
pub fn run_loop(ui: &Ui, args: &ApplyArgs) -> i32 {
    let max = args.max_rounds.unwrap_or(100).max(1);
    let mut round_args = args.clone();
    let mut summary = LoopSummary::start();
    let (mut last, mut rounds_run) = (EXIT_OK, 0u32);
    let ending = loop {
        let round = rounds_run + 1;
        if round > max {
            eprintln!("runner: loop: stopped after {max} rounds (`--max-rounds`) — exit {last}");
            break "max-rounds".to_string();
        }
        let pending = match pending_now(ui, &round_args) {
            Ok(n) => n,
            Err(c) => return c,
        };
        if pending == 0 {
            eprintln!(
                "runner: loop: round {round} found nothing pending; {rounds_run} round{} drained — exit {last}",
                if rounds_run == 1 { "" } else { "s" }
            );
            break if rounds_run == 0 {
                "nothing-found".to_string()
            } else {
                "drained".to_string()
            };
        }
        eprintln!("runner: loop: round {round}, {pending} pending");
        last = run(ui, &round_args);
        rounds_run += 1;
        summary.add_round(args, last);
        if !matches!(last, EXIT_OK | EXIT_FAILURES) {
            eprintln!("runner: loop: round {round} ended the loop — exit {last}");
            break summary
                .rounds
                .last()
                .and_then(|r| r.ending.clone())
                .unwrap_or_else(|| "failed".to_string());
        }
        // `--rerun` (and `--fresh`) is for the first round: later rounds take what is new.
        round_args.rerun = None;
        round_args.fresh = false;
        if let Some(d) = args.interval {
            std::thread::sleep(d);
        }
    };
    summary.finish(ui, args, ending, last);
    last
}

/// What a `--loop` came to, over its rounds: `<reports>/loop.json` and `loop.md`, rewritten by
/// each loop.
#[derive(serde::Serialize)]
struct LoopSummary {
    schema: &'static str,
    started_at: String,
    ended_at: Option<String>,
    /// `drained` (rounds ran, then a look found nothing), `nothing-found` (no round ran),
    /// `max-rounds`, or the ending of the round that ended the loop (`stalled`, `cancelled`, …).
    ending: Option<String>,
    exit: i32,
    rounds: Vec<LoopRound>,
    /// Items per outcome over every round.
    counts: std::collections::BTreeMap<ItemOutcome, usize>,
}

#[derive(serde::Serialize)]
struct LoopRound {
    run_id: Option<String>,
    ending: Option<String>,
    exit: i32,
    counts: std::collections::BTreeMap<ItemOutcome, usize>,
    duration_ms: Option<u64>,
}

impl LoopSummary {
    fn start() -> Self {
        LoopSummary {
            schema: "runner.loop/v1",
            started_at: crate::support::clock::now(),
            ended_at: None,
            ending: None,
            exit: EXIT_OK,
            rounds: Vec::new(),
            counts: Default::default(),
        }
    }

    /// The round that just ran, as the ledger recorded it.
    fn add_round(&mut self, args: &ApplyArgs, exit: i32) {
        let path = super::state_path(&args.state, Some(&args.manifest));
        let name = crate::manifest::load_file(&args.manifest)
            .ok()
            .map(|l| l.manifest.name);
        let latest = name.and_then(|n| {
            SqliteLedger::open_snapshot(&path)
                .ok()
                .flatten()?
                .run_history(&n, 1)
                .ok()?
                .into_iter()
                .next()
        });
        let (run_id, ending, totals) = match latest {
            Some(h) => (Some(h.run.id), h.run.ending, h.totals.unwrap_or_default()),
            None => (None, None, Default::default()),
        };
        for (o, n) in &totals.counts {
            *self.counts.entry(*o).or_insert(0) += n;
        }
        self.rounds.push(LoopRound {
            run_id,
            ending,
            exit,
            counts: totals.counts,
            duration_ms: totals.duration_ms,
        });
    }

    fn finish(&mut self, ui: &Ui, args: &ApplyArgs, ending: String, exit: i32) {
        self.ended_at = Some(crate::support::clock::now());
        self.ending = Some(ending);
        self.exit = exit;
        let Ok(loaded) = crate::manifest::load_file(&args.manifest) else {
            return;
        };
        let reports = super::reports_dir(&loaded, args.report_dir.as_deref());
        let mut md = format!(
            "# runner: `{}` — loop {}\n\n{} round{} · started {} · ended {} · exit {exit}\n\n",
            loaded.manifest.name,
            self.ending.as_deref().unwrap_or_default(),
            self.rounds.len(),
            if self.rounds.len() == 1 { "" } else { "s" },
            self.started_at,
            self.ended_at.as_deref().unwrap_or_default(),
        );
        if !self.rounds.is_empty() {
            md.push_str("| round | run | ending | items |\n|---|---|---|---|\n");
            for (i, r) in self.rounds.iter().enumerate() {
                let counts = report::nonzero_counts(&r.counts);
                md.push_str(&format!(
                    "| {} | `{}` | {} | {} |\n",
                    i + 1,
                    r.run_id.as_deref().unwrap_or("-"),
                    r.ending.as_deref().unwrap_or("-"),
                    counts.join(", ")
                ));
            }
        }
        let written = std::fs::create_dir_all(&reports)
            .and_then(|()| serde_json::to_string_pretty(self).map_err(std::io::Error::other))
            .and_then(|json| {
                crate::support::fs::write_atomic(
                    &reports.join("loop.json"),
                    (json + "\n").as_bytes(),
                )
            })
            .and_then(|()| {
                crate::support::fs::write_atomic(&reports.join("loop.md"), md.as_bytes())
            });
        match written {
            Ok(()) => eprintln!(
                "runner: loop: summary in {}",
                reports.join("loop.md").display()
            ),
            Err(e) => ui.warn(format_args!(
                "the loop's summary was not written into `{}`: {e}",
                reports.display()
            )),
        }
    }
}

/// How many items `apply` with `args` would run now, as `plan` shows it.
fn pending_now(ui: &Ui, args: &ApplyArgs) -> Result<usize, i32> {
    let loaded = load(ui, &args.manifest)?;
    let opts = PlanOptions {
        only: args.filter.only.clone(),
        items: args.filter.items.clone(),
        shard: args.shard,
        fresh: args.fresh,
    };
    let Some(mut plan) = super::plan(ui, &loaded, &opts) else {
        return Err(EXIT_INVALID);
    };
    let path = super::state_path(&args.state, Some(&args.manifest));
    let opened = if crate::ledger::pg::is_url(&path.to_string_lossy()) {
        Store::open(&path).map(Some)
    } else {
        SqliteLedger::open_snapshot(&path).map(|l| l.map(Store::Sqlite))
    };
    match opened {
        Ok(Some(ledger)) => {
            let name = &loaded.manifest.name;
            let read = (|| -> crate::ledger::Result<()> {
                let past = ledger.past_outcomes(name)?;
                let paused = ledger.paused(name)?;
                history::apply(
                    &mut plan,
                    &past.into_iter().collect(),
                    args.rerun,
                    paused.as_deref(),
                );
                let q = super::quarantines_of(&plan, ledger.quarantines()?);
                history::quarantine(&mut plan, &q);
                history::taken(&mut plan, &ledger.live_claims_of(name)?);
                Ok(())
            })();
            if let Err(e) = read {
                ui.error(e);
                return Err(EXIT_INTERNAL);
            }
        }
        Ok(None) => {}
        Err(e) => {
            ui.error(e);
            return Err(EXIT_INTERNAL);
        }
    }
    Ok(plan
        .items
        .iter()
        .filter(|it| it.state == crate::plan::ItemState::Pending)
        .count())
}

/// GitHub Actions annotations on stderr: an error for each halted or failed item, a warning for
/// each held one, at the file and line its failing output names when that file is in the
/// repository.
fn github_annotations(report: &report::Report, repos: &HashMap<String, PathBuf>) {
    // Workflow-command escaping of a property value and of a message.
    let data = |s: &str| {
        s.replace('%', "%25")
            .replace('\r', "%0D")
            .replace('\n', "%0A")
    };
    let prop = |s: &str| data(s).replace(':', "%3A").replace(',', "%2C");
    let place = regex::Regex::new(r"([A-Za-z0-9_./-]+\.[A-Za-z0-9]+):([0-9]+)").ok();
    let mut lines = String::new();
    for it in &report.items {
        let level = match it.outcome {
            ItemOutcome::Halted | ItemOutcome::Failed => "error",
            ItemOutcome::Held => "warning",
            _ => continue,
        };
        let tail = it
            .attempts
            .last()
            .map(|a| {
                a.gates
                    .iter()
                    .map(|g| g.output_tail.as_str())
                    .chain(a.worker.iter().map(|w| w.output_tail.as_str()))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default();
        let mut props = vec![format!(
            "title={}",
            prop(&format!(
                "runner: {}/{} {}",
                it.repo,
                it.id,
                it.outcome.as_str()
            ))
        )];
        if let (Some(re), Some(root)) = (&place, repos.get(&it.repo))
            && let Some((file, line)) = re.captures_iter(&tail).find_map(|c| {
                let f = c.get(1)?.as_str().trim_start_matches("./");
                let line = c.get(2)?.as_str().to_string();
                root.join(f).is_file().then(|| (f.to_string(), line))
            })
        {
            // Relative to the workflow's workspace (or here), as GitHub expects.
            let full = root.join(&file);
            let base = std::env::var_os("GITHUB_WORKSPACE")
                .map(PathBuf::from)
                .or_else(|| std::env::current_dir().ok());
            let shown = base
                .and_then(|b| full.strip_prefix(b).ok().map(std::path::Path::to_path_buf))
                .unwrap_or(full);
            props.push(format!("file={}", prop(&shown.display().to_string())));
            props.push(format!("line={line}"));
        }
        let message = match (&it.reason, &it.cause) {
            (Some(r), Some(c)) => format!("{r}: {c}"),
            (Some(r), None) => r.clone(),
            (None, Some(c)) => c.clone(),
            (None, None) => it.outcome.as_str().to_string(),
        };
        lines.push_str(&format!(
            "::{level} {}::{}\n",
            props.join(","),
            data(&message)
        ));
    }
    if !lines.is_empty() {
        use std::io::Write;
        let _ = std::io::stderr().write_all(lines.as_bytes());
    }
}

/// Where `--events` lines go.
enum EventsOut {
    Stdout,
    File(std::io::BufWriter<std::fs::File>, PathBuf),
}

/// The run's consumers and durable decisions: progress, report, ledger.
struct ApplySink {
    events: Option<EventsOut>,
    events_seq: u64,
    /// Why the event stream stopped, when it could not be written.
    events_failed: Option<String>,
    /// The first log that could not be written whole: told at the end (exit 4), without
    /// stopping the drain or changing any item's verdict.
    log_failed: Option<String>,
    progress: crate::ui::Progress,
    builder: ReportBuilder,
    ledger: Store,
    /// Each repository's identity across machines (its url, else its name), by name.
    identities: HashMap<String, String>,
    run_id: String,
    keys: Vec<ItemKey>,
    holder: Holder,
    /// The first ledger error; the engine stops admitting once it is set.
    failure: Option<String>,
}

impl ApplySink {
    fn fail(&mut self, e: impl std::fmt::Display) {
        if self.failure.is_none() {
            self.failure = Some(format!("runner cannot record its work: {e}"));
        }
    }
}

fn item_of(ev: &Event) -> Option<usize> {
    match ev {
        Event::ItemStarted { item }
        | Event::AttemptStarted { item, .. }
        | Event::WorkerFinished { item, .. }
        | Event::GateStarted { item, .. }
        | Event::GateFinished { item, .. }
        | Event::GateBaseline { item, .. }
        | Event::Work { item, .. }
        | Event::Worktree { item, .. }
        | Event::Reaped { item, .. }
        | Event::Leftovers { item, .. }
        | Event::Resting { item, .. }
        | Event::Usage { item, .. }
        | Event::UsageUnknown { item, .. }
        | Event::SetupFinished { item, .. }
        | Event::ModelDemoted { item, .. }
        | Event::ModelRefused { item, .. }
        | Event::Published { item, .. }
        | Event::LeaseWaited { item, .. }
        | Event::ResourceWaiting { item, .. }
        | Event::ResourceAcquired { item, .. }
        | Event::ItemFinished { item, .. } => Some(*item),
        Event::RunStarted { .. } | Event::RunEnded { .. } | Event::Probed { .. } => None,
    }
}

impl ApplySink {
    /// An event into the report, the event stream and the ledger.
    fn record(&mut self, ev: &Event) {
        let at = crate::support::clock::now();
        self.builder.on(ev, &at);
        let key = item_of(ev).and_then(|i| self.keys.get(i));
        if self.log_failed.is_none()
            && let Some((_, n, what, e)) = ev.log_error()
        {
            self.log_failed = Some(format!(
                "a log could not be written whole ({}/{} attempt {n}, the {what}'s): {e}",
                key.map_or("", |k| k.repo.as_str()),
                key.map_or("", |k| k.item.as_str()),
            ));
        }
        if self.events.is_some() {
            self.events_seq += 1;
            let line = crate::events::EventLine {
                schema: crate::events::EVENTS_SCHEMA.into(),
                run_id: self.run_id.clone(),
                seq: self.events_seq,
                at: at.clone(),
                repo: key.map(|k| k.repo.clone()),
                item_id: key.map(|k| k.item.clone()),
                event: ev.clone(),
            };
            let written = serde_json::to_string(&line)
                .map_err(std::io::Error::other)
                .and_then(|json| match &mut self.events {
                    Some(EventsOut::Stdout) => {
                        use std::io::Write;
                        let mut out = std::io::stdout().lock();
                        writeln!(out, "{json}").and_then(|()| out.flush())
                    }
                    Some(EventsOut::File(f, _)) => {
                        use std::io::Write;
                        writeln!(f, "{json}").and_then(|()| f.flush())
                    }
                    None => Ok(()),
                });
            if let Err(e) = written {
                let whereto = match &self.events {
                    Some(EventsOut::File(_, p)) => format!("`{}`", p.display()),
                    _ => "stdout".into(),
                };
                // A closed stdout ends the stream quietly; a file that cannot be written is a
                // failure of runner's, told at the end (exit 4), without stopping the drain.
                if e.kind() != std::io::ErrorKind::BrokenPipe {
                    self.events_failed =
                        Some(format!("the event stream to {whereto} stopped: {e}"));
                }
                self.events = None;
            }
        }
        if let Err(e) = self.ledger.event(&self.run_id, key, ev, &at) {
            self.fail(e);
        }
        // A rest or a wait for a shared resource can last minutes: recorded at once, so that
        // `status` shows it.
        if matches!(ev, Event::Resting { .. } | Event::ResourceWaiting { .. })
            && let Err(e) = self.ledger.flush_all()
        {
            self.fail(e);
        }
    }
}

impl RunSink for ApplySink {
    fn event(&mut self, ev: &Event) {
        self.progress.on(ev);
        self.record(ev);
    }

    fn claim(&mut self, item: usize) -> ClaimAnswer {
        let Some(key) = self.keys.get(item).cloned() else {
            return ClaimAnswer::Failed(format!("item {item} is not in the plan"));
        };
        let asked = std::time::Instant::now();
        let answer = self.ledger.claim(&key, &self.run_id, &self.holder);
        // How long claims take: what a shared ledger costs each item (`RUNNER_LOG=debug`).
        tracing::debug!(
            claim_us = asked.elapsed().as_micros() as u64,
            repo = %key.repo,
            item = %key.item,
            "claim answered"
        );
        match answer {
            Ok(Claim::Claimed) => ClaimAnswer::Claimed,
            Ok(Claim::HeldBy { run_id }) => ClaimAnswer::Taken(run_id),
            Ok(Claim::AlreadyDone { run_id, outcome }) => ClaimAnswer::Done {
                run: run_id,
                outcome,
            },
            Ok(Claim::Paused(by)) => ClaimAnswer::Paused(by),
            Err(e) => {
                let why = e.to_string();
                self.fail(e);
                ClaimAnswer::Failed(why)
            }
        }
    }

    fn ended(&mut self, run_id: &str) -> bool {
        self.ledger
            .run(run_id)
            .ok()
            .flatten()
            .is_some_and(|r| r.status() == crate::ledger::RunStatus::Ended)
    }

    fn live_run(&mut self, run_id: &str) -> bool {
        run_id != self.run_id && self.ledger.run_is_live(run_id).unwrap_or(false)
    }

    fn commit_results(&mut self) {
        if let Err(e) = self.ledger.commit_results() {
            self.fail(e);
        }
    }

    fn stop_requested(&mut self) -> Option<String> {
        let run = self.ledger.run(&self.run_id).ok().flatten()?;
        let by = run.stop_requested_by?;
        Some(match run.stop_reason {
            Some(r) => format!("{by}: {r}"),
            None => by,
        })
    }

    fn failure(&self) -> Option<String> {
        self.failure.clone()
    }

    fn polls_stop(&self) -> bool {
        self.ledger.is_shared()
    }

    fn lock_repo(&mut self, repo: &str) -> Result<RepoLock, String> {
        if !self.ledger.is_shared() {
            return Ok(RepoLock::NoSharedLock);
        }
        let identity = self.identities.get(repo).map_or(repo, String::as_str);
        match self.ledger.try_lock_repo(identity) {
            Ok(true) => Ok(RepoLock::Held),
            Ok(false) => Ok(RepoLock::Busy),
            Err(e) => {
                let why = e.to_string();
                self.fail(e);
                Err(why)
            }
        }
    }

    fn unlock_repo(&mut self, repo: &str) {
        let identity = self.identities.get(repo).map_or(repo, String::as_str);
        if let Err(e) = self.ledger.unlock_repo(identity) {
            self.fail(e);
        }
    }

    fn quarantine(&mut self, repo: &str, path: &std::path::Path, reason: &str) {
        let r = self.ledger.quarantine(
            &path.display().to_string(),
            &self.run_id,
            &format!("repository `{repo}`: {reason}"),
            &crate::support::clock::now(),
        );
        if let Err(e) = r {
            self.fail(e);
        }
    }
}

/// The last feedback file an earlier run wrote for an item (`logs/<repo>/<item>/<n>-feedback.txt`
/// under its report folder).
fn last_feedback(run_dir: &std::path::Path, repo: &str, item: &str) -> Option<PathBuf> {
    let dir = run_dir.join("logs").join(repo).join(item);
    std::fs::read_dir(&dir)
        .ok()?
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let n: u32 = name.strip_suffix("-feedback.txt")?.parse().ok()?;
            Some((n, dir.join(name)))
        })
        .max_by_key(|(n, _)| *n)
        .map(|(_, p)| p)
}

/// The exit code of a run, and its reason in words.
fn verdict(
    ending: RunEnding,
    signal: Option<i32>,
    report: &report::Report,
    failure: Option<&str>,
    standing: crate::cli::StandingHolds,
) -> (i32, String) {
    if let Some(f) = failure {
        return (EXIT_INTERNAL, f.to_string());
    }
    match ending {
        RunEnding::Cancelled => {
            let sig = signal.unwrap_or(libc::SIGINT);
            // The cause names the sender: `cancelled by pid 4242 (…) (SIGTERM)`.
            let why = report
                .cause
                .clone()
                .unwrap_or_else(|| format!("cancelled by {}", engine::signal_name(sig)));
            (128 + sig, why)
        }
        RunEnding::Stalled => (EXIT_STALLED, "the run stalled".into()),
        RunEnding::Budget => (
            super::EXIT_BUDGET,
            format!(
                "the budget was spent ({})",
                report.cause.as_deref().unwrap_or("no cost given")
            ),
        ),
        RunEnding::Refused => (
            super::EXIT_REFUSED,
            format!(
                "the provider refused the models ({}); fix the key, and the next run takes the held items",
                report.cause.as_deref().unwrap_or("no message given")
            ),
        ),
        RunEnding::Failed => (EXIT_INTERNAL, "runner could not continue".into()),
        RunEnding::Paused => (
            EXIT_FAILURES,
            format!(
                "the manifest is paused ({}); `runner resume` lifts it",
                report.cause.as_deref().unwrap_or("no reason given")
            ),
        ),
        RunEnding::NothingFound | RunEnding::Drained => {
            let bad = report.items.iter().any(|i| {
                matches!(
                    i.outcome,
                    ItemOutcome::Halted | ItemOutcome::Failed | ItemOutcome::Held
                )
            });
            let unpublished = report
                .items
                .iter()
                .any(|i| i.publish.as_ref().is_some_and(|p| p.error.is_some()));
            let missing = missing_line(&report.missing_repositories);
            // A run that ran nothing, whose only trouble is items held as before: with
            // `--standing-holds pass` that is nothing new.
            let only_held = !report
                .items
                .iter()
                .any(|i| matches!(i.outcome, ItemOutcome::Halted | ItemOutcome::Failed));
            if bad
                && only_held
                && missing.is_none()
                && standing == crate::cli::StandingHolds::Pass
                && !report::ran_work(report)
            {
                let held = report
                    .items
                    .iter()
                    .filter(|i| i.outcome == ItemOutcome::Held)
                    .count();
                return (
                    EXIT_OK,
                    format!(
                        "nothing new: {held} item{} still held (`--standing-holds pass`)",
                        if held == 1 { "" } else { "s" }
                    ),
                );
            }
            if bad {
                let mut why = "an item halted, failed or was held".to_string();
                if let Some(m) = missing {
                    why.push_str(&format!("; {m}"));
                }
                (EXIT_FAILURES, why)
            } else if let Some(m) = missing {
                (EXIT_FAILURES, m)
            } else if unpublished {
                (
                    EXIT_FAILURES,
                    "a completed item's work could not be published (its branch is kept)".into(),
                )
            } else if ending == RunEnding::NothingFound {
                (EXIT_OK, "no work item was found".into())
            } else if report
                .items
                .iter()
                .any(|i| i.outcome == ItemOutcome::Completed)
            {
                (EXIT_OK, "every pending item completed".into())
            } else {
                (EXIT_OK, "nothing was pending".into())
            }
        }
    }
}

/// `repository `api` was not found` (or `3 repositories were not found: …`), when any was.
fn missing_line(missing: &[crate::plan::MissingRepository]) -> Option<String> {
    match missing {
        [] => None,
        [one] => Some(format!("repository `{}` was not found", one.name)),
        many => Some(format!(
            "{} repositories were not found: {}",
            many.len(),
            many.iter()
                .map(|m| format!("`{}`", m.name))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
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
pub(super) fn containment(
    loaded: &LoadedManifest,
    run_id: &str,
) -> Result<crate::process::cgroup::Contained, String> {
    use crate::process::cgroup::{Contained, Want};
    let limits = loaded
        .manifest
        .worker
        .limits
        .map(|l| l.0)
        .unwrap_or_default();
    Want::parse(std::env::var("RUNNER_CONTAINMENT").ok().as_deref())
        .and_then(|want| Contained::set_up(run_id, want, limits))
}

pub(super) fn redactor(loaded: &LoadedManifest) -> Redactor {
    let mut names: Vec<String> = Vec::new();
    let mut values: Vec<String> = Vec::new();
    let mut worker_envs = vec![&loaded.manifest.worker.env];
    for spec in &loaded.manifest.repositories {
        if let Some(w) = &spec.worker {
            worker_envs.push(&w.env);
        }
    }
    for env in worker_envs {
        values.extend(
            env.iter()
                .filter(|(k, _)| config::looks_secret(k))
                .map(|(_, v)| v.clone()),
        );
    }
    for entry in 0..loaded.manifest.repositories.len() {
        let eff = config::effective(loaded, entry);
        names.extend(eff.secrets.iter().cloned());
        names.extend(
            eff.env_pass
                .iter()
                .filter(|n| config::looks_secret(n))
                .cloned(),
        );
    }
    names.sort();
    names.dedup();
    values.extend(names.iter().filter_map(|n| std::env::var(n).ok()));
    Redactor::new(values)
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
            crate::git::clone(&source, &dest)
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
