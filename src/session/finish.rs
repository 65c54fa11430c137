//! The finish of a run: the ledger told how it ended, the reports written in the formats the
//! manifest lists, retention and the history page, and the last line with the exit code and why.

use super::parts::Session;
use crate::engine::DrainEnd;
use crate::report;
use crate::ui::term::Ui;
use crate::vocab::{EXIT_FAILURES, EXIT_INTERNAL, EXIT_OK, EXIT_STALLED};
use crate::vocab::{ItemOutcome, RunEnding};
use std::collections::HashMap;
use std::path::PathBuf;

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
    let shown = |o| {
        matches!(
            o,
            ItemOutcome::Halted | ItemOutcome::Failed | ItemOutcome::Held
        )
    };
    for (_, it) in report.items.iter_where(shown) {
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

/// The exit code of a run, and its reason in words.
fn verdict(
    ending: RunEnding,
    signal: Option<i32>,
    report: &report::Report,
    failure: Option<&str>,
    standing_holds_pass: bool,
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
                .unwrap_or_else(|| format!("cancelled by {}", crate::engine::signal_name(sig)));
            (128 + sig, why)
        }
        RunEnding::Stalled => (EXIT_STALLED, "the run stalled".into()),
        RunEnding::Budget => (
            crate::vocab::EXIT_BUDGET,
            format!(
                "the budget was spent ({})",
                report.cause.as_deref().unwrap_or("no cost given")
            ),
        ),
        RunEnding::Refused => (
            crate::vocab::EXIT_REFUSED,
            format!(
                "the provider refused the models ({}); fix the key, and the next run takes the held items",
                report.cause.as_deref().unwrap_or("no message given")
            ),
        ),
        RunEnding::Failed => (EXIT_INTERNAL, "runner could not continue".into()),
        RunEnding::Unreadable => (
            EXIT_FAILURES,
            unreadable_line(&report.unreadable_sources)
                .unwrap_or_else(|| "a source could not be read".into()),
        ),
        RunEnding::Paused => {
            let cause = report.cause.as_deref().unwrap_or("no reason given");
            let what = if cause.starts_with("host paused") {
                "the host is paused ({cause}); `runner resume --host` lifts it"
            } else {
                "the manifest is paused ({cause}); `runner resume` lifts it"
            };
            (EXIT_FAILURES, what.replace("{cause}", cause))
        }
        RunEnding::NothingFound | RunEnding::Drained => {
            let bad = report.items.any_outcome(|o| {
                matches!(
                    o,
                    ItemOutcome::Halted | ItemOutcome::Failed | ItemOutcome::Held
                )
            });
            // Only a completed item's work is published.
            let unpublished = report
                .items
                .iter_where(|o| o == ItemOutcome::Completed)
                .any(|(_, i)| i.publish.as_ref().is_some_and(|p| p.error.is_some()));
            let missing = missing_line(&report.missing_repositories);
            let unread = unreadable_line(&report.unreadable_sources);
            let missing = match (missing, unread) {
                (Some(m), Some(u)) => Some(format!("{m}; {u}")),
                (m, u) => m.or(u),
            };
            // A run that ran nothing, whose only trouble is items held as before: with
            // `--standing-holds pass` that is nothing new.
            let only_held = !report
                .items
                .any_outcome(|o| matches!(o, ItemOutcome::Halted | ItemOutcome::Failed));
            if bad
                && only_held
                && missing.is_none()
                && standing_holds_pass
                && !report::ran_work(report)
            {
                let held = report.counts.get(&ItemOutcome::Held).copied().unwrap_or(0);
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
            } else if report.items.any_outcome(|o| o == ItemOutcome::Completed) {
                (EXIT_OK, "every pending item completed".into())
            } else {
                (EXIT_OK, "nothing was pending".into())
            }
        }
    }
}

