//! The verbs that read or steer through the state ledger: `status`, `report`, `cancel`,
//! `pause` and `resume`.

use super::{EXIT_INTERNAL, EXIT_INVALID, EXIT_OK, Ui, state_path, who};
use crate::cli::{CancelArgs, PauseArgs, ReportArgs, ReportFormatArg, StatusArgs, UnlockArgs};
use crate::ledger::sqlite::SqliteLedger;
use crate::ledger::{Ledger, RunRow};
use crate::plan::Plan;
use crate::report::{self, ReportBuilder};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Open the ledger, which must exist: reading commands never create one.
fn open_existing(ui: &Ui, path: &Path) -> Result<SqliteLedger, i32> {
    if !path.exists() {
        ui.error(format_args!(
            "no state ledger at `{}`; give the manifest or `--state`",
            path.display()
        ));
        return Err(EXIT_INVALID);
    }
    SqliteLedger::open(path).map_err(|e| {
        ui.error(e);
        EXIT_INTERNAL
    })
}

/// A looked-up run, or the exit code after saying why there is none.
fn found<T>(
    ui: &Ui,
    r: crate::ledger::Result<Option<T>>,
    run: &str,
    path: &Path,
) -> Result<T, i32> {
    match r {
        Ok(Some(v)) => Ok(v),
        Ok(None) => {
            ui.error(format_args!("no run `{run}` in `{}`", path.display()));
            Err(EXIT_INVALID)
        }
        Err(e) => {
            ui.error(e);
            Err(EXIT_INTERNAL)
        }
    }
}

#[derive(Serialize)]
struct Status {
    ledger: String,
    paused: Option<String>,
    runs: Vec<RunView>,
    running: Vec<Running>,
    held: Vec<Held>,
    quarantined: Vec<Quarantined>,
    leases: Vec<LeaseStatus>,
}

#[derive(Serialize)]
struct Quarantined {
    path: String,
    run_id: String,
    reason: String,
}

#[derive(Serialize)]
struct RunView {
    #[serde(flatten)]
    run: RunRow,
    status: crate::ledger::RunStatus,
}

#[derive(Serialize)]
struct Running {
    run_id: String,
    repo: String,
    item: String,
    pid: u32,
    host: String,
}

#[derive(Serialize)]
struct Held {
    repo: String,
    item: String,
    reason: String,
    cause: Option<String>,
}

#[derive(Serialize)]
struct LeaseStatus {
    repo: String,
    path: PathBuf,
    held: bool,
    /// The holder's record: the current holder while `held`, else the last one.
    holder: Option<crate::lease::Record>,
}

