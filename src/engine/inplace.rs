//! What a run cut short left in a repository's own checkout, and whether it can be proven the
//! dead run's own.
//!
//! An item without a work branch runs in the repository's checkout. Before its first attempt,
//! runner writes [`MARKER`] in the repository's git common dir (beside the lease): the run, the
//! item, HEAD, and — as the file's own change time — when the checkout was last proven clean
//! under the run's lease. The marker is blanked once the item has ended. A run killed mid-item
//! (`kill -9`, the machine's power) leaves it, with the item's uncommitted edit in the checkout.
//! The next run may take that edit as the dead run's own — save it as a patch and reset the
//! checkout — only when every one of these holds:
//!
//! - the lease is free and its record names the marker's run, whose process is gone;
//! - the ledger says that run never ended (the caller asks it);
//! - HEAD is still the marker's commit;
//! - every changed path (tracked or untracked, not ignored) changed after the marker was
//!   written: its change time, which nobody can set back, is no earlier than the marker's (a
//!   deleted path: the nearest folder above it still there).
//!
//! Anything else — a change older than the marker, a moved HEAD, a holder that may live — is not
//! proven the run's, and the checkout stays `dirty-tree` for a person to look at.
//!
//! Read by hand: a small JSON file and what `lstat` says; git's status through its CLI.

use crate::git;
use serde::{Deserialize, Serialize};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The marker of an item working in the repository's own checkout, in its git common dir.
pub(crate) const MARKER: &str = "runner.inplace.json";

/// What the marker says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Marker {
    pub run_id: String,
    pub repo: String,
    pub item: String,
    /// HEAD when the item began.
    pub head: String,
}

/// Leftovers proven a dead run's own: the run, its item, and the changed paths.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Proven {
    pub run_id: String,
    pub item: String,
    pub paths: Vec<String>,
}

/// The marker's size: always this many bytes, the JSON padded with spaces, so that it is
/// rewritten in place — never truncated (on ext4 a file truncated and written again is flushed
/// when closed, which cost a drain of quick items a fifth of its time).
const MARKER_LEN: usize = 1024;

/// Write the marker of `marker`'s item into `common`, before the item's first attempt: the file
/// is rewritten in place, no folder entry made or removed for each item. Not synced to the
/// disk: it is for a run killed, not a machine that lost power — a marker lost or torn with the
/// power proves nothing, and the checkout stays `dirty-tree`.
/// The marker file stays open until the item ends ([`Marked::unmark`]).
pub(crate) fn mark(common: &Path, marker: &Marker) -> std::io::Result<Marked> {
    let mut bytes = serde_json::to_vec(marker).map_err(std::io::Error::other)?;
    if bytes.len() > MARKER_LEN {
        return Err(std::io::Error::other(
            "the in-place marker would be too long",
        ));
    }
    bytes.resize(MARKER_LEN, b' ');
    overwrite(common, &bytes).map(Marked)
}

/// An item's marker, written and open.
pub(crate) struct Marked(std::fs::File);

impl Marked {
    /// The item has ended: its marker is blanked (all spaces: no item works here), through the
    /// file written when it began.
    pub(crate) fn unmark(self) {
        use std::os::unix::fs::FileExt;
        let _ = self.0.write_all_at(&[b' '; MARKER_LEN], 0);
    }
}

/// The item has ended: its marker is blanked (all spaces: no item works here).
pub(crate) fn unmark(common: &Path) {
    let _ = overwrite(common, &[b' '; MARKER_LEN]);
}

/// Write `bytes` over the start of the marker file, made when missing; the file, open.
fn overwrite(common: &Path, bytes: &[u8]) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::FileExt;
    let f = crate::support::fs::open_regular(
        &common.join(MARKER),
        std::fs::OpenOptions::new().write(true).create(true),
    )?;
    f.write_all_at(bytes, 0)?;
    Ok(f)
}

/// The marker in `common`, with its change time (seconds, nanoseconds), when there is one.
fn marker_of(common: &Path) -> Option<(Marker, (i64, i64))> {
    let path = common.join(MARKER);
    let meta = std::fs::symlink_metadata(&path).ok()?;
    if !meta.is_file() || meta.len() > MARKER_LEN as u64 {
        return None;
    }
    let bytes = crate::support::fs::read_regular(&path, Some(MARKER_LEN as u64)).ok()?;
    let marker = serde_json::from_slice(&bytes).ok()?;
    Some((marker, (meta.ctime(), meta.ctime_nsec())))
}

