//! The state ledger end to end: resume after crashes, exactly-once across processes, report
//! re-rendering, cancel and pause with their provenance.

use crate::common;

use common::*;
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// `repos` repositories with `per` items each; the worker records start/end in `times.log`.
fn setup(root: &Path, repos: usize, per: usize, workers: u32, sleep: &str) {
    let log = root.join("times.log");
    let mut m =
        format!("version: 1\nname: ledger-test\ncapacity: {{workers: {workers}}}\nrepositories:\n");
    for r in 0..repos {
        repo(&root.join(format!("r{r}")));
        m.push_str(&format!("  - path: r{r}\n"));
    }
    let worker = format!(
        "echo \"start $RUNNER_REPO $RUNNER_ITEM $(date +%s%N)\" >> {log}; sleep {sleep}; echo \"end $RUNNER_REPO $RUNNER_ITEM $(date +%s%N)\" >> {log}",
        log = log.display()
    );
    m.push_str(&format!(
        "worker:\n  run: {}\nitems:\n",
        serde_json::to_string(&worker).unwrap()
    ));
    for i in 0..per {
        for r in 0..repos {
            m.push_str(&format!(
                "  - {{repo: r{r}, id: item-{i}, vars: {{v: \"1\"}}}}\n"
            ));
        }
    }
    std::fs::write(root.join("m.yaml"), m).unwrap();
}

/// `apply m.yaml`, waiting for leases another runner holds, with `extra` arguments.
fn apply_args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "apply",
        "m.yaml",
        "--no-progress",
        "--wait-for-locks",
        "120s",
    ];
    args.extend_from_slice(extra);
    args
}

fn spawn_apply(root: &Path, extra: &[&str]) -> Child {
    runner()
        .current_dir(root)
        .args(apply_args(extra))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn apply(root: &Path, extra: &[&str]) -> std::process::Output {
    run_in(root, &apply_args(extra))
}

/// Completion time (ns since the epoch) of every item the ledger records as completed.
fn completions(root: &Path) -> HashMap<(String, String), u128> {
    let db = rusqlite::Connection::open(root.join(".runner/state.db")).unwrap();
    let mut stmt = db
        .prepare("SELECT repo, item, ended_at FROM item_results WHERE outcome = 'completed'")
        .unwrap();
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
            ))
        })
        .unwrap();
    let mut out = HashMap::new();
    for row in rows {
        let (repo, item, at) = row.unwrap();
        let t: jiff::Timestamp = at.parse().unwrap();
        let ns = t.as_nanosecond() as u128;
        let e = out.entry((repo, item)).or_insert(ns);
        *e = (*e).min(ns);
    }
    out
}

fn starts(log: &Path) -> Vec<(String, String, u128)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 4 && f[0] == "start")
                .then(|| (f[1].to_string(), f[2].to_string(), f[3].parse().unwrap()))
        })
        .collect()
}

#[test]
fn a_second_apply_resumes_and_runs_nothing_done() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), 2, 2, 2, "0");
    assert_eq!(apply(dir.path(), &[]).status.code(), Some(0));
    assert_eq!(intervals(&dir.path().join("times.log")).len(), 4);
    let out = apply(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        intervals(&dir.path().join("times.log")).len(),
        4,
        "nothing ran twice"
    );

    // plan shows them done.
    let plan: Value =
        serde_json::from_str(&stdout(&run_in(dir.path(), &["plan", "m.yaml", "--json"]))).unwrap();
    assert_eq!(plan["counts"]["done"], 4);
    assert_eq!(plan["counts"].get("pending"), None);

    // An edited item is new work.
    let m = std::fs::read_to_string(dir.path().join("m.yaml")).unwrap();
    let m = m.replacen(
        "{repo: r0, id: item-0, vars: {v: \"1\"}}",
        "{repo: r0, id: item-0, vars: {v: \"2\"}}",
        1,
    );
    std::fs::write(dir.path().join("m.yaml"), m).unwrap();
    assert_eq!(apply(dir.path(), &[]).status.code(), Some(0));
    assert_eq!(intervals(&dir.path().join("times.log")).len(), 5);

    // --rerun all runs everything again.
    assert_eq!(
        apply(dir.path(), &["--rerun", "all"]).status.code(),
        Some(0)
    );
    assert_eq!(intervals(&dir.path().join("times.log")).len(), 9);
}

