//! One item's lifecycle: where it runs, then worker and gates for up to `attempts` passes, with
//! the model chain moving on provider-class failures.

use super::chain::{ChainStep, ModelChain};
use super::child_env::{RunnerVars, child_env};
use super::classify::{ProviderPolicy, classify};
use super::config::Effective;
use super::run::RunCx;
use super::stall::HaltSignature;
use super::verdicts::{self, Verdict};
use crate::events::{CachedFrom, Event, GateFailures, Usage};
use crate::git;
use crate::manifest::CommandSpec;
use crate::manifest::compile_glob;
use crate::manifest::template;
use crate::plan::{ItemPlan, RepoPlan};
use crate::process::{self, CensusKey, Finished, SpawnSpec, Stop, output::last_lines};
use crate::support::failures::{Failure, compare};
use crate::vocab::Role;
use crate::vocab::{GateResult, ItemOutcome, WorkerClass};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::{mpsc, watch};
use tracing::Instrument;

/// Lines of a failing gate's output kept in the report.
const REPORT_TAIL_LINES: usize = 40;
const REPORT_TAIL_BYTES: usize = 4096;

/// How an item ended: what the scheduler is told.
pub use super::scheduler::Finished as ItemRun;

/// An item asks to rest for `wait` before its next attempt, freeing its slot; it goes on when
/// `wake` is sent (or the run stops).
#[derive(Debug)]
pub struct Rest {
    pub item: usize,
    pub wait: std::time::Duration,
    pub wake: tokio::sync::oneshot::Sender<()>,
}

struct ItemCx<'a> {
    cx: &'a RunCx,
    idx: usize,
    item: &'a ItemPlan,
    repo: &'a RepoPlan,
    eff: Effective,
    workdir: PathBuf,
    logs: PathBuf,
    lease_fd: i32,
    /// Where the item asks to rest between attempts.
    rest: mpsc::UnboundedSender<Rest>,
    /// The item's cgroup, when the run contains items in cgroups.
    cgroup: Option<Arc<crate::process::cgroup::ItemCgroup>>,
    events: &'a mpsc::UnboundedSender<Event>,
    stop: watch::Receiver<Stop>,
    /// Where the work started; `None` in a repository without a commit.
    anchor: Option<Anchor>,
}

pub async fn run_item(
    cx: Arc<RunCx>,
    idx: usize,
    lease_fd: i32,
    events: mpsc::UnboundedSender<Event>,
    rest: mpsc::UnboundedSender<Rest>,
    stop: watch::Receiver<Stop>,
) -> ItemRun {
    let item = &cx.plan.items[idx];
    let Some(repo) = cx.plan.repositories.iter().find(|r| r.name == item.repo) else {
        let mut r = ItemRun::ended(ItemOutcome::Failed);
        r.cause = Some(format!("repository `{}` is not in the plan", item.repo));
        return r;
    };
    let _ = events.send(Event::ItemStarted { item: idx });
    let eff = super::config::effective(&cx.loaded, repo.entry);
    let logs = cx.run_dir.join("logs").join(&repo.name).join(&item.id);
    let fresh;
    let workdir = match prepare(&cx, repo, item).await {
        Ok(ready) => {
            if item.branch.is_some() {
                let _ = events.send(Event::Worktree {
                    item: idx,
                    path: ready.dir.clone(),
                    backup: ready.backup,
                    shared: ready.shared,
                    unshared: ready.unshared,
                });
            }
            if let Some(patch) = ready.leftovers {
                let _ = events.send(Event::Leftovers { item: idx, patch });
            }
            fresh = ready.fresh;
            ready.dir
        }
        Err(Prepared::Held(reason, detail)) => {
            let mut r = ItemRun::ended(ItemOutcome::Held);
            r.reason = Some(reason.into());
            r.cause = Some(detail);
            return r;
        }
        Err(Prepared::Failed(_)) if *stop.borrow() != Stop::Run => {
            // Its git call was ended by the stop: not a verdict on the item.
            return ItemRun::ended(ItemOutcome::Cancelled);
        }
        Err(Prepared::Failed(e)) => return environmental(e.to_string()),
    };
    let anchor_of = |probe: git::Probe| {
        probe.head.map(|start| Anchor {
            branch: probe.branch,
            start,
        })
    };
    // A few small files answer on the loop, for less than a trip to the blocking pool costs.
    let anchor = match git::small_probe(&workdir) {
        Some(probe) => Ok(anchor_of(probe)),
        None => {
            let dir = workdir.clone();
            blocking(move || git::quick_probe(&dir).map(anchor_of))
                .await
                .and_then(|r| r.map_err(ItemError::from))
        }
    };
    let anchor = match anchor {
        Ok(a) => a,
        Err(_) if *stop.borrow() != Stop::Run => return ItemRun::ended(ItemOutcome::Cancelled),
        Err(e) => return environmental(e.to_string()),
    };
    // Made on the loop: a directory in the cgroup file system, held in memory by the kernel.
    let cgroup = match cx.contained.item(&repo.name) {
        Ok(c) => c,
        Err(e) => return environmental(e.to_string()),
    };
    let icx = ItemCx {
        cx: &cx,
        idx,
        item,
        repo,
        eff,
        workdir,
        logs,
        lease_fd,
        rest,
        cgroup,
        events: &events,
        stop,
        anchor,
    };
    if let Err((why, tree_gone)) = set_up(&icx, fresh).await {
        let mut held = environmental(why);
        held.tree_gone = tree_gone;
        return held;
    }
    let run = attempts(&icx).await;
    if run.outcome == ItemOutcome::Completed
        && let (Some(publish), Some(branch)) = (&cx.loaded.manifest.publish, &item.branch)
    {
        publish_item(&icx, publish, branch).await;
    }
    run
}

/// Publish a completed item's work branch, and say what came of it.
async fn publish_item(icx: &ItemCx<'_>, publish: &crate::manifest::Publish, branch: &str) {
    let cx = icx.cx;
    let start = icx.anchor.as_ref().map(|a| a.start.clone());
    let (dir, b) = (icx.repo.path.clone(), branch.to_string());
    let stat = match start {
        Some(s) => blocking(move || git::diffstat(&dir, &s, &format!("refs/heads/{b}")))
            .await
            .ok()
            .and_then(Result::ok),
        None => None,
    };
    let mut body = format!(
        "Work item `{}` in `{}`, done by runner (run `{}`).\n",
        icx.item.id, icx.item.repo, cx.run_id
    );
    if let Some((files, ins, del)) = stat {
        body.push_str(&format!(
            "\n{files} file(s) changed, {ins} insertion(s), {del} deletion(s).\n"
        ));
    }
    if let Some(task) = icx.item.vars.get("task") {
        body.push_str(&format!("\nTask: {task}\n"));
    }
    let env: Vec<(String, String)> = icx
        .eff
        .env_pass
        .iter()
        .chain(&icx.eff.secrets)
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.clone(), v)))
        .collect();
    let outcome = super::publish::publish(
        super::publish::Request {
            loaded: &cx.loaded,
            publish,
            repo: &icx.item.repo,
            repo_path: &icx.repo.path,
            item: &icx.item.id,
            branch,
            previous_url: cx.published.get(&icx.idx).map(String::as_str),
            title: format!("runner: {}", icx.item.id),
            body,
            env,
            logs: icx.logs.clone(),
            token: &cx.token,
            redactor: cx.redactor.clone(),
        },
        icx.stop.clone(),
    )
    .await;
    let _ = icx.events.send(Event::Published {
        item: icx.idx,
        remote: publish.remote().to_string(),
        branch: branch.to_string(),
        pushed: outcome.pushed,
        head: outcome.head,
        url: outcome.url,
        error: outcome.error,
    });
}

/// An item the environment failed (git, the cgroup file system, the disk): held, not failed —
/// nothing was wrong with the work, and the next run tries it again. The stall guard counts it.
fn environmental(cause: String) -> ItemRun {
    let mut r = ItemRun::ended(ItemOutcome::Held);
    r.reason = Some(crate::vocab::HoldReason::Environment.as_str().into());
    r.halt = Some(HaltSignature::described("environment", &cause));
    r.cause = Some(cause);
    r
}

