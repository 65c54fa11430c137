//! Repository resolution: `path`, `url` and `glob` entries become concrete repositories.
//!
//! Resolution only reads the disk: a `path` that does not exist is not an error but a repository
//! marked not found (its items are skipped with `repo-not-found`); a `url` repository that has
//! not been cloned yet is marked for cloning by `apply`.

use crate::manifest::compile_glob;
use crate::manifest::{LoadedManifest, RepositorySpec, SourceKind};
use crate::support::fs::normalize;
use std::path::{Path, PathBuf};

/// A repository entry resolved against the disk, before git is asked anything.
#[derive(Clone, Debug)]
pub struct Located {
    pub name: String,
    /// Index of the `repositories` entry it came from (its overrides apply).
    pub entry: usize,
    pub source: SourceKind,
    /// What the user wrote: the path, the url (credentials removed) or the glob.
    pub location: String,
    /// Where the checkout is (or will be, for a url not yet cloned).
    pub path: PathBuf,
}

/// Folder of the workspace, where url repositories are cloned.
pub(crate) fn workspace_dir(loaded: &LoadedManifest) -> PathBuf {
    loaded.resolve(
        loaded
            .manifest
            .workspace
            .as_deref()
            .unwrap_or(crate::manifest::DEFAULT_WORKSPACE),
    )
}

/// Where a url repository is cloned inside the workspace.
pub(crate) fn clone_dir(workspace: &Path, name: &str) -> PathBuf {
    workspace.join("repos").join(name)
}

/// Remove credentials from a url (`https://user:token@host/x` -> `https://***@host/x`), so that
/// it can be shown in logs and reports.
pub(crate) fn redact_url(url: &str) -> String {
    if let Some(scheme_end) = url.find("://") {
        let rest = &url[scheme_end + 3..];
        let host_end = rest.find('/').unwrap_or(rest.len());
        if let Some(at) = rest[..host_end].rfind('@') {
            return format!("{}://***@{}", &url[..scheme_end], &rest[at + 1..]);
        }
    }
    url.to_string()
}

/// Expand every entry in manifest order; glob matches sorted by path.
pub(crate) fn locate(loaded: &LoadedManifest) -> Vec<Located> {
    locate_noting(loaded).0
}

/// [`locate`], with what a user should hear about it: a glob that matches no checkout, a folder
/// that could not be read while expanding one.
pub(crate) fn locate_noting(loaded: &LoadedManifest) -> (Vec<Located>, Vec<String>) {
    let workspace = workspace_dir(loaded);
    let mut out = Vec::new();
    let mut notes = Vec::new();
    for (entry, spec) in loaded.manifest.repositories.iter().enumerate() {
        match spec.source_kind() {
            SourceKind::Path => {
                let p = spec.path.as_deref().unwrap_or(".");
                out.push(Located {
                    name: name_of(spec),
                    entry,
                    source: SourceKind::Path,
                    location: p.to_string(),
                    path: loaded.resolve(p),
                });
            }
            SourceKind::Url => {
                let url = spec.url.as_deref().unwrap_or_default();
                let name = name_of(spec);
                let path = clone_dir(&workspace, &name);
                out.push(Located {
                    name,
                    entry,
                    source: SourceKind::Url,
                    location: redact_url(url),
                    path,
                });
            }
            SourceKind::Glob => {
                let glob = spec.glob.as_deref().unwrap_or_default();
                let (paths, errors) = expand_glob(&loaded.dir, glob);
                for e in errors {
                    notes.push(format!("`repositories[{entry}].glob` `{glob}`: {e}"));
                }
                if paths.is_empty() {
                    notes.push(format!(
                        "`repositories[{entry}].glob` `{glob}` matches no git checkout"
                    ));
                }
                for path in paths {
                    let name = path
                        .file_name()
                        .and_then(|f| f.to_str())
                        .unwrap_or_default()
                        .to_string();
                    // Names from folders obey the rule declared names do: a name is inserted
                    // into commands, branches and paths.
                    if !crate::manifest::valid_name(&name) {
                        notes.push(format!(
                            "`repositories[{entry}].glob` `{glob}` matched `{}`, whose folder name is not a valid repository name (letters, digits, `.`, `_`, `-`); skipped",
                            crate::support::text::printable(&path.display().to_string())
                        ));
                        continue;
                    }
                    out.push(Located {
                        name,
                        entry,
                        source: SourceKind::Glob,
                        location: glob.to_string(),
                        path,
                    });
                }
            }
        }
    }
    (out, notes)
}

fn name_of(spec: &RepositorySpec) -> String {
    spec.name.clone().unwrap_or_default()
}

fn is_checkout(p: &Path) -> bool {
    crate::git::looks_like_checkout(p)
}

fn has_glob_meta(s: &str) -> bool {
    s.contains(['*', '?', '[', '{'])
}

/// Every git checkout (a folder with a `.git` entry) matching `glob`, relative to `dir`, with
/// every folder that could not be read on the way (not nothing there: something runner could
/// not see).
pub(crate) fn expand_glob(dir: &Path, glob: &str) -> (Vec<PathBuf>, Vec<String>) {
    let full = normalize(&dir.join(glob));
    let full_str = full.to_string_lossy().to_string();
    let Ok(matcher) = compile_glob(&full_str) else {
        return (Vec::new(), Vec::new());
    };
    let mut base = PathBuf::new();
    let mut rest = 0usize;
    let mut unbounded = false;
    let mut in_pattern = false;
    for c in full.components() {
        let s = c.as_os_str().to_string_lossy();
        if !in_pattern && !has_glob_meta(&s) {
            base.push(c.as_os_str());
        } else {
            in_pattern = true;
            rest += 1;
            if s.contains("**") {
                unbounded = true;
            }
        }
    }
    if rest == 0 {
        return if is_checkout(&full) {
            (vec![full], Vec::new())
        } else {
            (Vec::new(), Vec::new())
        };
    }
    let mut walker = walkdir::WalkDir::new(&base).min_depth(1).follow_links(true);
    if !unbounded {
        walker = walker.max_depth(rest);
    }
    let mut found = Vec::new();
    let mut errors = Vec::new();
    let mut it = walker.into_iter();
    while let Some(entry) = it.next() {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                let at = e
                    .path()
                    .map_or_else(|| base.display().to_string(), |p| p.display().to_string());
                errors.push(format!("cannot read `{at}`: {e}"));
                continue;
            }
        };
        if !entry.file_type().is_dir() {
            continue;
        }
        if entry.file_name() == ".git" {
            it.skip_current_dir();
            continue;
        }
        let p = entry.path();
        if matcher.is_match(p) && is_checkout(p) {
            found.push(p.to_path_buf());
            // A checkout's own folders are its content, not more repositories.
            it.skip_current_dir();
        }
    }
    found.sort();
    (found, errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_credentials() {
        assert_eq!(
            redact_url("https://user:tok@example.com/a/b.git"),
            "https://***@example.com/a/b.git"
        );
        assert_eq!(
            redact_url("https://example.com/a@b.git"),
            "https://example.com/a@b.git"
        );
        assert_eq!(redact_url("../x.bundle"), "../x.bundle");
    }
}
