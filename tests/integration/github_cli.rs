//! The tracker loop with the real GitHub CLI: Debian's `gh` runs the shipped adapters
//! (`manifests/sources/github.sh`, `manifests/publish/github.sh`) unchanged against a loopback
//! GitHub Enterprise host (`tests/forge/github-standin`, GraphQL and REST over HTTPS with a test
//! CA), configured as an Enterprise user configures it (`GH_HOST`, `GH_ENTERPRISE_TOKEN`): from
//! labelled issues to pull requests, a review round, merged and closed, every comment in the
//! brief, and a host that fails.

use crate::common;

use common::github::*;
use common::{report_item, stderr};
use serde_json::{Value, json};

/// The report of the run whose stderr is `err`.
fn report_of(err: &str) -> Value {
    let dir = common::forge::report_dir(err);
    serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap()
}

fn item_of<'a>(plan: &'a Value, id: &str) -> &'a Value {
    common::forge::item_of(plan, id)
}

/// The comments runner wrote on a pull request or issue, by what they say.
fn said(comments: &Value, what: &str) -> usize {
    comments
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["author"] == "runner-bot" && c["body"].as_str().unwrap().contains(what))
        .count()
}

fn labels(issue: &Value) -> Vec<String> {
    issue["labels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap().to_string())
        .collect()
}

/// The cron story: three labelled issues become pull requests; one review (a comment and a
/// line comment) and one failing check make one round each, never more; one pull request is
/// merged (its issue closed by it), one closed; the issues end labelled and commented once per
/// outcome.
#[test]
fn labelled_issues_to_merged_pull_requests_with_the_real_gh() {
    if !gh_runs() {
        return;
    }
    // Issue 1 has 105 comments; the maintainer's correction is the last.
    let mut one = issue(1, "One", &["runner"]);
    one["comments"] = (1..=105)
        .map(|k| {
            json!({"author": "maint", "body": if k == 105 { "Correction: call it finished.".to_string() } else { format!("note {k}") },
                   "createdAt": format!("2026-11-01T{:02}:{:02}:00Z", k / 60, k % 60)})
        })
        .collect();
    let Some(g) = Github::start(
        json!([
            one,
            issue(2, "Two", &["runner"]),
            issue(3, "Three", &["runner"]),
            issue(4, "Four", &["other"])
        ]),
        r#"cp "$RUNNER_BRIEF" "brief-$RUNNER_ITEM.md"; if [ -n "$RUNNER_FEEDBACK" ]; then cp "$RUNNER_FEEDBACK" feedback.md; echo round >> done.txt; else echo "$RUNNER_ITEM" > done.txt; fi"#,
    ) else {
        return;
    };
    let out = g.apply(&[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let api = g.root.join("api");
    // Every comment reached the brief, the last one last.
    let brief = common::git(&api, &["show", "runner/issue-1:brief-issue-1.md"]);
    assert!(brief.contains("## 105 comments, oldest first"), "{brief}");
    assert!(
        brief.trim_end().ends_with("Correction: call it finished."),
        "{}",
        &brief[brief.len().saturating_sub(300)..]
    );
    for n in 1..=3u64 {
        let pr = g.pull(&format!("runner/issue-{n}"));
        assert!(
            pr["body"]
                .as_str()
                .unwrap()
                .contains(&format!("Closes https://{}/acme/api/issues/{n}", g.host)),
            "{pr:#}"
        );
        let i = g.issue(n);
        let l = labels(&i);
        assert!(
            l.contains(&"runner:done".into()) && !l.contains(&"runner:working".into()),
            "{l:?}"
        );
        assert_eq!(said(&i["comments"], "runner:writeback key="), 1, "{i:#}");
        assert_eq!(said(&i["comments"], "Pull request: https://"), 1, "{i:#}");
    }
    assert!(g.issue(4)["comments"].as_array().unwrap().is_empty());

    // One review on the first (a comment, and a line comment); a check fails on the second's
    // head.
    let head_2 = g.pull("runner/issue-2")["headRefOid"].clone();
    assert!(head_2.is_string(), "the pull request follows its branch");
    g.edit(|r| {
        for pr in r["pulls"].as_array_mut().unwrap() {
            match pr["headRefName"].as_str().unwrap() {
                "runner/issue-1" => {
                    pr["reviewDecision"] = json!("CHANGES_REQUESTED");
                    pr["reviews"] = json!([{"author": "rev", "body": "Rename done to finished.", "state": "CHANGES_REQUESTED", "at": "2026-12-04T10:00:00Z"}]);
                    pr["review_comments"] = json!([{"author": "rev", "body": "Off by one here.", "path": "done.txt", "line": 1, "at": "2026-12-04T09:59:00Z"}]);
                }
                "runner/issue-2" => {
                    pr["statusCheckRollup"] = json!([{"__typename": "CheckRun", "name": "ci / unit", "status": "COMPLETED", "conclusion": "FAILURE", "title": "2 tests failed", "detailsUrl": "https://ci.example/2", "commit": head_2}]);
                }
                _ => {}
            }
        }
    });
    let out = g.apply(&["--loop", "--max-rounds", "5"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let feedback = common::git(&api, &["show", "runner/issue-1:feedback.md"]);
    assert!(
        feedback.contains("rev on done.txt:1: Off by one here.")
            && feedback.contains("rev: Rename done to finished."),
        "{feedback}"
    );
    let feedback = common::git(&api, &["show", "runner/issue-2:feedback.md"]);
    assert!(
        feedback.contains("ci / unit: 2 tests failed (https://ci.example/2)"),
        "{feedback}"
    );
    for n in [1, 2] {
        let pr = g.pull(&format!("runner/issue-{n}"));
        assert_eq!(
            said(&pr["comments"], "review round"),
            1,
            "one round, no more: {pr:#}"
        );
        assert_eq!(said(&pr["comments"], "runner pushed review round 1"), 1);
    }
    // The decision stands with nothing new: the reviewer is waited for.
    let (_, plan, _) = g.plan();
    let it = item_of(&plan, "issue-1");
    assert_eq!(it["state"], "done", "{it:#}");
    assert!(
        it["detail"]
            .as_str()
            .unwrap()
            .contains("waiting for the reviewer"),
        "{it:#}"
    );

    // The first is merged (which closes its issue), the third closed without merge.
    g.edit(|r| {
        for pr in r["pulls"].as_array_mut().unwrap() {
            match pr["headRefName"].as_str().unwrap() {
                "runner/issue-1" => pr["state"] = json!("MERGED"),
                "runner/issue-3" => pr["state"] = json!("CLOSED"),
                _ => {}
            }
        }
        r["issues"][0]["state"] = json!("closed");
    });
    let out = g.apply(&[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("api/issue-1: pull request merged"), "{err}");
    let report = report_of(&err);
    let it = report_item(&report, "id", "issue-1");
    assert_eq!(it["pull_request"]["state"], "merged", "{it:#}");
    let it = report_item(&report, "id", "issue-3");
    assert_eq!(it["reason"], "rejected", "{it:#}");
    let out = g.run(&["status", "m.yaml"]);
    let text = common::stdout(&out);
    assert!(text.contains("api/issue-1  merged"), "{text}");
    let out = g.apply(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // Where each issue ended, as the closing note shows it.
    for n in 1..=3u64 {
        let i = g.issue(n);
        eprintln!(
            "issue {n} ({}): labels {:?}; runner's comments:",
            i["state"],
            labels(&i)
        );
        for c in i["comments"].as_array().unwrap() {
            if c["author"] == "runner-bot" {
                eprintln!("  - {}", c["body"].as_str().unwrap().replace('\n', " ⏎ "));
            }
        }
    }
    let one = g.issue(1);
    assert!(labels(&one).contains(&"runner:done".into()), "{one:#}");
    assert!(!labels(&one).contains(&"runner:held".into()), "{one:#}");
    assert_eq!(said(&one["comments"], "a person takes it from here"), 0);
}

/// A host that fails: the first read failing says so (never "nothing found"); a failing read
/// with a review round pending holds every item and writes nothing; a failed read of the line
/// comments is a failed read of the pull request.
#[test]
fn a_failing_host_holds_the_work_and_writes_nothing_with_the_real_gh() {
    if !gh_runs() {
        return;
    }
    let Some(g) = Github::start(
        json!([issue(1, "One", &["runner"]), issue(2, "Two", &["runner"])]),
        r#"echo "$RUNNER_ITEM" >> done.txt"#,
    ) else {
        return;
    };
    g.fail(&[("graphql IssueSearch", "Internal Server Error")]);
    let (code, plan, err) = g.plan();
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("source `issue` could not be read"), "{err}");
    assert!(err.contains("HTTP 500"), "gh's own words: {err}");
    assert_eq!(plan["unreadable_sources"][0]["name"], "issue", "{plan:#}");
    let out = g.apply(&[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let report = report_of(&err);
    assert_eq!(report["ending"], "unreadable", "{report:#}");
    let summary =
        std::fs::read_to_string(common::forge::report_dir(&err).join("summary.md")).unwrap();
    assert!(!summary.contains("nothing-found"), "{summary}");

    g.fail(&[]);
    let out = g.apply(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    g.edit(|r| {
        r["pulls"][0]["reviewDecision"] = json!("CHANGES_REQUESTED");
        r["pulls"][0]["reviews"] = json!([{"author": "rev", "body": "Again.", "state": "CHANGES_REQUESTED", "at": "2026-12-04T10:00:00Z"}]);
    });
    let before = g.state()["repos"].clone();
    g.fail(&[("graphql IssueSearch", "Internal Server Error")]);
    g.forget_calls();
    let out = g.apply(&[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let report = report_of(&err);
    assert_eq!(report["counts"]["held"], 2, "{report:#}");
    for id in ["issue-1", "issue-2"] {
        let it = report_item(&report, "id", id);
        assert_eq!(it["reason"], "source-unreadable", "{it:#}");
    }
    let writes: Vec<String> = g
        .calls()
        .into_iter()
        .filter(|c| !c.starts_with("rest GET") && !c.contains("Search") && !c.contains("ByNumber"))
        .filter(|c| !c.ends_with("_fields") && !c.contains("ProjectItems"))
        .collect();
    assert!(writes.is_empty(), "nothing written: {writes:?}");
    assert_eq!(g.state()["repos"], before);

    // The line comments cannot be read: the pull request's state is unknown, never "no
    // comments".
    g.fail(&[("rest GET /repos/acme/api/pulls", "Internal Server Error")]);
    let (_, plan, err) = g.plan();
    let it = item_of(&plan, "issue-1");
    assert_eq!(it["state"], "held", "{it:#} {err}");
    assert_eq!(it["reason"], "pr-unknown", "{it:#}");
    assert!(
        it["detail"].as_str().unwrap().contains("HTTP 500"),
        "{it:#}"
    );
}

/// A tracker call that hangs (a comment on one issue takes 6 s) delays that item's write-back
/// only: the other issues get their labels and comments meanwhile. (One item at a time, in the
/// order the tracker lists them, newest first: issue 3's comment is the first asked.)
#[test]
fn a_slow_write_back_delays_no_other_item_with_the_real_gh() {
    if !gh_runs() {
        return;
    }
    let Some(g) = Github::start(
        json!([
            issue(1, "One", &["runner"]),
            issue(2, "Two", &["runner"]),
            issue(3, "Three", &["runner"])
        ]),
        r#"echo "$RUNNER_ITEM" > done.txt"#,
    ) else {
        return;
    };
    let mut state = g.state();
    state["hang"] = json!({"graphql CommentCreate": {"seconds": 6, "if": "I_acme/api_3\""}});
    g.set_state(&state);
    let out = g.apply(&["-j", "1"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let at = |n: u64| -> jiff::Timestamp {
        let i = g.issue(n);
        let c = i["comments"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["author"] == "runner-bot")
            .unwrap_or_else(|| panic!("issue {n} has runner's comment: {i:#}"));
        c["createdAt"].as_str().unwrap().parse().unwrap()
    };
    let (one, two, three) = (at(1), at(2), at(3));
    assert!(
        one < three && two < three,
        "the other issues were told while issue 3's comment hung: {one} {two} {three}"
    );
}

/// `runner doctor` tells an Enterprise user what their tracker lacks before a drain does: gh
/// logged in to the host (a refused token, in gh's words), the labels runner sets.
#[test]
fn doctor_checks_the_tracker_with_the_real_gh() {
    if !gh_runs() {
        return;
    }
    let Some(g) = Github::start(json!([issue(1, "One", &["runner"])]), "true") else {
        return;
    };
    let doctor = || {
        let out = g.run(&["doctor", "m.yaml", "--no-probe"]);
        (out.status.code(), common::stdout(&out))
    };
    let (_, text) = doctor();
    assert!(
        text.contains("ok    source `issue`: read, 1 item"),
        "{text}"
    );
    assert!(
        text.contains("ok    source `issue` check: gh version 2.")
            && text.contains(&format!("logged in to {}", g.host)),
        "{text}"
    );
    // The host takes another token than the one given.
    let mut state = g.state();
    state["token"] = json!("another");
    g.set_state(&state);
    let (code, text) = doctor();
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("FAIL  source `issue`: cannot be read"),
        "{text}"
    );
    assert!(
        text.contains(&format!("FAIL  source `issue` check: its check failed (exit 1): github.sh: gh is not logged in to {}", g.host))
            && text.contains("GH_ENTERPRISE_TOKEN"),
        "{text}"
    );
    // Two of the labels runner sets are missing.
    state["token"] = Value::Null;
    state["repos"]["acme/api"]["labels"] = json!(["runner", "runner:working", "runner:done"]);
    g.set_state(&state);
    let (code, text) = doctor();
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("has no label runner:halted runner:held (gh label create LABEL"),
        "{text}"
    );
}