enum Prepared {
    Held(&'static str, String),
    Failed(ItemError),
}

/// What keeps runner from running or finishing an item (its outcome is then `failed`).
#[derive(Debug, thiserror::Error)]
pub enum ItemError {
    #[error(transparent)]
    Git(#[from] git::GitError),
    /// A task on the blocking pool ended without an answer (it panicked or was cancelled).
    #[error("a git task of the item ended early: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// A value of `worker.env` whose template cannot be filled.
    #[error("`worker.env.{name}`: {message}")]
    Template { name: String, message: String },
}

/// Where an item runs, made ready.
struct Workplace {
    dir: PathBuf,
    /// The worktree was made now (its `worktree.setup` has not run in it yet).
    fresh: bool,
    /// What of `worktree.share` it got from the checkout, and what it did not, with why.
    shared: Vec<String>,
    unshared: Vec<String>,
    /// What an earlier run left uncommitted there, saved as a patch before it was removed.
    leftovers: Option<PathBuf>,
    /// The name the item's old branch is kept under, when it started anew (`--fresh`).
    backup: Option<String>,
}

/// Where the item runs: its worktree on the work branch, or the repository itself. What an
/// earlier run left in a kept worktree is written to the run's report folder, durably, before
/// the worktree is reset (a patch that cannot be saved holds the item, the worktree untouched).
/// With `--fresh`, an existing branch is kept under its backup name and started anew from the
/// base.
async fn prepare(cx: &RunCx, repo: &RepoPlan, item: &ItemPlan) -> Result<Workplace, Prepared> {
    let Some(branch) = item.branch.clone() else {
        return Ok(Workplace {
            fresh: false,
            shared: Vec::new(),
            unshared: Vec::new(),
            dir: repo.path.clone(),
            leftovers: None,
            backup: None,
        });
    };
    let spec = &cx.loaded.manifest.repositories[repo.entry];
    let markers = spec.critical_base.clone();
    let repo_path = repo.path.clone();
    let base = repo.base.clone().unwrap_or_else(|| "HEAD".into());
    let wt = cx
        .workspace
        .join("worktrees")
        .join(&repo.name)
        .join(&item.id);
    let patch_path = cx
        .run_dir
        .join("leftovers")
        .join(&repo.name)
        .join(format!("{}.patch", item.id));
    let fresh = item.replaces.is_some();
    let eff = super::config::effective(&cx.loaded, repo.entry);
    let share = eff.worktree.share.clone();
    let marker = setup_marker(&wt);
    tokio::task::spawn_blocking(move || {
        let failed = |e: git::GitError| Prepared::Failed(e.into());
        let exists = git::local_branches(&repo_path)
            .map_err(failed)?
            .contains(&branch);
        let restart = fresh && exists;
        // Checked again just before the attempt: the branch or the base may have moved since
        // the plan. A branch started anew is forked from the base, which must hold the markers.
        let tip = if exists && !restart {
            crate::plan::Tip::Branch(&branch)
        } else {
            crate::plan::Tip::Base(&base)
        };
        if let Some(detail) = crate::plan::missing_markers(&repo_path, tip, &markers) {
            return Err(Prepared::Held("stale-base", detail));
        }
        let leftovers = match git::kept_leftovers(&wt, &branch).map_err(failed)? {
            Some(patch) => {
                let saved = patch_path
                    .parent()
                    .map_or(Ok(()), std::fs::create_dir_all)
                    .and_then(|()| crate::support::fs::write_atomic(&patch_path, patch.as_bytes()));
                if let Err(e) = saved {
                    return Err(Prepared::Held(
                        "environment",
                        format!(
                            "cannot save what an earlier run left in `{}` to `{}`: {e}; the worktree is left as it was",
                            wt.display(),
                            patch_path.display()
                        ),
                    ));
                }
                git::reset_worktree(&wt).map_err(failed)?;
                Some(patch_path)
            }
            None => None,
        };
        let backup = if restart {
            let old = git::branch_tip(&repo_path, &branch).map_err(failed)?;
            let backup = crate::plan::backup_branch(&branch, &old);
            git::restart_branch(&repo_path, &wt, &branch, &backup, &base).map_err(failed)?;
            Some(backup)
        } else {
            None
        };
        let made = git::ensure_worktree(&repo_path, &wt, &branch, &base, exists).map_err(failed)?;
        if made {
            let _ = std::fs::remove_file(&marker);
        }
        let (shared, unshared) = share_into(&repo_path, &wt, &share).map_err(failed)?;
        Ok(Workplace {
            fresh: made,
            shared,
            unshared,
            dir: wt,
            leftovers,
            backup,
        })
    })
    .await
    .map_err(|e| Prepared::Failed(e.into()))?
}

/// Give the worktree `wt` the checkout's ignored `paths`: a folder's entries linked, a file
/// copied. A path
/// the checkout lacks, or that git does not ignore in the worktree (it would show there as new
/// work and be committed), is not given; what was given and what was not (with why) is said.
fn share_into(
    checkout: &Path,
    wt: &Path,
    paths: &[String],
) -> Result<(Vec<String>, Vec<String>), git::GitError> {
    let mut shared = Vec::new();
    let mut unshared = Vec::new();
    let wanted: Vec<String> = paths
        .iter()
        .filter(|p| std::fs::symlink_metadata(wt.join(p)).is_err())
        .cloned()
        .collect();
    // A folder is asked about as one (`node_modules/`): it is not in the worktree yet, and a
    // rule for folders only matches a path known to be one.
    let asked: Vec<String> = wanted
        .iter()
        .map(|p| {
            if checkout.join(p).is_dir() {
                format!("{}/", p.trim_end_matches('/'))
            } else {
                p.clone()
            }
        })
        .collect();
    let ignored = git::ignored_of(wt, &asked)?;
    for p in wanted {
        let src = checkout.join(&p);
        let dst = wt.join(&p);
        let Ok(meta) = std::fs::metadata(&src) else {
            unshared.push(format!("`{p}`: not in the checkout"));
            continue;
        };
        if !ignored.contains(p.trim_end_matches('/')) {
            unshared.push(format!(
                "`{p}`: not ignored in the repository, so it would be committed as new work"
            ));
            continue;
        }
        if let Some(parent) = dst.parent() {
            std::fs::create_dir_all(parent)?;
        }
        if meta.is_dir() {
            // A real folder holding a link to each entry: git ignores a folder by a rule such
            // as `node_modules/`, which a link in its place would not match (and the link would
            // be committed).
            std::fs::create_dir_all(&dst)?;
            for entry in std::fs::read_dir(&src)? {
                let entry = entry?;
                std::os::unix::fs::symlink(entry.path(), dst.join(entry.file_name()))?;
            }
        } else {
            std::fs::copy(&src, &dst)?;
        }
        shared.push(p);
    }
    Ok((shared, unshared))
}

/// Where a worktree's setup is recorded as done: beside the worktree, never in it.
fn setup_marker(wt: &Path) -> PathBuf {
    let mut name = wt.as_os_str().to_owned();
    name.push(".setup");
    PathBuf::from(name)
}

/// What the setup marker says for a worktree set up with `setup`: the command and the identity
/// of the worktree's `.git` (a worktree made anew at the same place is another one).
fn setup_stamp(wt: &Path, setup: &CommandSpec) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(wt.join(".git")).ok()?;
    Some(format!(
        "{}:{}:{}\n{}",
        meta.dev(),
        meta.ino(),
        meta.ctime(),
        serde_json::to_string(setup).unwrap_or_default()
    ))
}

/// Run the repository's `worktree.setup` in the item's worktree unless it ran there already:
/// once per worktree, before the first attempt. `Err` with why the item cannot go on, and
/// whether the setup's processes are proven gone.
async fn set_up(icx: &ItemCx<'_>, fresh: bool) -> Result<(), (String, bool)> {
    let Some(setup) = icx.eff.worktree.setup.clone() else {
        return Ok(());
    };
    if icx.item.branch.is_none() {
        return Ok(());
    }
    let marker = setup_marker(&icx.workdir);
    let stamp = setup_stamp(&icx.workdir, &setup);
    if !fresh && stamp.is_some() && std::fs::read_to_string(&marker).ok() == stamp {
        return Ok(());
    }
    let _ = std::fs::create_dir_all(&icx.logs);
    let log = icx.logs.join("0-setup.log");
    let timeout = icx.eff.worktree.timeout();
    let fin = spawn(
        icx,
        &setup,
        0,
        None,
        None,
        None,
        log.clone(),
        timeout,
        icx.eff.worker.grace(),
        None,
    )
    .await;
    let ok = fin.success() && !fin.timed_out && !fin.cancelled;
    let _ = icx.events.send(Event::SetupFinished {
        item: icx.idx,
        exit: fin.exit,
        ok,
        duration: fin.duration,
        log: fin.logged.then_some(log),
        output_tail: if ok {
            String::new()
        } else {
            last_lines(&fin.tail, REPORT_TAIL_LINES, REPORT_TAIL_BYTES)
        },
    });
    if !fin.tree_gone {
        return Err((
            "the worktree's setup left processes that could not be proven gone".into(),
            false,
        ));
    }
    if ok {
        if let Some(s) = stamp {
            let _ = crate::support::fs::write_atomic(&marker, s.as_bytes());
        }
        return Ok(());
    }
    let how = if fin.timed_out {
        format!(
            "timed out after {}",
            crate::manifest::format_duration(timeout)
        )
    } else {
        exit_text(&fin)
    };
    Err((
        format!(
            "the worktree's setup failed ({how}): {}",
            last_lines(&fin.tail, 5, 1024).trim()
        ),
        true,
    ))
}

/// A completed item's work: the snapshot of its passing attempt committed (on the work branch,
/// or on the checked-out branch for an item without one) unless `worker.commit: false`; a
/// completed item's worktree removed (its branch keeps the work). Returns what it left.
///
/// HEAD is checked first, as after the worker: `Ok(Err(_))` says what the gates moved.
async fn finish_work(
    icx: &ItemCx<'_>,
    snap: Option<Snapshot>,
    unverified: bool,
    markers: &[String],
    gates_ran: bool,
) -> Result<Result<Event, String>, ItemError> {
    let markers = markers.to_vec();
    let dir = icx.workdir.clone();
    let repo = icx.repo.path.clone();
    let anchor = icx.anchor.clone();
    let commit = icx.eff.worker.commit();
    let in_worktree = icx.item.branch.is_some();
    let message = format!("runner: {}", icx.item.id);
    let idx = icx.idx;
    let nothing_new = move |no_change: bool| Event::Work {
        item: idx,
        commit: None,
        files: 0,
        insertions: 0,
        deletions: 0,
        no_change,
        unverified,
        uncommitted: Vec::new(),
    };
    let (Some(anchor), Some(snap)) = (anchor, snap) else {
        // A repository without a commit: nothing to compare or commit against.
        return Ok(Ok(nothing_new(false)));
    };
    // The checkout was proven clean after the worker, at the commit the item started from, and
    // no gate ran since: nothing to commit, no worktree to remove, nothing to count.
    if !gates_ran && snap.tree.is_none() && !in_worktree && snap.head == anchor.start {
        return Ok(Ok(nothing_new(!snap.changed)));
    }
    blocking(move || -> Result<Result<Event, String>, ItemError> {
        // No gate ran since HEAD was checked after the worker (and the worker's processes are
        // gone): it stands where it was. Otherwise the gates must not have moved it either.
        let head = if gates_ran {
            match check_head(&dir, &anchor, &markers) {
                Ok(h) => h,
                Err(moved) => return Ok(Err(moved)),
            }
        } else {
            snap.head.clone()
        };
        let mut last = head.clone();
        let mut uncommitted = Vec::new();
        if let Some(tree) = &snap.tree
            && *tree != git::tree_of(&dir, &head)?
        {
            match (&anchor.branch, commit) {
                (Some(branch), true) => {
                    last = git::commit_tree_on(&dir, tree, &head, branch, &message)?;
                    if !in_worktree {
                        git::reset_index(&dir)?;
                    }
                }
                _ => uncommitted = git::uncommitted(&dir)?,
            }
        }
        if in_worktree && uncommitted.is_empty() {
            git::remove_worktree(&repo, &dir)?;
        }
        let (files, insertions, deletions) = if last == anchor.start {
            (0, 0, 0)
        } else {
            git::diffstat(&repo, &anchor.start, &last)?
        };
        Ok(Ok(Event::Work {
            item: idx,
            commit: (last != anchor.start).then_some(last),
            files,
            insertions,
            deletions,
            no_change: !snap.changed,
            unverified,
            uncommitted,
        }))
    })
    .await?
}

/// Where an item's work must stay: the branch it runs on and the commit it started from.
#[derive(Clone, Debug)]
struct Anchor {
    branch: Option<String>,
    start: String,
}

/// What a passing attempt left: the tree of its working tree before the gates ran.
#[derive(Clone, Debug)]
struct Snapshot {
    /// The tree to commit; `None` when the checkout was proven clean (nothing to commit).
    tree: Option<String>,
    /// The temporary index the tree was written through (its stat data for telling later what
    /// the gates changed); `None` with `tree`: the checkout's own index is the snapshot.
    index: Option<Arc<tempfile::TempPath>>,
    /// The worker changed something (committed or not) since the item started.
    changed: bool,
    /// Where HEAD was after the worker, checked.
    head: String,
}

/// Run `f` on the blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ItemError> {
    Ok(tokio::task::spawn_blocking(f).await?)
}

