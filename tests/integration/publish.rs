//! Publishing completed work branches: a real `git push` to a bare remote, and a pull-request
//! command (a stub that prints a URL) that opens once and updates afterwards.

use crate::common;

use common::{git, repo, run_in, stderr};
use std::path::Path;

/// A repository `r` with a bare remote `origin`, two items on work branches, and a
/// pull-request stub that records each call in `pr.log`.
fn fixture(root: &Path) {
    let r = repo(&root.join("r"));
    git(root, &["init", "-q", "--bare", "remote.git"]);
    git(&r, &["remote", "add", "origin", "../remote.git"]);
    let stub = root.join("pr.sh");
    std::fs::write(
        &stub,
        format!(
            "#!/bin/sh\nif [ -n \"${{RUNNER_PR_URL:-}}\" ]; then echo \"update $1 $RUNNER_PR_URL\" >> {log}; echo \"updated $RUNNER_PR_URL\"; exit 0; fi\ngit ls-remote --exit-code origin \"refs/heads/$1\" > /dev/null || {{ echo 'branch not on the remote' >&2; exit 1; }}\necho \"create $1 $(head -1 \"$RUNNER_PR_BODY\")\" >> {log}\necho \"Creating pull request for $1\"\necho \"https://forge.example/pr/$1\"\n",
            log = root.join("pr.log").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&stub, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(
        root.join("m.yaml"),
        "version: 1\nname: pub\nrepositories: [{path: r}]\nworker: {run: 'echo \"$RUNNER_ITEM $RUNNER_ATTEMPT $(date +%s%N)\" >> work.txt'}\npublish:\n  remote: origin\n  pr: [\"./pr.sh\", \"{branch}\"]\nitems:\n  - {repo: r, id: a, branch: work/a}\n  - {repo: r, id: b, branch: work/b}\n",
    )
    .unwrap();
}

fn calls(root: &Path) -> Vec<String> {
    std::fs::read_to_string(root.join("pr.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn completed_branches_are_pushed_and_their_pull_requests_opened_then_updated() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fixture(root);
    let out = run_in(root, &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let remote = root.join("remote.git");
    for b in ["work/a", "work/b"] {
        assert_eq!(
            git(&remote, &["rev-parse", b]),
            git(&root.join("r"), &["rev-parse", b]),
            "{b} pushed"
        );
    }
    let c = calls(root);
    assert_eq!(c.len(), 2, "{c:?}");
    assert!(c.iter().all(|l| l.starts_with("create ")), "{c:?}");
    assert!(
        c[0].contains("Work item `a`"),
        "the body names the item: {c:?}"
    );
    let report = common::latest_report(&root.join("runner-reports"));
    let a = common::report_item(&report, "id", "a");
    assert_eq!(
        a["publish"]["url"], "https://forge.example/pr/work/a",
        "{a:#}"
    );
    assert_eq!(a["publish"]["pushed"], true);
    let summary = std::fs::read_to_string(root.join("runner-reports/latest/summary.md")).unwrap();
    assert!(
        summary.contains("pull request: https://forge.example/pr/work/a"),
        "{summary}"
    );

    // Run again: the branches move on, the pull requests are updated, none is opened twice.
    let out = run_in(
        root,
        &["apply", "m.yaml", "--no-progress", "--rerun", "all"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let c = calls(root);
    assert_eq!(c.len(), 4, "{c:?}");
    assert_eq!(
        c.iter().filter(|l| l.starts_with("create ")).count(),
        2,
        "{c:?}"
    );
    assert!(
        c[2..]
            .iter()
            .all(|l| l.starts_with("update ") && l.contains("https://forge.example/pr/")),
        "{c:?}"
    );
    assert_eq!(
        git(&remote, &["rev-parse", "work/a"]),
        git(&root.join("r"), &["rev-parse", "work/a"]),
        "the new commit is pushed too"
    );
}

#[test]
fn a_rejected_push_is_reported_and_the_branch_kept() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fixture(root);
    // Someone else's commit is on the remote's work/a already: a fast-forward is impossible.
    let other = root.join("other");
    git(root, &["clone", "-q", "remote.git", "other"]);
    std::fs::write(other.join("theirs.txt"), "theirs\n").unwrap();
    git(&other, &["checkout", "-q", "-b", "work/a"]);
    git(&other, &["add", "."]);
    git(
        &other,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@e",
            "commit",
            "-q",
            "-m",
            "theirs",
        ],
    );
    git(&other, &["push", "-q", "origin", "work/a"]);
    let theirs = git(&other, &["rev-parse", "HEAD"]);
    let out = run_in(root, &["apply", "m.yaml", "--no-progress"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("could not be published"), "{err}");
    let report = common::latest_report(&root.join("runner-reports"));
    let a = common::report_item(&report, "id", "a");
    assert_eq!(a["outcome"], "completed", "{a:#}");
    assert_eq!(a["publish"]["pushed"], false);
    assert!(
        a["publish"]["error"]
            .as_str()
            .unwrap()
            .contains("the branch is kept"),
        "{a:#}"
    );
    // The remote keeps theirs; the local branch keeps ours; b was published as usual.
    assert_eq!(
        git(&root.join("remote.git"), &["rev-parse", "work/a"]),
        theirs
    );
    assert!(git(&root.join("r"), &["log", "--format=%s", "work/a"]).contains("runner: a"));
    let b = common::report_item(&report, "id", "b");
    assert_eq!(
        b["publish"]["url"], "https://forge.example/pr/work/b",
        "{b:#}"
    );
}

/// Publishing what runs recorded in the ledger at `state` (the default SQLite file when none).
fn catches_up(state: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fixture(root);
    let run = |args: &[&str]| {
        let mut args = args.to_vec();
        if let Some(url) = state {
            args.extend(["--state", url]);
        }
        run_in(root, &args)
    };
    // The first run's manifest does not publish.
    let m = std::fs::read_to_string(root.join("m.yaml")).unwrap();
    let without = m.replace(
        "publish:\n  remote: origin\n  pr: [\"./pr.sh\", \"{branch}\"]\n",
        "",
    );
    assert_ne!(m, without);
    std::fs::write(root.join("m.yaml"), &without).unwrap();
    let out = run(&["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = run(&["publish", "m.yaml"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "no publish section: {}",
        stderr(&out)
    );
    std::fs::write(root.join("m.yaml"), &m).unwrap();
    let out = run(&["publish", "m.yaml"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("2 published, 0 already up to date, 0 failed"),
        "{err}"
    );
    assert_eq!(
        git(&root.join("remote.git"), &["rev-parse", "work/b"]),
        git(&root.join("r"), &["rev-parse", "work/b"])
    );
    assert_eq!(calls(root).len(), 2);
    // Nothing moved: nothing to do, and no pull request is opened twice.
    let out = run(&["publish", "m.yaml"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("0 published, 2 already up to date"), "{err}");
    assert_eq!(calls(root).len(), 2);
}

#[test]
fn publish_catches_up_on_items_earlier_runs_completed() {
    catches_up(None);
}

#[test]
fn publish_catches_up_from_a_shared_ledger() {
    if let Some(url) = common::postgres_db() {
        catches_up(Some(&url));
    }
}
