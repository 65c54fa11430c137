//! The deployment files under `manifests/deploy/` and the `Dockerfile`, checked without a
//! cluster, a Docker engine or GitHub: each is parsed, the fields runner relies on are checked,
//! and the commands they would run are run here, against a real manifest, with the built binary
//! as `runner` — four Kubernetes pods' commands, and the GitHub workflow's plan step then one drain
//! step per matrix entry — and together they must run every item exactly once.

use crate::common;

use runner::manifest::yaml::{self, Value};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A YAML file as JSON (keys as strings).
fn load(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap();
    let node = yaml::parse(&text).unwrap_or_else(|e| panic!("{}: {e:?}", path.display()));
    fn json(v: &Value) -> serde_json::Value {
        match v {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => (*b).into(),
            Value::Int(i) => serde_json::Value::from(*i as i64),
            Value::Float(f) => (*f).into(),
            Value::Str(s) => s.clone().into(),
            Value::Seq(items) => items.iter().map(|n| json(&n.value)).collect(),
            Value::Map(entries) => entries
                .iter()
                .map(|(k, v)| {
                    let key = match &k.value {
                        Value::Str(s) => s.clone(),
                        other => format!("{other:?}"),
                    };
                    (key, json(&v.value))
                })
                .collect::<serde_json::Map<_, _>>()
                .into(),
        }
    }
    json(&node.value)
}

/// A folder holding `runner` (the binary under test) to put first on `PATH`.
fn bin_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_runner"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// 6 repositories of 3 items; the worker logs `repo item` to `ran.log` beside the manifest.
fn fleet(dir: &Path) -> PathBuf {
    let log = dir.join("ran.log");
    let mut m = format!(
        "version: 1\nname: fleet\nrepositories:\n  - glob: \"repos/*\"\nworker:\n  run: 'echo \"$RUNNER_REPO $RUNNER_ITEM\" >> {}'\nitems:\n",
        log.display()
    );
    for r in 0..6 {
        let name = format!("svc-{r}");
        common::repo(&dir.join("repos").join(&name));
        for i in 0..3 {
            m.push_str(&format!("  - {{repo: {name}, id: t{i}}}\n"));
        }
    }
    let path = dir.join("manifest.yaml");
    std::fs::write(&path, m).unwrap();
    path
}

fn every_item_ran_once(dir: &Path) {
    let text = std::fs::read_to_string(dir.join("ran.log")).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let unique: BTreeSet<&str> = lines.iter().copied().collect();
    assert_eq!(lines.len(), 18, "{text}");
    assert_eq!(unique.len(), 18, "{text}");
}

