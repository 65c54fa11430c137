//! `apply --events FILE`: every event of the drain as a JSON line, each valid against the
//! checked-in schema, secrets redacted.

use crate::common;

use common::{repo, run_in, stderr};
use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn every_line_of_a_real_runs_events_is_valid_and_no_secret_leaks() {
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("r"));
    repo(&dir.path().join("s"));
    std::fs::write(
        dir.path().join("m.yaml"),
        r#"version: 1
name: events
repositories: [{path: r}, {path: s}]
models: {primary: m1, threshold: 2, backoff: {initial: 10ms, max: 20ms}}
worker:
  run: 'echo "using $EVENTS_API_KEY"; if [ "$RUNNER_ITEM" = bad ] && [ "$RUNNER_ATTEMPT" = 1 ]; then echo "rate limited"; exit 75; fi'
gates:
  - name: test
    run: 'if [ "$RUNNER_ITEM" = bad ]; then echo "failed with $EVENTS_API_KEY"; exit 1; fi'
env:
  pass: [PATH]
  secrets: [EVENTS_API_KEY]
items:
  - {repo: r, id: good}
  - {repo: s, id: bad}
"#,
    )
    .unwrap();
    let secret = "s3cr3t-events-value-42";
    let out = common::runner()
        .current_dir(dir.path())
        .args([
            "apply",
            "m.yaml",
            "--no-progress",
            "--events",
            "events.ndjson",
        ])
        .env("EVENTS_API_KEY", secret)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("schemas/events.schema.json")).unwrap(),
    )
    .unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let text = std::fs::read_to_string(dir.path().join("events.ndjson")).unwrap();
    assert!(!text.contains(secret), "a secret in the event stream");
    let mut kinds = std::collections::BTreeSet::new();
    for (n, line) in text.lines().enumerate() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if let Err(e) = validator.validate(&v) {
            panic!("line {}: {e}: {line}", n + 1);
        }
        assert_eq!(v["seq"], n as u64 + 1, "{line}");
        assert_eq!(v["schema"], "runner.events/v1");
        kinds.insert(v["event"].as_str().unwrap().to_string());
    }
    for k in [
        "run-started",
        "item-started",
        "attempt-started",
        "worker-finished",
        "resting",
        "gate-finished",
        "item-finished",
        "run-ended",
    ] {
        assert!(kinds.contains(k), "no `{k}` event in {kinds:?}");
    }
    // Stdout works too, and refuses to share it with --json.
    let out = run_in(dir.path(), &["apply", "m.yaml", "--events", "-", "--json"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}
