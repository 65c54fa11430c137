//! Shared resources: a gate that `uses: [browser]` with `resources: {browser: 1}` never overlaps
//! another such gate — within a run and across concurrent runs on the host — while other work
//! runs in parallel; the wait is reported and never counted against the gate's time limit.

use crate::common;

use common::{intervals, repo, runner, stderr};
use std::path::Path;

/// `repos` repositories with one item each; workers sleep 0.3 s in parallel, then the `e2e` gate
/// (`uses: [browser]`, `timeout: 1s`) sleeps 0.6 s, logging start and end in `log`.
fn manifest(root: &Path, name: &str, repos: &[&str], log: &Path) {
    let mut m = format!(
        "version: 1\nname: {name}\ncapacity: {{workers: {}}}\nresources: {{browser: 1}}\nrepositories:\n",
        repos.len()
    );
    for r in repos {
        repo(&root.join(r));
        m.push_str(&format!("  - path: {r}\n"));
    }
    let stamp = |what: &str| {
        format!(
            "echo \"{what} $RUNNER_REPO $RUNNER_ITEM $(date +%s%N)\" >> {}",
            log.display()
        )
    };
    m.push_str(&format!(
        "worker:\n  run: '{}; sleep 0.3; {}'\ngates:\n  - name: e2e\n    uses: [browser]\n    timeout: 1s\n    run: '{}; sleep 0.6; {}'\nitems:\n",
        stamp("start worker"),
        stamp("end worker"),
        stamp("start gate"),
        stamp("end gate"),
    ));
    for r in repos {
        m.push_str(&format!("  - {{repo: {r}, id: t}}\n"));
    }
    std::fs::write(root.join("m.yaml"), m).unwrap();
}

fn of(log: &Path, kind: &str) -> Vec<(String, String, u128, u128)> {
    let text = std::fs::read_to_string(log).unwrap();
    let only: String = text
        .lines()
        .filter(|l| l.split(' ').nth(1) == Some(kind))
        .map(|l| {
            let mut w: Vec<&str> = l.split(' ').collect();
            w.remove(1);
            w.join(" ") + "\n"
        })
        .collect();
    let tmp = log.with_extension(kind);
    std::fs::write(&tmp, only).unwrap();
    intervals(&tmp)
}

fn overlaps(iv: &[(String, String, u128, u128)]) -> bool {
    iv.iter()
        .enumerate()
        .any(|(i, a)| iv.iter().skip(i + 1).any(|b| a.2 < b.3 && b.2 < a.3))
}

fn apply(root: &Path, resources: &Path) -> std::process::Command {
    let mut c = runner();
    c.current_dir(root)
        .args(["apply", "m.yaml", "--no-progress", "--json"])
        .env("RUNNER_RESOURCES_DIR", resources);
    c
}

fn resource_wait_ms(report: &serde_json::Value) -> u64 {
    report["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["waited"]["resources_ms"].as_u64().unwrap_or(0))
        .sum()
}

#[test]
fn a_resource_of_one_is_used_by_one_gate_at_a_time_and_waiting_is_not_its_time() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let log = root.join("times.log");
    manifest(root, "shared", &["a", "b", "c"], &log);
    let out = apply(root, &root.join("locks")).output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("waits for resource `browser`"), "{err}");
    let gates = of(&log, "gate");
    let workers = of(&log, "worker");
    assert_eq!(gates.len(), 3, "{gates:?}");
    assert!(!overlaps(&gates), "one browser gate at a time: {gates:?}");
    assert!(
        overlaps(&workers),
        "other work runs in parallel: {workers:?}"
    );
    // The last gate waited for two others (1.2 s), longer than its 1 s limit, and passed.
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(resource_wait_ms(&report) >= 1500, "{report:#}");
    assert_eq!(report["counts"]["completed"], 3, "{report:#}");
}

#[test]
fn two_concurrent_runs_share_the_hosts_resource() {
    let dir = tempfile::tempdir().unwrap();
    let locks = dir.path().join("locks");
    let log = dir.path().join("times.log");
    let (one, two) = (dir.path().join("one"), dir.path().join("two"));
    std::fs::create_dir_all(&one).unwrap();
    std::fs::create_dir_all(&two).unwrap();
    manifest(&one, "one", &["a", "b"], &log);
    manifest(&two, "two", &["c", "d"], &log);
    let started = [&one, &two].map(|root| {
        apply(root, &locks)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    });
    let [first, second] = started.map(|c| c.wait_with_output().unwrap());
    for out in [&first, &second] {
        assert_eq!(out.status.code(), Some(0), "{}", stderr(out));
    }
    let gates = of(&log, "gate");
    assert_eq!(gates.len(), 4, "{gates:?}");
    assert!(
        !overlaps(&gates),
        "one browser gate on the host at a time: {gates:?}"
    );
    let waited: u64 = [&first, &second]
        .iter()
        .map(|o| resource_wait_ms(&serde_json::from_slice(&o.stdout).unwrap()))
        .sum();
    assert!(waited >= 1000, "the waits are reported: {waited} ms");
}

#[test]
fn a_use_of_an_undeclared_resource_is_a_manifest_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("m.yaml"),
        "version: 1\nname: x\nrepositories: [{path: r}]\nresources: {browser: 1}\nworker: {run: \"true\", uses: [gpu]}\nitems: []\n",
    )
    .unwrap();
    let out = runner()
        .current_dir(dir.path())
        .args(["validate", "m.yaml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("`worker.uses[0]`: `gpu` is not a declared resource")
            && err.contains("declared resources: browser")
            && err.contains("m.yaml:5"),
        "{err}"
    );
}

#[test]
fn status_shows_an_item_waiting_for_a_resource_held_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let locks = root.join("locks");
    let log = root.join("times.log");
    manifest(root, "waits", &["a"], &log);
    // Another holder on the host has the only unit.
    std::fs::create_dir_all(&locks).unwrap();
    let held = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(locks.join("browser.0.lock"))
        .unwrap();
    held.try_lock().unwrap();
    let child = apply(root, &locks)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut status = String::new();
    assert!(
        common::wait_for(20, || {
            status = common::stdout(&common::run_in(root, &["status", "m.yaml"]));
            status.contains("waiting for shared resource `browser` since")
        }),
        "{status}"
    );
    std::thread::sleep(std::time::Duration::from_millis(1200));
    drop(held);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(resource_wait_ms(&report) >= 1000, "{report:#}");
    assert_eq!(
        report["items"][0]["attempts"][0]["gates"][0]["result"],
        "passed"
    );
}
