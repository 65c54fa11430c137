//! Diagnostic logs: `-v`/`-vv`/`-q`, `RUNNER_LOG` and `--log-format json` on the built binary
//! draining real repositories.

use crate::common;

use common::{repo, runner, stderr, stdout};
use std::path::Path;

/// Two repositories with two in-place items each and a gate.
fn fixture(root: &Path) {
    for r in ["a", "b"] {
        repo(&root.join(r));
    }
    std::fs::write(
        root.join("m.yaml"),
        r#"version: 1
name: logs
capacity: {workers: 2}
repositories: [{path: a}, {path: b}]
worker: {run: ["true"]}
gates: [{name: ok, run: ["true"]}]
items:
  - {repo: a, id: one}
  - {repo: a, id: two}
  - {repo: b, id: three}
"#,
    )
    .unwrap();
}

fn apply(root: &Path, flags: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut c = runner();
    c.current_dir(root)
        .args(flags)
        .args(["apply", "m.yaml", "--no-progress"])
        .env_remove("RUNNER_LOG");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // A fresh ledger for the next call.
    let _ = std::fs::remove_dir_all(root.join(".runner"));
    out
}

#[test]
fn by_default_only_the_line_log() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    let err = stderr(&apply(dir.path(), &[], &[]));
    assert!(err.contains("runner: [3/3]"), "{err}");
    assert!(!err.contains("DEBUG") && !err.contains(" INFO "), "{err}");
}

#[test]
fn very_verbose_shows_the_schedulers_and_the_leases_decisions() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    let out = apply(dir.path(), &["-vv"], &[]);
    let err = stderr(&out);
    assert!(stdout(&out).is_empty(), "logs on stdout");
    for want in [
        "runner::engine::drain: admission item=a/one answer=Started",
        "runner::lease: lease taken",
        "results durable: lease released repo=a",
        "item{repo=a item=two}:attempt{n=1",
        "gate finished gate=ok result=\"passed\"",
    ] {
        assert!(err.contains(want), "no `{want}` in:\n{err}");
    }
    // The second item of `a` is admitted only after the first's lease was let go.
    let released = err.find("lease released repo=a").unwrap();
    let second = err.find("admission item=a/two").unwrap();
    assert!(released < second, "{err}");
}

#[test]
fn runner_log_narrows_to_one_module() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    let err = stderr(&apply(
        dir.path(),
        &[],
        &[("RUNNER_LOG", "runner::engine=debug")],
    ));
    assert!(err.contains("runner::engine::drain: admission"), "{err}");
    assert!(!err.contains("runner::lease"), "{err}");
    // An unreadable filter is named, and the run goes on with the flags' level.
    let err = stderr(&apply(dir.path(), &[], &[("RUNNER_LOG", "runner=[{")]));
    assert!(err.contains("warning: `RUNNER_LOG`"), "{err}");
    assert!(err.contains("runner: [3/3]"), "{err}");
}

#[test]
fn json_logs_are_one_object_per_line_with_their_spans() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    let err = stderr(&apply(dir.path(), &["-vv", "--log-format", "json"], &[]));
    let events: Vec<serde_json::Value> = err
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(!events.is_empty(), "{err}");
    let admission = events
        .iter()
        .find(|e| e["fields"]["message"] == "admission")
        .expect("an admission event");
    assert_eq!(admission["level"], "DEBUG");
    assert_eq!(admission["target"], "runner::engine::drain");
    assert_eq!(admission["spans"][0]["name"], "run");
    assert!(admission["timestamp"].as_str().unwrap().contains('T'));
    assert!(
        events
            .iter()
            .any(|e| e["spans"].as_array().is_some_and(|s| s.len() >= 3)),
        "no event inside run, item and attempt spans"
    );
}

#[test]
fn quiet_silences_warnings_too() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    let err = stderr(&apply(dir.path(), &["-qq"], &[("RUNNER_LOG", "")]));
    assert!(!err.contains("DEBUG") && !err.contains("WARN"), "{err}");
}
