//! `runner report RUN`: a past run's report, re-rendered from the events the ledger recorded.

use super::shared::{found, open_store, state_path};
use crate::cli::{ReportArgs, ReportFormatArg};
use crate::report::{self};
use crate::session::failure::{Ended, Failure};
use crate::vocab::EXIT_OK;

pub fn run(args: &ReportArgs) -> Ended {
    let path = state_path(&args.state, args.manifest.as_deref());
    let ledger = open_store(&path)?;
    let run = if args.run == "latest" {
        let name = match &args.manifest {
            Some(m) => Some(super::shared::load(m)?.manifest.name),
            None => None,
        };
        match ledger.recent_runs(name.as_deref(), 1)?.into_iter().next() {
            Some(r) => r.id,
            None => {
                return Err(Failure::Invalid(format!(
                    "no run recorded in `{}`",
                    path.display()
                )));
            }
        }
    } else {
        args.run.clone()
    };
    if let Ok(Some(at)) = ledger.pruned_at(&run) {
        return Err(Failure::Invalid(format!(
            "run `{run}` was pruned at {at} (`reports.keep`): its events and report are gone"
        )));
    }
    let rep = found(crate::session::records::render(&ledger, &run), &run, &path)?;
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
        (None, ReportFormatArg::All) => ledger.run_dir(&run)?.map(std::path::PathBuf::from),
        (None, _) => None,
    };
    if let Some(dir) = out_dir {
        report::write_files(&rep, &dir, formats).map_err(Failure::internal)?;
        eprintln!(
            "runner: report of run `{run}` written into {}",
            dir.display()
        );
        return Ok(EXIT_OK);
    }
    match args.format {
        ReportFormatArg::Json => {
            let json = report::to_json(&rep)
                .map_err(|e| Failure::internal(format_args!("cannot encode the report: {e}")))?;
            out!("{json}")
        }
        ReportFormatArg::Markdown => out!("{}", report::markdown::render(&rep)),
        ReportFormatArg::Junit => out!("{}", report::junit::render(&rep)),
        ReportFormatArg::Html => out!("{}", report::html::render(&rep)),
        ReportFormatArg::All => {
            return Err(Failure::invalid(
                "`--format all` writes files: give `--out DIR`",
            ));
        }
    }
    Ok(EXIT_OK)
}
