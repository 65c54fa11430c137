//! Where an item runs and what git says of it: the checkout or worktree made ready (leftovers
//! saved, `worktree.share`, `worktree.setup`), HEAD and the critical-base markers checked, the
//! snapshot that keeps the gates' byproducts out of the commit, and the commit itself.

use super::{
    cx::{Anchor, ItemCx, ItemError, Prepared, REPORT_TAIL_BYTES, REPORT_TAIL_LINES, blocking},
    launch::{Launch, spawn},
    verdict::exit_text,
};
use crate::engine::run::RunCx;
use crate::events::Event;
use crate::git;
use crate::manifest::CommandSpec;
use crate::plan::{ItemPlan, RepoPlan};
use crate::process::output::last_lines;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where an item runs, made ready.
pub(super) struct Workplace {
    pub(super) dir: PathBuf,
    /// The worktree was made now (its `worktree.setup` has not run in it yet).
    pub(super) fresh: bool,
    /// What of `worktree.share` it got from the checkout, and what it did not, with why.
    pub(super) shared: Vec<String>,
    pub(super) unshared: Vec<String>,
    /// What an earlier run left uncommitted there, saved as a patch before it was removed.
    pub(super) leftovers: Option<PathBuf>,
    /// The name the item's old branch is kept under, when it started anew (`--fresh`).
    pub(super) backup: Option<String>,
}

