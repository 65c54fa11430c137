//! Which repositories the checkout reader reads: its own `.git` folder or a linked worktree as
//! `git worktree add` makes one, this user's, with a configuration it reads exactly as git does.

use std::io::ErrorKind;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::index::plain_index_file;
use super::reads::*;

/// The top level and git dir of `dir`, when it is a checkout this module can read: its `.git` a
/// folder of its own (not a linked worktree), owned like the checkout by this user, with a plain
/// config.
pub(super) fn plain_checkout(dir: &Path, reads: Reads) -> Option<(PathBuf, PathBuf)> {
    let top = std::path::absolute(dir).ok()?;
    let git_dir = top.join(".git");
    let meta = std::fs::symlink_metadata(&git_dir).ok()?;
    // git refuses a repository that belongs to another user unless told it is safe; that
    // judgement stays with git.
    static EUID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    let uid = *EUID.get_or_init(|| nix::unistd::geteuid().as_raw());
    if !meta.is_dir() || meta.uid() != uid || std::fs::metadata(&top).ok()?.uid() != uid {
        return None;
    }
    plain_config(&git_dir, reads)?;
    if git_dir.join("commondir").exists() {
        return None;
    }
    Some((top, git_dir))
}

/// The text of the configuration file of the checkout at `dir`, when it is one this module reads
/// ([`plain_checkout`]: its own `.git` folder, this user's, no extension or include).
pub(crate) fn plain_config_text(dir: &Path) -> Option<String> {
    let (_, git_dir) = plain_checkout(dir, Reads::Small)?;
    Reads::Small.text(&git_dir.join("config")).ok()
}

/// A linked worktree at `dir` as `git worktree add` makes one: `.git` a file naming its own
/// git dir (`gitdir: …`), which names the main repository's (`commondir`). Returns the top
/// level, its own git dir and the common dir. Anything else — a checkout of another user, a
/// configuration git reads differently (extensions such as per-worktree config, includes) — is
/// `None`: ask git.
pub(super) fn linked_checkout(dir: &Path, reads: Reads) -> Option<(PathBuf, PathBuf, PathBuf)> {
    let top = std::path::absolute(dir).ok()?;
    let dot = top.join(".git");
    let meta = std::fs::symlink_metadata(&dot).ok()?;
    let uid = nix::unistd::geteuid().as_raw();
    if !meta.is_file() || meta.uid() != uid || std::fs::metadata(&top).ok()?.uid() != uid {
        return None;
    }
    let text = Reads::Small.text(&dot).ok()?;
    let own = text.strip_prefix("gitdir: ")?.strip_suffix('\n')?;
    let own = top.join(own);
    let common = Reads::Small.text(&own.join("commondir")).ok()?;
    let common = std::fs::canonicalize(own.join(common.strip_suffix('\n')?)).ok()?;
    if std::fs::metadata(&common).ok()?.uid() != uid || own.join("config.worktree").exists() {
        return None;
    }
    plain_config(&common, reads)?;
    Some((top, own, common))
}

/// The own git dir of the linked worktree at `dir`, where runner may remove the worktree itself
/// as `git worktree remove --force` would: made as `git worktree add` makes one (see
/// [`linked_checkout`]), its git dir naming it back, not locked, and no submodule in its index.
/// `None`: ask git.
pub(crate) fn removable_worktree(dir: &Path) -> Option<PathBuf> {
    let (top, own, _) = linked_checkout(dir, Reads::Small)?;
    let back = Reads::Small.text(&own.join("gitdir")).ok()?;
    let same = |a: &Path, b: &Path| {
        std::fs::canonicalize(a)
            .ok()
            .is_some_and(|a| std::fs::canonicalize(b).ok() == Some(a))
    };
    if !same(Path::new(back.strip_suffix('\n')?), &top.join(".git")) || own.join("locked").exists()
    {
        return None;
    }
    plain_index_file(&own.join("index"))?;
    Some(own)
}

/// `Some` when the repository's own config holds nothing that changes where the working tree
/// is or how refs and objects are stored (`core.worktree`, a bare repository, a format or
/// extension this reader does not know, an include), and git would read the file as
/// `git::config` does.
pub(super) fn plain_config(git_dir: &Path, reads: Reads) -> Option<()> {
    let path = git_dir.join("config");
    // Through the run's kept files: concluded once for the bytes kept.
    if let Some(kept) = reads.kept(&path) {
        let kept = kept.ok()?;
        let plain = kept.plain.get_or_init(|| {
            std::str::from_utf8(&kept.bytes)
                .is_ok_and(|text| plain_config_text_says(text).is_some())
        });
        return plain.then_some(());
    }
    plain_config_text_says(&reads.text(&path).ok()?)
}

/// Whether configuration `text` is one this module reads ([`plain_config`]).
fn plain_config_text_says(text: &str) -> Option<()> {
    for (key, value) in crate::git::config::entries(text)? {
        if key.starts_with("extensions.")
            || key.starts_with("include.")
            || key.starts_with("includeif.")
        {
            return None;
        }
        let value = value.map(|v| v.to_ascii_lowercase());
        match key.as_str() {
            "core.worktree" => return None,
            "core.bare" if !matches!(value.as_deref(), Some("false" | "no" | "off" | "0")) => {
                return None;
            }
            "core.repositoryformatversion" if !matches!(value.as_deref(), Some("0" | "1")) => {
                return None;
            }
            _ => {}
        }
    }
    Some(())
}

/// Whether grafts or replace refs (loose or packed) may change what git sees as history; `None`
/// when that cannot be read.
pub(super) fn rewrites_history(git_dir: &Path, reads: Reads) -> Option<bool> {
    if git_dir.join("info/grafts").exists() || git_dir.join("refs/replace").exists() {
        return Some(true);
    }
    match reads.text(&git_dir.join("packed-refs")) {
        Ok(packed) => Some(packed.lines().any(|l| l.contains(" refs/replace/"))),
        Err(e) if e.kind() == ErrorKind::NotFound => Some(false),
        Err(_) => None,
    }
}

/// The object folder of the checkout at `dir`, where this reader understands the repository.
pub(super) fn objects_of(dir: &Path) -> Option<PathBuf> {
    Some(git_dirs(dir)?.1.join("objects"))
}

/// The own git dir and the common one of the checkout at `dir` (the same folder but for a
/// linked worktree), where this reader understands the repository ([`plain_checkout`],
/// [`linked_checkout`]).
pub(crate) fn git_dirs(dir: &Path) -> Option<(PathBuf, PathBuf)> {
    match plain_checkout(dir, Reads::Small) {
        Some((_, git_dir)) => Some((git_dir.clone(), git_dir)),
        None => linked_checkout(dir, Reads::Small).map(|(_, own, common)| (own, common)),
    }
}
