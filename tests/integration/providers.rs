//! Provider failures as a run of real agents meets them: rests between attempts (back-off and
//! retry hints) that free the item's slot.

use crate::common;

use common::{latest_report, repo, report_item, run_in, stderr};
use std::path::Path;

/// Lines `<tag> <start ns> <end ns>` a worker appended to `log`.
fn stamps(log: &Path) -> Vec<(String, u128, u128)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((
                f.next()?.to_string(),
                f.next()?.parse().ok()?,
                f.next()?.parse().ok()?,
            ))
        })
        .collect()
}

#[test]
fn a_rate_limited_item_rests_as_asked_and_frees_its_slot_meanwhile() {
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("a"));
    repo(&dir.path().join("b"));
    let log = dir.path().join("times.log");
    // Item `limited` is rate limited on its first two attempts (asking for a second's rest);
    // item `other`, in another repository, needs the one slot meanwhile.
    std::fs::write(
        dir.path().join("m.yaml"),
        format!(
            r#"version: 1
name: backoff
capacity: {{workers: 1}}
repositories: [{{path: a}}, {{path: b}}]
models:
  primary: m1
  threshold: 5
  provider_failure: {{patterns: ["rate limit exceeded"]}}
  backoff: {{initial: 1s, max: 5s}}
worker:
  run: |
    s=$(date +%s%N)
    if [ "$RUNNER_ITEM" = other ]; then sleep 0.3; echo "other $s $(date +%s%N)" >> {log}; exit 0; fi
    echo "limited $s $s" >> {log}
    if [ "$RUNNER_ATTEMPT" -lt 3 ]; then echo "Error: rate limit exceeded. Retry after 1s"; exit 1; fi
items:
  - {{repo: a, id: limited}}
  - {{repo: b, id: other}}
"#,
            log = log.display()
        ),
    )
    .unwrap();
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("resting 1.0s before the next (as it asked)"),
        "{err}"
    );
    let st = stamps(&log);
    let limited: Vec<u128> = st
        .iter()
        .filter(|s| s.0 == "limited")
        .map(|s| s.1)
        .collect();
    assert_eq!(limited.len(), 3, "{st:?}");
    for pair in limited.windows(2) {
        assert!(
            pair[1] - pair[0] >= 1_000_000_000,
            "attempts {} ms apart, under the second asked for",
            (pair[1] - pair[0]) / 1_000_000
        );
    }
    // The other item ran in the freed slot, inside the first rest.
    let other = st.iter().find(|s| s.0 == "other").expect("other ran");
    assert!(
        other.1 > limited[0] && other.2 < limited[1],
        "the other item did not run while `limited` rested: {st:?}"
    );
    let report = latest_report(&dir.path().join("runner-reports"));
    let item = report_item(&report, "id", "limited");
    assert_eq!(item["outcome"], "completed", "{item:#}");
    let attempts = item["attempts"].as_array().unwrap();
    assert!(attempts[0].get("waited_ms").is_none(), "{item:#}");
    for a in &attempts[1..] {
        assert!(a["waited_ms"].as_u64().unwrap() >= 1000, "{item:#}");
    }
    assert!(
        item["waited"]["backoff_ms"].as_u64().unwrap() >= 2000,
        "{item:#}"
    );
}

#[test]
fn a_stop_ends_a_resting_item_at_once() {
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("a"));
    std::fs::write(
        dir.path().join("m.yaml"),
        r#"version: 1
name: rest-stop
repositories: [{path: a}]
models: {primary: m1, threshold: 5, backoff: {initial: 10m, max: 10m}}
worker:
  run: 'echo "overloaded; retry after 600s"; exit 75'
items: [{repo: a, id: x}]
"#,
    )
    .unwrap();
    let child = common::runner()
        .current_dir(dir.path())
        .args(["apply", "m.yaml", "--no-progress", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // `status` shows the item resting, and until when.
    assert!(common::wait_for(20, || {
        let status = common::stdout(&run_in(dir.path(), &["status", "m.yaml"]));
        status.contains("a/x") && status.contains("resting after a provider failure until")
    }));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["items"][0]["outcome"], "cancelled", "{report:#}");
}

