//! The repository's shared git state, taken before an item's processes run and checked after
//! them: a change the item made there (where the kernel did not keep it out) holds the item and
//! quarantines the repository, named, before runner's own git reads the repository again. It
//! is never repaired or committed: a person looks at it (`runner unlock` lifts the quarantine).
//! So does a file the item left in git's folders that git would wait on (a FIFO where a pack
//! index goes) or a changed `.git` file that would lead runner's git elsewhere ([`Planted`]).

use super::cx::Planted;
use super::cx::{ItemCx, Watched};
use crate::engine::run::RunCx;
use crate::plan::{ItemPlan, RepoPlan};
use crate::vocab::{HoldReason, ItemOutcome};
use std::path::Path;

/// What to look at after the processes of an item working in `workdir` (`None`: no git folder
/// of the repository is known). Git's folders are not walked where the kernel keeps the item
/// from making anything but files and folders in them (Landlock, its worktree's own git folder
/// and the object store granted that way and beneath nothing else it may write); its `.git`
/// file, in its checkout, always is.
pub(super) fn planted_watch(
    cx: &RunCx,
    repo: &RepoPlan,
    item: &ItemPlan,
    workdir: &Path,
    rules: Option<&crate::engine::confine::ItemRules>,
) -> Option<Planted> {
    let common = repo.common_dir.clone()?;
    let kept_out = cx.sandbox.landlock
        && item.branch.is_some()
        && rules.is_some_and(|r| {
            !r.git.is_empty() && r.git.iter().all(|g| r.only_files_in(g, workdir))
        });
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let (own, dot_git) = if item.branch.is_some() {
        let dot = workdir.join(".git");
        let text = std::fs::read(&dot).ok()?;
        let (own, _) = crate::git::worktree_git_dirs(workdir)?;
        (Some(own), Some((dot, text)))
    } else {
        (None, None)
    };
    Some(Planted {
        common,
        own,
        dot_git,
        since,
        walk: !kept_out,
    })
}

/// After the item's processes: what they planted, if anything, named.
fn planted(
    g: &crate::git::Repos,
    p: &Planted,
    listings: &crate::git::PlantedListings,
) -> Option<String> {
    const LEFT: &str = "the item left what runner's git would wait on or follow";
    if let Some((dot, was)) = &p.dot_git {
        let same = std::fs::symlink_metadata(dot).is_ok_and(|m| m.is_file())
            && std::fs::read(dot).is_ok_and(|now| &now == was);
        if !same {
            return Some(format!(
                "{LEFT}: the worktree's `{}` file was changed (it led git to `{}`)",
                dot.display(),
                String::from_utf8_lossy(was)
                    .trim()
                    .trim_start_matches("gitdir:")
                    .trim_start()
            ));
        }
    }
    // Whatever the kernel allowed, the item could write its checkout's index; one made to
    // expand without bound is not handed to git, whose every command would hold it expanded.
    let index = p.own.as_deref().unwrap_or(&p.common).join("index");
    if crate::git::index_overexpands(g, &index) {
        return Some(format!(
            "the item left an index git would exhaust memory on: `{}` is a version 4 index \
             whose paths expand to more than eight times its size",
            index.display()
        ));
    }
    if !p.walk {
        return None;
    }
    crate::git::planted(&p.common, p.own.as_deref(), p.since, listings)
        .map(|why| format!("{LEFT}: {why}"))
}

/// The shared state of `repo` before `item` runs, the item's own refs left out: its work branch,
/// or in the repository's own checkout the branch checked out there (and `HEAD`), which the
/// item may move. `None` where the kernel keeps the item out of it (a worktree under Landlock,
/// the common folder not among what it may write): nothing to check, and a person's own work
/// in the checkout meanwhile is not taken for the item's.
pub(super) fn watch(
    cx: &RunCx,
    repo: &RepoPlan,
    item: &ItemPlan,
    rules: Option<&crate::engine::confine::ItemRules>,
    checked_out: Option<&str>,
) -> Option<Watched> {
    let common = repo.common_dir.as_ref()?;
    if item.branch.is_some() && cx.sandbox.landlock && rules.is_some_and(|r| !r.may_write(common)) {
        return None;
    }
    let (own, head) = match (&item.branch, checked_out) {
        (Some(b), _) => (vec![format!("refs/heads/{b}")], true),
        (None, Some(b)) => (vec![format!("refs/heads/{b}")], false),
        (None, None) => (Vec::new(), false),
    };
    Some(Watched {
        before: cx
            .captures
            .capture(common, &own, head, crate::lease::record_mark(common)),
        own,
        head,
    })
}

/// After the item's processes: `true` when its repository's shared state is as before; else
/// the item is held and the repository is to be quarantined, with what changed.
pub(super) fn unchanged(icx: &ItemCx<'_>, run: &mut super::cx::ItemRun) -> bool {
    let listings = &icx.cx.planted_listings;
    let what = if let Some(why) = icx
        .planted
        .as_ref()
        .and_then(|p| planted(&icx.cx.git, p, listings))
    {
        why
    } else {
        let (Some(w), Some(common)) = (&icx.watched, &icx.repo.common_dir) else {
            return true;
        };
        let after = w.before.capture_after(common, &w.own, w.head);
        let changes = w.before.changes(&after);
        if changes.is_empty() {
            let lease = crate::lease::record_mark(common);
            icx.cx.captures.keep(common, after, &w.own, w.head, lease);
            return true;
        }
        format!(
            "the repository's shared git state changed while the item ran: {}",
            changes.join(", ")
        )
    };
    run.outcome = ItemOutcome::Held;
    run.reason = Some(HoldReason::Quarantined.as_str().into());
    run.cause = Some(format!(
        "{what}; repository `{}` is quarantined (nothing of it was repaired or committed)",
        icx.repo.name
    ));
    run.quarantine = Some(what);
    false
}