/// Check where the worker (or a gate) left HEAD: on the item's branch, descending from the
/// commit the item started from, containing every critical-base marker. `Err` says what moved.
fn check_head(dir: &Path, anchor: &Anchor, markers: &[String]) -> Result<String, String> {
    check_probed(dir, anchor, markers, None)
}

/// [`check_head`], from a probe of the checkout already read (`None`: read it now).
fn check_probed(
    dir: &Path,
    anchor: &Anchor,
    markers: &[String],
    probed: Option<git::Probe>,
) -> Result<String, String> {
    // Read from the checkout's files where they tell it; else asked of git.
    let probe = match probed {
        Some(p) => p,
        None => git::quick_probe(dir).map_err(|e| format!("HEAD cannot be read: {e}"))?,
    };
    let head = probe.head.ok_or("HEAD names no commit any more")?;
    let branch = probe.branch;
    if branch != anchor.branch {
        let name = |b: &Option<String>| {
            b.as_ref()
                .map_or("a detached HEAD".to_string(), |b| format!("`{b}`"))
        };
        return Err(format!(
            "HEAD moved from {} to {}; nothing is committed",
            name(&anchor.branch),
            name(&branch)
        ));
    }
    if head != anchor.start
        && !git::is_ancestor(dir, &anchor.start, &head).map_err(|e| e.to_string())?
    {
        return Err(format!(
            "HEAD `{}` no longer descends from `{}`, where the item started; nothing is committed",
            short(&head),
            short(&anchor.start)
        ));
    }
    let tip = match &anchor.branch {
        Some(b) => crate::plan::Tip::Branch(b),
        None => crate::plan::Tip::Base("HEAD"),
    };
    if let Some(lacks) = crate::plan::missing_markers(dir, tip, markers) {
        return Err(format!("{lacks}; nothing is committed"));
    }
    Ok(head)
}

fn short(id: &str) -> &str {
    id.get(..10).unwrap_or(id)
}

/// [`after_worker`]'s most common answer, had on the event loop where that costs less than a
/// trip to the blocking pool: a small checkout ([`git::Reads::Small`]) whose own files prove it
/// clean, HEAD at the very commit the item started from and no marker to look for, so that
/// nothing can ask git. `None`: ask [`after_worker`].
fn unchanged_small(dir: &Path, anchor: &Anchor, markers: &[String]) -> Option<Snapshot> {
    let probe = git::proven_clean_small(dir)?;
    if !markers.is_empty() || probe.head.as_deref() != Some(anchor.start.as_str()) {
        return None;
    }
    clean_snapshot(dir, anchor, markers, probe).ok()
}

/// What a worker pass left in a checkout its files prove clean: nothing to commit, and HEAD,
/// checked from the proof.
fn clean_snapshot(
    dir: &Path,
    anchor: &Anchor,
    markers: &[String],
    clean: git::Probe,
) -> Result<Snapshot, String> {
    let head = check_probed(dir, anchor, markers, Some(clean))?;
    Ok(Snapshot {
        tree: None,
        index: None,
        changed: head != anchor.start,
        head,
    })
}

/// After a worker pass: HEAD where it belongs, and the tree it left.
fn after_worker(dir: &Path, anchor: &Anchor, markers: &[String]) -> Result<Snapshot, String> {
    // The common case needs no git: a checkout its files prove clean has nothing to commit, and
    // the proof read HEAD already.
    if let Some(clean) = git::proven_clean(dir) {
        return clean_snapshot(dir, anchor, markers, clean);
    }
    let head = check_head(dir, anchor, markers)?;
    let (tree, index) = git::snapshot(dir).map_err(|e| e.to_string())?;
    let start_tree = git::tree_of(dir, &anchor.start).map_err(|e| e.to_string())?;
    Ok(Snapshot {
        changed: tree != start_tree || head != anchor.start,
        tree: Some(tree),
        index: Some(Arc::new(index)),
        head,
    })
}