#[test]
fn the_budget_stops_admission_once_reported_usage_reaches_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut repos = String::new();
    let mut items = String::new();
    for i in 0..6 {
        repo(&dir.path().join(format!("r{i}")));
        repos.push_str(&format!("  - path: r{i}\n"));
        items.push_str(&format!("  - {{repo: r{i}, id: i{i}}}\n"));
    }
    // Each worker says it cost a dollar.
    let script = dir.path().join("usage.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\necho '{\"input_tokens\": 1000, \"output_tokens\": 200, \"cost_usd\": 1.0}' > \"$RUNNER_USAGE\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(
        dir.path().join("m.yaml"),
        format!(
            r#"version: 1
name: budget
capacity: {{workers: 1}}
repositories:
{repos}models: {{primary: m1}}
worker:
  run: ["./usage.sh"]
budget: {{cost_usd: 3}}
items:
{items}"#
        ),
    )
    .unwrap();
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(err.contains("the budget was spent"), "{err}");
    let report = latest_report(&dir.path().join("runner-reports"));
    assert_eq!(report["ending"], "budget", "{report:#}");
    let items = report["items"].as_array().unwrap();
    let ran = items.iter().filter(|i| i["outcome"] == "completed").count();
    assert_eq!(ran, 3, "exactly three items ran: {report:#}");
    for i in items.iter().filter(|i| i["outcome"] != "completed") {
        assert_eq!(i["outcome"], "cancelled");
        assert_eq!(i["cause"], "not started: the budget was spent");
    }
    assert_eq!(report["usage"]["total"]["cost_usd"], 3.0, "{report:#}");
    assert_eq!(report["usage"]["total"]["input_tokens"], 3000);
    assert_eq!(report["usage"]["by_model"]["m1"]["output_tokens"], 600);
    assert_eq!(
        report_item(&report, "id", "i0")["usage"]["cost_usd"],
        1.0,
        "{report:#}"
    );
    let summary =
        std::fs::read_to_string(dir.path().join("runner-reports/latest/summary.md")).unwrap();
    assert!(summary.contains("**Usage:** $3.00"), "{summary}");
    let status = common::stdout(&run_in(dir.path(), &["status", "m.yaml"]));
    assert!(
        status.contains("[$3.00, 3000 in / 600 out tokens]"),
        "{status}"
    );
}

#[test]
fn after_the_threshold_new_items_start_on_the_next_model() {
    let dir = tempfile::tempdir().unwrap();
    let mut repos = String::new();
    let mut items = String::new();
    for i in 0..4 {
        repo(&dir.path().join(format!("r{i}")));
        repos.push_str(&format!("  - path: r{i}\n"));
        items.push_str(&format!("  - {{repo: r{i}, id: i{i}}}\n"));
    }
    // The primary's provider is down for everyone; the fallback works.
    std::fs::write(
        dir.path().join("m.yaml"),
        format!(
            r#"version: 1
name: health
capacity: {{workers: 1}}
repositories:
{repos}models: {{primary: m1, fallbacks: [m2], threshold: 2, backoff: {{initial: 10ms, max: 20ms}}}}
worker:
  run: 'if [ "$RUNNER_MODEL" = m1 ]; then echo "503 overloaded"; exit 75; fi'
items:
{items}"#
        ),
    )
    .unwrap();
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let report = latest_report(&dir.path().join("runner-reports"));
    // The first two items met the outage (the second started in the slot the first left while
    // it rested); the items started after the demotion begin on the fallback.
    let first = report_item(&report, "id", "i0");
    let models: Vec<&str> = first["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["model"].as_str().unwrap())
        .collect();
    assert_eq!(models, ["m1", "m1", "m2"], "{first:#}");
    for id in ["i2", "i3"] {
        let it = report_item(&report, "id", id);
        assert_eq!(it["attempts"][0]["model"], "m2", "{it:#}");
        assert_eq!(it["attempts"].as_array().unwrap().len(), 1, "{it:#}");
    }
    assert_eq!(report["demoted"][0]["model"], "m1", "{report:#}");
    assert_eq!(report["demoted"][0]["failures"], 2);
}

#[test]
fn without_a_hint_rests_stay_within_the_configured_back_off() {
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("a"));
    std::fs::write(
        dir.path().join("m.yaml"),
        r#"version: 1
name: jitter
repositories: [{path: a}]
models:
  primary: m1
  threshold: 9
  provider_failure: {patterns: ["rate limit exceeded"]}
  backoff: {initial: 40ms, max: 100ms}
worker:
  run: 'if [ "$RUNNER_ATTEMPT" -lt 8 ]; then echo "rate limit exceeded"; exit 1; fi'
items: [{repo: a, id: x}]
"#,
    )
    .unwrap();
    let out = run_in(
        dir.path(),
        &[
            "apply",
            "m.yaml",
            "--no-progress",
            "--events",
            "events.ndjson",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // The rests runner chose, read from its own event stream (no clock involved): the k-th is
    // drawn from [0, min(max, initial × 2^(k-1))].
    let text = std::fs::read_to_string(dir.path().join("events.ndjson")).unwrap();
    let mut seen = 0;
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if v["event"] != "resting" {
            continue;
        }
        let n = v["n"].as_u64().unwrap() as u32;
        let wait = v["wait"]["secs"].as_u64().unwrap() * 1000
            + v["wait"]["nanos"].as_u64().unwrap() / 1_000_000;
        let cap = (40u64 << (n - 1)).min(100);
        assert!(wait <= cap, "rest {n} was {wait} ms, over its cap {cap} ms");
        seen += 1;
    }
    // A rest of 0 ms is not announced; seven failures announce most of theirs.
    assert!(seen >= 3, "only {seen} rests in:\n{text}");
}

#[test]
fn a_worker_that_used_another_model_is_flagged() {
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("a"));
    let script = dir.path().join("agent.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\necho '{\"cost_usd\": 0.5, \"model\": \"m1-mini\"}' > \"$RUNNER_USAGE\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(
        dir.path().join("m.yaml"),
        "version: 1\nname: downgrade\nrepositories: [{path: a}]\nmodels: {primary: m1}\nworker: {run: [\"./agent.sh\"]}\nitems: [{repo: a, id: x}]\n",
    )
    .unwrap();
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = latest_report(&dir.path().join("runner-reports"));
    let attempt = &report["items"][0]["attempts"][0];
    assert_eq!(attempt["model"], "m1");
    assert_eq!(attempt["model_used"], "m1-mini", "{attempt:#}");
    assert!(
        report["warnings"]
            .to_string()
            .contains("asked for model `m1`, the worker used `m1-mini`"),
        "{report:#}"
    );
}

