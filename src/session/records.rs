//! A manifest's runs as the ledger keeps them: a past run's report rendered again from its
//! events, a run's totals for the history, the history page, and retention (`reports.keep`).

use crate::ledger::store::Store;
use crate::manifest::{Keep, LoadedManifest};
use crate::plan::Plan;
use crate::plan::pull::PullRequest;
use crate::report::{self, ReportBuilder};
use std::path::{Path, PathBuf};

/// How many of a manifest's latest runs its history (estimates, the history page) reads.
pub(crate) const HISTORY_RUNS: usize = 50;

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
        std::sync::Arc::new(plan),
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
    Ok(Some(b.into_report()))
}

/// What a run came to, for the ledger's run history.
pub(crate) fn totals_of(rep: &report::Report) -> crate::ledger::RunTotals {
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
pub(crate) fn write_history(
    ledger: &dyn crate::ledger::History,
    manifest: &str,
    reports: &Path,
) -> Result<(), String> {
    use crate::ledger::RunStatus;
    use report::history_page::{HistoryRun, ItemHistory};
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
    let recent = ledger
        .recent_item_results(manifest, HISTORY_RUNS)
        .map_err(|e| e.to_string())?;
    // The pull requests as the latest run found them.
    let mut pulls: std::collections::HashMap<(String, String), _> = runs
        .first()
        .map(|h| pull_requests_in(Path::new(&h.run_dir)))
        .unwrap_or_default()
        .into_iter()
        .map(|(repo, id, pr)| ((repo, id), pr))
        .collect();
    let mut items: Vec<ItemHistory> = recent
        .into_iter()
        .map(|r| {
            let key = (r.repo, r.item);
            let pull_request = pulls.remove(&key).map(Box::new);
            ItemHistory {
                repo: key.0,
                id: key.1,
                outcomes: r.outcomes,
                pull_request,
            }
        })
        .collect();
    items.extend(pulls.into_iter().map(|((repo, id), pr)| ItemHistory {
        repo,
        id,
        outcomes: Vec::new(),
        pull_request: Some(Box::new(pr)),
    }));
    let path = reports.join("index.html");
    crate::support::fs::write_atomic_with(&path, |w| {
        report::history_page::render_to(manifest, &shown, &items, w)
    })
    .map_err(|e| format!("cannot write `{}`: {e}", path.display()))
}

/// The pull requests of a run's items, as its `report.json` in `run_dir` recorded them when
/// it began: `(repository, item, pull request)`; none when the report cannot be read.
pub(crate) fn pull_requests_in(run_dir: &Path) -> Vec<(String, String, PullRequest)> {
    // Only the three fields are kept while reading: a report of 100,000 items is read as it
    // streams by, never held whole as text or as a tree of values.
    #[derive(serde::Deserialize)]
    struct Items {
        items: Vec<Item>,
    }
    #[derive(serde::Deserialize)]
    struct Item {
        repo: String,
        id: String,
        #[serde(default)]
        pull_request: Option<serde_json::Value>,
    }
    let Ok(file) = std::fs::File::open(run_dir.join("report.json")) else {
        return Vec::new();
    };
    let Ok(report) = serde_json::from_reader::<_, Items>(std::io::BufReader::new(file)) else {
        return Vec::new();
    };
    report
        .items
        .into_iter()
        .filter_map(|it| {
            let pr = serde_json::from_value(it.pull_request?).ok()?;
            Some((it.repo, it.id, pr))
        })
        .collect()
}

/// What retention removed.
#[derive(Debug, Default)]
pub(crate) struct Retained {
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

pub(crate) fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// The manifest's retention, with its defaults.
pub(crate) fn keep_of(loaded: &LoadedManifest) -> Keep {
    loaded
        .manifest
        .reports
        .as_ref()
        .and_then(|r| r.keep)
        .unwrap_or_default()
}

/// Remove the gate verdicts of the manifest's workspace older than `keep.days` (verdicts are
/// the workspace's, shared by the manifests that use it, so only age removes them).
pub(crate) fn prune_verdicts(loaded: &LoadedManifest, keep: &Keep) -> usize {
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
pub(crate) fn retain(
    ledger: &mut Store,
    manifest: &str,
    keep: &Keep,
    reports: &Path,
    spare: Option<&str>,
    current: &dyn crate::vocab::KeySet,
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