#[test]
fn halted_items_run_again_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("r0"));
    let count = dir.path().join("count");
    std::fs::write(
        dir.path().join("m.yaml"),
        format!(
            "version: 1\nname: h\nrepositories: [{{path: r0}}]\nworker: {{run: \"echo x >> {}; exit 1\"}}\nitems: [{{repo: r0, id: bad}}]\n",
            count.display()
        ),
    )
    .unwrap();
    assert_eq!(apply(dir.path(), &[]).status.code(), Some(1));
    assert_eq!(
        apply(dir.path(), &[]).status.code(),
        Some(0),
        "a halted item is not retried by default"
    );
    assert_eq!(std::fs::read_to_string(&count).unwrap().lines().count(), 1);
    assert_eq!(
        apply(dir.path(), &["--rerun", "failed"]).status.code(),
        Some(1)
    );
    assert_eq!(std::fs::read_to_string(&count).unwrap().lines().count(), 2);
}

#[test]
fn four_runners_together_complete_every_item_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), 6, 4, 3, "0.05");
    let children: Vec<Child> = (0..4).map(|_| spawn_apply(dir.path(), &[])).collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(
            matches!(out.status.code(), Some(0) | Some(1)),
            "{:?}",
            out.status
        );
    }
    let iv = intervals(&dir.path().join("times.log"));
    let mut seen: HashMap<(String, String), usize> = HashMap::new();
    for (repo, item, _, _) in &iv {
        *seen.entry((repo.clone(), item.clone())).or_insert(0) += 1;
    }
    assert_eq!(seen.len(), 24, "every item ran");
    assert!(
        seen.values().all(|n| *n == 1),
        "an item ran twice: {seen:?}"
    );
    assert_eq!(repo_overlap(&iv), None);
}

#[test]
fn killed_runners_lose_nothing_and_repeat_nothing_completed() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), 12, 5, 4, "0.15");
    let log = dir.path().join("times.log");
    // Ten kills at different moments: before the first attempt, during attempts, between them.
    let moments_ms = [5u64, 40, 120, 200, 260, 330, 420, 510, 640, 800];
    for ms in moments_ms {
        let mut child = spawn_apply(dir.path(), &[]);
        std::thread::sleep(Duration::from_millis(ms));
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        child.wait().unwrap();
    }
    // Then apply until it ends drained.
    let mut rounds = 0;
    loop {
        rounds += 1;
        let out = apply(dir.path(), &[]);
        let report = latest_report(&dir.path().join("runner-reports"));
        if out.status.code() == Some(0) && report["ending"] == "drained" {
            break;
        }
        assert!(rounds < 10, "did not drain: {}", stderr(&out));
    }
    let done = completions(dir.path());
    assert_eq!(done.len(), 60, "every item completed");
    for (repo, item, t) in starts(&log) {
        if let Some(c) = done.get(&(repo.clone(), item.clone())) {
            assert!(
                t < *c,
                "{repo}/{item} started again after the ledger recorded it completed"
            );
        }
    }
    // Orphans of killed runners finish (their `end` lines are in the log), never beside a run.
    let iv = intervals(&log);
    assert_eq!(repo_overlap(&iv), None);
    assert!(processes_matching("sleep 0.15").is_empty());
}

