//! `runner report RUN`: a past run's report, re-rendered from the events the ledger recorded.

use super::{EXIT_INTERNAL, EXIT_OK, Ui, found, open_store, state_path};
use crate::cli::{ReportArgs, ReportFormatArg};
use crate::ledger::store::Store;
use crate::plan::Plan;
use crate::report::{self, ReportBuilder};
use std::path::Path;

/// Re-render a run's report by replaying its recorded events over its recorded plan.
pub fn render(ledger: &Store, run: &str) -> crate::ledger::Result<Option<report::Report>> {
    let Some(replay) = ledger.run_events(run)? else {
        return Ok(None);
    };
    let plan: Plan = serde_json::from_str(&replay.plan_json).map_err(|source| {
        crate::ledger::LedgerError::Record {
            path: ledger.shown(),
            what: format!("plan of run `{run}`"),
            source,
        }
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
    let died = ledger
        .run(run)?
        .is_some_and(|r| r.status() == crate::ledger::RunStatus::Died);
    b.unended(died, &ledger.claimed_by(run)?);
    Ok(Some(b.report().clone()))
}

pub fn run(ui: &Ui, args: &ReportArgs) -> i32 {
    let path = state_path(&args.state, args.manifest.as_deref());
    let ledger = match open_store(ui, &path) {
        Ok(l) => l,
        Err(c) => return c,
    };
    let run = if args.run == "latest" {
        let name = match &args.manifest {
            Some(m) => match super::load(ui, m) {
                Ok(l) => Some(l.manifest.name),
                Err(c) => return c,
            },
            None => None,
        };
        match ledger.recent_runs(name.as_deref(), 1) {
            Ok(runs) => match runs.into_iter().next() {
                Some(r) => r.id,
                None => {
                    ui.error(format_args!("no run recorded in `{}`", path.display()));
                    return super::EXIT_INVALID;
                }
            },
            Err(e) => {
                ui.error(e);
                return EXIT_INTERNAL;
            }
        }
    } else {
        args.run.clone()
    };
    if let Ok(Some(at)) = ledger.pruned_at(&run) {
        ui.error(format_args!(
            "run `{run}` was pruned at {at} (`reports.keep`): its events and report are gone"
        ));
        return super::EXIT_INVALID;
    }
    let rep = match found(ui, render(&ledger, &run), &run, &path) {
        Ok(r) => r,
        Err(c) => return c,
    };
    let only = |f: fn(&mut report::Formats)| {
        let mut x = report::Formats {
            json: false,
            markdown: false,
            junit: false,
            html: false,
        };
        f(&mut x);
        x
    };
    let formats = match args.format {
        ReportFormatArg::Json => only(|f| f.json = true),
        ReportFormatArg::Markdown => only(|f| f.markdown = true),
        ReportFormatArg::Junit => only(|f| f.junit = true),
        ReportFormatArg::Html => only(|f| f.html = true),
        ReportFormatArg::All => report::Formats::default(),
    };
    let out_dir = match (&args.out, args.format) {
        (Some(d), _) => Some(d.clone()),
        (None, ReportFormatArg::All) => match ledger.run_dir(&run) {
            Ok(d) => d.map(std::path::PathBuf::from),
            Err(e) => {
                ui.error(e);
                return EXIT_INTERNAL;
            }
        },
        (None, _) => None,
    };
    if let Some(dir) = out_dir {
        return match report::write_files(&rep, &dir, formats) {
            Ok(()) => {
                eprintln!(
                    "runner: report of run `{run}` written into {}",
                    dir.display()
                );
                EXIT_OK
            }
            Err(e) => {
                ui.error(e);
                EXIT_INTERNAL
            }
        };
    }
    match args.format {
        ReportFormatArg::Json => match report::to_json(&rep) {
            Ok(json) => out!("{json}"),
            Err(e) => {
                ui.error(format_args!("cannot encode the report: {e}"));
                return EXIT_INTERNAL;
            }
        },
        ReportFormatArg::Markdown => out!("{}", report::markdown::render(&rep)),
        ReportFormatArg::Junit => out!("{}", report::junit::render(&rep)),
        ReportFormatArg::Html => out!("{}", report::html::render(&rep)),
        ReportFormatArg::All => {
            ui.error("`--format all` writes files: give `--out DIR`");
            return super::EXIT_INVALID;
        }
    }
    EXIT_OK
}

use super::HISTORY_RUNS;

/// What a run came to, for the ledger's run history.
pub fn totals_of(rep: &report::Report) -> crate::ledger::RunTotals {
    let duration_ms = match (
        report::timestamp(&rep.started_at),
        rep.ended_at.as_deref().and_then(report::timestamp),
    ) {
        (Some(a), Some(z)) => Some(z.duration_since(a).as_millis().max(0) as u64),
        _ => None,
    };
    crate::ledger::RunTotals {
        counts: rep.counts.clone(),
        duration_ms,
        cost_usd: rep.usage.as_ref().and_then(|u| u.total.cost_usd),
    }
}

/// Write `<reports>/index.html`: the manifest's latest runs and its items' recent outcomes.
pub fn write_history(
    ledger: &dyn crate::ledger::History,
    manifest: &str,
    reports: &Path,
) -> Result<(), String> {
    use crate::ledger::RunStatus;
    use report::history::{HistoryRun, ItemHistory};
    let runs = ledger
        .run_history(manifest, HISTORY_RUNS)
        .map_err(|e| e.to_string())?;
    let shown: Vec<HistoryRun> = runs
        .iter()
        .map(|h| {
            let dir = Path::new(&h.run_dir);
            let link = (dir.parent() == Some(reports) && dir.join("index.html").is_file())
                .then(|| dir.file_name())
                .flatten()
                .map(|n| format!("{}/index.html", n.to_string_lossy()));
            let status = match (h.run.status(), &h.run.ending) {
                (_, Some(e)) => e.clone(),
                (RunStatus::Live, None) => "running".into(),
                (_, None) => "died".into(),
            };
            HistoryRun {
                id: h.run.id.clone(),
                started_at: h.run.started_at.clone(),
                status,
                cause: h.run.cause.clone(),
                counts: h.totals.as_ref().map(|t| t.counts.clone()),
                duration_ms: h.totals.as_ref().and_then(|t| t.duration_ms),
                cost_usd: h.totals.as_ref().and_then(|t| t.cost_usd),
                link,
            }
        })
        .collect();
    // Each item's outcomes, oldest first (the page orders the items itself).
    let mut by_item: std::collections::HashMap<(String, String), Vec<(String, _)>> =
        Default::default();
    for (repo, item, run, outcome) in ledger
        .recent_item_results(manifest, HISTORY_RUNS)
        .map_err(|e| e.to_string())?
    {
        by_item
            .entry((repo, item))
            .or_default()
            .push((run, outcome));
    }
    let items: Vec<ItemHistory> = by_item
        .into_iter()
        .map(|((repo, id), outcomes)| ItemHistory { repo, id, outcomes })
        .collect();
    let path = reports.join("index.html");
    crate::support::fs::write_atomic_with(&path, |w| {
        report::history::render_to(manifest, &shown, &items, w)
    })
    .map_err(|e| format!("cannot write `{}`: {e}", path.display()))
}
