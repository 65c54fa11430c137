//! `runner schema` and `runner completions SHELL`.

use crate::session::failure::{Ended, Failure};
use crate::vocab::EXIT_OK;
use clap::CommandFactory;

/// Which schema to print.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Of {
    Manifest,
    Report,
    Events,
    Plan,
    Status,
    Matrix,
    Items,
    Incident,
}

impl Of {
    /// From the command line's flags (at most one is set).
    pub(crate) fn pick(
        report: bool,
        events: bool,
        plan: bool,
        status: bool,
        matrix: bool,
        items: bool,
        incident: bool,
    ) -> Self {
        [
            (report, Of::Report),
            (events, Of::Events),
            (plan, Of::Plan),
            (status, Of::Status),
            (matrix, Of::Matrix),
            (items, Of::Items),
            (incident, Of::Incident),
        ]
        .into_iter()
        .find_map(|(on, of)| on.then_some(of))
        .unwrap_or(Of::Manifest)
    }
}

/// The JSON Schema of `T`, as checked in under `schemas/`.
pub(crate) fn schema_json<T: schemars::JsonSchema>() -> Result<String, serde_json::Error> {
    let schema = schemars::schema_for!(T);
    Ok(serde_json::to_string_pretty(&schema)? + "\n")
}

/// The text of one schema.
pub fn text(of: Of) -> Result<String, serde_json::Error> {
    match of {
        Of::Manifest => Ok(crate::manifest::schema::manifest_schema_json()),
        Of::Report => crate::report::report_schema_json(),
        Of::Events => crate::events::events_schema_json(),
        Of::Plan => schema_json::<crate::plan::Plan>(),
        Of::Status => schema_json::<super::outputs::Status>(),
        Of::Matrix => schema_json::<crate::plan::matrix::ShardMatrix>(),
        Of::Items => schema_json::<crate::plan::source::ItemsDoc>(),
        Of::Incident => schema_json::<crate::session::incidents::Incident>(),
    }
}

pub(crate) fn run_schema(of: Of) -> Ended {
    let s =
        text(of).map_err(|e| Failure::Internal(format!("cannot encode the {of:?} schema: {e}")))?;
    out!("{s}");
    Ok(EXIT_OK)
}

pub(crate) fn run_completions(shell: clap_complete::Shell) -> Ended {
    let mut cmd = crate::cli::Cli::command();
    let mut buf = Vec::new();
    clap_complete::generate(shell, &mut cmd, "runner", &mut buf);
    out!("{}", String::from_utf8_lossy(&buf));
    Ok(EXIT_OK)
}
