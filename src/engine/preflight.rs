//! Before the queue: each model of the chain is asked one cheap question (`worker.probe`)
//! through the worker that would run it, so that a refused key stops the run before it touches
//! an item. A probe runs in an empty scratch repository of its own, with `{item.task}` the
//! question, `RUNNER_PROBE=1`, and the environment the worker would get.

use super::child_env::{RunnerVars, child_env};
use super::classify::{ProviderPolicy, classify, refusal_message};
use super::config::{Effective, Unrendered, command_argv, effective};
use crate::manifest::LoadedManifest;
use crate::process::census::CensusKey;
use crate::process::redact::Redactor;
use crate::process::{SpawnSpec, Stop};
use crate::vocab::Role;
use crate::vocab::{ProbeVerdict, WorkerClass};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// What one probe found.
#[derive(Clone, Debug)]
pub struct Probe {
    pub model: String,
    pub verdict: ProbeVerdict,
    /// The provider's or the worker's words, when it did not answer (redacted).
    pub message: Option<String>,
    pub duration: Duration,
}

/// One probe to run: a model with the worker of a repository that would run it.
struct Planned {
    model: String,
    eff: Effective,
}

/// The probes for the items of these repository entries: each model of their chains once per
/// worker command, when the manifest gives a `worker.probe`.
fn planned(loaded: &LoadedManifest, entries: &[usize]) -> Vec<Planned> {
    if loaded.manifest.worker.probe.is_none() {
        return Vec::new();
    }
    let mut seen: Vec<(String, String)> = Vec::new();
    let mut out = Vec::new();
    for &entry in entries {
        let eff = effective(loaded, entry);
        let Some(models) = eff.models.as_ref() else {
            continue;
        };
        for model in models.chain() {
            let key = (model.to_string(), format!("{:?}", eff.worker.run));
            if seen.contains(&key) {
                continue;
            }
            seen.push(key);
            out.push(Planned {
                model: model.to_string(),
                eff: eff.clone(),
            });
        }
    }
    out
}

/// Whether any probe would run for these repository entries.
pub fn wanted(loaded: &LoadedManifest, entries: &[usize]) -> bool {
    !planned(loaded, entries).is_empty()
}

/// Where and as whom probes run.
pub(crate) struct ProbeRun<'a> {
    pub redactor: Arc<Redactor>,
    /// The run's token; each probe's environment holds it with the probe's number.
    pub token: &'a str,
    pub run_id: &'a str,
    /// Where each probe's log is written.
    pub logs: &'a std::path::Path,
    /// Where the scratch repositories are made (a folder of the run's under it).
    pub scratch_in: &'a std::path::Path,
}

/// What runner tells a probe of `model` about itself: an item of its own, unconfined.
fn probe_vars<'a>(run_id: &'a str, dir: &'a str, model: &'a str, token: &'a str) -> RunnerVars<'a> {
    RunnerVars {
        run_id,
        repo: "runner-probe",
        repo_path: dir,
        item: "runner-probe",
        model: Some(model),
        attempt: 1,
        role: Role::Worker,
        gate: None,
        token,
        max_workers: 1,
        feedback: None,
        usage: None,
        brief: None,
        defaults: &[],
        tmpdir: None,
        sandbox: None,
        proxy: false,
    }
}

