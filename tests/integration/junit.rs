//! `junit.xml`: one testsuite per repository, one testcase per item, read back by a JUnit reader.

use crate::common;

use common::{repo, run_in, stderr};

#[test]
fn junit_has_a_suite_per_repository_and_a_case_per_item() {
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("r"));
    repo(&dir.path().join("s"));
    std::fs::write(
        dir.path().join("m.yaml"),
        r#"version: 1
name: junit
repositories: [{path: r}, {path: s}, {path: missing}]
worker:
  run: 'echo "worked on $RUNNER_ITEM"'
gates:
  - name: test
    run: 'if [ "$RUNNER_ITEM" = bad ]; then echo "assertion failed: 1 == 2 <at> lib.rs:7"; printf "\033[31m\"red\" & it''s \001done\033[0m\n"; exit 1; fi'
items:
  - {repo: r, id: good}
  - {repo: r, id: bad}
  - {repo: s, id: other}
  - {repo: missing, id: gone}
"#,
    )
    .unwrap();
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let xml = std::fs::read_to_string(dir.path().join("runner-reports/latest/junit.xml")).unwrap();
    let report =
        quick_junit::Report::deserialize_from_str(&xml).unwrap_or_else(|e| panic!("{e}: {xml}"));
    let suites: Vec<&str> = report.test_suites.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(suites, ["missing", "r", "s"], "{xml}");
    let r = &report.test_suites[1];
    assert_eq!((r.tests, r.failures), (2, 1), "{xml}");
    let bad = r
        .test_cases
        .iter()
        .find(|c| c.name.as_str() == "bad")
        .unwrap();
    match &bad.status {
        quick_junit::TestCaseStatus::NonSuccess { description, .. } => {
            let d = description.as_ref().map(|d| d.as_str()).unwrap_or_default();
            assert!(
                d.contains("assertion failed: 1 == 2 <at> lib.rs:7"),
                "{xml}"
            );
            // Colour is removed and control characters, which XML forbids, shown escaped;
            // quotes and ampersands are escaped.
            assert!(d.contains("\"red\" & it's \\u{1}done"), "{d:?}");
            assert!(!d.contains("[31m") && !d.contains('\u{1}'), "{d:?}");
        }
        other => panic!("bad is a failure: {other:?}"),
    }
    let gone = &report.test_suites[0].test_cases[0];
    assert!(
        matches!(gone.status, quick_junit::TestCaseStatus::Skipped { .. }),
        "{xml}"
    );
    assert!(xml.contains("&lt;at&gt;"), "text is escaped: {xml}");
}

#[test]
fn in_github_actions_failures_are_annotated_where_their_output_points() {
    let dir = tempfile::tempdir().unwrap();
    let r = repo(&dir.path().join("r"));
    common::commit_file(&r, "src/lib.rs", "fn x() {}\n");
    std::fs::write(
        dir.path().join("m.yaml"),
        r#"version: 1
name: annotate
repositories: [{path: r}, {path: missing}]
worker: {run: "true"}
gates:
  - name: test
    run: 'echo "thread main panicked at src/lib.rs:7:5: boom"; exit 101'
items:
  - {repo: r, id: bad}
  - {repo: missing, id: gone}
"#,
    )
    .unwrap();
    let out = common::runner()
        .current_dir(dir.path())
        .args(["apply", "m.yaml", "--no-progress"])
        .env("GITHUB_ACTIONS", "true")
        .env("GITHUB_WORKSPACE", dir.path())
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("::error title=runner%3A r/bad halted,file=r/src/lib.rs,line=7::"),
        "{err}"
    );
    // The same report, re-rendered from the ledger as JUnit, says the same.
    let again = run_in(
        dir.path(),
        &[
            "report",
            "latest",
            "--manifest",
            "m.yaml",
            "--format",
            "junit",
        ],
    );
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    let written =
        std::fs::read_to_string(dir.path().join("runner-reports/latest/junit.xml")).unwrap();
    assert_eq!(common::stdout(&again).trim_end(), written.trim_end());
}

#[test]
fn report_formats_are_honoured_exactly() {
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("r"));
    std::fs::write(
        dir.path().join("m.yaml"),
        "version: 1\nname: formats\nrepositories: [{path: r}]\nworker: {run: \"true\"}\nreports: {formats: [junit]}\nitems: [{repo: r, id: a}]\n",
    )
    .unwrap();
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let latest = dir.path().join("runner-reports/latest");
    assert!(latest.join("junit.xml").is_file());
    assert!(!latest.join("report.json").exists());
    assert!(!latest.join("summary.md").exists());
    // The ledger still has it all: any format can be rendered again.
    let md = run_in(
        dir.path(),
        &[
            "report",
            "latest",
            "--manifest",
            "m.yaml",
            "--format",
            "markdown",
        ],
    );
    assert_eq!(md.status.code(), Some(0), "{}", stderr(&md));
    assert!(common::stdout(&md).contains("1 completed"));
}
