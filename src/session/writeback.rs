//! Telling a tracker what became of its items (`sources[].writeback`): a label when an item
//! starts, and on its outcome a label and one comment — exactly once over every run.
//!
//! Write-backs run on a thread of their own, in the order the run's events gave them, so that
//! the drain never waits for a tracker. Each outcome has a key; the ledger records who took it
//! on and whether it was done, so a rerun, a resumed crash or two overlapping drains never post
//! it twice. The comment carries its key in a marker (`<!-- runner:writeback key=… -->`): a
//! run that died between posting and recording it leaves the key taken by a dead run, the next
//! run takes it over, and the tracker's adapter, finding its own comment, posts none again. A
//! write-back that fails is told on stderr and in the report, retried by the next run, and never
//! changes an item's outcome.

use crate::events::Event;
use crate::manifest::{CommandSpec, LoadedManifest};
use crate::plan::Plan;
use crate::plan::source::WRITEBACK_MARKER;
use crate::process::redact::Redactor;
use crate::vocab::ItemOutcome;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, mpsc};
use std::time::Duration;

/// The labels runner sets, one at a time: the item's state on the tracker.
pub const LABELS: [&str; 4] = [
    "runner:working",
    "runner:done",
    "runner:halted",
    "runner:held",
];

/// How long a write-back command may take.
const TIMEOUT: Duration = Duration::from_secs(120);

/// The tracker's side of an item of the plan.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Target {
    repo: String,
    item: String,
    branch: Option<String>,
    /// The review round this run makes on the item's pull request, when it makes one.
    #[serde(default)]
    round: Option<u32>,
    source: String,
    source_id: String,
    url: Option<String>,
    /// The source's `writeback`, as the manifest now says (not kept in the ledger).
    #[serde(skip)]
    command: Option<CommandSpec>,
}

/// One write-back: a label, and maybe a comment.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Job {
    target: Target,
    repo: String,
    item: String,
    /// What happened: `started`, `completed`, `halted`, `failed`, `held`.
    event: String,
    label: String,
    /// The comment's key; `None` for a label alone (setting one again is harmless).
    key: Option<String>,
    comment: String,
    pr_url: Option<String>,
}

/// The run's write-backs: what each item needs, and the thread that does them.
pub(crate) struct Writebacks {
    targets: Vec<Option<Target>>,
    commits: HashMap<usize, String>,
    pr_urls: HashMap<usize, String>,
    run_id: String,
    tx: Option<mpsc::Sender<Job>>,
    thread: Option<std::thread::JoinHandle<Vec<String>>>,
}

