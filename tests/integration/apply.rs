//! `runner apply` end to end: the built binary, real git repositories, real processes.

use crate::common;

use common::*;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// A worker that records start and end with nanosecond times in `log`, sleeping between.
fn recording_worker(log: &Path, sleep: &str) -> String {
    format!(
        "echo \"start $RUNNER_REPO $RUNNER_ITEM $(date +%s%N)\" >> {log}; sleep {sleep}; echo \"end $RUNNER_REPO $RUNNER_ITEM $(date +%s%N)\" >> {log}",
        log = log.display()
    )
}

/// `repos` repositories `r0..` with `per` explicit items each, and the given worker and extra
/// manifest text.
fn manifest(root: &Path, repos: usize, per: usize, workers: u32, worker: &str, extra: &str) {
    let mut m = format!("version: 1\nname: t\ncapacity: {{workers: {workers}}}\nrepositories:\n");
    for r in 0..repos {
        repo(&root.join(format!("r{r}")));
        m.push_str(&format!("  - path: r{r}\n"));
    }
    m.push_str(&format!(
        "worker:\n  run: {}\n",
        serde_json::to_string(worker).unwrap()
    ));
    m.push_str(extra);
    m.push_str("items:\n");
    for i in 0..per {
        for r in 0..repos {
            m.push_str(&format!("  - {{repo: r{r}, id: item-{i}}}\n"));
        }
    }
    std::fs::write(root.join("m.yaml"), m).unwrap();
}

fn apply(root: &Path, args: &[&str]) -> std::process::Output {
    let mut a = vec!["apply", "m.yaml", "--no-progress"];
    a.extend_from_slice(args);
    run_in(root, &a)
}

#[test]
fn concurrency_never_exceeds_the_bound_nor_overlaps_in_a_repository() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("times.log");
    manifest(dir.path(), 8, 5, 3, &recording_worker(&log, "0.05"), "");
    let out = apply(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let iv = intervals(&log);
    assert_eq!(iv.len(), 40, "every item ran once");
    let max = max_overlap(&iv);
    assert!(max <= 3, "concurrency reached {max}");
    assert_eq!(max, 3, "the pool should fill to its bound");
    assert_eq!(repo_overlap(&iv), None);
    let report = latest_report(&dir.path().join("runner-reports"));
    assert_eq!(report["ending"], "drained");
    assert_eq!(report["counts"]["completed"], 40);
}

