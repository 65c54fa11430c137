//! One item's lifecycle: where it runs, then worker and gates for up to `attempts` passes, with
//! the model chain moving on provider-class failures.
//!
//! The lifecycle is split by what each part owns: [`checkout`] (where the item runs and what git
//! says of it), [`attempt`] (worker passes, the model chain, rests), [`gates`] (an attempt's
//! gates), [`judge`] (one gate run, or its recorded verdict reused), [`baseline`] (gate
//! baselines), [`launch`] (starting a worker or gate, and the folders it may write),
//! [`tamper`] (the repository's shared git state, before and after),
//! [`verdict`] (what an attempt's worker class and gate results mean for the item, pure and
//! unit-tested), and [`cx`] (what they share).

mod attempt;
mod baseline;
mod checkout;
mod cx;
mod gates;
mod judge;
mod launch;
mod tamper;
mod verdict;

pub use baseline::Baseline;
pub(crate) use checkout::Spares;
pub(crate) use cx::{ItemError, ItemRun, Rest};

use crate::engine::run::RunCx;
use crate::events::Event;
use crate::git;
use crate::process::Stop;
use crate::vocab::ItemOutcome;
use attempt::attempts;
use checkout::{prepare, set_up};
use cx::{Anchor, ItemCx, Prepared, blocking, environmental};
use std::sync::Arc;
use tokio::sync::{mpsc, watch};

pub(crate) async fn run_item(
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
    let eff = crate::engine::config::effective(&cx.loaded, repo.entry);
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
    let (anchor, index_at) = anchor(&cx.git, &workdir).await;
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
    let rules = match item_rules(&cx, repo, item, &workdir) {
        Ok(r) => r,
        Err(why) => return environmental(why),
    };
    let planted = tamper::planted_watch(&cx, repo, item, &workdir, rules.as_ref());
    let base_index = match anchor
        .as_ref()
        .map(|_| base_index(&cx.git, &workdir, index_at))
    {
        Some(copied) => match copied.await {
            Ok(b) => Some(b),
            Err(why) => return environmental(why),
        },
        None => None,
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
        watched: tamper::watch(
            &cx,
            repo,
            item,
            rules.as_ref(),
            anchor.as_ref().and_then(|a| a.branch.as_deref()),
        ),
        planted,
        base_index,
        anchor,
        rules,
    };
    if let Err((why, tree_gone)) = set_up(&icx, fresh).await {
        let mut held = environmental(why);
        held.tree_gone = tree_gone;
        return held;
    }
    // In the repository's own checkout, a marker says the item works here from now: should
    // this run die, the next knows what it finds uncommitted is this item's (plan::inplace).
    let marked = match (&item.branch, &icx.anchor, &repo.common_dir) {
        (None, Some(a), Some(common)) => {
            let marker = crate::engine::inplace::Marker {
                run_id: cx.run_id.clone(),
                repo: repo.name.clone(),
                item: item.id.clone(),
                head: a.start.clone(),
            };
            crate::engine::inplace::mark(common, &marker)
                .map_err(|e| tracing::debug!(error = %e, "the in-place marker was not written"))
                .ok()
        }
        _ => None,
    };
    let run = attempts(&icx).await;
    if let Some(marked) = marked {
        marked.unmark();
    }
    if let Some(rules) = &icx.rules {
        let _ = crate::support::fs::empty_dir(&rules.tmp);
    }
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
    let (g, dir, b) = (cx.git.clone(), icx.repo.path.clone(), branch.to_string());
    let stat = match start {
        Some(s) => blocking(move || git::diffstat(&g, &dir, &s, &format!("refs/heads/{b}")))
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
    // A tracker's item: the pull request names it, and closes it when merged.
    let source = icx.item.source.as_ref();
    if let Some(s) = source {
        body.push_str(&format!("\nFrom source `{}`: {}\n", s.name, s.title));
        if let Some(u) = &s.url {
            body.push_str(&format!("\nCloses {u}\n"));
        }
    }
    let env: Vec<(String, String)> = icx
        .eff
        .env_pass
        .iter()
        .chain(&icx.eff.secrets_for(crate::manifest::SecretRole::Publish))
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.clone(), v)))
        .collect();
    // A review round: the pull request as it stood when the round was planned.
    let round = icx
        .item
        .pull_request
        .as_deref()
        .filter(|pr| pr.wants_a_round());
    let outcome = crate::engine::publish::publish(
        crate::engine::publish::Request {
            loaded: &cx.loaded,
            git: &cx.git,
            publish,
            repo: &icx.item.repo,
            repo_path: &icx.repo.path,
            item: &icx.item.id,
            branch,
            previous_url: cx.published.get(&icx.idx).map(String::as_str),
            review_round: round
                .map(|pr| (pr.rounds + 1, pr.head.clone().or_else(|| pr.pushed.clone()))),
            title: source.map_or_else(|| format!("runner: {}", icx.item.id), |s| s.title.clone()),
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
        answered: round.map(|pr| {
            let (comments, head) = pr.answering();
            crate::events::AnsweredFeedback { comments, head }
        }),
        source: crate::engine::publish::source_of(icx.item),
    });
}

