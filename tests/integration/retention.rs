//! Retention: `reports.keep` prunes older runs' report folders and their record in the ledger,
//! keeping what decides `done`; `runner gc` does it on demand and is idempotent.

use crate::common;

use common::{repo, run_folders, run_in, stderr, stdout};

fn count(db: &rusqlite::Connection, sql: &str) -> i64 {
    db.query_row(sql, [], |r| r.get(0)).unwrap()
}

#[test]
fn keep_prunes_older_runs_and_keeps_what_done_needs() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    repo(&root.join("r"));
    std::fs::write(
        root.join("m.yaml"),
        r#"version: 1
name: keep
repositories: [{path: r}]
reports: {keep: {runs: 2}}
worker: {run: 'echo "$RUNNER_ITEM $(date +%s%N)" > "w-$RUNNER_ITEM.txt"'}
gates:
  - {name: test, run: 'test "$RUNNER_ITEM" != flaky'}
items:
  - {repo: r, id: good, branch: runner/good}
  - {repo: r, id: flaky, branch: runner/flaky}
"#,
    )
    .unwrap();
    let mut runs = Vec::new();
    for round in 0..4 {
        let args: &[&str] = if round == 0 {
            &["apply", "m.yaml", "--no-progress", "--json"]
        } else {
            &[
                "apply",
                "m.yaml",
                "--no-progress",
                "--json",
                "--rerun",
                "failed",
            ]
        };
        let out = run_in(root, args);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        runs.push(report["run_id"].as_str().unwrap().to_string());
    }
    // Two report folders left: the latest two runs'.
    let mut latest = runs[2..].to_vec();
    latest.sort();
    assert_eq!(run_folders(root), latest);
    let db = rusqlite::Connection::open(root.join(".runner/state.db")).unwrap();
    assert_eq!(
        count(&db, "SELECT count(DISTINCT run_id) FROM events"),
        2,
        "only the kept runs' events stay"
    );
    // The first run's row stays, pruned, because `good`'s completion names it; the middle ones
    // are gone.
    assert_eq!(
        count(&db, "SELECT count(*) FROM runs WHERE pruned_at IS NULL"),
        2
    );
    assert_eq!(count(&db, "SELECT count(*) FROM runs"), 3);
    let results_after_four = count(&db, "SELECT count(*) FROM item_results");

    // Both items are still finished: `good` by its completion in the pruned first run, `flaky`
    // by its halt in a kept one.
    let plan = run_in(root, &["plan", "m.yaml", "--json"]);
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    assert_eq!(plan["counts"]["done"], 2, "{plan:#}");
    let out = run_in(root, &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "nothing pending: {}",
        stderr(&out)
    );

    // On demand, with a tighter window; idempotent: a second look finds nothing more.
    let m = std::fs::read_to_string(root.join("m.yaml")).unwrap();
    std::fs::write(root.join("m.yaml"), m.replace("runs: 2", "runs: 1")).unwrap();
    let out = run_in(root, &["gc", "m.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("pruned 1 run"), "{}", stderr(&out));
    let out = run_in(root, &["gc", "m.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("nothing to remove"),
        "{}",
        stderr(&out)
    );
    assert_eq!(run_folders(root).len(), 1);
    assert!(count(&db, "SELECT count(*) FROM item_results") <= results_after_four + 1);

    // A pruned run's report is gone, and `report` says why.
    let out = run_in(root, &["report", &runs[0], "--manifest", "m.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("was pruned"), "{}", stderr(&out));
    assert!(stdout(&out).is_empty());
    // The history page lists the runs kept.
    let history = std::fs::read_to_string(root.join("runner-reports/index.html")).unwrap();
    let listed = |id: &str| history.contains(&format!("<code>{id}</code>"));
    assert!(!listed(&runs[0]) && !listed(&runs[1]) && !listed(&runs[2]));
}

#[test]
fn a_run_that_ends_after_a_later_one_keeps_its_own_report() {
    // Cron starts a long drain, then a short one over other items; the short one ends first.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    repo(&root.join("a"));
    repo(&root.join("b"));
    std::fs::write(
        root.join("m.yaml"),
        r#"version: 1
name: overlap
repositories: [{path: a}, {path: b}]
reports: {keep: {runs: 1}}
worker: {run: 'if [ "$RUNNER_ITEM" = slow ]; then sleep 2; fi'}
items:
  - {repo: a, id: slow}
  - {repo: b, id: fast}
"#,
    )
    .unwrap();
    let long = common::runner()
        .current_dir(root)
        .args([
            "apply",
            "m.yaml",
            "--no-progress",
            "--items",
            "slow",
            "--json",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(700));
    let out = run_in(
        root,
        &["apply", "m.yaml", "--no-progress", "--items", "fast"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = long.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = report["run_id"].as_str().unwrap();
    // The run that ended last wrote the latest report, and retention left it alone.
    assert!(
        root.join("runner-reports")
            .join(id)
            .join("report.json")
            .is_file(),
        "{:?}",
        run_folders(root)
    );
    assert!(root.join("runner-reports/latest/report.json").is_file());
}

#[test]
fn an_items_earlier_definitions_go_with_the_runs_pruned() {
    // A cron drain whose item changes definition every run (its vars carry the round) must not
    // keep a result, and the run it names, for each definition it ever had; an item that did
    // not change keeps the completion that makes it done.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    repo(&root.join("r"));
    repo(&root.join("s"));
    let write = |round: u32| {
        std::fs::write(
            root.join("m.yaml"),
            format!(
                r#"version: 1
name: churn
repositories: [{{path: r}}, {{path: s}}]
reports: {{keep: {{runs: 2}}}}
worker: {{run: 'echo "$RUNNER_ITEM" >> ../worked.txt'}}
items:
  - {{repo: r, id: nightly, vars: {{round: "{round}"}}}}
  - {{repo: s, id: steady}}
"#
            ),
        )
        .unwrap();
    };
    for round in 0..6 {
        write(round);
        let out = run_in(root, &["apply", "m.yaml", "--no-progress"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    let db = rusqlite::Connection::open(root.join(".runner/state.db")).unwrap();
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM item_results WHERE item = 'nightly'"
        ),
        2,
        "only the kept runs' results of the changing item"
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM runs"),
        3,
        "the 2 kept runs and the one steady's completion names"
    );
    // The unchanged item is still done: it ran once in all.
    let worked = std::fs::read_to_string(root.join("worked.txt")).unwrap();
    assert_eq!(
        worked.lines().filter(|l| *l == "steady").count(),
        1,
        "{worked}"
    );
    assert_eq!(
        worked.lines().filter(|l| *l == "nightly").count(),
        6,
        "{worked}"
    );
    write(6);
    let out = run_in(root, &["plan", "m.yaml", "--json"]);
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let steady = plan["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"] == "steady")
        .unwrap();
    assert_eq!(steady["state"], "done", "{steady:#}");
}
