//! Every report format from one drain with every outcome: snapshots of each (ids, times and
//! paths normalised), JUnit read by outside consumers (xmllint against `tests/junit/junit.xsd`,
//! Python's junitparser), the HTML pages rendered in headless Chromium, and a secret that appears
//! in no file of the reports folder or the event stream.
//!
//! The outside tools are installed by `.ci/run`. Where one is missing outside CI the check says
//! so on stderr and is skipped; in CI (`CI` set) a missing tool fails the test.

use crate::common;

use common::{have, repo, runner, stderr};
use std::path::{Path, PathBuf};
use std::process::Command;

const SECRET: &str = "s3cr3t-value-42";

/// A manifest whose drain ends with an item of every outcome: `good` completes, `broken`'s worker
/// cannot start (failed), `bad` fails its gate (halted), which stalls the run so `bad-too` and
/// `later` are cancelled; `dirty/in-place` is held (dirty tree) and `gone/missing` skipped.
fn every_outcome(root: &Path) {
    repo(&root.join("app"));
    // A file the worker is asked to run but may not execute.
    std::fs::write(root.join("noexec"), "#!/bin/sh\nexit 0\n").unwrap();
    let dirty = repo(&root.join("dirty"));
    std::fs::write(dirty.join("README.md"), "an edit nobody committed\n").unwrap();
    std::fs::write(
        root.join("m.yaml"),
        r#"version: 1
name: every-outcome
capacity: {workers: 1}
repositories: [{path: app}, {path: dirty}, {path: gone}]
env:
  secrets: [API_TOKEN]
  # The gate prints it too: its redaction is what is shown.
  roles: {API_TOKEN: [worker, gate]}
# What confines items depends on the machine: the reports are compared as written elsewhere.
sandbox: {mode: off}
worker:
  run: ["{item.exe}", "-c", 'echo "token=$API_TOKEN"; echo "$RUNNER_ITEM" > "work-$RUNNER_ITEM.txt"']
gates:
  - name: test
    run: 'case "$RUNNER_ITEM" in bad*) printf "using %s" "$(echo $API_TOKEN | cut -c1-6)"; sleep 0.1; echo "$API_TOKEN" | cut -c7-; echo "assertion failed at src/lib.rs:7"; exit 1;; esac'
stall: {after: 2}
items:
  - {repo: app, id: good, branch: "runner/good", vars: {exe: sh}}
  - {repo: app, id: broken, branch: "runner/broken", vars: {exe: ./noexec}}
  - {repo: app, id: bad, branch: "runner/bad", vars: {exe: sh}}
  - {repo: app, id: bad-too, branch: "runner/bad-too", vars: {exe: sh}}
  - {repo: app, id: later, branch: "runner/later", vars: {exe: sh}}
  - {repo: dirty, id: in-place, vars: {exe: sh}}
  - {repo: gone, id: missing, vars: {exe: sh}}
"#,
    )
    .unwrap();
}

fn apply(root: &Path, extra: &[&str]) -> std::process::Output {
    runner()
        .current_dir(root)
        .args(["apply", "m.yaml", "--no-progress"])
        .args(extra)
        .env("API_TOKEN", SECRET)
        .env("RUNNER_CONTAINMENT", "process-group")
        .output()
        .unwrap()
}

