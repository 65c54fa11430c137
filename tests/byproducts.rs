//! Repositories as users have them: no `.gitignore`, gates that leave bytecode and build output
//! behind and formatters that edit files. What a gate writes never reaches a commit, the next
//! worker pass or a halted item's leftovers, and an in-place item leaves its checkout equal to
//! its commit — without touching the user's own (ignored) files.

mod common;

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
