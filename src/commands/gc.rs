//! Retention: `reports.keep` applied after every `apply`, and on demand by `runner gc M`.

use super::{EXIT_INTERNAL, EXIT_OK, Ui, open_store, state_path};
use crate::cli::GcArgs;
use crate::ledger::store::Store;
use crate::manifest::{Keep, LoadedManifest};
use std::path::{Path, PathBuf};

/// What retention removed.
#[derive(Debug, Default)]
pub struct Retained {
    /// The runs pruned.
    pub runs: Vec<String>,
    /// Report folders removed.
    pub folders: Vec<PathBuf>,
    /// Report folders that could not be removed, with why.
    pub left: Vec<String>,
    pub events: usize,
    pub results: usize,
    /// Another runner sharing the ledger was pruning at that moment, so nothing was looked at.
    pub elsewhere: bool,
}

impl Retained {
    /// One line: what went, or that nothing did.
    pub fn line(&self, keep: &Keep) -> String {
        if self.elsewhere {
            return "another runner is pruning this manifest's history right now: left to it"
                .into();
        }
        if self.runs.is_empty() && !self.folders.is_empty() {
            // Runs another machine sharing the ledger pruned, whose folders were here.
            return format!(
                "removed {} report folder{} of runs pruned before; keeping the latest {} runs of the last {} days",
                self.folders.len(),
                plural(self.folders.len()),
                keep.runs(),
                keep.days()
            );
        }
        if self.runs.is_empty() {
            return format!(
                "nothing to remove (keeping the latest {} runs of the last {} days)",
                keep.runs(),
                keep.days()
            );
        }
        format!(
            "pruned {} run{} ({} report folder{}, {} event{}, {} item result{}); keeping the latest {} runs of the last {} days",
            self.runs.len(),
            plural(self.runs.len()),
            self.folders.len(),
            plural(self.folders.len()),
            self.events,
            plural(self.events),
            self.results,
            plural(self.results),
            keep.runs(),
            keep.days()
        )
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// The manifest's retention, with its defaults.
pub fn keep_of(loaded: &LoadedManifest) -> Keep {
    loaded
        .manifest
        .reports
        .as_ref()
        .and_then(|r| r.keep)
        .unwrap_or_default()
}

/// Remove the gate verdicts of the manifest's workspace older than `keep.days` (verdicts are
/// the workspace's, shared by the manifests that use it, so only age removes them).
pub fn prune_verdicts(loaded: &LoadedManifest, keep: &Keep) -> usize {
    let workspace = crate::plan::repos::workspace_dir(loaded);
    let age = std::time::Duration::from_secs(24 * 3600 * u64::from(keep.days()));
    let cutoff = std::time::SystemTime::now()
        .checked_sub(age)
        .unwrap_or(std::time::UNIX_EPOCH);
    crate::engine::verdicts::prune(&workspace, cutoff)
}

/// Prune the history of `manifest` past `keep`: the ledger's record of older runs, then their
/// report folders — only a folder inside `reports` named for its run is ever removed. `current`:
/// the keys of the plan just run, whose items' earlier definitions' results go with the runs
/// pruned (empty: every definition's latest result stays).
pub fn retain(
    ledger: &mut Store,
    manifest: &str,
    keep: &Keep,
    reports: &Path,
    spare: Option<&str>,
    current: &[crate::ledger::ItemKey],
) -> Result<Retained, String> {
    let now = jiff::Timestamp::now();
    let cutoff = now
        .checked_sub(jiff::SignedDuration::from_hours(
            24 * i64::from(keep.days()),
        ))
        .unwrap_or(jiff::Timestamp::MIN);
    let pruned = ledger
        .prune(&crate::ledger::Retention {
            manifest,
            keep_runs: keep.runs(),
            cutoff: &crate::support::clock::stamp(cutoff),
            at: &crate::support::clock::stamp(now),
            spare,
            current,
        })
        .map_err(|e| e.to_string())?;
    let mut out = Retained {
        events: pruned.events,
        results: pruned.results,
        elsewhere: pruned.elsewhere,
        ..Default::default()
    };
    let reports = std::fs::canonicalize(reports).unwrap_or_else(|_| reports.to_path_buf());
    // Runs whose folders are gone from here: a shared ledger kept their rows until now.
    let mut gone = Vec::new();
    let now = pruned.runs.into_iter().map(|(id, dir)| (id, dir, true));
    let earlier = pruned.earlier.into_iter().map(|(id, dir)| (id, dir, false));
    for (id, dir, pruned_now) in now.chain(earlier) {
        if pruned_now {
            out.runs.push(id.clone());
        }
        // Another machine's run (on a shared ledger) has its folder there, not here.
        if dir.is_empty() {
            continue;
        }
        let dir = PathBuf::from(dir);
        let inside = dir.file_name().is_some_and(|n| n == id.as_str())
            && dir
                .parent()
                .and_then(|p| std::fs::canonicalize(p).ok())
                .is_some_and(|p| p == reports);
        if !inside {
            continue;
        }
        if dir.is_dir() {
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => out.folders.push(dir),
                Err(e) => {
                    out.left.push(format!("`{}`: {e}", dir.display()));
                    continue;
                }
            }
        }
        gone.push(id);
    }
    ledger.forget(&gone).map_err(|e| e.to_string())?;
    Ok(out)
}

pub fn run(ui: &Ui, args: &GcArgs) -> i32 {
    let loaded = match super::load(ui, &args.manifest) {
        Ok(l) => l,
        Err(c) => return c,
    };
    let path = state_path(&args.state, Some(&args.manifest));
    let mut ledger = match open_store(ui, &path) {
        Ok(l) => l,
        Err(c) => return c,
    };
    let reports = super::reports_dir(&loaded, args.report_dir.as_deref());
    let keep = keep_of(&loaded);
    let retained = match retain(
        &mut ledger,
        &loaded.manifest.name,
        &keep,
        &reports,
        None,
        &[],
    ) {
        Ok(r) => r,
        Err(e) => {
            ui.error(e);
            return EXIT_INTERNAL;
        }
    };
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
        && let Err(e) = super::report::write_history(&ledger, &loaded.manifest.name, &reports)
    {
        ui.warn(format_args!("the run history page was not rewritten: {e}"));
    }
    eprintln!("runner: gc: {}", retained.line(&keep));
    if retained.left.is_empty() {
        EXIT_OK
    } else {
        EXIT_INTERNAL
    }
}
