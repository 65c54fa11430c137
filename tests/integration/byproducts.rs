//! Repositories as users have them: no `.gitignore`, gates that leave bytecode and build output
//! behind and formatters that edit files. What a gate writes never reaches a commit, the next
//! worker pass or a halted item's leftovers, and an in-place item leaves its checkout equal to
//! its commit — without touching the user's own (ignored) files.

use crate::common;

use common::{git, latest_report, repo, report_item, run_in, stderr};
use std::path::Path;

/// A gate as Python's and cargo's test runners behave in a repository that ignores nothing: it
/// writes bytecode and build output, and a formatter edit to a tracked file; it fails while
/// `$RUNNER_ITEM.fail` is in the folder.
const GATE: &str = r#"mkdir -p __pycache__ target/debug; echo bytecode > __pycache__/mod.cpython-311.pyc; echo obj > target/debug/out.o; echo reformatted >> README.md; test ! -e "$RUNNER_ITEM.fail""#;

fn manifest(root: &Path, worker: &str, items: &str, attempts: u32) {
    std::fs::write(
        root.join("m.yaml"),
        format!(
            "version: 1\nname: byproducts\ncapacity: {{workers: 1}}\nrepositories: [{{path: r}}]\nworker: {{run: {worker:?}, attempts: {attempts}}}\ngates: [{{name: test, run: {GATE:?}}}]\nitems: {items}\n"
        ),
    )
    .unwrap();
}

/// The files a commit changed.
fn files_of(r: &Path, rev: &str) -> Vec<String> {
    let text = git(r, &["show", "--name-only", "--format=", rev]);
    text.lines().map(str::to_string).collect()
}

#[test]
fn in_place_items_commit_only_their_work_and_leave_the_checkout_equal_to_the_commit() {
    let dir = tempfile::tempdir().unwrap();
    let r = repo(&dir.path().join("r"));
    // The user's own ignored file stays, whatever the gates do.
    std::fs::write(r.join(".git/info/exclude"), "notes.local\n").unwrap();
    std::fs::write(r.join("notes.local"), "mine\n").unwrap();
    manifest(
        dir.path(),
        "echo \"$RUNNER_ITEM\" >> \"$RUNNER_ITEM.txt\"",
        "[{repo: r, id: one}, {repo: r, id: two}]",
        1,
    );
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(files_of(&r, "HEAD~1"), ["one.txt"]);
    assert_eq!(
        files_of(&r, "HEAD"),
        ["two.txt"],
        "the first item's gates' files came along"
    );
    assert_eq!(
        git(&r, &["status", "--porcelain", "--untracked-files=all"]),
        ""
    );
    assert_eq!(
        std::fs::read_to_string(r.join("README.md")).unwrap(),
        "hello\n"
    );
    assert_eq!(
        std::fs::read_to_string(r.join("notes.local")).unwrap(),
        "mine\n"
    );
    assert!(!r.join("__pycache__").exists() && !r.join("target").exists());
}