/// The attempts loop: worker, then gates, until a pass succeeds, attempts run out, or the chain
/// is exhausted.
/// A provider-class failure on `model`: the run's view of the model learns of it (saying so
/// when that demotes the model), and the item's chain takes the step it calls for.
/// The item's chain by name; a manifest without `models` has one unnamed model.
fn chain_names(icx: &ItemCx<'_>) -> Vec<String> {
    icx.eff.models.as_ref().map_or_else(
        || vec![String::new()],
        |m| m.chain().into_iter().map(str::to_string).collect(),
    )
}

/// An item none of whose models can be used, each refused by its provider: held, for the next
/// run to try once the key is fixed; the scheduler admits nothing more.
fn refused_everywhere(run: &mut ItemRun, health: &super::health::Health, names: &[String]) {
    run.outcome = ItemOutcome::Held;
    run.reason = Some(crate::vocab::HoldReason::ProviderRefused.as_str().into());
    run.cause = Some(health.refusal_cause(names));
}

fn provider_failed(icx: &ItemCx<'_>, model: Option<&str>, chain: &mut ModelChain) -> ChainStep {
    if let Some(m) = model {
        let mut health = icx.cx.health.lock().unwrap_or_else(|p| p.into_inner());
        let now = std::time::Instant::now();
        let demoted = health.failed(m, &format!("{}/{}", icx.item.repo, icx.item.id), now);
        if let Some(d) = demoted {
            let names = chain_names(icx);
            let next = health
                .start(&names, now)
                .map(|i| names[i].clone())
                .filter(|n| n != m);
            let _ = icx.events.send(Event::ModelDemoted {
                item: icx.idx,
                model: m.to_string(),
                failures: d.failures,
                items: d.items,
                next,
            });
        }
    }
    chain.provider_failure()
}

/// Where attempt `n`'s worker may write what it used.
fn usage_path(icx: &ItemCx<'_>, n: u32) -> PathBuf {
    icx.logs.join(format!("{n}-usage.json"))
}

/// What reading a worker's `$RUNNER_USAGE` file gave.
enum UsageRead {
    /// What it used, and the model it says it used.
    Reported(Usage, Option<String>),
    /// It wrote nothing.
    Missing,
    /// It wrote something that is not a usage object: why.
    Malformed(String),
}

/// What a worker wrote to `$RUNNER_USAGE`: a JSON object with `input_tokens`, `output_tokens`,
/// `cost_usd` and `model` (the model it actually used), each optional; other fields are ignored.
fn read_usage(path: &Path) -> UsageRead {
    #[derive(serde::Deserialize)]
    struct File {
        #[serde(flatten)]
        usage: Usage,
        #[serde(default)]
        model: Option<String>,
    }
    use std::io::Read;
    let mut text = String::new();
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return UsageRead::Missing,
        Err(e) => return UsageRead::Malformed(format!("its usage file cannot be read: {e}")),
    };
    if let Err(e) = file.take(64 * 1024).read_to_string(&mut text) {
        return UsageRead::Malformed(format!("its usage file cannot be read: {e}"));
    }
    match serde_json::from_str::<File>(&text) {
        Ok(File { usage: u, model }) if u.cost_usd.is_none_or(|c| c.is_finite() && c >= 0.0) => {
            UsageRead::Reported(u, model.filter(|m| !m.trim().is_empty() && m.len() <= 200))
        }
        Ok(_) => UsageRead::Malformed("its usage file gives a negative or infinite cost".into()),
        Err(e) => UsageRead::Malformed(format!(
            "its usage file is not a JSON object of `input_tokens`, `output_tokens` and `cost_usd`: {e}"
        )),
    }
}

