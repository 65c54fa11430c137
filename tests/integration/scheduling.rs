//! The order a drain starts items in: the repository with the most work left first — by item
//! count without history, by recorded durations with it — and `plan` shows that order.

use crate::common;

use common::{repo, run_in, stderr};
use std::path::Path;

fn starts(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn the_repository_with_the_most_work_starts_first_and_plan_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let log = root.join("starts.log");
    for r in ["light1", "light2", "heavy"] {
        repo(&root.join(r));
    }
    std::fs::write(
        root.join("m.yaml"),
        format!(
            r#"version: 1
name: order
capacity: {{workers: 1}}
repositories: [{{path: light1}}, {{path: light2}}, {{path: heavy}}]
worker:
  run: 'echo "$RUNNER_REPO/$RUNNER_ITEM" >> {log}; case "$RUNNER_ITEM" in slow) sleep 0.4;; esac'
items:
  - {{repo: light1, id: quick}}
  - {{repo: light2, id: slow}}
  - {{repo: heavy, id: h1}}
  - {{repo: heavy, id: h2}}
"#,
            log = log.display()
        ),
    )
    .unwrap();
    // No history: the repository with the most pending items first.
    let plan = run_in(root, &["plan", "m.yaml", "--json"]);
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    let first = plan["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["start"] == 1)
        .unwrap();
    assert_eq!(first["repo"], "heavy", "{plan:#}");
    assert!(plan["expected"].is_null(), "no estimate without history");
    let out = run_in(root, &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let order = starts(&log);
    assert_eq!(order[0], "heavy/h1", "{order:?}");
    // The plan's order is the order the drain used.
    let mut planned: Vec<(u64, String)> = plan["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["start"].as_u64().unwrap(),
                format!(
                    "{}/{}",
                    i["repo"].as_str().unwrap(),
                    i["id"].as_str().unwrap()
                ),
            )
        })
        .collect();
    planned.sort();
    let planned: Vec<String> = planned.into_iter().map(|p| p.1).collect();
    assert_eq!(planned, order);

    // With history: `slow` took longest, so light2 (one slow item) outweighs heavy's two quick
    // ones, and the plan says what the drain should take.
    std::fs::remove_file(&log).unwrap();
    let plan = run_in(root, &["plan", "m.yaml", "--json", "--rerun", "all"]);
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    let slow = plan["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"] == "slow")
        .unwrap();
    assert_eq!(slow["start"], 1, "{plan:#}");
    assert!(slow["estimate_ms"].as_u64().unwrap() >= 400, "{plan:#}");
    let e = &plan["expected"];
    assert!(
        e["makespan_ms"].as_u64().unwrap() >= e["lower_bound_ms"].as_u64().unwrap(),
        "{plan:#}"
    );
    let text = common::stdout(&run_in(root, &["plan", "m.yaml", "--rerun", "all"]));
    assert!(text.contains("expected to take "), "{text}");
    let out = run_in(
        root,
        &["apply", "m.yaml", "--no-progress", "--rerun", "all"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(starts(&log)[0], "light2/slow");
}

/// An item's end hands its host-wide worker slot to the next item at once: a run alone on the
/// host never finds its own slots taken. (Given back and taken again, a slot could be found
/// still locked by a child that had not yet closed its copy of runner's descriptors, and the
/// next item waited for a 100 ms poll: 2,000 short items took 10 times longer.)
#[test]
fn a_run_alone_never_waits_for_its_own_host_slots() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let mut items = String::new();
    for r in 0..15 {
        repo(&root.join(format!("r{r}")));
        for i in 0..20 {
            items.push_str(&format!("  - {{repo: r{r}, id: i{i}}}\n"));
        }
    }
    std::fs::write(
        root.join("m.yaml"),
        format!(
            "version: 1\nname: slots-{}\ncapacity: {{workers: 2}}\nrepositories:\n  - glob: \"r*\"\nworker:\n  run: [\"true\"]\nitems:\n{items}",
            std::process::id()
        ),
    )
    .unwrap();
    let out = run_in(root, &["apply", "m.yaml", "--no-progress", "-vv"]);
    let err = stderr(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        &err[err.len().saturating_sub(2000)..]
    );
    let admissions = err
        .lines()
        .filter(|l| l.contains("admission item="))
        .count();
    assert_eq!(admissions, 300, "every item admitted once");
    let full: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("answer=HostFull"))
        .collect();
    assert!(
        full.is_empty(),
        "{} admissions found the host full: {full:#?}",
        full.len()
    );
}

/// Two overlapping drains of one manifest: while the second's item waits for the repository's
/// lease the first holds, its progress says whose, and `status` lists the wait with the holder.
#[test]
fn an_item_waiting_for_a_lease_says_whose_in_progress_and_status() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    common::repo(&root.join("api"));
    let release = root.join("release");
    std::fs::write(
        root.join("m.yaml"),
        format!(
            "version: 1\nname: overlap\ncapacity: {{workers: 2}}\nrepositories: [{{path: api}}]\nworker:\n  run: 'touch {}/started-{{item}}; while [ ! -e {} ]; do sleep 0.1; done'\nitems: [{{repo: api, id: x}}, {{repo: api, id: y}}]\n",
            root.display(),
            release.display()
        ),
    )
    .unwrap();
    let spawn = |log: &str| {
        common::runner()
            .current_dir(root)
            .args(["apply", "m.yaml", "--no-progress"])
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(root.join(log)).unwrap())
            .spawn()
            .unwrap()
    };
    let mut first = spawn("first.log");
    assert!(common::wait_for(20, || root.join("started-x").exists()));
    let mut second = spawn("second.log");
    let status = || {
        let out = common::runner()
            .current_dir(root)
            .args(["status", "m.yaml", "--json"])
            .output()
            .unwrap();
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap_or_default()
    };
    let mut seen = serde_json::Value::Null;
    let waited = common::wait_for(20, || {
        seen = status();
        seen["waiting_for_lease"]
            .as_array()
            .is_some_and(|w| !w.is_empty())
    });
    std::fs::write(&release, "").unwrap();
    let (a, b) = (first.wait().unwrap(), second.wait().unwrap());
    let first_log = std::fs::read_to_string(root.join("first.log")).unwrap();
    let second_log = std::fs::read_to_string(root.join("second.log")).unwrap();
    assert!(
        waited,
        "status never listed the wait: {seen:#}\n{second_log}"
    );
    let first_run = first_log
        .lines()
        .find_map(|l| l.strip_prefix("runner: run "))
        .and_then(|l| l.split(':').next())
        .unwrap()
        .to_string();
    let w = &seen["waiting_for_lease"][0];
    assert_eq!(w["repo"], "api", "{seen:#}");
    assert_eq!(w["item"], "y", "{seen:#}");
    assert!(
        w["holder"]
            .as_str()
            .unwrap_or_default()
            .contains(&first_run),
        "{seen:#}"
    );
    assert!(
        second_log.lines().any(
            |l| l.contains("api/y waits for its repository's lease, held by")
                && l.contains(&first_run)
        ),
        "{second_log}"
    );
    assert!(a.success() && b.success(), "{first_log}\n{second_log}");
}
