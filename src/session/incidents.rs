//! Incidents: what a person must hear of an unattended drain — a stall, a quarantined
//! repository, a model refused or demoted, a spent budget, runner failing, a source that cannot
//! be read, a run found dead by the next one.
//!
//! At its end each run works out the causes it sees; the ledger keeps one incident per cause
//! over every run (every machine's, on a shared ledger), so the `notify` command hears of a cause
//! once when it is first seen, never again while later runs only count it, and once more
//! (`resolved`) when a run no longer sees it. A notice that cannot be delivered stays owed and
//! the next run sends it; the notifier is bounded by its timeout and never changes the run's
//! verdict or exit code.

use crate::ledger::{IncidentRow, Ledger};
use crate::manifest::LoadedManifest;
use crate::report::Report;
use crate::vocab::RunEnding;
use serde::{Deserialize, Serialize};

/// `schema` of every notice.
pub(crate) const INCIDENT_SCHEMA: &str = "runner.incident/v1";

/// One notice, as the `notify` command reads it on stdin (`schemas/incident.schema.json`).
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Incident {
    /// Always `runner.incident/v1`.
    pub schema: String,
    /// `raised` when the cause is first seen; `resolved` when a later run no longer sees it.
    pub notice: String,
    /// `stalled`, `quarantined`, `model-refused`, `model-demoted`, `budget`, `failed`,
    /// `source-unreadable` or `run-died`.
    pub kind: String,
    /// What tells the incident apart: its kind and what it is about (`quarantined:api`).
    pub cause: String,
    /// One line for a person.
    pub summary: String,
    pub manifest: String,
    pub manifest_path: String,
    pub host: String,
    /// The run that sends this notice.
    pub run: String,
    /// The run that last saw the cause.
    pub seen_in: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repositories: Vec<String>,
    /// `repo/id`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub items: Vec<String>,
    /// RFC 3339.
    pub first_seen: String,
    pub last_seen: String,
    /// How many runs saw it.
    pub count: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_at: Option<String>,
    /// The report of the run that last saw it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<String>,
}

/// A cause a run sees, before the ledger counts it.
#[derive(Debug)]
pub(crate) struct Seen {
    pub kind: &'static str,
    /// What it is about, when a kind can be about several things (a repository, a model).
    pub about: Option<String>,
    pub summary: String,
    pub repositories: Vec<String>,
    pub items: Vec<String>,
}

impl Seen {
    fn cause(&self) -> String {
        match &self.about {
            Some(a) => format!("{}:{a}", self.kind),
            None => self.kind.to_string(),
        }
    }
}

/// What the run knows at its end that incidents are made of.
pub(crate) struct RunEnd<'a> {
    pub report: &'a Report,
    pub ending: RunEnding,
    pub plan: &'a crate::plan::Plan,
    /// Why runner failed (exit 4), when it did.
    pub failure: Option<&'a str>,
    /// Quarantined repositories of the ledger: (path, run, reason).
    pub quarantines: &'a [(String, String, String)],
    /// The run before this one of the manifest, when it died.
    pub previous_died: Option<&'a str>,
}