/// Rest `wait` after attempt `n` failed for the provider's reasons, the item's slot free
/// meanwhile: until the drain lets it go on. `false` when the run stopped instead.
async fn rest(icx: &ItemCx<'_>, n: u32, wait: std::time::Duration, tail: &str) -> bool {
    if wait.is_zero() {
        return true;
    }
    let _ = icx.events.send(Event::Resting {
        item: icx.idx,
        n,
        wait,
        hinted: super::backoff::retry_hint(tail).is_some(),
    });
    let (wake, woken) = tokio::sync::oneshot::channel();
    if icx
        .rest
        .send(Rest {
            item: icx.idx,
            wait,
            wake,
        })
        .is_err()
    {
        return false;
    }
    let mut stop = icx.stop.clone();
    let stopped = async move {
        loop {
            if *stop.borrow_and_update() != Stop::Run {
                return;
            }
            if stop.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        r = woken => r.is_ok() && *icx.stop.borrow() == Stop::Run,
        () = stopped => false,
    }
}

async fn attempts(icx: &ItemCx<'_>) -> ItemRun {
    let max_attempts = icx.eff.worker.attempts();
    let policy = ProviderPolicy::from_models(icx.eff.models.as_ref());
    let mut chain = ModelChain::new(
        icx.eff
            .models
            .as_ref()
            .map(|m| m.chain().into_iter().map(str::to_string).collect())
            .unwrap_or_default(),
        icx.eff.models.as_ref().map_or(2, |m| m.threshold()),
    );
    // Where the item's changes start, for gates with `paths`; not asked for when none has them.
    let start = if icx.eff.gates.iter().any(|g| !g.paths.is_empty()) {
        let w = icx.workdir.clone();
        tokio::task::spawn_blocking(move || git::head(&w).ok())
            .await
            .ok()
            .flatten()
    } else {
        None
    };
    let markers = icx.cx.loaded.manifest.repositories[icx.repo.entry]
        .critical_base
        .clone();
    // Models the run found failing are skipped by items that start now.
    if let Some(models) = icx.eff.models.as_ref() {
        let names: Vec<String> = models.chain().into_iter().map(str::to_string).collect();
        let mut health = icx.cx.health.lock().unwrap_or_else(|p| p.into_inner());
        match health.start(&names, std::time::Instant::now()) {
            Some(start) => chain.start_at(start),
            None => {
                let mut run = ItemRun::ended(ItemOutcome::Held);
                refused_everywhere(&mut run, &health, &names);
                return run;
            }
        }
    }
    let mut used = 0u32;
    let mut n = 0u32;
    // A rerun's first attempt is told how the previous run's last attempt failed.
    let mut feedback: Option<PathBuf> = icx.cx.previous_feedback.get(&icx.idx).and_then(|prev| {
        let here = icx.logs.join("0-feedback.txt");
        std::fs::create_dir_all(&icx.logs).ok()?;
        std::fs::copy(prev, &here).ok()?;
        Some(here)
    });
    let mut run = ItemRun::ended(ItemOutcome::Halted);
    // Provider failures in a row, for the back-off; and when the last rest began.
    let mut provider_streak = 0u32;
    let mut rested_since: Option<std::time::Instant> = None;
    let backoff = {
        let (initial, max) = icx.eff.models.as_ref().map_or(
            (
                crate::manifest::DEFAULT_BACKOFF_INITIAL,
                crate::manifest::DEFAULT_BACKOFF_MAX,
            ),
            |m| m.backoff(),
        );
        super::backoff::Backoff { initial, max }
    };
    loop {
        if used >= max_attempts {
            run.outcome = ItemOutcome::Halted;
            run.reason = Some("attempts-exhausted".into());
            return run;
        }
        n += 1;
        let model = chain.current().map(str::to_string);
        let _ = icx.events.send(Event::AttemptStarted {
            item: icx.idx,
            n,
            model: model.clone(),
            waited: rested_since.take().map(|t| t.elapsed()),
        });
        let attempt_span = tracing::debug_span!("attempt", n, model = model.as_deref());
        let log = icx.logs.join(format!("{n}-worker.log"));
        let silence = icx
            .eff
            .models
            .as_ref()
            .and_then(|m| m.provider_failure.as_ref())
            .and_then(|p| p.silence)
            .map(|d| d.0);
        let fin = spawn(
            icx,
            &icx.eff.worker.run,
            n,
            model.as_deref(),
            None,
            feedback.as_deref(),
            log.clone(),
            icx.eff.worker.timeout(),
            icx.eff.worker.grace(),
            silence,
        )
        .instrument(attempt_span.clone())
        .await;
        let class = classify(&fin, &policy);
        match read_usage(&usage_path(icx, n)) {
            UsageRead::Reported(mut usage, used_model) => {
                // Tokens without a cost are priced at `models.prices`, for the model the worker
                // says it used, else the attempt's.
                if usage.cost_usd.is_none() {
                    usage.cost_usd = icx.eff.models.as_ref().and_then(|m| {
                        let price = used_model
                            .as_deref()
                            .or(model.as_deref())
                            .and_then(|name| m.prices.get(name))?;
                        Some(price.cost(usage.input_tokens, usage.output_tokens))
                    });
                }
                let _ = icx.events.send(Event::Usage {
                    item: icx.idx,
                    n,
                    model: model.clone(),
                    usage,
                    used_model,
                });
            }
            // Most workers report nothing; with a budget, nothing is not zero.
            UsageRead::Missing if icx.cx.loaded.manifest.budget.is_none() => {}
            UsageRead::Missing => {
                let _ = icx.events.send(Event::UsageUnknown {
                    item: icx.idx,
                    n,
                    why: "its worker wrote no usage to `RUNNER_USAGE`".into(),
                });
            }
            UsageRead::Malformed(why) => {
                let _ = icx.events.send(Event::UsageUnknown {
                    item: icx.idx,
                    n,
                    why,
                });
            }
        }
        tracing::debug!(parent: &attempt_span, class = class.as_str(), exit = fin.exit, "worker finished");
        run.tree_gone &= fin.tree_gone;
        let _ = icx.events.send(Event::WorkerFinished {
            item: icx.idx,
            n,
            exit: fin.exit,
            class,
            duration: fin.duration,
            log: fin.logged.then_some(log),
            log_error: fin.log_error.clone(),
            unlogged_bytes: (fin.unlogged > 0).then_some(fin.unlogged),
            ended: if fin.silenced {
                silence.map(|d| {
                    format!(
                        "no output for {} (`models.provider_failure.silence`)",
                        crate::manifest::format_duration(d)
                    )
                })
            } else if fin.timed_out {
                Some(format!(
                    "timed out after {}",
                    crate::manifest::format_duration(icx.eff.worker.timeout())
                ))
            } else {
                None
            },
            output_tail: match (&fin.spawn_error, class) {
                (Some(e), _) => e.clone(),
                (None, WorkerClass::Ok) => String::new(),
                (None, _) => last_lines(&fin.tail, REPORT_TAIL_LINES, REPORT_TAIL_BYTES),
            },
        });
        if let Some(e) = &fin.spawn_error {
            run.outcome = ItemOutcome::Failed;
            run.cause = Some(e.clone());
            run.halt = Some(HaltSignature::described("worker", e));
            return run;
        }
        match class {
            WorkerClass::Cancelled => {
                run.outcome = ItemOutcome::Cancelled;
                return run;
            }
            WorkerClass::Refused => {
                // Not retried on this model, by this item or any other: the next usable model
                // of the chain goes on at once; none left holds the item.
                let names = chain_names(icx);
                let message = super::classify::refusal_message(&fin.tail);
                let mut health = icx.cx.health.lock().unwrap_or_else(|p| p.into_inner());
                let key = model.clone().unwrap_or_default();
                if health.refuse(&key, &message) {
                    let _ = icx.events.send(Event::ModelRefused {
                        item: icx.idx,
                        model: model.clone(),
                        message,
                    });
                }
                provider_streak = 0;
                match health.usable(&names, chain.position() + 1) {
                    Some(next) => {
                        chain.move_to(next);
                        continue;
                    }
                    None => {
                        refused_everywhere(&mut run, &health, &names);
                        return run;
                    }
                }
            }
            WorkerClass::Provider => match provider_failed(icx, model.as_deref(), &mut chain) {
                ChainStep::Stay | ChainStep::Moved => {
                    provider_streak += 1;
                    let wait = backoff.delay(provider_streak, &fin.tail, super::backoff::unit());
                    rested_since = Some(std::time::Instant::now());
                    if !rest(icx, n, wait, &fin.tail).await {
                        run.outcome = ItemOutcome::Cancelled;
                        return run;
                    }
                    continue;
                }
                ChainStep::Unavailable => {
                    run.outcome = ItemOutcome::Held;
                    run.reason = Some(
                        crate::vocab::HoldReason::ProviderUnavailable
                            .as_str()
                            .into(),
                    );
                    run.cause = Some(format!(
                        "model `{}` failed for the provider's reasons {} times in a row and the chain has no fallback; the next run tries again",
                        model.as_deref().unwrap_or("(none)"),
                        super::chain::NO_FALLBACK_LIMIT
                    ));
                    return run;
                }
                ChainStep::Exhausted => {
                    run.outcome = ItemOutcome::Halted;
                    run.reason = Some("fallback-exhausted".into());
                    run.cause = Some(format!(
                        "every model of the chain failed for the provider's reasons ({})",
                        chain.tried().join(", ")
                    ));
                    run.halt = Some(HaltSignature::of("worker (provider)", &fin.tail, fin.exit));
                    return run;
                }
            },
            WorkerClass::Timeout | WorkerClass::Failed => {
                chain.other_outcome();
                provider_streak = 0;
                used += 1;
                let what = if class == WorkerClass::Timeout {
                    format!(
                        "worker timed out after {}",
                        crate::manifest::format_duration(icx.eff.worker.timeout())
                    )
                } else {
                    format!("worker failed ({})", exit_text(&fin))
                };
                run.cause = Some(what);
                run.halt = Some(HaltSignature::of("worker", &fin.tail, fin.exit));
                feedback = write_feedback(icx, n, "the worker", &fin.tail);
            }
            WorkerClass::Ok => {
                chain.other_outcome();
                provider_streak = 0;
                used += 1;
                // Where the worker left HEAD, and what it changed, before any gate runs.
                let snap = match &icx.anchor {
                    Some(anchor)
                        if let Some(s) = unchanged_small(&icx.workdir, anchor, &markers) =>
                    {
                        Some(s)
                    }
                    Some(anchor) => {
                        let (dir, a, m) = (icx.workdir.clone(), anchor.clone(), markers.clone());
                        match blocking(move || after_worker(&dir, &a, &m)).await {
                            Ok(Ok(s)) => Some(s),
                            Ok(Err(why)) => {
                                attempt_failed(icx, &mut run, &mut feedback, n, "worker", why);
                                continue;
                            }
                            Err(e) => {
                                attempt_failed(
                                    icx,
                                    &mut run,
                                    &mut feedback,
                                    n,
                                    "worker",
                                    e.to_string(),
                                );
                                continue;
                            }
                        }
                    }
                    None => None,
                };
                if icx.eff.worker.require_change() && snap.as_ref().is_some_and(|s| !s.changed) {
                    let why = "the worker changed nothing (`worker.require_change`)".to_string();
                    attempt_failed(icx, &mut run, &mut feedback, n, "worker", why);
                    continue;
                }
                let judged = gates(
                    icx,
                    n,
                    model.as_deref(),
                    feedback.as_deref(),
                    start.as_deref(),
                )
                .instrument(attempt_span.clone())
                .await;
                // What the gates wrote (bytecode, build output, a formatter's edits) goes: the
                // next worker pass, the commit and a halted item's leftovers hold the worker's
                // tree only.
                if !icx.eff.gates.is_empty()
                    && let Some(s) = &snap
                    && let Err(e) = undo_gates(icx, s).await
                {
                    let held = environmental(e);
                    run.outcome = held.outcome;
                    run.reason = held.reason;
                    run.cause = held.cause;
                    run.halt = held.halt;
                    return run;
                }
                match judged {
                    GatesOutcome::Passed {
                        any_passed,
                        verified,
                    } => {
                        run.progress |= any_passed;
                        // The gates must not have moved HEAD either; then the work is kept.
                        let gates_ran = !icx.eff.gates.is_empty();
                        match finish_work(icx, snap, !verified, &markers, gates_ran).await {
                            Ok(Ok(work)) => {
                                let _ = icx.events.send(work);
                            }
                            Ok(Err(moved)) => {
                                let why = format!("after the gates: {moved}");
                                attempt_failed(icx, &mut run, &mut feedback, n, "gates", why);
                                continue;
                            }
                            Err(e) => {
                                // The work passed; git could not keep it. The next run tries
                                // the item again.
                                let held = environmental(e.to_string());
                                run.outcome = held.outcome;
                                run.reason = held.reason;
                                run.cause = held.cause;
                                run.halt = held.halt;
                                return run;
                            }
                        }
                        run.outcome = ItemOutcome::Completed;
                        run.progress = true;
                        run.reason = None;
                        run.cause = None;
                        run.halt = None;
                        return run;
                    }
                    GatesOutcome::Cancelled => {
                        run.outcome = ItemOutcome::Cancelled;
                        return run;
                    }
                    GatesOutcome::Failed {
                        gate,
                        fin,
                        any_passed,
                        timed_out,
                        why,
                    } => {
                        run.progress |= any_passed;
                        run.tree_gone &= fin.tree_gone;
                        run.cause = Some(if timed_out {
                            format!("gate `{gate}` timed out")
                        } else {
                            match why {
                                Some(w) => format!("gate `{gate}` failed: {w}"),
                                None => format!("gate `{gate}` failed ({})", exit_text(&fin)),
                            }
                        });
                        let stage = format!("gate `{gate}`");
                        run.halt = Some(if timed_out {
                            HaltSignature::described(stage.clone(), "timed out")
                        } else {
                            HaltSignature::of(stage.clone(), &fin.tail, fin.exit)
                        });
                        feedback = write_feedback(icx, n, &stage, &fin.tail);
                    }
                }
            }
        }
    }
}

/// Put the worker's tree back after the gates: remove what they created (not ignored) and write
/// back what they changed, as the snapshot holds it.
async fn undo_gates(icx: &ItemCx<'_>, snap: &Snapshot) -> Result<(), String> {
    // A checkout that was clean and still is: nothing to undo, and its files say so.
    if snap.index.is_none() && git::proven_clean_small(&icx.workdir).is_some() {
        return Ok(());
    }
    let dir = icx.workdir.clone();
    let index = snap.index.clone();
    let restored = blocking(move || git::restore_snapshot(&dir, index.as_deref().map(|p| &**p)))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| {
            format!(
                "cannot undo what the gates wrote in `{}`: {e}",
                icx.workdir.display()
            )
        })?;
    if !restored.removed.is_empty() || !restored.restored.is_empty() {
        tracing::debug!(
            removed = restored.removed.len(),
            restored = restored.restored.len(),
            "what the gates wrote is undone"
        );
    }
    Ok(())
}