/// Probe every model the items of `entries` would use, all at once.
pub(crate) async fn probe_models(
    loaded: &LoadedManifest,
    entries: &[usize],
    how: ProbeRun<'_>,
    stop: watch::Receiver<Stop>,
) -> Vec<Probe> {
    let ProbeRun {
        redactor,
        token,
        run_id,
        logs,
        scratch_in,
    } = how;
    let question = loaded.manifest.worker.probe.clone().unwrap_or_default();
    let here = scratch_folder(scratch_in, run_id);
    let mut tasks = tokio::task::JoinSet::new();
    let mut results: Vec<Option<Probe>> = Vec::new();
    for (i, p) in planned(loaded, entries).into_iter().enumerate() {
        results.push(None);
        let scratch = match &here {
            Ok(d) => scratch_repo(d.join(i.to_string())).await,
            Err(e) => Err(e.to_string()),
        };
        let scratch = match scratch {
            Ok(d) => d,
            Err(e) => {
                results[i] = Some(unrunnable(
                    p.model,
                    format!("cannot make a scratch repository: {e}"),
                ));
                continue;
            }
        };
        let dir = scratch.path().to_string_lossy().into_owned();
        let lookup = |name: &str| -> Option<String> {
            match name {
                "model" => Some(p.model.clone()),
                "repo" => Some("runner-probe".into()),
                "repo.path" => Some(dir.clone()),
                "item" => Some("runner-probe".into()),
                "item.task" => Some(question.clone()),
                "attempt" => Some("1".into()),
                "run" => Some(run_id.to_string()),
                // Other variables of an item have no value for a probe.
                other => other.strip_prefix("item.").map(|_| String::new()),
            }
        };
        let argv = match command_argv(loaded, &p.eff.worker.run, lookup) {
            Ok(a) => a,
            Err(e) => {
                results[i] = Some(unrunnable(p.model, e.to_string()));
                continue;
            }
        };
        let rendered: Result<Vec<(String, String)>, Unrendered> = p
            .eff
            .worker
            .env
            .iter()
            .map(|(k, v)| {
                crate::manifest::template::render(v, |n| {
                    lookup(n.strip_prefix(crate::manifest::template::RAW).unwrap_or(n))
                })
                .map(|v| (k.clone(), v))
                .map_err(|message| Unrendered::Env {
                    name: k.clone(),
                    message,
                })
            })
            .collect();
        let mut worker_env = match rendered {
            Ok(env) => env,
            Err(e) => {
                results[i] = Some(unrunnable(p.model, e.to_string()));
                continue;
            }
        };
        worker_env.push(("RUNNER_PROBE".into(), "1".into()));
        // Each probe's processes carry a token of their own: ending one probe's tree (and
        // taking the census of what escaped it) must not reach a probe still running.
        let token = &format!("{token}.probe{i}");
        let env = child_env(
            |name| std::env::var(name).ok(),
            &p.eff.env_pass,
            &p.eff.secrets_for(crate::manifest::SecretRole::Worker),
            &worker_env,
            &probe_vars(run_id, &dir, &p.model, token),
        );
        let _ = std::fs::create_dir_all(logs);
        let spec = SpawnSpec {
            argv,
            cwd: scratch.path().to_path_buf(),
            env,
            log_path: logs.join(format!("probe-{}.log", file_safe(&p.model))),
            timeout: p.eff.worker.timeout().min(crate::manifest::PROBE_TIMEOUT),
            grace: p.eff.worker.grace(),
            silence: p
                .eff
                .models
                .as_ref()
                .and_then(|m| m.provider_failure.as_ref())
                .and_then(|f| f.silence)
                .map(|d| d.0),
            redactor: redactor.clone(),
            inherit_fd: None,
            census: CensusKey {
                token: token.to_string(),
                repo: "runner-probe".into(),
            },
            count_lines: None,
            failure_roots: None,
            cgroup: None,
            confine: None,
        };
        let policy = ProviderPolicy::from_models(p.eff.models.as_ref());
        let stop = stop.clone();
        let model = p.model;
        tasks.spawn(async move {
            let fin = crate::process::run(spec, stop).await;
            drop(scratch);
            (i, judge(model, &fin, &policy))
        });
    }
    while let Some(done) = tasks.join_next().await {
        if let Ok((i, probe)) = done {
            results[i] = Some(probe);
        }
    }
    if let Ok(d) = &here {
        let _ = std::fs::remove_dir_all(d);
    }
    results.into_iter().flatten().collect()
}