/// The causes a run sees, and which kinds it could have seen (a cause of a kind the run could
/// not observe — a model's refusal in a run that started nothing — is not resolved by it).
pub(crate) fn seen(end: &RunEnd) -> (Vec<Seen>, Vec<&'static str>) {
    let r = end.report;
    let mut out = Vec::new();
    let ran = crate::report::ran_work(r);
    let mut observed = vec!["quarantined", "failed", "source-unreadable", "run-died"];
    // Each kind only where the run could have seen it: a run ended by its spent budget that
    // started nothing tells nothing of a stall or of a model's provider.
    if ran || end.ending == RunEnding::Stalled {
        observed.push("stalled");
    }
    if ran || end.ending == RunEnding::Budget {
        observed.push("budget");
    }
    if ran || end.ending == RunEnding::Refused {
        observed.extend(["model-refused", "model-demoted"]);
    }
    let halted: Vec<String> = r
        .items
        .iter()
        .filter(|i| i.outcome == crate::vocab::ItemOutcome::Halted)
        .map(|i| format!("{}/{}", i.repo, i.id))
        .collect();
    match end.ending {
        RunEnding::Stalled => out.push(Seen {
            kind: "stalled",
            about: None,
            summary: format!(
                "the run stalled: {}",
                r.cause
                    .as_deref()
                    .unwrap_or("items halted one after another")
            ),
            repositories: Vec::new(),
            items: halted,
        }),
        RunEnding::Budget => out.push(Seen {
            kind: "budget",
            about: None,
            summary: format!(
                "the budget is spent: {}",
                r.cause.as_deref().unwrap_or("no new item was started")
            ),
            repositories: Vec::new(),
            items: Vec::new(),
        }),
        _ => {}
    }
    if let Some(f) = end.failure {
        out.push(Seen {
            kind: "failed",
            about: None,
            summary: format!("runner failed (exit 4): {f}"),
            repositories: Vec::new(),
            items: Vec::new(),
        });
    }
    for refusal in &r.refused {
        let model = refusal.model.clone().unwrap_or_else(|| "worker".into());
        out.push(Seen {
            kind: "model-refused",
            summary: format!(
                "the provider refused `{model}`: {}",
                crate::support::text::printable(&refusal.message)
            ),
            about: Some(model),
            repositories: Vec::new(),
            items: refusal.item.iter().cloned().collect(),
        });
    }
    for d in &r.demoted {
        out.push(Seen {
            kind: "model-demoted",
            summary: format!(
                "`{}` was demoted after {} provider failures{}",
                d.model,
                d.failures,
                d.next
                    .as_ref()
                    .map(|n| format!("; items went on with `{n}`"))
                    .unwrap_or_else(|| "; no usable model was left".into())
            ),
            about: Some(d.model.clone()),
            repositories: Vec::new(),
            items: d.items.clone(),
        });
    }
    for repo in &end.plan.repositories {
        let path = repo.path.display().to_string();
        if let Some((_, run, reason)) = end.quarantines.iter().find(|(p, _, _)| *p == path) {
            out.push(Seen {
                kind: "quarantined",
                about: Some(repo.name.clone()),
                summary: format!(
                    "repository `{}` is quarantined (run `{run}`): {}; `runner unlock` lifts it",
                    repo.name,
                    crate::support::text::printable(reason)
                ),
                repositories: vec![repo.name.clone()],
                items: Vec::new(),
            });
        }
    }
    for s in &end.plan.unreadable_sources {
        out.push(Seen {
            kind: "source-unreadable",
            about: Some(s.name.clone()),
            summary: format!(
                "source `{}` cannot be read: {}",
                s.name,
                crate::support::text::printable(&s.detail)
            ),
            repositories: Vec::new(),
            items: Vec::new(),
        });
    }
    if let Some(run) = end.previous_died {
        out.push(Seen {
            kind: "run-died",
            about: None,
            summary: format!("the run before this one (`{run}`) died without ending"),
            repositories: Vec::new(),
            items: Vec::new(),
        });
    }
    (out, observed)
}

