//! `runner report RUN`: a past run's report, re-rendered from the events the ledger recorded.

use super::{EXIT_INTERNAL, EXIT_OK, Ui, found, open_existing, state_path};
use crate::cli::{ReportArgs, ReportFormatArg};
use crate::ledger::sqlite::SqliteLedger;
use crate::plan::Plan;
use crate::report::{self, ReportBuilder};
use std::path::Path;

/// Re-render a run's report by replaying its recorded events over its recorded plan.
pub fn render(ledger: &SqliteLedger, run: &str) -> crate::ledger::Result<Option<report::Report>> {
    let Some(replay) = ledger.run_events(run)? else {
        return Ok(None);
    };
    let plan: Plan = serde_json::from_str(&replay.plan_json).map_err(|source| {
        crate::ledger::LedgerError::Record {
            path: ledger.path().display().to_string(),
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
    Ok(Some(b.report().clone()))
}

pub fn run(ui: &Ui, args: &ReportArgs) -> i32 {
    let path = state_path(&args.state, args.manifest.as_deref());
    let ledger = match open_existing(ui, &path) {
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
    let rep = match found(ui, render(&ledger, &run), &run, &path) {
        Ok(r) => r,
        Err(c) => return c,
    };
    match args.format {
        ReportFormatArg::Json => match report::to_json(&rep) {
            Ok(json) => out!("{json}"),
            Err(e) => {
                ui.error(format_args!("cannot encode the report: {e}"));
                return EXIT_INTERNAL;
            }
        },
        ReportFormatArg::Markdown => out!("{}", report::markdown::render(&rep)),
        ReportFormatArg::Junit => match report::junit::render(&rep) {
            Ok(xml) => out!("{xml}"),
            Err(e) => {
                ui.error(format_args!("cannot encode the report as JUnit: {e}"));
                return EXIT_INTERNAL;
            }
        },
    }
    EXIT_OK
}