#[test]
fn an_item_completing_on_its_second_attempt_commits_no_byproduct_of_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let r = repo(&dir.path().join("r"));
    // Attempt 1 leaves the flag that fails the gate; attempt 2 removes it.
    manifest(
        dir.path(),
        "if [ \"$RUNNER_ATTEMPT\" = 1 ]; then touch \"$RUNNER_ITEM.fail\"; else rm -f \"$RUNNER_ITEM.fail\"; echo fix > fix.txt; fi",
        "[{repo: r, id: x, branch: runner/x}]",
        2,
    );
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = latest_report(&dir.path().join("runner-reports"));
    assert_eq!(
        report_item(&report, "id", "x")["attempts"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(files_of(&r, "runner/x"), ["fix.txt"]);
}

#[test]
fn a_halted_items_leftovers_hold_the_workers_files_only() {
    let dir = tempfile::tempdir().unwrap();
    let r = repo(&dir.path().join("r"));
    manifest(
        dir.path(),
        "touch \"$RUNNER_ITEM.fail\"; echo half > half-done.txt",
        "[{repo: r, id: x, branch: runner/x}]",
        1,
    );
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let wt = dir.path().join(".runner/workspace/worktrees/r/x");
    assert!(wt.join("half-done.txt").exists());
    assert!(
        !wt.join("__pycache__").exists(),
        "the gate's bytecode was kept"
    );
    let out = run_in(
        dir.path(),
        &["apply", "m.yaml", "--no-progress", "--rerun", "failed"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = latest_report(&dir.path().join("runner-reports"));
    let patch = report_item(&report, "id", "x")["leftovers"]
        .as_str()
        .unwrap()
        .to_string();
    let text =
        std::fs::read_to_string(dir.path().join("runner-reports/latest").join(patch)).unwrap();
    assert!(
        text.contains("half-done.txt") && text.contains("x.fail"),
        "{text}"
    );
    assert!(
        !text.contains("__pycache__") && !text.contains("target/") && !text.contains("README.md"),
        "{text}"
    );
    let _ = r;
}

/// A checkout as a JavaScript or Rust project has it: `node_modules` and `Cargo.lock` there but
/// ignored, and a gate that needs both.
fn ignored_deps(root: &Path, worktree: &str, worker: &str) -> std::path::PathBuf {
    let r = repo(&root.join("r"));
    common::commit_file(&r, ".gitignore", "node_modules/\nCargo.lock\n");
    std::fs::create_dir_all(r.join("node_modules/dep")).unwrap();
    std::fs::write(r.join("node_modules/dep/index.js"), "module.exports = 1\n").unwrap();
    std::fs::write(r.join("Cargo.lock"), "version = 3\n").unwrap();
    std::fs::write(
        root.join("m.yaml"),
        format!(
            "version: 1\nname: deps\nrepositories: [{{path: r}}]\n{worktree}worker: {{run: {worker:?}}}\ngates: [{{name: test, run: 'test -f node_modules/dep/index.js && test -f Cargo.lock'}}]\nitems: [{{repo: r, id: x, branch: runner/x}}]\n"
        ),
    )
    .unwrap();
    r
}

#[test]
fn plan_names_what_a_worktree_will_lack_and_share_gives_it() {
    let dir = tempfile::tempdir().unwrap();
    let r = ignored_deps(dir.path(), "", "echo work > work.txt");
    let out = run_in(dir.path(), &["plan", "m.yaml"]);
    let err = stderr(&out);
    for p in ["node_modules", "Cargo.lock"] {
        assert!(
            err.contains(&format!("will lack `{p}` (ignored in")),
            "{p}: {err}"
        );
    }
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "the gate lacks them: {}",
        stderr(&out)
    );

    let dir = tempfile::tempdir().unwrap();
    let r2 = ignored_deps(
        dir.path(),
        "worktree: {share: [node_modules, Cargo.lock]}\n",
        "echo work > work.txt",
    );
    let out = run_in(dir.path(), &["plan", "m.yaml"]);
    assert!(!stderr(&out).contains("will lack"), "{}", stderr(&out));
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(files_of(&r2, "runner/x"), ["work.txt"]);
    let report = latest_report(&dir.path().join("runner-reports"));
    assert_eq!(
        report_item(&report, "id", "x")["shared"],
        serde_json::json!(["node_modules", "Cargo.lock"])
    );
    let _ = r;
}

#[test]
fn a_worktree_is_set_up_once_and_a_failed_setup_holds_the_item() {
    let dir = tempfile::tempdir().unwrap();
    let count = dir.path().join("setups");
    ignored_deps(
        dir.path(),
        &format!(
            "worktree: {{setup: 'echo once >> {}; mkdir -p node_modules/dep && touch node_modules/dep/index.js Cargo.lock'}}\n",
            count.display()
        ),
        "touch \"$RUNNER_ITEM.$RUNNER_ATTEMPT\"; exit 1",
    );
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "the worker fails: {err}");
    assert!(err.contains("r/x: worktree setup done"), "{err}");
    let report = latest_report(&dir.path().join("runner-reports"));
    assert_eq!(report_item(&report, "id", "x")["setup"]["ok"], true);
    // The kept worktree was set up already: a rerun does not set it up again.
    let out = run_in(
        dir.path(),
        &["apply", "m.yaml", "--no-progress", "--rerun", "failed"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&count).unwrap(), "once\n");

    let dir = tempfile::tempdir().unwrap();
    ignored_deps(
        dir.path(),
        "worktree: {setup: 'echo \"npm ERR! network\"; exit 3'}\n",
        "true",
    );
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let report = latest_report(&dir.path().join("runner-reports"));
    let x = report_item(&report, "id", "x");
    assert_eq!(x["outcome"], "held", "{x:#}");
    assert_eq!(x["reason"], "environment");
    assert_eq!(x["setup"]["ok"], false);
    assert!(
        x["cause"]
            .as_str()
            .unwrap()
            .contains("the worktree's setup failed (exit code 3): npm ERR! network"),
        "{x:#}"
    );
}

#[test]
fn items_in_worktrees_share_a_build_cache_per_repository() {
    let dir = tempfile::tempdir().unwrap();
    let r = repo(&dir.path().join("r"));
    let seen = dir.path().join("seen");
    std::fs::write(
        dir.path().join("m.yaml"),
        format!(
            "version: 1\nname: cache\ncapacity: {{workers: 1}}\nrepositories: [{{path: r}}]\nworker: {{run: 'echo \"$RUNNER_ITEM ${{{{CARGO_TARGET_DIR:-none}}}}\" >> {}'}}\nitems: [{{repo: r, id: a, branch: runner/a}}, {{repo: r, id: b}}]\n",
            seen.display()
        ),
    )
    .unwrap();
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = std::fs::read_to_string(&seen).unwrap();
    let cache = std::fs::canonicalize(dir.path())
        .unwrap()
        .join(".runner/workspace/cache/target/r");
    assert!(text.contains(&format!("a {}", cache.display())), "{text}");
    assert!(
        text.contains("b none"),
        "an in-place item builds where it is: {text}"
    );
    let _ = r;
}

#[test]
fn an_edit_hidden_behind_assume_unchanged_is_committed() {
    let dir = tempfile::tempdir().unwrap();
    let r = repo(&dir.path().join("r"));
    std::fs::write(
        dir.path().join("m.yaml"),
        "version: 1\nname: hidden\nrepositories: [{path: r}]\nworker: {run: 'git update-index --assume-unchanged README.md && echo edited >> README.md'}\nitems: [{repo: r, id: x, branch: runner/x}]\n",
    )
    .unwrap();
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(files_of(&r, "runner/x"), ["README.md"]);
    assert_eq!(git(&r, &["show", "runner/x:README.md"]), "hello\nedited");
}