/// A rest after a provider failure is reported as long as it was; the wait for a free slot
/// after it, apart.
#[test]
fn back_off_is_reported_apart_from_the_wait_for_a_free_slot() {
    let dir = tempfile::tempdir().unwrap();
    for r in ["a", "b"] {
        common::repo(&dir.path().join(r));
    }
    let flag = dir.path().join("failed-once");
    std::fs::write(
        dir.path().join("m.yaml"),
        format!(
            "version: 1\nname: slot\ncapacity: {{workers: 1}}\nrepositories: [{{path: a}}, {{path: b}}]\nmodels: {{primary: m, fallbacks: [n], threshold: 5, backoff: {{initial: 1s, max: 1s}}}}\nworker: {{run: 'if [ \"$RUNNER_REPO\" = a ] && [ ! -e {f} ]; then touch {f}; exit 75; fi; if [ \"$RUNNER_REPO\" = b ]; then sleep 3; fi'}}\nitems: [{{repo: a, id: x}}, {{repo: b, id: y}}]\n",
            f = flag.display()
        ),
    )
    .unwrap();
    let out = common::run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    let report = common::latest_report(&dir.path().join("runner-reports"));
    let x = common::report_item(&report, "id", "x");
    let second = &x["attempts"][1];
    // The rest is long enough for `y` to be admitted in it on a loaded machine (a lease found
    // busy for an instant is asked again 100 ms later).
    assert!(second["waited_ms"].as_u64().unwrap() <= 1000, "{x:#}");
    assert!(second["slot_wait_ms"].as_u64().unwrap() >= 1000, "{x:#}");
    assert!(x["waited"]["backoff_ms"].as_u64().unwrap() <= 1000, "{x:#}");
    assert!(x["waited"]["slot_ms"].as_u64().unwrap() >= 1000, "{x:#}");
    // The timeline has the run's one slot, its bars labelled with their items.
    let page =
        std::fs::read_to_string(dir.path().join("runner-reports/latest/index.html")).unwrap();
    assert!(page.contains(">slot 1</text>") && !page.contains(">slot 2</text>"));
    assert!(page.contains("class=\"bar-label\""), "no bar labelled");
}

/// `apply` in `dir` with the event stream written beside the manifest: its output, and the
/// stream's path.
fn apply_with_events(dir: &Path) -> (std::process::Output, std::path::PathBuf) {
    let events = dir.join("events.jsonl");
    let out = run_in(
        dir,
        &[
            "apply",
            "m.yaml",
            "--no-progress",
            "--events",
            events.to_str().unwrap(),
        ],
    );
    (out, events)
}