#[test]
fn the_report_re_rendered_from_the_ledger_equals_the_written_one() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), 2, 2, 2, "0");
    let m = std::fs::read_to_string(dir.path().join("m.yaml")).unwrap();
    // One item without variables, as most are.
    std::fs::write(
        dir.path().join("m.yaml"),
        m.replace(
            "items:",
            "gates:\n  - {name: check, run: \"test $RUNNER_REPO != r1\"}\nitems:",
        )
        .replace(
            "{repo: r0, id: item-0, vars: {v: \"1\"}}",
            "{repo: r0, id: item-0}",
        ),
    )
    .unwrap();
    let out = apply(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let written =
        std::fs::read_to_string(dir.path().join("runner-reports/latest/report.json")).unwrap();
    let run_id = serde_json::from_str::<Value>(&written).unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let out = run_in(dir.path(), &["report", &run_id, "--manifest", "m.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), written);
    let md = run_in(
        dir.path(),
        &[
            "report",
            &run_id,
            "--manifest",
            "m.yaml",
            "--format",
            "markdown",
        ],
    );
    let written_md =
        std::fs::read_to_string(dir.path().join("runner-reports/latest/summary.md")).unwrap();
    assert_eq!(stdout(&md), written_md);
}

#[test]
fn cancel_stops_a_live_run_and_records_who_and_why() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), 2, 3, 2, "3131");
    let child = spawn_apply(dir.path(), &[]);
    assert!(wait_for(20, || starts(&dir.path().join("times.log")).len() >= 2));
    let status: Value = serde_json::from_str(&stdout(&run_in(
        dir.path(),
        &["status", "m.yaml", "--json"],
    )))
    .unwrap();
    let run_id = status["runs"][0]["id"].as_str().unwrap().to_string();
    assert_eq!(status["runs"][0]["status"], "live");
    assert_eq!(status["running"].as_array().unwrap().len(), 2);
    let held: Vec<&Value> = status["leases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["held"] == true)
        .collect();
    assert_eq!(held.len(), 2, "{status}");
    assert!(
        held.iter()
            .all(|l| l["holder"]["run_id"] == run_id.as_str())
    );
    let out = run_in(
        dir.path(),
        &[
            "cancel",
            &run_id,
            "--manifest",
            "m.yaml",
            "--reason",
            "deploy freeze",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143));
    assert!(processes_matching("sleep 3131").is_empty());
    let status: Value = serde_json::from_str(&stdout(&run_in(
        dir.path(),
        &["status", "m.yaml", "--json"],
    )))
    .unwrap();
    let run = &status["runs"][0];
    assert_eq!(run["ending"], "cancelled");
    assert_eq!(run["stop_reason"], "deploy freeze");
    assert!(
        run["cause"].as_str().unwrap().contains("deploy freeze"),
        "{run}"
    );
    assert!(run["stop_requested_by"].as_str().unwrap().contains('@'));
    // Released leases name their last holder; the lock says they are free.
    assert!(
        status["leases"]
            .as_array()
            .unwrap()
            .iter()
            .all(|l| l["held"] == false),
        "{status}"
    );
    let text = stdout(&run_in(dir.path(), &["status", "m.yaml"]));
    assert!(
        text.contains(&format!("free (last held by run {run_id})")),
        "{text}"
    );
}

#[test]
fn an_outside_signal_is_recorded_with_its_sender() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), 1, 2, 1, "3132");
    let child = spawn_apply(dir.path(), &[]);
    assert!(wait_for(20, || !starts(&dir.path().join("times.log")).is_empty()));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert_eq!(child.wait_with_output().unwrap().status.code(), Some(143));
    let status: Value = serde_json::from_str(&stdout(&run_in(
        dir.path(),
        &["status", "m.yaml", "--json"],
    )))
    .unwrap();
    // The signal names its sender: this test's own process.
    let cause = status["runs"][0]["cause"].as_str().unwrap();
    assert!(
        cause.starts_with(&format!("cancelled by pid {} (uid ", std::process::id())),
        "{cause}"
    );
}