/// The report's text with what differs from run to run replaced: the temporary folder, run ids,
/// timestamps, commits, durations and the timeline's coordinates.
fn normalise(text: &str, root: &Path) -> String {
    let root = std::fs::canonicalize(root).unwrap();
    let mut s = text
        .replace(&root.display().to_string(), "<root>")
        .replace(&root.display().to_string().replace('/', "\\/"), "<root>");
    let rules: &[(&str, &str)] = &[
        (r"\d{8}T\d{6}Z-[0-9a-f]{6}", "<run>"),
        (
            r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})",
            "<time>",
        ),
        (r"\b[0-9a-f]{40}\b", "<commit>"),
        (r"(commit `?)[0-9a-f]{10}\b", "${1}<commit>"),
        (
            r#""(duration_ms|lease_ms|backoff_ms|waited_ms)": \d+"#,
            r#""$1": 0"#,
        ),
        (r#"time="[\d.]+""#, r#"time="0""#),
        (r"\b\d+(\.\d+)? ?(ms|s|min|h)\b", "<dur>"),
        (r"<dur> \d{2} (s|min)\b", "<dur>"),
        // Where the timeline's bars and ticks fall depends on how long things took.
        (r#"\b(x|x1|x2|width|cx|cy|points)="[^"]*""#, r#"$1="""#),
        (r#"<line class="axis"[^\n]*\n"#, ""),
    ];
    for (pattern, with) in rules {
        s = regex::Regex::new(pattern)
            .unwrap()
            .replace_all(&s, *with)
            .into_owned();
    }
    s
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_symlink() {
            continue;
        }
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn a_drain_with_every_outcome_writes_every_format() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    every_outcome(root);
    let events = root.join("events.jsonl");
    let out = apply(root, &["--events", events.to_str().unwrap()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "the run stalls: {err}");
    assert!(
        err.contains("1 completed, 1 halted, 1 failed, 1 skipped (repo-not-found 1), 1 held (dirty-tree 1), 2 cancelled"),
        "{err}"
    );
    let run_dir = root.join("runner-reports/latest");
    for (file, name) in [
        ("report.json", "report.json"),
        ("summary.md", "summary.md"),
        ("junit.xml", "junit.xml"),
        ("index.html", "index.html"),
    ] {
        let text =
            std::fs::read_to_string(run_dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        insta::assert_snapshot!(name, normalise(&text, root));
    }
    let history = std::fs::read_to_string(root.join("runner-reports/index.html")).unwrap();
    insta::assert_snapshot!("history.html", normalise(&history, root));

    // The secret, printed whole by the worker and in two writes by a gate, is nowhere.
    let mut looked = files_under(&root.join("runner-reports"));
    looked.push(events.clone());
    assert!(looked.len() >= 8, "{looked:?}");
    for f in &looked {
        let bytes = std::fs::read(f).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains(SECRET), "the secret is in {}", f.display());
        assert!(
            !text.contains("value-42"),
            "a piece of the secret is in {}",
            f.display()
        );
    }
    let tail = std::fs::read_to_string(&events).unwrap();
    assert!(tail.contains("using ***"), "redacted, not dropped: {tail}");

    // `runner report` renders the same files from the ledger.
    let again = root.join("again");
    let out = runner()
        .current_dir(root)
        .args([
            "report",
            "latest",
            "--manifest",
            "m.yaml",
            "--format",
            "all",
        ])
        .args(["--out", again.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for file in ["report.json", "summary.md", "junit.xml", "index.html"] {
        assert_eq!(
            std::fs::read_to_string(again.join(file)).unwrap(),
            std::fs::read_to_string(run_dir.join(file)).unwrap(),
            "{file} re-rendered from the ledger"
        );
    }
    let html = runner()
        .current_dir(root)
        .args([
            "report",
            "latest",
            "--manifest",
            "m.yaml",
            "--format",
            "html",
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&html.stdout),
        std::fs::read_to_string(run_dir.join("index.html")).unwrap()
    );
}

#[test]
fn only_the_listed_formats_are_written() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    every_outcome(root);
    let m = std::fs::read_to_string(root.join("m.yaml")).unwrap();
    std::fs::write(
        root.join("m.yaml"),
        m.replace("stall:", "reports: {formats: [junit, html]}\nstall:"),
    )
    .unwrap();
    let out = apply(root, &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let run_dir = root.join("runner-reports/latest");
    let mut names: Vec<String> = std::fs::read_dir(&run_dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    // No worker wrote `$RUNNER_USAGE`: no usage folder either.
    assert_eq!(names, ["index.html", "junit.xml", "logs"]);
    assert!(root.join("runner-reports/index.html").is_file());
}

#[test]
fn junit_is_accepted_by_outside_junit_consumers() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    every_outcome(root);
    let out = apply(root, &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let xml = std::fs::canonicalize(root.join("runner-reports/latest/junit.xml")).unwrap();
    let xsd = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/junit/junit.xsd");
    if have("xmllint", Command::new("xmllint").arg("--version")) {
        let out = Command::new("xmllint")
            .args(["--noout", "--schema"])
            .arg(&xsd)
            .arg(&xml)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "xmllint: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    if have(
        "junitparser (Python)",
        Command::new("python3").args(["-c", "import junitparser"]),
    ) {
        // What a JUnit consumer makes of the file: per suite its counts, per case its result.
        let script = r#"
import sys
from junitparser import JUnitXml, Failure, Error, Skipped
for suite in JUnitXml.fromfile(sys.argv[1]):
    print(f"suite {suite.name} tests={suite.tests} failures={suite.failures} errors={suite.errors} skipped={suite.skipped}")
    for case in suite:
        kinds = [type(r).__name__ for r in case.result]
        print(f"  case {case.name} {','.join(kinds) or 'passed'} {(case.result[0].message or '') if case.result else ''}")
"#;
        let out = Command::new("python3")
            .args(["-c", script])
            .arg(&xml)
            .output()
            .unwrap();
        let seen = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{seen}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let seen = normalise(&seen, root);
        for line in [
            "suite app tests=5 failures=1 errors=1 skipped=2",
            "  case good passed",
            "  case broken Error cannot start `<root>/noexec`: Permission denied (os error 13)",
            "  case bad Failure attempts-exhausted: gate `test` failed (exit code 1)",
            "  case later Skipped cancelled: not started: the run stalled",
            "suite dirty tests=1 failures=0 errors=0 skipped=1",
            "  case in-place Skipped held: dirty-tree",
            "suite gone tests=1 failures=0 errors=0 skipped=1",
            "  case missing Skipped skipped: repo-not-found: `<root>/gone` does not exist",
        ] {
            assert!(seen.contains(line), "`{line}` in:\n{seen}");
        }
    }
}

/// Two slots, an item retried after a provider's rate limit, one that halts at its tests while
/// `fail-login` exists: the timeline `docs/reports.md` shows.
fn busy_drain(root: &Path) {
    for r in ["api", "web", "docs"] {
        repo(&root.join(r));
    }
    std::fs::write(
        root.join("m.yaml"),
        format!(
            r#"version: 1
name: nightly
capacity: {{workers: 2}}
repositories: [{{path: api}}, {{path: web}}, {{path: docs}}]
models:
  primary: sonnet
  threshold: 5
  provider_failure: {{patterns: ["rate limit exceeded"]}}
  backoff: {{initial: 1s, max: 1s}}
worker:
  run: |
    case "$RUNNER_ITEM" in
      limits) if [ "$RUNNER_ATTEMPT" = 1 ]; then sleep 0.3; echo "Error: rate limit exceeded, retry after 1s"; exit 1; fi; sleep 0.5;;
      parser) sleep 0.9;;
      *) sleep 0.4;;
    esac
    date +%s%N > "work-$RUNNER_ITEM.txt"
gates:
  - name: build
    run: sleep 0.2
  - name: test
    # Judges by a file outside the tree (a flaky test's stand-in): its verdicts are not reused.
    cache: false
    run: 'sleep 0.2; if [ "$RUNNER_ITEM" = login ] && [ -e {flag} ]; then echo "test login::expired_session failed at src/login.rs:42"; exit 1; fi'
items:
  - {{repo: api, id: parser, branch: "runner/parser"}}
  - {{repo: api, id: limits, branch: "runner/limits"}}
  - {{repo: web, id: login, branch: "runner/login"}}
  - {{repo: web, id: theme, branch: "runner/theme"}}
  - {{repo: docs, id: intro, branch: "runner/intro"}}
"#,
            flag = root.join("fail-login").display()
        ),
    )
    .unwrap();
}

fn render(page: &Path, shot: Option<&Path>) -> serde_json::Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/render.mjs");
    let mut c = Command::new("node");
    c.arg(&script).arg(page);
    if let Some(s) = shot {
        c.arg(s);
    }
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "render {}: {}",
        page.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn html_pages_render_in_chromium_with_a_lane_per_slot_and_no_request() {
    let browser =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/node_modules/playwright-core");
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    if !have(
        "node with playwright-core (npm ci --prefix tests/browser)",
        Command::new("test").arg("-d").arg(&browser),
    ) || !have("chromium", Command::new(&chromium).arg("--version"))
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    busy_drain(root);
    let flag = root.join("fail-login");
    let run = |fail_login: bool, extra: &[&str]| {
        if fail_login {
            std::fs::write(&flag, "").unwrap();
        } else {
            let _ = std::fs::remove_file(&flag);
        }
        let out = runner()
            .current_dir(root)
            .args(["apply", "m.yaml", "--no-progress"])
            .args(extra)
            .env("RUNNER_CONTAINMENT", "process-group")
            .output()
            .unwrap();
        (out.status.code(), stderr(&out))
    };
    // The history: login halts, completes, then halts again (flaky); the last run is the one the
    // timeline shows.
    let (code, err) = run(true, &[]);
    assert_eq!(code, Some(1), "{err}");
    let (code, err) = run(false, &["--rerun", "all"]);
    assert_eq!(code, Some(0), "{err}");
    let (code, err) = run(true, &["--rerun", "all"]);
    assert_eq!(code, Some(1), "{err}");

    let shot = std::env::var_os("RUNNER_UPDATE_SCREENSHOT")
        .map(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/report.png"))
        .unwrap_or_else(|| root.join("report.png"));
    let seen = render(&root.join("runner-reports/latest/index.html"), Some(&shot));
    let report = common::latest_report(&root.join("runner-reports"));
    let attempts: usize = report["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["attempts"].as_array().unwrap().len())
        .sum();
    for mode in ["light", "dark", "noscript"] {
        let s = &seen[mode];
        assert_eq!(s["requests"], serde_json::json!([]), "{mode}: {s}");
        assert_eq!(s["errors"], serde_json::json!([]), "{mode}: {s}");
        assert_eq!(s["lanes"], 2, "a lane per slot ({mode}): {s}");
        assert_eq!(s["laneLabels"], serde_json::json!(["slot 1", "slot 2"]));
        assert_eq!(s["bars"], attempts, "a bar per attempt ({mode}): {s}");
        assert_eq!(
            s["backoffs"], 1,
            "the rate-limited item's rest ({mode}): {s}"
        );
        assert!(s["gateSegments"].as_u64().unwrap() >= 8, "{mode}: {s}");
        assert_eq!(s["items"], 5, "{mode}: {s}");
        assert_eq!(
            s["visibleItems"], 5,
            "every row reads without filters ({mode}): {s}"
        );
        assert_eq!(
            s["scrollsSideways"], false,
            "fits a laptop screen ({mode}): {s}"
        );
        assert_eq!(s["labelsCut"], serde_json::json!([]), "{mode}: {s}");
        assert_eq!(s["backticks"], serde_json::json!([]), "{mode}: {s}");
        // The ending is never named without the counts.
        assert!(
            s["heading"]
                .as_str()
                .unwrap()
                .ends_with("— drained: 4 completed, 1 halted"),
            "{mode}: {s}"
        );
    }
    assert_eq!(seen["light"]["filtersShown"], true);
    assert_eq!(
        seen["noscript"]["filtersShown"], false,
        "no dead controls without script"
    );
    assert_ne!(seen["light"]["background"], seen["dark"]["background"]);
    assert_eq!(
        seen["light"]["filteredHalted"],
        serde_json::json!({"expected": 1, "shown": 1})
    );
    assert_eq!(seen["light"]["clickedOpens"], true);
    assert!(shot.is_file());

    let seen = render(&root.join("runner-reports/index.html"), None);
    for mode in ["light", "dark", "noscript"] {
        let s = &seen[mode];
        assert_eq!(s["requests"], serde_json::json!([]), "{mode}: {s}");
        assert_eq!(s["errors"], serde_json::json!([]), "{mode}: {s}");
        assert_eq!(
            s["runRows"],
            3 + 1 + 5 + 1,
            "runs and items, with headers ({mode}): {s}"
        );
        assert_eq!(s["flaky"], 1, "login flipped back and forth ({mode}): {s}");
        assert_eq!(s["trend"], true);
        assert_eq!(s["labelsCut"], serde_json::json!([]), "{mode}: {s}");
        let labels = s["trendLabels"].as_array().unwrap();
        for want in ["items", "time", "0", "5", "oldest run", "newest run"] {
            assert!(
                labels.iter().any(|l| l == want),
                "no `{want}` label ({mode}): {s}"
            );
        }
    }
}

/// A log the disk will not take whole (here a file-size limit stands in for a full disk) is told
/// on stderr, in every report and by the exit code (4, runner's own failure); the item's verdict
/// stands, and the log keeps what was written before.
#[test]
fn a_log_that_cannot_be_written_whole_is_told_and_the_run_exits_4() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    repo(&root.join("app"));
    std::fs::write(
        root.join("m.yaml"),
        r#"version: 1
name: loud
repositories: [{path: app}]
worker:
  run: 'i=0; while [ $i -lt 20000 ]; do echo "line $i of a long output ..................................."; i=$((i+1)); done'
items: [{repo: app, id: loud}]
"#,
    )
    .unwrap();
    // `ulimit -f 600`: 300 KiB in POSIX's 512-byte blocks (600 KiB where a shell counts KiB),
    // room for the ledger and the reports, not for the worker's 1.2 MB. runner ignores SIGXFSZ
    // itself (it would otherwise die at the first write past the limit, exit 153, no report): a
    // write past the limit fails as one on a full disk does.
    let out = Command::new("sh")
        .current_dir(root)
        .args([
            "-c",
            r#"ulimit -f 600 && exec "$0" apply m.yaml --no-progress"#,
            env!("CARGO_BIN_EXE_runner"),
        ])
        .env("NO_COLOR", "1")
        .env_remove("RUNNER_ROLE")
        .env_remove("RUNNER_STATE")
        .env_remove("RUNNER_CONTAINMENT")
        .env_remove("RUNNER_CGROUP")
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(
        err.contains(
            "warning: app/loud attempt 1: the worker's log is incomplete: cannot write it past"
        ),
        "{err}"
    );
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.contains(
            "exit 4: a log could not be written whole (app/loud attempt 1, the worker's)"
        ),
        "{err}"
    );
    let reports = root.join("runner-reports/latest");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(reports.join("report.json")).unwrap())
            .unwrap();
    let item = &report["items"][0];
    assert_eq!(item["outcome"], "completed", "{report}");
    let worker = &item["attempts"][0]["worker"];
    let error = worker["log_error"].as_str().unwrap_or_default();
    assert!(error.contains("File too large"), "{worker}");
    let log = reports.join(worker["log"].as_str().unwrap());
    let kept = std::fs::metadata(&log).unwrap().len();
    assert!(kept > 0 && kept < 1_000_000, "{kept} bytes kept");
    assert!(error.contains(&format!("past {kept} bytes")), "{error}");
    let summary = std::fs::read_to_string(reports.join("summary.md")).unwrap();
    assert!(
        summary.contains("## Incomplete logs\n\n- `app/loud` pass 1, worker: cannot write it past"),
        "{summary}"
    );
    let html = std::fs::read_to_string(reports.join("index.html")).unwrap();
    assert!(html.contains("<strong>log incomplete</strong>: cannot write it past"));
}

#[test]
fn a_gate_answered_from_the_cache_is_drawn_on_the_timeline() {
    // A verdict reused from the cache takes 0 ms; the page still marks the gate on its attempt.
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    common::repo(&root.join("r"));
    std::fs::write(
        root.join("m.yaml"),
        "version: 1\nname: cached\nrepositories: [{path: r}]\nworker: {run: [\"true\"]}\ngates: [{name: check, run: [\"true\"]}]\nitems: [{repo: r, id: a}]\n",
    )
    .unwrap();
    let first = common::run_in(root, &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(first.status.code(), Some(0), "{}", common::stderr(&first));
    let again = common::run_in(
        root,
        &["apply", "m.yaml", "--no-progress", "--rerun", "all"],
    );
    assert_eq!(again.status.code(), Some(0), "{}", common::stderr(&again));
    let report = common::latest_report(&root.join("runner-reports"));
    let gate = &report["items"][0]["attempts"][0]["gates"][0];
    assert!(gate["cached"].is_object(), "{gate:#}");
    let page = std::fs::read_to_string(root.join("runner-reports/latest/index.html")).unwrap();
    assert!(page.contains("<rect class=\"gate gate-passed\""), "{page}");
}

#[test]
fn a_flooding_worker_fills_its_log_to_the_limit_and_no_further() {
    // A worker gone wrong prints without end: its log stops at `RUNNER_LOG_LIMIT`, says so, and
    // ends with the output's last lines; the run's verdict is the item's, not a failure of
    // runner's (exit 0, not 4).
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    common::repo(&root.join("app"));
    std::fs::write(
        root.join("m.yaml"),
        "version: 1\nname: flood\nrepositories: [{path: app}]\nworker: {run: 'seq 1 200000'}\nitems: [{repo: app, id: loud}]\n",
    )
    .unwrap();
    let run = |limit: &str| {
        common::runner()
            .current_dir(root)
            .args(["apply", "m.yaml", "--no-progress", "--rerun", "all"])
            .env("RUNNER_LOG_LIMIT", limit)
            .output()
            .unwrap()
    };
    let out = run("8K");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("warning: app/loud attempt 1: the worker printed more than its log keeps"),
        "{err}"
    );
    let reports = root.join("runner-reports/latest");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(reports.join("report.json")).unwrap())
            .unwrap();
    let worker = &report["items"][0]["attempts"][0]["worker"];
    let total: u64 = (1..=200_000u64)
        .map(|i| i.to_string().len() as u64 + 1)
        .sum();
    let unlogged = worker["unlogged_bytes"].as_u64().expect("counted");
    assert!(worker.get("log_error").is_none(), "{worker}");
    let log = std::fs::read_to_string(reports.join(worker["log"].as_str().unwrap())).unwrap();
    let (head, rest) = log.split_once("[runner: the log stops here").unwrap();
    assert!(
        head.len() <= 8192 && head.starts_with("1\n2\n3\n"),
        "{}",
        head.len()
    );
    assert_eq!(
        head.len() as u64 + unlogged,
        total,
        "what is not in the head is counted"
    );
    assert!(
        rest.ends_with("199999\n200000\n"),
        "the last lines end the log"
    );
    assert!(log.len() < 8192 + 70_000, "{} bytes", log.len());
    let summary = std::fs::read_to_string(reports.join("summary.md")).unwrap();
    assert!(
        summary.contains(&format!(
            "## Incomplete logs\n\n- `app/loud` pass 1, worker: {unlogged} bytes of output past its limit"
        )),
        "{summary}"
    );
    // A limit that is no size is a bad invocation.
    for bad in ["lots", "0", "12X"] {
        let out = run(bad);
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("RUNNER_LOG_LIMIT"),
            "{}",
            stderr(&out)
        );
    }
}

