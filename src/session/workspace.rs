//! Where a run's files are: the `url` repositories cloned or fetched into the workspace, and the
//! reports folder.

use crate::manifest::{LoadedManifest, SourceKind};
use crate::plan::repos;
use std::collections::HashMap;
use std::path::Path;

/// The manifest's reports folder, or `given` (`--report-dir`).
pub(crate) fn reports_dir(loaded: &LoadedManifest, given: Option<&Path>) -> std::path::PathBuf {
    match given {
        Some(d) => std::path::absolute(d).unwrap_or_else(|_| d.to_path_buf()),
        None => loaded.resolve(
            loaded
                .manifest
                .reports
                .as_ref()
                .and_then(|r| r.dir.as_deref())
                .unwrap_or(crate::manifest::DEFAULT_REPORTS_DIR),
        ),
    }
}

/// Clone every `url` repository not yet in the workspace (only the shard's, with `--shard`),
/// and fetch the ones that are. Failures
/// are recorded per repository (their items fail with the git error, credentials removed); the
/// run goes on. A failed clone leaves no folder behind (git removes it).
pub(super) fn clone_missing(
    git: &crate::git::Repos,
    loaded: &LoadedManifest,
    shard: Option<crate::plan::shard::Shard>,
) -> HashMap<String, String> {
    let workspace = repos::workspace_dir(loaded);
    let mut errors = HashMap::new();
    for spec in &loaded.manifest.repositories {
        if spec.source_kind() != SourceKind::Url {
            continue;
        }
        let (Some(name), Some(url)) = (&spec.name, &spec.url) else {
            continue;
        };
        if shard.is_some_and(|s| !s.holds(&repos::redact_url(url))) {
            continue;
        }
        let dest = repos::clone_dir(&workspace, name);
        // A local bundle or repository path resolves against the manifest's folder.
        let local = loaded.resolve(url);
        let source = if !url.contains("://") && local.exists() {
            local.to_string_lossy().to_string()
        } else {
            url.clone()
        };
        let result = if dest.join(".git").exists() {
            crate::git::fetch(git, &dest)
        } else {
            crate::git::clone_repo(&source, &dest)
        };
        if let Err(e) = result {
            let fresh = !dest.join(".git").exists();
            let shown = repos::redact_url(url);
            let msg = e.to_string().replace(url.as_str(), &shown);
            let what = if fresh { "clone" } else { "fetch" };
            errors.insert(
                name.clone(),
                format!("cannot {what} `{shown}`: {}", redact_credentials(&msg)),
            );
        }
    }
    errors
}

/// Remove `user:password@` from any url inside a message.
fn redact_credentials(msg: &str) -> String {
    msg.split(' ')
        .map(|w| {
            if w.contains("://") {
                repos::redact_url(w)
            } else {
                w.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
