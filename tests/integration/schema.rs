//! The checked-in JSON Schema is generated from the Rust types, and the loader accepts exactly
//! the keys the schema describes. Every shipped manifest points at the schema and validates.

use crate::common;

use runner::manifest::load::KEYS_BY_DEFINITION;
use runner::manifest::schema::manifest_schema_json;
use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn checked_in_schema_is_up_to_date() {
    let path = root().join("schemas/manifest.schema.json");
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    let generated = manifest_schema_json();
    if on_disk != generated {
        if std::env::var_os("RUNNER_UPDATE_SCHEMA").is_some() {
            std::fs::write(&path, &generated).unwrap();
        } else {
            panic!(
                "schemas/manifest.schema.json is stale: run `cargo run -- schema > schemas/manifest.schema.json` \
                 (or this test with RUNNER_UPDATE_SCHEMA=1)"
            );
        }
    }
}

/// Every schema of a file runner writes is checked in, as `runner schema --<flag>` prints it.
#[test]
fn checked_in_output_schemas_are_up_to_date() {
    for (file, flag) in [
        ("report", "--report"),
        ("events", "--events"),
        ("plan", "--plan"),
        ("status", "--status"),
        ("matrix", "--matrix"),
        ("items", "--items"),
        ("incident", "--incident"),
    ] {
        let path = root().join(format!("schemas/{file}.schema.json"));
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        let out = common::run_in(root(), &["schema", flag]);
        assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
        let generated = common::stdout(&out);
        let value: serde_json::Value = serde_json::from_str(&generated).unwrap();
        assert_eq!(
            value["$schema"], "https://json-schema.org/draft/2020-12/schema",
            "{file}"
        );
        if on_disk != generated {
            if std::env::var_os("RUNNER_UPDATE_SCHEMA").is_some() {
                std::fs::write(&path, &generated).unwrap();
            } else {
                panic!(
                    "schemas/{file}.schema.json is stale: run `cargo run -- schema {flag} > schemas/{file}.schema.json` (or this test with RUNNER_UPDATE_SCHEMA=1)"
                );
            }
        }
    }
}

#[test]
fn runner_schema_prints_the_checked_in_schema() {
    let out = common::run_in(root(), &["schema"]);
    assert_eq!(out.status.code(), Some(0));
    let on_disk = std::fs::read_to_string(root().join("schemas/manifest.schema.json")).unwrap();
    assert_eq!(common::stdout(&out), on_disk);
}

#[test]
fn loader_keys_match_schema_properties() {
    let schema: serde_json::Value = serde_json::from_str(&manifest_schema_json()).unwrap();
    for (def, keys) in KEYS_BY_DEFINITION {
        let obj = if *def == "Manifest" {
            &schema
        } else {
            &schema["$defs"][*def]
        };
        let props: Vec<&str> = obj["properties"]
            .as_object()
            .unwrap_or_else(|| panic!("no properties for {def}"))
            .keys()
            .map(String::as_str)
            .collect();
        let mut a = props.clone();
        a.sort();
        let mut b = keys.to_vec();
        b.sort();
        assert_eq!(
            a, b,
            "keys of `{def}` differ between the loader and the schema"
        );
        assert_eq!(
            obj["additionalProperties"],
            serde_json::json!(false),
            "{def} must deny unknown keys"
        );
    }
}

fn shipped_manifests() -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for top in ["examples", "manifests"] {
        let mut stack = vec![root().join(top)];
        while let Some(d) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in rd {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|e| e == "yaml" || e == "yml")
                    && std::fs::read_to_string(&p)
                        .is_ok_and(|t| t.contains("\nversion: 1") || t.starts_with("version: 1"))
                {
                    out.push(p);
                }
            }
        }
    }
    out
}

#[test]
fn shipped_manifests_carry_the_schema_line_and_validate() {
    let files = shipped_manifests();
    assert!(
        !files.is_empty(),
        "no manifests under examples/ or manifests/"
    );
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(
            text.lines()
                .next()
                .is_some_and(|l| l.starts_with("# yaml-language-server: $schema=")
                    && l.ends_with("schemas/manifest.schema.json")),
            "{} lacks the yaml-language-server schema line",
            f.display()
        );
        let out = common::run_in(root(), &["validate", f.to_str().unwrap()]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}: {}",
            f.display(),
            common::stderr(&out)
        );
    }
}