/// The latest report and the event stream validate against their schemas.
fn validates(dir: &Path, events: &Path) {
    common::validates("report", &[dir.join("runner-reports/latest/report.json")]);
    common::validates("events", &[events.to_path_buf()]);
}

/// A manifest over `n` repositories with one item each, a worker and a chain.
fn fleet(dir: &Path, n: usize, models: &str, worker: &str) {
    let mut repos = String::new();
    let mut items = String::new();
    for i in 0..n {
        repo(&dir.join(format!("r{i}")));
        repos.push_str(&format!("  - path: r{i}\n"));
        items.push_str(&format!("  - {{repo: r{i}, id: i{i}}}\n"));
    }
    std::fs::write(
        dir.join("m.yaml"),
        format!(
            "version: 1\nname: keys\ncapacity: {{workers: 1}}\nrepositories:\n{repos}models: {models}\nworker:\n  run: '{worker}'\nitems:\n{items}"
        ),
    )
    .unwrap();
}

#[test]
fn a_refused_key_is_not_retried_and_its_model_is_dropped_for_every_item() {
    let dir = tempfile::tempdir().unwrap();
    // m1's key is refused; m2 works. The worker counts its runs per model.
    fleet(
        dir.path(),
        4,
        "{primary: m1, fallbacks: [m2], threshold: 3, backoff: {initial: 5s, max: 5s}}",
        r#"echo "$RUNNER_MODEL" >> ../calls; if [ "$RUNNER_MODEL" = m1 ]; then echo "runner adapter: the provider refused the key (authentication): 401 invalid x-api-key"; exit 77; fi"#,
    );
    let started = std::time::Instant::now();
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    // Neither rested nor retried on m1: one call of m1 in all, then m2 for every item.
    let calls = std::fs::read_to_string(dir.path().join("calls")).unwrap();
    assert_eq!(calls, "m1\nm2\nm2\nm2\nm2\n", "{err}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "no back-off was taken"
    );
    assert!(
        err.contains("the provider refused model m1 (the provider refused the key (authentication): 401 invalid x-api-key)"),
        "{err}"
    );
    let report = latest_report(&dir.path().join("runner-reports"));
    assert_eq!(report["refused"][0]["model"], "m1", "{report:#}");
    assert_eq!(report["refused"][0]["item"], "r0/i0");
    assert_eq!(report["counts"]["completed"], 4);
    let first = report_item(&report, "id", "i0");
    assert_eq!(
        first["attempts"][0]["worker"]["class"], "refused",
        "{first:#}"
    );
}

#[test]
fn with_every_model_refused_nothing_more_starts_and_the_items_are_held_for_the_next_run() {
    let dir = tempfile::tempdir().unwrap();
    fleet(
        dir.path(),
        4,
        "{primary: m1, fallbacks: [m2]}",
        r#"echo "$RUNNER_MODEL" >> ../calls; if [ -e ../key-fixed ]; then exit 0; fi; case "$RUNNER_MODEL" in m1) echo "Error: 401 invalid x-api-key"; exit 77;; *) echo "runner adapter: the provider refused the key (billing): credit balance is too low"; exit 77;; esac"#,
    );
    let (out, events) = apply_with_events(dir.path());
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(6), "{err}");
    validates(dir.path(), &events);
    let last = err.lines().last().unwrap_or_default();
    assert!(last.contains("exit 6"), "{last}");
    assert!(
        last.contains("`m1` (Error: 401 invalid x-api-key)")
            && last.contains(
                "`m2` (the provider refused the key (billing): credit balance is too low)"
            ),
        "{last}"
    );
    // One item found both keys refused; no other item ran.
    let calls = std::fs::read_to_string(dir.path().join("calls")).unwrap();
    assert_eq!(calls, "m1\nm2\n", "{err}");
    let report = latest_report(&dir.path().join("runner-reports"));
    assert_eq!(report["ending"], "refused", "{report:#}");
    assert_eq!(report["counts"]["held"], 4, "{report:#}");
    for i in 0..4 {
        let it = report_item(&report, "id", &format!("i{i}"));
        assert_eq!(it["outcome"], "held", "{it:#}");
        assert_eq!(it["reason"], "provider-refused", "{it:#}");
    }
    // The key fixed, the next run takes every item.
    std::fs::write(dir.path().join("key-fixed"), "").unwrap();
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = latest_report(&dir.path().join("runner-reports"));
    assert_eq!(report["counts"]["completed"], 4, "{report:#}");
}

