//! Reports: the run's record, built from the event stream and written whole or not at all.
//!
//! `report.json` follows `schemas/report.schema.json` (generated from these types);
//! `summary.md` is for people, PR comments and `$GITHUB_STEP_SUMMARY`. Every file is written to
//! a temporary file and renamed into `<reports.dir>/<run-id>/`, and `latest` is pointed at it
//! last. A report that fails to write never changes the run's verdict or exit code.

mod builder;
pub mod history_page;
pub mod html;
mod item;
mod items;
pub mod junit;
pub mod markdown;
mod model;

pub(crate) use builder::ReportBuilder;
pub use items::Items;
pub use model::*;

use std::path::{Path, PathBuf};

/// Why a report could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("cannot encode the report: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("{0}")]
    Spill(String),
    #[error("cannot write `{path}`: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// `report.json`'s text.
pub(crate) fn to_json(report: &Report) -> Result<String, serde_json::Error> {
    Ok(serde_json::to_string_pretty(report)? + "\n")
}

/// Which files a run's report folder gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Formats {
    pub json: bool,
    pub markdown: bool,
    pub junit: bool,
    pub html: bool,
}

impl Default for Formats {
    fn default() -> Self {
        Formats {
            json: true,
            markdown: true,
            junit: true,
            html: true,
        }
    }
}

/// Whether any item of the run started: a run that only found its items done or held ran no
/// work.
pub(crate) fn ran_work(report: &Report) -> bool {
    report.items.any_started()
}

/// Write the report in `formats` into `run_dir` (`report.json`, `summary.md`, `junit.xml`,
/// `index.html`), then point `latest` at it — when the run ran work, or nothing is `latest` yet:
/// a cron run that found nothing to do is recorded, and `latest` stays the last run that did
/// something. Returns the first error; what was written stays whole.
pub fn write(report: &Report, run_dir: &Path, formats: Formats) -> Result<(), ReportError> {
    write_files(report, run_dir, formats)?;
    if let Some(parent) = run_dir.parent()
        && let Some(name) = run_dir.file_name()
        && (ran_work(report) || std::fs::symlink_metadata(parent.join("latest")).is_err())
    {
        let tmp = parent.join(format!(".latest-{}", std::process::id()));
        // A leftover of an earlier process with this pid; absent as a rule.
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(name, &tmp).map_err(io_at(&tmp))?;
        let latest = parent.join("latest");
        std::fs::rename(&tmp, &latest).map_err(io_at(&latest))?;
    }
    if let Ok(summary) = std::env::var("GITHUB_STEP_SUMMARY")
        && !summary.is_empty()
    {
        use std::io::Write;
        let path = PathBuf::from(summary);
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&path)
            .and_then(|mut f| f.write_all(markdown::render(report).as_bytes()))
            .map_err(io_at(&path))?;
    }
    Ok(())
}

fn io_at(path: &Path) -> impl FnOnce(std::io::Error) -> ReportError {
    let path = path.to_path_buf();
    move |source| ReportError::Io { path, source }
}

fn write_one(path: &Path, text: &str) -> Result<(), ReportError> {
    crate::support::fs::write_atomic(path, text.as_bytes()).map_err(io_at(path))
}

/// Only the files of `formats` into `dir` (created when missing): no `latest`, no step summary.
pub(crate) fn write_files(
    report: &Report,
    dir: &Path,
    formats: Formats,
) -> Result<(), ReportError> {
    std::fs::create_dir_all(dir).map_err(io_at(dir))?;
    if formats.json {
        // Streamed: a report of thousands of items is never held as text too.
        let path = dir.join("report.json");
        crate::support::fs::write_atomic_with(&path, |w| {
            serde_json::to_writer_pretty(&mut *w, report).map_err(std::io::Error::other)?;
            w.write_all(b"\n")
        })
        .map_err(io_at(&path))?;
    }
    if formats.markdown {
        write_one(&dir.join("summary.md"), &markdown::render(report))?;
    }
    if formats.junit {
        let path = dir.join("junit.xml");
        crate::support::fs::write_atomic_with(&path, |w| junit::render_to(report, w))
            .map_err(io_at(&path))?;
    }
    if formats.html {
        let path = dir.join("index.html");
        crate::support::fs::write_atomic_with(&path, |w| html::render_to(report, w))
            .map_err(io_at(&path))?;
    }
    // A record that could not be read back was written as its plan entry, naming why: the
    // report is not whole, and says so.
    if let Some(e) = report.items.read_error() {
        return Err(ReportError::Spill(e.to_string()));
    }
    Ok(())
}

/// The report's JSON Schema, as checked in at `schemas/report.schema.json`.
pub(crate) fn report_schema_json() -> Result<String, serde_json::Error> {
    let schema = schemars::schema_for!(Report);
    Ok(serde_json::to_string_pretty(&schema)? + "\n")
}