#[test]
fn a_signal_senders_arguments_are_never_recorded() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), 1, 2, 1, "3132");
    let child = spawn_apply(dir.path(), &[]);
    assert!(wait_for(20, || !starts(&dir.path().join("times.log")).is_empty()));
    // The sender is a shell whose command line carries a password and a bearer token.
    let sent = std::process::Command::new("bash")
        .args([
            "-c",
            "kill -TERM $1; sleep 2",
            "sender",
            &child.id().to_string(),
            "--db-pass",
            "hunter2pw",
            "Bearer",
            "abcd9tok",
        ])
        .spawn()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    drop(sent);
    assert_eq!(out.status.code(), Some(143));
    let status = stdout(&run_in(dir.path(), &["status", "m.yaml", "--json"]));
    let report = std::fs::read_to_string(
        walk_reports(&dir.path().join("runner-reports")).expect("a report.json"),
    )
    .unwrap();
    for text in [&status, &report] {
        assert!(text.contains(", program "), "{text}");
        for secret in ["hunter2pw", "abcd9tok", "--db-pass"] {
            assert!(!text.contains(secret), "{secret} recorded: {text}");
        }
    }
}

fn walk_reports(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path().join("report.json"))
        .find(|p| p.exists())
}

#[test]
fn pause_lets_running_items_finish_and_holds_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), 1, 4, 1, "1");
    let child = spawn_apply(dir.path(), &[]);
    assert!(wait_for(20, || !starts(&dir.path().join("times.log")).is_empty()));
    let out = run_in(
        dir.path(),
        &["pause", "m.yaml", "--reason", "provider outage"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let report = latest_report(&dir.path().join("runner-reports"));
    assert_eq!(report["ending"], "paused");
    assert_eq!(
        report["counts"]["completed"], 1,
        "the running item finished"
    );
    assert_eq!(report["counts"]["held"], 3);
    assert_eq!(intervals(&dir.path().join("times.log")).len(), 1);

    // A drain started while paused holds every item as `paused`.
    let out = apply(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(1));
    let report = latest_report(&dir.path().join("runner-reports"));
    assert!(
        report["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["outcome"] == "held")
            .all(|i| i["reason"] == "paused")
    );
    let status = stdout(&run_in(dir.path(), &["status", "m.yaml"]));
    assert!(
        status.contains("PAUSED") && status.contains("provider outage"),
        "{status}"
    );

    assert_eq!(
        run_in(dir.path(), &["resume", "m.yaml"]).status.code(),
        Some(0)
    );
    assert_eq!(apply(dir.path(), &[]).status.code(), Some(0));
    assert_eq!(intervals(&dir.path().join("times.log")).len(), 4);
}

#[test]
fn a_corrupt_ledger_is_exit_4_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), 1, 1, 1, "0");
    std::fs::create_dir_all(dir.path().join(".runner")).unwrap();
    std::fs::write(
        dir.path().join(".runner/state.db"),
        "garbage that is not sqlite",
    )
    .unwrap();
    let out = apply(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(stderr(&out).contains("state ledger"), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(dir.path().join(".runner/state.db")).unwrap(),
        "garbage that is not sqlite"
    );
    assert!(!dir.path().join("times.log").exists(), "nothing ran");
    let _ = Command::new("true").status();
}

