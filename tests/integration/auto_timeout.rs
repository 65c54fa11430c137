//! `timeout: auto` on a gate: the default until five passing runs of it are recorded, then three
//! times their p95, at least a minute.

use crate::common;

use common::{repo, run_in, stderr};

#[test]
fn an_auto_timeout_comes_from_the_gates_history() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    repo(&root.join("r"));
    std::fs::write(
        root.join("m.yaml"),
        "version: 1\nname: auto\nrepositories: [{path: r}]\nworker: {run: \"true\"}\ngates:\n  - {name: test, timeout: auto, run: 'sleep 0.05'}\n  - {name: lint, timeout: 10s, run: 'true'}\nitems: [{repo: r, id: a}]\n",
    )
    .unwrap();
    let events = root.join("events.jsonl");
    // The limit the gate ran under, from the event stream: seconds.
    let limit_of = |gate: &str| -> u64 {
        let text = std::fs::read_to_string(&events).unwrap();
        let line = text
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .find(|v| v["event"] == "gate-started" && v["gate"] == gate)
            .unwrap_or_else(|| panic!("no gate-started for {gate}: {text}"));
        line["limit"]["secs"].as_u64().unwrap()
    };
    for round in 0..6 {
        // Without the verdict cache, every round runs the gate.
        let mut args = vec!["apply", "m.yaml", "--no-progress", "--no-cache", "--events"];
        args.push(events.to_str().unwrap());
        if round > 0 {
            args.extend(["--rerun", "all"]);
        }
        let out = run_in(root, &args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{err}");
        if round < 5 {
            assert!(
                err.contains(&format!(
                    "gate `test`: timeout auto = 30m, the default, until 5 passing runs are recorded ({round} so far)"
                )),
                "{err}"
            );
        } else {
            assert!(
                err.contains("gate `test`: timeout auto = 1m (p95 ")
                    && err.contains("over 5 passing runs)"),
                "{err}"
            );
        }
        assert!(!err.contains("gate `lint`: timeout auto"), "{err}");
        // The limit the gate actually ran under.
        assert_eq!(
            limit_of("test"),
            if round < 5 { 1800 } else { 60 },
            "round {round}"
        );
        assert_eq!(limit_of("lint"), 10);
    }
    let out = run_in(root, &["validate", "m.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// A verdict reused from the cache did not run the gate: it is no sample of how long the gate
/// takes (counted, its zero would pull a slow gate's limit down to the one-minute floor).
#[test]
fn cached_verdicts_are_not_samples_of_a_gates_duration() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    repo(&root.join("r"));
    std::fs::write(
        root.join("m.yaml"),
        "version: 1\nname: auto\nrepositories: [{path: r}]\nworker: {run: \"true\"}\ngates:\n  - {name: test, timeout: auto, run: 'sleep 0.05'}\nitems: [{repo: r, id: a}]\n",
    )
    .unwrap();
    for round in 0..4 {
        let mut args = vec!["apply", "m.yaml", "--no-progress"];
        if round > 0 {
            args.extend(["--rerun", "all"]);
        }
        let out = run_in(root, &args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(0), "{err}");
        // Round 0 runs the gate; the later rounds reuse its verdict on the same tree.
        let so_far = round.min(1);
        assert!(
            err.contains(&format!(
                "gate `test`: timeout auto = 30m, the default, until 5 passing runs are recorded ({so_far} so far)"
            )),
            "round {round}: {err}"
        );
    }
    let report = common::latest_report(&root.join("runner-reports"));
    let gate = &report["items"][0]["attempts"][0]["gates"][0];
    assert!(
        gate["cached"].is_object(),
        "the last round reused the verdict: {gate}"
    );
}