/// `source `github` could not be read` (or `2 sources could not be read: …`), when any could
/// not.
fn unreadable_line(sources: &[crate::plan::UnreadableSource]) -> Option<String> {
    match sources {
        [] => None,
        [s] => Some(format!("source `{}` could not be read", s.name)),
        many => Some(format!(
            "{} sources could not be read: {}",
            many.len(),
            many.iter()
                .map(|s| format!("`{}`", s.name))
                .collect::<Vec<_>>()
                .join(", ")
        )),
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

/// End the run of `session` that the drain ended with `end`: see [`super::Session::finish`].
pub(super) fn finish(ui: &Ui, session: Session, end: DrainEnd) -> i32 {
    let Session { cx, mut sink, opts } = session;
    let run_id = &cx.run_id;
    let run_dir = &cx.run_dir;
    let ended = {
        let mut ledger = sink.ledger.lock();
        ledger
            .end_run(
                run_id,
                end.ending,
                end.cause.as_deref(),
                &crate::support::clock::now(),
            )
            .and_then(|()| ledger.checkpoint())
    };
    if let Err(e) = ended {
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
    // The trackers told, before the report: what could not be is in it.
    if let Some(w) = sink.writebacks.take() {
        for failed in w.finish() {
            ui.warn(&failed);
            sink.builder.warn(failed);
        }
    }
    let formats = formats_of(&cx.loaded);
    sink.builder.report_to_render();
    let report = sink.builder.report();
    for s in &report.suspect_gates {
        ui.warn(format_args!(
            "suspected misconfigured gate: {}",
            report::suspect_line(s)
        ));
    }
    // A report that fails to write never changes an item's verdict, and is never a silent
    // success: the run exits 4.
    if let Err(e) = report::write(report, run_dir, formats) {
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
        // Where each repository is, for annotations naming a file in it.
        let repos = cx
            .plan
            .repositories
            .iter()
            .map(|r| (r.name.clone(), r.path.clone()))
            .collect();
        github_annotations(report, &repos);
    }
    if opts.json {
        crate::ui::term::write_out_with(|w| {
            serde_json::to_writer_pretty(&mut *w, report).map_err(std::io::Error::other)?;
            w.write_all(b"\n")
        });
    }
    // The manifest's metrics for monitoring (`reports.metrics`), now that the run is recorded:
    // like a report, one that cannot be written is never a silent success.
    if let Err(e) = write_metrics(&sink, &cx) {
        ui.error(e);
        sink.failure
            .get_or_insert_with(|| "the metrics could not be written".into());
    }
    // The run history: what the run came to, then the reports folder's page of runs.
    let totals = super::records::totals_of(report);
    let (code, why) = verdict(
        end.ending,
        end.signal,
        report,
        sink.failure.as_deref(),
        opts.standing_holds_pass,
    );
    let last = format!("{} — exit {code}: {why}", report::counts_line(report));
    for w in incidents(&mut sink, &cx, end.ending, code, formats) {
        ui.warn(&w);
    }
    // Again, with the incidents as this run left them (a refused model, notices owed).
    if let Err(e) = write_metrics(&sink, &cx) {
        ui.warn(&e);
    }
    // Everything the report is needed for is done: its items are let go before the history
    // page reads the ledger, so the two are never in memory together.
    sink.builder.release();
    let recorded = sink.ledger.lock().record_totals(run_id, &totals);
    if let Err(e) = recorded {
        ui.warn(format_args!("the run history was not updated: {e}"));
    } else if let Some(reports) = run_dir.parent() {
        // Retention (`reports.keep`), then the history page of what is kept.
        let keep = super::records::keep_of(&cx.loaded);
        match super::records::retain(
            &mut sink.ledger.lock(),
            &cx.loaded.manifest.name,
            &keep,
            reports,
            Some(run_id),
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
        super::records::prune_verdicts(&cx.loaded, &keep);
        if formats.html
            && let Err(e) = super::records::write_history(
                &**sink.ledger.lock(),
                &cx.loaded.manifest.name,
                reports,
            )
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

/// `reports.formats`, exactly; every one by default.
fn formats_of(loaded: &crate::manifest::LoadedManifest) -> report::Formats {
    use crate::manifest::ReportFormat;
    match loaded
        .manifest
        .reports
        .as_ref()
        .and_then(|r| r.formats.as_ref())
    {
        None => report::Formats::default(),
        Some(f) => report::Formats {
            json: f.contains(&ReportFormat::Json),
            markdown: f.contains(&ReportFormat::Markdown),
            junit: f.contains(&ReportFormat::Junit),
            html: f.contains(&ReportFormat::Html),
        },
    }
}

/// The run's incidents counted and resolved in the ledger, and the notices owed delivered
/// (`notify`); what could not be done, as warnings.
fn incidents(
    sink: &mut super::fanout::Fanout,
    cx: &crate::engine::RunCx,
    ending: crate::vocab::RunEnding,
    code: i32,
    formats: report::Formats,
) -> Vec<String> {
    let name = &cx.loaded.manifest.name;
    let quarantines = sink.ledger.lock().quarantines().unwrap_or_default();
    let previous_died = sink
        .ledger
        .lock()
        .run_history(name, 2)
        .ok()
        .and_then(|h| {
            h.into_iter()
                .find(|r| r.run.id != cx.run_id)
                .filter(|r| r.run.status() == crate::ledger::RunStatus::Died)
        })
        .map(|r| r.run.id);
    let failure = sink.failure.clone();
    let report = sink.builder.report();
    let end = super::incidents::RunEnd {
        report,
        ending,
        plan: &cx.plan,
        failure: (code == crate::vocab::EXIT_INTERNAL)
            .then(|| failure.as_deref().unwrap_or("runner could not continue")),
        quarantines: &quarantines,
        previous_died: previous_died.as_deref(),
    };
    let (seen, observed) = super::incidents::seen(&end);
    let shown = if formats.html {
        cx.run_dir.join("index.html")
    } else if formats.markdown {
        cx.run_dir.join("summary.md")
    } else {
        cx.run_dir.join("report.json")
    };
    super::incidents::settle(
        &mut **sink.ledger.lock(),
        &cx.loaded,
        &cx.run_id,
        Some(shown.display().to_string()),
        seen,
        &observed,
    )
}

/// Write the manifest's metrics to `reports.metrics`, when it names a file.
fn write_metrics(sink: &super::fanout::Fanout, cx: &crate::engine::RunCx) -> Result<(), String> {
    let Some(path) = super::metrics::path_of(&cx.loaded) else {
        return Ok(());
    };
    super::metrics::render(Some(&**sink.ledger.lock()), &cx.loaded)
        .map_err(|e| e.to_string())
        .and_then(|text| super::metrics::write(&path, &text).map_err(|e| e.to_string()))
        .map_err(|e| format!("the metrics were not written to `{}`: {e}", path.display()))
}