/// Where the item runs: its worktree on the work branch, or the repository itself. What an
/// earlier run left in a kept worktree is written to the run's report folder, durably, before
/// the worktree is reset (a patch that cannot be saved holds the item, the worktree untouched).
/// With `--fresh`, an existing branch is kept under its backup name and started anew from the
/// base.
pub(super) async fn prepare(
    cx: &RunCx,
    repo: &RepoPlan,
    item: &ItemPlan,
) -> Result<Workplace, Prepared> {
    let Some(branch) = item.branch.clone() else {
        return Ok(Workplace {
            fresh: false,
            shared: Vec::new(),
            unshared: Vec::new(),
            dir: repo.path.clone(),
            leftovers: take_dead_leftovers(cx, repo).await?,
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
    let eff = crate::engine::config::effective(&cx.loaded, repo.entry);
    let share = eff.worktree.share.clone();
    let marker = setup_marker(&wt);
    let spare = cx.spares.starting(&cx.workspace, &repo.name);
    let g = cx.git.clone();
    tokio::task::spawn_blocking(move || {
        let failed = |e: git::GitError| Prepared::Failed(e.into());
        git::clear_half_added(&repo_path, &wt).map_err(failed)?;
        let exists = git::local_branches(&g, &repo_path)
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
        if let Some(detail) = crate::plan::missing_markers(&g, &repo_path, tip, &markers) {
            return Err(Prepared::Held("stale-base", detail));
        }
        let leftovers = match git::kept_leftovers(&g, &wt, &branch).map_err(failed)? {
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
                git::reset_worktree(&g, &wt).map_err(failed)?;
                Some(patch_path)
            }
            None => None,
        };
        let backup = if restart {
            let old = git::branch_tip(&g, &repo_path, &branch).map_err(failed)?;
            let backup = crate::plan::backup_branch(&branch, &old);
            git::restart_branch(&g, &repo_path, &wt, &branch, &backup, &base).map_err(failed)?;
            Some(backup)
        } else {
            None
        };
        let took = !wt.join(".git").exists()
            && spare.join(".git").exists()
            && git::take_spare(&g, &repo_path, &spare, &wt, &branch, &base, exists || restart)
                .map_err(failed)?;
        let made = took || {
            // A spare that could not be taken may have left the branch made.
            let exists = git::local_branches(&g, &repo_path)
                .map_err(failed)?
                .contains(&branch);
            git::ensure_worktree(&g, &repo_path, &wt, &branch, &base, exists).map_err(failed)?
        };
        if made {
            let _ = std::fs::remove_file(&marker);
        }
        let (shared, unshared) = share_into(&g, &repo_path, &wt, &share).map_err(failed)?;
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

/// What a dead run's in-place item left in the repository's own checkout, when planning proved
/// it that run's (`plan::inplace`): proven again now, under this run's lease and with the dead
/// run's processes ended, saved durably as a patch in this run's report folder, the checkout
/// reset to HEAD and the marker removed. A change no longer proven the dead run's holds the item
/// `dirty-tree`, the checkout untouched.
async fn take_dead_leftovers(cx: &RunCx, repo: &RepoPlan) -> Result<Option<PathBuf>, Prepared> {
    let dead = cx
        .dead_leftovers
        .lock()
        .ok()
        .and_then(|mut d| d.remove(&repo.name));
    let (Some(dead), Some(common)) = (dead, repo.common_dir.clone()) else {
        return Ok(None);
    };
    let (g, dir) = (cx.git.clone(), repo.path.clone());
    let folder = cx.run_dir.join("leftovers").join(&repo.name);
    tokio::task::spawn_blocking(move || {
        let proven = crate::engine::inplace::still_proven(&g, &dir, &common, &dead).map_err(|why| {
            Prepared::Held(
                "dirty-tree",
                format!("the checkout holds uncommitted changes not proven run `{dead}`'s: {why}"),
            )
        })?;
        let failed = |e: git::GitError| Prepared::Failed(e.into());
        let patch = git::leftovers_patch(&g, &dir).map_err(failed)?;
        let path = folder.join(format!("{}.patch", proven.item));
        std::fs::create_dir_all(&folder)
            .and_then(|()| crate::support::fs::write_durable(&path, patch.as_bytes()))
            .map_err(|e| {
                Prepared::Held(
                    "environment",
                    format!(
                        "cannot save what run `{dead}` left in `{}` to `{}`: {e}; the checkout is left as it was",
                        dir.display(),
                        path.display()
                    ),
                )
            })?;
        git::reset_worktree(&g, &dir).map_err(failed)?;
        crate::engine::inplace::unmark(&common);
        tracing::info!(run = %dead, item = %proven.item, paths = proven.paths.len(), patch = %path.display(), "a dead run's in-place leftovers are saved and the checkout reset");
        Ok(Some(path))
    })
    .await
    .map_err(|e| Prepared::Failed(e.into()))?
}

/// The worktree each repository keeps between its items in a run: an item on a work branch
/// that completes, its work committed, leaves its worktree cleaned ([`git::park_worktree`]) as
/// its repository's spare when another item of that repository with a work branch is still to
/// start in this run; that item takes it ([`git::take_spare`]) and pays for the files that
/// differ between the two commits, not for a whole checkout and removal. Items of one
/// repository run one at a time under its lease, so one spare a repository is enough, and it is
/// only touched under that lease. The last item of a repository to finish removes it.
pub(crate) struct Spares {
    /// By repository: its items with a work branch not started yet.
    left: std::sync::Mutex<std::collections::HashMap<String, usize>>,
}

impl Spares {
    /// The spares of a run of `plan`: its pending items with a work branch, counted.
    pub(crate) fn new(plan: &crate::plan::Plan) -> Spares {
        let mut left = std::collections::HashMap::new();
        for item in &plan.items {
            if item.state == crate::vocab::ItemState::Pending && item.branch.is_some() {
                *left.entry(item.repo.clone()).or_insert(0) += 1;
            }
        }
        Spares {
            left: std::sync::Mutex::new(left),
        }
    }

    /// Where the spare of `repo` is kept: beside its items' worktrees, under a name no item
    /// id can take (`+` is not allowed in one).
    pub(crate) fn path(workspace: &Path, repo: &str) -> PathBuf {
        workspace.join("worktrees").join(repo).join("+spare")
    }

    /// An item of `repo` with a work branch starts: its spare, to take if there is one.
    fn starting(&self, workspace: &Path, repo: &str) -> PathBuf {
        if let Ok(mut left) = self.left.lock()
            && let Some(n) = left.get_mut(repo)
        {
            *n = n.saturating_sub(1);
        }
        Spares::path(workspace, repo)
    }

    /// Where an item of `repo` that completed keeps its worktree: its spare, when another item
    /// of it is still to start; `None` otherwise.
    fn wanted(&self, workspace: &Path, repo: &str) -> Option<PathBuf> {
        let more = self
            .left
            .lock()
            .is_ok_and(|left| left.get(repo).is_some_and(|n| *n > 0));
        more.then(|| Spares::path(workspace, repo))
    }
}

/// Give the worktree `wt` the checkout's ignored `paths`: a folder's entries linked, a file
/// copied. A path
/// the checkout lacks, or that git does not ignore in the worktree (it would show there as new
/// work and be committed), is not given; what was given and what was not (with why) is said.
pub(super) fn share_into(
    g: &crate::git::Repos,
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
    let ignored = git::ignored_of(g, wt, &asked)?;
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
pub(super) fn setup_marker(wt: &Path) -> PathBuf {
    let mut name = wt.as_os_str().to_owned();
    name.push(".setup");
    PathBuf::from(name)
}

/// What the setup marker says for a worktree set up with `setup`: the command and the identity
/// of the worktree's `.git` (a worktree made anew at the same place is another one).
pub(super) fn setup_stamp(wt: &Path, setup: &CommandSpec) -> Option<String> {
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
pub(super) async fn set_up(icx: &ItemCx<'_>, fresh: bool) -> Result<(), (String, bool)> {
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
    let run = Launch {
        gate: None,
        n: 0,
        log: log.clone(),
        timeout,
        grace: icx.eff.worker.grace(),
        silence: None,
        dir: &icx.workdir,
    };
    let fin = spawn(icx, &setup, None, None, run).await;
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
pub(super) async fn finish_work(
    icx: &ItemCx<'_>,
    snap: Option<Snapshot>,
    unverified: bool,
    markers: &[String],
    gates_ran: bool,
) -> Result<Result<Event, HeadMoved>, ItemError> {
    let g = icx.cx.git.clone();
    let markers = markers.to_vec();
    let dir = icx.workdir.clone();
    let repo = icx.repo.path.clone();
    let anchor = icx.anchor.clone();
    let commit = icx.eff.worker.commit();
    let in_worktree = icx.item.branch.is_some();
    let message = format!("runner: {}", icx.item.id);
    let idx = icx.idx;
    // Where the worktree is kept for the repository's next item in this run, if any.
    let spare = in_worktree
        .then(|| icx.cx.spares.wanted(&icx.cx.workspace, &icx.repo.name))
        .flatten();
    let workspace = icx.cx.workspace.clone();
    let repo_name = icx.repo.name.clone();
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
    blocking(move || -> Result<Result<Event, HeadMoved>, ItemError> {
        // No gate ran since HEAD was checked after the worker (and the worker's processes are
        // gone): it stands where it was. Otherwise the gates must not have moved it either.
        let head = if gates_ran {
            match check_head(&g, &dir, &anchor, &markers) {
                Ok(h) => h,
                Err(moved) => return Ok(Err(moved)),
            }
        } else {
            snap.head.clone()
        };
        let mut last = head.clone();
        let mut uncommitted = Vec::new();
        if let Some(tree) = &snap.tree
            && *tree != git::tree_of(&g, &dir, &head)?
        {
            match (&anchor.branch, commit) {
                (Some(branch), true) => {
                    last = git::commit_tree_on(&g, &dir, tree, &head, branch, &message)?;
                    if !in_worktree {
                        git::reset_index(&g, &dir)?;
                    }
                }
                _ => uncommitted = git::uncommitted(&g, &dir)?,
            }
        }
        if in_worktree && uncommitted.is_empty() {
            let parked = spare
                .as_ref()
                .is_some_and(|s| git::park_worktree(&g, &repo, &dir, s).is_ok());
            if !parked {
                git::remove_worktree(&g, &repo, &dir)?;
            }
            // No other item of the repository is to run: its spare goes too.
            let left = Spares::path(&workspace, &repo_name);
            if spare.is_none() && left.join(".git").exists() {
                git::remove_worktree(&g, &repo, &left)?;
            }
        }
        let (files, insertions, deletions) = if last == anchor.start {
            (0, 0, 0)
        } else {
            git::diffstat(&g, &repo, &anchor.start, &last)?
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

/// What a passing attempt left: the tree of its working tree before the gates ran.
#[derive(Clone, Debug)]
pub(super) struct Snapshot {
    /// The tree to commit; `None` when the checkout was proven clean (nothing to commit).
    pub(super) tree: Option<String>,
    /// The temporary index the tree was written through (its stat data for telling later what
    /// the gates changed); `None` with `tree`: the checkout's own index is the snapshot.
    pub(super) index: Option<Arc<tempfile::TempPath>>,
    /// The worker changed something (committed or not) since the item started.
    pub(super) changed: bool,
    /// Where HEAD was after the worker, checked.
    pub(super) head: String,
}

/// Why the work of an attempt cannot be kept where it is: HEAD moved off the item's branch or
/// history, a critical-base marker went missing, or git could not tell.
#[derive(Debug, thiserror::Error)]
pub(super) enum HeadMoved {
    #[error("HEAD cannot be read: {0}")]
    Unreadable(#[source] git::GitError),
    #[error("HEAD names no commit any more")]
    NoCommit,
    #[error("HEAD moved from {from} to {to}; nothing is committed")]
    Branch { from: String, to: String },
    #[error(
        "HEAD `{head}` no longer descends from `{start}`, where the item started; nothing is committed"
    )]
    Diverged { head: String, start: String },
    #[error("{0}; nothing is committed")]
    Markers(String),
    #[error(transparent)]
    Git(#[from] git::GitError),
}

/// Check where the worker (or a gate) left HEAD: on the item's branch, descending from the
/// commit the item started from, containing every critical-base marker. `Err` says what moved.
pub(super) fn check_head(
    g: &crate::git::Repos,
    dir: &Path,
    anchor: &Anchor,
    markers: &[String],
) -> Result<String, HeadMoved> {
    check_probed(g, dir, anchor, markers, None)
}

/// [`check_head`], from a probe of the checkout already read (`None`: read it now).
pub(super) fn check_probed(
    g: &crate::git::Repos,
    dir: &Path,
    anchor: &Anchor,
    markers: &[String],
    probed: Option<git::Probe>,
) -> Result<String, HeadMoved> {
    // Read from the checkout's files where they tell it; else asked of git.
    let probe = match probed {
        Some(p) => p,
        None => git::quick_probe(g, dir).map_err(HeadMoved::Unreadable)?,
    };
    let head = probe.head.ok_or(HeadMoved::NoCommit)?;
    let branch = probe.branch;
    if branch != anchor.branch {
        let name = |b: &Option<String>| {
            b.as_ref()
                .map_or("a detached HEAD".to_string(), |b| format!("`{b}`"))
        };
        return Err(HeadMoved::Branch {
            from: name(&anchor.branch),
            to: name(&branch),
        });
    }
    if head != anchor.start && !git::is_ancestor(g, dir, &anchor.start, &head)? {
        return Err(HeadMoved::Diverged {
            head: short(&head).to_string(),
            start: short(&anchor.start).to_string(),
        });
    }
    let tip = match &anchor.branch {
        Some(b) => crate::plan::Tip::Branch(b),
        None => crate::plan::Tip::Base("HEAD"),
    };
    if let Some(lacks) = crate::plan::missing_markers(g, dir, tip, markers) {
        return Err(HeadMoved::Markers(lacks));
    }
    Ok(head)
}

pub(super) fn short(id: &str) -> &str {
    id.get(..10).unwrap_or(id)
}

/// [`after_worker`]'s most common answer, had on the event loop where that costs less than a
/// trip to the blocking pool: a small checkout ([`git::Reads::Small`]) whose own files prove it
/// clean, HEAD at the very commit the item started from and no marker to look for, so that
/// nothing can ask git. `None`: ask [`after_worker`].
pub(super) fn unchanged_small(
    g: &crate::git::Repos,
    dir: &Path,
    anchor: &Anchor,
    markers: &[String],
    base: Option<&git::BaseIndex>,
) -> Option<Snapshot> {
    // A proof read from an index the item's processes wrote is theirs, not runner's.
    if base.is_some_and(|b| !b.untouched()) {
        return None;
    }
    let probe = git::proven_clean_small(g, dir)?;
    if !markers.is_empty() || probe.head.as_deref() != Some(anchor.start.as_str()) {
        return None;
    }
    clean_snapshot(g, dir, anchor, markers, probe).ok()
}

/// What a worker pass left in a checkout its files prove clean: nothing to commit, and HEAD,
/// checked from the proof.
pub(super) fn clean_snapshot(
    g: &crate::git::Repos,
    dir: &Path,
    anchor: &Anchor,
    markers: &[String],
    clean: git::Probe,
) -> Result<Snapshot, HeadMoved> {
    let head = check_probed(g, dir, anchor, markers, Some(clean))?;
    Ok(Snapshot {
        tree: None,
        index: None,
        changed: head != anchor.start,
        head,
    })
}

/// After a worker pass: HEAD where it belongs, and the tree it left.
pub(super) fn after_worker(
    g: &crate::git::Repos,
    dir: &Path,
    anchor: &Anchor,
    markers: &[String],
    base: Option<&git::BaseIndex>,
) -> Result<Snapshot, HeadMoved> {
    // The common case needs no git: a checkout its files prove clean has nothing to commit, and
    // the proof read HEAD already. Only from an index runner wrote: one the worker rewrote
    // proves what the worker says.
    if base.is_none_or(git::BaseIndex::untouched)
        && let Some(clean) = git::proven_clean(g, dir)
    {
        return clean_snapshot(g, dir, anchor, markers, clean);
    }
    let head = check_head(g, dir, anchor, markers)?;
    // From the index as it was before the worker: its entries' stat data are runner's.
    let (tree, index) = git::snapshot_from(g, dir, base)?;
    let start_tree = git::tree_of(g, dir, &anchor.start)?;
    Ok(Snapshot {
        changed: tree != start_tree || head != anchor.start,
        tree: Some(tree),
        index: Some(Arc::new(index)),
        head,
    })
}