/// Write `text` under `dir` as `name`, for the validator.
fn saved(dir: &Path, name: &str, text: &[u8]) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// Repositories and a manifest whose drains give every outcome, hold and gate result:
/// `app/good` completes (`test` passes, `unit` fails only as the base does: forgiven, `lint`
/// fails but is not required, `docs` is skipped by its `paths`); `app/slow` times out its gate,
/// `app/broken`'s worker cannot start and `app/bad` fails its gate, three halts in a row that
/// stall the run, so `app/later` is cancelled; `dirty` is held dirty-tree, `stale` stale-base,
/// `busy` repo-busy, `quar` quarantined, `gone` not found, `zz` filtered.
fn every_kind(root: &Path) {
    use common::{commit_file, git, repo};
    let app = repo(&root.join("app"));
    commit_file(&app, "src/lib.rs", "// lib\n");
    std::fs::write(root.join("noexec"), "#!/bin/sh\nexit 0\n").unwrap();
    let dirty = repo(&root.join("dirty"));
    std::fs::write(dirty.join("README.md"), "an edit nobody committed\n").unwrap();
    let stale = repo(&root.join("stale"));
    git(&stale, &["checkout", "-q", "-b", "side"]);
    let marker = commit_file(&stale, "side.txt", "side\n");
    git(&stale, &["checkout", "-q", "main"]);
    repo(&root.join("busy"));
    repo(&root.join("quar"));
    std::fs::write(
        root.join("quar/.git/runner.quarantine.json"),
        r#"{"run_id":"earlier","reason":"processes of an earlier item could not be proven gone","at":"2026-01-01T00:00:00Z"}"#,
    )
    .unwrap();
    repo(&root.join("zz"));
    std::fs::write(
        root.join("m.yaml"),
        format!(
            r#"version: 1
name: every-kind
capacity: {{workers: 1}}
repositories:
  - {{path: app}}
  - {{path: dirty}}
  - {{path: stale, critical_base: ["{marker}"]}}
  - {{path: busy}}
  - {{path: quar}}
  - {{path: gone}}
  - {{path: zz}}
worker:
  run: ["{{item.exe}}", "-c", 'if [ "$RUNNER_ITEM" = hang ]; then touch "{root}/started"; while [ ! -e "{root}/release" ]; do sleep 0.05; done; fi; echo "$RUNNER_ITEM" > "work-$RUNNER_ITEM.txt"; printf "{{{{\"input_tokens\": 10, \"output_tokens\": 5, \"cost_usd\": 0.01}}}}" > "$RUNNER_USAGE"']
gates:
  - name: test
    timeout: 2s
    run: 'case "$RUNNER_ITEM" in slow) sleep 30;; bad*) echo "assertion failed at src/lib.rs:7"; exit 1;; esac'
  - name: unit
    baseline: true
    run: 'echo "test parse::works ... FAILED"; exit 1'
  - name: lint
    required: false
    run: "false"
  - name: docs
    paths: ["docs/**"]
    run: "true"
stall: {{after: 3}}
items:
  - {{repo: app, id: good, branch: "runner/good", vars: {{exe: sh}}}}
  - {{repo: app, id: slow, branch: "runner/slow", vars: {{exe: sh}}}}
  - {{repo: app, id: broken, branch: "runner/broken", vars: {{exe: ./noexec}}}}
  - {{repo: app, id: bad, branch: "runner/bad", vars: {{exe: sh}}}}
  - {{repo: app, id: later, branch: "runner/later", vars: {{exe: sh}}}}
  - {{repo: dirty, id: in-place, vars: {{exe: sh}}}}
  - {{repo: stale, id: old, branch: "runner/old", vars: {{exe: sh}}}}
  - {{repo: busy, id: waits, vars: {{exe: sh}}}}
  - {{repo: quar, id: fenced, vars: {{exe: sh}}}}
  - {{repo: gone, id: missing, vars: {{exe: sh}}}}
  - {{repo: zz, id: zz-filtered, vars: {{exe: sh}}}}
  - {{repo: zz, id: hang, branch: "runner/hang", vars: {{exe: sh}}}}
"#,
            root = root.display()
        ),
    )
    .unwrap();
}

