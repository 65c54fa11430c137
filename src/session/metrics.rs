//! A manifest's metrics in Prometheus's text format, for node-exporter's textfile collector or
//! any scraper: runs by ending, the latest run's items by outcome, the items it left undone, held
//! items by reason, spend against the manifest's caps, when the latest drained run ended,
//! quarantined repositories, models their provider refused, and incident notices owed. Written after every run to `reports.metrics` (atomically: a
//! collector never reads half a file) and printed by `status --metrics`, from the ledger — the
//! same text either way.
//!
//! Every metric is a gauge of what the ledger holds now (its history is pruned, so none is a
//! counter), named `runner_…` with its unit where it has one, and labelled by manifest.

use crate::ledger::Ledger;
use crate::manifest::LoadedManifest;
use std::collections::BTreeMap;
use std::fmt::Write;

/// One metric family as it is written.
struct Family {
    name: &'static str,
    help: &'static str,
    samples: Vec<(Vec<(&'static str, String)>, f64)>,
}

impl Family {
    fn new(name: &'static str, help: &'static str) -> Family {
        Family {
            name,
            help,
            samples: Vec::new(),
        }
    }

    fn add(&mut self, labels: Vec<(&'static str, String)>, value: f64) {
        self.samples.push((labels, value));
    }
}

/// The metrics of `loaded`'s manifest, as the ledger holds them now (`None`: no ledger yet, no
/// run so far).
pub(crate) fn render(
    ledger: Option<&dyn Ledger>,
    loaded: &LoadedManifest,
) -> crate::ledger::Result<String> {
    let name = loaded.manifest.name.as_str();
    let m = || vec![("manifest", name.to_string())];
    let runs = match ledger {
        Some(l) => l.recent_runs(Some(name), 1_000_000)?,
        None => Vec::new(),
    };
    let mut by_ending = Family::new(
        "runner_runs",
        "Runs of the manifest the ledger keeps, by how they ended (live and died: not ended).",
    );
    let mut endings: BTreeMap<String, usize> = BTreeMap::new();
    for r in &runs {
        let ending = match (&r.ending, r.status()) {
            (Some(e), crate::ledger::RunStatus::Ended) => e.clone(),
            (_, status) => status.as_str().to_string(),
        };
        *endings.entry(ending).or_default() += 1;
    }
    for (ending, n) in endings {
        let mut l = m();
        l.push(("ending", ending));
        by_ending.add(l, n as f64);
    }
    let mut items = Family::new(
        "runner_last_run_items",
        "Items of the manifest's latest run, by outcome.",
    );
    let mut undone = Family::new(
        "runner_queue_depth",
        "Items the manifest's latest run left undone (every outcome but completed).",
    );
    if let (Some(latest), Some(ledger)) = (runs.first(), ledger) {
        let counts = ledger.counts_of(&latest.id)?;
        let mut left = 0;
        // Outcomes no item came to are left out, however the ledger counts them.
        for (outcome, n) in counts.into_iter().filter(|(_, n)| *n > 0) {
            if outcome != crate::vocab::ItemOutcome::Completed {
                left += n;
            }
            let mut l = m();
            l.push(("outcome", outcome.as_str().to_string()));
            items.add(l, n as f64);
        }
        undone.add(m(), left as f64);
    }
    let mut held = Family::new(
        "runner_held_items",
        "Items of the manifest held, by reason.",
    );
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    for (_, _, reason, _) in match ledger {
        Some(l) => l.held_items(name)?,
        None => Vec::new(),
    } {
        *reasons.entry(reason).or_default() += 1;
    }
    for (reason, n) in reasons {
        let mut l = m();
        l.push(("reason", reason));
        held.add(l, n as f64);
    }
    let mut spent = Family::new(
        "runner_spend_usd",
        "What the manifest's workers reported they cost in the cap's window (UTC), in US dollars.",
    );
    let mut caps = Family::new(
        "runner_spend_cap_usd",
        "The manifest's spending cap for the window (budget.daily_usd, budget.monthly_usd).",
    );
    if let Some(b) = loaded.manifest.budget {
        use super::budget::Window;
        for (cap, window) in [(b.daily_usd, Window::Day), (b.monthly_usd, Window::Month)] {
            let Some(cap) = cap else { continue };
            let (since, _) = window.bounds(jiff::Timestamp::now());
            let mut l = m();
            l.push(("window", window.name().to_string()));
            let spent_usd = match ledger {
                Some(ledger) => ledger.spend_since(name, &since)?,
                None => 0.0,
            };
            spent.add(l.clone(), spent_usd);
            caps.add(l, cap);
        }
    }
    let mut drained = Family::new(
        "runner_last_drained_timestamp_seconds",
        "When the manifest's latest run that drained its queue ended (seconds since the epoch).",
    );
    if let Some(at) = runs
        .iter()
        .filter(|r| r.ending.as_deref() == Some("drained"))
        .find_map(|r| r.ended_at.as_deref().and_then(epoch_seconds))
    {
        drained.add(m(), at);
    }
    let mut ended = Family::new(
        "runner_last_run_end_timestamp_seconds",
        "When the manifest's latest ended run ended (seconds since the epoch).",
    );
    if let Some(at) = runs
        .iter()
        .find_map(|r| r.ended_at.as_deref().and_then(epoch_seconds))
    {
        ended.add(m(), at);
    }
    let mut quarantined = Family::new(
        "runner_quarantined_repositories",
        "The manifest's repositories quarantined (processes of an item not proven gone).",
    );
    let paths: Vec<String> = crate::plan::repos::locate(loaded)
        .into_iter()
        .map(|r| r.path.display().to_string())
        .collect();
    let q = match ledger {
        Some(l) => l
            .quarantines()?
            .into_iter()
            .filter(|(path, _, _)| paths.contains(path))
            .count(),
        None => 0,
    };
    quarantined.add(m(), q as f64);
    let (refused, owed) = incident_families(ledger, loaded)?;
    let mut out = String::new();
    for f in [
        by_ending,
        items,
        undone,
        held,
        spent,
        caps,
        drained,
        ended,
        quarantined,
        refused,
        owed,
    ] {
        write_family(&mut out, &f);
    }
    Ok(out)
}

/// The models whose provider refused them (an open `model-refused` incident: 1 each, the runs
/// that saw it in its own family's help), and the notices owed (with `notify`).
fn incident_families(
    ledger: Option<&dyn Ledger>,
    loaded: &LoadedManifest,
) -> crate::ledger::Result<(Family, Family)> {
    let name = loaded.manifest.name.as_str();
    let rows = match ledger {
        Some(l) => l.incidents(name)?,
        None => Vec::new(),
    };
    let mut refused = Family::new(
        "runner_model_refused",
        "Models of the manifest whose provider refused them (a refused key, an exhausted quota), 1 each, until a run that starts work no longer sees it.",
    );
    for row in rows
        .iter()
        .filter(|r| r.kind == "model-refused" && r.resolved_at.is_none())
    {
        let model = row
            .cause
            .strip_prefix("model-refused:")
            .unwrap_or(&row.cause);
        refused.add(
            vec![("manifest", name.to_string()), ("model", model.to_string())],
            1.0,
        );
    }
    let mut owed = Family::new(
        "runner_notices_owed",
        "Incident notices not delivered yet (notify), by whether a delivery of them has failed.",
    );
    if loaded.manifest.notify.is_some() {
        for failed in [false, true] {
            let n = rows
                .iter()
                .filter(|r| r.owed.is_some() && (r.failures > 0) == failed)
                .count();
            owed.add(
                vec![
                    ("manifest", name.to_string()),
                    ("failed", failed.to_string()),
                ],
                n as f64,
            );
        }
    }
    Ok((refused, owed))
}

/// A family in the text format: its help, its type, a line per sample.
fn write_family(out: &mut String, f: &Family) {
    let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
    let _ = writeln!(out, "# TYPE {} gauge", f.name);
    for (labels, value) in &f.samples {
        let labels: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
            .collect();
        let _ = writeln!(out, "{}{{{}}} {}", f.name, labels.join(","), value);
    }
}

/// A label value as the text format takes it: backslash, double quote and line feed escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// An RFC 3339 time as seconds since the epoch.
fn epoch_seconds(at: &str) -> Option<f64> {
    let t: jiff::Timestamp = at.parse().ok()?;
    Some(t.as_millisecond() as f64 / 1000.0)
}

/// Write `text` to `path` at once: a file beside it renamed over it, so that a collector reads
/// the old metrics or the new, never half of them.
pub(crate) fn write(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(&mut tmp, text.as_bytes())?;
    tmp.as_file().sync_all()?;
    // The textfile collector reads files others may read.
    use std::os::unix::fs::PermissionsExt;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o644))?;
    tmp.persist(path).map(|_| ()).map_err(|e| e.error)
}

/// Where `loaded` asks for its metrics (`reports.metrics`, relative to its folder).
pub(crate) fn path_of(loaded: &LoadedManifest) -> Option<std::path::PathBuf> {
    let p = loaded.manifest.reports.as_ref()?.metrics.as_ref()?;
    Some(loaded.dir.join(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped_and_samples_written_whole() {
        let mut f = Family::new("runner_x", "X.");
        f.add(vec![("manifest", "a\"b\\c\nd".into())], 2.0);
        let mut out = String::new();
        write_family(&mut out, &f);
        assert_eq!(
            out,
            "# HELP runner_x X.\n# TYPE runner_x gauge\nrunner_x{manifest=\"a\\\"b\\\\c\\nd\"} 2\n"
        );
        assert_eq!(epoch_seconds("1970-01-01T00:01:00Z"), Some(60.0));
    }
}
