//! `runner plan` against real git repositories in temp dirs.

use crate::common;

use common::{commit_file, git, repo, run_in, stderr, stdout, tree_fingerprint};
use serde_json::Value;
use std::path::Path;

/// Three repositories: `api` with a work branch that lacks the critical-base marker, `web`
/// missing on disk, and `svc-a` found by a glob with two discoverable items.
fn fixture(root: &Path) {
    let api = repo(&root.join("checkouts/api"));
    git(&api, &["branch", "runner/fix-login"]);
    commit_file(&api, "SECURITY.md", "patched\n");
    git(&api, &["tag", "v2.4.0"]);
    let svc = repo(&root.join("checkouts/svc-a"));
    commit_file(&svc, "changes/add-cache/proposal.md", "cache\n");
    commit_file(&svc, "changes/drop-v1/proposal.md", "drop\n");
    repo(&root.join("checkouts/svc-b"));
    std::fs::write(
        root.join("manifest.yaml"),
        r#"version: 1
name: fixture
capacity: {workers: 3}
repositories:
  - path: checkouts/api
    critical_base: [v2.4.0]
  - name: web
    path: checkouts/web
  - glob: "checkouts/svc-*"
worker:
  run: ["agent", "{item.task}"]
items:
  - repo: api
    id: fix-login
    branch: runner/fix-login
    vars: {task: "fix the login loop"}
  - repo: api
    id: new-work
    branch: "runner/{item}"
    vars: {task: "new"}
  - repo: web
    id: restyle
    vars: {task: "restyle"}
discover:
  - glob: "changes/*/proposal.md"
    id: "{match.parent}"
    vars: {task: "{match.path}"}
"#,
    )
    .unwrap();
}

fn plan_json(root: &Path) -> (String, Value) {
    let out = run_in(root, &["plan", "manifest.yaml", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    let v: Value = serde_json::from_str(&text).unwrap();
    (text, v)
}

fn item<'a>(plan: &'a Value, repo: &str, id: &str) -> &'a Value {
    plan["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["repo"] == repo && i["id"] == id)
        .unwrap_or_else(|| panic!("no item {repo}/{id} in {plan:#}"))
}

#[test]
fn plan_lists_every_item_with_its_state_and_reason() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    let (_, plan) = plan_json(dir.path());
    assert_eq!(plan["schema"], "runner.plan/v1");

    let stale = item(&plan, "api", "fix-login");
    assert_eq!(stale["state"], "held");
    assert_eq!(stale["reason"], "stale-base");
    assert!(
        stale["detail"].as_str().unwrap().contains("v2.4.0"),
        "{stale}"
    );
    assert_eq!(stale["continues"], true);

    let new = item(&plan, "api", "new-work");
    assert_eq!(new["state"], "pending");
    assert_eq!(new["branch"], "runner/new-work");
    assert_eq!(new["continues"], false);

    let missing = item(&plan, "web", "restyle");
    assert_eq!(missing["state"], "skipped");
    assert_eq!(missing["reason"], "repo-not-found");

    for id in ["add-cache", "drop-v1"] {
        let d = item(&plan, "svc-a", id);
        assert_eq!(d["state"], "pending");
        assert_eq!(d["origin"], "discovered");
        assert_eq!(d["vars"]["task"], format!("changes/{id}/proposal.md"));
    }
    assert_eq!(plan["items"].as_array().unwrap().len(), 5);
    let repos: Vec<&str> = plan["repositories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(repos, ["api", "web", "svc-a", "svc-b"]);
    assert_eq!(plan["counts"]["pending"], 3);
    assert_eq!(plan["counts"]["held"], 1);
    assert_eq!(plan["counts"]["skipped"], 1);

    // Round-robin order: the first item of each repository before any second one.
    let order: Vec<String> = plan["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            format!(
                "{}/{}",
                i["repo"].as_str().unwrap(),
                i["id"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        order,
        [
            "api/fix-login",
            "web/restyle",
            "svc-a/add-cache",
            "api/new-work",
            "svc-a/drop-v1"
        ]
    );
}

#[test]
fn the_same_plan_twice_is_identical_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    let before = tree_fingerprint(dir.path());
    let (first, _) = plan_json(dir.path());
    let (second, _) = plan_json(dir.path());
    let table = run_in(dir.path(), &["plan", "manifest.yaml"]);
    assert_eq!(table.status.code(), Some(0));
    assert_eq!(first, second);
    assert_eq!(
        before,
        tree_fingerprint(dir.path()),
        "plan wrote to the tree"
    );
}

#[test]
fn a_fixed_branch_is_no_longer_stale() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    let api = dir.path().join("checkouts/api");
    git(&api, &["branch", "-f", "runner/fix-login", "main"]);
    let (_, plan) = plan_json(dir.path());
    assert_eq!(item(&plan, "api", "fix-login")["state"], "pending");
}