/// Whether what the checkout at `dir` (git common dir `common`) holds uncommitted is provably
/// what a dead run's item left, as the next run finds it before taking the lease: `Ok(Some)`
/// with that run; `Ok(None)` when there is no marker; `Err` with why it cannot be proven (the
/// checkout stays `dirty-tree`). `ended` asks the ledger whether a run recorded its end.
pub(crate) fn proven(
    g: &crate::git::Repos,
    dir: &Path,
    common: &Path,
    ended: impl FnOnce(&str) -> bool,
) -> Result<Option<Proven>, String> {
    let Some((marker, since)) = marker_of(common) else {
        return Ok(None);
    };
    let who = format!("run `{}`", marker.run_id);
    if crate::lease::is_held(common) {
        return Err(format!("{who} left changes here, but the lease is held"));
    }
    let record = crate::lease::read_record(&common.join(crate::lease::RECORD_FILE));
    match record {
        Some(r) if r.run_id == marker.run_id && r.holder.is_dead() => {}
        _ => {
            return Err(format!(
                "{who} marked the checkout, but the lease record does not show that run dead"
            ));
        }
    }
    if ended(&marker.run_id) {
        return Err(format!(
            "{who} marked the checkout but recorded its end: what is here is not a cut-short attempt"
        ));
    }
    changed_since(g, dir, marker, since).map(Some)
}

/// [`proven`] again, under this run's lease (the dead run's processes ended): the marker still
/// names run `run_id`, and every change is still younger than it.
pub(crate) fn still_proven(
    g: &crate::git::Repos,
    dir: &Path,
    common: &Path,
    run_id: &str,
) -> Result<Proven, String> {
    match marker_of(common) {
        Some((marker, since)) if marker.run_id == run_id => changed_since(g, dir, marker, since),
        _ => Err(format!("the marker of run `{run_id}` is gone or changed")),
    }
}

/// HEAD still the marker's, and every changed path changed since `since`.
fn changed_since(
    g: &crate::git::Repos,
    dir: &Path,
    marker: Marker,
    since: (i64, i64),
) -> Result<Proven, String> {
    let who = format!("run `{}`", marker.run_id);
    let head = git::quick_probe(g, dir).map_err(|e| e.to_string())?.head;
    if head.as_deref() != Some(marker.head.as_str()) {
        return Err(format!(
            "HEAD moved since {who}'s item `{}` began (it was {})",
            marker.item, marker.head
        ));
    }
    let paths = git::changed_paths(g, dir).map_err(|e| e.to_string())?;
    for p in &paths {
        let path = dir.join(p);
        let stamp = match std::fs::symlink_metadata(&path) {
            Ok(m) => (m.ctime(), m.ctime_nsec()),
            // Deleted: the nearest folder still there changed when it (or its folder) went.
            Err(_) => match std::fs::symlink_metadata(standing_folder(dir, &path)) {
                Ok(m) => (m.ctime(), m.ctime_nsec()),
                Err(e) => return Err(format!("`{p}` cannot be looked at: {e}")),
            },
        };
        if stamp < since {
            return Err(format!(
                "`{p}` changed before {who}'s item `{}` began: not that run's",
                marker.item
            ));
        }
    }
    Ok(Proven {
        run_id: marker.run_id,
        item: marker.item,
        paths,
    })
}

/// The nearest folder above `path` that is still there, within the checkout `top` (`top`
/// itself at the most).
fn standing_folder(top: &Path, path: &Path) -> PathBuf {
    path.ancestors()
        .skip(1)
        .take_while(|a| a.starts_with(top))
        .find(|a| a.is_dir())
        .map_or_else(|| top.to_path_buf(), Path::to_path_buf)
}

/// The items of `plan` held `dirty-tree` whose repository's checkout holds only what a dead
/// run's in-place item left (see the module comment): made pending, since the run saves that
/// and resets the checkout before the first of them starts. By repository, the dead run. Where
/// a marker is there but proves nothing, the held items say why. `ended` asks the ledger
/// whether a run recorded its end (a run it does not know counts as ended: nothing is proven).
pub(crate) fn adopt(
    g: &crate::git::Repos,
    plan: &mut crate::plan::Plan,
    ended: impl Fn(&str) -> bool,
) -> std::collections::HashMap<String, Proven> {
    use crate::vocab::{HoldReason, ItemState};
    let mut out = std::collections::HashMap::new();
    let repos: Vec<(String, PathBuf, PathBuf)> = plan
        .repositories
        .iter()
        .filter_map(|r| Some((r.name.clone(), r.path.clone(), r.common_dir.clone()?)))
        .collect();
    for (name, path, common) in repos {
        let held_dirty = |i: &crate::plan::ItemPlan| {
            i.repo == name
                && i.branch.is_none()
                && i.state == ItemState::Held
                && i.reason == Some(HoldReason::DirtyTree)
        };
        if !plan.items.iter().any(held_dirty) {
            continue;
        }
        match proven(g, &path, &common, &ended) {
            Ok(Some(p)) => {
                for i in plan.items.iter_mut().filter(|i| held_dirty(i)) {
                    i.state = ItemState::Pending;
                    i.reason = None;
                    i.detail = None;
                }
                out.insert(name.clone(), p);
            }
            Ok(None) => {}
            Err(why) => {
                for i in plan.items.iter_mut().filter(|i| held_dirty(i)) {
                    let was = i.detail.take().unwrap_or_default();
                    i.detail = Some(format!("{was} (not a dead run's leftovers: {why})"));
                }
            }
        }
    }
    out
}