/// An attempt failed for a reason of runner's finding (HEAD moved, nothing changed): it counts
/// as a failed attempt, and the next one is told why.
fn attempt_failed(
    icx: &ItemCx<'_>,
    run: &mut ItemRun,
    feedback: &mut Option<PathBuf>,
    n: u32,
    stage: &str,
    why: String,
) {
    run.halt = Some(HaltSignature::described(stage, &why));
    let at = match stage {
        "worker" => "the worker",
        "gates" => "the gates",
        other => other,
    };
    *feedback = write_feedback(icx, n, at, &why);
    run.cause = Some(why);
}

fn exit_text(f: &Finished) -> String {
    if let Some(why) = &f.spawn_error {
        return why.clone();
    }
    match (f.exit, f.signal) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => "no exit status".into(),
    }
}

enum GatesOutcome {
    Passed {
        any_passed: bool,
        /// A required gate ran and passed: the work was checked.
        verified: bool,
    },
    Failed {
        gate: String,
        fin: Box<Finished>,
        any_passed: bool,
        timed_out: bool,
        /// Why it failed, when its exit does not say (too few tests).
        why: Option<String>,
    },
    Cancelled,
}

async fn gates(
    icx: &ItemCx<'_>,
    n: u32,
    model: Option<&str>,
    feedback: Option<&Path>,
    start: Option<&str>,
) -> GatesOutcome {
    let gates = &icx.eff.gates;
    let needs_changes = gates.iter().any(|g| !g.paths.is_empty());
    let changed: Option<Vec<String>> = if needs_changes {
        let dir = icx.workdir.clone();
        let since = match (&icx.item.branch, &icx.repo.base) {
            (Some(_), Some(base)) => {
                let d = dir.clone();
                let b = base.clone();
                tokio::task::spawn_blocking(move || git::merge_base(&d, &b, "HEAD"))
                    .await
                    .ok()
                    .flatten()
            }
            _ => None,
        }
        .or_else(|| start.map(str::to_string));
        match since {
            Some(s) => tokio::task::spawn_blocking(move || git::changed_files(&dir, &s).ok())
                .await
                .ok()
                .flatten(),
            None => None,
        }
    } else {
        None
    };
    let mut any_passed = false;
    let mut verified = false;
    let mut decided: Option<(String, Finished, bool, Option<String>)> = None;
    // A gate that did not run: its result and why, with no output and no time.
    let unrun = |gate: &str, result: GateResult, reason: &str| {
        let _ = icx.events.send(Event::GateFinished {
            item: icx.idx,
            n,
            gate: gate.to_string(),
            result,
            reason: Some(reason.to_string()),
            duration: std::time::Duration::ZERO,
            output_tail: String::new(),
            log: None,
            exit: None,
            cached: None,
            failures: None,
            log_error: None,
            unlogged_bytes: None,
        });
    };
    for gate in gates {
        if decided.is_some() {
            unrun(
                &gate.name,
                GateResult::NotRun,
                "an earlier required gate failed",
            );
            continue;
        }
        if !gate.paths.is_empty() {
            let matchers: Vec<_> = gate
                .paths
                .iter()
                .filter_map(|p| compile_glob(p).ok())
                .collect();
            // Unknown changes (git could not tell) fail closed: the gate runs.
            let touched = changed
                .as_ref()
                .is_none_or(|files| files.iter().any(|f| matchers.iter().any(|m| m.is_match(f))));
            if !touched {
                unrun(
                    &gate.name,
                    GateResult::Skipped,
                    "no changed file matches its `paths`",
                );
                continue;
            }
        }
        // `timeout: auto` gates have the limit their history gave them.
        let limit = icx
            .cx
            .gate_timeouts
            .get(&gate.name)
            .copied()
            .unwrap_or_else(|| gate.timeout());
        let ready = command(icx, &gate.run, n, model, Some(gate), feedback, &icx.workdir);
        let _ = icx.events.send(Event::GateStarted {
            item: icx.idx,
            n,
            gate: gate.name.clone(),
            limit,
            command: ready
                .as_ref()
                .ok()
                .map(|r| icx.cx.redactor.redact(&shell_words(&r.argv))),
            dir: Some(icx.workdir.clone()),
            required: gate.required(),
        });
        let log = icx.logs.join(format!("{n}-gate-{}.log", gate.name));
        let run = Launch {
            gate: Some(gate),
            n,
            log: log.clone(),
            timeout: limit,
            grace: gate.grace(),
            silence: None,
            dir: &icx.workdir,
        };
        let (fin, cached) = judged(icx, gate, ready, run, None, verdicts::Kind::Gate)
            .instrument(tracing::debug_span!("gate", gate = %gate.name))
            .await;
        let result = if fin.cancelled {
            GateResult::NotRun
        } else if fin.timed_out {
            GateResult::TimedOut
        } else if fin.success() {
            GateResult::Passed
        } else {
            GateResult::Failed
        };
        // Too few tests ran: a suite an agent emptied does not pass, however it exited.
        let too_few = gate.min_tests.as_ref().and_then(|m| {
            (result == GateResult::Passed && fin.counted < u64::from(m.count)).then(|| {
                format!(
                    "{} test{} ran (lines matching `{}`), fewer than `min_tests.count` {}",
                    fin.counted,
                    if fin.counted == 1 { "" } else { "s" },
                    m.pattern,
                    m.count
                )
            })
        });
        let result = if too_few.is_some() {
            GateResult::Failed
        } else {
            result
        };
        let mut fin = fin;
        if let Some(why) = &too_few {
            fin.tail.push_str(&format!("\nrunner: {why}\n"));
        }
        // A gate failing by its exit, with `baseline: true`: what the base commit fails too is
        // forgiven.
        let mut failures = None;
        let mut why = too_few.clone();
        let mut result = result;
        if result == GateResult::Failed
            && too_few.is_none()
            && gate.baseline()
            && fin.exit.is_some_and(|c| c != 126 && c != 127)
        {
            let judged = against_baseline(icx, gate, n, model, feedback, limit, &fin).await;
            match judged {
                Baselined::Cancelled => return GatesOutcome::Cancelled,
                Baselined::Judged {
                    forgiven,
                    lists,
                    why: w,
                } => {
                    if forgiven {
                        result = GateResult::Passed;
                    }
                    failures = Some(lists);
                    why = w;
                }
            }
        }
        tracing::debug!(gate = %gate.name, result = result.as_str(), exit = fin.exit, "gate finished");
        let tail = match &fin.spawn_error {
            Some(e) => e.clone(),
            None => last_lines(&fin.tail, REPORT_TAIL_LINES, REPORT_TAIL_BYTES),
        };
        let _ = icx.events.send(Event::GateFinished {
            item: icx.idx,
            n,
            gate: gate.name.clone(),
            result,
            reason: fin
                .cancelled
                .then(|| "the run was cancelled".to_string())
                .or(too_few.clone()),
            duration: fin.duration,
            output_tail: tail,
            log: (fin.logged && cached.is_none()).then_some(log),
            log_error: fin.log_error.clone(),
            unlogged_bytes: (fin.unlogged > 0).then_some(fin.unlogged),
            exit: fin.exit,
            cached,
            failures,
        });
        if fin.cancelled {
            return GatesOutcome::Cancelled;
        }
        if result == GateResult::Passed {
            any_passed = true;
            verified |= gate.required();
        } else if gate.required() {
            decided = Some((gate.name.clone(), fin, result == GateResult::TimedOut, why));
        }
    }
    match decided {
        None => GatesOutcome::Passed {
            any_passed,
            verified,
        },
        Some((gate, fin, timed_out, why)) => GatesOutcome::Failed {
            gate,
            fin: Box::new(fin),
            any_passed,
            timed_out,
            why,
        },
    }
}