#[test]
fn an_unresolvable_marker_holds_the_item() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    let m = std::fs::read_to_string(dir.path().join("manifest.yaml")).unwrap();
    std::fs::write(
        dir.path().join("manifest.yaml"),
        m.replace("[v2.4.0]", "[v9.9.9]"),
    )
    .unwrap();
    let api = dir.path().join("checkouts/api");
    git(&api, &["branch", "-f", "runner/fix-login", "main"]);
    let (_, plan) = plan_json(dir.path());
    let it = item(&plan, "api", "fix-login");
    assert_eq!(it["reason"], "stale-base");
    assert!(
        it["detail"].as_str().unwrap().contains("unresolvable"),
        "{it}"
    );
}

#[test]
fn the_human_table_names_states_and_reasons() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    let out = run_in(dir.path(), &["plan", "manifest.yaml"]);
    let text = stdout(&out);
    assert!(
        text.contains("4 repositories, 1 not found; 5 items: 3 pending, 0 done, 1 held, 1 skipped"),
        "{text}"
    );
    assert!(text.contains("stale-base"), "{text}");
    assert!(text.contains("repo-not-found"), "{text}");
}

#[test]
fn detailed_exitcode_tells_pending_from_nothing_to_do() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    let out = run_in(
        dir.path(),
        &["plan", "manifest.yaml", "--detailed-exitcode"],
    );
    assert_eq!(out.status.code(), Some(2));
    let out = run_in(
        dir.path(),
        &[
            "plan",
            "manifest.yaml",
            "--detailed-exitcode",
            "--items",
            "fix-login",
        ],
    );
    // Only an item held `stale-base` is selected: nothing to do.
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    std::fs::write(dir.path().join("bad.yaml"), "version: 1\n").unwrap();
    let out = run_in(dir.path(), &["plan", "bad.yaml", "--detailed-exitcode"]);
    assert_eq!(out.status.code(), Some(1));
    let out = run_in(dir.path(), &["plan", "bad.yaml"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn filters_skip_items_as_filtered() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    let out = run_in(
        dir.path(),
        &["plan", "manifest.yaml", "--json", "--only", "svc-*"],
    );
    let plan: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(item(&plan, "api", "new-work")["reason"], "filtered");
    assert_eq!(item(&plan, "svc-a", "add-cache")["state"], "pending");
}

#[test]
fn a_dirty_checkout_holds_in_place_items() {
    let dir = tempfile::tempdir().unwrap();
    let r = repo(&dir.path().join("r"));
    std::fs::write(r.join("scratch.txt"), "uncommitted\n").unwrap();
    std::fs::write(
        dir.path().join("m.yaml"),
        "version: 1\nname: d\nrepositories: [{path: r}]\nworker: {run: \"true\"}\nitems:\n  - {repo: r, id: in-place}\n  - {repo: r, id: on-branch, branch: work}\n",
    )
    .unwrap();
    let out = run_in(dir.path(), &["plan", "m.yaml", "--json"]);
    let plan: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(item(&plan, "r", "in-place")["reason"], "dirty-tree");
    assert_eq!(item(&plan, "r", "on-branch")["state"], "pending");
}

#[test]
fn two_matches_yielding_one_id_are_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let r = repo(&dir.path().join("r"));
    commit_file(&r, "a/task.md", "1");
    commit_file(&r, "b/task.md", "2");
    std::fs::write(
        dir.path().join("m.yaml"),
        "version: 1\nname: d\nrepositories: [{path: r}]\nworker: {run: \"true\"}\ndiscover:\n  - glob: \"*/task.md\"\n    id: \"{match.name}\"\n",
    )
    .unwrap();
    let out = run_in(dir.path(), &["plan", "m.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("yields the id `task.md`, already taken by"),
        "{err}"
    );
    assert!(err.contains("[m.yaml:6:"), "{err}");
}

#[test]
fn a_folder_that_is_not_a_checkout_is_not_found() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("plain")).unwrap();
    std::fs::write(
        dir.path().join("m.yaml"),
        "version: 1\nname: d\nrepositories: [{path: plain}]\nworker: {run: \"true\"}\nitems: [{repo: plain, id: x}]\n",
    )
    .unwrap();
    let out = run_in(dir.path(), &["plan", "m.yaml", "--json"]);
    let plan: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(item(&plan, "plain", "x")["reason"], "repo-not-found");
}