#[test]
fn a_quarantined_repository_is_held_until_unlocked() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), 2, 1, 2, "0");
    // A pause and its lifting create the ledger.
    for verb in ["pause", "resume"] {
        assert_eq!(run_in(dir.path(), &[verb, "m.yaml"]).status.code(), Some(0));
    }
    let r0 = std::fs::canonicalize(dir.path().join("r0")).unwrap();
    {
        let db = rusqlite::Connection::open(dir.path().join(".runner/state.db")).unwrap();
        db.execute(
            "INSERT INTO quarantines (repo_path, run_id, reason, at) VALUES (?1, 'old-run', 'processes could not be proven gone', '2026-01-01T00:00:00Z')",
            [r0.display().to_string()],
        )
        .unwrap();
    }
    let plan: Value =
        serde_json::from_str(&stdout(&run_in(dir.path(), &["plan", "m.yaml", "--json"]))).unwrap();
    let held: Vec<&Value> = plan["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["reason"] == "quarantined")
        .collect();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0]["repo"], "r0");
    let status = stdout(&run_in(dir.path(), &["status", "m.yaml"]));
    assert!(
        status.contains("processes could not be proven gone"),
        "{status}"
    );

    // While a process holds the lease, unlock refuses.
    let mut holder = hold_lease(&dir.path().join("r0"), 2);
    let out = run_in(dir.path(), &["unlock", "r0", "--manifest", "m.yaml"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    holder.wait().unwrap();

    let out = run_in(dir.path(), &["unlock", "r0", "--manifest", "m.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let plan: Value =
        serde_json::from_str(&stdout(&run_in(dir.path(), &["plan", "m.yaml", "--json"]))).unwrap();
    assert_eq!(plan["counts"]["pending"], 2);
}

#[test]
fn an_empty_ledger_file_is_not_a_new_ledger() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), 1, 1, 1, "0");
    std::fs::create_dir_all(dir.path().join(".runner")).unwrap();
    std::fs::write(dir.path().join(".runner/state.db"), "").unwrap();
    let out = apply(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("the file is empty"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        std::fs::metadata(dir.path().join(".runner/state.db"))
            .unwrap()
            .len(),
        0
    );
    assert!(!dir.path().join("times.log").exists(), "nothing ran");
}

#[test]
fn a_damaged_ledger_is_refused_and_left_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), 2, 3, 2, "0");
    assert_eq!(apply(dir.path(), &[]).status.code(), Some(0));
    let db = dir.path().join(".runner/state.db");
    let mut bytes = std::fs::read(&db).unwrap();
    assert!(bytes.len() > 3 * 4096, "a ledger of a few pages");
    // A page of the item results overwritten with noise.
    let page = bytes.len() / 4096 - 1;
    for b in &mut bytes[page * 4096 + 8..page * 4096 + 4000] {
        *b = 0x5a;
    }
    std::fs::write(&db, &bytes).unwrap();
    let out = apply(dir.path(), &["--rerun", "all"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(stderr(&out).contains("damaged"), "{}", stderr(&out));
    assert_eq!(std::fs::read(&db).unwrap(), bytes, "the ledger was changed");
}

#[test]
fn a_state_path_in_a_missing_folder_is_an_error_not_a_new_tree() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), 1, 1, 1, "0");
    let deep = dir.path().join("no/such/folder/state.db");
    let out = apply(dir.path(), &["--state", deep.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(!dir.path().join("no").exists(), "folders were made");
}

#[test]
fn a_ledger_deleted_during_a_run_stops_it_with_exit_4() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), 1, 3, 1, "0.5");
    let child = runner()
        .current_dir(dir.path())
        .args(apply_args(&[]))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = dir.path().join("times.log");
    assert!(wait_for(20, || std::fs::read_to_string(&log)
        .is_ok_and(|t| t.contains("start"))));
    std::fs::remove_file(dir.path().join(".runner/state.db")).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("deleted or replaced"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_quarantine_lives_with_the_repository_for_every_manifest_and_is_lifted_with_a_record() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), 1, 1, 1, "0");
    let r0 = std::fs::canonicalize(dir.path().join("r0")).unwrap();
    std::fs::write(
        r0.join(".git/runner.quarantine.json"),
        r#"{"run_id": "old-run", "reason": "repository `r0`: processes of an item could not be proven gone", "at": "2026-01-01T00:00:00.000Z"}"#,
    )
    .unwrap();
    // Another manifest, with a ledger of its own, over the same repository.
    let other = dir.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(
        other.join("m.yaml"),
        format!(
            "version: 1\nname: other\nrepositories: [{{path: {}}}]\nworker: {{run: [\"true\"]}}\nitems: [{{repo: r0, id: x}}]\n",
            r0.display()
        ),
    )
    .unwrap();
    for root in [dir.path(), other.as_path()] {
        let plan: Value =
            serde_json::from_str(&stdout(&run_in(root, &["plan", "m.yaml", "--json"]))).unwrap();
        assert_eq!(plan["items"][0]["reason"], "quarantined", "{plan:#}");
    }
    let elsewhere = tempfile::tempdir().unwrap();
    let out = run_in(
        elsewhere.path(),
        &[
            "unlock",
            r0.to_str().unwrap(),
            "--reason",
            "checked by hand",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("quarantine"), "{}", stderr(&out));
    let record: Value =
        serde_json::from_slice(&std::fs::read(r0.join(".git/runner.quarantine.json")).unwrap())
            .unwrap();
    assert_eq!(record["lifted"]["why"], "checked by hand", "{record:#}");
    assert!(record["lifted"]["by"].as_str().unwrap().contains('@'));
    for root in [dir.path(), other.as_path()] {
        let plan: Value =
            serde_json::from_str(&stdout(&run_in(root, &["plan", "m.yaml", "--json"]))).unwrap();
        assert_eq!(plan["items"][0]["state"], "pending", "{plan:#}");
    }
}