#[test]
fn an_exit_code_cannot_mean_both_a_provider_failure_and_a_refused_key() {
    let dir = tempfile::tempdir().unwrap();
    fleet(
        dir.path(),
        1,
        "{primary: m1, provider_failure: {exit_codes: [75, 77], refused_exit_codes: [77]}}",
        "true",
    );
    let out = run_in(dir.path(), &["validate", "m.yaml"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("exit code 77 is also a provider failure"),
        "{err}"
    );
    // Without `refused_exit_codes`, a 77 the manifest made a provider failure stays one.
    let dir = tempfile::tempdir().unwrap();
    fleet(
        dir.path(),
        1,
        "{primary: m1, fallbacks: [m2], threshold: 1, provider_failure: {exit_codes: [77]}, backoff: {initial: 0s, max: 0s}}",
        r#"if [ "$RUNNER_MODEL" = m1 ]; then exit 77; fi"#,
    );
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = latest_report(&dir.path().join("runner-reports"));
    let it = report_item(&report, "id", "i0");
    assert_eq!(it["attempts"][0]["worker"]["class"], "provider", "{it:#}");
}

#[test]
fn a_worker_ended_for_silence_says_so_wherever_its_attempt_is_shown() {
    let dir = tempfile::tempdir().unwrap();
    fleet(
        dir.path(),
        1,
        "{primary: m1, fallbacks: [m2], threshold: 1, provider_failure: {silence: 300ms}, backoff: {initial: 0s, max: 0s}}",
        r#"if [ "$RUNNER_MODEL" = m1 ]; then sleep 30; fi"#,
    );
    let (out, events) = apply_with_events(dir.path());
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("attempt 1: worker provider (no exit code; ended: no output for 300ms"),
        "{err}"
    );
    let report = latest_report(&dir.path().join("runner-reports"));
    let it = report_item(&report, "id", "i0");
    let ended = it["attempts"][0]["worker"]["ended"]
        .as_str()
        .unwrap_or_default();
    assert!(ended.starts_with("no output for 300ms"), "{it:#}");
    let stream = std::fs::read_to_string(&events).unwrap();
    assert!(
        stream.contains("\"ended\":\"no output for 300ms"),
        "{stream}"
    );
    validates(dir.path(), &events);
    // The page shows every attempt; the summary, the passes of items that did not complete. Where
    // the attempt is shown, so is why runner ended its worker.
    let latest = dir.path().join("runner-reports/latest");
    let page = std::fs::read_to_string(latest.join("index.html")).unwrap();
    assert!(page.contains("ended: no output for 300ms"), "{page}");
    let summary = std::fs::read_to_string(latest.join("summary.md")).unwrap();
    assert!(
        !summary.contains("worker provider") || summary.contains("ended: no output for 300ms"),
        "{summary}"
    );
}

#[test]
fn a_cost_the_worker_did_not_report_is_unknown_never_zero() {
    let dir = tempfile::tempdir().unwrap();
    fleet(
        dir.path(),
        2,
        "{primary: m1}",
        r#"printf "{{\"input_tokens\": 100, \"output_tokens\": 7}}" > "$RUNNER_USAGE""#,
    );
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = latest_report(&dir.path().join("runner-reports"));
    assert_eq!(report["usage"]["total"]["input_tokens"], 200, "{report:#}");
    assert!(report["usage"]["total"]["cost_usd"].is_null(), "{report:#}");
    let summary =
        std::fs::read_to_string(dir.path().join("runner-reports/latest/summary.md")).unwrap();
    assert!(
        summary.contains("**Usage:** cost unknown · 200 input tokens"),
        "{summary}"
    );
    assert!(!summary.contains("$0.00"), "{summary}");
    common::validates(
        "report",
        &[dir.path().join("runner-reports/latest/report.json")],
    );
    // With a budget, a cost that cannot be counted stops admission after the first item.
    let dir = tempfile::tempdir().unwrap();
    fleet(
        dir.path(),
        2,
        "{primary: m1}\nbudget: {cost_usd: 5}",
        r#"printf "{{\"input_tokens\": 100, \"output_tokens\": 7}}" > "$RUNNER_USAGE""#,
    );
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(err.contains("reported tokens but no cost"), "{err}");
}

