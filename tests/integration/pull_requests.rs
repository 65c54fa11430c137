//! Pull requests runner opened, followed through review to merge: the shipped publish adapters
//! (`manifests/publish/`) run unchanged against a fake `gh` and `glab` (`tests/forge/fake-forge`)
//! with real repositories and a bare remote: merged, closed, unreadable, review rounds and their
//! feedback, a branch someone else pushed to.

use crate::common;

use common::forge::*;
use common::{report_item, stderr, stdout};
use serde_json::{Value, json};
use std::path::Path;

/// Publish through the shipped GitHub adapter (`pr` and `state`), with `settings` (publish's
/// other keys, each `  key: value\n`).
fn publish_with_github(t: &Tracker, settings: &str) {
    let publish = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/publish/github.sh");
    let manifest = std::fs::read_to_string(t.root.join("m.yaml")).unwrap();
    std::fs::write(
        t.root.join("m.yaml"),
        format!(
            "{manifest}publish:\n{settings}  pr: [\"{p}\", pr, \"{{branch}}\"]\n  state: [\"{p}\", state]\n",
            p = publish.display()
        ),
    )
    .unwrap();
}

/// A bare repository as the checkout's `origin`, which runner pushes to.
fn bare_origin(t: &Tracker) -> std::path::PathBuf {
    let origin = t.root.join("origin.git");
    common::git(&t.root, &["init", "-q", "--bare", origin.to_str().unwrap()]);
    common::git(
        &t.root.join("api"),
        &["remote", "add", "origin", origin.to_str().unwrap()],
    );
    origin
}