/// Count what the run saw, resolve what it no longer sees, and deliver every notice owed —
/// this run's and those earlier runs could not deliver. Returns what could not be done, for the
/// run's warnings; never fails the run.
pub(crate) fn settle(
    ledger: &mut dyn Ledger,
    loaded: &LoadedManifest,
    run_id: &str,
    report_path: Option<String>,
    seen: Vec<Seen>,
    observed: &[&str],
) -> Vec<String> {
    let name = &loaded.manifest.name;
    let now = crate::support::clock::now();
    let mut warnings = Vec::new();
    let mut causes = Vec::new();
    for s in seen {
        let cause = s.cause();
        let body = Incident {
            schema: INCIDENT_SCHEMA.into(),
            notice: "raised".into(),
            kind: s.kind.into(),
            cause: cause.clone(),
            summary: s.summary,
            manifest: name.clone(),
            manifest_path: loaded.path.display().to_string(),
            host: crate::support::host::hostname(),
            run: run_id.into(),
            seen_in: run_id.into(),
            repositories: s.repositories,
            items: s.items,
            first_seen: now.clone(),
            last_seen: now.clone(),
            count: 1,
            resolved_at: None,
            report: report_path.clone(),
        };
        let body = serde_json::to_string(&body).unwrap_or_default();
        if let Err(e) = ledger.see_incident(name, &cause, s.kind, &body, &now) {
            warnings.push(format!("incident `{cause}` was not recorded: {e}"));
        }
        causes.push(cause);
    }
    let open = match ledger.incidents(name) {
        Ok(o) => o,
        Err(e) => {
            warnings.push(format!("the incidents could not be read: {e}"));
            return warnings;
        }
    };
    for row in &open {
        if row.resolved_at.is_none()
            && !causes.contains(&row.cause)
            && observed.contains(&row.kind.as_str())
            && let Err(e) = ledger.resolve_incident(name, &row.cause, &now)
        {
            warnings.push(format!("incident `{}` was not resolved: {e}", row.cause));
        }
    }
    let Some(notify) = &loaded.manifest.notify else {
        return warnings;
    };
    let owed = match ledger.incidents(name) {
        Ok(o) => o,
        Err(e) => {
            warnings.push(format!("the incidents could not be read: {e}"));
            return warnings;
        }
    };
    let redactor = super::prepare::redactor(loaded);
    for row in owed {
        let Some(what) = row.owed.clone() else {
            continue;
        };
        match ledger.take_notice(name, &row.cause, &what) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                warnings.push(format!("incident `{}`: {e}", row.cause));
                continue;
            }
        }
        let notice = redactor.redact(&notice_text(&row, &what, run_id));
        match deliver(loaded, notify, &notice) {
            Ok(()) => {
                if what == "resolved"
                    && let Err(e) = ledger.forget_incident(name, &row.cause)
                {
                    warnings.push(format!("incident `{}`: {e}", row.cause));
                }
            }
            Err(why) => {
                warnings.push(format!(
                    "the `{what}` notice of incident `{}` was not delivered ({why}); the next run sends it",
                    row.cause
                ));
                if let Err(e) = ledger.owe_notice(name, &row.cause, &what) {
                    warnings.push(format!("incident `{}`: {e}", row.cause));
                }
            }
        }
    }
    warnings
}

/// The notice of `row` as sent: its body as last seen, with the counts the ledger kept.
fn notice_text(row: &IncidentRow, what: &str, run_id: &str) -> String {
    let mut n: Incident = match serde_json::from_str(&row.body) {
        Ok(n) => n,
        Err(_) => Incident {
            schema: INCIDENT_SCHEMA.into(),
            notice: String::new(),
            kind: row.kind.clone(),
            cause: row.cause.clone(),
            summary: row.cause.clone(),
            manifest: String::new(),
            manifest_path: String::new(),
            host: crate::support::host::hostname(),
            run: String::new(),
            seen_in: String::new(),
            repositories: Vec::new(),
            items: Vec::new(),
            first_seen: String::new(),
            last_seen: String::new(),
            count: 0,
            resolved_at: None,
            report: None,
        },
    };
    n.notice = what.into();
    n.run = run_id.into();
    n.first_seen = row.first_seen.clone();
    n.last_seen = row.last_seen.clone();
    n.count = row.count;
    n.resolved_at = row.resolved_at.clone();
    if what == "resolved" {
        n.summary = format!("resolved: {}", n.summary);
    }
    serde_json::to_string(&n).unwrap_or_default() + "\n"
}

/// Run the `notify` command with `notice` on its stdin, at most its timeout.
fn deliver(
    loaded: &LoadedManifest,
    notify: &crate::manifest::Notify,
    notice: &str,
) -> Result<(), String> {
    let dir = loaded.path.parent().unwrap_or(std::path::Path::new("."));
    let mut file = tempfile::tempfile().map_err(|e| format!("cannot stage the notice: {e}"))?;
    {
        use std::io::{Seek, Write};
        file.write_all(notice.as_bytes())
            .and_then(|()| file.seek(std::io::SeekFrom::Start(0)).map(|_| ()))
            .map_err(|e| format!("cannot stage the notice: {e}"))?;
    }
    let mut cmd = super::sources::command(
        loaded,
        &notify.run,
        dir,
        crate::manifest::SecretRole::Notify,
    );
    cmd.stdin(file);
    let timeout = notify.timeout();
    let out =
        crate::process::spawn_helper_within(&mut cmd, timeout).map_err(|e| match e.kind() {
            std::io::ErrorKind::TimedOut => format!(
                "the notifier took longer than {}; it was ended",
                crate::manifest::format_duration(timeout)
            ),
            _ => format!("the notifier cannot be run: {e}"),
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(super::sources::failed("the notifier", &out))
    }
}
