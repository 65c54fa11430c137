//! Steering a drain and waiting for the outcome: `pause --wait`, `cancel --wait`.

use crate::common;

use common::{repo, run_in, runner, stderr, wait_for};
use std::path::Path;

/// A manifest whose one item writes `started`, works for `secs`, then writes `finished` with
/// the time it finished (nanoseconds).
fn fixture(root: &Path, secs: &str) {
    repo(&root.join("r"));
    std::fs::write(
        root.join("m.yaml"),
        format!(
            "version: 1\nname: steer\nrepositories: [{{path: r}}]\nworker:\n  run: 'touch {root}/started; sleep {secs}; date +%s%N > {root}/finished'\nitems: [{{repo: r, id: a}}, {{repo: r, id: b}}]\n",
            root = root.display()
        ),
    )
    .unwrap();
}

fn start_apply(root: &Path) -> std::process::Child {
    runner()
        .current_dir(root)
        .args(["apply", "m.yaml", "--no-progress"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

#[test]
fn pause_wait_returns_once_the_running_item_has_finished() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fixture(root, "1.5");
    let mut apply = start_apply(root);
    assert!(wait_for(20, || root.join("started").exists()));
    let out = run_in(
        root,
        &["pause", "m.yaml", "--wait", "--reason", "maintenance"],
    );
    let returned = now_ns();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let finished: u128 = std::fs::read_to_string(root.join("finished"))
        .expect("the running item finished before pause --wait returned")
        .trim()
        .parse()
        .unwrap();
    assert!(finished <= returned, "returned before the item finished");
    // The second item never started: the drain ended paused.
    let status = apply.wait().unwrap();
    assert_eq!(status.code(), Some(1));
    let report = common::latest_report(&root.join("runner-reports"));
    assert_eq!(report["ending"], "paused", "{report:#}");
}

#[test]
fn pause_wait_says_so_when_someone_resumes_first() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fixture(root, "3");
    let mut apply = start_apply(root);
    assert!(wait_for(20, || root.join("started").exists()));
    let waiting = runner()
        .current_dir(root)
        .args(["pause", "m.yaml", "--wait"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let out = run_in(root, &["resume", "m.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = waiting.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("was resumed"), "{}", stderr(&out));
    assert!(
        !root.join("finished").exists(),
        "it did not wait for the item"
    );
    let _ = apply.wait();
}

#[test]
fn pause_wait_times_out_and_stays_paused() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fixture(root, "3");
    let mut apply = start_apply(root);
    assert!(wait_for(20, || root.join("started").exists()));
    let out = run_in(root, &["pause", "m.yaml", "--wait", "--timeout", "300ms"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("r/a"), "{}", stderr(&out));
    let status = common::stdout(&run_in(root, &["status", "m.yaml"]));
    assert!(status.contains("PAUSED"), "{status}");
    let _ = apply.wait();
}

#[test]
fn cancel_wait_returns_with_the_runs_ending() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fixture(root, "30");
    let mut apply = start_apply(root);
    assert!(wait_for(20, || root.join("started").exists()));
    let status = common::stdout(&run_in(root, &["status", "m.yaml", "--json"]));
    let v: serde_json::Value = serde_json::from_str(&status).unwrap();
    let run = v["runs"][0]["id"].as_str().unwrap().to_string();
    let out = run_in(
        root,
        &[
            "cancel",
            &run,
            "--manifest",
            "m.yaml",
            "--wait",
            "--reason",
            "test",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("ended cancelled"), "{}", stderr(&out));
    assert!(apply.try_wait().unwrap().is_some() || apply.wait().is_ok());
    // Who (by uid), with which control, and what it stopped.
    let report = common::latest_report(&root.join("runner-reports"));
    let cause = report["cause"].as_str().unwrap();
    let uid = nix::unistd::getuid();
    assert!(
        cause.contains(&format!("(uid {uid})@"))
            && cause.contains("via `runner cancel` while 1 item ran: r/a: test (SIGTERM)"),
        "{cause}"
    );
}

#[test]
fn the_time_an_item_waited_for_its_lease_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let r = repo(&root.join("r"));
    std::fs::write(
        root.join("m.yaml"),
        "version: 1\nname: waited\nrepositories: [{path: r}]\nworker: {run: \"true\"}\nitems: [{repo: r, id: a}]\n",
    )
    .unwrap();
    let mut holder = common::hold_lease(&r, 2);
    let out = run_in(
        root,
        &[
            "apply",
            "m.yaml",
            "--no-progress",
            "--wait-for-locks",
            "30s",
        ],
    );
    let _ = holder.wait();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = common::latest_report(&root.join("runner-reports"));
    let waited = report["items"][0]["waited"]["lease_ms"].as_u64().unwrap();
    assert!(waited >= 1000, "waited {waited} ms for a lease held 2 s");
}

#[test]
fn apply_loop_drains_until_a_look_finds_no_more_work() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let r = repo(&root.join("r"));
    common::commit_file(&r, "tasks/1.md", "first\n");
    // Each task's work creates the next task, up to the third.
    std::fs::write(
        root.join("m.yaml"),
        "version: 1\nname: loop\nrepositories: [{path: r}]\nworker:\n  run: 'n={item}; if [ \"$n\" -lt 3 ]; then echo next > tasks/$((n+1)).md; fi'\ndiscover:\n  - {glob: \"tasks/*.md\", id: \"{match.stem}\"}\n",
    )
    .unwrap();
    let out = run_in(
        root,
        &[
            "apply",
            "m.yaml",
            "--no-progress",
            "--loop",
            "--max-rounds",
            "10",
        ],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("round 4 found nothing pending; 3 rounds drained"),
        "{err}"
    );
    let runs = std::fs::read_dir(root.join("runner-reports"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name() != "latest" && e.path().is_dir())
        .count();
    assert_eq!(runs, 3, "one report per round");
    // And one summary of the whole loop.
    let summary = |root: &std::path::Path| -> serde_json::Value {
        serde_json::from_str(
            &std::fs::read_to_string(root.join("runner-reports/loop.json")).unwrap(),
        )
        .unwrap()
    };
    let s = summary(root);
    assert_eq!(s["ending"], "drained", "{s:#}");
    assert_eq!(s["rounds"].as_array().unwrap().len(), 3, "{s:#}");
    assert_eq!(s["counts"]["completed"], 3, "{s:#}");
    assert!(
        s["rounds"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["ending"] == "drained" && r["run_id"].is_string())
    );
    // Nothing left: a loop started now drains nothing.
    let out = run_in(root, &["apply", "m.yaml", "--no-progress", "--loop"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("round 1 found nothing pending; 0 rounds drained"));
    assert_eq!(summary(root)["ending"], "nothing-found");
}

#[test]
fn a_stop_signal_is_recorded_with_its_senders_pid_and_program_never_its_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fixture(root, "30");
    let mut apply = start_apply(root);
    assert!(wait_for(20, || root.join("started").exists()));
    // A sender that is still there to be read after its signal arrived.
    let mut sender = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("kill -TERM {}; sleep 5", apply.id()))
        .spawn()
        .unwrap();
    let status = apply.wait().unwrap();
    let _ = sender.kill();
    let _ = sender.wait();
    assert_eq!(status.code(), Some(143));
    let report = common::latest_report(&root.join("runner-reports"));
    let cause = report["cause"].as_str().unwrap();
    assert!(
        cause.starts_with(&format!("cancelled by pid {} (uid ", sender.id()))
            && cause.contains(", program sh")
            && !cause.contains("kill -TERM")
            && cause.ends_with("(SIGTERM)"),
        "{cause}"
    );
    // `status` shows it too.
    let status = common::stdout(&run_in(root, &["status", "m.yaml"]));
    assert!(status.contains(&format!("pid {}", sender.id())), "{status}");
}
