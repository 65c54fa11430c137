//! What runner tells users about outcomes: the stall guard, counts and reasons. The built binary
//! against real repositories and real processes.

use crate::common;

use common::{latest_report, repo, report_item, run_in, runner, stderr};
use std::path::Path;

/// One repository, items `a`..`d` run one at a time in that order, one attempt each, and the
/// stall guard at 3.
fn stall_fixture(root: &Path) {
    repo(&root.join("r"));
    std::fs::write(
        root.join("m.yaml"),
        r#"version: 1
name: stall
capacity: {workers: 1}
repositories: [{path: r}]
worker: {run: ["true"]}
gates:
  - name: first
    run: 'test "$RUNNER_ITEM" != b && test "$RUNNER_ITEM" != c'
  - name: second
    run: 'test "$RUNNER_ITEM" != a'
stall: {after: 3}
items:
  - {repo: r, id: a}
  - {repo: r, id: b}
  - {repo: r, id: c}
  - {repo: r, id: d}
"#,
    )
    .unwrap();
}

#[test]
fn an_item_that_passed_a_gate_is_progress_and_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    stall_fixture(dir.path());
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    let err = stderr(&out);
    // `a` passed `first` then failed `second`: progress, not the start of a stall; `b` and `c`
    // halt on `first`: two in a row, under the guard's three.
    assert_eq!(out.status.code(), Some(1), "{err}");
    let report = latest_report(&dir.path().join("runner-reports"));
    assert_eq!(report["ending"], "drained", "{report:#}");
    assert_eq!(report_item(&report, "id", "d")["outcome"], "completed");
    for id in ["a", "b", "c"] {
        assert_eq!(report_item(&report, "id", id)["outcome"], "halted");
    }
    assert!(!err.contains("suspect the environment"), "{err}");
}

#[test]
fn a_stall_quotes_a_real_line_of_the_failure_its_halts_share() {
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("r"));
    std::fs::write(
        dir.path().join("m.yaml"),
        r#"version: 1
name: stall
capacity: {workers: 1}
repositories: [{path: r}]
worker: {run: ["true"]}
gates:
  - name: build
    run: 'echo "error: toolchain 1.95 missing at /opt/$RUNNER_ITEM/tc"; exit 1'
stall: {after: 2}
items:
  - {repo: r, id: a}
  - {repo: r, id: b}
  - {repo: r, id: c}
"#,
    )
    .unwrap();
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    let report = latest_report(&dir.path().join("runner-reports"));
    assert_eq!(report["ending"], "stalled");
    let cause = report["cause"].as_str().unwrap();
    assert!(
        cause.contains("all 2 failed at gate `build` with the same failure: `error: toolchain 1.95 missing at /opt/a/tc`"),
        "{cause}"
    );
    assert_eq!(report_item(&report, "id", "c")["outcome"], "cancelled");
}

/// Repositories `r0..` with the given items each, a worker that records its start and end and
/// sleeps `secs`, and `workers` slots.
fn queue_fixture(root: &Path, items: &[&[&str]], secs: &str, workers: u32) -> std::path::PathBuf {
    let log = root.join("runs.log");
    let mut m =
        format!("version: 1\nname: queue\ncapacity: {{workers: {workers}}}\nrepositories:\n");
    for r in 0..items.len() {
        repo(&root.join(format!("r{r}")));
        m.push_str(&format!("  - path: r{r}\n"));
    }
    m.push_str(&format!(
        "worker:\n  run: 'echo \"start $RUNNER_REPO $RUNNER_ITEM $RUNNER_RUN_ID\" >> {log}; sleep {secs}; echo \"end $RUNNER_REPO $RUNNER_ITEM\" >> {log}'\nitems:\n",
        log = log.display()
    ));
    for (r, ids) in items.iter().enumerate() {
        for id in *ids {
            m.push_str(&format!("  - {{repo: r{r}, id: {id}}}\n"));
        }
    }
    std::fs::write(root.join("m.yaml"), m).unwrap();
    log
}