#[test]
fn pull_requests_are_followed_merged_done_closed_rejected_unreadable_held() {
    if !forge_runs() {
        return;
    }
    let publish = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/publish/github.sh");
    let t = Tracker::new(
        json!([
            issue(1, "One", &["runner"]),
            issue(2, "Two", &["runner"]),
            issue(3, "Three", &["runner"])
        ]),
        "echo $RUNNER_ITEM > done.txt",
        &format!(
            "publish:\n  push: false\n  pr: [\"{p}\", pr, \"{{branch}}\"]\n  state: [\"{p}\", state]\n",
            p = publish.display()
        ),
    );
    // `publish` belongs at the top level, after the source's keys.
    let manifest = std::fs::read_to_string(t.root.join("m.yaml")).unwrap();
    let (head, rest) = manifest.split_once("publish:").unwrap();
    let (publish_block, tail) = rest.split_once("env:").unwrap();
    std::fs::write(
        t.root.join("m.yaml"),
        format!("{head}env:{tail}publish:{publish_block}"),
    )
    .unwrap();
    let out = t.apply(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let prs = pulls(&t);
    assert_eq!(prs.len(), 3, "{prs:#?}");
    for pr in &prs {
        let n = pr["headRefName"]
            .as_str()
            .unwrap()
            .trim_start_matches("runner/issue-")
            .to_string();
        assert!(
            pr["body"]
                .as_str()
                .unwrap()
                .contains(&format!("Closes https://github.com/acme/api/issues/{n}")),
            "the pull request closes its issue: {pr:#}"
        );
        assert_eq!(
            pr["title"],
            ["One", "Two", "Three"][n.parse::<usize>().unwrap() - 1]
        );
    }
    // The reviewer merges one, closes one, asks for changes on the third.
    let mut state = t.state();
    for pr in state["repos"]["acme/api"]["pulls"].as_array_mut().unwrap() {
        match pr["headRefName"].as_str().unwrap() {
            "runner/issue-1" => pr["state"] = json!("MERGED"),
            "runner/issue-2" => pr["state"] = json!("CLOSED"),
            _ => {
                pr["reviewDecision"] = json!("CHANGES_REQUESTED");
                pr["statusCheckRollup"] = json!([{"__typename": "CheckRun", "name": "ci", "status": "COMPLETED", "conclusion": "FAILURE"}]);
            }
        }
    }
    t.set_state(&state);
    let (code, plan, err) = t.plan();
    assert_eq!(code, Some(0), "{err}");
    let one = item_of(&plan, "issue-1");
    assert_eq!(one["state"], "done", "{one:#}");
    assert_eq!(one["pull_request"]["state"], "merged");
    let two = item_of(&plan, "issue-2");
    assert_eq!(two["state"], "skipped", "{two:#}");
    assert_eq!(two["reason"], "rejected");
    let three = item_of(&plan, "issue-3");
    assert_eq!(
        three["pull_request"]["review"], "changes-requested",
        "{three:#}"
    );
    assert_eq!(three["pull_request"]["checks"], "failing");
    // Merged is done for good; closed runs again only when asked.
    let (_, plan, _) = t.plan_with(&["--rerun", "all"]);
    assert_eq!(item_of(&plan, "issue-1")["state"], "done", "{plan:#}");
    assert_eq!(item_of(&plan, "issue-2")["state"], "skipped", "{plan:#}");
    let (_, plan, _) = t.plan_with(&["--rerun", "rejected"]);
    assert_eq!(item_of(&plan, "issue-2")["state"], "pending", "{plan:#}");
    assert_eq!(item_of(&plan, "issue-1")["state"], "done", "{plan:#}");
    // A state that cannot be read is never taken as merged or closed; nor is one read without
    // its line comments (their own call failed): a partial read is a failed read.
    for (fail, words) in [
        (
            json!({"api": "HTTP 502: Server Error (line comments)"}),
            "line comments",
        ),
        (json!({"pr view": "HTTP 502: Server Error"}), "HTTP 502"),
    ] {
        let mut state = t.state();
        state["fail"] = fail;
        t.set_state(&state);
        let (_, plan, err) = t.plan();
        for id in ["issue-1", "issue-2", "issue-3"] {
            let it = item_of(&plan, id);
            assert_eq!(it["state"], "held", "{id}: {it:#} {err}");
            assert_eq!(it["reason"], "pr-unknown");
            assert!(it["detail"].as_str().unwrap().contains(words), "{it:#}");
        }
    }
    let out = t.apply(&[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let summary = std::fs::read_to_string(report_dir(&err).join("summary.md")).unwrap();
    assert!(summary.contains("pr-unknown"), "{summary}");
    let page = std::fs::read_to_string(report_dir(&err).join("index.html")).unwrap();
    assert!(
        page.contains("pull request state unknown: https://github.com/acme/api/pull/"),
        "the run's page shows it too"
    );
    // And the history page beside the runs, on each item's row.
    let history =
        std::fs::read_to_string(report_dir(&err).parent().unwrap().join("index.html")).unwrap();
    for id in ["issue-1", "issue-2", "issue-3"] {
        let row = history
            .lines()
            .find(|l| l.contains(&format!("<code>{id}</code>")))
            .unwrap_or_else(|| panic!("no row for {id}: {history}"));
        assert!(
            row.contains("<td class=\"pr\"><a href=\"https://github.com/acme/api/pull/")
                && row.contains(">state unknown</a>"),
            "{row}"
        );
    }
    let out = t.run(&["status", "m.yaml", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let status: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let prs = status["pull_requests"].as_array().unwrap();
    assert_eq!(prs.len(), 3, "{status:#}");
    assert!(prs.iter().all(|p| p["state"] == "unknown"), "{status:#}");
    let out = t.run(&["status", "m.yaml"]);
    let text = stdout(&out);
    assert!(
        text.contains("pull requests (as the latest run found them):")
            && text.contains("api/issue-1  state unknown  https://github.com/acme/api/pull/"),
        "{text}"
    );
}

#[test]
fn a_review_asking_for_changes_is_a_round_with_its_feedback_then_needs_a_human() {
    if !forge_runs() {
        return;
    }
    let t = Tracker::new(
        json!([issue(1, "One", &["runner"])]),
        r#"if [ -n "$RUNNER_FEEDBACK" ]; then cp "$RUNNER_FEEDBACK" feedback.md; fi; echo "$RUNNER_ITEM $RUNNER_RUN_ID" >> done.txt"#,
        "",
    );
    publish_with_github(&t, "  push: false\n  review_rounds: 1\n");
    let out = t.apply(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // The reviewer asks for changes, and a check fails.
    let mut state = t.state();
    let pr = &mut state["repos"]["acme/api"]["pulls"][0];
    pr["reviewDecision"] = json!("CHANGES_REQUESTED");
    pr["reviews"] = json!([{"author": "rev", "body": "Rename `done` to `finished`.", "at": "2026-12-03T10:00:00Z", "state": "CHANGES_REQUESTED"}]);
    pr["review_comments"] = json!([{"author": "rev", "body": "Off by one here.", "path": "done.txt", "line": 1, "at": "2026-12-03T09:00:00Z"}]);
    pr["statusCheckRollup"] = json!([{"__typename": "CheckRun", "name": "ci / unit", "status": "COMPLETED", "conclusion": "FAILURE", "title": "2 tests failed", "detailsUrl": "https://ci.example/1"}]);
    t.set_state(&state);
    let (code, plan, err) = t.plan();
    assert_eq!(code, Some(0), "{err}");
    let one = item_of(&plan, "issue-1");
    assert_eq!(one["state"], "pending", "a review round: {one:#}");
    assert!(
        one["detail"].as_str().unwrap().contains("review round 1"),
        "{one:#}"
    );

    let out = t.apply(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let api = t.root.join("api");
    let feedback = common::git(&api, &["show", "runner/issue-1:feedback.md"]);
    assert!(
        feedback.contains("rev: Rename `done` to `finished`."),
        "{feedback}"
    );
    let line = feedback
        .find("rev on done.txt:1: Off by one here.")
        .expect(&feedback);
    let review = feedback.find("rev: Rename").unwrap();
    assert!(line < review, "oldest first: {feedback}");
    assert!(
        feedback.contains("ci / unit: 2 tests failed (https://ci.example/1)"),
        "{feedback}"
    );
    let done = common::git(&api, &["show", "runner/issue-1:done.txt"]);
    assert_eq!(
        done.lines().count(),
        2,
        "the round continued the branch: {done}"
    );
    let state = t.state();
    let pr = &state["repos"]["acme/api"]["pulls"][0];
    assert_eq!(
        state["repos"]["acme/api"]["pulls"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert!(
        pr["comments"]
            .to_string()
            .contains("runner pushed review round 1"),
        "{pr:#}"
    );
    let issue_comments = state["repos"]["acme/api"]["issues"][0]["comments"].to_string();
    assert!(
        issue_comments.contains("runner made review round 1 of the pull request"),
        "the issue is told of the round: {issue_comments}"
    );
    // The decision stands, with nothing new since the round: the reviewer is waited for.
    let (_, plan, err) = t.plan();
    let one = item_of(&plan, "issue-1");
    assert_eq!(one["state"], "done", "{one:#} {err}");
    assert!(
        one["detail"]
            .as_str()
            .unwrap()
            .contains("nothing new since review round 1; waiting for the reviewer"),
        "{one:#}"
    );
    // The reviewer answers with a new comment, after the one round allowed: a person takes it
    // from here.
    let mut state = t.state();
    let pr = &mut state["repos"]["acme/api"]["pulls"][0];
    pr["reviews"].as_array_mut().unwrap().push(json!({"author": "rev", "body": "Still wrong.", "at": "2026-12-04T10:00:00Z", "state": "CHANGES_REQUESTED"}));
    t.set_state(&state);
    let (_, plan, err) = t.plan();
    let one = item_of(&plan, "issue-1");
    assert_eq!(one["state"], "held", "{one:#} {err}");
    assert_eq!(one["reason"], "needs-human");
    assert!(
        one["detail"].as_str().unwrap().contains("pull/101"),
        "{one:#}"
    );
}

/// A tracker that cannot be read holds every item it gave: a review round pending on one of
/// them is not run, nothing is pushed or written back, and every count says held.
#[test]
fn an_unreadable_tracker_holds_its_review_rounds_and_writes_nothing_back() {
    if !forge_runs() {
        return;
    }
    let t = Tracker::new(
        json!([issue(1, "One", &["runner"]), issue(2, "Two", &["runner"])]),
        r#"echo "$RUNNER_ITEM $RUNNER_RUN_ID" >> done.txt"#,
        "",
    );
    publish_with_github(&t, "  push: false\n");
    let out = t.apply(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let api = t.root.join("api");
    let tip = common::git(&api, &["rev-parse", "refs/heads/runner/issue-1"]);
    // A review asks for changes on one, and then the tracker answers HTTP 500.
    let mut state = t.state();
    let pr = state["repos"]["acme/api"]["pulls"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|p| p["headRefName"] == "runner/issue-1")
        .unwrap();
    pr["reviewDecision"] = json!("CHANGES_REQUESTED");
    pr["reviews"] = json!([{"author": "rev", "body": "Rename it.", "at": "2026-12-03T10:00:00Z", "state": "CHANGES_REQUESTED"}]);
    state["fail"] =
        json!({"issue list": "HTTP 500: Internal Server Error (https://api.github.com/graphql)"});
    t.set_state(&state);
    let before = t.state();

    let (code, plan, err) = t.plan();
    assert_eq!(code, Some(1), "{err}");
    for id in ["issue-1", "issue-2"] {
        let it = item_of(&plan, id);
        assert_eq!(it["state"], "held", "{it:#}");
        assert_eq!(it["reason"], "source-unreadable", "{it:#}");
    }
    assert_eq!(plan["counts"]["held"], 2, "{plan:#}");
    let out = t.apply(&[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("the 2 items it gave last are held `source-unreadable`"),
        "{err}"
    );
    let report = report_of(&err);
    assert_eq!(report["counts"]["held"], 2, "{report:#}");
    assert_eq!(report["unreadable_sources"][0]["held"], 2, "{report:#}");
    for id in ["issue-1", "issue-2"] {
        let it = report_item(&report, "id", id);
        assert_eq!(it["outcome"], "held", "{it:#}");
        assert_eq!(it["reason"], "source-unreadable", "{it:#}");
        assert!(it.get("publish").is_none_or(Value::is_null), "{it:#}");
    }
    // Nothing ran, nothing was pushed, commented or labelled.
    assert_eq!(
        common::git(&api, &["rev-parse", "refs/heads/runner/issue-1"]),
        tip
    );
    let mut after = t.state();
    after["fail"] = before["fail"].clone();
    assert_eq!(
        after["repos"], before["repos"],
        "the forge was not written to"
    );
    let summary = std::fs::read_to_string(report_dir(&err).join("summary.md")).unwrap();
    assert!(!summary.contains("| completed"), "{summary}");
}

/// Merging a pull request that closes its issue takes the issue off the tracker's open list:
/// runner still follows the pull request it opened, sees it merged (done for good, said in
/// `plan`, the report and `status`), and asks no more once it has. An issue closed before its
/// item ran is dropped from the queue, named, never run.
#[test]
fn a_merged_pull_request_is_seen_merged_after_its_issue_closed() {
    if !forge_runs() {
        return;
    }
    let t = Tracker::new(
        json!([issue(1, "One", &["runner"]), issue(2, "Two", &["runner"])]),
        r#"echo "$RUNNER_ITEM" >> done.txt"#,
        "",
    );
    publish_with_github(&t, "  push: false\n");
    let out = t.apply(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // Issue 1's pull request is merged, which closes the issue; issue 2 is closed by a person
    // with its pull request still open; issue 3 comes and is closed before any run took it.
    let mut state = t.state();
    for pr in state["repos"]["acme/api"]["pulls"].as_array_mut().unwrap() {
        if pr["headRefName"] == "runner/issue-1" {
            pr["state"] = json!("MERGED");
        }
    }
    state["repos"]["acme/api"]["issues"]
        .as_array_mut()
        .unwrap()
        .push(issue(3, "Three", &["runner"]));
    t.set_state(&state);
    let (_, plan, _) = t.plan();
    assert_eq!(item_of(&plan, "issue-3")["state"], "pending", "{plan:#}");
    // `plan` changes nothing: the ledger still remembers the read before issue 3. A drain with
    // no capacity for it records the read (issue 3 held paused).
    let out = t.run(&["pause", "m.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let _ = t.apply(&[]);
    let out = t.run(&["resume", "m.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let mut state = t.state();
    for i in state["repos"]["acme/api"]["issues"].as_array_mut().unwrap() {
        i["state"] = json!("closed");
    }
    t.set_state(&state);

    let (code, plan, err) = t.plan();
    assert_eq!(code, Some(0), "{err}");
    let one = item_of(&plan, "issue-1");
    assert_eq!(one["state"], "done", "{one:#}");
    assert_eq!(one["pull_request"]["state"], "merged", "{one:#}");
    assert!(
        one["detail"]
            .as_str()
            .unwrap()
            .contains("pull request merged"),
        "{one:#}"
    );
    let two = item_of(&plan, "issue-2");
    assert_eq!(two["state"], "done", "{two:#}");
    assert_eq!(two["pull_request"]["state"], "open", "{two:#}");
    assert!(
        two["detail"]
            .as_str()
            .unwrap()
            .contains("no longer lists it; its pull request is followed"),
        "{two:#}"
    );
    assert!(
        !ids(&plan).contains(&"issue-3".to_string()),
        "a closed issue that never ran is not queued: {plan:#}"
    );
    assert!(
        err.contains("source `issue` no longer lists 1 item it gave last")
            && err.contains("`issue-3`"),
        "{err}"
    );
    assert_ne!(plan["ending"], "nothing-found");

    let out = t.apply(&[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("pull request merged"), "{err}");
    let report = report_of(&err);
    let it = report_item(&report, "id", "issue-1");
    assert_eq!(it["pull_request"]["state"], "merged", "{it:#}");
    let out = t.run(&["status", "m.yaml"]);
    let text = stdout(&out);
    assert!(
        text.contains("api/issue-1  merged  https://github.com/acme/api/pull/"),
        "{text}"
    );
    // Merged is settled: the next drains ask no more of it, and never run it; issue 2's is
    // still followed. A reviewer asking for changes on it gets no round: its issue is closed.
    let mut state = t.state();
    for pr in state["repos"]["acme/api"]["pulls"].as_array_mut().unwrap() {
        if pr["headRefName"] == "runner/issue-1" {
            pr["state"] = json!("OPEN");
            pr["reviewDecision"] = json!("CHANGES_REQUESTED");
        }
        if pr["headRefName"] == "runner/issue-2" {
            pr["reviewDecision"] = json!("CHANGES_REQUESTED");
        }
    }
    t.set_state(&state);
    let (_, plan, _) = t.plan();
    assert!(!ids(&plan).contains(&"issue-1".to_string()), "{plan:#}");
    let two = item_of(&plan, "issue-2");
    assert_eq!(two["state"], "done", "no round: {two:#}");
    assert!(
        two["detail"]
            .as_str()
            .unwrap()
            .contains("no review round is made"),
        "{two:#}"
    );
    // Closed without merge: settled too.
    let mut state = t.state();
    for pr in state["repos"]["acme/api"]["pulls"].as_array_mut().unwrap() {
        if pr["headRefName"] == "runner/issue-2" {
            pr["state"] = json!("CLOSED");
        }
    }
    t.set_state(&state);
    let out = t.apply(&[]);
    let err = stderr(&out);
    assert!(err.contains("pull request closed"), "{err}");
    let (_, plan, _) = t.plan();
    assert!(ids(&plan).is_empty(), "{plan:#}");
}

/// One review is one round: GitHub keeps "changes requested" after runner's push until the
/// reviewer reviews again, and a standing decision is not a new request. A round that changed
/// nothing says so, and is not a push.
#[test]
fn one_review_is_one_round_and_a_round_that_changed_nothing_is_not_a_push() {
    if !forge_runs() {
        return;
    }
    // The first run does the work; a round answering "Say hello." adds a line, one answering
    // anything else changes nothing.
    let t = Tracker::new(
        json!([issue(1, "One", &["runner"])]),
        r#"if [ -z "$RUNNER_FEEDBACK" ]; then echo work > done.txt; elif grep -q "Say hello" "$RUNNER_FEEDBACK"; then echo hello >> done.txt; fi"#,
        "",
    );
    let origin = bare_origin(&t);
    publish_with_github(&t, "  review_rounds: 3\n");
    let out = t.apply(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let tip = common::git(&origin, &["rev-parse", "refs/heads/runner/issue-1"]);
    // One review asks for changes, with one comment.
    let mut state = t.state();
    let pr = &mut state["repos"]["acme/api"]["pulls"][0];
    pr["reviewDecision"] = json!("CHANGES_REQUESTED");
    pr["headRefOid"] = json!(tip);
    pr["reviews"] = json!([{"author": "rev", "body": "Say hello.", "at": "2026-12-03T10:00:00Z", "state": "CHANGES_REQUESTED"}]);
    t.set_state(&state);
    // One loop: one round, then nothing new to do (the decision stands).
    let out = t.apply(&["--loop", "--max-rounds", "5"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let said: Vec<String> = t.state()["repos"]["acme/api"]["pulls"][0]["comments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["body"].as_str().unwrap().to_string())
        .filter(|b| b.contains("review round"))
        .collect();
    assert_eq!(said.len(), 1, "one review, one round: {said:#?}\n{err}");
    assert!(
        said[0].contains("runner pushed review round 1"),
        "{said:#?}"
    );
    let round_1 = common::git(&origin, &["rev-parse", "refs/heads/runner/issue-1"]);
    assert_ne!(round_1, tip, "round 1 pushed");
    let (_, plan, _) = t.plan();
    let one = item_of(&plan, "issue-1");
    assert_eq!(one["state"], "done", "{one:#}");
    assert!(
        one["detail"]
            .as_str()
            .unwrap()
            .contains("waiting for the reviewer"),
        "{one:#}"
    );
    // A new comment the worker has nothing to do for: round 2 runs, changes nothing, pushes
    // nothing, and says so.
    let mut state = t.state();
    let pr = &mut state["repos"]["acme/api"]["pulls"][0];
    pr["headRefOid"] = json!(round_1);
    pr["review_comments"] = json!([{"author": "rev", "body": "Why this name?", "path": "done.txt", "line": 1, "at": "2026-12-04T09:00:00Z"}]);
    t.set_state(&state);
    let (_, plan, _) = t.plan();
    assert_eq!(item_of(&plan, "issue-1")["state"], "pending", "{plan:#}");
    let out = t.apply(&[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let report = report_of(&err);
    let it = report_item(&report, "id", "issue-1");
    assert_eq!(it["publish"]["pushed"], false, "nothing moved: {it:#}");
    assert_eq!(
        common::git(&origin, &["rev-parse", "refs/heads/runner/issue-1"]),
        round_1
    );
    let said: Vec<String> = t.state()["repos"]["acme/api"]["pulls"][0]["comments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["body"].as_str().unwrap().to_string())
        .filter(|b| b.contains("review round"))
        .collect();
    assert_eq!(said.len(), 2, "{said:#?}");
    assert!(
        said[1].contains("review round 2 made no change to the branch"),
        "{said:#?}"
    );
    let summary = std::fs::read_to_string(report_dir(&err).join("summary.md")).unwrap();
    assert!(!summary.contains("pushed `runner/issue-1`"), "{summary}");
    // And with nothing new since, nothing more.
    let (_, plan, _) = t.plan();
    assert_eq!(item_of(&plan, "issue-1")["state"], "done", "{plan:#}");
}

#[test]
fn a_round_after_someone_else_pushed_starts_from_their_head_and_never_forces() {
    if !forge_runs() {
        return;
    }
    let t = Tracker::new(
        json!([issue(1, "One", &["runner"])]),
        r#"echo "$RUNNER_RUN_ID" >> done.txt"#,
        "",
    );
    let api = t.root.join("api");
    let origin = bare_origin(&t);
    publish_with_github(&t, "");
    let out = t.apply(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // A person pushes a commit of their own to the branch, and asks for changes.
    let theirs = t.root.join("theirs");
    common::git(
        &t.root,
        &[
            "clone",
            "-q",
            "-b",
            "runner/issue-1",
            origin.to_str().unwrap(),
            theirs.to_str().unwrap(),
        ],
    );
    let human = common::commit_file(&theirs, "human.txt", "from a person\n");
    common::git(&theirs, &["push", "-q", "origin", "runner/issue-1"]);
    let mut state = t.state();
    let pr = &mut state["repos"]["acme/api"]["pulls"][0];
    pr["reviewDecision"] = json!("CHANGES_REQUESTED");
    pr["headRefOid"] = json!(human);
    t.set_state(&state);

    let (_, plan, err) = t.plan();
    assert!(
        item_of(&plan, "issue-1")["detail"]
            .as_str()
            .unwrap()
            .contains("head moved by someone else"),
        "{plan:#} {err}"
    );
    let out = t.apply(&[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    // The round's commit sits on top of the person's, and the remote took it as a fast-forward.
    let remote_tip = common::git(&origin, &["rev-parse", "refs/heads/runner/issue-1"]);
    let parent = common::git(&origin, &["rev-parse", "refs/heads/runner/issue-1^"]);
    assert_eq!(parent, human, "the round started from the remote head");
    assert_eq!(
        common::git(&api, &["rev-parse", "refs/heads/runner/issue-1"]),
        remote_tip
    );
    let report = report_of(&err);
    let it = report_item(&report, "id", "issue-1");
    assert_eq!(it["outcome"], "completed", "{it:#}");
}

#[test]
fn publish_afterwards_finds_the_trackers_completed_items() {
    if !forge_runs() {
        return;
    }
    let t = Tracker::new(
        json!([issue(1, "One", &["runner"])]),
        "echo one > one.txt",
        "",
    );
    let out = t.apply(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    // The manifest gains `publish`; `runner publish` opens the pull request the run did not.
    let publish = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/publish/github.sh");
    let manifest = std::fs::read_to_string(t.root.join("m.yaml")).unwrap();
    std::fs::write(
        t.root.join("m.yaml"),
        format!(
            "{manifest}publish:\n  push: false\n  pr: [\"{p}\", pr, \"{{branch}}\"]\n",
            p = publish.display()
        ),
    )
    .unwrap();
    let out = t.run(&["publish", "m.yaml"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("runner: 1 published"), "{err}");
    assert_eq!(pulls(&t).len(), 1, "{:#}", t.state());
}

#[test]
fn gitlab_merge_requests_are_opened_reviewed_and_followed() {
    if !forge_runs() {
        return;
    }
    let t = Tracker::new(
        json!([]),
        r#"if [ -n "$RUNNER_FEEDBACK" ]; then cp "$RUNNER_FEEDBACK" feedback.md; fi; echo "$RUNNER_RUN_ID" >> done.txt"#,
        "",
    );
    t.set_state(&json!({"repos": {"grp/api": {"issues": [issue(1, "One", &["runner"])]}}}));
    let publish = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/publish/gitlab.sh");
    let manifest = std::fs::read_to_string(t.root.join("m.yaml"))
        .unwrap()
        .replace("sources/github.sh", "sources/gitlab.sh")
        .replace("acme/api", "grp/api");
    std::fs::write(
        t.root.join("m.yaml"),
        format!(
            "{manifest}publish:\n  push: false\n  pr: [\"{p}\", pr, grp/api, \"{{branch}}\"]\n  state: [\"{p}\", state, grp/api]\n",
            p = publish.display()
        ),
    )
    .unwrap();
    let out = t.apply(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let mrs = t.state()["repos"]["grp/api"]["mrs"].clone();
    assert_eq!(mrs.as_array().unwrap().len(), 1, "{mrs:#}");
    assert!(
        mrs[0]["description"]
            .as_str()
            .unwrap()
            .contains("Closes https://gitlab.com/grp/api/-/issues/1"),
        "{mrs:#}"
    );
    // A reviewer asks for changes on a line, and the pipeline fails.
    let mut state = t.state();
    let mr = &mut state["repos"]["grp/api"]["mrs"][0];
    mr["detailed_merge_status"] = json!("requested_changes");
    mr["head_pipeline"] =
        json!({"status": "failed", "web_url": "https://gitlab.com/grp/api/-/pipelines/7"});
    mr["notes"] = json!([
        {"author": "rev", "body": "Use a constant.", "at": "2026-12-03T09:00:00Z", "path": "done.txt", "line": 1},
        {"author": "gitlab", "body": "added 1 commit", "at": "2026-12-03T09:30:00Z", "system": true}
    ]);
    t.set_state(&state);
    let (_, plan, err) = t.plan();
    assert_eq!(
        item_of(&plan, "issue-1")["state"],
        "pending",
        "{plan:#} {err}"
    );
    let out = t.apply(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let feedback = common::git(&t.root.join("api"), &["show", "runner/issue-1:feedback.md"]);
    assert!(
        feedback.contains("rev on done.txt:1: Use a constant."),
        "{feedback}"
    );
    assert!(
        feedback.contains("pipeline: the head pipeline failed"),
        "{feedback}"
    );
    assert!(!feedback.contains("added 1 commit"), "{feedback}");
    let notes = t.state()["repos"]["grp/api"]["mrs"][0]["notes"].to_string();
    assert!(notes.contains("runner pushed review round 1"), "{notes}");
    // Merged: done for good.
    let mut state = t.state();
    state["repos"]["grp/api"]["mrs"][0]["state"] = json!("merged");
    t.set_state(&state);
    let (_, plan, err) = t.plan();
    let one = item_of(&plan, "issue-1");
    assert_eq!(one["state"], "done", "{one:#} {err}");
    assert_eq!(one["pull_request"]["state"], "merged");
}