/// Items on work branches are discovered from what their worktree will hold — the base's
/// committed files — and a match the checkout has but the base lacks is named with the fix,
/// never run blind.
#[test]
fn discovery_for_work_branches_sees_committed_files_and_names_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let r = repo(&root.join("r"));
    commit_file(&r, ".runner-tasks/committed.md", "Fix the typo\n");
    commit_file(&r, ".runner-tasks/edited.md", "Add a test\n");
    std::fs::write(r.join(".runner-tasks/edited.md"), "Add two tests\n").unwrap();
    std::fs::write(r.join(".runner-tasks/untracked.md"), "Add a licence\n").unwrap();
    std::fs::write(r.join(".gitignore"), "ignored.md\n").unwrap();
    git(&r, &["add", ".gitignore"]);
    git(&r, &["commit", "-q", "-m", "ignore"]);
    std::fs::write(r.join(".runner-tasks/staged.md"), "Staged only\n").unwrap();
    git(&r, &["add", ".runner-tasks/staged.md"]);
    std::fs::write(r.join(".runner-tasks/ignored.md"), "Ignored\n").unwrap();
    std::fs::write(
        root.join("m.yaml"),
        r#"version: 1
name: tasks
repositories: [{path: r}]
worker: {run: "cp {item.task} seen.txt"}
discover:
  - glob: ".runner-tasks/*.md"
    id: "{match.stem}"
    branch: "runner/{item}"
    vars: {task: "{match.path}"}
"#,
    )
    .unwrap();
    let out = run_in(root, &["plan", "m.yaml", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let plan: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let ids: Vec<&str> = plan["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["committed", "edited"], "{plan:#}");
    let err = stderr(&out);
    assert!(
        err.contains("`.runner-tasks/ignored.md`, `.runner-tasks/staged.md`, `.runner-tasks/untracked.md` are not committed on `main`, from which their work branches are made, so they are not run: commit them"),
        "{err}"
    );
    assert!(
        err.contains("`.runner-tasks/edited.md` has edits that are not committed; its item works on a branch from `main` and sees the committed version: commit them"),
        "{err}"
    );
    assert!(!err.contains("matches no file"), "{err}");
    // `validate` counts what discovery finds, as `plan` does.
    let out = run_in(root, &["validate", "m.yaml"]);
    assert!(
        stdout(&out).contains("2 items (0 declared, 2 discovered now by 1 discovery rule)"),
        "{}",
        stdout(&out)
    );
    // What the items saw is the committed text.
    let out = run_in(root, &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("are not committed on `main`"));
    assert_eq!(
        git(&r, &["show", "runner/edited:seen.txt"]),
        "Add a test",
        "the item saw the committed task"
    );

    // A base other than the branch the checkout is on: the base's files are what items see.
    let b = repo(&root.join("b"));
    commit_file(&b, "tasks/on-main.md", "main's task\n");
    git(&b, &["checkout", "-q", "-b", "feature"]);
    commit_file(&b, "tasks/on-feature.md", "feature's task\n");
    std::fs::write(
        root.join("b.yaml"),
        r#"version: 1
name: based
repositories: [{path: b, base: main}]
worker: {run: "true"}
discover:
  - glob: "tasks/*.md"
    id: "{match.stem}"
    branch: "runner/{item}"
"#,
    )
    .unwrap();
    let out = run_in(root, &["plan", "b.yaml", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let plan: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let ids: Vec<&str> = plan["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["on-main"], "{plan:#}");
}

/// Four repositories with one item each, whose worker takes a while, run once so that the
/// ledger has their durations.
fn timed_fixture(root: &Path) {
    let mut repos = String::new();
    let mut items = String::new();
    for i in 0..4 {
        repo(&root.join(format!("r{i}")));
        repos.push_str(&format!("  - path: r{i}\n"));
        items.push_str(&format!("  - {{repo: r{i}, id: t{i}}}\n"));
    }
    std::fs::write(
        root.join("manifest.yaml"),
        format!(
            "version: 1\nname: timed\ncapacity: {{workers: 4}}\nrepositories:\n{repos}worker:\n  run: \"sleep 0.4\"\nitems:\n{items}"
        ),
    )
    .unwrap();
    let out = run_in(root, &["apply", "manifest.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// `plan -j N` estimates as `apply -j N` runs: the order, the expected duration and the ETA come
/// from a simulation with N workers, not the manifest's bound.
#[test]
fn plan_and_apply_estimate_with_the_bound_j_sets() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    timed_fixture(root);
    let planned = |extra: &[&str]| -> Value {
        let mut args = vec!["plan", "manifest.yaml", "--json", "--rerun", "all"];
        args.extend_from_slice(extra);
        let out = run_in(root, &args);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        serde_json::from_str(&stdout(&out)).unwrap()
    };
    let four = planned(&[]);
    let one = planned(&["-j", "1"]);
    assert_eq!(four["capacity"]["workers"], 4);
    assert_eq!(one["capacity"]["workers"], 1);
    let ms = |p: &Value, k: &str| p["expected"][k].as_u64().unwrap_or_else(|| panic!("{p:#}"));
    // Four items of about the same estimate: one after another with one worker (the whole work),
    // all at once with four (the longest one).
    assert_eq!(
        ms(&one, "lower_bound_ms"),
        ms(&one, "makespan_ms"),
        "{one:#}"
    );
    assert!(
        ms(&one, "makespan_ms") > 3 * ms(&four, "makespan_ms"),
        "{one:#}\n{four:#}"
    );

    // `apply -j 1` plans as `plan -j 1` did: the plan it records carries the same bound and
    // estimate (the ETA of its progress display is counted from them).
    let out = run_in(
        root,
        &[
            "apply",
            "manifest.yaml",
            "--no-progress",
            "-j",
            "1",
            "--rerun",
            "all",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("up to 1 at once"), "{}", stderr(&out));
    let db = rusqlite::Connection::open(root.join(".runner/state.db")).unwrap();
    let recorded: String = db
        .query_row(
            "SELECT plan_json FROM runs ORDER BY started_at DESC LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let recorded: Value = serde_json::from_str(&recorded).unwrap();
    assert_eq!(recorded["capacity"]["workers"], 1);
    assert_eq!(recorded["expected"], one["expected"]);
}
