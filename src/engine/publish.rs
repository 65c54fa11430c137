//! Publishing a completed item's work branch: push it to the repository's remote, then run the
//! manifest's pull-request command, which opens the pull request or, when an earlier run opened
//! one (`RUNNER_PR_URL`), updates it. A failure is recorded and never touches the branch.

use crate::manifest::{LoadedManifest, Publish};
use crate::process::{self, CensusKey, SpawnSpec, Stop};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::watch;

/// One branch to publish.
pub struct Request<'a> {
    pub loaded: &'a LoadedManifest,
    /// The run's handle on its repositories' git folders.
    pub git: &'a crate::git::Repos,
    pub publish: &'a Publish,
    pub repo: &'a str,
    pub repo_path: &'a Path,
    pub item: &'a str,
    pub branch: &'a str,
    /// The pull request an earlier run opened for the item.
    pub previous_url: Option<&'a str>,
    /// The review round this publication answers (`RUNNER_REVIEW_ROUND`), when it does, and
    /// the commit the pull request's branch pointed at when the round started: the round
    /// changed the branch (`RUNNER_HEAD_MOVED`) when the branch now points elsewhere.
    pub review_round: Option<(u32, Option<String>)>,
    /// `RUNNER_PR_TITLE`, and the text of `RUNNER_PR_BODY`.
    pub title: String,
    pub body: String,
    /// The pull-request command's environment before runner's own variables (the manifest's
    /// `env.pass` and `env.secrets`).
    pub env: Vec<(String, String)>,
    /// Where the command's output and the body file go.
    pub logs: PathBuf,
    pub token: &'a str,
    pub redactor: Arc<process::redact::Redactor>,
}

/// What came of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// The remote's branch moved: created or fast-forwarded (never when it already pointed at
    /// the commit).
    pub pushed: bool,
    /// The commit the branch pointed at.
    pub head: Option<String>,
    pub url: Option<String>,
    pub error: Option<String>,
}

pub async fn publish(req: Request<'_>, stop: watch::Receiver<Stop>) -> Outcome {
    let mut out = Outcome::default();
    let remote = req.publish.remote().to_string();
    let (dir, branch) = (req.repo_path.to_path_buf(), req.branch.to_string());
    let head = {
        let (g, d, b) = (req.git.clone(), dir.clone(), branch.clone());
        tokio::task::spawn_blocking(move || crate::git::branch_tip(&g, &d, &b)).await
    };
    match head {
        Ok(Ok(h)) => out.head = Some(h),
        Ok(Err(e)) => {
            out.error = Some(format!("branch `{branch}` cannot be read: {e}"));
            return out;
        }
        Err(e) => {
            out.error = Some(e.to_string());
            return out;
        }
    }
    if req.publish.push() {
        let (g, d, r, b) = (req.git.clone(), dir.clone(), remote.clone(), branch.clone());
        match tokio::task::spawn_blocking(move || crate::git::push_branch(&g, &d, &r, &b)).await {
            Ok(Ok(moved)) => out.pushed = moved,
            Ok(Err(e)) => {
                out.error = Some(format!(
                    "pushing `{branch}` to `{remote}` failed; the branch is kept: {}",
                    req.redactor.redact(&e.to_string())
                ));
                return out;
            }
            Err(e) => {
                out.error = Some(e.to_string());
                return out;
            }
        }
    }
    let Some(pr) = &req.publish.pr else {
        return out;
    };
    let body_file = req.logs.join("pr-body.md");
    let written = std::fs::create_dir_all(&req.logs)
        .and_then(|()| crate::support::fs::write_atomic(&body_file, req.body.as_bytes()));
    if let Err(e) = written {
        out.error = Some(format!("cannot write `{}`: {e}", body_file.display()));
        return out;
    }
    let lookup = |name: &str| match name {
        "branch" => Some(branch.clone()),
        "item" => Some(req.item.to_string()),
        "repo" => Some(req.repo.to_string()),
        "remote" => Some(remote.clone()),
        _ => None,
    };
    let argv = match super::config::command_argv(req.loaded, pr, lookup) {
        Ok(a) => a,
        Err(e) => {
            out.error = Some(format!("`publish.pr`: {e}"));
            return out;
        }
    };
    let mut env = req.env.clone();
    let mut set = |k: &str, v: String| {
        env.retain(|(n, _)| n != k);
        env.push((k.to_string(), v));
    };
    set("RUNNER_REPO", req.repo.to_string());
    set("RUNNER_REPO_PATH", dir.display().to_string());
    set("RUNNER_ITEM", req.item.to_string());
    set("RUNNER_BRANCH", branch.clone());
    set("RUNNER_REMOTE", remote.clone());
    set("RUNNER_PR_TITLE", req.title.clone());
    set("RUNNER_PR_BODY", body_file.display().to_string());
    set("RUNNER_TOKEN", req.token.to_string());
    set("RUNNER_ROLE", "gate".to_string());
    if let Some(u) = req.previous_url {
        set("RUNNER_PR_URL", u.to_string());
    }
    if let Some((n, from)) = &req.review_round {
        set("RUNNER_REVIEW_ROUND", n.to_string());
        let moved = from.is_none() || from != &out.head;
        set(
            "RUNNER_HEAD_MOVED",
            if moved { "1" } else { "0" }.to_string(),
        );
    }
    let fin = process::run(
        SpawnSpec {
            argv,
            cwd: dir,
            env,
            log_path: req.logs.join("publish.log"),
            timeout: req.publish.timeout(),
            grace: std::time::Duration::from_secs(5),
            silence: None,
            redactor: req.redactor.clone(),
            inherit_fd: None,
            census: CensusKey {
                token: req.token.to_string(),
                repo: req.repo.to_string(),
            },
            count_lines: None,
            failure_roots: None,
            cgroup: None,
            confine: None,
        },
        stop,
    )
    .await;
    out.url = last_url(&fin.tail).or_else(|| req.previous_url.map(str::to_string));
    if !fin.success() {
        let why = match (&fin.spawn_error, fin.timed_out, fin.exit) {
            (Some(e), _, _) => e.clone(),
            (None, true, _) => "it timed out".into(),
            (None, false, Some(c)) => format!("exit {c}"),
            (None, false, None) => "it was ended".into(),
        };
        out.error = Some(format!(
            "the pull-request command failed ({why}): {}",
            process::output::last_lines(&fin.tail, 5, 1024)
        ));
    }
    out
}

/// The tracker's item `item` is, as a publication records it.
pub fn source_of(item: &crate::plan::ItemPlan) -> Option<crate::events::PublishedSource> {
    let s = item.source.as_ref()?;
    Some(crate::events::PublishedSource {
        name: s.name.clone(),
        id: s.id.clone(),
        title: s.title.clone(),
        url: s.url.clone(),
    })
}

/// The last http(s) URL in `text`.
pub(crate) fn last_url(text: &str) -> Option<String> {
    text.split_whitespace()
        .rev()
        .find(|w| w.starts_with("https://") || w.starts_with("http://"))
        .map(|w| w.trim_end_matches(['.', ',', ')', '"', '\'']).to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_last_url_printed_is_the_pull_requests() {
        assert_eq!(
            super::last_url("Creating pull request\nhttps://github.com/o/r/pull/7\n"),
            Some("https://github.com/o/r/pull/7".into())
        );
        assert_eq!(
            super::last_url("see https://a/1, then https://a/2."),
            Some("https://a/2".into())
        );
        assert_eq!(super::last_url("no link"), None);
    }
}