/// Run gate `run.gate` as `ready` says (or say why it could not start), or reuse its recorded
/// verdict on the tree it would run on (`tree`, when known; else read from `run.dir` before it
/// runs). Returns how it finished and, for a reused verdict, where that was given.
async fn judged(
    icx: &ItemCx<'_>,
    gate: &crate::manifest::Gate,
    ready: Result<Ready, String>,
    run: Launch<'_>,
    tree: Option<String>,
    kind: verdicts::Kind,
) -> (Finished, Option<CachedFrom>) {
    let ready = match ready {
        Ok(r) => r,
        Err(e) => return (unstarted(e), None),
    };
    let key = if gate.cache() {
        // The tree, and what the gate can read that the tree does not show (ignored files, a
        // link's target outside the folder); nothing to key by when a submodule has changes.
        let d = run.dir.to_path_buf();
        let tree = blocking(move || {
            let tree = match tree {
                Some(t) => t,
                None => git::working_tree(&d).ok()?,
            };
            let hidden = git::hidden_inputs(&d).ok()??;
            Some(format!("{tree}\0{hidden}"))
        })
        .await
        .ok()
        .flatten();
        let counting = gate.min_tests.as_ref().map(|m| m.pattern.as_str());
        tree.map(|t| verdicts::key(kind, &t, &ready.argv, &ready.env, run.dir, counting))
    } else {
        None
    };
    if let Some(k) = &key {
        let (store, k2) = (icx.cx.verdicts.clone(), k.clone());
        if let Ok(Some(v)) = blocking(move || store.get(&k2)).await {
            tracing::debug!(gate = %gate.name, from = %v.run_id, "gate verdict reused");
            let from = CachedFrom {
                run_id: v.run_id.clone(),
                repo: v.repo.clone(),
                item: v.item.clone(),
                at: v.at.clone(),
            };
            return (v.finished(), Some(from));
        }
    }
    let fin = launch(icx, ready, run).await;
    if let Some(k) = key
        && (kind == verdicts::Kind::Baseline || fin.success())
        && let Some(v) = Verdict::of(&fin, &icx.cx.run_id, &icx.item.repo, &icx.item.id)
    {
        let store = icx.cx.verdicts.clone();
        let _ = blocking(move || store.put(&k, &v)).await;
    }
    (fin, None)
}

/// A gate's run on the base commit: which failures the base already has.
#[derive(Clone, Debug)]
pub struct Baseline {
    pub commit: String,
    /// `Passed`, `Failed`, `TimedOut`; `NotRun` when it could not be run at all.
    pub result: GateResult,
    pub failures: Vec<Failure>,
    /// Why it could not be run.
    pub error: Option<String>,
    /// The item that ran it in this run (another item reusing it says so).
    pub ran_for: Option<CachedFrom>,
}

/// What a failing baseline gate comes to once compared with its baseline.
enum Baselined {
    Cancelled,
    Judged {
        /// Every failure is one the base has: the gate passes.
        forgiven: bool,
        lists: GateFailures,
        /// Why it still fails, naming only what is new.
        why: Option<String>,
    },
}

/// At most this many new failures are named in an item's cause.
const CAUSE_FAILURES: usize = 5;

/// Compare a failed run of `gate` with its run on the base commit.
#[allow(clippy::too_many_arguments)]
async fn against_baseline(
    icx: &ItemCx<'_>,
    gate: &crate::manifest::Gate,
    n: u32,
    model: Option<&str>,
    feedback: Option<&Path>,
    limit: std::time::Duration,
    fin: &Finished,
) -> Baselined {
    let Some(base) = baseline(icx, gate, n, model, feedback, limit).await else {
        return Baselined::Cancelled;
    };
    let lines = |v: &[Failure]| v.iter().map(|f| f.line.clone()).collect::<Vec<_>>();
    let at = short(&base.commit).to_string();
    let named = |new: &[Failure]| {
        let mut s: Vec<String> = new
            .iter()
            .take(CAUSE_FAILURES)
            .map(|f| f.line.clone())
            .collect();
        if new.len() > CAUSE_FAILURES {
            s.push(format!("and {} more", new.len() - CAUSE_FAILURES));
        }
        s.join("; ")
    };
    let all_new = |why: String| Baselined::Judged {
        forgiven: false,
        lists: GateFailures {
            new: lines(&fin.failures),
            forgiven: Vec::new(),
        },
        why: Some(why),
    };
    match base.result {
        GateResult::Passed => all_new(if fin.failures.is_empty() {
            format!(
                "{} here, and passes on the base commit `{at}`",
                exit_text(fin)
            )
        } else {
            format!(
                "passes on the base commit `{at}`; failing here: {}",
                named(&fin.failures)
            )
        }),
        GateResult::Failed => {
            if fin.failures.is_empty() {
                return all_new(format!(
                    "{}; it fails on the base commit `{at}` too, but no failure line was \
                     recognised here, so nothing is forgiven",
                    exit_text(fin)
                ));
            }
            let cmp = compare(&fin.failures, &base.failures);
            let forgiven = cmp.new.is_empty();
            let why = (!forgiven).then(|| {
                let k = cmp.new.len();
                let old = match cmp.forgiven.len() {
                    0 => format!("none of them fails on the base commit `{at}`"),
                    f => format!(
                        "{f} more fail{} on the base commit `{at}` too",
                        if f == 1 { "s" } else { "" }
                    ),
                };
                format!(
                    "{k} new failure{} ({old}): {}",
                    if k == 1 { "" } else { "s" },
                    named(&cmp.new)
                )
            });
            Baselined::Judged {
                forgiven,
                lists: GateFailures {
                    new: lines(&cmp.new),
                    forgiven: lines(&cmp.forgiven),
                },
                why,
            }
        }
        GateResult::TimedOut => all_new(format!(
            "{}; its baseline on `{at}` timed out, which forgives nothing",
            exit_text(fin)
        )),
        _ => all_new(format!(
            "{}; its baseline could not be run ({}), which forgives nothing",
            exit_text(fin),
            base.error.as_deref().unwrap_or("no base commit")
        )),
    }
}