pub fn status(ui: &Ui, args: &StatusArgs) -> i32 {
    let path = state_path(&args.state, args.manifest.as_deref());
    let ledger = match open_existing(ui, &path) {
        Ok(l) => l,
        Err(c) => return c,
    };
    let loaded = match &args.manifest {
        Some(m) => match super::load(ui, m) {
            Ok(l) => Some(l),
            Err(c) => return c,
        },
        None => None,
    };
    let name = loaded.as_ref().map(|l| l.manifest.name.clone());
    let result = (|| -> crate::ledger::Result<Status> {
        let runs = ledger
            .recent_runs(name.as_deref(), 10)?
            .into_iter()
            .map(|r| RunView {
                status: r.status(),
                run: r,
            })
            .collect();
        let running = ledger
            .live_claims()?
            .into_iter()
            .map(|(run_id, repo, item, h)| Running {
                run_id,
                repo,
                item,
                pid: h.pid,
                host: h.host,
            })
            .collect();
        let held = match &name {
            Some(n) => ledger
                .held_items(n)?
                .into_iter()
                .map(|(repo, item, reason, cause)| Held {
                    repo,
                    item,
                    reason,
                    cause,
                })
                .collect(),
            None => Vec::new(),
        };
        let paused = match &name {
            Some(n) => ledger.paused(n)?,
            None => None,
        };
        let mut leases = Vec::new();
        if let Some(l) = &loaded {
            for r in crate::plan::repos::locate(l) {
                if let Ok(p) = crate::git::probe(&r.path) {
                    leases.push(LeaseStatus {
                        repo: r.name,
                        path: r.path,
                        held: crate::lease::is_held(&p.common_dir),
                        holder: crate::lease::read_record(
                            &p.common_dir.join(crate::lease::RECORD_FILE),
                        ),
                    });
                }
            }
        }
        let quarantined = ledger
            .quarantines()?
            .into_iter()
            .map(|(path, run_id, reason)| Quarantined {
                path,
                run_id,
                reason,
            })
            .collect();
        Ok(Status {
            ledger: path.display().to_string(),
            paused,
            runs,
            running,
            held,
            quarantined,
            leases,
        })
    })();
    let st = match result {
        Ok(s) => s,
        Err(e) => {
            ui.error(e);
            return EXIT_INTERNAL;
        }
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&st).unwrap_or_default());
        return EXIT_OK;
    }
    println!("ledger {}", st.ledger);
    if let Some(p) = &st.paused {
        println!("PAUSED: {p}");
    }
    println!("\nruns (newest first):");
    if st.runs.is_empty() {
        println!("  none");
    }
    for r in &st.runs {
        let mut line = format!(
            "  {}  {:<6} {}  started {} by {} (pid {} on {})",
            r.run.id,
            r.status,
            r.run.manifest,
            r.run.started_at,
            r.run.started_by,
            r.run.holder.pid,
            r.run.holder.host
        );
        if let Some(e) = &r.run.ending {
            line.push_str(&format!("  ended {e}"));
        }
        if let Some(c) = &r.run.cause {
            line.push_str(&format!(" — {c}"));
        }
        if let Some(by) = &r.run.stop_requested_by {
            line.push_str(&format!(
                "  [stop asked by {by}{}]",
                r.run
                    .stop_reason
                    .as_ref()
                    .map(|x| format!(": {x}"))
                    .unwrap_or_default()
            ));
        }
        println!("{line}");
    }
    println!("\nrunning items:");
    if st.running.is_empty() {
        println!("  none");
    }
    for r in &st.running {
        println!(
            "  {}/{}  run {} (pid {} on {})",
            r.repo, r.item, r.run_id, r.pid, r.host
        );
    }
    println!("\nquarantined repositories:");
    if st.quarantined.is_empty() {
        println!("  none");
    }
    for q in &st.quarantined {
        println!("  {}  {} (run {})", q.path, q.reason, q.run_id);
    }
    if name.is_some() {
        println!("\nheld items (latest run):");
        if st.held.is_empty() {
            println!("  none");
        }
        for h in &st.held {
            println!(
                "  {}/{}  {}{}",
                h.repo,
                h.item,
                h.reason,
                h.cause
                    .as_ref()
                    .map(|c| format!(": {c}"))
                    .unwrap_or_default()
            );
        }
        println!("\nleases:");
        for l in &st.leases {
            let who = match (&l.held, &l.holder) {
                (true, Some(h)) => {
                    format!("held by {h}")
                }
                (true, None) => "held".to_string(),
                (false, Some(h)) => format!("free (last held by run {})", h.run_id),
                (false, None) => "free".to_string(),
            };
            println!("  {}  {who}", l.repo);
        }
    }
    EXIT_OK
}

/// Re-render a run's report by replaying its recorded events over its recorded plan.
pub fn render(ledger: &SqliteLedger, run: &str) -> crate::ledger::Result<Option<report::Report>> {
    let Some(replay) = ledger.run_events(run)? else {
        return Ok(None);
    };
    let plan: Plan =
        serde_json::from_str(&replay.plan_json).map_err(|e| crate::ledger::LedgerError::Db {
            path: "plan".into(),
            message: format!("unreadable plan of run `{run}`: {e}"),
        })?;
    let mut b = ReportBuilder::new(
        &plan,
        run,
        Path::new(&replay.run_dir),
        replay.workers,
        &replay.started_at,
    );
    for (at, ev) in &replay.events {
        b.on(ev, at);
    }
    Ok(Some(b.report().clone()))
}

pub fn report(ui: &Ui, args: &ReportArgs) -> i32 {
    let path = state_path(&args.state, args.manifest.as_deref());
    let ledger = match open_existing(ui, &path) {
        Ok(l) => l,
        Err(c) => return c,
    };
    let rep = match found(ui, render(&ledger, &args.run), &args.run, &path) {
        Ok(r) => r,
        Err(c) => return c,
    };
    match args.format {
        ReportFormatArg::Json => print!("{}", report::to_json(&rep)),
        ReportFormatArg::Markdown => print!("{}", report::markdown::render(&rep)),
    }
    EXIT_OK
}