/// Output that tries to break out of the reports: a Markdown fence, a heading, raw HTML, a
/// `javascript:` link, control bytes and characters XML forbids. `summary.md` read back by a
/// Markdown renderer shows it as text; `junit.xml` passes xmllint.
#[test]
fn hostile_output_stays_text_in_every_report() {
    let markdown_ok = have(
        "Python-Markdown",
        Command::new("python3").args(["-c", "import markdown"]),
    );
    let xmllint_ok = have("xmllint", Command::new("xmllint").arg("--version"));
    if !markdown_ok && !xmllint_ok {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    repo(&root.join("app"));
    std::fs::write(
        root.join("out.txt"),
        "```\n# Pwned heading\n<script>alert(1)</script>\n[click](javascript:alert(1))\n\u{0}\u{1b}[2J bell\u{7} \u{fffe}\u{ffff} end\n````\n",
    )
    .unwrap();
    std::fs::write(
        root.join("m.yaml"),
        format!(
            "version: 1\nname: hostile\nrepositories: [{{path: app}}]\nmodels: {{primary: \"<img src=x onerror=alert(1)>|m\"}}\nworker: {{run: 'cat {out}; exit 1'}}\nitems: [{{repo: app, id: a}}]\n",
            out = root.join("out.txt").display()
        ),
    )
    .unwrap();
    let out = apply(root, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let latest = root.join("runner-reports/latest");
    if markdown_ok {
        let rendered = Command::new("python3")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/schemas/render_markdown.py"))
            .arg(latest.join("summary.md"))
            .output()
            .unwrap();
        assert!(rendered.status.success());
        let html = String::from_utf8_lossy(&rendered.stdout);
        for bad in [
            "<script",
            "<h1>Pwned",
            "href=\"javascript",
            "<img",
            "onerror=alert(1)>",
        ] {
            assert!(!html.contains(bad), "`{bad}` rendered live:\n{html}");
        }
        assert!(
            html.contains("# Pwned heading"),
            "the output is shown:\n{html}"
        );
        let md = std::fs::read_to_string(latest.join("summary.md")).unwrap();
        assert!(!md.contains('\u{0}') && !md.contains('\u{1b}'), "{md:?}");
    }
    if xmllint_ok {
        let lint = Command::new("xmllint")
            .arg("--noout")
            .arg(latest.join("junit.xml"))
            .output()
            .unwrap();
        assert!(
            lint.status.success(),
            "{}",
            String::from_utf8_lossy(&lint.stderr)
        );
    }
}
