//! Sharding without a shared database: `apply --shard K/N` runs only the repositories of shard
//! K, and `plan --shards N --json` prints the CI matrix that starts them.

use crate::common;

use common::{latest_report, repo, runner, stderr, stdout};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// 12 repositories of 5 items each; the worker logs `repo item` to `log`.
fn fleet(root: &Path, log: &Path) {
    let mut m = String::from(
        "version: 1\nname: fleet\ncapacity: {workers: 2}\nrepositories:\n  - glob: \"repos/*\"\n",
    );
    m.push_str(&format!(
        "worker:\n  run: 'echo \"$RUNNER_REPO $RUNNER_ITEM\" >> {}'\nitems:\n",
        log.display()
    ));
    for r in 0..12 {
        let name = format!("svc-{r:02}");
        repo(&root.join("repos").join(&name));
        for i in 0..5 {
            m.push_str(&format!("  - {{repo: {name}, id: task-{i}}}\n"));
        }
    }
    std::fs::write(root.join("m.yaml"), m).unwrap();
}

#[test]
fn four_shards_run_every_item_exactly_once_and_the_matrix_says_which() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let log = root.join("ran.log");
    fleet(root, &log);

    let out = runner()
        .current_dir(root)
        .args(["plan", "m.yaml", "--shards", "4", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let matrix: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(matrix["shards"], 4);
    assert_eq!(matrix["pending"], 60);
    let include = matrix["include"].as_array().unwrap();
    let mut planned: BTreeMap<String, String> = BTreeMap::new();
    let mut pending = 0;
    for e in include {
        pending += e["pending"].as_u64().unwrap();
        for r in e["repositories"].as_array().unwrap() {
            let before = planned.insert(
                r.as_str().unwrap().into(),
                e["shard"].as_str().unwrap().into(),
            );
            assert!(before.is_none(), "{r} in two shards");
        }
    }
    assert_eq!(pending, 60);
    assert_eq!(planned.len(), 12);

    // Four machines: each its own ledger and reports, as CI jobs have.
    let mut ran_by: BTreeMap<String, String> = BTreeMap::new();
    for k in 0..4 {
        let shard = format!("{k}/4");
        let before = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .count();
        let out = runner()
            .current_dir(root)
            .args(["apply", "m.yaml", "--no-progress", "--shard", &shard])
            .args([
                "--state",
                &format!("state-{k}.db"),
                "--report-dir",
                &format!("out-{k}"),
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{shard}: {}", stderr(&out));
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        for line in text.lines().skip(before) {
            let repo = line.split(' ').next().unwrap().to_string();
            let other = ran_by.insert(repo.clone(), shard.clone());
            assert!(other.is_none_or(|o| o == shard), "{repo} ran in two shards");
            assert_eq!(
                planned[&repo], shard,
                "{repo} ran where the matrix did not put it"
            );
        }
        // The report counts what was not this shard's as skipped, not as work.
        let report = latest_report(&root.join(format!("out-{k}")));
        let mine = planned.values().filter(|s| **s == shard).count() * 5;
        assert_eq!(report["counts"]["completed"], mine, "{shard}");
        assert_eq!(report["counts"]["skipped"], 60 - mine, "{shard}");
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let unique: BTreeSet<&str> = lines.iter().copied().collect();
    assert_eq!(lines.len(), 60, "every item ran once");
    assert_eq!(unique.len(), 60, "no item ran twice");
}

#[test]
fn a_shard_that_does_not_exist_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fleet(root, &root.join("ran.log"));
    for bad in ["4/4", "1/0", "two/4"] {
        let out = runner()
            .current_dir(root)
            .args(["apply", "m.yaml", "--shard", bad])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}");
        assert!(stderr(&out).contains(bad), "{bad}: {}", stderr(&out));
    }
    assert!(!root.join("ran.log").exists());
}

#[test]
fn a_shard_clones_only_its_own_repositories() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // Which shard a repository falls in hashes its url, a temporary path here: with 16 of them,
    // all in one shard (no split to test) has odds of 1 in 32,768 (with 6 it was 1 in 32).
    let n = 16;
    let mut m = String::from("version: 1\nname: clones\nrepositories:\n");
    for r in 0..n {
        let bare = common::origin(root, &format!("svc-{r}"));
        m.push_str(&format!("  - {{url: {}, name: svc-{r}}}\n", bare.display()));
    }
    m.push_str("worker:\n  run: 'true'\nitems:\n");
    for r in 0..n {
        m.push_str(&format!("  - {{repo: svc-{r}, id: t}}\n"));
    }
    std::fs::write(root.join("m.yaml"), m).unwrap();
    let out = runner()
        .current_dir(root)
        .args(["plan", "m.yaml", "--shards", "2", "--json"])
        .output()
        .unwrap();
    let matrix: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let first = matrix["include"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["shard"] == "0/2")
        .expect("shard 0 has work");
    let mine: BTreeSet<String> = first["repositories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect();
    assert!(!mine.is_empty() && mine.len() < n, "{matrix}");
    let out = runner()
        .current_dir(root)
        .args(["apply", "m.yaml", "--no-progress", "--shard", "0/2"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let cloned: BTreeSet<String> = std::fs::read_dir(root.join(".runner/workspace/repos"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect();
    assert_eq!(cloned, mine, "only the shard's repositories were cloned");
}