pub fn cancel(ui: &Ui, args: &CancelArgs) -> i32 {
    let path = state_path(&args.state, args.manifest.as_deref());
    let mut ledger = match open_existing(ui, &path) {
        Ok(l) => l,
        Err(c) => return c,
    };
    let run = match found(ui, ledger.run(&args.run), &args.run, &path) {
        Ok(r) => r,
        Err(c) => return c,
    };
    if run.status() != crate::ledger::RunStatus::Live {
        ui.error(format_args!(
            "run `{}` is not live ({})",
            run.id,
            run.status()
        ));
        return crate::commands::EXIT_FAILURES;
    }
    if run.holder.host != crate::support::host::hostname() {
        ui.error(format_args!(
            "run `{}` runs on {}; cancel it there",
            run.id, run.holder.host
        ));
        return crate::commands::EXIT_FAILURES;
    }
    // Who and why are recorded before the signal, so the run can name them as it ends.
    if let Err(e) = ledger.request_stop(
        &run.id,
        &who(),
        args.reason.as_deref(),
        &crate::support::clock::now(),
    ) {
        ui.error(e);
        return EXIT_INTERNAL;
    }
    let pid = nix::unistd::Pid::from_raw(run.holder.pid as i32);
    if let Err(e) = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM) {
        ui.error(format_args!("cannot signal pid {}: {e}", run.holder.pid));
        return EXIT_INTERNAL;
    }
    eprintln!(
        "runner: asked run {} (pid {}) to stop",
        run.id, run.holder.pid
    );
    EXIT_OK
}

pub fn pause(ui: &Ui, args: &PauseArgs, on: bool) -> i32 {
    let loaded = match super::load(ui, &args.manifest) {
        Ok(l) => l,
        Err(c) => return c,
    };
    let path = state_path(&args.state, Some(&args.manifest));
    let mut ledger = match SqliteLedger::open(&path) {
        Ok(l) => l,
        Err(e) => {
            ui.error(e);
            return EXIT_INTERNAL;
        }
    };
    let name = &loaded.manifest.name;
    let r = if on {
        ledger
            .set_paused(
                name,
                &who(),
                args.reason.as_deref(),
                &crate::support::clock::now(),
            )
            .map(|()| {
                eprintln!("runner: `{name}` is paused; running items finish, no new ones start")
            })
    } else {
        ledger.clear_paused(name).map(|was| {
            if was {
                eprintln!("runner: `{name}` is resumed")
            } else {
                eprintln!("runner: `{name}` was not paused")
            }
        })
    };
    match r {
        Ok(()) => EXIT_OK,
        Err(e) => {
            ui.error(e);
            EXIT_INTERNAL
        }
    }
}

/// Processes started by runner for the repository at `repo` (by `RUNNER_REPO_PATH`). `Err`
/// when `/proc` cannot be read: then nothing can be proven.
fn processes_in(repo: &Path) -> std::io::Result<Vec<i32>> {
    let prefix = format!("RUNNER_REPO_PATH={}", repo.display());
    crate::process::census::pids_where(|var| var.starts_with(prefix.as_bytes()))
}

pub fn unlock(ui: &Ui, args: &UnlockArgs) -> i32 {
    let repo = std::path::absolute(&args.repo).unwrap_or_else(|_| args.repo.clone());
    let repo = crate::support::fs::normalize(&repo);
    let probe = match crate::git::probe(&repo) {
        Ok(p) => p,
        Err(e) => {
            ui.error(e);
            return EXIT_INVALID;
        }
    };
    // The lease's descriptor lives on in every process spawned for the repository: a held lock
    // means one of them still runs.
    if crate::lease::is_held(&probe.common_dir) {
        let holder = crate::lease::read_record(&probe.common_dir.join(crate::lease::RECORD_FILE));
        ui.error(format_args!(
            "the lease of `{}` is held{}; refusing while its processes live",
            repo.display(),
            holder.map(|h| format!(" by {h}")).unwrap_or_default()
        ));
        return crate::commands::EXIT_FAILURES;
    }
    match processes_in(&repo) {
        Ok(pids) if pids.is_empty() => {}
        Ok(pids) => {
            ui.error(format_args!(
                "processes of runner still work in `{}` (pids {pids:?}); refusing",
                repo.display()
            ));
            return crate::commands::EXIT_FAILURES;
        }
        Err(e) => {
            ui.error(format_args!(
                "cannot take a census of processes: {e}; refusing"
            ));
            return EXIT_INTERNAL;
        }
    }
    let path = state_path(&args.state, args.manifest.as_deref());
    if path.exists() {
        let mut ledger = match SqliteLedger::open(&path) {
            Ok(l) => l,
            Err(e) => {
                ui.error(e);
                return EXIT_INTERNAL;
            }
        };
        if let Err(e) = ledger.release_quarantine(&repo.display().to_string()) {
            ui.error(e);
            return EXIT_INTERNAL;
        }
    }
    let _ = std::fs::remove_file(probe.common_dir.join(crate::lease::RECORD_FILE));
    eprintln!("runner: `{}` is released", repo.display());
    EXIT_OK
}
