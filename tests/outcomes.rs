//! What runner tells users about outcomes: the stall guard, counts and reasons. The built binary
//! against real repositories and real processes.

mod common;

use common::{latest_report, repo, report_item, run_in, stderr};
use std::path::Path;

/// One repository, items `a`..`d` run one at a time in that order, one attempt each, and the
/// stall guard at 3.
fn stall_fixture(root: &Path) {
    repo(&root.join("r"));
    std::fs::write(
        root.join("m.yaml"),
        r#"version: 1
name: stall
capacity: {workers: 1}
repositories: [{path: r}]
worker: {run: ["true"]}
gates:
  - name: first
    run: 'test "$RUNNER_ITEM" != b && test "$RUNNER_ITEM" != c'
  - name: second
    run: 'test "$RUNNER_ITEM" != a'
stall: {after: 3}
items:
  - {repo: r, id: a}
  - {repo: r, id: b}
  - {repo: r, id: c}
  - {repo: r, id: d}
"#,
    )
    .unwrap();
}

#[test]
fn an_item_that_passed_a_gate_is_progress_and_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    stall_fixture(dir.path());
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    let err = stderr(&out);
    // `a` passed `first` then failed `second`: progress, not the start of a stall; `b` and `c`
    // halt on `first`: two in a row, under the guard's three.
    assert_eq!(out.status.code(), Some(1), "{err}");
    let report = latest_report(&dir.path().join("runner-reports"));
    assert_eq!(report["ending"], "drained", "{report:#}");
    assert_eq!(report_item(&report, "id", "d")["outcome"], "completed");
    for id in ["a", "b", "c"] {
        assert_eq!(report_item(&report, "id", id)["outcome"], "halted");
    }
    assert!(!err.contains("suspect the environment"), "{err}");
}

#[test]
fn a_stall_quotes_a_real_line_of_the_failure_its_halts_share() {
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("r"));
    std::fs::write(
        dir.path().join("m.yaml"),
        r#"version: 1
name: stall
capacity: {workers: 1}
repositories: [{path: r}]
worker: {run: ["true"]}
gates:
  - name: build
    run: 'echo "error: toolchain 1.95 missing at /opt/$RUNNER_ITEM/tc"; exit 1'
stall: {after: 2}
items:
  - {repo: r, id: a}
  - {repo: r, id: b}
  - {repo: r, id: c}
"#,
    )
    .unwrap();
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    let report = latest_report(&dir.path().join("runner-reports"));
    assert_eq!(report["ending"], "stalled");
    let cause = report["cause"].as_str().unwrap();
    assert!(
        cause.contains("all 2 failed at gate `build` with the same failure: `error: toolchain 1.95 missing at /opt/a/tc`"),
        "{cause}"
    );
    assert_eq!(report_item(&report, "id", "c")["outcome"], "cancelled");
}
