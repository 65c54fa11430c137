//! Gate baselines, the verdict cache and suspected misconfigured gates, on real repositories.
//!
//! The repositories hold a small test suite, `suite.sh`: one test per file in `cases/`, which
//! fails when the file says `fail`, printed as `go test` prints (`--- FAIL: TestX (0.01s)`, the
//! duration changing from run to run). Each run of the suite adds a line to `$GATE_LOG`, outside
//! the tree, so a test can count the runs.

use crate::common;

use common::{commit_file, git, latest_report, repo, report_item, runner, stderr};
use std::path::Path;

const SUITE: &str = r#"#!/bin/sh
echo "run $RUNNER_ITEM $(pwd)" >> "$GATE_LOG"
[ -e slow ] && sleep 5
failed=0
for f in cases/*.case; do
  t=$(basename "$f" .case)
  if [ "$(cat "$f")" = fail ]; then
    echo "=== RUN   $t"
    echo "    $t: error: got 4, want 5 in $(pwd)/$f"
    echo "--- FAIL: $t (0.0$(date +%N | cut -c1-1)s)"
    failed=1
  elif [ "$(cat "$f")" = crash ]; then
    echo "panic: the suite crashed in a way no line names"
    exit 2
  else
    echo "--- PASS: $t (0.00s)"
  fi
done
[ $failed = 0 ] && echo ok || echo FAIL
exit $failed
"#;

/// A repository at `dir` whose suite has the cases given (`name`, `pass` or `fail`).
fn suite_repo(dir: &Path, cases: &[(&str, &str)]) {
    repo(dir);
    commit_file(dir, "suite.sh", SUITE);
    for (name, verdict) in cases {
        commit_file(dir, &format!("cases/{name}.case"), &format!("{verdict}\n"));
    }
}

/// A manifest over `repos`, gate `test` (the suite) with `gate_extra` lines, one attempt each.
fn manifest(root: &Path, repos: &[&str], gate_extra: &str, items: &str) {
    let mut m = String::from(
        "version: 1\nname: baselines\ncapacity: {workers: 1}\nenv: {pass: [PATH, HOME, GATE_LOG]}\nrepositories:\n",
    );
    for r in repos {
        m.push_str(&format!("  - path: {r}\n"));
    }
    m.push_str(&format!(
        "worker:\n  run: [sh, -c, '{{item.script}}']\n  attempts: 1\ngates:\n  - name: test\n    run: [sh, suite.sh]\n{gate_extra}items:\n{items}"
    ));
    std::fs::write(root.join("m.yaml"), m).unwrap();
}

fn apply(root: &Path, args: &[&str]) -> (Option<i32>, String) {
    let out = runner()
        .current_dir(root)
        .args(["apply", "m.yaml", "--no-progress"])
        .args(args)
        .env("GATE_LOG", root.join("gate.log"))
        .output()
        .unwrap();
    (out.status.code(), stderr(&out))
}

fn gate_runs(root: &Path) -> usize {
    std::fs::read_to_string(root.join("gate.log"))
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

fn gate(item: &serde_json::Value) -> &serde_json::Value {
    &item["attempts"][0]["gates"][0]
}

fn strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

#[test]
fn a_base_that_already_fails_forgives_its_failures_and_no_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    suite_repo(
        &root.join("app"),
        &[("TestAdd", "pass"), ("TestOld", "fail")],
    );
    manifest(
        root,
        &["app"],
        "    baseline: true\n",
        "  - {repo: app, id: adds-failure, branch: runner/adds, vars: {script: 'echo fail > cases/TestNew.case'}}\n\
         \x20 - {repo: app, id: harmless, branch: runner/harmless, vars: {script: 'echo note > notes.txt'}}\n",
    );
    let (code, err) = apply(root, &[]);
    assert_eq!(code, Some(1), "{err}");
    let report = latest_report(&root.join("runner-reports"));

    let bad = report_item(&report, "id", "adds-failure");
    assert_eq!(bad["outcome"], "halted", "{err}");
    let cause = bad["cause"].as_str().unwrap();
    assert!(
        cause.contains("1 new failure") && cause.contains("TestNew"),
        "{cause}"
    );
    assert!(
        !cause.contains("TestOld"),
        "only new failures are named: {cause}"
    );
    let g = gate(bad);
    assert_eq!(g["result"], "failed");
    let new = strings(&g["failures"]["new"]);
    assert_eq!(new.len(), 1, "{g}");
    assert!(new[0].starts_with("--- FAIL: TestNew ("), "{new:?}");
    let forgiven = strings(&g["failures"]["forgiven"]);
    assert!(
        forgiven.len() == 1 && forgiven[0].contains("TestOld"),
        "{forgiven:?}"
    );

    let ok = report_item(&report, "id", "harmless");
    assert_eq!(ok["outcome"], "completed", "{err}");
    let g = gate(ok);
    assert_eq!(g["result"], "passed");
    assert_eq!(g["forgiven"], true);
    assert_eq!(g["exit"], 1, "the suite failed, and was forgiven");
    assert!(strings(&g["failures"]["new"]).is_empty());
    let forgiven = strings(&g["failures"]["forgiven"]);
    assert!(
        forgiven.len() == 1 && forgiven[0].contains("TestOld"),
        "{forgiven:?}"
    );
    // The baseline ran on the base commit, in a worktree of its own, once for both items.
    let base = git(&root.join("app"), &["rev-parse", "HEAD"]);
    for item in [bad, ok] {
        let b = &gate(item)["baseline"];
        assert_eq!(b["commit"], base.trim(), "{b}");
        assert_eq!(b["result"], "failed");
    }
    let log = std::fs::read_to_string(root.join("gate.log")).unwrap();
    let baselines = log.lines().filter(|l| l.contains("/baselines/")).count();
    assert_eq!(baselines, 1, "{log}");
    assert_eq!(gate_runs(root), 3, "{log}");
    // Shown in the summary too.
    let md = std::fs::read_to_string(root.join("runner-reports/latest/summary.md")).unwrap();
    assert!(md.contains("forgiven"), "{md}");
    // No baseline worktree is left behind.
    let worktrees = git(&root.join("app"), &["worktree", "list"]);
    assert!(!worktrees.contains("baselines"), "{worktrees}");
}

#[test]
fn a_gate_red_on_a_green_base_fails_even_when_no_line_is_recognised() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    suite_repo(&root.join("app"), &[("TestAdd", "pass")]);
    manifest(
        root,
        &["app"],
        "    baseline: true\n",
        "  - {repo: app, id: crashes, branch: runner/crash, vars: {script: 'echo crash > cases/TestAdd.case'}}\n\
         \x20 - {repo: app, id: fails, branch: runner/fails, vars: {script: 'echo fail > cases/TestAdd.case'}}\n",
    );
    let (code, err) = apply(root, &[]);
    assert_eq!(code, Some(1), "{err}");
    let report = latest_report(&root.join("runner-reports"));
    let crash = report_item(&report, "id", "crashes");
    assert_eq!(crash["outcome"], "halted", "{err}");
    let cause = crash["cause"].as_str().unwrap();
    assert!(cause.contains("passes on the base commit"), "{cause}");
    assert_eq!(gate(crash)["baseline"]["result"], "passed");
    let fails = report_item(&report, "id", "fails");
    assert_eq!(fails["outcome"], "halted");
    assert_eq!(
        strings(&gate(fails)["failures"]["new"]).len(),
        1,
        "{}",
        gate(fails)
    );
}

#[test]
fn a_baseline_that_timed_out_forgives_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let app = root.join("app");
    suite_repo(&app, &[("TestOld", "fail")]);
    // The base's suite hangs; the item's (without the marker) fails as the base would.
    commit_file(&app, "slow", "");
    manifest(
        root,
        &["app"],
        "    baseline: true\n    timeout: 1s\n    grace: 1s\n",
        "  - {repo: app, id: unhung, branch: runner/unhung, vars: {script: 'rm slow'}}\n",
    );
    let (code, err) = apply(root, &[]);
    assert_eq!(code, Some(1), "{err}");
    let report = latest_report(&root.join("runner-reports"));
    let it = report_item(&report, "id", "unhung");
    assert_eq!(it["outcome"], "halted", "{err}");
    assert_eq!(gate(it)["baseline"]["result"], "timed-out");
    let cause = it["cause"].as_str().unwrap();
    assert!(
        cause.contains("timed out, which forgives nothing"),
        "{cause}"
    );
}

#[test]
fn an_unchanged_tree_reuses_a_passing_verdict_and_a_changed_file_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let app = root.join("app");
    suite_repo(&app, &[("TestAdd", "pass")]);
    manifest(
        root,
        &["app"],
        "",
        "  - {repo: app, id: docs, vars: {script: 'echo note > notes.txt'}}\n",
    );
    let (code, err) = apply(root, &[]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(gate_runs(root), 1);
    let first = latest_report(&root.join("runner-reports"));
    let first_id = first["run_id"].as_str().unwrap().to_string();
    assert!(gate(report_item(&first, "id", "docs"))["cached"].is_null());

    // Again: the worker leaves the same tree, so the gate's verdict is the first run's.
    let (code, err) = apply(root, &["--rerun", "all"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(gate_runs(root), 1, "the gate did not run again");
    let second = latest_report(&root.join("runner-reports"));
    let g = gate(report_item(&second, "id", "docs"));
    assert_eq!(g["result"], "passed");
    assert_eq!(g["cached"]["run_id"], first_id.as_str(), "{g}");
    assert!(err.contains("cached"), "{err}");

    // `--no-cache` runs it.
    let (code, err) = apply(root, &["--rerun", "all", "--no-cache"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(gate_runs(root), 2);
    assert!(
        gate(report_item(
            &latest_report(&root.join("runner-reports")),
            "id",
            "docs"
        ))["cached"]
            .is_null()
    );

    // A changed file: a new tree, so the gate runs again.
    commit_file(&app, "README", "changed\n");
    let (code, err) = apply(root, &["--rerun", "all"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(gate_runs(root), 3);
    let g = gate(report_item(
        &latest_report(&root.join("runner-reports")),
        "id",
        "docs",
    ))
    .clone();
    assert!(g["cached"].is_null(), "{g}");
}

/// A verdict counts the lines its `min_tests` pattern matched: a changed pattern is a changed
/// question, never answered by the count of the old one.
#[test]
fn a_changed_min_tests_pattern_is_not_answered_from_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    suite_repo(&root.join("app"), &[("TestAdd", "pass")]);
    let with_pattern = |pattern: &str| {
        manifest(
            root,
            &["app"],
            &format!("    min_tests: {{count: 1, pattern: '{pattern}'}}\n"),
            "  - {repo: app, id: noop, vars: {script: 'true'}}\n",
        )
    };
    with_pattern("^--- PASS");
    let (code, err) = apply(root, &[]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(gate_runs(root), 1);
    // The same question again: answered from the cache.
    let (code, err) = apply(root, &["--rerun", "all"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(gate_runs(root), 1, "the gate did not run again");
    // A pattern no line of the suite matches: the gate runs, and too few tests ran.
    with_pattern("^--- PASS: TestMissing");
    let (code, err) = apply(root, &["--rerun", "all"]);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(gate_runs(root), 2, "the gate ran again");
    let g = gate(report_item(
        &latest_report(&root.join("runner-reports")),
        "id",
        "noop",
    ))
    .clone();
    assert_eq!(g["result"], "failed", "{g}");
    assert!(g["cached"].is_null(), "{g}");
}

#[test]
fn a_failing_verdict_is_never_reused() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    suite_repo(&root.join("app"), &[("TestAdd", "fail")]);
    manifest(
        root,
        &["app"],
        "",
        "  - {repo: app, id: noop, vars: {script: 'true'}}\n",
    );
    for runs in 1..=2 {
        let (code, err) = apply(root, &["--rerun", "all"]);
        assert_eq!(code, Some(1), "{err}");
        assert_eq!(gate_runs(root), runs);
    }
}

#[test]
fn a_misspelt_gate_is_named_as_suspected_misconfigured() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for r in ["a", "b"] {
        suite_repo(&root.join(r), &[("TestAdd", "pass")]);
    }
    std::fs::write(
        root.join("m.yaml"),
        "version: 1\nname: misspelt\ncapacity: {workers: 1}\nrepositories:\n  - path: a\n  - path: b\n\
         worker:\n  run: 'echo change > notes.txt'\n  attempts: 1\n\
         gates:\n  - name: test\n    run: cargoo test --all\n\
         items:\n  - {repo: a, id: x}\n  - {repo: b, id: x}\n",
    )
    .unwrap();
    let (code, err) = apply(root, &[]);
    assert_eq!(code, Some(1), "{err}");
    let report = latest_report(&root.join("runner-reports"));
    let suspects = report["suspect_gates"].as_array().expect("suspects named");
    // One command in one repository each: the command cannot be found in either.
    assert_eq!(suspects.len(), 2, "{suspects:?}");
    for (s, r) in suspects.iter().zip(["a", "b"]) {
        assert_eq!(s["gate"], "test");
        assert_eq!(s["repo"], r);
        assert_eq!(s["exit"], 127);
        assert_eq!(s["failed"], 1);
        assert!(
            s["command"].as_str().unwrap().contains("cargoo test --all"),
            "{s}"
        );
        assert!(
            s["dir"].as_str().unwrap().ends_with(&format!("/{r}")),
            "{s}"
        );
        assert_eq!(strings(&s["halted"]), [format!("{r}/x")]);
    }
    let md = std::fs::read_to_string(root.join("runner-reports/latest/summary.md")).unwrap();
    assert!(
        md.contains("misconfigured") && md.contains("cargoo test --all"),
        "{md}"
    );
    assert!(err.contains("misconfigured"), "{err}");
}

#[test]
fn verdicts_older_than_the_kept_days_are_removed_by_gc() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    suite_repo(&root.join("app"), &[("TestAdd", "pass")]);
    manifest(
        root,
        &["app"],
        "",
        "  - {repo: app, id: docs, vars: {script: 'echo note > notes.txt'}}\n",
    );
    let (code, err) = apply(root, &[]);
    assert_eq!(code, Some(0), "{err}");
    let cache = root.join(".runner/workspace/cache/verdicts");
    let files: Vec<_> = std::fs::read_dir(&cache).unwrap().flatten().collect();
    assert_eq!(files.len(), 1, "one passing verdict recorded");
    let out = runner()
        .current_dir(root)
        .args(["gc", "m.yaml"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_dir(&cache).unwrap().count(),
        1,
        "a fresh verdict stays"
    );
    // 91 days old: past the default `keep.days` (90).
    let touched = std::process::Command::new("touch")
        .args(["-d", "91 days ago"])
        .arg(files[0].path())
        .status()
        .unwrap();
    assert!(touched.success());
    let out = runner()
        .current_dir(root)
        .args(["gc", "m.yaml"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("removed 1 gate verdict"),
        "{}",
        stderr(&out)
    );
    assert_eq!(std::fs::read_dir(&cache).unwrap().count(), 0);
}

/// `cargo test -q` names a failed test as `name --- FAILED`: a baseline of such a gate forgives
/// what fails on the base too.
#[test]
fn a_terse_libtest_baseline_forgives_what_the_base_fails_too() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    repo(&root.join("r"));
    commit_file(
        &root.join("r"),
        "t.sh",
        "echo 'running 2 tests'; echo 'emoji_test_file --- FAILED'; [ -e new.fail ] && echo 'tests::new --- FAILED'; exit 1\n",
    );
    std::fs::write(
        root.join("m.yaml"),
        "version: 1\nname: terse\nrepositories: [{path: r}]\nworker: {run: [sh, -c, 'echo x > work.txt']}\ngates: [{name: test, run: [sh, t.sh], baseline: true}]\nitems: [{repo: r, id: a, branch: runner/a}]\n",
    )
    .unwrap();
    let (code, err) = apply(root, &[]);
    assert_eq!(code, Some(0), "the known failure is forgiven: {err}");
    let report = latest_report(&root.join("runner-reports"));
    let g = gate(report_item(&report, "id", "a"));
    assert_eq!(g["forgiven"], true, "{g:#}");
    assert_eq!(
        strings(&g["failures"]["forgiven"]),
        ["emoji_test_file --- FAILED"]
    );
}

/// One gate name over repositories with their own commands is a gate of each: items halted by
/// their own failures there are no evidence against a gate elsewhere.
#[test]
fn gates_of_one_name_with_different_commands_are_judged_apart() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for r in ["js", "py"] {
        repo(&root.join(r));
    }
    std::fs::write(
        root.join("m.yaml"),
        "version: 1\nname: apart\ncapacity: {workers: 1}\nrepositories:\n  - path: js\n    gates: [{name: test, run: 'node -e \"process.exit(1)\" 2>/dev/null || false'}]\n  - path: py\n    gates: [{name: test, run: 'python3 -c \"raise SystemExit(1)\"'}]\n\
         worker: {run: 'echo change > notes.txt'}\ngates: [{name: test, run: 'true'}]\n\
         items:\n  - {repo: js, id: x}\n  - {repo: py, id: x}\n",
    )
    .unwrap();
    let (code, err) = apply(root, &[]);
    assert_eq!(code, Some(1), "{err}");
    let report = latest_report(&root.join("runner-reports"));
    assert_eq!(
        report["suspect_gates"],
        serde_json::Value::Null,
        "one halt each is each gate doing its work: {report:#}"
    );
    assert!(!err.contains("misconfigured"), "{err}");
}

/// A worker that writes a passing verdict into the cache for the tree it is about to break (the
/// key is computable from what it can see) does not get its gate passed: only verdicts runner
/// sealed are reused.
#[test]
fn a_verdict_a_worker_forged_into_the_cache_is_not_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    repo(&root.join("r"));
    let allow = root.join("allow");
    std::fs::write(&allow, "").unwrap();
    std::fs::write(
        root.join("m.yaml"),
        format!(
            "version: 1\nname: forged\nrepositories: [{{path: r}}]\nworker: {{run: 'echo broken > broken.txt'}}\ngates: [{{name: test, run: 'test ! -e broken.txt || test -e {}'}}]\nitems: [{{repo: r, id: a, branch: runner/a}}]\n",
            allow.display()
        ),
    )
    .unwrap();
    // The broken tree passes once (the gate reads a file outside the tree): its verdict is kept.
    let (code, err) = apply(root, &[]);
    assert_eq!(code, Some(0), "{err}");
    let cache = root.join(".runner/workspace/cache/verdicts");
    let file = std::fs::read_dir(&cache)
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    // What a worker that computed the key would write: a verdict of its own, unsealed.
    let stored: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let verdict = stored.get("verdict").cloned().unwrap_or(stored);
    std::fs::write(&file, serde_json::to_vec(&verdict).unwrap()).unwrap();
    std::fs::remove_file(&allow).unwrap();
    let (code, err) = apply(root, &["--rerun", "all"]);
    assert_eq!(code, Some(1), "a forged verdict passed the gate: {err}");
    let report = latest_report(&root.join("runner-reports"));
    let g = gate(report_item(&report, "id", "a"));
    assert_eq!(g["result"], "failed", "{g:#}");
    assert!(g["cached"].is_null(), "{g:#}");
}

/// What a gate reads that the tree does not show is part of its verdict's key: an ignored file,
/// and an edit hidden from git by `assume-unchanged`.
#[test]
fn a_verdict_is_not_reused_where_the_change_hides_from_the_tree() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let r = repo(&root.join("r"));
    commit_file(&r, ".gitignore", "config.local\n");
    std::fs::write(r.join("config.local"), "good\n").unwrap();
    std::fs::write(
        root.join("m.yaml"),
        "version: 1\nname: hidden\nrepositories: [{path: r}]\nworker: {run: 'true'}\ngates: [{name: test, run: 'grep -q good config.local && ! grep -q broken README.md'}]\nitems: [{repo: r, id: a}]\n",
    )
    .unwrap();
    let (code, err) = apply(root, &[]);
    assert_eq!(code, Some(0), "{err}");
    // An ignored file the gate reads changed: the gate runs again, and fails.
    std::fs::write(r.join("config.local"), "bad\n").unwrap();
    let (code, err) = apply(root, &["--rerun", "all"]);
    assert_eq!(
        code,
        Some(1),
        "a verdict of another config.local was reused: {err}"
    );
    std::fs::write(r.join("config.local"), "good\n").unwrap();
    let (code, err) = apply(root, &["--rerun", "all"]);
    assert_eq!(code, Some(0), "{err}");
    // A tracked file edited behind `assume-unchanged`: the checkout is not clean, and the edit
    // is no part of a verdict on the clean tree.
    git(&r, &["update-index", "--assume-unchanged", "README.md"]);
    std::fs::write(r.join("README.md"), "broken\n").unwrap();
    let out = common::run_in(root, &["plan", "m.yaml", "--rerun", "all"]);
    assert!(
        common::stdout(&out).contains("dirty-tree"),
        "{}",
        common::stdout(&out)
    );
}

/// A suspected gate is one command in one repository, with its evidence: a gate that failed
/// every item of its repository is named with that repository's items only, never lumped with
/// another repository's gate of the same name; and a gate that passed for an item of its
/// repository in an earlier run is not suspected on a rerun of the items it halted.
#[test]
fn a_suspect_gate_is_one_command_in_one_repository_and_earlier_passes_clear_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for r in ["attrs", "idna", "solo"] {
        repo(&root.join(r));
    }
    std::fs::write(
        root.join("m.yaml"),
        "version: 1\nname: evidence\ncapacity: {workers: 1}\nstall: {after: 20}\nrepositories:\n  - path: attrs\n    gates: [{name: test, run: 'grep -q good notes.txt'}]\n  - path: idna\n    gates: [{name: test, run: 'grep -qx good notes.txt'}]\n  - path: solo\n    gates: [{name: test, run: 'grep -q good notes.txt'}]\n\
         worker: {run: 'echo {item} > notes.txt', attempts: 1}\n\
         items:\n  - {repo: attrs, id: good, branch: w/good}\n  - {repo: attrs, id: bad1, branch: w/bad1}\n  - {repo: attrs, id: bad2, branch: w/bad2}\n  - {repo: idna, id: good, branch: w/good}\n  - {repo: idna, id: bad1, branch: w/bad1}\n  - {repo: solo, id: bad1, branch: w/bad1}\n  - {repo: solo, id: bad2, branch: w/bad2}\n",
    )
    .unwrap();
    let suspects = |report: &serde_json::Value| -> Vec<(String, u64, Vec<String>)> {
        report["suspect_gates"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|s| {
                        (
                            s["repo"].as_str().unwrap_or_default().to_string(),
                            s["failed"].as_u64().unwrap_or_default(),
                            strings(&s["halted"]),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    // `solo`'s gate, the only suspect: failed twice, halting both its items.
    let solo = || {
        vec![(
            "solo".to_string(),
            2,
            vec!["solo/bad1".to_string(), "solo/bad2".to_string()],
        )]
    };
    let (code, err) = apply(root, &[]);
    assert_eq!(code, Some(1), "{err}");
    let report = latest_report(&root.join("runner-reports"));
    // `solo`'s gate failed both its items and passed nowhere; `attrs`'s passed for `good`.
    assert_eq!(suspects(&report), solo(), "{report:#}");
    assert!(
        err.contains("`test` of `solo`") && err.contains("failed 2 times in this run"),
        "{err}"
    );
    let warned: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("misconfigured"))
        .collect();
    assert_eq!(warned.len(), 1, "{err}");
    assert!(!warned[0].contains("attrs"), "{err}");
    // The rerun runs only the halted items (each on its work branch: a halted in-place item
    // would leave the checkout dirty and nothing would run again): `attrs`'s and `idna`'s gates
    // passed for an item of theirs in the run before, which clears them; `solo`'s never passed.
    let (code, err) = apply(root, &["--rerun", "failed"]);
    assert_eq!(code, Some(1), "{err}");
    let report = latest_report(&root.join("runner-reports"));
    assert_eq!(
        report["counts"]["halted"], 5,
        "the halted items ran again: {report:#}"
    );
    assert_eq!(suspects(&report), solo(), "{report:#}");
}
