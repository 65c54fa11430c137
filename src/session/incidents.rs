//! Incidents: what a person must hear of an unattended drain — a stall, a quarantined
//! repository, a model refused or demoted, a spent budget, runner failing, a source that cannot
//! be read, a run found dead by the next one.
//!
//! At its end each run works out the causes it sees; the ledger keeps one incident per cause
//! over every run (every machine's, on a shared ledger), so the `notify` command hears of a cause
//! once when it is first seen, never again while later runs only count it, and once more
//! (`resolved`) when a run no longer sees it. A notice the notifier cannot take goes to its
//! fallbacks in turn (other notifiers, a file); one none of them took stays owed, its failed
//! tries counted in the ledger: the next run sends it, and the next notice that gets through
//! names it. Notifiers are bounded by their timeouts and never change the run's verdict or exit
//! code.

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
    /// Deliveries of this notice that no notifier (nor fallback) took before this one.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed_attempts: u32,
    /// The notices no notifier took since one last got through (this one's included when it
    /// is one of them): named once, in the first notice that gets through after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undelivered: Option<Undelivered>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Notices no notifier took, as the next notice that gets through names them.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Undelivered {
    /// How many.
    pub count: u32,
    /// When the first of them failed (RFC 3339).
    pub since: String,
    pub notices: Vec<UndeliveredNotice>,
}

/// One notice no notifier took.
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UndeliveredNotice {
    /// The incident's cause (`quarantined:api`).
    pub cause: String,
    /// `raised` or `resolved`.
    pub notice: String,
    /// Deliveries that failed.
    pub attempts: u32,
    /// When the first of them was (RFC 3339).
    pub since: String,
}

impl Undelivered {
    fn of(notices: &[UndeliveredNotice]) -> Option<Undelivered> {
        let since = notices.iter().map(|n| n.since.as_str()).min()?.to_string();
        Some(Undelivered {
            count: notices.len() as u32,
            since,
            notices: notices.to_vec(),
        })
    }
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
                    crate::support::text::printable(
                        reason
                            .strip_prefix(&format!("repository `{}`: ", repo.name))
                            .unwrap_or(reason)
                    )
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
            failed_attempts: 0,
            undelivered: None,
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
    let redactor = super::adapter::redactor(loaded);
    // Notices no notifier took in earlier tries, named in the next one that gets through.
    let mut unnamed: Vec<UndeliveredNotice> = owed
        .iter()
        .filter(|r| r.failures > 0)
        .filter_map(|r| {
            Some(UndeliveredNotice {
                cause: r.cause.clone(),
                notice: r.owed.clone()?,
                attempts: r.failures,
                since: r.failed_since.clone().unwrap_or_else(|| now.clone()),
            })
        })
        .collect();
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
        let mut notice = notice_of(&row, &what, run_id);
        notice.failed_attempts = row.failures;
        notice.undelivered = Undelivered::of(&unnamed);
        let text = redactor.redact(&(serde_json::to_string(&notice).unwrap_or_default() + "\n"));
        let told = format!("the `{what}` notice of incident `{}`", row.cause);
        match deliver_anywhere(loaded, notify, &text) {
            Ok((via, failed)) => {
                if let Some(via) = via {
                    warnings.push(format!("{told} went to {via}: {}", failed.join("; ")));
                }
                unnamed.clear();
                let done = if what == "resolved" {
                    ledger.forget_incident(name, &row.cause)
                } else {
                    ledger.notice_sent(name, &row.cause)
                };
                if let Err(e) = done {
                    warnings.push(format!("incident `{}`: {e}", row.cause));
                }
            }
            Err(failed) => {
                warnings.push(format!(
                    "{told} was not delivered ({}); the next run sends it, and the next notice that gets through names it",
                    failed.join("; ")
                ));
                if let Err(e) = ledger.owe_notice(name, &row.cause, &what, &now) {
                    warnings.push(format!("incident `{}`: {e}", row.cause));
                }
                match unnamed.iter_mut().find(|u| u.cause == row.cause) {
                    Some(u) => u.attempts += 1,
                    None => unnamed.push(UndeliveredNotice {
                        cause: row.cause.clone(),
                        notice: what.clone(),
                        attempts: 1,
                        since: now.clone(),
                    }),
                }
            }
        }
    }
    warnings
}

/// The notice of `row` as sent: its body as last seen, with the counts the ledger kept.
fn notice_of(row: &IncidentRow, what: &str, run_id: &str) -> Incident {
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
            failed_attempts: 0,
            undelivered: None,
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
    n
}

/// Hand `notice` to the notifier, else to each fallback in turn. `Ok` with the fallback that
/// took it (`None`: the notifier did) and why those before it did not; `Err` with why each did
/// not.
fn deliver_anywhere(
    loaded: &LoadedManifest,
    notify: &crate::manifest::Notify,
    notice: &str,
) -> Result<(Option<String>, Vec<String>), Vec<String>> {
    let mut failed = Vec::new();
    match run_notifier(loaded, &notify.run, notify.timeout(), notice) {
        Ok(()) => return Ok((None, failed)),
        Err(why) => failed.push(format!("the notifier: {why}")),
    }
    for (i, f) in notify.fallback.iter().enumerate() {
        let (name, got) = match (&f.run, &f.file) {
            (Some(run), _) => (
                format!("fallback {} (a notifier)", i + 1),
                run_notifier(loaded, run, f.timeout(), notice),
            ),
            (None, Some(file)) => (
                format!("fallback {} (file `{file}`)", i + 1),
                append_notice(loaded, file, notice),
            ),
            (None, None) => continue,
        };
        match got {
            Ok(()) => return Ok((Some(name), failed)),
            Err(why) => failed.push(format!("{name}: {why}")),
        }
    }
    Err(failed)
}

/// Append `notice` (one line) to `file`, relative to the manifest's folder, through to the disk;
/// the file (only its owner may read it) and its folder made when missing.
fn append_notice(loaded: &LoadedManifest, file: &str, notice: &str) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = loaded.path.parent().unwrap_or(std::path::Path::new("."));
    let path = dir.join(file);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot make `{}`: {e}", parent.display()))?;
    }
    let mut f = crate::support::fs::open_regular(
        &path,
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600),
    )
    .map_err(|e| format!("cannot open `{}`: {e}", path.display()))?;
    f.write_all(notice.as_bytes())
        .and_then(|()| f.sync_data())
        .map_err(|e| format!("cannot write `{}`: {e}", path.display()))
}

/// Run notifier `run` with `notice` on its stdin, at most `timeout`.
fn run_notifier(
    loaded: &LoadedManifest,
    run: &crate::manifest::CommandSpec,
    timeout: std::time::Duration,
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
    let mut cmd = super::adapter::command(loaded, run, dir, crate::manifest::SecretRole::Notify);
    cmd.stdin(file);
    let out =
        crate::process::spawn_helper_within(&mut cmd, timeout).map_err(|e| match e.kind() {
            std::io::ErrorKind::TimedOut => format!(
                "it took longer than {}; it was ended",
                crate::manifest::format_duration(timeout)
            ),
            _ => format!("it cannot be run: {e}"),
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(super::adapter::failed("it", &out))
    }
}