/// Every file runner writes that has a schema — `report.json`, the event stream, `status
/// --json`, `plan --json` and the CI matrix — validates against it, over drains that between
/// them give every outcome, every hold and every gate result.
#[test]
fn every_file_runner_writes_validates_against_its_schema() {
    if !common::have(
        "Python's jsonschema",
        std::process::Command::new("python3").args(["-c", "import jsonschema"]),
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    every_kind(root);
    let out_dir = root.join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let run = |args: &[&str]| {
        common::runner()
            .current_dir(root)
            .args(args)
            .env("RUNNER_CONTAINMENT", "process-group")
            .output()
            .unwrap()
    };
    let mut plans = vec![saved(
        &out_dir,
        "plan-0.json",
        &run(&["plan", "m.yaml", "--json"]).stdout,
    )];
    let mut matrices = vec![saved(
        &out_dir,
        "matrix-0.json",
        &run(&["plan", "m.yaml", "--shards", "3", "--json"]).stdout,
    )];
    let mut reports = Vec::new();
    let mut events = Vec::new();
    let mut statuses = Vec::new();
    // The newest run's report (a run that ran nothing leaves `latest` where it was).
    let report_of = |n: usize| {
        let p = out_dir.join(format!("report-{n}.json"));
        // Run ids sort by the second they started in: the report written last is the newest.
        let newest = common::run_folders(root)
            .into_iter()
            .map(|f| root.join("runner-reports").join(f).join("report.json"))
            .max_by_key(|r| std::fs::metadata(r).and_then(|m| m.modified()).ok())
            .unwrap();
        std::fs::copy(newest, &p).unwrap();
        p
    };

    // 1: every outcome, the holds a plan and a drain decide, every gate result.
    let busy = common::hold_lease(&root.join("busy"), 30);
    let ev = out_dir.join("events-1.jsonl");
    let out = run(&[
        "apply",
        "m.yaml",
        "--no-progress",
        "--items",
        "[!zh]*",
        "--events",
        ev.to_str().unwrap(),
    ]);
    let err = common::stderr(&out);
    assert_eq!(out.status.code(), Some(3), "the run stalls: {err}");
    let mut busy = busy;
    let _ = busy.kill();
    let _ = busy.wait();
    reports.push(report_of(1));
    events.push(ev);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&reports[0]).unwrap()).unwrap();
    let mut outcomes = std::collections::BTreeSet::new();
    let mut reasons = std::collections::BTreeSet::new();
    let mut gate_results = std::collections::BTreeSet::new();
    for it in report["items"].as_array().unwrap() {
        outcomes.insert(it["outcome"].as_str().unwrap().to_string());
        if let Some(r) = it["reason"].as_str() {
            reasons.insert(r.to_string());
        }
        for a in it["attempts"].as_array().unwrap() {
            for g in a["gates"].as_array().unwrap() {
                gate_results.insert(g["result"].as_str().unwrap().to_string());
            }
        }
    }
    for o in [
        "completed",
        "halted",
        "failed",
        "skipped",
        "held",
        "cancelled",
    ] {
        assert!(outcomes.contains(o), "no `{o}` item: {report:#}");
    }
    for r in [
        "dirty-tree",
        "stale-base",
        "repo-busy",
        "quarantined",
        "repo-not-found",
        "filtered",
    ] {
        assert!(reasons.contains(r), "no `{r}` item: {report:#}");
    }
    for g in ["passed", "failed", "timed-out", "skipped", "not-run"] {
        assert!(gate_results.contains(g), "no `{g}` gate: {report:#}");
    }
    let good = &report["items"][0]["attempts"][0]["gates"];
    assert_eq!(good[1]["forgiven"], true, "{good:#}");
    assert_eq!(good[2]["required"], false, "{good:#}");
    statuses.push(saved(
        &out_dir,
        "status-1.json",
        &run(&["status", "m.yaml", "--json"]).stdout,
    ));
    plans.push(saved(
        &out_dir,
        "plan-1.json",
        &run(&["plan", "m.yaml", "--json"]).stdout,
    ));

    // 2: a verdict reused from the cache, and items done by the earlier run.
    let ev = out_dir.join("events-2.jsonl");
    let out = run(&[
        "apply",
        "m.yaml",
        "--no-progress",
        "--rerun",
        "all",
        "--items",
        "good",
        "--events",
        ev.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    reports.push(report_of(2));
    events.push(ev);
    let text = std::fs::read_to_string(reports.last().unwrap()).unwrap();
    assert!(text.contains("\"cached\""), "{text}");

    // 3: a paused manifest holds what it would run.
    assert_eq!(
        run(&["pause", "m.yaml", "--reason", "maintenance"])
            .status
            .code(),
        Some(0)
    );
    let ev = out_dir.join("events-3.jsonl");
    let out = run(&[
        "apply",
        "m.yaml",
        "--no-progress",
        "--events",
        ev.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", common::stderr(&out));
    reports.push(report_of(3));
    events.push(ev);
    assert!(
        std::fs::read_to_string(reports.last().unwrap())
            .unwrap()
            .contains("\"paused\"")
    );
    statuses.push(saved(
        &out_dir,
        "status-3.json",
        &run(&["status", "m.yaml", "--json"]).stdout,
    ));
    assert_eq!(run(&["resume", "m.yaml"]).status.code(), Some(0));

    // 4: an item another live run works on is taken.
    let mut a = common::runner()
        .current_dir(root)
        .args(["apply", "m.yaml", "--no-progress", "--items", "hang"])
        .env("RUNNER_CONTAINMENT", "process-group")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    assert!(common::wait_for(30, || root.join("started").exists()));
    plans.push(saved(
        &out_dir,
        "plan-4.json",
        &run(&["plan", "m.yaml", "--json"]).stdout,
    ));
    matrices.push(saved(
        &out_dir,
        "matrix-4.json",
        &run(&["plan", "m.yaml", "--shards", "2", "--json"]).stdout,
    ));
    statuses.push(saved(
        &out_dir,
        "status-4.json",
        &run(&["status", "m.yaml", "--json"]).stdout,
    ));
    let ev = out_dir.join("events-4.jsonl");
    let out = run(&[
        "apply",
        "m.yaml",
        "--no-progress",
        "--items",
        "h*",
        "--events",
        ev.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    reports.push(report_of(4));
    events.push(ev);
    assert!(
        std::fs::read_to_string(reports.last().unwrap())
            .unwrap()
            .contains("\"taken\"")
    );
    std::fs::write(root.join("release"), "").unwrap();
    assert_eq!(a.wait().unwrap().code(), Some(0));

    common::validates("report", &reports);
    common::validates("events", &events);
    common::validates("status", &statuses);
    common::validates("plan", &plans);
    common::validates("matrix", &matrices);
}
