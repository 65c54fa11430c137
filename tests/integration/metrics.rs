//! Metrics a monitoring system reads: `reports.metrics` written after every run and
//! `status M --metrics`, the same text, read back by Prometheus's own Python client's parser.

use crate::common::*;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};

/// The families of `text` as Prometheus's parser reads them: name → (type, [(labels, value)]).
fn parsed(text: &str) -> Value {
    let mut py = Command::new("python3")
        .args([
            "-c",
            "import sys, json\nfrom prometheus_client.parser import text_string_to_metric_families\nout = {}\nfor f in text_string_to_metric_families(sys.stdin.read()):\n    out[f.name] = {'type': f.type, 'samples': [[s.labels, s.value] for s in f.samples]}\nprint(json.dumps(out))",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut py.stdin.take().unwrap(), text.as_bytes()).unwrap();
    let out = py.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the parser refused the metrics: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The value of `family`'s sample whose labels include `labels`.
fn sample(m: &Value, family: &str, labels: &[(&str, &str)]) -> Option<f64> {
    m[family]["samples"].as_array()?.iter().find_map(|s| {
        labels
            .iter()
            .all(|(k, v)| s[0][k] == *v)
            .then(|| s[1].as_f64())
            .flatten()
    })
}

fn metrics_of(root: &Path) -> (Value, String) {
    let out = run_in(root, &["status", "m.yaml", "--metrics"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    (parsed(&text), text)
}

#[test]
fn metrics_are_written_after_every_run_and_read_by_prometheus_parser() {
    if !have(
        "python3 with prometheus_client (pip install prometheus_client)",
        Command::new("python3").args(["-c", "import prometheus_client"]),
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    repo(&root.join("r0"));
    repo(&root.join("r1"));
    // Each item's worker reports it cost $0.25.
    let worker = r#"printf '{{"cost_usd": 0.25}}' > "$RUNNER_USAGE"; test {item} = ok"#;
    std::fs::write(
        root.join("m.yaml"),
        format!(
            "version: 1\nname: monitored\nrepositories: [{{path: r0}}, {{path: r1}}]\nworker:\n  run: {}\nbudget: {{daily_usd: 10}}\nreports: {{metrics: textfile/runner.prom}}\nitems: [{{repo: r0, id: ok}}, {{repo: r1, id: bad}}]\n",
            serde_json::to_string(worker).unwrap()
        ),
    )
    .unwrap();
    // Before the first run: no ledger, nothing ran, nothing is quarantined.
    let (before, _) = metrics_of(root);
    assert_eq!(
        sample(
            &before,
            "runner_quarantined_repositories",
            &[("manifest", "monitored")]
        ),
        Some(0.0),
        "{before:#}"
    );
    assert_eq!(before["runner_runs"]["samples"], serde_json::json!([]));
    let out = run_in(root, &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let file = root.join("textfile/runner.prom");
    let written = std::fs::read_to_string(&file).unwrap();
    let m = parsed(&written);
    let runs = |m: &Value| sample(m, "runner_runs", &[("ending", "drained")]);
    assert_eq!(runs(&m), Some(1.0), "{m:#}");
    assert_eq!(
        sample(&m, "runner_last_run_items", &[("outcome", "completed")]),
        Some(1.0)
    );
    assert_eq!(
        sample(&m, "runner_last_run_items", &[("outcome", "halted")]),
        Some(1.0)
    );
    assert_eq!(sample(&m, "runner_queue_depth", &[]), Some(1.0));
    assert_eq!(
        sample(&m, "runner_spend_cap_usd", &[("window", "daily")]),
        Some(10.0)
    );
    assert_eq!(
        sample(&m, "runner_spend_usd", &[("window", "daily")]),
        Some(0.5)
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let drained = sample(&m, "runner_last_drained_timestamp_seconds", &[]).unwrap();
    assert!((now - drained).abs() < 120.0, "{drained} against {now}");
    assert_eq!(m["runner_runs"]["type"], "gauge");
    // `status --metrics` prints what the file holds.
    let (_, shown) = metrics_of(root);
    assert_eq!(shown, written);
    // After the next run, the file says so (written whole: no temporary file left beside it).
    let out = run_in(
        root,
        &["apply", "m.yaml", "--no-progress", "--rerun", "failed"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let m = parsed(&std::fs::read_to_string(&file).unwrap());
    assert_eq!(runs(&m), Some(2.0), "{m:#}");
    let beside: Vec<_> = std::fs::read_dir(root.join("textfile"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(beside.len(), 1, "{beside:?}");
}

/// A metrics file that cannot be written is never a silent success: the run exits 4.
#[test]
fn metrics_that_cannot_be_written_fail_the_run_loudly() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    repo(&root.join("r0"));
    // A file stands where the folder would be.
    std::fs::write(root.join("textfile"), "").unwrap();
    std::fs::write(
        root.join("m.yaml"),
        "version: 1\nname: monitored\nrepositories: [{path: r0}]\nworker:\n  run: 'true'\nreports: {metrics: textfile/runner.prom}\nitems: [{repo: r0, id: ok}]\n",
    )
    .unwrap();
    let out = run_in(root, &["apply", "m.yaml", "--no-progress"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(err.contains("the metrics were not written to"), "{err}");
}

/// A model its provider refused and a notice no notifier took are in the metrics, as they are in
/// the incidents the ledger keeps.
#[test]
fn a_refused_model_and_an_undelivered_notice_are_in_the_metrics() {
    if !have(
        "python3 with prometheus_client (pip install prometheus_client)",
        Command::new("python3").args(["-c", "import prometheus_client"]),
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    repo(&root.join("api"));
    let worker = r#"if [ "$RUNNER_MODEL" = opus ]; then echo 'Error: 401 invalid x-api-key' >&2; exit 77; fi"#;
    std::fs::write(
        root.join("m.yaml"),
        format!(
            "version: 1\nname: monitored\nrepositories: [{{path: api}}]\nmodels: {{primary: opus, fallbacks: [sonnet]}}\nworker:\n  run: {}\nnotify: {{run: 'echo relay down >&2; exit 1'}}\nreports: {{metrics: runner.prom}}\nitems: [{{repo: api, id: a}}]\n",
            serde_json::to_string(worker).unwrap()
        ),
    )
    .unwrap();
    let (before, _) = metrics_of(root);
    assert_eq!(
        before["runner_model_refused"]["samples"],
        serde_json::json!([])
    );
    assert_eq!(
        sample(&before, "runner_notices_owed", &[("failed", "true")]),
        Some(0.0),
        "{before:#}"
    );
    let out = run_in(root, &["apply", "m.yaml", "--no-progress"]);
    let err = stderr(&out);
    assert!(err.contains("was not delivered"), "{err}");
    let m = parsed(&std::fs::read_to_string(root.join("runner.prom")).unwrap());
    assert_eq!(
        sample(&m, "runner_model_refused", &[("model", "opus")]),
        Some(1.0),
        "{m:#}"
    );
    assert_eq!(
        sample(&m, "runner_notices_owed", &[("failed", "true")]),
        Some(1.0),
        "{m:#}"
    );
}