fn spawn_apply(root: &Path) -> std::process::Child {
    common::runner()
        .current_dir(root)
        .args(["apply", "m.yaml", "--no-progress", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// How often each `repo/item` started, from the worker's log.
fn starts(log: &Path) -> std::collections::BTreeMap<String, usize> {
    let mut n = std::collections::BTreeMap::new();
    for line in std::fs::read_to_string(log).unwrap_or_default().lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.first() == Some(&"start") {
            *n.entry(format!("{}/{}", f[1], f[2])).or_insert(0) += 1;
        }
    }
    n
}

fn assert_each_ran_once(log: &Path, want: &[&str], outs: &[std::process::Output]) {
    let seen = starts(log);
    let detail = || outs.iter().map(stderr).collect::<Vec<_>>().join("\n---\n");
    for w in want {
        assert_eq!(
            seen.get(*w),
            Some(&1),
            "{w} ran {:?} times: {seen:?}\n{}",
            seen.get(*w),
            detail()
        );
    }
    assert_eq!(seen.len(), want.len(), "{seen:?}");
    for o in outs {
        assert_eq!(o.status.code(), Some(0), "{}", detail());
        let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(report["counts"]["held"], 0, "{report:#}");
    }
}

#[test]
fn two_overlapping_drains_run_every_item_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let log = queue_fixture(dir.path(), &[&["a", "b"], &["c"], &["d"]], "2", 2);
    let first = spawn_apply(dir.path());
    // The second starts while the first is working, as a cron drain that outlived its interval.
    assert!(common::wait_for(20, || starts(&log).len() >= 2));
    let second = spawn_apply(dir.path());
    let outs = [
        first.wait_with_output().unwrap(),
        second.wait_with_output().unwrap(),
    ];
    assert_each_ran_once(&log, &["r0/a", "r0/b", "r1/c", "r2/d"], &outs);
    // What one run left to the other it reports as `taken` or `done`, never as held.
    let reasons: Vec<String> = outs
        .iter()
        .flat_map(|o| {
            let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            r["items"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|i| i["outcome"] == "skipped")
                .map(|i| i["reason"].as_str().unwrap_or("").to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(
        reasons.len(),
        4,
        "each item skipped by the run that did not run it: {reasons:?}"
    );
    assert!(
        reasons.iter().all(|r| r == "taken" || r == "done"),
        "{reasons:?}"
    );
}

#[test]
fn four_drains_started_together_share_one_queue() {
    let dir = tempfile::tempdir().unwrap();
    let log = queue_fixture(
        dir.path(),
        &[&["a", "b"], &["c", "d"], &["e"], &["f"]],
        "0.3",
        2,
    );
    let runs: Vec<_> = (0..4).map(|_| spawn_apply(dir.path())).collect();
    let outs: Vec<_> = runs
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    assert_each_ran_once(
        &log,
        &["r0/a", "r0/b", "r1/c", "r1/d", "r2/e", "r3/f"],
        &outs,
    );
}

#[test]
fn plan_shows_an_item_another_live_run_works_on_as_taken() {
    let dir = tempfile::tempdir().unwrap();
    let log = queue_fixture(dir.path(), &[&["a"], &["b"]], "3", 1);
    let run = spawn_apply(dir.path());
    assert!(common::wait_for(20, || starts(&log).len() == 1));
    let out = run_in(dir.path(), &["plan", "m.yaml", "--json"]);
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let running = starts(&log).into_keys().next().unwrap();
    let (repo, id) = running.split_once('/').unwrap();
    let it = plan["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["repo"] == repo && i["id"] == id)
        .unwrap();
    assert_eq!(it["state"], "skipped", "{it}");
    assert_eq!(it["reason"], "taken", "{it}");
    assert!(
        it["detail"]
            .as_str()
            .unwrap()
            .contains("claimed by live run"),
        "{it}"
    );
    let out = run.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn the_last_line_gives_the_counts_and_the_reason_for_the_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    stall_fixture(dir.path());
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        err.lines().last().unwrap(),
        "runner: 1 completed (no-change 1), 3 halted — exit 1: an item halted, failed or was held",
        "{err}"
    );
    // Again: everything is done, nothing pending.
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(
        err.lines().last().unwrap(),
        "runner: 4 skipped (done 4) — exit 0: nothing was pending",
        "{err}"
    );
}

#[test]
fn items_held_at_plan_time_are_named_on_stderr_and_in_the_summary() {
    let dir = tempfile::tempdir().unwrap();
    stall_fixture(dir.path());
    std::fs::write(dir.path().join("r/untracked.txt"), "x\n").unwrap();
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("runner: 4 items held at plan time:"), "{err}");
    assert!(
        err.contains("runner:   r/a (dirty-tree): the checkout has uncommitted changes"),
        "{err}"
    );
    assert!(
        err.ends_with(
            "runner: 4 held (dirty-tree 4) — exit 1: an item halted, failed or was held\n"
        ),
        "{err}"
    );
    let summary =
        std::fs::read_to_string(dir.path().join("runner-reports/latest/summary.md")).unwrap();
    assert!(summary.contains("## Held"), "{summary}");
    assert!(
        summary.contains("- `r/d` — dirty-tree: the checkout has uncommitted changes"),
        "{summary}"
    );
}

#[test]
fn a_run_started_on_a_paused_manifest_ends_paused_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    stall_fixture(dir.path());
    let out = run_in(
        dir.path(),
        &["pause", "m.yaml", "--reason", "provider outage"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let report = latest_report(&dir.path().join("runner-reports"));
    assert_eq!(report["ending"], "paused", "{report:#}");
    let last = err.lines().last().unwrap();
    assert!(
        last.starts_with("runner: 4 held (paused 4) — exit 1: the manifest is paused ("),
        "{last}"
    );
    assert!(last.contains("provider outage"), "{last}");
}

#[test]
fn a_filter_that_matches_nothing_is_an_error_naming_what_exists() {
    let dir = tempfile::tempdir().unwrap();
    stall_fixture(dir.path());
    let out = run_in(dir.path(), &["plan", "m.yaml", "--only", "rr"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("`--only rr` matches no repository; known: `r`"),
        "{}",
        stderr(&out)
    );
    let out = run_in(
        dir.path(),
        &["plan", "m.yaml", "--items", "z*", "--detailed-exitcode"],
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "an error under --detailed-exitcode"
    );
    assert!(
        stderr(&out).contains("`--items z*` matches no item id; known: `a`, `b`, `c`, `d`"),
        "{}",
        stderr(&out)
    );
    let out = run_in(dir.path(), &["apply", "m.yaml", "--only", "rr"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!dir.path().join(".runner").exists() || !dir.path().join("runner-reports").exists());
}

#[test]
fn a_relative_program_that_does_not_exist_fails_validation() {
    let dir = tempfile::tempdir().unwrap();
    stall_fixture(dir.path());
    let m = std::fs::read_to_string(dir.path().join("m.yaml")).unwrap();
    std::fs::write(
        dir.path().join("m.yaml"),
        m.replace(r#"run: ["true"]"#, r#"run: ["./agent.sh", "{item}"]"#),
    )
    .unwrap();
    let out = run_in(dir.path(), &["validate", "m.yaml"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("program-not-found"), "{err}");
    assert!(
        err.contains("`./agent.sh` does not exist in the manifest's folder"),
        "{err}"
    );
    std::fs::write(dir.path().join("agent.sh"), "#!/bin/sh\n").unwrap();
    assert_eq!(
        run_in(dir.path(), &["validate", "m.yaml"]).status.code(),
        Some(0)
    );
}

#[test]
fn a_bound_above_the_manifests_is_lowered_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    stall_fixture(dir.path());
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress", "-j", "8"]);
    let err = stderr(&out);
    assert!(
        err.contains("warning: `-j 8` is above the manifest's bound; running at most 1 at once"),
        "{err}"
    );
    assert!(err.contains("up to 1 at once"), "{err}");
}

#[test]
fn unlock_takes_a_repositorys_name_with_its_manifest() {
    let dir = tempfile::tempdir().unwrap();
    stall_fixture(dir.path());
    let elsewhere = tempfile::tempdir().unwrap();
    let m = dir.path().join("m.yaml");
    let m = m.to_str().unwrap();
    let out = run_in(elsewhere.path(), &["unlock", "r", "--manifest", m]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = run_in(elsewhere.path(), &["unlock", "nope", "--manifest", m]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("its repositories: r"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn reports_speak_plainly_and_every_process_that_printed_has_its_log() {
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("r"));
    std::fs::write(
        dir.path().join("m.yaml"),
        r#"version: 1
name: texts
capacity: {workers: 1}
repositories: [{path: r}]
models: {primary: m1, fallbacks: [m2], threshold: 2, provider_failure: {exit_codes: [75]}, backoff: {initial: 20ms, max: 100ms}}
worker:
  run: 'if [ "$RUNNER_ITEM" = ok ]; then exit 0; fi; if [ "$RUNNER_MODEL" = m1 ]; then echo "rate limited"; exit 75; fi; echo "broke at line 3"; exit 2'
  attempts: 1
gates:
  - {name: quiet, run: ["true"]}
items:
  - {repo: r, id: bad}
  - {repo: r, id: ok}
"#,
    )
    .unwrap();
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let reports = dir.path().join("runner-reports");
    let summary = std::fs::read_to_string(reports.join("latest/summary.md")).unwrap();
    for internal in ["Some(", "None", "`-`", "1 items", "1 workers", "attempt 0"] {
        assert!(!summary.contains(internal), "`{internal}` in:\n{summary}");
    }
    assert!(summary.contains("**2 items:**"), "{summary}");
    assert!(summary.contains("| 1 (+2 provider retries) |"), "{summary}");
    assert!(summary.contains("worker failed (exit 2,"), "{summary}");
    assert!(
        summary.contains("broke at line 3"),
        "the failing worker's tail: {summary}"
    );
    let report = latest_report(&reports);
    let bad = report_item(&report, "id", "bad");
    let last = bad["attempts"].as_array().unwrap().last().unwrap();
    assert_eq!(last["worker"]["output_tail"], "broke at line 3", "{bad:#}");
    // Every worker and gate that printed has its log, holding what it printed; one that
    // printed nothing has none, and no folder was made for it.
    let run_dir = reports.join(report["run_id"].as_str().unwrap());
    let (mut logs, mut silent) = (0, 0);
    for it in report["items"].as_array().unwrap() {
        for a in it["attempts"].as_array().unwrap() {
            let mut steps = vec![a["worker"].clone()];
            steps.extend(a["gates"].as_array().unwrap().iter().cloned());
            for step in steps {
                match step["log"].as_str() {
                    Some(p) => {
                        let text = std::fs::read_to_string(run_dir.join(p))
                            .unwrap_or_else(|e| panic!("{p}: {e}"));
                        assert!(
                            text.contains("rate limited") || text.contains("broke at line 3"),
                            "{p}: {text:?}"
                        );
                        logs += 1;
                    }
                    None => {
                        assert!(step["log"].is_null(), "{step:#}");
                        silent += 1;
                    }
                }
            }
        }
    }
    assert_eq!(
        (logs, silent),
        (3, 2),
        "three worker passes of `bad` printed; `ok`'s worker and gate did not"
    );
    assert!(run_dir.join("logs/r/bad").is_dir());
    assert!(
        !run_dir.join("logs/r/ok").exists(),
        "a log folder for silent steps"
    );
    // `latest` names the most recent run.
    let again = run_in(dir.path(), &["report", "latest", "--manifest", "m.yaml"]);
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    let again: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(again["run_id"], report["run_id"]);
}

#[test]
fn status_shows_the_holds_decided_at_plan_time() {
    let dir = tempfile::tempdir().unwrap();
    stall_fixture(dir.path());
    std::fs::write(dir.path().join("r/untracked.txt"), "x\n").unwrap();
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = common::stdout(&run_in(dir.path(), &["status", "m.yaml"]));
    assert!(
        text.contains(
            "held items (latest run):\n  r/a  dirty-tree: the checkout has uncommitted changes"
        ),
        "{text}"
    );
    let json = run_in(dir.path(), &["status", "m.yaml", "--json"]);
    let st: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(st["schema"], "runner.status/v1");
    let held = st["held"].as_array().unwrap();
    assert_eq!(held.len(), 4, "{st:#}");
    assert!(held.iter().all(|h| h["reason"] == "dirty-tree"), "{st:#}");
}

#[test]
fn a_new_branch_is_forked_only_from_a_base_holding_every_marker() {
    let dir = tempfile::tempdir().unwrap();
    let r = repo(&dir.path().join("r"));
    common::git(&r, &["checkout", "-q", "-b", "fix"]);
    common::commit_file(&r, "SECURITY.md", "patched\n");
    common::git(&r, &["tag", "v2"]);
    common::git(&r, &["checkout", "-q", "main"]);
    std::fs::write(
        dir.path().join("m.yaml"),
        r#"version: 1
name: markers
repositories: [{path: r, critical_base: [v2]}]
worker: {run: ["true"]}
items: [{repo: r, id: new, branch: "runner/new"}]
"#,
    )
    .unwrap();
    let plan = run_in(dir.path(), &["plan", "m.yaml", "--json"]);
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    let it = &plan["items"][0];
    assert_eq!(
        (it["state"].as_str(), it["reason"].as_str()),
        (Some("held"), Some("stale-base")),
        "{it}"
    );
    assert!(
        it["detail"].as_str().unwrap().contains("base `main`"),
        "{it}"
    );
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        common::git(&r, &["branch", "--list", "runner/new"]).is_empty(),
        "a branch was forked from a stale base"
    );
    // Once the base holds the marker, the item runs.
    common::git(&r, &["merge", "-q", "--ff-only", "fix"]);
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// One repository `r` and one item `a` without a branch, with the given worker and gates.
fn work_fixture(root: &Path, worker: &str, extra: &str) -> std::path::PathBuf {
    let r = repo(&root.join("r"));
    std::fs::write(
        root.join("m.yaml"),
        format!(
            "version: 1\nname: work\nrepositories: [{{path: r}}]\nworker:\n  run: {}\n{extra}items: [{{repo: r, id: a}}]\n",
            serde_json::to_string(worker).unwrap()
        ),
    )
    .unwrap();
    r
}

#[test]
fn an_in_place_item_commits_its_work_and_then_plans_as_done() {
    let dir = tempfile::tempdir().unwrap();
    let r = work_fixture(dir.path(), "echo fixed > fix.txt", "");
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(common::git(&r, &["log", "-1", "--format=%s"]), "runner: a");
    assert_eq!(
        common::git(&r, &["status", "--porcelain"]),
        "",
        "the checkout is left clean"
    );
    let report = latest_report(&dir.path().join("runner-reports"));
    let a = report_item(&report, "id", "a");
    assert_eq!(
        a["commit"],
        common::git(&r, &["rev-parse", "HEAD"]).as_str(),
        "{a:#}"
    );
    assert_eq!(a["diffstat"]["files"], 1);
    assert_eq!(a["diffstat"]["insertions"], 1);
    assert_eq!(
        a["marks"],
        serde_json::json!(["unverified"]),
        "no gate checked it: {a:#}"
    );
    let out = run_in(
        dir.path(),
        &["plan", "m.yaml", "--json", "--detailed-exitcode"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["items"][0]["state"], "done", "{plan:#}");
}

/// A repository whose git files have settled (a second old) has them kept by the run between
/// its items; the work each item commits moves HEAD's branch and rewrites the index, and the
/// next item starts from that commit, proven clean from the files as they are then.
#[test]
fn in_place_items_of_a_settled_repository_each_start_from_the_last_ones_commit() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let r = repo(&root.join("r"));
    let init = common::git(&r, &["rev-parse", "HEAD"]);
    std::fs::write(
        root.join("m.yaml"),
        "version: 1\nname: settled\nrepositories: [{path: r}]\nworker:\n  run: 'if [ \"$RUNNER_ITEM\" != b ]; then echo $RUNNER_ITEM > $RUNNER_ITEM.txt; fi'\n\
         items: [{repo: r, id: a}, {repo: r, id: b}, {repo: r, id: c}]\n",
    )
    .unwrap();
    // Every git file of the repository a second old: each is kept once read.
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let out = run_in(root, &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = latest_report(&root.join("runner-reports"));
    let (a, b, c) = (
        report_item(&report, "id", "a"),
        report_item(&report, "id", "b"),
        report_item(&report, "id", "c"),
    );
    for item in [&a, &b, &c] {
        assert_eq!(item["outcome"], "completed", "{item:#}");
    }
    let a_commit = a["commit"].as_str().expect("a committed its work");
    assert!(b["commit"].is_null(), "b changed nothing: {b:#}");
    let c_commit = c["commit"].as_str().expect("c committed its work");
    assert_eq!(
        common::git(&r, &["rev-parse", &format!("{a_commit}^")]),
        init
    );
    assert_eq!(
        common::git(&r, &["rev-parse", &format!("{c_commit}^")]),
        a_commit
    );
    assert_eq!(common::git(&r, &["rev-parse", "HEAD"]), c_commit);
    assert_eq!(common::git(&r, &["status", "--porcelain"]), "");
}

#[test]
fn the_commit_holds_the_tree_as_the_worker_left_it_not_the_gates_byproducts() {
    let dir = tempfile::tempdir().unwrap();
    let r = work_fixture(
        dir.path(),
        "echo 'def f(): return 1' > lib.py",
        "gates:\n  - name: test\n    run: 'mkdir -p __pycache__ && echo bytecode > __pycache__/lib.pyc && echo more >> lib.py'\n",
    );
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let files = common::git(&r, &["show", "--name-only", "--format=", "HEAD"]);
    assert_eq!(files, "lib.py", "the commit holds: {files}");
    assert_eq!(
        common::git(&r, &["show", "HEAD:lib.py"]),
        "def f(): return 1",
        "the gate's edit is not in the commit"
    );
    let report = latest_report(&dir.path().join("runner-reports"));
    assert!(
        report_item(&report, "id", "a")["marks"]
            .as_array()
            .is_none_or(|m| m.is_empty()),
        "{report:#}"
    );
}

/// git built without nanosecond timestamps (the default build) compares whole seconds, and
/// trusts an index entry whose second is older than the index file's: it tells such a "racy"
/// entry by the index file's own time. A worker that rewrites a file with as many bytes in the
/// second its checkout was written, while the snapshot is taken a second later, is the case.
#[test]
fn an_edit_in_the_second_of_the_checkout_with_the_same_size_is_committed() {
    // The worker reports whether its edit landed in the second the file was checked out; only
    // such a pass tests the case, and nearly every pass is one (the worker starts within tens
    // of milliseconds of its checkout).
    let worker = r#"before=$(stat -c %Y README.md); printf 'HELLO\n' > README.md; after=$(stat -c %Y README.md); [ "$before" = "$after" ] && touch "$MARK/$RUNNER_ITEM"; sleep 1.2"#;
    for round in 0..6 {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let marks = root.join("marks");
        std::fs::create_dir(&marks).unwrap();
        for r in ["wt", "here"] {
            repo(&root.join(r));
        }
        std::fs::write(
            root.join("m.yaml"),
            format!(
                "version: 1\nname: racy\ncapacity: {{workers: 2}}\nrepositories: [{{path: wt}}, {{path: here}}]\nworker:\n  run: {}\n  env: {{MARK: {}}}\nitems:\n  - {{repo: wt, id: branch, branch: runner/branch}}\n  - {{repo: here, id: inplace}}\n",
                serde_json::to_string(worker).unwrap(),
                marks.display()
            ),
        )
        .unwrap();
        let out = run_in(root, &["apply", "m.yaml", "--no-progress"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let report = latest_report(&root.join("runner-reports"));
        let mut tested = 0;
        for (r, id, rev) in [
            ("wt", "branch", "runner/branch"),
            ("here", "inplace", "HEAD"),
        ] {
            if !marks.join(id).exists() {
                continue;
            }
            tested += 1;
            let item = report_item(&report, "id", id);
            assert!(item["commit"].is_string(), "round {round}: {item:#}");
            assert_eq!(item["marks"], serde_json::json!(["unverified"]), "{item:#}");
            assert_eq!(
                common::git(&root.join(r), &["show", &format!("{rev}:README.md")]),
                "HELLO"
            );
        }
        if tested == 2 {
            return;
        }
    }
    panic!("no round had both edits land in the second of their checkout");
}

#[test]
fn a_worker_that_moves_head_fails_its_attempt_and_nothing_is_committed() {
    let dir = tempfile::tempdir().unwrap();
    let r = work_fixture(
        dir.path(),
        "git checkout -q -b elsewhere && echo x > x.txt",
        "",
    );
    let start = common::git(&r, &["rev-parse", "HEAD"]);
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = latest_report(&dir.path().join("runner-reports"));
    let a = report_item(&report, "id", "a");
    assert_eq!(a["outcome"], "halted", "{a:#}");
    assert!(
        a["cause"]
            .as_str()
            .unwrap()
            .contains("HEAD moved from `main` to `elsewhere`"),
        "{a:#}"
    );
    // runner committed nowhere: neither the item's branch nor the one the worker moved to.
    for b in ["main", "elsewhere"] {
        assert_eq!(common::git(&r, &["rev-parse", b]), start, "{b} moved");
    }
}

#[test]
fn a_pass_that_changes_nothing_is_marked_and_with_require_change_fails() {
    let dir = tempfile::tempdir().unwrap();
    work_fixture(dir.path(), "true", "gates: [{name: ok, run: [\"true\"]}]\n");
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = latest_report(&dir.path().join("runner-reports"));
    let a = report_item(&report, "id", "a");
    assert_eq!(a["marks"], serde_json::json!(["no-change"]), "{a:#}");
    assert!(a["commit"].is_null(), "{a:#}");
    assert!(
        stderr(&out).contains("1 completed (no-change 1)"),
        "{}",
        stderr(&out)
    );

    let dir = tempfile::tempdir().unwrap();
    work_fixture(
        dir.path(),
        "true",
        "  require_change: true\ngates: [{name: ok, run: [\"true\"]}]\n",
    );
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = latest_report(&dir.path().join("runner-reports"));
    let a = report_item(&report, "id", "a");
    assert_eq!(a["outcome"], "halted");
    assert!(
        a["cause"].as_str().unwrap().contains("changed nothing"),
        "{a:#}"
    );
}

#[test]
fn a_rerun_starts_from_the_branch_not_from_a_halted_runs_leftovers() {
    let dir = tempfile::tempdir().unwrap();
    let r = repo(&dir.path().join("r"));
    let seen = dir.path().join("feedback.log");
    let flag = dir.path().join("gate-passes");
    std::fs::write(
        dir.path().join("m.yaml"),
        format!(
            r#"version: 1
name: rerun
repositories: [{{path: r}}]
worker:
  run: 'echo edit >> notes.txt; echo "attempt $RUNNER_ATTEMPT feedback=[$RUNNER_FEEDBACK]" >> {seen}; if [ -n "$RUNNER_FEEDBACK" ]; then cat "$RUNNER_FEEDBACK" >> {seen}; fi'
gates:
  - name: check
    run: 'test -e {flag} || (echo "the check is not ready yet"; exit 1)'
items: [{{repo: r, id: a, branch: "runner/a"}}]
"#,
            seen = seen.display(),
            flag = flag.display()
        ),
    )
    .unwrap();
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = latest_report(&dir.path().join("runner-reports"));
    let a = report_item(&report, "id", "a");
    assert_eq!(a["outcome"], "halted");
    let wt = a["worktree"]
        .as_str()
        .expect("a halted item's worktree is named");
    assert!(
        Path::new(wt).join("notes.txt").is_file(),
        "the worktree is kept: {a:#}"
    );

    std::fs::write(&flag, "").unwrap();
    let out = run_in(
        dir.path(),
        &["apply", "m.yaml", "--no-progress", "--rerun", "failed"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // The edit is applied once: the rerun started from the branch's committed state.
    assert_eq!(common::git(&r, &["show", "runner/a:notes.txt"]), "edit");
    let report = latest_report(&dir.path().join("runner-reports"));
    let a = report_item(&report, "id", "a");
    assert_eq!(a["outcome"], "completed", "{a:#}");
    assert!(
        a["worktree"].is_null(),
        "a completed item's worktree is removed: {a:#}"
    );
    assert!(!Path::new(wt).exists());
    let run_dir = dir
        .path()
        .join("runner-reports")
        .join(report["run_id"].as_str().unwrap());
    let patch = std::fs::read_to_string(run_dir.join(a["leftovers"].as_str().unwrap())).unwrap();
    assert!(patch.contains("+edit"), "{patch}");
    // Attempt 1 of the rerun was told how the previous run failed.
    let log = std::fs::read_to_string(&seen).unwrap();
    let rerun = log
        .lines()
        .skip_while(|l| !l.contains("feedback=[]"))
        .skip(1)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(rerun.contains("attempt 1 feedback=[/"), "{log}");
    assert!(rerun.contains("the check is not ready yet"), "{log}");
}

#[test]
fn a_gate_that_ran_too_few_tests_fails_however_it_exited() {
    let dir = tempfile::tempdir().unwrap();
    work_fixture(
        dir.path(),
        "true",
        "gates:\n  - name: test\n    run: 'echo \"test a ... ok\"; echo \"test b ... ok\"; exit 0'\n    min_tests: {count: 3, pattern: '^test .* ok$'}\n",
    );
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = latest_report(&dir.path().join("runner-reports"));
    let a = report_item(&report, "id", "a");
    assert_eq!(a["outcome"], "halted", "{a:#}");
    let cause = a["cause"].as_str().unwrap();
    assert!(
        cause.contains("gate `test` failed: 2 tests ran (lines matching `^test .* ok$`), fewer than `min_tests.count` 3"),
        "{cause}"
    );
    // Enough tests, and it passes.
    let m = std::fs::read_to_string(dir.path().join("m.yaml")).unwrap();
    std::fs::write(dir.path().join("m.yaml"), m.replace("count: 3", "count: 2")).unwrap();
    let out = run_in(
        dir.path(),
        &["apply", "m.yaml", "--no-progress", "--rerun", "failed"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn a_min_tests_pattern_that_is_not_a_regular_expression_fails_validation() {
    let dir = tempfile::tempdir().unwrap();
    work_fixture(
        dir.path(),
        "true",
        "gates:\n  - {name: test, run: 'true', min_tests: {count: 1, pattern: 'ok ('}}\n",
    );
    let out = run_in(dir.path(), &["validate", "m.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("is not a regular expression"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_rule_that_matches_nothing_is_a_warning_and_an_unreadable_folder_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let r = repo(&dir.path().join("checkouts/svc-a"));
    common::commit_file(&r, "tasks/one/task.md", "one\n");
    // A folder the glob's walk cannot get through: a link back to where it started.
    std::os::unix::fs::symlink("..", dir.path().join("checkouts/loop")).unwrap();
    std::fs::write(
        dir.path().join("m.yaml"),
        r#"version: 1
name: warn
repositories:
  - glob: "checkouts/*"
  - glob: "elsewhere/*"
worker: {run: ["true"]}
discover:
  - {glob: "tasks/*/task.md", id: "{match.parent}"}
  - {glob: "changes/*/proposal.md", id: "{match.parent}"}
"#,
    )
    .unwrap();
    let out = run_in(dir.path(), &["validate", "m.yaml"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("warning: `repositories[1].glob` `elsewhere/*` matches no git checkout"),
        "{err}"
    );
    let out = run_in(dir.path(), &["plan", "m.yaml"]);
    let err = stderr(&out);
    assert!(
        err.contains(
            "warning: `discover[1]` `changes/*/proposal.md` matches no file in any repository"
        ),
        "{err}"
    );
    assert!(
        err.contains("`repositories[0].glob` `checkouts/*`: cannot read"),
        "{err}"
    );
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = latest_report(&dir.path().join("runner-reports"));
    let warnings = report["warnings"].as_array().unwrap();
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().unwrap().contains("matches no file")),
        "{report:#}"
    );
    let summary =
        std::fs::read_to_string(dir.path().join("runner-reports/latest/summary.md")).unwrap();
    assert!(summary.contains("## Warnings"), "{summary}");
}

#[test]
fn with_commit_off_the_work_is_left_and_its_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let r = work_fixture(dir.path(), "echo fixed > fix.txt", "  commit: false\n");
    let start = common::git(&r, &["rev-parse", "HEAD"]);
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        common::git(&r, &["rev-parse", "HEAD"]),
        start,
        "nothing committed"
    );
    assert_eq!(common::git(&r, &["status", "--porcelain"]), "?? fix.txt");
    let report = latest_report(&dir.path().join("runner-reports"));
    assert_eq!(
        report_item(&report, "id", "a")["uncommitted"],
        serde_json::json!(["fix.txt"])
    );
    let summary =
        std::fs::read_to_string(dir.path().join("runner-reports/latest/summary.md")).unwrap();
    assert!(summary.contains("left uncommitted: `fix.txt`"), "{summary}");
}

/// A command that could not be started left no process behind: the item fails with the reason,
/// and its repository is not quarantined (nor said to have processes that could not be proven
/// gone). Before, a mistyped worker or gate command quarantined the repository for every later
/// run until `runner unlock`.
#[test]
fn a_command_that_cannot_start_fails_its_item_and_quarantines_nothing() {
    for (worker, gate) in [("no-such-tool-7741", "true"), ("true", "no-such-gate-7742")] {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        repo(&root.join("r"));
        std::fs::write(
            root.join("m.yaml"),
            format!(
                "version: 1\nname: unstarted\ncapacity: {{workers: 1}}\nrepositories: [{{path: r}}]\nworker: {{run: [\"{worker}\"]}}\ngates: [{{name: check, run: [\"{gate}\"]}}]\nitems: [{{repo: r, id: a}}, {{repo: r, id: b}}]\n"
            ),
        )
        .unwrap();
        let out = run_in(root, &["apply", "m.yaml", "--no-progress"]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("not found on `PATH`"), "{err}");
        assert!(!err.contains("quarantine"), "{err}");
        assert!(!err.contains("proven gone"), "{err}");
        let report = latest_report(&root.join("runner-reports"));
        for id in ["a", "b"] {
            // The worker that cannot start fails its item; the gate, like any gate, halts it.
            let item = report_item(&report, "id", id);
            assert_ne!(item["outcome"], "held", "{item}");
            assert!(
                item["cause"]
                    .as_str()
                    .unwrap()
                    .contains("not found on `PATH`"),
                "{item}"
            );
        }
        assert!(!root.join("r/.git/runner.quarantine.json").exists());
    }
}

#[test]
fn commands_start_with_no_path_in_the_environment_as_a_shell_would_start_them() {
    // `env -i runner apply …`, or a scheduler that passes no environment: with no `PATH`, a
    // program is looked for where `execvp` looks (`/bin:/usr/bin`), and a string `run` still
    // has its `sh`.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    repo(&root.join("r"));
    std::fs::write(
        root.join("m.yaml"),
        r#"version: 1
name: bare
repositories: [{path: r}]
worker: {run: "echo working on $RUNNER_ITEM"}
gates:
  - {name: listed, run: ["true"]}
items: [{repo: r, id: a}]
"#,
    )
    .unwrap();
    let out = common::runner()
        .current_dir(root)
        .env_clear()
        .args(["apply", "m.yaml", "--no-progress"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = latest_report(&root.join("runner-reports"));
    assert_eq!(report_item(&report, "id", "a")["outcome"], "completed");
}

/// A manifest over `r` (there) and `textkitt` (a typo: not there), one item in each, with
/// `textkitt` declared `optional` when asked.
fn typo_fixture(root: &Path, optional: bool) {
    repo(&root.join("r"));
    std::fs::write(
        root.join("m.yaml"),
        format!(
            r#"version: 1
name: typo
repositories:
  - {{path: textkitt{}}}
  - {{path: r}}
worker: {{run: ["true"]}}
items:
  - {{repo: textkitt, id: one}}
  - {{repo: r, id: two}}
"#,
            if optional { ", optional: true" } else { "" }
        ),
    )
    .unwrap();
}

#[test]
fn a_declared_repository_that_is_not_there_fails_the_run_and_is_named_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    typo_fixture(dir.path(), false);
    let out = run_in(dir.path(), &["validate", "m.yaml"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        stderr(&out).contains("repository `textkitt` is not there"),
        "{}",
        stderr(&out)
    );
    assert!(
        common::stdout(&out).contains("2 repositories (1 not found)"),
        "{}",
        common::stdout(&out)
    );
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("warning: repository `textkitt` is not there: ")
            && err.contains("textkitt` does not exist"),
        "{err}"
    );
    // No checkout beside it is a typo away: nothing is suggested.
    assert!(!err.contains("did you mean"), "{err}");
    repo(&dir.path().join("textkit"));
    let out = run_in(dir.path(), &["plan", "m.yaml"]);
    assert!(
        stderr(&out).contains("does not exist (did you mean `textkit`?)"),
        "{err}"
    );
    assert_eq!(
        err.lines().last().unwrap(),
        "runner: 1 completed (no-change 1, unverified 1), 1 skipped (repo-not-found 1) — exit 1: repository `textkitt` was not found",
        "{err}"
    );
    let report = latest_report(&dir.path().join("runner-reports"));
    assert_eq!(report["missing_repositories"][0]["name"], "textkitt");
    assert!(
        report["warnings"][0]
            .as_str()
            .unwrap()
            .contains("repository `textkitt` is not there"),
        "{report:#}"
    );
    let summary =
        std::fs::read_to_string(dir.path().join("runner-reports/latest/summary.md")).unwrap();
    assert!(
        summary.contains("## Warnings") && summary.contains("repository `textkitt` is not there"),
        "{summary}"
    );
    // When every repository is missing, a cron drain does not report success either.
    std::fs::remove_dir_all(dir.path().join("r")).unwrap();
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.ends_with("exit 1: 2 repositories were not found: `textkitt`, `r`\n"),
        "{err}"
    );
}

#[test]
fn an_optional_repository_that_is_not_there_is_skipped_without_failing_the_run() {
    let dir = tempfile::tempdir().unwrap();
    typo_fixture(dir.path(), true);
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("is not there"), "{err}");
    assert!(
        err.ends_with(
            "runner: 1 completed (no-change 1, unverified 1), 1 skipped (repo-not-found 1) — exit 0: every pending item completed\n"
        ),
        "{err}"
    );
}

/// One repository `r` and a manifest `m.yaml` over it with `items` (YAML flow list) and the
/// given worker and gates.
fn one_repo(root: &Path, worker: &str, extra: &str, items: &str) -> std::path::PathBuf {
    let r = repo(&root.join("r"));
    std::fs::write(
        root.join("m.yaml"),
        format!(
            "version: 1\nname: closed\ncapacity: {{workers: 1}}\nrepositories: [{{path: r}}]\nworker: {{run: {worker:?}}}\n{extra}items: {items}\n"
        ),
    )
    .unwrap();
    r
}

#[test]
fn an_item_the_environment_fails_is_held_and_tried_again_by_the_next_run() {
    let dir = tempfile::tempdir().unwrap();
    one_repo(
        dir.path(),
        "true",
        "",
        "[{repo: r, id: a, branch: runner/a}]",
    );
    // Where the worktree's folder goes, a file: git cannot make the worktree.
    let blocker = dir.path().join(".runner/workspace/worktrees/r");
    std::fs::create_dir_all(blocker.parent().unwrap()).unwrap();
    std::fs::write(&blocker, "in the way\n").unwrap();
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.ends_with(
            "runner: 1 held (environment 1) — exit 1: an item halted, failed or was held\n"
        ),
        "{err}"
    );
    let report = latest_report(&dir.path().join("runner-reports"));
    assert_eq!(report["items"][0]["reason"], "environment", "{report:#}");
    // Not done: once the environment is mended, the next run runs it.
    std::fs::remove_file(&blocker).unwrap();
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn a_lease_record_that_cannot_be_written_holds_the_item_instead_of_running_it_unrecorded() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let r = one_repo(
        dir.path(),
        &format!("touch {}", marker.display()),
        "",
        "[{repo: r, id: a}]",
    );
    // A folder where the record goes: it can be neither removed as a file nor replaced.
    std::fs::create_dir_all(r.join(".git/runner.lease.json/x")).unwrap();
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!marker.exists(), "the worker ran without a lease record");
    let report = latest_report(&dir.path().join("runner-reports"));
    let item = &report["items"][0];
    assert_eq!(item["reason"], "environment", "{item:#}");
    assert!(
        item["cause"]
            .as_str()
            .unwrap()
            .contains("runner.lease.json"),
        "{item:#}"
    );
}

#[test]
fn an_unreadable_quarantine_record_keeps_the_repository_quarantined() {
    let dir = tempfile::tempdir().unwrap();
    let r = one_repo(dir.path(), "true", "", "[{repo: r, id: a}]");
    std::fs::write(
        r.join(".git/runner.quarantine.json"),
        "{\"run_id\": \"x\", trunc",
    )
    .unwrap();
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("r/a (quarantined)") && err.contains("runner.quarantine.json` cannot be read"),
        "{err}"
    );
    // `unlock` lifts it, writing a whole record.
    let out = run_in(dir.path(), &["unlock", "r", "--reason", "checked"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn leftovers_that_cannot_be_saved_are_not_reset_away() {
    let dir = tempfile::tempdir().unwrap();
    // `x` leaves an uncommitted file and halts; on the rerun, `a` (first) blocks the folder the
    // patch would be saved in.
    let r = one_repo(
        dir.path(),
        "echo left > left.txt",
        "gates: [{name: g, run: 'test \"$RUNNER_ITEM\" = a'}]\n",
        "[{repo: r, id: x, branch: runner/x}]",
    );
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let wt = dir.path().join(".runner/workspace/worktrees/r/x");
    assert!(wt.join("left.txt").exists());
    let reports = dir.path().join("runner-reports");
    std::fs::write(
        dir.path().join("m.yaml"),
        format!(
            "version: 1\nname: closed\ncapacity: {{workers: 1}}\nrepositories: [{{path: r}}]\nworker: {{run: 'if [ \"$RUNNER_ITEM\" = a ]; then mkdir -p {reports}/$RUNNER_RUN_ID/leftovers; touch {reports}/$RUNNER_RUN_ID/leftovers/r; fi; echo left > left.txt'}}\ngates: [{{name: g, run: 'test \"$RUNNER_ITEM\" = a'}}]\nitems: [{{repo: r, id: a, branch: runner/a}}, {{repo: r, id: x, branch: runner/x}}]\n",
            reports = reports.display()
        ),
    )
    .unwrap();
    let out = run_in(
        dir.path(),
        &["apply", "m.yaml", "--no-progress", "--rerun", "failed"],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let report = latest_report(&reports);
    let x = common::report_item(&report, "id", "x");
    assert_eq!(x["reason"], "environment", "{x:#}");
    assert!(
        x["cause"]
            .as_str()
            .unwrap()
            .contains("the worktree is left as it was"),
        "{x:#}"
    );
    assert_eq!(
        std::fs::read_to_string(wt.join("left.txt")).unwrap(),
        "left\n",
        "what the earlier run left was removed before it was saved"
    );
    let _ = r;
}

#[test]
fn a_budget_stops_admission_when_a_workers_spend_is_unknown() {
    let dir = tempfile::tempdir().unwrap();
    one_repo(
        dir.path(),
        "true",
        "budget: {cost_usd: 5}\n",
        "[{repo: r, id: a}, {repo: r, id: b}]",
    );
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(
        err.contains("what a worker used is unknown (its worker wrote no usage to `RUNNER_USAGE`)"),
        "{err}"
    );
    let report = latest_report(&dir.path().join("runner-reports"));
    assert_eq!(
        common::report_item(&report, "id", "b")["outcome"],
        "cancelled"
    );
    // A malformed usage file is named even without a budget.
    let dir = tempfile::tempdir().unwrap();
    one_repo(
        dir.path(),
        "echo '{{\"cost_usd\": \"lots\"}}' > \"$RUNNER_USAGE\"",
        "",
        "[{repo: r, id: a}]",
    );
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = latest_report(&dir.path().join("runner-reports"));
    assert!(
        report["warnings"][0].as_str().unwrap().contains(
            "r/a attempt 1: what its worker used is unknown: its usage file is not a JSON object"
        ),
        "{report:#}"
    );
}

#[test]
fn plan_refuses_an_emptied_ledger_as_apply_does() {
    let dir = tempfile::tempdir().unwrap();
    one_repo(dir.path(), "true", "", "[{repo: r, id: a}]");
    std::fs::create_dir_all(dir.path().join(".runner")).unwrap();
    std::fs::write(dir.path().join(".runner/state.db"), "").unwrap();
    for args in [
        &["plan", "m.yaml"][..],
        &["apply", "m.yaml", "--no-progress"],
    ] {
        let out = run_in(dir.path(), args);
        assert_eq!(out.status.code(), Some(4), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("the file is empty: a ledger that lost its contents"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn status_names_each_runs_ending_with_its_counts() {
    let dir = tempfile::tempdir().unwrap();
    stall_fixture(dir.path());
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("run ended: drained (1 completed, 3 halted)"),
        "{}",
        stderr(&out)
    );
    let out = run_in(dir.path(), &["status", "m.yaml"]);
    let text = common::stdout(&out);
    assert!(
        text.contains("ended drained (1 completed, 3 halted)"),
        "{text}"
    );
    let out = run_in(dir.path(), &["status", "m.yaml", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&common::stdout(&out)).unwrap();
    assert_eq!(v["runs"][0]["counts"]["halted"], 3, "{v:#}");
    let summary =
        std::fs::read_to_string(dir.path().join("runner-reports/latest/summary.md")).unwrap();
    assert!(
        summary.starts_with("# runner: `stall` — drained: 1 completed (no-change 1), 3 halted\n"),
        "{summary}"
    );
}

#[test]
fn a_bare_worker_program_missing_from_path_fails_validation_with_its_place() {
    let dir = tempfile::tempdir().unwrap();
    one_repo(dir.path(), "true", "", "[{repo: r, id: a}]");
    std::fs::write(
        dir.path().join("m.yaml"),
        "version: 1\nname: p\nrepositories: [{path: r}]\nworker:\n  run: [\"agnet-not-installed\", \"--task\", \"{item}\"]\nitems: [{repo: r, id: a}]\n",
    )
    .unwrap();
    let out = run_in(dir.path(), &["validate", "m.yaml"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("`worker.run`: `agnet-not-installed` is not on `PATH`")
            && err.contains("m.yaml:5:10"),
        "{err}"
    );
}

#[test]
fn reports_and_manifests_follow_the_umask_and_help_keeps_global_options_apart() {
    let dir = tempfile::tempdir().unwrap();
    one_repo(dir.path(), "true", "", "[{repo: r, id: a}]");
    // Under umask 022, as a login shell has it.
    let under_umask = |args: &str| {
        std::process::Command::new("sh")
            .current_dir(dir.path())
            .arg("-c")
            .arg(format!("umask 022; exec \"$0\" {args}"))
            .arg(env!("CARGO_BIN_EXE_runner"))
            .env_remove("RUNNER_ROLE")
            .output()
            .unwrap()
    };
    let out = under_umask("apply m.yaml --no-progress");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let latest = dir.path().join("runner-reports/latest");
    for f in ["report.json", "summary.md", "junit.xml", "index.html"] {
        assert_eq!(mode(&latest.join(f)), 0o644, "{f}");
    }
    let out = under_umask("init -o new.yaml");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(mode(&dir.path().join("new.yaml")), 0o644);
    let help = common::stdout(&runner().args(["apply", "--help"]).output().unwrap());
    let (own, global) = help
        .split_once("Global options:")
        .expect("a heading of their own");
    assert!(
        !own.contains("--verbose") && global.contains("--verbose"),
        "{help}"
    );
    let help = common::stdout(&runner().args(["init", "--help"]).output().unwrap());
    assert_eq!(
        help.matches("default").count(),
        4,
        "each default once: {help}"
    );
}

/// Two overlapping drains of one manifest (a cron drain that outlived its interval) together
/// run no more items at once than `capacity.workers`.
#[test]
fn overlapping_drains_of_one_manifest_share_its_worker_bound() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("intervals.log");
    let mut m = "version: 1\nname: bound\ncapacity: {workers: 2}\nrepositories:\n".to_string();
    for r in 0..6 {
        repo(&dir.path().join(format!("r{r}")));
        m.push_str(&format!("  - path: r{r}\n"));
    }
    m.push_str(&format!(
        "worker:\n  run: 'echo \"start $RUNNER_REPO $RUNNER_ITEM $(date +%s%N)\" >> {log}; sleep 1; echo \"end $RUNNER_REPO $RUNNER_ITEM $(date +%s%N)\" >> {log}'\nitems:\n",
        log = log.display()
    ));
    for r in 0..6 {
        m.push_str(&format!("  - {{repo: r{r}, id: i{r}}}\n"));
    }
    std::fs::write(dir.path().join("m.yaml"), m).unwrap();
    let first = spawn_apply(dir.path());
    assert!(common::wait_for(20, || {
        std::fs::read_to_string(&log).is_ok_and(|t| t.matches("start").count() >= 2)
    }));
    let second = spawn_apply(dir.path());
    let status = run_in(dir.path(), &["status", "m.yaml", "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["slots"]["bound"], 2, "{status:#}");
    assert!(
        status["slots"]["in_use"].as_u64().unwrap() >= 1,
        "{status:#}"
    );
    let outs = [
        first.wait_with_output().unwrap(),
        second.wait_with_output().unwrap(),
    ];
    for o in &outs {
        assert_eq!(o.status.code(), Some(0), "{}", stderr(o));
    }
    let iv = common::intervals(&log);
    assert_eq!(iv.len(), 6, "{iv:?}");
    assert!(
        common::max_overlap(&iv) <= 2,
        "{} items ran at once: {iv:?}",
        common::max_overlap(&iv)
    );
}

/// A cron drain after the work is done: an item stays held `stale-base` until a person acts.
#[test]
fn a_run_with_nothing_new_keeps_latest_and_standing_holds_are_a_choice() {
    let dir = tempfile::tempdir().unwrap();
    let r = repo(&dir.path().join("r"));
    common::git(&r, &["checkout", "-q", "-b", "side"]);
    let marker = common::commit_file(&r, "side.txt", "side\n");
    common::git(&r, &["checkout", "-q", "main"]);
    repo(&dir.path().join("s"));
    std::fs::write(
        dir.path().join("m.yaml"),
        format!(
            "version: 1\nname: cron\nrepositories: [{{path: r, critical_base: [\"{marker}\"]}}, {{path: s}}]\nworker: {{run: \"true\"}}\nitems: [{{repo: r, id: old, branch: runner/old}}, {{repo: s, id: new}}]\n"
        ),
    )
    .unwrap();
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let first = std::fs::read_link(dir.path().join("runner-reports/latest")).unwrap();
    // Nothing new: exit 1 by default (a hold needs a person), `latest` stays the run that worked.
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(
        std::fs::read_link(dir.path().join("runner-reports/latest")).unwrap(),
        first
    );
    assert_eq!(
        common::run_folders(dir.path()).len(),
        2,
        "the empty run is recorded"
    );
    let out = run_in(
        dir.path(),
        &[
            "apply",
            "m.yaml",
            "--no-progress",
            "--standing-holds",
            "pass",
        ],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.ends_with("exit 0: nothing new: 1 item still held (`--standing-holds pass`)\n"),
        "{err}"
    );
}

/// A run killed outright, its report rendered again from the ledger: what never finished was in
/// flight when the run died, or not started — nothing cancelled it.
#[test]
fn a_killed_runs_report_says_its_items_were_in_flight_not_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    queue_fixture(dir.path(), &[&["a", "b"], &["c"]], "5317", 1);
    common::kill_runner_while(dir.path(), &[], &["sleep 5317"]);
    // What the dead run's worker left goes (the next run would end it).
    for p in common::processes_matching("sleep 5317") {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(p),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let out = run_in(dir.path(), &["report", "latest", "--manifest", "m.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let reasons: Vec<(&str, &str)> = report["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["reason"].as_str().unwrap_or(""),
                i["cause"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert!(
        reasons.contains(&(
            "run-died",
            "in flight when the run died: its result was never recorded"
        )),
        "{reasons:?}"
    );
    assert!(
        reasons.contains(&("run-died", "not started: the run died first")),
        "{reasons:?}"
    );
    let out = run_in(
        dir.path(),
        &[
            "report",
            "latest",
            "--manifest",
            "m.yaml",
            "--format",
            "markdown",
        ],
    );
    assert!(
        common::stdout(&out).contains("# runner: `queue` — died: 3 cancelled (run-died 3)"),
        "{}",
        common::stdout(&out)
    );
}

/// A `git worktree add` that never finished (runner killed while git checked the files out)
/// leaves the worktree locked "initializing", its files partly written. The next run adds it
/// afresh: the item runs on the whole checkout, nothing the half-made one lacked is committed
/// as deleted, nothing is saved as leftovers; and a record whose folder is gone, runner's
/// workspace with it, is cleared too.
#[test]
fn a_worktree_whose_adding_was_cut_short_is_added_afresh() {
    let dir = tempfile::tempdir().unwrap();
    let r = one_repo(
        dir.path(),
        "echo new > new.txt",
        "",
        "[{repo: r, id: x, branch: runner/x}]",
    );
    common::commit_file(&r, "src/kept.txt", "kept\n");
    let worktrees = dir.path().join(".runner/workspace/worktrees");
    let cut_short = |id: &str| {
        let wt = worktrees.join("r").join(id);
        let branch = format!("runner/{id}");
        common::git(
            &r,
            &["worktree", "add", "-q", "-b", &branch, wt.to_str().unwrap()],
        );
        std::fs::write(
            r.join(format!(".git/worktrees/{id}/locked")),
            "initializing\n",
        )
        .unwrap();
        wt
    };
    let files_of = |branch: &str| {
        common::git(&r, &["ls-tree", "-r", "--name-only", branch])
            .lines()
            .map(String::from)
            .collect::<Vec<_>>()
    };
    let whole = ["README.md", "new.txt", "src/kept.txt"];
    // The checkout half written.
    let x = cut_short("x");
    std::fs::remove_dir_all(x.join("src")).unwrap();
    std::fs::remove_file(r.join(".git/worktrees/x/index")).unwrap();
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(files_of("runner/x"), whole);
    let report = latest_report(&dir.path().join("runner-reports"));
    assert!(!report.to_string().contains("leftovers/"), "{report:#}");
    // The folder not made yet, and runner's workspace removed since.
    cut_short("y");
    std::fs::remove_dir_all(&worktrees).unwrap();
    std::fs::write(
        dir.path().join("m.yaml"),
        std::fs::read_to_string(dir.path().join("m.yaml"))
            .unwrap()
            .replace("id: x, branch: runner/x", "id: y, branch: runner/y"),
    )
    .unwrap();
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(files_of("runner/y"), whole);
    let listed = common::git(&r, &["worktree", "list", "--porcelain"]);
    assert!(!listed.contains("locked"), "{listed}");
}
