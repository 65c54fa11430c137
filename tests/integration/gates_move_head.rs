//! A gate must judge the work, not change where it stands: HEAD is checked again after the
//! gates as after the worker (on the item's branch, descending from where the item started), so
//! a gate that switches branches fails the attempt, naming what moved, and nothing of the item is
//! committed.

use crate::common;

use common::{git, latest_report, repo, runner, stderr};

#[test]
fn a_gate_that_moves_head_elsewhere_fails_the_attempt_and_nothing_is_committed() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let app = repo(&root.join("app"));
    let before = git(&app, &["rev-parse", "HEAD"]);
    std::fs::write(
        root.join("m.yaml"),
        "version: 1\nname: moves\nrepositories:\n  - path: app\n\
         worker:\n  run: 'echo work > work.txt'\n  attempts: 1\n\
         gates:\n  - name: sneaky\n    run: 'git checkout -q -b elsewhere'\n\
         items:\n  - {repo: app, id: x}\n",
    )
    .unwrap();
    let out = runner()
        .current_dir(root)
        .args(["apply", "m.yaml", "--no-progress"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = latest_report(&root.join("runner-reports"));
    let item = &report["items"][0];
    assert_eq!(item["outcome"], "halted", "{item}");
    let cause = item["cause"].as_str().unwrap();
    assert!(
        cause.starts_with("after the gates: HEAD moved") && cause.contains("elsewhere"),
        "{cause}"
    );
    assert!(item["commit"].is_null(), "{item}");
    // Nothing was committed, on either branch.
    assert_eq!(git(&app, &["rev-parse", "main"]), before);
    assert_eq!(git(&app, &["rev-parse", "elsewhere"]), before);
}
