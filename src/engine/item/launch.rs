//! Starting a worker or a gate: the shared resources it needs taken, its command rendered, its
//! environment built, and the process launched in the item's containment.

use super::cx::ItemCx;
use crate::engine::child_env::{RunnerVars, child_env};
use crate::engine::config::Unrendered;
use crate::events::Event;
use crate::manifest::CommandSpec;
use crate::manifest::template;
use crate::process::{self, CensusKey, Finished, SpawnSpec};
use crate::vocab::Role;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A unit of every shared resource the command `uses`, taken in name order (so two commands never
/// hold one each of what the other waits for), waiting for as long as others hold them. A stop
/// while waiting ends the wait: the command is not run (cancelled).
pub(super) async fn take_resources(
    icx: &ItemCx<'_>,
    n: u32,
    gate: Option<&str>,
    uses: &[String],
) -> Result<Vec<crate::lease::ResourceUnit>, Finished> {
    let mut names: Vec<&String> = uses.iter().collect();
    names.sort();
    names.dedup();
    let mut units = Vec::with_capacity(names.len());
    if names.is_empty() {
        return Ok(units);
    }
    let dir = crate::lease::resources_dir();
    let mut stop = icx.stop.clone();
    for name in names {
        let count = icx
            .cx
            .loaded
            .manifest
            .resources
            .get(name)
            .copied()
            .unwrap_or(1);
        let mut since: Option<std::time::Instant> = None;
        loop {
            // Made before asking: a unit this process gives back meanwhile wakes it.
            let released = crate::lease::UNIT_RELEASED.notified();
            if *stop.borrow() != process::Stop::Run {
                return Err(Finished {
                    cancelled: true,
                    ..Finished::default()
                });
            }
            match crate::lease::try_resource(&dir, name, count) {
                Ok(Some(unit)) => {
                    if let Some(t) = since {
                        let _ = icx.events.send(Event::ResourceAcquired {
                            item: icx.idx,
                            n,
                            resource: name.clone(),
                            gate: gate.map(str::to_string),
                            waited: t.elapsed(),
                        });
                    }
                    units.push(unit);
                    break;
                }
                Ok(None) => {}
                Err(e) => {
                    return Err(unstarted(format!(
                        "cannot take shared resource `{name}` in `{}`: {e}",
                        dir.display()
                    )));
                }
            }
            if since.is_none() {
                since = Some(std::time::Instant::now());
                let _ = icx.events.send(Event::ResourceWaiting {
                    item: icx.idx,
                    n,
                    resource: name.clone(),
                    gate: gate.map(str::to_string),
                });
            }
            // Units are free when a lock is: one this run gives back wakes the waiters at once;
            // another process's is found by asking again, often enough that a freed unit does
            // not idle, rarely enough to cost nothing.
            let pause = std::time::Duration::from_millis(50);
            tokio::select! {
                () = released => {}
                () = tokio::time::sleep(pause) => {}
                changed = stop.changed() => {
                    if changed.is_err() {
                        tokio::time::sleep(pause).await;
                    }
                }
            }
        }
    }
    Ok(units)
}

/// Start `cmd` as `run` says (on `model`, with the previous attempt's `feedback`) and wait for
/// it; a command that cannot be rendered is an unstarted result.
pub(super) async fn spawn(
    icx: &ItemCx<'_>,
    cmd: &CommandSpec,
    model: Option<&str>,
    feedback: Option<&Path>,
    run: Launch<'_>,
) -> Finished {
    let n = run.n;
    let process = match run.gate {
        Some(g) => g.name.clone(),
        None if n == 0 => "setup".to_string(),
        None => "worker".to_string(),
    };
    let fin = match command(icx, cmd, model, feedback, &run) {
        Ok(ready) => launch(icx, ready, run).await,
        Err(e) => unstarted(e.to_string()),
    };
    if !fin.denied.accesses.is_empty() {
        let _ = icx.events.send(crate::events::Event::Denied {
            item: icx.idx,
            n,
            process,
            accesses: fin.denied.accesses.clone(),
            more: fin.denied.more,
        });
    }
    fin
}

/// A command that could not be started: why, as its result.
pub(super) fn unstarted(why: String) -> Finished {
    Finished::unstarted(why, std::time::Duration::ZERO)
}

/// A command line as a shell would read it back (words with spaces or quotes quoted).
pub(super) fn shell_words(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A command ready to start: its arguments and its exact environment.
pub(super) struct Ready {
    pub(super) argv: Vec<String>,
    pub(super) env: Vec<(String, String)>,
}

/// How to run a prepared command.
pub(super) struct Launch<'a> {
    pub(super) gate: Option<&'a crate::manifest::Gate>,
    pub(super) n: u32,
    pub(super) log: PathBuf,
    pub(super) timeout: std::time::Duration,
    pub(super) grace: std::time::Duration,
    pub(super) silence: Option<std::time::Duration>,
    /// Where it runs: the item's checkout, or a baseline's worktree.
    pub(super) dir: &'a Path,
}

impl<'a> Launch<'a> {
    /// Gate `gate` of attempt `n`, run in `dir` within `limit` and logged to `log`.
    pub(super) fn gate(
        gate: &'a crate::manifest::Gate,
        n: u32,
        dir: &'a Path,
        log: PathBuf,
        limit: std::time::Duration,
    ) -> Launch<'a> {
        Launch {
            gate: Some(gate),
            n,
            log,
            timeout: limit,
            grace: gate.grace(),
            silence: None,
            dir,
        }
    }
}

