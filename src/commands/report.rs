//! `runner report RUN`: a past run's report, re-rendered from the events the ledger recorded.

use super::shared::{found, open_store, state_path};
use crate::cli::{ReportArgs, ReportFormatArg};
use crate::report::{self};
use crate::ui::term::Ui;
use crate::vocab::{EXIT_INTERNAL, EXIT_OK};

pub fn run(ui: &Ui, args: &ReportArgs) -> i32 {
    let path = state_path(&args.state, args.manifest.as_deref());
    let ledger = match open_store(ui, &path) {
        Ok(l) => l,
        Err(c) => return c,
    };
    let run = if args.run == "latest" {
        let name = match &args.manifest {
            Some(m) => match super::shared::load(ui, m) {
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
                    return crate::vocab::EXIT_INVALID;
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
        return crate::vocab::EXIT_INVALID;
    }
    let rep = match found(
        ui,
        crate::session::records::render(&ledger, &run),
        &run,
        &path,
    ) {
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
            return crate::vocab::EXIT_INVALID;
        }
    }
    EXIT_OK
}