/// Where the work in the checkout at `dir` starts (`None` in a repository without a commit),
/// and where its index is when that came with it: a few small files answer on the loop, for
/// less than a trip to the blocking pool costs.
async fn anchor(
    g: &crate::git::Repos,
    dir: &std::path::Path,
) -> (
    Result<Option<Anchor>, ItemError>,
    Option<std::path::PathBuf>,
) {
    let anchor_of = |probe: git::Probe| {
        probe.head.map(|start| Anchor {
            branch: probe.branch,
            start,
        })
    };
    if let Some((probe, index)) = git::small_probe_and_index(g, dir) {
        return (Ok(anchor_of(probe)), Some(index));
    }
    let (g, dir) = (g.clone(), dir.to_path_buf());
    let anchor = blocking(move || git::quick_probe(&g, &dir).map(anchor_of))
        .await
        .and_then(|r| r.map_err(ItemError::from));
    (anchor, None)
}

/// The index of the checkout at `dir` before the item's processes run, copied where they
/// cannot write ([`git::BaseIndex`]).
/// `index_at`: where it is, when that is known already.
async fn base_index(
    g: &crate::git::Repos,
    dir: &std::path::Path,
    index_at: Option<std::path::PathBuf>,
) -> Result<Arc<git::BaseIndex>, String> {
    // A small index is copied on the loop, for less than a trip to the blocking pool costs.
    let small = match index_at {
        Some(at) => git::base_index_small_kept(g, at),
        None => git::base_index_small(dir),
    };
    if let Some(b) = small {
        return Ok(Arc::new(b));
    }
    let (g, dir) = (g.clone(), dir.to_path_buf());
    match blocking(move || git::base_index(&g, &dir)).await {
        Ok(Ok(b)) => Ok(Arc::new(b)),
        Ok(Err(e)) => Err(format!("cannot copy the checkout's index: {e}")),
        Err(e) => Err(e.to_string()),
    }
}

/// What the item's commands may touch (`None`: unconfined), its private folders made.
fn item_rules(
    cx: &RunCx,
    repo: &crate::plan::RepoPlan,
    item: &crate::plan::ItemPlan,
    workdir: &std::path::Path,
) -> Result<Option<crate::engine::confine::ItemRules>, String> {
    if !cx.sandbox.active() {
        return Ok(None);
    }
    let tmp = launch::private_tmp(cx, &repo.name);
    let mut extra = Vec::new();
    if item.branch.is_some() {
        extra.push(launch::build_cache_dir(cx, &repo.name));
    }
    cx.sandbox
        .item(&repo.path, workdir, tmp, &extra)
        .map(Some)
        .map_err(|e| format!("cannot make the item's private folders: {e}"))
}