/// A probe that could not be started, and why.
fn unrunnable(model: String, why: impl Into<String>) -> Probe {
    Probe {
        model,
        verdict: ProbeVerdict::Failed,
        message: Some(why.into()),
        duration: Duration::ZERO,
    }
}

/// The verdict on a probe that ended as `fin`.
fn judge(model: String, fin: &crate::process::Finished, policy: &ProviderPolicy) -> Probe {
    let last_line = || {
        fin.tail
            .lines()
            .map(str::trim)
            .rfind(|l| !l.is_empty())
            .map(|l| l.chars().take(240).collect::<String>())
    };
    let (verdict, message) = match classify(fin, policy) {
        WorkerClass::Ok => (ProbeVerdict::Ok, None),
        WorkerClass::Refused => (ProbeVerdict::Refused, Some(refusal_message(&fin.tail))),
        WorkerClass::Provider if fin.silenced => (
            ProbeVerdict::Unavailable,
            Some("it printed nothing for `models.provider_failure.silence`".into()),
        ),
        WorkerClass::Provider => (ProbeVerdict::Unavailable, last_line()),
        WorkerClass::Timeout => (
            ProbeVerdict::Unavailable,
            Some(format!(
                "no answer within {}",
                crate::manifest::format_duration(fin.duration)
            )),
        ),
        WorkerClass::Cancelled => (ProbeVerdict::Unavailable, Some("cancelled".into())),
        WorkerClass::Failed => (
            ProbeVerdict::Failed,
            Some(match (&fin.spawn_error, fin.exit) {
                (Some(e), _) => e.clone(),
                (None, code) => {
                    let code = code.map_or("a signal".to_string(), |c| format!("exit {c}"));
                    match last_line() {
                        Some(l) => format!("{code}: {l}"),
                        None => code,
                    }
                }
            }),
        ),
    };
    Probe {
        model,
        verdict,
        message,
        duration: fin.duration,
    }
}

/// This run's folder of scratch repositories under `root`, made anew; folders there of runs
/// whose runner is gone (killed outright mid-probe) are removed first. Each holds its runner's
/// pid, so that overlapping runs of one workspace leave each other's alone.
fn scratch_folder(root: &std::path::Path, run_id: &str) -> std::io::Result<std::path::PathBuf> {
    if let Ok(entries) = std::fs::read_dir(root) {
        for e in entries.flatten() {
            // A folder without its pid yet is a run starting now: left alone.
            let Some(pid) = std::fs::read_to_string(e.path().join("pid"))
                .ok()
                .and_then(|p| p.trim().parse::<i32>().ok())
            else {
                continue;
            };
            if nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_err() {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    let dir = root.join(run_id);
    std::fs::create_dir_all(&dir)?;
    // Written whole, then renamed into place: never read half-written.
    std::fs::write(dir.join("pid.new"), std::process::id().to_string())?;
    std::fs::rename(dir.join("pid.new"), dir.join("pid"))?;
    Ok(dir)
}

/// An empty git repository at `dir` to probe in (agent CLIs want one), made on the blocking
/// pool by a helper runner registers as its own child (a child it did not register may be
/// reaped by the census as an orphan before its exit status is read).
async fn scratch_repo(dir: std::path::PathBuf) -> Result<ScratchRepo, String> {
    let made = tokio::task::spawn_blocking(move || {
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let mut git = std::process::Command::new("git");
        git.args(["init", "-q"]).current_dir(&dir);
        match crate::process::spawn_helper(&mut git) {
            Ok(out) if out.status.success() => Ok(ScratchRepo(dir)),
            Ok(out) => Err(format!(
                "git init failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )),
            Err(e) => Err(format!("git init failed: {e}")),
        }
    })
    .await;
    made.unwrap_or_else(|e| Err(e.to_string()))
}

/// A scratch repository, removed when dropped.
struct ScratchRepo(std::path::PathBuf);

impl ScratchRepo {
    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for ScratchRepo {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A model's name as part of a file name.
fn file_safe(model: &str) -> String {
    model
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}