/// The arguments and environment of `cmd` for the launch `run` (its attempt, gate and folder).
pub(super) fn command(
    icx: &ItemCx<'_>,
    cmd: &CommandSpec,
    model: Option<&str>,
    feedback: Option<&Path>,
    run: &Launch<'_>,
) -> Result<Ready, Unrendered> {
    let (n, gate, dir) = (run.n, run.gate, run.dir);
    let gate_name = gate.map(|g| g.name.as_str());
    let cx = icx.cx;
    let item = icx.item;
    let workdir = dir.to_string_lossy().to_string();
    let lookup = |name: &str| -> Option<String> {
        match name {
            "model" => Some(model.unwrap_or_default().to_string()),
            "repo" => Some(item.repo.clone()),
            "repo.path" => Some(workdir.clone()),
            "item" => Some(item.id.clone()),
            "attempt" => Some(n.to_string()),
            "run" => Some(cx.run_id.clone()),
            other => other.strip_prefix("item.").and_then(|v| {
                item.vars.get(v).cloned().or_else(|| {
                    // A tracker's item: its title, link and id, unless its vars say otherwise.
                    let s = item.source.as_ref()?;
                    match v {
                        "title" => Some(s.title.clone()),
                        "url" => s.url.clone(),
                        "source_id" => Some(s.id.clone()),
                        _ => None,
                    }
                })
            }),
        }
    };
    let argv = crate::engine::config::command_argv(&cx.loaded, cmd, lookup)?;
    let worker_env: Vec<(String, String)> = if gate.is_none() {
        icx.eff
            .worker
            .env
            .iter()
            .map(|(k, v)| {
                match template::render(v, |n| lookup(n.strip_prefix(template::RAW).unwrap_or(n))) {
                    Ok(v) => Ok((k.clone(), v)),
                    Err(message) => Err(Unrendered::Env {
                        name: k.clone(),
                        message,
                    }),
                }
            })
            .collect::<Result<_, _>>()?
    } else {
        Vec::new()
    };
    // A worker may say what it used; the folder is there for it to write into (kept between
    // the repository's items), and nothing is in its place before it does.
    let usage = gate.is_none().then(|| usage_path(icx, n));
    if let Some(path) = usage.as_deref() {
        // Made by the repository's first item: looked at, not made again.
        if let Some(dir) = path.parent()
            && !dir.is_dir()
        {
            let _ = std::fs::create_dir_all(dir);
        }
        let _ = std::fs::remove_file(path);
    }
    let brief = if gate.is_none() { brief(icx) } else { None };
    let env = child_env(
        |name| std::env::var(name).ok(),
        &icx.eff.env_pass,
        &icx.eff.secrets_for(if gate.is_none() {
            crate::manifest::SecretRole::Worker
        } else {
            crate::manifest::SecretRole::Gate
        }),
        &worker_env,
        &RunnerVars {
            run_id: &cx.run_id,
            repo: &item.repo,
            repo_path: &workdir,
            item: &item.id,
            model,
            attempt: n,
            role: if gate_name.is_some() {
                Role::Gate
            } else {
                Role::Worker
            },
            gate: gate_name,
            token: &cx.token,
            max_workers: cx.workers,
            feedback,
            usage: usage.as_deref(),
            brief: brief.as_deref(),
            defaults: &build_cache(icx),
            tmpdir: icx.rules.as_ref().map(|r| r.tmp.as_path()),
            sandbox: (icx.rules.is_some() && cx.sandbox.landlock)
                .then_some(cx.sandbox.summary.as_str()),
            proxy: icx.rules.is_some() && cx.sandbox.allow.is_some(),
        },
    );
    Ok(Ready { argv, env })
}

