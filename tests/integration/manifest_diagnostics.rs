//! The invalid-manifest corpus: every file under `tests/manifests/invalid/` must be rejected by
//! `runner validate` with exit 2, its diagnostics must name the line its `# expect: N` header
//! gives, and the exact output is pinned by a snapshot.

use crate::common;

use common::{run_in, stderr, stdout};
use std::path::Path;

fn corpus_dir() -> &'static Path {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/manifests/invalid"
    ))
}

fn expected_line(path: &Path) -> Option<u64> {
    let bytes = std::fs::read(path).unwrap();
    let text = String::from_utf8_lossy(&bytes);
    let first = text.lines().next()?;
    first.strip_prefix("# expect: ")?.trim().parse().ok()
}

#[test]
fn every_invalid_manifest_is_rejected_at_its_line() {
    let mut files: Vec<_> = std::fs::read_dir(corpus_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 30, "the corpus has {} files", files.len());
    for path in files {
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let out = run_in(corpus_dir(), &["validate", &name]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{name} should exit 2:\n{err}");
        assert!(stdout(&out).is_empty(), "{name}: nothing on stdout");
        assert!(!err.contains("panicked"), "{name} panicked:\n{err}");
        let line = expected_line(&path).unwrap_or_else(|| panic!("{name} lacks `# expect: N`"));
        if line > 0 {
            let marker = format!("[{name}:{line}:");
            assert!(
                err.contains(&marker),
                "{name} should point at line {line}:\n{err}"
            );
        } else {
            assert!(err.contains(&name), "{name} should be named:\n{err}");
        }
        insta::assert_snapshot!(name.trim_end_matches(".yaml").to_string(), err);
    }
}

#[test]
fn every_problem_is_reported_in_one_pass() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("many.yaml"),
        r#"version: 1
name: many
capacity:
  workers: 0
repositories:
  - path: a
  - path: b
    name: a
models:
  primary: m1
  fallbacks: [m2, m1]
worker:
  run: ["agent", "{modle}", "{item.task}"]
  timeout: 30
gates:
  - name: build
    run: make
  - name: build
    run: make
items:
  - repo: nope
    id: x
  - repo: a
    id: y
"#,
    )
    .unwrap();
    let out = run_in(dir.path(), &["validate", "many.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    for (line, what) in [
        (4, "workers: 0"),
        (8, "already declared"),
        (11, "already the primary"),
        (13, "{modle}"),
        (13, "`{item.task}` is not defined by item `a/y`"),
        (14, "no unit"),
        (18, "already defined"),
        (21, "`nope`"),
    ] {
        assert!(err.contains(what), "missing `{what}`:\n{err}");
        assert!(
            err.contains(&format!("[many.yaml:{line}:")),
            "no problem at line {line}:\n{err}"
        );
    }
    assert!(err.contains("has 8 problems"), "{err}");
}

#[test]
fn a_document_over_the_size_limit_is_refused_before_parsing() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::from(
        "version: 1\nname: big\nrepositories: [{path: a}]\nworker: {run: \"true\"}\nitems:\n",
    );
    while text.len() <= 1024 * 1024 {
        text.push_str("  - {repo: a, id: item-with-a-rather-long-identifier-to-fill-space}\n");
    }
    std::fs::write(dir.path().join("big.yaml"), text).unwrap();
    let out = run_in(dir.path(), &["validate", "big.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("the limit is 1048576 bytes"), "{err}");
}

#[test]
fn a_document_with_too_many_nodes_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "version: 1\nname: wide\nrepositories: [{{path: a}}]\nworker: {{run: \"true\"}}\nitems: [{}]\n",
        vec!["0"; 120_000].join(",")
    );
    std::fs::write(dir.path().join("wide.yaml"), text).unwrap();
    let out = run_in(dir.path(), &["validate", "wide.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("more than 100000 nodes"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_missing_manifest_is_a_bad_invocation() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_in(dir.path(), &["validate", "nope.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("cannot read manifest `nope.yaml`"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn an_unknown_runner_role_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = common::runner()
        .current_dir(dir.path())
        .env("RUNNER_ROLE", "supervisor")
        .args(["schema"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("`RUNNER_ROLE` is `supervisor`"));
}