fn sh(script: &str, cwd: &Path, env: &[(&str, String)]) -> std::process::Output {
    let path = format!(
        "{}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("sh")
        .args(["-c", script])
        .current_dir(cwd)
        .env("PATH", path)
        // The items write the test's record beside the manifest, as `common::runner` allows.
        .env("RUNNER_SANDBOX_WRITABLE", std::env::temp_dir())
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script}\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn the_kubernetes_indexed_job_runs_each_shard_once() {
    let job = load(&root().join("manifests/deploy/kubernetes/indexed-job.yaml"));
    assert_eq!(job["apiVersion"], "batch/v1");
    assert_eq!(job["kind"], "Job");
    let spec = &job["spec"];
    assert_eq!(spec["completionMode"], "Indexed");
    let n = spec["completions"].as_i64().unwrap();
    assert_eq!(spec["parallelism"], n, "every shard at once");
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Never");
    assert!(pod["terminationGracePeriodSeconds"].as_i64().unwrap() >= 30);
    let c = &pod["containers"][0];
    let command: Vec<&str> = c["command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(command.last(), Some(&"-c"), "{command:?}");
    let script = c["args"][0].as_str().unwrap();
    assert!(
        script.contains(&format!("--shard \"$JOB_COMPLETION_INDEX/{n}\"")),
        "{script}"
    );
    let mounts: Vec<&str> = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["mountPath"].as_str().unwrap())
        .collect();
    assert!(
        mounts.contains(&"/config") && mounts.contains(&"/data"),
        "{mounts:?}"
    );

    // Each pod's command, here: the ConfigMap's manifest and the pod's volume are folders.
    let dir = tempfile::tempdir().unwrap();
    let manifest = fleet(dir.path());
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let local = script
        .replace("/config/manifest.yaml", &manifest.display().to_string())
        .replace("/data", &data.display().to_string());
    for k in 0..n {
        sh(
            &local,
            dir.path(),
            &[("JOB_COMPLETION_INDEX", k.to_string())],
        );
        assert!(
            data.join(format!("reports-{k}/latest/report.json"))
                .exists()
        );
    }
    every_item_ran_once(dir.path());
}

#[test]
fn the_github_workflow_plans_a_matrix_and_drains_each_entry_once() {
    let wf = load(&root().join("manifests/deploy/github-actions/sharded-drain.yml"));
    let shards: u32 = wf["env"]["SHARDS"].as_i64().unwrap() as u32;
    let plan = &wf["jobs"]["plan"];
    let drain = &wf["jobs"]["drain"];
    assert_eq!(drain["needs"], "plan");
    assert_eq!(
        drain["strategy"]["matrix"],
        "${{ fromJSON(needs.plan.outputs.matrix) }}"
    );
    assert_eq!(drain["strategy"]["fail-fast"], false);
    assert!(drain["if"].as_str().unwrap().contains("pending != '0'"));
    let step = |job: &serde_json::Value, id: &str| -> String {
        job["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id || s["name"].as_str().is_some_and(|n| n.starts_with(id)))
            .and_then(|s| s["run"].as_str())
            .unwrap_or_else(|| panic!("no step {id}"))
            .to_string()
    };
    if !common::have("jq", Command::new("jq").arg("--version")) {
        return;
    }
    let plan_script = step(plan, "shards");
    let drain_script = step(drain, "Drain shard");

    let dir = tempfile::tempdir().unwrap();
    let manifest = fleet(dir.path());
    let output = dir.path().join("github_output");
    std::fs::write(&output, "").unwrap();
    let env = [
        ("MANIFEST", manifest.display().to_string()),
        ("SHARDS", shards.to_string()),
        ("GITHUB_OUTPUT", output.display().to_string()),
    ];
    sh(&plan_script, dir.path(), &env);
    let outputs = std::fs::read_to_string(&output).unwrap();
    let get = |key: &str| {
        outputs
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key} in {outputs}"))
            .to_string()
    };
    assert_eq!(get("pending"), "18");
    let matrix: serde_json::Value = serde_json::from_str(&get("matrix")).unwrap();
    // A GitHub matrix: only `include`, an entry per shard with work.
    assert_eq!(matrix.as_object().unwrap().len(), 1, "{matrix}");
    let include = matrix["include"].as_array().unwrap();
    assert!(!include.is_empty() && include.len() <= shards as usize);
    for (k, entry) in include.iter().enumerate() {
        let script = drain_script
            .replace("${{ matrix.shard }}", entry["shard"].as_str().unwrap())
            .replace("reports", &format!("reports-{k}"));
        assert!(!script.contains("${{"), "{script}");
        sh(&script, dir.path(), &env);
    }
    every_item_ran_once(dir.path());
}

#[test]
fn the_dockerfile_builds_what_the_crate_needs_and_runs_unprivileged() {
    let text = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let stages: Vec<&&str> = lines.iter().filter(|l| l.starts_with("FROM ")).collect();
    assert_eq!(stages.len(), 2, "a build stage and a runtime stage");
    // The toolchain is at least the crate's `rust-version`.
    let cargo = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let wanted = cargo
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .unwrap()
        .trim_matches('"');
    let image = stages[0].split_whitespace().nth(1).unwrap();
    let version = image
        .strip_prefix("rust:")
        .and_then(|v| v.split('-').next())
        .unwrap();
    let parse = |v: &str| -> Vec<u32> { v.split('.').map(|p| p.parse().unwrap()).collect() };
    assert!(parse(version) >= parse(wanted), "{image} < {wanted}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("cargo build --release --locked"))
    );
    // Every top-level folder the sources include a file from is copied into the build.
    let copied: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.strip_prefix("COPY "))
        .filter(|l| !l.starts_with("--from"))
        .flat_map(|l| l.split_whitespace().rev().skip(1))
        .collect();
    for needed in ["Cargo.toml", "Cargo.lock", "src"] {
        assert!(copied.contains(&needed), "{needed} not copied: {copied:?}");
    }
    let mut included = BTreeSet::new();
    for entry in walk(&root().join("src")) {
        let src = std::fs::read_to_string(&entry).unwrap();
        for part in src.split("include_str!(\"").skip(1) {
            let rel = part.split('"').next().unwrap();
            let abs = entry.parent().unwrap().join(rel);
            let abs = std::fs::canonicalize(&abs).unwrap();
            let top = abs
                .strip_prefix(root())
                .unwrap()
                .components()
                .next()
                .unwrap();
            included.insert(top.as_os_str().to_string_lossy().to_string());
        }
    }
    for top in &included {
        assert!(
            copied.contains(&top.as_str()),
            "{top} is included by the sources but not copied"
        );
    }
    // The runtime: git, an unprivileged user, runner as the entry point.
    let runtime = &lines[lines.iter().position(|l| *l == *stages[1]).unwrap()..];
    assert!(
        runtime
            .iter()
            .any(|l| l.contains("install") && l.contains(" git "))
    );
    let user = runtime
        .iter()
        .find_map(|l| l.strip_prefix("USER "))
        .unwrap();
    assert_ne!(user.trim(), "root");
    let entry = runtime
        .iter()
        .find(|l| l.starts_with("ENTRYPOINT"))
        .unwrap();
    assert!(entry.contains("\"runner\""), "{entry}");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out
}