/// A tracker item's brief (`RUNNER_BRIEF`): its title, link, body and the comments people wrote,
/// oldest first, redacted, written once into the item's log folder. `None` for other items, or
/// when it cannot be written (the worker then goes without, as without a task file).
fn brief(icx: &ItemCx<'_>) -> Option<PathBuf> {
    let item = icx.item.source.as_ref()?.item.as_ref()?;
    let path = icx.logs.join("brief.md");
    if !path.exists() {
        let text = icx.cx.redactor.redact(&crate::plan::source::brief(item));
        std::fs::create_dir_all(&icx.logs).ok()?;
        crate::support::fs::write_atomic(&path, text.as_bytes()).ok()?;
    }
    Some(path)
}

/// What runner sets for an item in a worktree unless the manifest does: a build cache of the
/// repository's own under the workspace (`CARGO_TARGET_DIR`), so that a fresh worktree does not
/// build every dependency again. Two items of one repository never run at once, and cargo locks
/// its folder besides.
pub(super) fn build_cache(icx: &ItemCx<'_>) -> Vec<(String, String)> {
    if icx.item.branch.is_none() {
        return Vec::new();
    }
    let dir = build_cache_dir(icx.cx, &icx.repo.name);
    vec![(
        "CARGO_TARGET_DIR".to_string(),
        dir.to_string_lossy().into_owned(),
    )]
}

/// A repository's build cache (`CARGO_TARGET_DIR` of its items in worktrees).
pub(super) fn build_cache_dir(cx: &crate::engine::run::RunCx, repo: &str) -> PathBuf {
    cx.workspace.join("cache").join("target").join(repo)
}

/// Start a prepared command and wait for its end, holding the shared resources it uses.
pub(super) async fn launch(icx: &ItemCx<'_>, prepared: Ready, run: Launch<'_>) -> Finished {
    let gate = run.gate;
    let gate_name = gate.map(|g| g.name.as_str());
    // Validation has compiled the pattern once already.
    let count_lines = gate
        .and_then(|g| g.min_tests.as_ref())
        .and_then(|m| regex::Regex::new(&m.pattern).ok())
        .map(Arc::new);
    let uses = gate.map_or(&icx.eff.worker.uses, |g| &g.uses);
    // Held until the command has ended; waiting for them is not part of its time limit.
    let _units = match take_resources(icx, run.n, gate_name, uses).await {
        Ok(u) => u,
        Err(fin) => return fin,
    };
    let confine = match &icx.rules {
        Some(rules) => match icx.cx.sandbox.confinement(rules, run.dir) {
            Ok(c) => Some(c),
            Err(e) if icx.cx.sandbox.mode == crate::manifest::SandboxMode::Required => {
                return unstarted(format!("cannot confine it: {e}"));
            }
            Err(e) => {
                tracing::warn!(error = %e, "a command runs unconfined");
                None
            }
        },
        None => None,
    };
    // A gate's failures are read from its output, its folders written as `<dir>`.
    let failure_roots = gate.map(|_| {
        let mut roots = vec![run.dir.to_string_lossy().to_string()];
        roots.push(icx.repo.path.to_string_lossy().to_string());
        roots
    });
    process::run(
        SpawnSpec {
            argv: prepared.argv,
            cwd: run.dir.to_path_buf(),
            env: prepared.env,
            log_path: run.log,
            timeout: run.timeout,
            grace: run.grace,
            silence: run.silence,
            redactor: icx.cx.redactor.clone(),
            inherit_fd: Some(icx.lease_fd),
            census: CensusKey {
                token: icx.cx.token.clone(),
                repo: icx.item.repo.clone(),
            },
            count_lines,
            failure_roots,
            cgroup: icx.cgroup.clone(),
            confine,
        },
        icx.stop.clone(),
    )
    .await
}

/// Where attempt `n`'s worker may write what it used: in its repository's private folder
/// ([`private_tmp`]), which only the item running there may write, and which is emptied
/// between items — so no new folder an item (a new inode costs more than a `true` worker on
/// some file systems), and no item writes another's. What it wrote is kept in the run's
/// `usage` folder once read ([`usage_record`]).
pub(super) fn usage_path(icx: &ItemCx<'_>, n: u32) -> PathBuf {
    private_tmp(icx.cx, &icx.repo.name).join(format!(".runner-usage-{n}.json"))
}

/// The private temporary folder of `repo`'s items (their `TMPDIR` when confined), in the
/// workspace: one a repository, its items running one at a time; kept, emptied between them. A
/// run started inside an item re-enters its parent's lease on the repository, and may share its
/// workspace: its items get a folder of their own inside the parent item's (emptied with it).
pub(super) fn private_tmp(cx: &crate::engine::run::RunCx, repo: &str) -> PathBuf {
    let tmp = cx.workspace.join("tmp").join(repo);
    match cx.parent_token {
        Some(_) => tmp.join(format!("nested-{}", cx.run_id)),
        None => tmp,
    }
}