#[test]
fn minus_j_lowers_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("times.log");
    manifest(dir.path(), 4, 2, 4, &recording_worker(&log, "0.05"), "");
    let out = apply(dir.path(), &["-j", "1"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(max_overlap(&intervals(&log)), 1);
}

#[test]
fn two_runners_together_never_share_a_repository() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("times.log");
    manifest(dir.path(), 4, 3, 4, &recording_worker(&log, "0.1"), "");
    let spawn = || {
        common::runner()
            .current_dir(dir.path())
            .args([
                "apply",
                "m.yaml",
                "--no-progress",
                "--report-dir",
                "out",
                "--wait-for-locks",
                "60s",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let a = spawn();
    let b = spawn();
    let (oa, ob) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    for o in [&oa, &ob] {
        assert!(
            matches!(o.status.code(), Some(0) | Some(1)),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let iv = intervals(&log);
    assert_eq!(iv.len(), 12, "every item ran exactly once");
    assert_eq!(repo_overlap(&iv), None);
}

/// Drain one item whose only gate runs `gate` and times out after a second, in each mode of
/// containment (a cgroup per item where the machine allows it, and process groups with the
/// token census); every process named by `markers` must be gone afterwards. Returns the last
/// run's report.
fn timed_out_gate_leaves_nothing(gate: &str, grace: &str, markers: &[&str]) -> Value {
    let mut last = Value::Null;
    for mode in ["auto", "process-group"] {
        last = timed_out_gate_leaves_nothing_in(mode, gate, grace, markers);
    }
    last
}

fn timed_out_gate_leaves_nothing_in(
    mode: &str,
    gate: &str,
    grace: &str,
    markers: &[&str],
) -> Value {
    let dir = tempfile::tempdir().unwrap();
    manifest(
        dir.path(),
        1,
        1,
        1,
        "true",
        &format!(
            "gates:\n  - name: slow\n    run: {}\n    timeout: 1s\n    grace: {grace}\n",
            serde_json::to_string(gate).unwrap()
        ),
    );
    let out = runner()
        .current_dir(dir.path())
        .args(["apply", "m.yaml", "--no-progress"])
        .env("RUNNER_CONTAINMENT", mode)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    for marker in markers {
        assert!(
            processes_matching(marker).is_empty(),
            "`{marker}` survived in {mode} mode"
        );
    }
    latest_report(&dir.path().join("runner-reports"))
}

#[test]
fn a_timed_out_gate_leaves_no_process_behind() {
    // One child in the group, one escaped with setsid, one double-forked and detached.
    let report = timed_out_gate_leaves_nothing(
        "sleep 3117 & setsid sleep 3118 & (sh -c 'sleep 3119 &' &) ; sleep 3120",
        "500ms",
        &["sleep 3117", "sleep 3118", "sleep 3119", "sleep 3120"],
    );
    let item = &report["items"][0];
    assert_eq!(item["outcome"], "halted");
    assert_eq!(item["attempts"][0]["gates"][0]["result"], "timed-out");
}

#[test]
fn a_hundred_escaped_processes_are_all_ended() {
    // More escapees than a scan examines on the event loop: the census takes the large path.
    let report = timed_out_gate_leaves_nothing(
        "for i in $(seq 100); do setsid sleep 3143 & done; sleep 3144",
        "200ms",
        &["sleep 3143", "sleep 3144"],
    );
    assert_eq!(report["items"][0]["outcome"], "halted", "{report}");
}

#[test]
fn identical_failures_at_one_gate_stall_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("times.log");
    manifest(
        dir.path(),
        6,
        1,
        1,
        &recording_worker(&log, "0"),
        "gates:\n  - name: test\n    run: \"echo 'cargo: command not found' >&2; exit 127\"\nstall:\n  after: 3\n",
    );
    let out = apply(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert_eq!(intervals(&log).len(), 3, "the rest did not run");
    let report = latest_report(&dir.path().join("runner-reports"));
    assert_eq!(report["ending"], "stalled");
    let cause = report["cause"].as_str().unwrap();
    assert!(
        cause.contains("gate `test`") && cause.contains("command not found"),
        "{cause}"
    );
    assert_eq!(report["counts"]["halted"], 3);
    assert_eq!(report["counts"]["cancelled"], 3);
}

#[test]
fn one_bad_item_among_five_drains_with_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    manifest(
        dir.path(),
        5,
        1,
        1,
        "true",
        "gates:\n  - name: test\n    run: \"test $RUNNER_REPO != r2\"\nstall:\n  after: 2\n",
    );
    let out = apply(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = latest_report(&dir.path().join("runner-reports"));
    assert_eq!(report["ending"], "drained");
    assert_eq!(report["counts"]["completed"], 4);
    assert_eq!(report["counts"]["halted"], 1);
}

#[test]
fn an_empty_queue_is_nothing_found() {
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("r0"));
    std::fs::write(
        dir.path().join("m.yaml"),
        "version: 1\nname: t\nrepositories: [{path: r0}]\nworker: {run: \"true\"}\ndiscover:\n  - {glob: \"nothing/*.md\", id: \"{match.stem}\"}\n",
    )
    .unwrap();
    let out = apply(dir.path(), &["--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["ending"], "nothing-found");
}

#[test]
fn sigint_cancels_ends_every_process_and_still_reports() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("times.log");
    manifest(dir.path(), 3, 2, 2, &recording_worker(&log, "3121"), "");
    let child = common::runner()
        .current_dir(dir.path())
        .args(["apply", "m.yaml", "--no-progress"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    assert!(
        wait_for(20, || intervals_started(&log) >= 2),
        "workers did not start"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        processes_matching("sleep 3121").is_empty(),
        "a worker survived"
    );
    let report = latest_report(&dir.path().join("runner-reports"));
    assert_eq!(report["ending"], "cancelled");
    assert_eq!(report["counts"]["cancelled"], 6);
    assert!(report["cause"].as_str().unwrap().contains("SIGINT"));
}

fn intervals_started(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("start"))
        .count()
}

#[test]
fn a_missing_repository_is_skipped_and_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("here"));
    std::fs::write(
        dir.path().join("m.yaml"),
        "version: 1\nname: t\nrepositories: [{path: here}, {path: gone}]\nworker: {run: \"true\"}\nitems:\n  - {repo: gone, id: a}\n  - {repo: here, id: b}\n",
    )
    .unwrap();
    let out = apply(dir.path(), &[]);
    // The rest of the queue runs; the missing repository fails the run (not `optional`).
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = latest_report(&dir.path().join("runner-reports"));
    let gone = report_item(&report, "repo", "gone");
    assert_eq!(gone["outcome"], "skipped");
    assert_eq!(gone["reason"], "repo-not-found");
    let here = report_item(&report, "repo", "here");
    assert_eq!(here["outcome"], "completed");
}

#[test]
fn workers_see_only_passed_environment_and_runner_variables() {
    let dir = tempfile::tempdir().unwrap();
    let out_file = dir.path().join("env.txt");
    manifest(
        dir.path(),
        1,
        1,
        1,
        &format!("env > {}", out_file.display()),
        "env:\n  pass: [PATH]\n  secrets: [MY_API_SECRET]\n",
    );
    let out = common::runner()
        .current_dir(dir.path())
        .args(["apply", "m.yaml", "--no-progress"])
        .env("LEAKY_VARIABLE", "should-not-pass")
        .env("MY_API_SECRET", "hunter2-very-secret")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let env = std::fs::read_to_string(&out_file).unwrap();
    assert!(!env.contains("LEAKY_VARIABLE"), "{env}");
    for var in [
        "RUNNER_RUN_ID=",
        "RUNNER_REPO=r0",
        "RUNNER_ITEM=item-0",
        "RUNNER_ROLE=worker",
        "RUNNER_ATTEMPT=1",
        "RUNNER_TOKEN=",
        "PATH=",
    ] {
        assert!(env.contains(var), "missing {var}: {env}");
    }
    assert!(
        env.contains("MY_API_SECRET=hunter2-very-secret"),
        "secrets are passed through"
    );
}

#[test]
fn secrets_are_redacted_from_logs_and_reports() {
    let dir = tempfile::tempdir().unwrap();
    manifest(
        dir.path(),
        1,
        1,
        1,
        "echo \"using $DEPLOY_TOKEN now\"; printf 'ci:%s' \"$DEPLOY_TOKEN\" | base64; printf %s \"$DEPLOY_TOKEN\" | base64 -w 8; printf %s \"$DEPLOY_TOKEN\" | od -An -tx1 -w4",
        "env:\n  pass: [PATH, DEPLOY_TOKEN]\ngates:\n  - name: leak\n    run: \"echo token is $DEPLOY_TOKEN; exit 1\"\n",
    );
    let out = common::runner()
        .current_dir(dir.path())
        .args(["apply", "m.yaml", "--no-progress"])
        .env("DEPLOY_TOKEN", "tok-0123456789")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let reports = dir.path().join("runner-reports");
    let mut seen = 0;
    let mut stack = vec![reports.join("latest/")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let text = std::fs::read_to_string(&p).unwrap();
                // Neither as is nor base64-encoded (`ci:tok-0123456789` is
                // `Y2k6dG9rLTAxMjM0NTY3ODk=`; its characters that depend on the secret alone are
                // `dG9rLTAxMjM0NTY3OD`).
                assert!(
                    !text.contains("tok-0123456789") && !text.contains("dG9rLTAxMjM0NTY3OD"),
                    "{} leaks the secret",
                    p.display()
                );
                seen += 1;
            }
        }
    }
    assert!(seen >= 3, "reports and logs were written");
    let worker_log =
        std::fs::read_to_string(reports.join("latest/logs/r0/item-0/1-worker.log")).unwrap();
    // Wrapped over lines too (`dG9rLTAx` `MjM0NTY3` `ODk=`; ` 74 6f 6b 2d` ` 30 31 32 33` ...):
    // where the secret begins it is replaced, the rest of it is taken out of its lines.
    assert_eq!(
        worker_log,
        "using *** now\nY2k6***k=\n***\n\nk=\n ***\n\n\n\n"
    );
}

/// Feedback that cannot be written (here a folder stands where the file goes) is said on stderr;
/// the next attempt runs without `RUNNER_FEEDBACK`, as it would on a full disk.
#[test]
fn feedback_that_cannot_be_written_is_said() {
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("seen.txt");
    manifest(
        dir.path(),
        1,
        1,
        1,
        &format!(
            "echo \"attempt $RUNNER_ATTEMPT feedback=[$RUNNER_FEEDBACK]\" >> {}; mkdir -p \"{}/runner-reports/$RUNNER_RUN_ID/logs/$RUNNER_REPO/$RUNNER_ITEM/$RUNNER_ATTEMPT-feedback.txt\"; exit 1",
            seen.display(),
            dir.path().display()
        ),
        "",
    );
    let m = std::fs::read_to_string(dir.path().join("m.yaml")).unwrap();
    std::fs::write(
        dir.path().join("m.yaml"),
        m.replace("worker:\n", "worker:\n  attempts: 2\n"),
    )
    .unwrap();
    let out = apply(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("r0/item-0: the next attempt gets no feedback: cannot write"),
        "{err}"
    );
    let seen = std::fs::read_to_string(&seen).unwrap();
    assert_eq!(seen, "attempt 1 feedback=[]\nattempt 2 feedback=[]\n");
}

#[test]
fn a_failing_gate_feeds_the_next_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("feedback.txt");
    manifest(
        dir.path(),
        1,
        1,
        1,
        &format!(
            "if [ -n \"$RUNNER_FEEDBACK\" ]; then cat \"$RUNNER_FEEDBACK\" > {}; touch fixed; fi",
            seen.display()
        ),
        "  attempts: 2\ngates:\n  - name: check\n    run: \"test -f fixed || {{ echo 'missing the fix'; exit 1; }}\"\n",
    );
    // `attempts` belongs to the worker: move it there.
    let m = std::fs::read_to_string(dir.path().join("m.yaml")).unwrap();
    let m = m
        .replace("  attempts: 2\ngates:", "gates:")
        .replace("worker:\n", "worker:\n  attempts: 2\n");
    std::fs::write(dir.path().join("m.yaml"), m).unwrap();
    std::fs::write(dir.path().join("r0/.gitignore"), "fixed\n").unwrap();
    git(&dir.path().join("r0"), &["add", "."]);
    git(&dir.path().join("r0"), &["commit", "-qm", "ignore"]);
    let out = apply(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let fb = std::fs::read_to_string(&seen).unwrap();
    assert!(fb.contains("missing the fix"), "{fb}");
    let report = latest_report(&dir.path().join("runner-reports"));
    assert_eq!(report["items"][0]["attempts"].as_array().unwrap().len(), 2);
}

#[test]
fn gates_with_paths_are_skipped_when_nothing_matching_changed() {
    let dir = tempfile::tempdir().unwrap();
    manifest(
        dir.path(),
        1,
        1,
        1,
        "echo hi > notes.txt",
        "gates:\n  - name: rust\n    run: \"false\"\n    paths: [\"src/**\"]\n  - name: any\n    run: \"true\"\n",
    );
    std::fs::write(dir.path().join("r0/.gitignore"), "notes.txt\n").unwrap();
    git(&dir.path().join("r0"), &["add", "."]);
    git(&dir.path().join("r0"), &["commit", "-qm", "ignore"]);
    let out = apply(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = latest_report(&dir.path().join("runner-reports"));
    let gates = &report["items"][0]["attempts"][0]["gates"];
    assert_eq!(gates[0]["result"], "skipped");
    assert_eq!(gates[1]["result"], "passed");
}

#[test]
fn a_worker_past_its_timeout_is_ended_with_its_group() {
    let dir = tempfile::tempdir().unwrap();
    manifest(dir.path(), 1, 1, 1, "sleep 3122 & sleep 3123", "");
    let m = std::fs::read_to_string(dir.path().join("m.yaml")).unwrap();
    std::fs::write(
        dir.path().join("m.yaml"),
        m.replace("worker:\n", "worker:\n  timeout: 1s\n  grace: 200ms\n"),
    )
    .unwrap();
    let out = apply(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(processes_matching("sleep 3122").is_empty());
    assert!(processes_matching("sleep 3123").is_empty());
    let report = latest_report(&dir.path().join("runner-reports"));
    assert_eq!(
        report["items"][0]["attempts"][0]["worker"]["class"],
        "timeout"
    );
}

#[test]
fn the_shipped_example_drains() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let ex = dir.path().join("quickstart");
    let status = Command::new("cp")
        .args([
            "-r",
            root.join("examples/quickstart").to_str().unwrap(),
            ex.to_str().unwrap(),
        ])
        .status()
        .unwrap();
    assert!(status.success());
    let _ = std::fs::remove_dir_all(ex.join(".runner"));
    let _ = std::fs::remove_dir_all(ex.join("runner-reports"));
    let out = run_in(
        dir.path(),
        &["apply", "quickstart/manifest.yaml", "--no-progress"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = latest_report(&ex.join("runner-reports"));
    assert_eq!(report["counts"]["completed"], 6);
    let log = git(
        &ex.join(".runner/workspace/repos/greeter"),
        &["log", "--format=%s", "runner/add-greeting"],
    );
    assert!(log.starts_with("runner: add-greeting"), "{log}");
}

#[test]
fn a_repository_leased_elsewhere_is_held_or_waited_for() {
    let dir = tempfile::tempdir().unwrap();
    manifest(dir.path(), 2, 1, 2, "true", "");
    let mut holder = hold_lease(&dir.path().join("r0"), 2);
    let out = apply(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = latest_report(&dir.path().join("runner-reports"));
    let r0 = report_item(&report, "repo", "r0");
    assert_eq!(r0["outcome"], "held");
    assert_eq!(r0["reason"], "repo-busy");
    assert_eq!(report_item(&report, "repo", "r1")["outcome"], "completed");

    holder.wait().unwrap();

    // While one repository waits for its lease, the others go on: all of r1 drains while r0's
    // lease is still held elsewhere (it is held until r1 is done), and r0 runs once it is free.
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("times.log");
    manifest(dir.path(), 2, 3, 2, &recording_worker(&log, "0"), "");
    let mut holder = hold_lease(&dir.path().join("r0"), 120);
    let mut child = common::runner()
        .current_dir(dir.path())
        .args([
            "apply",
            "m.yaml",
            "--no-progress",
            "--wait-for-locks",
            "120s",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let others_done = wait_for(60, || {
        intervals(&log).iter().filter(|i| i.0 == "r1").count() == 3
    });
    assert!(others_done, "r1 did not drain while r0 was waited for");
    assert!(holder.try_wait().unwrap().is_none(), "the lease was let go");
    assert!(
        !std::fs::read_to_string(&log).unwrap().contains("start r0"),
        "r0 started while another process held its lease"
    );
    release_lease(holder);
    assert_eq!(child.wait().unwrap().code(), Some(0));
    assert_eq!(intervals(&log).len(), 6);
}

/// End a [`hold_lease`] holder and the command that holds the lock with it.
fn release_lease(mut holder: std::process::Child) {
    let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", holder.id()))
        .unwrap_or_default();
    for pid in children.split_whitespace() {
        let _ = std::process::Command::new("kill").arg(pid).status();
    }
    let _ = holder.kill();
    holder.wait().unwrap();
}

#[test]
fn a_nested_runner_may_not_leave_its_parents_repository() {
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("outside"));
    std::fs::write(
        dir.path().join("inner.yaml"),
        "version: 1\nname: inner\nrepositories: [{path: outside}]\nworker: {run: \"true\"}\nitems: [{repo: outside, id: x}]\n",
    )
    .unwrap();
    let bin = env!("CARGO_BIN_EXE_runner");
    let result = dir.path().join("nested-exit.txt");
    manifest(
        dir.path(),
        1,
        1,
        1,
        &format!(
            "{bin} apply {} --no-progress --state \"$TMPDIR/inner.db\"; echo $? > {}",
            dir.path().join("inner.yaml").display(),
            result.display()
        ),
        "",
    );
    let out = apply(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&result).unwrap().trim(), "2");
}

#[test]
fn a_nested_runner_reenters_its_parents_lease() {
    // The parent's worker runs another manifest's drain in the same repository: it works under
    // the lease its parent holds instead of waiting for it (with `--wait-for-locks`, forever).
    // In the checkout itself: a work branch it made would change the repository's shared git
    // state under its parent's item, which quarantines the repository. With a ledger of its
    // own: its parent's is hidden from items.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("inner.yaml"),
        "version: 1\nname: inner\nrepositories: [{path: r0}]\nworker: {run: \"echo nested > nested.txt\"}\nitems: [{repo: r0, id: x}]\n",
    )
    .unwrap();
    let bin = env!("CARGO_BIN_EXE_runner");
    let result = dir.path().join("nested-exit.txt");
    manifest(
        dir.path(),
        1,
        1,
        1,
        &format!(
            "{bin} apply {} --no-progress --wait-for-locks 20s --state \"$TMPDIR/inner.db\"; echo $? > {}",
            dir.path().join("inner.yaml").display(),
            result.display()
        ),
        "",
    );
    let out = apply(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&result).unwrap().trim(), "0");
    let r = dir.path().join("r0");
    assert_eq!(
        git(&r, &["show", "HEAD:nested.txt"]),
        "nested",
        "the nested run did its work"
    );
    // The parent's record of the lease is its own still.
    let record: Value =
        serde_json::from_slice(&std::fs::read(r.join(".git/runner.lease.json")).unwrap()).unwrap();
    assert_eq!(record["repo"], "r0");
    let report = latest_report(&dir.path().join("runner-reports"));
    assert_eq!(record["run_id"], report["run_id"]);
}

#[test]
fn a_lease_let_go_just_after_it_was_tried_is_taken_not_reported_held() {
    // A lock found busy whose record names no holder (being replaced: the record is removed,
    // then written) or a run that is over (it let go as it ended) is a holder coming or going,
    // not a process keeping the repository: seen in drains of several runners on one machine,
    // where such an item was held `repo-busy` and the run exited 1 though nothing was wrong.
    for record in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        manifest(dir.path(), 1, 1, 1, "true", "");
        let git_dir = dir.path().join("r0/.git");
        let holder = Command::new("flock")
            .arg(git_dir.join("runner.lock"))
            .args(["sleep", "0.4"])
            .spawn()
            .expect("flock runs");
        if record {
            let ended = serde_json::json!({
                "host": "elsewhere",
                "pid": holder.id(),
                "run_id": "20260101T000000Z-ended",
                "repo": "r0",
                "token": "",
            });
            std::fs::write(git_dir.join("runner.lease.json"), ended.to_string()).unwrap();
        }
        assert!(common::wait_for(5, || {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(git_dir.join("runner.lock"));
            f.is_ok_and(|f| f.try_lock().is_err())
        }));
        let out = apply(dir.path(), &[]);
        let mut holder = holder;
        holder.wait().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "record {record}: {}",
            stderr(&out)
        );
        let report = latest_report(&dir.path().join("runner-reports"));
        assert_eq!(report["items"][0]["outcome"], "completed", "{report:#}");
    }
}

#[test]
fn a_forged_token_does_not_reenter_a_lease() {
    // Another process that presents the holder's token, but does not descend from the holder,
    // is held `repo-busy` like anyone else.
    let dir = tempfile::tempdir().unwrap();
    let r = repo(&dir.path().join("r0"));
    std::fs::write(
        dir.path().join("m.yaml"),
        "version: 1\nname: long\nrepositories: [{path: r0}]\nworker: {run: \"sleep 6123\"}\nitems: [{repo: r0, id: a}]\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("inner.yaml"),
        "version: 1\nname: inner\nrepositories: [{path: r0}]\nworker: {run: \"true\"}\nitems: [{repo: r0, id: x, branch: runner/x}]\n",
    )
    .unwrap();
    let mut parent = runner()
        .current_dir(dir.path())
        .args(["apply", "m.yaml", "--no-progress"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    assert!(common::wait_for(20, || !processes_matching("sleep 6123").is_empty()));
    let record: Value =
        serde_json::from_slice(&std::fs::read(r.join(".git/runner.lease.json")).unwrap()).unwrap();
    let token = record["token"].as_str().unwrap().to_string();
    let out = runner()
        .current_dir(dir.path())
        // A ledger of its own: a run of the same ledger would wait for the holder instead.
        .args([
            "apply",
            "inner.yaml",
            "--no-progress",
            "--json",
            "--state",
            "other.db",
        ])
        .env("RUNNER_ROLE", "worker")
        .env("RUNNER_TOKEN", &token)
        .env("RUNNER_REPO_PATH", &r)
        .env("RUNNER_MAX_WORKERS", "1")
        .output()
        .unwrap();
    for pid in processes_matching("sleep 6123") {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let _ = parent.wait();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["items"][0]["reason"], "repo-busy", "{report:#}");
}

#[test]
fn the_capacity_probe_lowers_the_bound_and_an_unreadable_probe_counts_as_one() {
    for probe in ["echo 1", "echo not-a-number", "exit 3"] {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("times.log");
        manifest(dir.path(), 4, 2, 3, &recording_worker(&log, "0.1"), "");
        let m = std::fs::read_to_string(dir.path().join("m.yaml")).unwrap();
        let m = m.replace(
            "capacity: {workers: 3}",
            &format!(
                "capacity: {{workers: 3, probe: {}}}",
                serde_json::to_string(probe).unwrap()
            ),
        );
        std::fs::write(dir.path().join("m.yaml"), m).unwrap();
        let out = apply(dir.path(), &[]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let iv = intervals(&log);
        assert_eq!(iv.len(), 8);
        assert_eq!(max_overlap(&iv), 1, "probe `{probe}`");
    }
    // A probe answering more than `workers` is clamped to it.
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("times.log");
    manifest(dir.path(), 4, 2, 2, &recording_worker(&log, "0.1"), "");
    let m = std::fs::read_to_string(dir.path().join("m.yaml")).unwrap();
    std::fs::write(
        dir.path().join("m.yaml"),
        m.replace(
            "capacity: {workers: 2}",
            "capacity: {workers: 2, probe: \"echo 50\"}",
        ),
    )
    .unwrap();
    let out = apply(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(max_overlap(&intervals(&log)), 2);
}

#[test]
fn a_second_signal_kills_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("times.log");
    // The worker ignores SIGTERM and the grace period is long: only the second signal ends it.
    manifest(
        dir.path(),
        1,
        1,
        1,
        &format!("trap '' TERM; {}", recording_worker(&log, "3134")),
        "",
    );
    let m = std::fs::read_to_string(dir.path().join("m.yaml")).unwrap();
    std::fs::write(
        dir.path().join("m.yaml"),
        m.replace("worker:\n", "worker:\n  grace: 10m\n"),
    )
    .unwrap();
    let child = common::runner()
        .current_dir(dir.path())
        .args(["apply", "m.yaml", "--no-progress"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    assert!(wait_for(20, || intervals_started(&log) >= 1));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        !processes_matching("sleep 3134").is_empty(),
        "the first signal waits out the grace"
    );
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    assert!(processes_matching("sleep 3134").is_empty());
    let report = latest_report(&dir.path().join("runner-reports"));
    assert_eq!(report["ending"], "cancelled");
}

#[test]
fn a_worker_that_cannot_be_started_fails_its_item_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("not-executable");
    std::fs::write(&plain, "#!/bin/sh\nexit 0\n").unwrap();
    let worker = serde_json::to_string(&[plain.to_str().unwrap()]).unwrap();
    manifest(dir.path(), 1, 1, 1, "true", "");
    let m = std::fs::read_to_string(dir.path().join("m.yaml")).unwrap();
    let m = m.replace("run: \"true\"", &format!("run: {worker}"));
    std::fs::write(dir.path().join("m.yaml"), m).unwrap();
    let out = apply(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = latest_report(&dir.path().join("runner-reports"));
    let item = &report["items"][0];
    assert_eq!(item["outcome"], "failed", "{report}");
    let cause = item["cause"].as_str().unwrap_or_default();
    assert!(
        cause.contains("cannot start") && cause.contains("ermission denied"),
        "{report}"
    );
}

#[test]
fn the_drain_runs_on_its_loop_once_the_plan_is_made() {
    // Planning's pool of threads ends with the plan: while workers run, runner is its loop (the
    // drain and every item's task) and, at most, the blocking pool's threads that ask git and
    // the ledger's (so a census reads few lists of children, and nothing of planning idles
    // beside the loop).
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("threads.log");
    let worker = format!(
        "for t in /proc/$PPID/task/*; do echo \"$(basename $t) $(cat $t/comm)\"; done >> {}; echo --- >> {}",
        seen.display(),
        seen.display()
    );
    // Unconfined, so that the worker's parent is runner (confined, it is the item's own first
    // process in a namespace of its own).
    manifest(dir.path(), 4, 1, 1, &worker, "sandbox: {mode: off}\n");
    let out = apply(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let log = std::fs::read_to_string(&seen).unwrap();
    assert_eq!(log.matches("---").count(), 4, "{log}");
    for snapshot in log.split("---\n").filter(|s| !s.trim().is_empty()) {
        let names: Vec<&str> = snapshot
            .lines()
            .map(|l| l.split_once(' ').unwrap().1)
            .collect();
        for name in &names {
            assert!(
                ["runner", "runner-blocking", "runner-ledger"].contains(name),
                "a thread other than the loop, the blocking pool and the ledger: {name}\n{log}"
            );
        }
        assert_eq!(
            names.iter().filter(|n| **n == "runner").count(),
            1,
            "one loop: {log}"
        );
        assert!(
            names.len() <= 6,
            "no more threads than the loop, a few blocking ones and the ledger: {log}"
        );
    }
}

#[test]
fn a_report_that_cannot_be_written_is_exit_4_not_a_silent_success() {
    let dir = tempfile::tempdir().unwrap();
    manifest(dir.path(), 1, 1, 1, "true", "");
    // `latest` cannot be replaced by a link: a folder with something in it stands there.
    let latest = dir.path().join("runner-reports/latest");
    std::fs::create_dir_all(&latest).unwrap();
    std::fs::write(latest.join("keep"), "").unwrap();
    let out = apply(dir.path(), &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(err.contains("was not written"), "{err}");
    assert!(err.contains("latest"), "the failing path is named: {err}");
    // The item's verdict is unchanged and recorded.
    let status = run_in(dir.path(), &["status", "m.yaml", "--json"]);
    assert!(
        stdout(&status).contains("\"ending\": \"drained\""),
        "{}",
        stdout(&status)
    );
}

/// Before the first run there is no ledger yet: `status` of the manifest says so and shows what
/// its repositories say (exit 0, no ledger made); without a manifest, the missing ledger is an
/// error naming what to give.
#[test]
fn status_before_the_first_run_is_an_answer() {
    let dir = tempfile::tempdir().unwrap();
    manifest(dir.path(), 1, 1, 1, "true", "");
    let out = run_in(dir.path(), &["status", "m.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("not made yet: no run so far"), "{text}");
    assert!(text.contains("runs (newest first):\n  none"), "{text}");
    let json = run_in(dir.path(), &["status", "m.yaml", "--json"]);
    assert_eq!(json.status.code(), Some(0), "{}", stderr(&json));
    let v: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["runs"], serde_json::json!([]));
    assert_eq!(v["leases"].as_array().map(Vec::len), Some(1), "{v}");
    assert!(
        !dir.path().join(".runner/state.db").exists(),
        "status made no ledger"
    );
    let bare = run_in(dir.path(), &["status"]);
    assert_eq!(bare.status.code(), Some(2), "{}", stderr(&bare));
    assert!(stderr(&bare).contains("give the manifest or `--state`"));
}
