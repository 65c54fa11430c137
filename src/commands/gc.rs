//! Retention: `reports.keep` applied after every `apply`, and on demand by `runner gc M`.

use super::shared::{open_store, state_path};
use crate::cli::GcArgs;
use crate::session::failure::{Ended, Failure};
use crate::session::records::{keep_of, plural, prune_verdicts, retain};
use crate::ui::term::Ui;
use crate::vocab::EXIT_OK;

pub fn run(ui: &Ui, args: &GcArgs) -> Ended {
    let loaded = super::shared::load(&args.manifest)?;
    let path = state_path(&args.state, Some(&args.manifest));
    let mut ledger = open_store(&path)?;
    let reports = crate::session::workspace::reports_dir(&loaded, args.report_dir.as_deref());
    let keep = keep_of(&loaded);
    let retained = retain(
        &mut ledger,
        &loaded.manifest.name,
        &keep,
        &reports,
        None,
        &Vec::new(),
    )
    .map_err(Failure::Internal)?;
    // The runs by name, up to a screenful; the count says the rest.
    const NAMED: usize = 20;
    for r in retained.runs.iter().take(NAMED) {
        eprintln!("runner: gc: pruned run {r}");
    }
    if retained.runs.len() > NAMED {
        eprintln!(
            "runner: gc: … and {} older runs",
            retained.runs.len() - NAMED
        );
    }
    let verdicts = prune_verdicts(&loaded, &keep);
    if verdicts > 0 {
        eprintln!(
            "runner: gc: removed {verdicts} gate verdict{} older than {} days",
            plural(verdicts),
            keep.days()
        );
    }
    for l in &retained.left {
        ui.warn(format_args!("a report folder could not be removed: {l}"));
    }
    if !retained.runs.is_empty()
        && reports.join("index.html").is_file()
        && let Err(e) =
            crate::session::records::write_history(&*ledger, &loaded.manifest.name, &reports)
    {
        ui.warn(format_args!("the run history page was not rewritten: {e}"));
    }
    eprintln!("runner: gc: {}", retained.line(&keep));
    match retained.left.len() {
        0 => Ok(EXIT_OK),
        n => Err(Failure::Internal(format!(
            "{n} report folder{} could not be removed",
            plural(n)
        ))),
    }
}