#[test]
fn tokens_without_a_cost_are_priced_at_models_prices_and_count_toward_the_budget() {
    // $3 and $15 per million: each item's 100 000 input and 10 000 output tokens cost $0.45;
    // the third brings the spend to $1.35, past the $1 budget, and admission stops there.
    let dir = tempfile::tempdir().unwrap();
    fleet(
        dir.path(),
        5,
        "{primary: m1, prices: {m1: {input: 3, output: 15}}}\nbudget: {cost_usd: 1}",
        r#"printf "{{\"input_tokens\": 100000, \"output_tokens\": 10000}}" > "$RUNNER_USAGE""#,
    );
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(5), "{err}");
    let report = latest_report(&dir.path().join("runner-reports"));
    let cost = report["usage"]["total"]["cost_usd"].as_f64().unwrap();
    assert!((cost - 1.35).abs() < 1e-9, "{report:#}");
    let item = report_item(&report, "id", "i0");
    assert!(
        (item["usage"]["cost_usd"].as_f64().unwrap() - 0.45).abs() < 1e-9,
        "{item:#}"
    );
    common::validates(
        "report",
        &[dir.path().join("runner-reports/latest/report.json")],
    );
    // A cost the worker reports is its own, prices or not.
    let dir = tempfile::tempdir().unwrap();
    fleet(
        dir.path(),
        1,
        "{primary: m1, prices: {m1: {input: 3, output: 15}}}",
        r#"printf "{{\"input_tokens\": 100000, \"output_tokens\": 10000, \"cost_usd\": 0.01}}" > "$RUNNER_USAGE""#,
    );
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = latest_report(&dir.path().join("runner-reports"));
    assert_eq!(report["usage"]["total"]["cost_usd"], 0.01, "{report:#}");
}

#[test]
fn a_price_for_a_model_outside_the_chain_is_refused_by_validate() {
    let dir = tempfile::tempdir().unwrap();
    fleet(
        dir.path(),
        1,
        "{primary: m1, fallbacks: [m2], prices: {m3: {input: 3, output: 15}, m1: {input: -1, output: 2}}}",
        "true",
    );
    let out = run_in(dir.path(), &["validate", "m.yaml"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("`m3` is not a model of the chain (m1, m2)"),
        "{err}"
    );
    assert!(err.contains("must be 0 or more, found -1"), "{err}");
    assert!(err.contains("m.yaml:"), "{err}");
}

/// `fleet`, with `worker.probe` asking `question`.
fn probed_fleet(dir: &Path, n: usize, models: &str, worker: &str) {
    fleet(dir, n, models, worker);
    let m = std::fs::read_to_string(dir.join("m.yaml")).unwrap();
    std::fs::write(
        dir.join("m.yaml"),
        m.replace(
            "worker:\n",
            "worker:\n  probe: \"Reply with the word OK.\"\n",
        ),
    )
    .unwrap();
}

/// A worker that logs each run (`probe|item model task`) to `calls` and whose key for the
/// models in `refused` is refused.
fn logging_worker(calls: &Path, refused: &str) -> String {
    format!(
        r#"if [ -n "$RUNNER_PROBE" ]; then k=probe; else k=item; fi; echo "$k $RUNNER_MODEL $TASK" >> {c}; case " {refused} " in *" $RUNNER_MODEL "*) echo "runner adapter: the provider refused the key (authentication): invalid x-api-key"; exit 77;; esac"#,
        c = calls.display()
    )
}

fn calls(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn a_probe_that_finds_the_key_refused_stops_the_run_before_any_item_starts() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls");
    probed_fleet(dir.path(), 3, "{primary: m1}", &logging_worker(&log, "m1"));
    let m = std::fs::read_to_string(dir.path().join("m.yaml")).unwrap();
    std::fs::write(
        dir.path().join("m.yaml"),
        m.replace("  run: '", "  env: {TASK: \"{item.task}\"}\n  run: '")
            .replace("i0}", "i0, vars: {task: work}}")
            .replace("i1}", "i1, vars: {task: work}}")
            .replace("i2}", "i2, vars: {task: work}}"),
    )
    .unwrap();
    let before: Vec<_> = (0..3)
        .map(|i| common::tree_fingerprint(&dir.path().join(format!("r{i}"))))
        .collect();
    let (out, events) = apply_with_events(dir.path());
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(6), "{err}");
    // One probe of m1, with the question as the task; no item's worker ran.
    assert_eq!(
        calls(&log),
        vec!["probe m1 Reply with the word OK."],
        "{err}"
    );
    assert!(
        err.contains("probe: the provider refused model m1 (the provider refused the key (authentication): invalid x-api-key)"),
        "{err}"
    );
    let report = latest_report(&dir.path().join("runner-reports"));
    for item in report["items"].as_array().unwrap() {
        assert_eq!(item["outcome"], "held", "{item:#}");
        assert_eq!(item["reason"], "provider-refused", "{item:#}");
        assert!(
            item["attempts"].as_array().is_none_or(|a| a.is_empty()),
            "{item:#}"
        );
    }
    assert_eq!(report["probes"][0]["verdict"], "refused", "{report:#}");
    assert!(report["refused"][0].get("item").is_none(), "{report:#}");
    // No repository was touched: no work branch, no change.
    for (i, b) in before.iter().enumerate() {
        assert_eq!(
            &common::tree_fingerprint(&dir.path().join(format!("r{i}"))),
            b
        );
    }
    validates(dir.path(), &events);
}

