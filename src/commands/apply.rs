//! `runner apply M`: clone what is missing, plan, drain, report, and exit per SPEC §5.

use super::{EXIT_FAILURES, EXIT_INTERNAL, EXIT_INVALID, EXIT_OK, EXIT_STALLED, Ui, load};
use crate::cli::ApplyArgs;
use crate::engine::outcome::{ItemOutcome, RunEnding};
use crate::engine::{self, RunCx, config};
use crate::manifest::{LoadedManifest, SourceKind};
use crate::plan::{self, PlanError, PlanOptions, repos};
use crate::process::output::Redactor;
use crate::report::{self, ReportBuilder};
use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;

pub fn run(ui: &Ui, args: &ApplyArgs) -> i32 {
    let loaded = match load(ui, &args.manifest) {
        Ok(l) => l,
        Err(code) => return code,
    };
    // A nested run inherits its parent's ceiling (SPEC §6).
    let mut workers = plan::effective_workers(&loaded, args.workers);
    if let Some(max) = std::env::var("RUNNER_MAX_WORKERS")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
    {
        workers = workers.min(max.max(1));
    }
    let clone_errors = clone_missing(&loaded);
    let opts = PlanOptions {
        only: args.filter.only.clone(),
        items: args.filter.items.clone(),
    };
    let plan = match plan::plan(&loaded, &opts) {
        Ok(p) => p,
        Err(PlanError::Invalid(e)) => {
            eprint!("{}", e.render(ui.color));
            return EXIT_INVALID;
        }
        Err(e) => {
            ui.error(e);
            return EXIT_INVALID;
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

    let run_id = new_run_id();
    let reports_dir = match &args.report_dir {
        Some(d) => std::path::absolute(d).unwrap_or_else(|_| d.clone()),
        None => loaded.resolve(
            loaded
                .manifest
                .reports
                .as_ref()
                .and_then(|r| r.dir.as_deref())
                .unwrap_or(crate::manifest::DEFAULT_REPORTS_DIR),
        ),
    };
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
    let fancy = !args.no_progress
        && ui.color
        && std::io::stderr().is_terminal()
        && std::env::var_os("CI").is_none();
    let mut progress = crate::ui::Progress::new(&plan, fancy);
    let mut builder = ReportBuilder::new(&plan, &run_id, &run_dir, workers);
    let cx = Arc::new(RunCx {
        loaded,
        plan,
        run_id: run_id.clone(),
        token: uuid::Uuid::new_v4().simple().to_string(),
        run_dir: run_dir.clone(),
        workspace,
        workers,
        wait_for_locks: args.wait_for_locks,
        redactor,
        clone_errors,
    });

    crate::process::become_subreaper();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            ui.error(format_args!("cannot start the runtime: {e}"));
            return EXIT_INTERNAL;
        }
    };
    let end = runtime.block_on(engine::drain(cx.clone(), &mut |ev| {
        progress.on(ev);
        builder.on(ev);
    }));
    let report = builder.report();
    // A report that fails to write never changes the verdict.
    if let Err(e) = report::write(report, &run_dir) {
        ui.error(format_args!(
            "cannot write the report to `{}`: {e}",
            run_dir.display()
        ));
    } else {
        eprintln!("runner: report in {}", run_dir.join("summary.md").display());
    }
    if args.json {
        match serde_json::to_string_pretty(report) {
            Ok(s) => println!("{s}"),
            Err(e) => ui.error(format_args!("cannot encode the report: {e}")),
        }
    }
    exit_code(end.ending, end.signal, report)
}

fn exit_code(ending: RunEnding, signal: Option<i32>, report: &report::Report) -> i32 {
    match ending {
        RunEnding::Cancelled => 128 + signal.unwrap_or(libc::SIGINT),
        RunEnding::Stalled => EXIT_STALLED,
        RunEnding::Failed => EXIT_INTERNAL,
        _ => {
            let bad = report.items.iter().any(|i| {
                matches!(
                    i.outcome,
                    ItemOutcome::Halted | ItemOutcome::Failed | ItemOutcome::Held
                )
            });
            if bad { EXIT_FAILURES } else { EXIT_OK }
        }
    }
}

/// `YYYYMMDDTHHMMSSZ-xxxxxx`: sortable by time, unique across concurrent runs.
fn new_run_id() -> String {
    let now = jiff::Timestamp::now();
    let stamp = now.strftime("%Y%m%dT%H%M%SZ").to_string();
    let rand = uuid::Uuid::new_v4().simple().to_string();
    format!("{stamp}-{}", &rand[..6])
}

/// Values to redact: every variable named as a secret, and every passed variable whose name
/// says it is one (`TOKEN`, `SECRET`, `PASSWORD`, `KEY`).
fn redactor(loaded: &LoadedManifest) -> Redactor {
    let mut names: Vec<String> = Vec::new();
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
    Redactor::new(names.iter().filter_map(|n| std::env::var(n).ok()))
}

/// Clone every `url` repository not yet in the workspace. Failures are recorded per repository
/// (their items fail with the git error, credentials removed); the run goes on.
fn clone_missing(loaded: &LoadedManifest) -> HashMap<String, String> {
    let workspace = repos::workspace_dir(loaded);
    let mut errors = HashMap::new();
    for spec in &loaded.manifest.repositories {
        if spec.source_kind() != SourceKind::Url {
            continue;
        }
        let (Some(name), Some(url)) = (&spec.name, &spec.url) else {
            continue;
        };
        let dest = repos::clone_dir(&workspace, name);
        if dest.join(".git").exists() {
            continue;
        }
        // A local bundle or repository path resolves against the manifest's folder.
        let local = loaded.resolve(url);
        let source = if !url.contains("://") && local.exists() {
            local.to_string_lossy().to_string()
        } else {
            url.clone()
        };
        if let Err(e) = crate::git::clone(&source, &dest) {
            let shown = repos::redact_url(url);
            let msg = e.to_string().replace(url.as_str(), &shown);
            errors.insert(
                name.clone(),
                format!("cannot clone `{shown}`: {}", redact_credentials(&msg)),
            );
            let _ = std::fs::remove_dir_all(&dest);
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
