//! What one `git rev-parse` (or the checkout's own files, where they tell it) says about a
//! checkout: its root, its git folders, its HEAD, and whether it is proven clean.

use super::command::{GitError, checked, run};
pub use super::local::Probe;
use super::local::{self, Reads};
use super::repos::Repos;
use std::path::{Path, PathBuf};

/// Ask git about the checkout at `dir` in one call (two for a repository without commits).
pub fn probe(g: &Repos, dir: &Path) -> Result<Probe, GitError> {
    let args = [
        "rev-parse",
        "--path-format=absolute",
        "--show-toplevel",
        "--git-common-dir",
        "HEAD",
        "--symbolic-full-name",
        "HEAD",
    ];
    let out = run(g, dir, &args)?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<&str> = text.lines().collect();
    if out.status.success() && lines.len() >= 4 {
        return Ok(Probe {
            toplevel: PathBuf::from(lines[0]),
            common_dir: PathBuf::from(lines[1]),
            head: Some(lines[2].to_string()),
            branch: lines[3].strip_prefix("refs/heads/").map(str::to_string),
        });
    }
    // No commit yet: HEAD does not resolve, but the checkout is real.
    let text = checked(
        g,
        dir,
        &[
            "rev-parse",
            "--path-format=absolute",
            "--show-toplevel",
            "--git-common-dir",
        ],
    )?;
    let lines: Vec<&str> = text.lines().collect();
    let branch = checked(g, dir, &["symbolic-ref", "-q", "HEAD"])
        .ok()
        .and_then(|b| b.trim().strip_prefix("refs/heads/").map(str::to_string));
    match lines.as_slice() {
        [top, common, ..] => Ok(Probe {
            toplevel: PathBuf::from(top),
            common_dir: PathBuf::from(common),
            head: None,
            branch,
        }),
        _ => Err(GitError::Failed {
            args: "rev-parse".into(),
            dir: dir.display().to_string(),
            stderr: "unexpected output".into(),
        }),
    }
}

/// [`probe`], read from the checkout's own files where they tell it (a checkout whose `.git` is
/// a plain folder), else asked of git. The top level is then the folder as named, not resolved
/// through symbolic links.
pub(crate) fn quick_probe(g: &Repos, dir: &Path) -> Result<Probe, GitError> {
    match local::head(dir, Reads::All) {
        Some(p) => Ok(p),
        None => probe(g, dir),
    }
}

/// HEAD of the checkout at `dir` when its own files prove it has no uncommitted change (a plain
/// checkout, nothing staged, modified or untracked); `None` says nothing either way.
pub(crate) fn proven_clean(g: &Repos, dir: &Path) -> Option<Probe> {
    local::clean_checkout(g, dir, Reads::All)
}

/// [`quick_probe`] from small files only ([`Reads::Small`]), never git, with where the
/// checkout's index is (for [`super::base_index_small_at`]): `None` says ask [`quick_probe`] on
/// the blocking pool.
pub(crate) fn small_probe_and_index(g: &Repos, dir: &Path) -> Option<(Probe, std::path::PathBuf)> {
    local::head_and_index(dir, Reads::Kept(g.kept_files()))
}

/// [`proven_clean`] from small files only ([`Reads::Small`], through the run's kept files): a
/// small checkout's proof, cheap enough for the event loop. `None` says nothing either way.
pub(crate) fn proven_clean_small(g: &Repos, dir: &Path) -> Option<Probe> {
    local::clean_checkout(g, dir, Reads::Kept(g.kept_files()))
}