/// `gate` on the base commit (the repository's base for an item on a work branch, else the
/// commit the item started from), in a detached worktree of its own: once per run for each
/// repository, gate and commit, and not at all when a verdict on that tree is recorded. `None`
/// when the run was cancelled meanwhile.
async fn baseline(
    icx: &ItemCx<'_>,
    gate: &crate::manifest::Gate,
    n: u32,
    model: Option<&str>,
    feedback: Option<&Path>,
    limit: std::time::Duration,
) -> Option<Baseline> {
    let repo = icx.repo.path.clone();
    let unrun = |commit: String, error: String| Baseline {
        commit,
        result: GateResult::NotRun,
        failures: Vec::new(),
        error: Some(error),
        ran_for: None,
    };
    let commit = match (&icx.item.branch, &icx.anchor) {
        (None, Some(anchor)) => Ok(anchor.start.clone()),
        (None, None) => Err("the repository has no commit".to_string()),
        (Some(_), _) => {
            let (r, base) = (
                repo.clone(),
                icx.repo.base.clone().unwrap_or_else(|| "HEAD".into()),
            );
            blocking(move || git::commit_of(&r, &base).map_err(|e| e.to_string()))
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r)
        }
    };
    let commit = match commit {
        Ok(c) => c,
        Err(e) => return Some(unrun(String::new(), e)),
    };
    let memo = format!("{}\0{}\0{commit}", icx.repo.name, gate.name);
    if let Some(b) = icx
        .cx
        .baselines
        .lock()
        .ok()
        .and_then(|m| m.get(&memo).cloned())
    {
        send_baseline(
            icx,
            n,
            gate,
            &b,
            b.ran_for.clone(),
            std::time::Duration::ZERO,
            (None, None, 0),
        );
        return Some(b);
    }
    let wt = icx.cx.workspace.join("baselines").join(&icx.repo.name);
    let (r, w, c) = (repo.clone(), wt.clone(), commit.clone());
    let made = blocking(move || -> Result<String, String> {
        git::add_detached_worktree(&r, &w, &c).map_err(|e| e.to_string())?;
        git::tree_of(&r, &c).map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| e.to_string())
    .and_then(|r| r);
    let tree = match made {
        Ok(t) => t,
        Err(e) => {
            let b = unrun(commit, format!("no worktree of the base commit: {e}"));
            send_baseline(
                icx,
                n,
                gate,
                &b,
                None,
                std::time::Duration::ZERO,
                (None, None, 0),
            );
            return Some(b);
        }
    };
    let log = icx.logs.join(format!("{n}-baseline-{}.log", gate.name));
    let run = Launch {
        gate: Some(gate),
        n,
        log: log.clone(),
        timeout: limit,
        grace: gate.grace(),
        silence: None,
        dir: &wt,
    };
    let ready = command(icx, &gate.run, n, model, Some(gate), feedback, &wt);
    let (fin, cached) = judged(icx, gate, ready, run, Some(tree), verdicts::Kind::Baseline)
        .instrument(tracing::debug_span!("baseline", gate = %gate.name))
        .await;
    let (r, w) = (repo, wt);
    let _ = blocking(move || {
        if let Err(e) = git::remove_worktree(&r, &w) {
            tracing::warn!(path = %w.display(), error = %e, "a baseline worktree could not be removed");
        }
    })
    .await;
    if fin.cancelled {
        return None;
    }
    let b = Baseline {
        commit,
        result: if fin.timed_out {
            GateResult::TimedOut
        } else if fin.spawn_error.is_some() || fin.silenced {
            GateResult::NotRun
        } else if fin.success() {
            GateResult::Passed
        } else {
            GateResult::Failed
        },
        failures: fin.failures.clone(),
        error: fin.spawn_error.clone(),
        ran_for: Some(cached.clone().unwrap_or_else(|| CachedFrom {
            run_id: icx.cx.run_id.clone(),
            repo: icx.item.repo.clone(),
            item: icx.item.id.clone(),
            at: crate::support::clock::now(),
        })),
    };
    let logged = (fin.logged && cached.is_none()).then_some(log);
    send_baseline(
        icx,
        n,
        gate,
        &b,
        cached,
        fin.duration,
        (logged, fin.log_error.clone(), fin.unlogged),
    );
    if let Ok(mut m) = icx.cx.baselines.lock() {
        m.insert(memo, b.clone());
    }
    Some(b)
}

fn send_baseline(
    icx: &ItemCx<'_>,
    n: u32,
    gate: &crate::manifest::Gate,
    b: &Baseline,
    cached: Option<CachedFrom>,
    duration: std::time::Duration,
    (log, log_error, unlogged): (Option<PathBuf>, Option<String>, u64),
) {
    let _ = icx.events.send(Event::GateBaseline {
        item: icx.idx,
        n,
        gate: gate.name.clone(),
        commit: b.commit.clone(),
        result: b.result,
        failures: b.failures.iter().map(|f| f.line.clone()).collect(),
        cached,
        duration,
        log,
        log_error,
        unlogged_bytes: (unlogged > 0).then_some(unlogged),
    });
}

/// Write `<n>-feedback.txt`: `attempt N failed at <stage>; the end of its output:` (the stage
/// is ``gate `test` `` or `the worker`), a blank line, the output's last lines.
fn write_feedback(icx: &ItemCx<'_>, n: u32, stage: &str, tail: &str) -> Option<PathBuf> {
    let path = icx.logs.join(format!("{n}-feedback.txt"));
    let text = format!(
        "attempt {n} failed at {stage}; the end of its output:\n\n{}\n",
        last_lines(tail, 200, 32 * 1024)
    );
    let written = std::fs::create_dir_all(&icx.logs)
        .and_then(|()| crate::support::fs::write_atomic(&path, text.as_bytes()));
    match written {
        Ok(()) => Some(path),
        Err(e) => {
            // The next attempt runs without `RUNNER_FEEDBACK`: said, not silent.
            tracing::warn!(
                "{}/{}: the next attempt gets no feedback: cannot write `{}`: {e}",
                icx.item.repo,
                icx.item.id,
                path.display()
            );
            None
        }
    }
}

/// A unit of every shared resource the command `uses`, taken in name order (so two commands never
/// hold one each of what the other waits for), waiting for as long as others hold them. A stop
/// while waiting ends the wait: the command is not run (cancelled).
async fn take_resources(
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
            // Units are free when a lock is: asked again often enough that a freed unit does not
            // idle, rarely enough to cost nothing.
            let pause = std::time::Duration::from_millis(50);
            tokio::select! {
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

#[expect(
    clippy::too_many_arguments,
    reason = "one call shape for worker and gate; a struct would only rename these"
)]
async fn spawn(
    icx: &ItemCx<'_>,
    cmd: &CommandSpec,
    n: u32,
    model: Option<&str>,
    gate: Option<&crate::manifest::Gate>,
    feedback: Option<&Path>,
    log: PathBuf,
    timeout: std::time::Duration,
    grace: std::time::Duration,
    silence: Option<std::time::Duration>,
) -> Finished {
    let run = Launch {
        gate,
        n,
        log,
        timeout,
        grace,
        silence,
        dir: &icx.workdir,
    };
    match command(icx, cmd, n, model, gate, feedback, &icx.workdir) {
        Ok(ready) => launch(icx, ready, run).await,
        Err(e) => unstarted(e),
    }
}

/// A command that could not be started: why, as its result.
fn unstarted(why: String) -> Finished {
    Finished::unstarted(why, std::time::Duration::ZERO)
}

/// A command line as a shell would read it back (words with spaces or quotes quoted).
fn shell_words(argv: &[String]) -> String {
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
struct Ready {
    argv: Vec<String>,
    env: Vec<(String, String)>,
}

/// How to run a prepared command.
struct Launch<'a> {
    gate: Option<&'a crate::manifest::Gate>,
    n: u32,
    log: PathBuf,
    timeout: std::time::Duration,
    grace: std::time::Duration,
    silence: Option<std::time::Duration>,
    /// Where it runs: the item's checkout, or a baseline's worktree.
    dir: &'a Path,
}

/// The arguments and environment of `cmd` for attempt `n`, run in `dir`.
fn command(
    icx: &ItemCx<'_>,
    cmd: &CommandSpec,
    n: u32,
    model: Option<&str>,
    gate: Option<&crate::manifest::Gate>,
    feedback: Option<&Path>,
    dir: &Path,
) -> Result<Ready, String> {
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
            other => other
                .strip_prefix("item.")
                .and_then(|v| item.vars.get(v).cloned()),
        }
    };
    let argv = super::config::command_argv(&cx.loaded, cmd, lookup)?;
    let worker_env: Vec<(String, String)> = if gate.is_none() {
        icx.eff
            .worker
            .env
            .iter()
            .map(|(k, v)| {
                match template::render(v, |n| lookup(n.strip_prefix(template::RAW).unwrap_or(n))) {
                    Ok(v) => Ok((k.clone(), v)),
                    Err(message) => Err(ItemError::Template {
                        name: k.clone(),
                        message,
                    }
                    .to_string()),
                }
            })
            .collect::<Result<_, _>>()?
    } else {
        Vec::new()
    };
    // A worker may say what it used; the folder is there for it to write into.
    let usage = gate.is_none().then(|| usage_path(icx, n));
    if usage.is_some() {
        let _ = std::fs::create_dir_all(&icx.logs);
    }
    let env = child_env(
        |name| std::env::var(name).ok(),
        &icx.eff.env_pass,
        &icx.eff.secrets,
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
            defaults: &build_cache(icx),
        },
    );
    Ok(Ready { argv, env })
}

/// What runner sets for an item in a worktree unless the manifest does: a build cache of the
/// repository's own under the workspace (`CARGO_TARGET_DIR`), so that a fresh worktree does not
/// build every dependency again. Two items of one repository never run at once, and cargo locks
/// its folder besides.
fn build_cache(icx: &ItemCx<'_>) -> Vec<(String, String)> {
    if icx.item.branch.is_none() {
        return Vec::new();
    }
    let dir = icx
        .cx
        .workspace
        .join("cache")
        .join("target")
        .join(&icx.repo.name);
    vec![(
        "CARGO_TARGET_DIR".to_string(),
        dir.to_string_lossy().into_owned(),
    )]
}

/// Start a prepared command and wait for its end, holding the shared resources it uses.
async fn launch(icx: &ItemCx<'_>, prepared: Ready, run: Launch<'_>) -> Finished {
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
        },
        icx.stop.clone(),
    )
    .await
}
