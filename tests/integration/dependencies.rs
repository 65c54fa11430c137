//! Item dependencies (`after`) on the built binary, with real repositories and workers: an item
//! waits for those it names, is blocked by one that does not complete, runs once one completed
//! in an earlier run; unknown ids and cycles are validation errors; the longest chain starts
//! first.

use crate::common;

use common::forge::item_of as item;
use common::*;
use serde_json::Value;
use std::path::Path;

/// Repositories `names` under `root`, and `m.yaml` with `workers` slots, a worker that logs
/// its start and end (and fails for the item `bad`), and `items`.
fn setup(root: &Path, names: &[&str], workers: u32, items: &str) {
    let log = root.join("times.log");
    let mut m =
        format!("version: 1\nname: deps\ncapacity: {{workers: {workers}}}\nrepositories:\n");
    for n in names {
        repo(&root.join(n));
        m.push_str(&format!("  - path: {n}\n"));
    }
    let worker = format!(
        "echo \"start $RUNNER_REPO $RUNNER_ITEM $(date +%s%N)\" >> {log}; sleep 0.2; echo \"end $RUNNER_REPO $RUNNER_ITEM $(date +%s%N)\" >> {log}; test $RUNNER_ITEM != bad",
        log = log.display()
    );
    m.push_str(&format!(
        "worker:\n  run: {}\nitems:\n{items}",
        serde_json::to_string(&worker).unwrap()
    ));
    std::fs::write(root.join("m.yaml"), m).unwrap();
}