impl Writebacks {
    /// The write-backs of run `run_id` over `plan`, with a connection of their own to the ledger
    /// at `state`; `None` when no source of the manifest writes back.
    pub fn start(
        loaded: &LoadedManifest,
        plan: &Plan,
        state: &Path,
        run_id: &str,
        logs: PathBuf,
        redactor: Arc<Redactor>,
    ) -> Option<Writebacks> {
        let sources = &loaded.manifest.sources;
        if sources.iter().all(|s| s.writeback.is_none()) {
            return None;
        }
        let targets: Vec<Option<Target>> = plan
            .items
            .iter()
            .map(|it| {
                let s = it.source.as_ref()?;
                let spec = sources.iter().find(|x| x.name == s.name)?;
                Some(Target {
                    repo: it.repo.clone(),
                    item: it.id.clone(),
                    branch: it.branch.clone(),
                    round: it
                        .pull_request
                        .as_ref()
                        .filter(|pr| pr.wants_a_round())
                        .map(|pr| pr.rounds + 1),
                    source: s.name.clone(),
                    source_id: s.id.clone(),
                    url: s.url.clone(),
                    command: Some(spec.writeback.clone()?),
                })
            })
            .collect();
        let (tx, rx) = mpsc::channel::<Job>();
        let loaded = loaded.clone();
        let (state, run) = (state.to_path_buf(), run_id.to_string());
        let thread = std::thread::Builder::new()
            .name("writeback".into())
            .spawn(move || work(&loaded, &state, &run, &logs, &redactor, rx))
            .ok()?;
        Some(Writebacks {
            targets,
            commits: HashMap::new(),
            pr_urls: HashMap::new(),
            run_id: run_id.to_string(),
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Hand on what `ev` means for the tracker.
    pub fn on(&mut self, ev: &Event) {
        match ev {
            Event::Work {
                item,
                commit: Some(c),
                ..
            } => {
                self.commits.insert(*item, c.clone());
            }
            Event::Published {
                item, url: Some(u), ..
            } => {
                self.pr_urls.insert(*item, u.clone());
            }
            Event::ItemStarted { item } => {
                self.send(*item, "started", None, None);
            }
            Event::ItemFinished {
                item,
                outcome,
                reason,
                cause,
            } => {
                let event = match outcome {
                    ItemOutcome::Completed => "completed",
                    ItemOutcome::Halted => "halted",
                    ItemOutcome::Failed => "failed",
                    ItemOutcome::Held => "held",
                    _ => return,
                };
                // A tracker that cannot be read is not one to write to.
                if reason.as_deref() == Some(crate::vocab::HoldReason::SourceUnreadable.as_str()) {
                    return;
                }
                self.send(*item, event, reason.as_deref(), cause.as_deref());
            }
            _ => {}
        }
    }

    fn send(&self, idx: usize, event: &'static str, reason: Option<&str>, cause: Option<&str>) {
        let (Some(Some(target)), Some(tx)) = (self.targets.get(idx), &self.tx) else {
            return;
        };
        let it = target;
        let commit = self.commits.get(&idx);
        let pr_url = self.pr_urls.get(&idx).cloned();
        let short = |c: &str| c.get(..10).unwrap_or(c).to_string();
        let fingerprint = |text: &str| crate::support::hex(&Sha256::digest(text.as_bytes())[..6]);
        let detail = match (reason, cause) {
            (Some(r), Some(c)) => format!("{r}: {c}"),
            (Some(r), None) => r.to_string(),
            (None, Some(c)) => c.to_string(),
            (None, None) => String::new(),
        };
        // The key names the outcome: the same outcome told again (a rerun, an item held for
        // the same reason every night) is the same comment, not another.
        let (label, key, text) = match event {
            "started" => (LABELS[0], None, String::new()),
            "completed" => {
                let what = commit.map_or_else(|| "unchanged".to_string(), |c| short(c));
                let mut text = match (commit, it.round) {
                    (Some(c), Some(n)) => format!(
                        "runner made review round {n} of the pull request in run `{}`: commit `{}`{}.",
                        self.run_id,
                        short(c),
                        it.branch
                            .as_deref()
                            .map(|b| format!(" on branch `{b}`"))
                            .unwrap_or_default()
                    ),
                    (Some(c), None) => format!(
                        "runner completed this in run `{}`: commit `{}`{}.",
                        self.run_id,
                        short(c),
                        it.branch
                            .as_deref()
                            .map(|b| format!(" on branch `{b}`"))
                            .unwrap_or_default()
                    ),
                    (None, _) => format!(
                        "runner completed this in run `{}`; the work changed nothing.",
                        self.run_id
                    ),
                };
                if let Some(u) = &pr_url {
                    text.push_str(&format!("\n\nPull request: {u}"));
                }
                (LABELS[1], Some(format!("completed/{what}")), text)
            }
            "halted" | "failed" => (
                LABELS[2],
                Some(format!("{event}/{}", fingerprint(&detail))),
                format!(
                    "runner {event} on this in run `{}`: {detail}\n\nThe next run that is asked to (`--rerun failed`) tries again.",
                    self.run_id
                ),
            ),
            _ => (
                LABELS[3],
                Some(format!("held/{}", fingerprint(&detail))),
                format!("runner is holding this (run `{}`): {detail}", self.run_id),
            ),
        };
        let key = key.map(|k| format!("{}/{}/{k}", it.repo, it.item));
        let _ = tx.send(Job {
            target: target.clone(),
            repo: it.repo.clone(),
            item: it.item.clone(),
            event: event.to_string(),
            label: label.to_string(),
            comment: key
                .as_ref()
                .map(|k| format!("{WRITEBACK_MARKER} key={k} -->\n{text}\n"))
                .unwrap_or_default(),
            key,
            pr_url,
        });
    }

    /// Wait for every write-back handed on; what failed, in words.
    pub fn finish(mut self) -> Vec<String> {
        drop(self.tx.take());
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_else(|| vec!["the write-backs to the trackers ended unexpectedly".into()])
    }
}

/// The thread: the jobs handed on, through the ledger's exactly-once record, on a few lanes at
/// once — one slow tracker call (a hung comment, a rate limit's wait) does not delay every later
/// item's labels — and each item's jobs in order on its own lane (its `started` label before its
/// outcome).
fn work(
    loaded: &LoadedManifest,
    state: &Path,
    run_id: &str,
    logs: &Path,
    redactor: &Redactor,
    rx: mpsc::Receiver<Job>,
) -> Vec<String> {
    let mut failed = Vec::new();
    let ledger = match opened(state, &rx) {
        Ok(l) => l,
        Err(f) => return f,
    };
    let manifest = &loaded.manifest.name;
    // What earlier runs could not finish goes first, with the manifest's command of today.
    let earlier: Vec<Job> = ledger
        .unfinished_writebacks(manifest)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(_, job)| serde_json::from_str::<Job>(&job).ok())
        .filter_map(|mut job| {
            let spec = loaded
                .manifest
                .sources
                .iter()
                .find(|s| s.name == job.target.source)?;
            job.target.command = Some(spec.writeback.clone()?);
            Some(job)
        })
        .collect();
    drop(ledger);
    std::thread::scope(|scope| {
        let mut lanes = Vec::with_capacity(LANES);
        for _ in 0..LANES {
            let (tx, lane_rx) = mpsc::channel::<Job>();
            lanes.push((
                tx,
                scope.spawn(move || lane(loaded, state, run_id, logs, redactor, lane_rx)),
            ));
        }
        // Each item keeps the lane it was first given; items are given lanes in turn.
        let mut lane_of: HashMap<(String, String), usize> = HashMap::new();
        for job in earlier.into_iter().chain(rx) {
            let next = lane_of.len() % LANES;
            let i = *lane_of
                .entry((job.repo.clone(), job.item.clone()))
                .or_insert(next);
            let _ = lanes[i].0.send(job);
        }
        for (tx, handle) in lanes {
            drop(tx);
            match handle.join() {
                Ok(mut f) => failed.append(&mut f),
                Err(_) => failed.push("a write-back lane ended unexpectedly".into()),
            }
        }
    });
    failed
}

/// The ledger at `state`; when it cannot be opened, what that leaves undone of the jobs `rx`
/// hands on (drained): nothing is written back without the record that makes it happen once.
fn opened(
    state: &Path,
    rx: &mpsc::Receiver<Job>,
) -> Result<crate::ledger::store::Store, Vec<String>> {
    crate::ledger::store::open(state).map_err(|e| {
        let n = rx.iter().filter(|j| j.key.is_some()).count();
        if n > 0 {
            vec![format!(
                "{n} write-back(s) to the trackers were not made: the ledger cannot be opened: {e}"
            )]
        } else {
            Vec::new()
        }
    })
}

/// How many write-backs run at once.
const LANES: usize = 4;

/// One lane: its jobs in turn, with a connection of its own to the ledger.
fn lane(
    loaded: &LoadedManifest,
    state: &Path,
    run_id: &str,
    logs: &Path,
    redactor: &Redactor,
    rx: mpsc::Receiver<Job>,
) -> Vec<String> {
    let mut failed = Vec::new();
    let mut ledger = match opened(state, &rx) {
        Ok(l) => l,
        Err(f) => return f,
    };
    for job in rx {
        one(
            loaded,
            &mut ledger,
            run_id,
            logs,
            redactor,
            job,
            &mut failed,
        );
    }
    failed
}

/// One job: claimed in the ledger (a comment told before is not told again, its labels are
/// still set), made, and recorded.
fn one(
    loaded: &LoadedManifest,
    ledger: &mut crate::ledger::store::Store,
    run_id: &str,
    logs: &Path,
    redactor: &Redactor,
    job: Job,
    failed: &mut Vec<String>,
) {
    let manifest = &loaded.manifest.name;
    let now = crate::support::clock::now();
    if let Some(key) = &job.key {
        match ledger.claim_writeback(manifest, key, run_id, &now) {
            Ok(true) => {
                if let Ok(json) = serde_json::to_string(&job) {
                    let _ = ledger.set_writeback_job(manifest, key, &json);
                }
            }
            Ok(false) => {
                // Told before (by this run or an earlier one): not commented again, but the
                // labels still say where the item stands now (a `started` since set
                // `runner:working`).
                let labels_only = Job {
                    key: None,
                    comment: String::new(),
                    ..job.clone()
                };
                if let Err(e) = run(loaded, &labels_only, logs).map_err(|e| redactor.redact(&e)) {
                    failed.push(format!(
                        "{}/{}: the labels for source `{}` ({}) were not set; the next run sets them: {e}",
                        job.repo, job.item, job.target.source, job.event
                    ));
                }
                return;
            }
            Err(e) => {
                failed.push(format!(
                    "{}/{}: the write-back ({}) was not made: {e}",
                    job.repo, job.item, job.event
                ));
                return;
            }
        }
    }
    let result = run(loaded, &job, logs).map_err(|e| redactor.redact(&e));
    if let Some(key) = &job.key {
        let (state, error) = match &result {
            Ok(()) => ("done", None),
            Err(e) => ("failed", Some(e.as_str())),
        };
        let now = crate::support::clock::now();
        let _ = ledger.swap_writeback(
            manifest,
            key,
            Some(("pending", run_id)),
            state,
            run_id,
            error,
            &now,
        );
    }
    if let Err(e) = result {
        failed.push(format!(
            "{}/{}: the write-back to source `{}` ({}) failed; the next run tries again: {e}",
            job.repo, job.item, job.target.source, job.event
        ));
    }
}

/// Run the source's write-back command for `job`: in the manifest's folder, with the manifest's
/// `env.pass` and `env.secrets` and the `RUNNER_WRITEBACK_*` facts.
fn run(loaded: &LoadedManifest, job: &Job, logs: &Path) -> Result<(), String> {
    let dir = loaded.path.parent().unwrap_or(Path::new("."));
    let body = logs.join(format!(
        "writeback-{}-{}.md",
        job.item.replace('/', "_"),
        job.event
    ));
    std::fs::create_dir_all(logs)
        .and_then(|()| crate::support::fs::write_atomic(&body, job.comment.as_bytes()))
        .map_err(|e| format!("cannot write `{}`: {e}", body.display()))?;
    let Some(command) = &job.target.command else {
        return Err("its source has no `writeback` any more".into());
    };
    let mut cmd =
        super::adapter::command(loaded, command, dir, crate::manifest::SecretRole::Source);
    let unlabel: Vec<&str> = LABELS.iter().copied().filter(|l| *l != job.label).collect();
    cmd.env("RUNNER_SOURCE", &job.target.source)
        .env("RUNNER_SOURCE_ID", &job.target.source_id)
        .env("RUNNER_REPO", &job.repo)
        .env("RUNNER_ITEM", &job.item)
        .env("RUNNER_WRITEBACK_EVENT", &job.event)
        .env("RUNNER_WRITEBACK_LABEL", &job.label)
        .env("RUNNER_WRITEBACK_UNLABEL", unlabel.join(","))
        .env("RUNNER_WRITEBACK_KEY", job.key.as_deref().unwrap_or(""))
        .env(
            "RUNNER_WRITEBACK_BODY",
            if job.key.is_some() {
                body.display().to_string()
            } else {
                String::new()
            },
        );
    if let Some(u) = &job.target.url {
        cmd.env("RUNNER_ITEM_URL", u);
    }
    if let Some(u) = &job.pr_url {
        cmd.env("RUNNER_PR_URL", u);
    }
    let out = crate::process::spawn_helper_within(&mut cmd, TIMEOUT)
        .map_err(|e| format!("its command cannot be run: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(super::adapter::failed("its command", &out))
}