#[test]
fn a_probe_refusal_of_the_primary_starts_every_item_on_the_fallback() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls");
    probed_fleet(
        dir.path(),
        2,
        "{primary: m1, fallbacks: [m2]}",
        &logging_worker(&log, "m1"),
    );
    let (out, events) = apply_with_events(dir.path());
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let mut seen = calls(&log);
    seen.sort();
    assert_eq!(seen, vec!["item m2 ", "item m2 ", "probe m1 ", "probe m2 "]);
    let report = latest_report(&dir.path().join("runner-reports"));
    for item in report["items"].as_array().unwrap() {
        assert_eq!(item["outcome"], "completed", "{item:#}");
        assert_eq!(item["attempts"][0]["model"], "m2", "{item:#}");
    }
    validates(dir.path(), &events);
}

#[test]
fn a_probe_that_fails_for_a_while_does_not_stop_the_run_and_no_probe_skips_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls");
    let worker = format!(
        r#"if [ -n "$RUNNER_PROBE" ]; then echo probe >> {c}; echo "429 rate limit"; exit 75; fi; echo item >> {c}"#,
        c = log.display()
    );
    probed_fleet(dir.path(), 2, "{primary: m1}", &worker);
    let (out, _) = apply_with_events(dir.path());
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("probe: model m1 did not answer for the provider's reasons (429 rate limit); the run goes on"),
        "{err}"
    );
    assert_eq!(calls(&log), vec!["probe", "item", "item"]);
    std::fs::remove_file(&log).unwrap();
    let out = run_in(
        dir.path(),
        &[
            "apply",
            "m.yaml",
            "--no-progress",
            "--no-probe",
            "--rerun",
            "all",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(calls(&log), vec!["item", "item"]);
}

/// A paused manifest's items are held at plan time: no item is pending, so no model is asked.
#[test]
fn a_paused_manifest_asks_no_model_its_probe_question() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls");
    probed_fleet(dir.path(), 2, "{primary: m1}", &logging_worker(&log, ""));
    let out = run_in(dir.path(), &["pause", "m.yaml", "--reason", "maintenance"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let (out, _) = apply_with_events(dir.path());
    assert!(!stderr(&out).contains("probe:"), "{}", stderr(&out));
    assert_eq!(calls(&log), Vec::<String>::new());
    let report = latest_report(&dir.path().join("runner-reports"));
    assert!(report.get("probes").is_none(), "{report:#}");
    for item in report["items"].as_array().unwrap() {
        assert_eq!(item["reason"], "paused", "{item:#}");
    }
}

/// A runner killed outright mid-probe leaves its scratch repository under the workspace, where
/// the next probe clears it: nothing piles up in the temporary folder.
#[test]
fn a_probe_killed_with_its_runner_leaves_nothing_behind_after_the_next_run() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    probed_fleet(
        dir.path(),
        1,
        "{primary: m1}",
        r#"if [ -n "$RUNNER_PROBE" ] && [ ! -e ../../../go ]; then exec sleep 4243; fi; true"#,
    );
    common::kill_runner_while(
        dir.path(),
        &[("TMPDIR", tmp.to_str().unwrap())],
        &["sleep 4243"],
    );
    for pid in common::processes_matching("sleep 4243") {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let leftovers = |d: &Path| {
        std::fs::read_dir(d)
            .map(|r| {
                r.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_else(|_| Vec::<String>::new())
    };
    assert!(
        leftovers(&tmp)
            .iter()
            .all(|n| !n.starts_with("runner-probe")),
        "{:?}",
        leftovers(&tmp)
    );
    let probes = dir.path().join(".runner/workspace/probes");
    assert!(
        !leftovers(&probes).is_empty(),
        "the killed probe's scratch repository is kept where the next run finds it"
    );
    // The next run's probe answers at once and clears what the killed one left.
    std::fs::write(dir.path().join(".runner/workspace/go"), "").unwrap();
    let out = common::runner()
        .current_dir(dir.path())
        .args(["apply", "m.yaml", "--no-progress"])
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(leftovers(&probes), Vec::<String>::new());
    assert!(
        leftovers(&tmp)
            .iter()
            .all(|n| !n.starts_with("runner-probe"))
    );
}

/// The probes of a chain run at once, and each is its own: the quick refusal of one model does
/// not end the probe of another still waiting for its provider (their processes carried one
/// key, so ending the first one's tree ended the other's too, and a working model read as
/// failed).
#[test]
fn one_probe_ending_leaves_another_still_running_alone() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("calls");
    let worker = format!(
        r#"if [ -n "$RUNNER_PROBE" ]; then case "$RUNNER_MODEL" in m1) echo "runner adapter: the provider refused the key (authentication): invalid x-api-key"; exit 77;; m2) sleep 2; echo "probe m2 answered" >> {c}; echo OK; exit 0;; esac; fi; echo item >> {c}"#,
        c = log.display()
    );
    probed_fleet(dir.path(), 1, "{primary: m1, fallbacks: [m2]}", &worker);
    let (out, _) = apply_with_events(dir.path());
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(calls(&log), vec!["probe m2 answered", "item"], "{err}");
    let report = latest_report(&dir.path().join("runner-reports"));
    let verdicts: Vec<&str> = report["probes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["verdict"].as_str().unwrap())
        .collect();
    assert_eq!(verdicts, ["refused", "ok"], "{report:#}");
    // `doctor` asks the same questions the same way.
    let out = run_in(dir.path(), &["doctor", "m.yaml"]);
    let said = common::stdout(&out);
    assert!(
        said.contains("ok    probe of model `m2`: answered"),
        "{said}"
    );
}

/// A model refused by one item's attempt is not started on again by another item already
/// running: its next attempt moves on to the next model of its chain.
#[test]
fn a_running_items_next_attempt_moves_past_a_model_refused_meanwhile() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    repo(&root.join("a"));
    repo(&root.join("b"));
    let r = root.display();
    std::fs::write(
        root.join("work.sh"),
        format!(
            "echo \"$RUNNER_ITEM $RUNNER_ATTEMPT $RUNNER_MODEL\" >> {r}/ran.txt\n\
             if [ \"$RUNNER_ITEM\" = a ] && [ \"$RUNNER_MODEL\" = m1 ]; then\n\
               while [ ! -e {r}/b-started ]; do sleep 0.05; done\n\
               touch {r}/a-refused; echo 'Error: 401 invalid x-api-key' >&2; exit 77\n\
             fi\n\
             if [ \"$RUNNER_ITEM\" = b ] && [ \"$RUNNER_ATTEMPT\" = 1 ]; then\n\
               touch {r}/b-started\n\
               while [ ! -e {r}/a-refused ]; do sleep 0.05; done; sleep 1; exit 1\n\
             fi\n\
             exit 0\n"
        ),
    )
    .unwrap();
    std::fs::write(
        root.join("m.yaml"),
        format!(
            "version: 1\nname: refused\ncapacity: {{workers: 2}}\nrepositories: [{{path: a}}, {{path: b}}]\nmodels: {{primary: m1, fallbacks: [m2]}}\nworker:\n  run: [sh, {}]\n  attempts: 2\nitems: [{{repo: a, id: a}}, {{repo: b, id: b}}]\n",
            root.join("work.sh").display()
        ),
    )
    .unwrap();
    let out = run_in(root, &["apply", "m.yaml", "--no-progress"]);
    let err = stderr(&out);
    let ran = std::fs::read_to_string(root.join("ran.txt")).unwrap_or_default();
    assert_eq!(out.status.code(), Some(0), "{err}\n{ran}");
    assert!(ran.lines().any(|l| l == "b 1 m1"), "{ran}");
    assert!(
        ran.lines().any(|l| l == "b 2 m2") && !ran.lines().any(|l| l == "b 2 m1"),
        "b's second attempt started on the refused model: {ran}\n{err}"
    );
    assert!(err.contains("no attempt starts on it again"), "{err}");
}
