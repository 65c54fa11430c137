//! A gate run, or its recorded verdict reused: what the gates of an attempt and a gate's run on
//! the base commit both ask.

use super::cx::{ItemCx, blocking};
use super::launch::{Launch, Ready, launch, unstarted};
use crate::engine::config::Unrendered;
use crate::engine::verdicts::{self, Verdict};
use crate::events::CachedFrom;
use crate::git;
use crate::process::Finished;

/// Run gate `run.gate` as `ready` says (or say why it could not start), or reuse its recorded
/// verdict on the tree it would run on (`tree`, when known; else read from `run.dir` before it
/// runs). Returns how it finished and, for a reused verdict, where that was given.
pub(super) async fn judged(
    icx: &ItemCx<'_>,
    gate: &crate::manifest::Gate,
    ready: Result<Ready, Unrendered>,
    run: Launch<'_>,
    tree: Option<String>,
    kind: verdicts::Kind,
) -> (Finished, Option<CachedFrom>) {
    let ready = match ready {
        Ok(r) => r,
        Err(e) => return (unstarted(e.to_string()), None),
    };
    let key = if gate.cache() {
        // The tree, and what the gate can read that the tree does not show (ignored files, a
        // link's target outside the folder); nothing to key by when a submodule has changes.
        let (g, d) = (icx.cx.git.clone(), run.dir.to_path_buf());
        let tree = blocking(move || {
            let tree = match tree {
                Some(t) => t,
                None => git::working_tree(&g, &d).ok()?,
            };
            let hidden = git::hidden_inputs(&g, &d).ok()??;
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
