//! Model fallback chains, provider-failure classification with real processes, critical-base
//! markers on work branches, users' uncommitted changes, and `url:` repositories.

use crate::common;

use common::*;
use serde_json::Value;
use std::path::Path;

fn write(root: &Path, manifest: &str) {
    std::fs::write(root.join("m.yaml"), manifest).unwrap();
}

fn apply(root: &Path) -> std::process::Output {
    run_in(root, &["apply", "m.yaml", "--no-progress"])
}

fn models_of(item: &Value) -> Vec<String> {
    item["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["model"].as_str().unwrap_or("").to_string())
        .collect()
}

#[test]
fn the_chain_falls_back_after_threshold_provider_failures_and_each_item_starts_on_the_primary() {
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("r0"));
    repo(&dir.path().join("r1"));
    // The fake agent: model-a's provider is down (EX_TEMPFAIL), model-b works.
    write(
        dir.path(),
        r#"version: 1
name: chain
capacity: {workers: 1}
repositories: [{path: r0}, {path: r1}]
models: {primary: model-a, fallbacks: [model-b], threshold: 2, backoff: {initial: 20ms, max: 100ms}}
worker:
  run: ["sh", "-c", "test \"$RUNNER_MODEL\" = model-b || exit 75", "agent", "{model}"]
  attempts: 1
items:
  - {repo: r0, id: first}
  - {repo: r1, id: second}
"#,
    );
    let out = apply(dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = latest_report(&dir.path().join("runner-reports"));
    for item in report["items"].as_array().unwrap() {
        assert_eq!(item["outcome"], "completed");
        assert_eq!(models_of(item), ["model-a", "model-a", "model-b"], "{item}");
        assert_eq!(item["model"], "model-b");
        let classes: Vec<&str> = item["attempts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["worker"]["class"].as_str().unwrap())
            .collect();
        assert_eq!(classes, ["provider", "provider", "ok"]);
    }
}

#[test]
fn an_exhausted_chain_halts_with_fallback_exhausted() {
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("r0"));
    write(
        dir.path(),
        "version: 1\nname: x\nrepositories: [{path: r0}]\nmodels: {primary: a, fallbacks: [b], threshold: 1, backoff: {initial: 20ms, max: 100ms}}\nworker: {run: \"exit 75\"}\nitems: [{repo: r0, id: i}]\n",
    );
    let out = apply(dir.path());
    assert_eq!(out.status.code(), Some(1));
    let report = latest_report(&dir.path().join("runner-reports"));
    let item = &report["items"][0];
    assert_eq!(item["outcome"], "halted");
    assert_eq!(item["reason"], "fallback-exhausted");
    assert_eq!(models_of(item), ["a", "b"]);
}

#[test]
fn output_patterns_and_silence_are_provider_failures_but_quoted_text_is_not() {
    let dir = tempfile::tempdir().unwrap();
    for r in ["pattern", "silent", "quoted"] {
        repo(&dir.path().join(r));
    }
    let marker = dir.path().join("ran-once");
    write(
        dir.path(),
        &format!(
            r#"version: 1
name: classify
capacity: {{workers: 3}}
repositories: [{{path: pattern}}, {{path: silent}}, {{path: quoted}}]
models:
  primary: m1
  fallbacks: [m2]
  threshold: 1
  backoff: {{initial: 20ms, max: 100ms}}
  provider_failure: {{patterns: ["rate limit"], silence: 1s}}
stall: {{after: 10}}
worker:
  run: "case $RUNNER_REPO in pattern) echo 'Error: Rate limit exceeded'; exit 1;; silent) sleep 3133;; quoted) echo 'diff: handles rate limit'; head -c 5000 /dev/zero | tr '\\0' x; echo; touch {m}; exit 1;; esac"
  timeout: 1m
items:
  - {{repo: pattern, id: p}}
  - {{repo: silent, id: s}}
  - {{repo: quoted, id: q}}
"#,
            m = marker.display()
        ),
    );
    let out = apply(dir.path());
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = latest_report(&dir.path().join("runner-reports"));
    let by_repo = |r: &str| {
        report["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["repo"] == r)
            .unwrap()
            .clone()
    };
    assert_eq!(
        by_repo("pattern")["attempts"][0]["worker"]["class"],
        "provider"
    );
    assert_eq!(by_repo("pattern")["reason"], "fallback-exhausted");
    assert_eq!(
        by_repo("silent")["attempts"][0]["worker"]["class"],
        "provider"
    );
    assert_eq!(
        by_repo("quoted")["attempts"][0]["worker"]["class"],
        "failed"
    );
    assert!(processes_matching("sleep 3133").is_empty());
}

fn branch_fixture(root: &Path) -> (String, String) {
    let r = repo(&root.join("api"));
    git(&r, &["branch", "runner/fix"]);
    let marker = commit_file(&r, "SECURITY.md", "patched\n");
    git(&r, &["tag", "security-fix"]);
    let before = git(&r, &["rev-parse", "runner/fix"]);
    write(
        root,
        "version: 1\nname: b\nrepositories:\n  - {path: api, critical_base: [security-fix]}\nworker: {run: \"echo work > work.txt\"}\nitems: [{repo: api, id: fix, branch: runner/fix}]\n",
    );
    (marker, before)
}

#[test]
fn a_branch_lacking_a_marker_is_stale_and_untouched_until_updated() {
    let dir = tempfile::tempdir().unwrap();
    let (_marker, before) = branch_fixture(dir.path());
    let r = dir.path().join("api");
    let plan: Value =
        serde_json::from_str(&stdout(&run_in(dir.path(), &["plan", "m.yaml", "--json"]))).unwrap();
    assert_eq!(plan["items"][0]["reason"], "stale-base");
    assert!(
        plan["items"][0]["detail"]
            .as_str()
            .unwrap()
            .contains("security-fix")
    );

    let out = apply(dir.path());
    assert_eq!(out.status.code(), Some(1));
    let report = latest_report(&dir.path().join("runner-reports"));
    assert_eq!(report["items"][0]["outcome"], "held");
    assert_eq!(report["items"][0]["reason"], "stale-base");
    assert!(
        report["items"][0]["cause"]
            .as_str()
            .unwrap()
            .contains("security-fix")
    );
    assert_eq!(
        git(&r, &["rev-parse", "runner/fix"]),
        before,
        "the branch was not touched"
    );

    // The user brings the branch up to date; the next apply runs it.
    git(&r, &["branch", "-f", "runner/fix", "main"]);
    let out = apply(dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        git(&r, &["log", "-1", "--format=%s", "runner/fix"]),
        "runner: fix"
    );
    assert_eq!(git(&r, &["show", "runner/fix:work.txt"]), "work");
}

#[test]
fn a_users_uncommitted_changes_are_never_modified() {
    let dir = tempfile::tempdir().unwrap();
    let r = repo(&dir.path().join("api"));
    std::fs::write(r.join("README.md"), "my unsaved edit\n").unwrap();
    std::fs::write(r.join("notes.txt"), "untracked notes\n").unwrap();
    let status_before = git(&r, &["status", "--porcelain"]);
    let head_before = git(&r, &["rev-parse", "HEAD"]);
    write(
        dir.path(),
        "version: 1\nname: u\nrepositories: [{path: api}]\nworker: {run: \"echo changed > README.md; echo x > notes.txt; git add -A\"}\nitems:\n  - {repo: api, id: in-place}\n  - {repo: api, id: on-branch, branch: runner/on-branch}\n",
    );
    let out = apply(dir.path());
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = latest_report(&dir.path().join("runner-reports"));
    let in_place = report_item(&report, "id", "in-place");
    assert_eq!(in_place["reason"], "dirty-tree");
    assert_eq!(
        report_item(&report, "id", "on-branch")["outcome"],
        "completed"
    );
    assert_eq!(
        std::fs::read_to_string(r.join("README.md")).unwrap(),
        "my unsaved edit\n"
    );
    assert_eq!(
        std::fs::read_to_string(r.join("notes.txt")).unwrap(),
        "untracked notes\n"
    );
    assert_eq!(git(&r, &["status", "--porcelain"]), status_before);
    assert_eq!(git(&r, &["rev-parse", "HEAD"]), head_before);
    assert_eq!(git(&r, &["show", "runner/on-branch:README.md"]), "changed");
}

/// Write every ref of `repo` into the bundle file `to`.
fn bundle(repo: &Path, to: &Path) {
    git(
        repo,
        &["bundle", "create", "-q", to.to_str().unwrap(), "--all"],
    );
}

#[test]
fn a_bundle_url_repository_drains_and_a_failed_clone_holds_only_its_items_for_the_next_run() {
    let dir = tempfile::tempdir().unwrap();
    let src = repo(&dir.path().join("src"));
    commit_file(&src, "tasks/a.md", "a\n");
    bundle(&src, &dir.path().join("lib.bundle"));
    write(
        dir.path(),
        "version: 1\nname: u\nrepositories:\n  - url: lib.bundle\n  - name: private\n    url: https://user:s3cr3t-pass@127.0.0.1:9/none.git\nworker: {run: \"echo done > out.txt\"}\nitems:\n  - {repo: lib, id: a, branch: runner/a}\n  - {repo: private, id: b}\n",
    );
    let out = apply(dir.path());
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = latest_report(&dir.path().join("runner-reports"));
    assert_eq!(report_item(&report, "repo", "lib")["outcome"], "completed");
    // The environment's fault, not the work's: held, and tried again by the next run.
    let private = report_item(&report, "repo", "private");
    assert_eq!(private["outcome"], "held", "{private:#}");
    assert_eq!(private["reason"], "environment", "{private:#}");
    let cause = private["cause"].as_str().unwrap();
    assert!(cause.contains("cannot clone"), "{cause}");
    let text = std::fs::read_to_string(dir.path().join("runner-reports/latest/report.json"))
        .unwrap()
        + &std::fs::read_to_string(dir.path().join("runner-reports/latest/summary.md")).unwrap()
        + &stderr(&out);
    assert!(!text.contains("s3cr3t-pass"), "credentials leaked");
    // The clone is reused (and fetched) on the next run.
    let clone = dir.path().join(".runner/workspace/repos/lib");
    commit_file(&src, "tasks/b.md", "b\n");
    bundle(&src, &dir.path().join("lib.bundle"));
    let out = apply(dir.path());
    assert!(
        git(&clone, &["log", "--all", "--format=%s"]).contains("add tasks/b.md"),
        "not fetched"
    );
    let report = latest_report(&dir.path().join("runner-reports"));
    let private = report_item(&report, "repo", "private");
    assert_eq!(private["reason"], "environment", "tried again: {private:#}");
    assert!(
        stderr(&out).contains("held (environment 1)"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn many_branch_items_in_parallel_all_complete() {
    // git helpers (worktree, commit) run while other items' processes end and are censused: a
    // helper's exit status must never be taken by the census.
    let dir = tempfile::tempdir().unwrap();
    let mut m = String::from("version: 1\nname: par\ncapacity: {workers: 4}\nrepositories:\n");
    for r in 0..6 {
        repo(&dir.path().join(format!("r{r}")));
        m.push_str(&format!("  - path: r{r}\n"));
    }
    m.push_str("worker: {run: \"echo $RUNNER_ITEM > out-$RUNNER_ITEM.txt\"}\nitems:\n");
    for i in 0..6 {
        for r in 0..6 {
            m.push_str(&format!(
                "  - {{repo: r{r}, id: i{i}, branch: \"runner/i{i}\"}}\n"
            ));
        }
    }
    write(dir.path(), &m);
    let out = apply(dir.path());
    let report = latest_report(&dir.path().join("runner-reports"));
    let bad: Vec<String> = report["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["outcome"] != "completed")
        .map(|i| format!("{}/{}: {}", i["repo"], i["id"], i["cause"]))
        .collect();
    assert!(bad.is_empty(), "{bad:?}");
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn the_critical_base_is_checked_again_just_before_the_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let r = repo(&dir.path().join("api"));
    let old = git(&r, &["rev-parse", "HEAD"]);
    commit_file(&r, "SECURITY.md", "patched\n");
    git(&r, &["tag", "security-fix"]);
    git(&r, &["branch", "runner/b"]);
    // At plan time `runner/b` contains the marker; while the first item runs, someone moves it
    // back behind it (the item itself may not: its confinement keeps it out of the refs).
    let go = dir.path().join("go");
    write(
        dir.path(),
        &format!(
            "version: 1\nname: b\ncapacity: {{workers: 1}}\nrepositories:\n  - {{path: api, critical_base: [security-fix]}}\nworker: {{run: \"touch started; while [ ! -e {} ]; do sleep 0.05; done; echo a > a.txt\"}}\nitems:\n  - {{repo: api, id: a, branch: runner/a}}\n  - {{repo: api, id: b, branch: runner/b}}\n",
            go.display()
        ),
    );
    let plan: Value =
        serde_json::from_str(&stdout(&run_in(dir.path(), &["plan", "m.yaml", "--json"]))).unwrap();
    assert_eq!(plan["counts"]["pending"], 2);
    let child = common::runner()
        .current_dir(dir.path())
        .args(["apply", "m.yaml", "--no-progress"])
        .env_remove("RUNNER_SANDBOX_WRITABLE")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = dir.path().join(".runner/workspace/worktrees/api/a/started");
    assert!(common::wait_for(20, || started.exists()));
    git(&r, &["branch", "-f", "runner/b", &old]);
    std::fs::write(&go, "").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = latest_report(&dir.path().join("runner-reports"));
    let b = report["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"] == "b")
        .unwrap()
        .clone();
    assert_eq!(b["outcome"], "held");
    assert_eq!(b["reason"], "stale-base");
    assert!(b["cause"].as_str().unwrap().contains("security-fix"), "{b}");
    assert_eq!(
        git(&r, &["rev-parse", "runner/b"]),
        old,
        "the branch was not touched"
    );
}

#[test]
fn one_items_provider_failures_move_its_own_chain_not_every_item() {
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("r"));
    // Model `a` fails only for item `one`: its chain moves; `two` still starts on `a`. Then `a`
    // fails for `three` and `four` too: two items' evidence, and the run demotes it.
    write(
        dir.path(),
        r#"version: 1
name: demotion
capacity: {workers: 1}
repositories: [{path: r}]
models: {primary: a, fallbacks: [b, c], threshold: 2, backoff: {initial: 10ms, max: 20ms}}
worker:
  run: ["sh", "-c", 'case "$RUNNER_MODEL/$RUNNER_ITEM" in a/one|a/three|a/four) exit 75;; esac']
items:
  - {repo: r, id: one}
  - {repo: r, id: two}
  - {repo: r, id: three}
  - {repo: r, id: four}
  - {repo: r, id: five}
"#,
    );
    let out = apply(dir.path());
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let report = latest_report(&dir.path().join("runner-reports"));
    assert_eq!(
        models_of(report_item(&report, "id", "one")),
        ["a", "a", "b"]
    );
    assert_eq!(
        models_of(report_item(&report, "id", "two")),
        ["a"],
        "one item's trouble moved another: {report:#}"
    );
    assert_eq!(
        models_of(report_item(&report, "id", "three")),
        ["a", "a", "b"]
    );
    // `three` and `one` are two items: `a` is demoted, and the item after starts on `b`.
    assert_eq!(report["demoted"][0]["model"], "a", "{report:#}");
    assert_eq!(
        report["demoted"][0]["items"],
        serde_json::json!(["r/one", "r/three"]),
        "{report:#}"
    );
    assert_eq!(models_of(report_item(&report, "id", "four")), ["b"]);
    assert!(err.contains("(r/one, r/three)"), "{err}");
}

#[test]
fn a_chain_without_fallbacks_keeps_its_model_then_holds_the_item_for_the_next_run() {
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("r"));
    write(
        dir.path(),
        "version: 1\nname: x\nrepositories: [{path: r}]\nmodels: {primary: only, threshold: 2, backoff: {initial: 10ms, max: 20ms}}\nworker: {run: \"exit 75\"}\nitems: [{repo: r, id: i}]\n",
    );
    let out = apply(dir.path());
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let report = latest_report(&dir.path().join("runner-reports"));
    let item = &report["items"][0];
    assert_eq!(item["outcome"], "held", "{item:#}");
    assert_eq!(item["reason"], "provider-unavailable");
    assert_eq!(
        models_of(item),
        vec!["only"; 8],
        "kept on its model, 8 times"
    );
    assert!(
        item["cause"]
            .as_str()
            .unwrap()
            .contains("failed for the provider's reasons 8 times in a row"),
        "{item:#}"
    );
    // Held, not done: the next run tries it again.
    let out = run_in(dir.path(), &["plan", "m.yaml", "--json"]);
    let plan: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(plan["items"][0]["state"], "pending", "{plan:#}");
}

/// A branch continued after its base moved says how far behind it is; `--rerun failed --fresh`
/// starts the item again from the base as it is now, keeping the old branch under a backup name.
#[test]
fn a_stale_branch_is_shown_behind_and_fresh_starts_it_again_from_the_base() {
    let dir = tempfile::tempdir().unwrap();
    let r = repo(&dir.path().join("r"));
    // The gate needs `fixed.txt`, which only a later commit on `main` brings.
    write(
        dir.path(),
        "version: 1\nname: fresh\nrepositories: [{path: r}]\nworker: {run: \"echo work >> work.txt\"}\ngates: [{name: needs-fix, run: \"test -f fixed.txt\"}]\nitems: [{repo: r, id: x, branch: runner/x}]\n",
    );
    let out = apply(dir.path());
    assert_eq!(out.status.code(), Some(1), "halted: {}", stderr(&out));
    let old_tip = git(&r, &["rev-parse", "runner/x"]);
    commit_file(&r, "fixed.txt", "the fix\n");
    commit_file(&r, "other.txt", "more\n");
    let out = run_in(dir.path(), &["plan", "m.yaml", "--rerun", "failed"]);
    let text = stdout(&out);
    assert!(
        text.contains("continues `runner/x`, 2 commits behind `main`"),
        "{text}"
    );
    let out = run_in(
        dir.path(),
        &["plan", "m.yaml", "--rerun", "failed", "--json"],
    );
    let plan: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(plan["items"][0]["behind"], 2, "{plan:#}");
    // Continued, the rerun fails the same way: the branch lacks the fix.
    let out = run_in(
        dir.path(),
        &["apply", "m.yaml", "--no-progress", "--rerun", "failed"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let continued_tip = git(&r, &["rev-parse", "runner/x"]);
    // `--fresh` without `--rerun` is refused.
    let out = run_in(dir.path(), &["apply", "m.yaml", "--fresh"]);
    assert_eq!(out.status.code(), Some(2));
    let backup = format!("runner/x.backup-{}", &continued_tip[..12]);
    let out = run_in(
        dir.path(),
        &["plan", "m.yaml", "--rerun", "failed", "--fresh"],
    );
    assert!(
        stdout(&out).contains(&format!(
            "starts anew from `main`; the old `runner/x` is kept as `{backup}`"
        )),
        "{}",
        stdout(&out)
    );
    let out = run_in(
        dir.path(),
        &[
            "apply",
            "m.yaml",
            "--no-progress",
            "--rerun",
            "failed",
            "--fresh",
        ],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(git(&r, &["rev-parse", &backup]), continued_tip);
    assert!(
        git(&r, &["merge-base", "--is-ancestor", &old_tip, &backup]).is_empty(),
        "the backup keeps the old work"
    );
    // The new branch is the current base plus one commit of new work.
    assert_eq!(
        git(&r, &["rev-parse", "runner/x~1"]),
        git(&r, &["rev-parse", "main"])
    );
    let report = latest_report(&dir.path().join("runner-reports"));
    assert_eq!(report["items"][0]["backup_branch"], backup.as_str());
    assert!(
        err.contains(&format!("its old branch is kept as `{backup}`")),
        "{err}"
    );
}

/// A worktree of the work branch whose folder someone deleted (git still records it, and would
/// refuse to check the branch out again): runner prunes the record and runs the item.
#[test]
fn a_work_branch_whose_worktree_folder_was_deleted_runs_again() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let r = repo(&root.join("r"));
    git(&r, &["branch", "work"]);
    let gone = root.join("gone");
    git(
        &r,
        &["worktree", "add", "-q", gone.to_str().unwrap(), "work"],
    );
    std::fs::remove_dir_all(&gone).unwrap();
    write(
        root,
        "version: 1\nname: t\nrepositories: [{path: r}]\nworker: {run: 'echo done > out.txt'}\nitems: [{repo: r, id: x, branch: work}]\n",
    );
    let out = apply(root);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(git(&r, &["show", "work:out.txt"]).trim(), "done");
}