#[test]
fn a_manifest_given_where_a_run_id_goes_is_told_how_to_name_the_run() {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path(), 1, 1, 1, "0");
    assert_eq!(apply(dir.path(), &[]).status.code(), Some(0));
    for verb in [&["cancel", "m.yaml"][..], &["report", "m.yaml"][..]] {
        let out = run_in(dir.path(), verb);
        assert_eq!(out.status.code(), Some(2), "{verb:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(
                "`m.yaml` is a file: give a run id (`runner status m.yaml` lists the runs) and `--manifest m.yaml`"
            ),
            "{verb:?}: {}",
            stderr(&out)
        );
    }
}

/// Another process holds the SQLite ledger's write lock while a drain runs: what the run must
/// write then (an item's result) waits for it on the ledger's thread, never on the event loop,
/// so a worker's timeout still ends it on time. (A call made on the loop that waited out the
/// lock, as SQLite's busy timeout would have it, held the other item's kill until the lock
/// went.)
#[test]
fn a_ledger_another_writer_holds_holds_back_no_timer() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let mut m = String::from(
        "version: 1\nname: locked-ledger\ncapacity: {workers: 2}\nrepositories:\n  - path: r0\n  - path: r1\n",
    );
    repo(&root.join("r0"));
    repo(&root.join("r1"));
    let worker = format!(
        "touch {}/started-$RUNNER_REPO; if [ $RUNNER_REPO = r0 ]; then sleep 1; else sleep 30; fi",
        root.display()
    );
    m.push_str(&format!(
        "worker:\n  run: {}\n  timeout: 3s\n  grace: 200ms\nitems:\n  - {{repo: r0, id: quick}}\n  - {{repo: r1, id: slow}}\n",
        serde_json::to_string(&worker).unwrap()
    ));
    std::fs::write(root.join("m.yaml"), m).unwrap();
    let mut child = spawn_apply(root, &[]);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !(root.join("started-r0").exists() && root.join("started-r1").exists()) {
        assert!(
            std::time::Instant::now() < deadline,
            "the items never started"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Held from before the quick item ends (its result is then to be written) until well past
    // the slow one's timeout.
    let other = rusqlite::Connection::open(root.join(".runner/state.db")).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    std::thread::sleep(Duration::from_secs(7));
    other.execute_batch("COMMIT").unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1), "the slow item timed out");
    let report = latest_report(&root.join("runner-reports"));
    assert_eq!(
        report_item(&report, "id", "quick")["outcome"],
        "completed",
        "{report:#}"
    );
    let slow = &report_item(&report, "id", "slow")["attempts"][0]["worker"];
    assert_eq!(slow["class"], "timeout", "{report:#}");
    let took = slow["duration_ms"].as_u64().unwrap();
    assert!(
        took < 5_000,
        "the slow item's 3 s timeout ended it after {took} ms: its kill waited for the ledger"
    );
}