fn plan_json(root: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["plan", "m.yaml", "--json"];
    args.extend(extra);
    let out = run_in(root, &args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

const CHAIN: &str = "  - {repo: api, id: schema, branch: \"w/{item}\"}
  - {repo: api, id: client, branch: \"w/{item}\", after: [schema]}
  - {repo: web, id: page, branch: \"w/{item}\", after: [api/client]}
  - {repo: web, id: bad, branch: \"w/{item}\"}
  - {repo: web, id: after-bad, branch: \"w/{item}\", after: [bad]}
  - {repo: api, id: after-after-bad, branch: \"w/{item}\", after: [web/after-bad]}
";

#[test]
fn items_wait_for_their_dependencies_and_are_blocked_by_one_that_halts() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    setup(root, &["api", "web"], 2, CHAIN);
    // The plan carries the dependencies, and says who waits for what.
    let plan = plan_json(root, &[]);
    let client = item(&plan, "client");
    assert_eq!(client["after"], serde_json::json!(["api/schema"]));
    assert_eq!(client["waiting_on"], serde_json::json!(["api/schema"]));
    assert_eq!(client["state"], "pending");
    assert!(item(&plan, "schema").get("waiting_on").is_none());
    let out = run_in(root, &["plan", "m.yaml"]);
    let text = stdout(&out);
    let row = text.lines().find(|l| l.contains(" page ")).unwrap();
    assert!(
        row.contains("waiting") && row.contains("after api/client"),
        "{text}"
    );

    let out = run_in(root, &["apply", "m.yaml", "--no-progress"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    // Each item started only once what it waits for had ended.
    let iv = intervals(&root.join("times.log"));
    let span = |id: &str| {
        iv.iter()
            .find(|i| i.1 == id)
            .map(|i| (i.2, i.3))
            .unwrap_or_else(|| panic!("{id} did not run: {iv:?}"))
    };
    assert!(span("schema").1 <= span("client").0, "{iv:?}");
    assert!(span("client").1 <= span("page").0, "{iv:?}");
    // `bad` halted: its dependents never ran, held `blocked` naming it, and theirs in turn.
    assert!(
        !iv.iter()
            .any(|i| i.1 == "after-bad" || i.1 == "after-after-bad"),
        "{iv:?}"
    );
    let report = latest_report(&root.join("runner-reports"));
    let held = report_item(&report, "id", "after-bad");
    assert_eq!(held["outcome"], "held");
    assert_eq!(held["reason"], "blocked");
    assert_eq!(
        held["cause"],
        "after `web/bad`, which halted (attempts-exhausted)"
    );
    let next = report_item(&report, "id", "after-after-bad");
    assert_eq!(next["reason"], "blocked");
    assert_eq!(
        next["cause"],
        "after `web/after-bad`, which is held (blocked)"
    );
    assert_eq!(report_item(&report, "id", "page")["outcome"], "completed");

    // The next plan holds them too, from the halted item's record.
    let plan = plan_json(root, &[]);
    let held = item(&plan, "after-bad");
    assert_eq!(held["state"], "held", "{held:#}");
    assert_eq!(held["reason"], "blocked");
    assert!(
        held["detail"]
            .as_str()
            .unwrap()
            .starts_with("after `web/bad`, which did not complete: halted in run"),
        "{held:#}"
    );
    // `--rerun failed` runs the halted item again, and its dependents wait for it.
    let plan = plan_json(root, &["--rerun", "failed"]);
    assert_eq!(item(&plan, "bad")["state"], "pending");
    assert_eq!(
        item(&plan, "after-bad")["waiting_on"],
        serde_json::json!(["web/bad"])
    );
    assert_eq!(
        item(&plan, "after-after-bad")["waiting_on"],
        serde_json::json!(["web/after-bad"])
    );
}

#[test]
fn a_dependency_completed_in_an_earlier_run_lets_its_dependent_run() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    setup(
        root,
        &["api"],
        1,
        "  - {repo: api, id: first}\n  - {repo: api, id: second, after: [first]}\n",
    );
    // Only `first` is selected: `second` cannot run without it.
    let out = run_in(
        root,
        &["apply", "m.yaml", "--no-progress", "--items", "first"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let plan = plan_json(root, &[]);
    let second = item(&plan, "second");
    assert_eq!(second["state"], "pending", "{second:#}");
    assert!(second.get("waiting_on").is_none(), "{second:#}");
    let out = run_in(root, &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let iv = intervals(&root.join("times.log"));
    let ran: Vec<&str> = iv.iter().map(|i| i.1.as_str()).collect();
    assert_eq!(ran, ["first", "second"]);
}

#[test]
fn a_dependency_left_out_by_a_filter_blocks_its_dependent() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    setup(
        root,
        &["api"],
        1,
        "  - {repo: api, id: first}\n  - {repo: api, id: second, after: [first]}\n",
    );
    let plan = plan_json(root, &["--items", "second"]);
    let second = item(&plan, "second");
    assert_eq!(second["state"], "held", "{second:#}");
    assert_eq!(second["reason"], "blocked");
    assert_eq!(
        second["detail"],
        "after `api/first`, which is skipped (filtered)"
    );
}

#[test]
fn unknown_ids_and_cycles_are_validation_errors_naming_the_cycle() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    setup(
        root,
        &["api", "web"],
        1,
        "  - {repo: api, id: a, after: [c]}
  - {repo: api, id: b, after: [a]}
  - {repo: api, id: c, after: [web/d]}
  - {repo: web, id: d, after: [api/b, shema]}
  - {repo: web, id: e, after: [e]}
",
    );
    for cmd in ["validate", "plan", "apply"] {
        let out = run_in(root, &[cmd, "m.yaml"]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{cmd}: {err}");
        assert!(
            err.contains(
                "`items[0].after[0]`: `after` makes a cycle: `api/a` → `api/c` → `web/d` → `api/b` → `api/a`"
            ),
            "{err}"
        );
        assert!(
            err.contains("m.yaml:13:"),
            "the line of the cycle's first step: {err}"
        );
        assert!(
            err.contains("item `web/d` waits for `shema`, which is no item of `items`"),
            "{err}"
        );
        assert!(err.contains("item `web/e` waits for itself"), "{err}");
    }
    // Nothing ran, nothing was written.
    assert!(!root.join("times.log").exists());
    assert!(!root.join("runner-reports").exists());
}

#[test]
fn the_longest_chain_starts_first() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // Four independent items listed first, then a chain of three across repositories.
    let names = ["f0", "f1", "f2", "f3", "c1", "c2", "c3"];
    let items =
        "  - {repo: f0, id: x}\n  - {repo: f1, id: x}\n  - {repo: f2, id: x}\n  - {repo: f3, id: x}
  - {repo: c1, id: head}
  - {repo: c2, id: middle, after: [c1/head]}
  - {repo: c3, id: tail, after: [c2/middle]}
";
    setup(root, &names, 1, items);
    let plan = plan_json(root, &[]);
    assert_eq!(item(&plan, "head")["start"], 1, "{plan:#}");
    let out = run_in(root, &["apply", "m.yaml", "--no-progress"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let first = err
        .lines()
        .find_map(|l| l.strip_prefix("runner: start "))
        .unwrap();
    assert_eq!(first, "c1/head", "{err}");
}
