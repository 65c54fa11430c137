//! Items from a tracker: the shipped source adapters (`manifests/sources/`) run unchanged
//! against a fake `gh` and `glab` (`tests/forge/fake-forge`, the forges cannot be reached from
//! here), through the built binary on real repositories: routing, the brief, an unreadable
//! tracker, and write-back exactly once.

use crate::common;

use common::forge::*;
use common::{latest_report, report_item, stderr, stdout};
use serde_json::{Value, json};
use std::path::Path;

#[test]
fn labelled_issues_become_items_and_each_worker_gets_its_brief() {
    if !forge_runs() {
        return;
    }
    let mut first = issue(1, "Fix the login loop", &["runner"]);
    first["comments"] = json!([
        {"author": "ann", "body": "Use the session cookie.", "createdAt": "2026-11-01T10:00:00Z"},
        {"author": "runner-bot", "body": "<!-- runner:writeback key=x -->\nWork started.", "createdAt": "2026-11-01T11:00:00Z"},
        {"author": "bob", "body": "Correction: the token, not the cookie.", "createdAt": "2026-11-02T10:00:00Z"}
    ]);
    let t = Tracker::new(
        json!([
            first,
            issue(2, "Add a dark mode", &["runner", "ui"]),
            issue(3, "A typo in the README", &["runner"]),
            issue(4, "A question, not for runner", &["question"])
        ]),
        r#"cp "$RUNNER_BRIEF" brief.md && echo {item.title} > title.txt"#,
        "",
    );
    let (code, plan, err) = t.plan();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(ids(&plan), ["issue-1", "issue-2", "issue-3"], "{plan:#}");
    let one = plan["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"] == "issue-1")
        .unwrap();
    assert_eq!(one["origin"], "source");
    assert_eq!(one["source"]["title"], "Fix the login loop");
    assert_eq!(one["source"]["url"], "https://github.com/acme/api/issues/1");
    assert_eq!(one["branch"], "runner/issue-1");

    let out = t.apply(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let api = t.root.join("api");
    let brief = common::git(&api, &["show", "runner/issue-1:brief.md"]);
    assert!(brief.starts_with("# Fix the login loop"), "{brief}");
    assert!(
        brief.contains("https://github.com/acme/api/issues/1"),
        "{brief}"
    );
    assert!(brief.contains("The body of 1."), "{brief}");
    let ann = brief
        .find("Use the session cookie.")
        .expect("ann's comment");
    let bob = brief.find("Correction: the token").expect("bob's comment");
    assert!(ann < bob, "oldest first: {brief}");
    assert!(
        !brief.contains("Work started."),
        "runner's own comment is no grooming: {brief}"
    );
    assert_eq!(
        common::git(&api, &["show", "runner/issue-2:title.txt"]),
        "Add a dark mode"
    );
    // What the source command was asked: the label, every open issue, the fields it uses.
    let calls = t.state()["calls"].clone();
    let lists: Vec<&Value> = calls
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c[1] == "list")
        .collect();
    assert_eq!(lists.len(), 2, "plan and apply read it once each: {calls}");
    let call: Vec<&str> = lists[0]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(&call[..2], ["issue", "list"]);
    assert!(
        call.windows(2).any(|w| w == ["--label", "runner"]),
        "{call:?}"
    );
    assert!(
        call.windows(2).any(|w| w == ["--state", "open"]),
        "{call:?}"
    );

    // Written back: each issue labelled done (working no more) and commented once, with its
    // commit, branch and key.
    let once = |t: &Tracker| {
        let state = t.state();
        for i in state["repos"]["acme/api"]["issues"].as_array().unwrap() {
            let labels: Vec<&str> = i["labels"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| l.as_str().unwrap())
                .collect();
            let ours: Vec<&Value> = i["comments"]
                .as_array()
                .map(|c| c.iter().filter(|c| c["author"] == "runner-bot").collect())
                .unwrap_or_default();
            if i["number"] == 4 {
                assert!(ours.is_empty() && !labels.contains(&"runner:done"), "{i:#}");
                continue;
            }
            assert!(labels.contains(&"runner:done"), "{i:#}");
            assert!(!labels.contains(&"runner:working"), "{i:#}");
            // Issue 1 carries an old comment of runner's own from the fixture.
            let new: Vec<&&Value> = ours
                .iter()
                .filter(|c| c["body"].as_str().unwrap().contains("completed this"))
                .collect();
            assert_eq!(new.len(), 1, "one comment: {i:#}");
            let body = new[0]["body"].as_str().unwrap();
            let n = i["number"].as_u64().unwrap();
            assert!(
                body.starts_with(&format!(
                    "<!-- runner:writeback key=api/issue-{n}/completed/"
                )),
                "{body}"
            );
            assert!(
                body.contains(&format!("on branch `runner/issue-{n}`")),
                "{body}"
            );
        }
    };
    once(&t);
    // Each was labelled working when its item started.
    let calls = t.state()["calls"].to_string();
    for n in 1..=3 {
        assert!(
            calls.contains(&format!(
                r#"["issue","edit","{n}","--repo","acme/api","--add-label","runner:working"]"#
            )),
            "issue {n} marked working: {calls}"
        );
    }
    // Another drain finds every item done and tells the tracker nothing more.
    let out = t.apply(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    once(&t);

    // Edited after its item completed: the item stays done (its definition is its id, repository
    // and branch, not the issue's text); a review round or `--rerun all` takes a change up.
    let mut state = t.state();
    state["repos"]["acme/api"]["issues"][0]["body"] = json!("Rewritten after the fact.");
    t.set_state(&state);
    let (code, plan, err) = t.plan();
    assert_eq!(code, Some(0), "{err}");
    assert!(
        plan["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["state"] == "done"),
        "{plan:#}"
    );
}

#[test]
fn an_unreadable_tracker_holds_what_it_gave_and_fails_the_run() {
    if !forge_runs() {
        return;
    }
    // The first run halts every item (its worker fails), so none is done.
    let t = Tracker::new(
        json!([issue(1, "One", &["runner"]), issue(2, "Two", &["runner"])]),
        "exit 1",
        "",
    );
    let out = t.apply(&[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let mut state = t.state();
    state["fail"] =
        json!({"issue list": "HTTP 502: Server Error (https://api.github.com/graphql)"});
    t.set_state(&state);

    // (Halted items are done until `--rerun failed` asks for them again.)
    let (code, plan, err) = t.plan_with(&["--rerun", "failed"]);
    assert_eq!(
        code,
        Some(1),
        "an unreadable tracker is never nothing to do: {err}"
    );
    assert!(err.contains("source `issue` could not be read"), "{err}");
    assert!(err.contains("HTTP 502"), "{err}");
    assert_eq!(plan["unreadable_sources"][0]["name"], "issue", "{plan:#}");
    assert_eq!(ids(&plan), ["issue-1", "issue-2"], "none dropped: {plan:#}");
    assert!(
        plan["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["state"] == "held" && i["reason"] == "source-unreadable"),
        "{plan:#}"
    );

    let out = t.apply(&["--rerun", "failed"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("source `issue` could not be read"), "{err}");
    let report = report_of(&err);
    for id in ["issue-1", "issue-2"] {
        let it = report_item(&report, "id", id);
        assert_eq!(it["outcome"], "held", "{it:#}");
        assert_eq!(it["reason"], "source-unreadable", "{it:#}");
    }
    assert_eq!(report["unreadable_sources"][0]["held"], 2, "{report:#}");

    // Malformed output is named with where it goes wrong; a tracker that suddenly gives
    // nothing is warned of.
    state["fail"] = json!({});
    t.set_state(&state);
    let manifest = std::fs::read_to_string(t.root.join("m.yaml")).unwrap();
    let bad = manifest.replace(
        &format!(
            "[\"{}\", list, acme/api, runner]",
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("manifests/sources/github.sh")
                .display()
        ),
        r#"["sh", "-c", "printf '{\"schema\": \"runner.items/v1\",\\n \"items\": [{\"title\": 1}]}'"]"#,
    );
    assert_ne!(bad, manifest);
    std::fs::write(t.root.join("m.yaml"), &bad).unwrap();
    let (code, _, err) = t.plan();
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("line 2"), "{err}");
    std::fs::write(t.root.join("m.yaml"), &manifest).unwrap();
    let out = t.apply(&["--rerun", "failed"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    state["repos"]["acme/api"]["issues"] = json!([]);
    t.set_state(&state);
    let (code, plan, err) = t.plan();
    assert_eq!(code, Some(0), "{err}");
    assert!(ids(&plan).is_empty());
    assert!(
        err.contains("source `issue` gave no item, where the last run read 2"),
        "{err}"
    );
}

#[test]
fn an_issue_no_repository_takes_is_held_unroutable_and_listed() {
    if !forge_runs() {
        return;
    }
    let t = Tracker::new(
        json!([
            issue(1, "For api", &["runner"]),
            issue(2, "For web, not declared", &["runner", "area:web"])
        ]),
        "true",
        "    labels: {\"area:web\": web}\n",
    );
    let (code, plan, err) = t.plan();
    assert_eq!(code, Some(0), "{err}");
    let two = plan["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"] == "issue-2")
        .unwrap();
    assert_eq!(two["state"], "held", "{plan:#}");
    assert_eq!(two["reason"], "unroutable");
    assert!(
        two["detail"]
            .as_str()
            .unwrap()
            .contains("`area:web` maps to repository `web`"),
        "{two:#}"
    );
    let out = t.apply(&[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("issue-2 (unroutable)"), "{err}");
    let report = latest_report(&t.root.join("runner-reports"));
    assert_eq!(
        report_item(&report, "id", "issue-1")["outcome"],
        "completed"
    );
    let summary = std::fs::read_to_string(t.root.join("runner-reports/latest/summary.md")).unwrap();
    assert!(
        summary.contains("issue-2") && summary.contains("unroutable"),
        "{summary}"
    );
}

/// An issue whose labels map to two repositories is not run in either: it is held
/// `unroutable`, naming both, rather than run in whichever label came first.
#[test]
fn an_issue_whose_labels_map_to_two_repositories_is_held_naming_both() {
    if !forge_runs() {
        return;
    }
    let t = Tracker::new(
        json!([
            issue(1, "For web", &["runner", "area:web"]),
            issue(2, "For both", &["runner", "area:web", "area:api"])
        ]),
        "true",
        "    labels: {\"area:web\": web, \"area:api\": api}\n",
    );
    common::repo(&t.root.join("web"));
    let manifest = std::fs::read_to_string(t.root.join("m.yaml")).unwrap();
    std::fs::write(
        t.root.join("m.yaml"),
        manifest.replace(
            "repositories: [{path: api}]",
            "repositories: [{path: api}, {path: web}]",
        ),
    )
    .unwrap();
    let (code, plan, err) = t.plan();
    assert_eq!(code, Some(0), "{err}");
    let item = |id: &str| {
        plan["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("no {id}: {plan:#}"))
    };
    assert_eq!(item("issue-1")["repo"], "web", "{plan:#}");
    let two = item("issue-2");
    assert_eq!(two["state"], "held", "{two:#}");
    assert_eq!(two["reason"], "unroutable", "{two:#}");
    let detail = two["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("`web`") && detail.contains("`api`"),
        "{two:#}"
    );
}

/// A GitLab source whose `glab api` call fails (an expired token: HTTP 401) is unreadable:
/// `plan` and `apply` name it with glab's own words and never say that nothing was found. A
/// failed read of one issue's notes fails the whole read: no item is worked on a cut brief.
#[test]
fn a_failed_glab_call_is_a_failed_read_never_an_empty_one() {
    if !forge_runs() {
        return;
    }
    let t = Tracker::new(json!([]), "true", "");
    let manifest = std::fs::read_to_string(t.root.join("m.yaml"))
        .unwrap()
        .replace("sources/github.sh", "sources/gitlab.sh")
        .replace("acme/api", "grp/api");
    std::fs::write(t.root.join("m.yaml"), manifest).unwrap();
    let issues = json!({"grp/api": {"issues": [issue(1, "Fix the login loop", &["runner"])]}});
    for (fail, words) in [
        (
            json!({"api": "glab: 401 Unauthorized (the token expired)"}),
            "401 Unauthorized",
        ),
        (
            json!({"api projects/grp%2Fapi/issues/1/notes": "glab: 502 Bad Gateway"}),
            "502 Bad Gateway",
        ),
    ] {
        t.set_state(&json!({"repos": issues, "fail": fail}));
        let (code, plan, err) = t.plan();
        assert_eq!(code, Some(1), "{words}: {err}\n{plan:#}");
        assert!(
            err.contains(words) && err.contains("could not be read"),
            "{err}"
        );
        let table = stdout(&t.run(&["plan", "m.yaml"]));
        assert!(
            table.contains("source `issue` could not be read") && !table.contains("no items found"),
            "{table}"
        );
        let out = t.apply(&[]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("run ended: unreadable"), "{err}");
        assert!(!err.contains("nothing-found"), "{err}");
        let report = latest_report(&t.root.join("runner-reports"));
        assert_eq!(report["ending"], "unreadable", "{report:#}");
        let summary =
            std::fs::read_to_string(t.root.join("runner-reports/latest/summary.md")).unwrap();
        assert!(!summary.contains("nothing-found"), "{summary}");
    }
}

/// `gh issue list` gives an issue's first 100 comments and no more: the source pages the rest,
/// so the maintainer's correction in comment 105 reaches the brief, which says how many
/// comments it holds.
#[test]
fn every_comment_reaches_the_brief_past_the_first_hundred() {
    if !forge_runs() {
        return;
    }
    let mut one = issue(1, "Rename the flag", &["runner"]);
    let mut comments: Vec<Value> = (1..=104)
        .map(|k| json!({"author": "ann", "body": format!("note {k}"), "createdAt": format!("2026-11-01T10:{:02}:{:02}Z", k / 60, k % 60)}))
        .collect();
    comments.push(json!({"author": "maintainer", "body": "FINAL: call it --dry", "createdAt": "2026-11-02T10:00:00Z"}));
    one["comments"] = json!(comments);
    let t = Tracker::new(json!([one]), r#"cp "$RUNNER_BRIEF" brief.md"#, "");
    let out = t.apply(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let brief = common::git(&t.root.join("api"), &["show", "runner/issue-1:brief.md"]);
    assert!(brief.contains("## 105 comments, oldest first"), "{brief}");
    assert!(
        brief.contains("note 1\n") && brief.contains("note 104"),
        "{brief}"
    );
    assert!(brief.contains("FINAL: call it --dry"), "{brief}");
}

/// An outcome told before (the same key: a rerun that changed nothing again) is not commented
/// twice, but its labels are set all the same: the issue never stays `runner:working` with
/// nothing running.
#[test]
fn an_outcome_told_before_still_sets_the_labels() {
    if !forge_runs() {
        return;
    }
    let t = Tracker::new(json!([issue(1, "Tidy up", &["runner"])]), "true", "");
    let labels = |t: &Tracker| -> Vec<String> {
        t.state()["repos"]["acme/api"]["issues"][0]["labels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap().to_string())
            .collect()
    };
    let out = t.apply(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        labels(&t).contains(&"runner:done".to_string()),
        "{:?}",
        labels(&t)
    );
    let out = t.apply(&["--rerun", "all"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let now = labels(&t);
    assert!(
        now.contains(&"runner:done".to_string()) && !now.contains(&"runner:working".to_string()),
        "{now:?}"
    );
    let ours = t.state()["repos"]["acme/api"]["issues"][0]["comments"]
        .as_array()
        .map_or(0, |c| {
            c.iter().filter(|c| c["author"] == "runner-bot").count()
        });
    assert_eq!(ours, 1, "the same outcome is told once");
}

#[test]
fn a_tracker_past_its_timeout_is_unreadable() {
    if !forge_runs() {
        return;
    }
    let t = Tracker::new(json!([]), "true", "    timeout: 1s\n");
    let manifest = std::fs::read_to_string(t.root.join("m.yaml")).unwrap();
    let slow = manifest.replace(
        &format!(
            "[\"{}\", list, acme/api, runner]",
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("manifests/sources/github.sh")
                .display()
        ),
        r#"["sh", "-c", "sleep 30"]"#,
    );
    std::fs::write(t.root.join("m.yaml"), slow).unwrap();
    let (code, _, err) = t.plan();
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("took longer than 1s"), "{err}");
}

#[test]
fn an_agent_adapter_given_no_task_prompts_with_the_brief() {
    if !forge_runs() {
        return;
    }
    let mut one = issue(1, "Fix the login loop", &["runner"]);
    one["comments"] =
        json!([{"author": "ann", "body": "Mind the token.", "createdAt": "2026-11-01T10:00:00Z"}]);
    let common = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/agents/common.sh");
    let t = Tracker::new(
        json!([one]),
        &format!(
            r#"sh -c '. "{}" && prompt_text "" > prompt.txt'"#,
            common.display()
        ),
        "",
    );
    let out = t.apply(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let prompt = common::git(&t.root.join("api"), &["show", "runner/issue-1:prompt.txt"]);
    assert!(prompt.starts_with("# Fix the login loop"), "{prompt}");
    assert!(
        prompt.contains("The body of 1.") && prompt.contains("Mind the token."),
        "{prompt}"
    );
}

#[test]
fn a_run_killed_after_posting_leaves_one_comment_after_the_next() {
    if !forge_runs() {
        return;
    }
    let t = Tracker::new(
        json!([issue(1, "One", &["runner"])]),
        "echo done > done.txt",
        "",
    );
    let mut state = t.state();
    state["hang"] = json!({"issue comment": 60});
    t.set_state(&state);
    let mut child = t
        .command(&["apply", "m.yaml", "--no-progress"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Killed once the comment is posted, before runner can record that it was.
    let mut posted = false;
    for _ in 0..600 {
        if completed_comments(&t, 1) == 1 {
            posted = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(posted, "the comment was never posted");
    let mut state = t.state();
    state["hang"] = json!({});
    let before = state["calls"].as_array().unwrap().len();
    t.set_state(&state);
    // The next run takes the dead run's write-back over (the item itself is done); the adapter
    // looks for its comment, finds it, and posts none again.
    let out = t.apply(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(completed_comments(&t, 1), 1, "{:#}", t.state());
    let state = t.state();
    let again = &state["calls"].as_array().unwrap()[before..];
    assert!(
        again
            .iter()
            .any(|c| c[1] == "view" && c[2] == "1" && c.to_string().contains("comments")),
        "the write-back was taken over: {again:?}"
    );
    let out = t.apply(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(completed_comments(&t, 1), 1, "{:#}", t.state());
}

#[test]
fn two_overlapping_drains_comment_on_each_issue_once() {
    if !forge_runs() {
        return;
    }
    let issues: Vec<Value> = (1..=6)
        .map(|n| issue(n, &format!("Issue {n}"), &["runner"]))
        .collect();
    let t = Tracker::new(json!(issues), "sleep 0.2; echo $RUNNER_ITEM > done.txt", "");
    let spawn = || {
        t.command(&["apply", "m.yaml", "--no-progress"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(), spawn());
    for out in [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()] {
        assert!(
            matches!(out.status.code(), Some(0) | Some(1)),
            "{}",
            stderr(&out)
        );
    }
    let out = t.apply(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for n in 1..=6 {
        assert_eq!(completed_comments(&t, n), 1, "issue {n}: {:#}", t.state());
    }
}

#[test]
fn a_failed_write_back_is_told_and_made_by_the_next_run() {
    if !forge_runs() {
        return;
    }
    let t = Tracker::new(
        json!([issue(1, "One", &["runner"])]),
        "echo done > done.txt",
        "",
    );
    let mut state = t.state();
    state["fail"] = json!({"issue comment": "HTTP 403: Resource not accessible by integration"});
    t.set_state(&state);
    let out = t.apply(&[]);
    let err = stderr(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "the item's outcome stands: {err}"
    );
    assert!(
        err.contains(
            "the write-back to source `issue` (completed) failed; the next run tries again"
        ) && err.contains("HTTP 403"),
        "{err}"
    );
    let report = report_of(&err);
    assert_eq!(
        report_item(&report, "id", "issue-1")["outcome"],
        "completed"
    );
    assert!(
        report["warnings"].to_string().contains("HTTP 403"),
        "{report:#}"
    );
    assert_eq!(completed_comments(&t, 1), 0);
    let mut state = t.state();
    state["fail"] = json!({});
    t.set_state(&state);
    let out = t.apply(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(completed_comments(&t, 1), 1, "{:#}", t.state());
    let out = t.apply(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(completed_comments(&t, 1), 1);
}

#[test]
fn the_ready_manifest_plans_against_the_forge() {
    if !forge_runs() {
        return;
    }
    let t = Tracker::new(
        json!([
            issue(7, "Seven", &["runner"]),
            issue(8, "Eight", &["other"])
        ]),
        "true",
        "",
    );
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests");
    // As shipped, but for the fake forge's own variable.
    let text = std::fs::read_to_string(shipped.join("issues-to-pull-requests.yaml")).unwrap();
    let text = text.replace(
        "pass: [PATH, HOME, LANG, TERM, TMPDIR]",
        "pass: [PATH, HOME, LANG, TERM, TMPDIR, FAKE_FORGE]",
    );
    assert!(text.contains("FAKE_FORGE"));
    std::fs::write(t.root.join("ready.yaml"), text).unwrap();
    for d in ["sources", "agents", "publish"] {
        std::os::unix::fs::symlink(shipped.join(d), t.root.join(d)).unwrap();
    }
    let out = t.run(&["validate", "ready.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = t.run(&["plan", "ready.yaml", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let plan: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(ids(&plan), ["issue-7"], "{plan:#}");
    assert_eq!(plan["items"][0]["branch"], "runner/issue-7");
}

#[test]
fn gitlab_issues_come_in_and_are_written_back_once() {
    if !forge_runs() {
        return;
    }
    let mut one = issue(1, "Fix the login loop", &["runner"]);
    one["comments"] = json!([
        {"author": "ann", "body": "Use the session cookie.", "createdAt": "2026-11-01T10:00:00Z"},
        {"author": "gitlab", "body": "changed the description", "createdAt": "2026-11-01T11:00:00Z", "system": true}
    ]);
    let t = Tracker::new(json!([]), r#"cp "$RUNNER_BRIEF" brief.md"#, "");
    t.set_state(&json!({"repos": {"grp/api": {"issues": [
        one,
        issue(2, "Add a dark mode", &["runner"]),
        issue(3, "Not for runner", &["question"])
    ]}}}));
    let manifest = std::fs::read_to_string(t.root.join("m.yaml"))
        .unwrap()
        .replace("sources/github.sh", "sources/gitlab.sh")
        .replace("acme/api", "grp/api");
    std::fs::write(t.root.join("m.yaml"), manifest).unwrap();
    let (code, plan, err) = t.plan();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(ids(&plan), ["issue-1", "issue-2"], "{plan:#}");
    for _ in 0..2 {
        let out = t.apply(&[]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    let brief = common::git(&t.root.join("api"), &["show", "runner/issue-1:brief.md"]);
    assert!(
        brief.contains("https://gitlab.com/grp/api/-/issues/1"),
        "{brief}"
    );
    assert!(brief.contains("Use the session cookie."), "{brief}");
    assert!(
        !brief.contains("changed the description"),
        "system notes are no grooming: {brief}"
    );
    let state = t.state();
    for i in state["repos"]["grp/api"]["issues"].as_array().unwrap() {
        let ours = i["comments"].as_array().map_or(0, |c| {
            c.iter().filter(|c| c["author"] == "runner-bot").count()
        });
        let labels = i["labels"].to_string();
        if i["number"] == 3 {
            assert_eq!(ours, 0, "{i:#}");
        } else {
            assert_eq!(ours, 1, "one note: {i:#}");
            assert!(
                labels.contains("runner:done") && !labels.contains("runner:working"),
                "{i:#}"
            );
        }
    }
}

#[test]
fn apply_loop_takes_the_trackers_issues_round_by_round() {
    if !forge_runs() {
        return;
    }
    let t = Tracker::new(
        json!([issue(1, "One", &["runner"]), issue(2, "Two", &["runner"])]),
        "echo $RUNNER_ITEM > done.txt",
        "",
    );
    let out = t.apply(&["--loop", "--max-rounds", "3"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("round 1, 2 pending"), "{err}");
    assert!(err.contains("round 2 found nothing pending"), "{err}");
    for n in [1, 2] {
        assert_eq!(completed_comments(&t, n), 1, "{:#}", t.state());
    }
}

#[test]
fn a_secret_an_issue_quotes_stays_out_of_the_ledger_and_the_logs() {
    if !forge_runs() {
        return;
    }
    let mut one = issue(1, "Leaky", &["runner"]);
    one["body"] = json!("the key is s3cr3t-value-123, do not share");
    let t = Tracker::new(json!([one]), r#"cp "$RUNNER_BRIEF" brief.md"#, "");
    let manifest = std::fs::read_to_string(t.root.join("m.yaml"))
        .unwrap()
        .replace(
            "env: {pass: [PATH, HOME, FAKE_FORGE]}",
            "env: {pass: [PATH, HOME, FAKE_FORGE], secrets: [MY_SECRET]}",
        );
    std::fs::write(t.root.join("m.yaml"), manifest).unwrap();
    let out = t
        .command(&["apply", "m.yaml", "--no-progress"])
        .env("MY_SECRET", "s3cr3t-value-123")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let brief = common::git(&t.root.join("api"), &["show", "runner/issue-1:brief.md"]);
    assert!(brief.contains("the key is ***"), "{brief}");
    for dir in [".runner", "runner-reports"] {
        let found = std::process::Command::new("grep")
            .args(["-rl", "s3cr3t-value-123"])
            .arg(t.root.join(dir))
            .output()
            .unwrap();
        assert!(
            found.stdout.is_empty(),
            "the secret is in {}",
            String::from_utf8_lossy(&found.stdout)
        );
    }
}

#[test]
fn a_plain_file_of_tasks_is_a_source_with_fields_a_brief_and_a_log_written_once() {
    if !forge_runs() {
        return;
    }
    let t = Tracker::new(json!([]), "true", "");
    let adapter = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/sources/tasks.sh");
    std::fs::write(
        t.root.join("m.yaml"),
        format!(
            r#"version: 1
name: tasks
repositories: [{{path: api}}, {{path: web}}]
sources:
  - name: task
    run: ["{adapter}", list, TASKS.md]
    writeback: ["{adapter}", writeback, TASKS.log]
    repo: api
    branch: "runner/{{item}}"
worker:
  run: 'cp "$RUNNER_BRIEF" brief.md && echo "size {{item.size}}" > size.txt'
"#,
            adapter = adapter.display()
        ),
    )
    .unwrap();
    common::repo(&t.root.join("web"));
    let tasks = "# Backlog\n\nNot a task.\n\n\
        ## [bump-serde] Bump serde to 1.0.220\nrepo: web\nsize: 3\n\n\
        The changelog says nothing breaks.\nnote: keep the lock file.\n\n\
        ## Fix the \"login\" redirect!\nlabels: bug, small\n\nIt loops.\n";
    std::fs::write(t.root.join("TASKS.md"), tasks).unwrap();
    // The worker uses `{item.size}`, which the second task does not give: held, named, at plan.
    let (_, plan, err) = t.plan();
    let login = item_of(&plan, "task-fix-the-login-redirect");
    assert_eq!(login["reason"], "missing-var", "{plan:#} {err}");
    assert!(
        login["detail"]
            .as_str()
            .unwrap()
            .contains("the worker's command uses `{item.size}`"),
        "{login:#}"
    );
    let tasks = tasks.replace("labels: bug, small\n", "labels: bug, small\nsize: 1\n");
    std::fs::write(t.root.join("TASKS.md"), &tasks).unwrap();
    let (code, plan, err) = t.plan();
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        ids(&plan),
        ["task-bump-serde", "task-fix-the-login-redirect"],
        "{plan:#}"
    );
    assert_eq!(item_of(&plan, "task-bump-serde")["repo"], "web");
    assert_eq!(item_of(&plan, "task-fix-the-login-redirect")["repo"], "api");
    let out = t.apply(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let brief = common::git(
        &t.root.join("web"),
        &["show", "runner/task-bump-serde:brief.md"],
    );
    assert!(
        brief.contains("Bump serde to 1.0.220")
            && brief.contains("The changelog says nothing breaks.\nnote: keep the lock file."),
        "{brief}"
    );
    let size = common::git(
        &t.root.join("web"),
        &["show", "runner/task-bump-serde:size.txt"],
    );
    assert_eq!(size.trim(), "size 3");
    let brief = common::git(
        &t.root.join("api"),
        &["show", "runner/task-fix-the-login-redirect:brief.md"],
    );
    assert!(
        brief.contains("It loops.") && brief.contains("bug"),
        "{brief}"
    );
    // Each outcome logged once, however often the drain runs; the task file is left as it was.
    let log = std::fs::read_to_string(t.root.join("TASKS.log")).unwrap();
    for item in ["task-bump-serde", "task-fix-the-login-redirect"] {
        let done = log
            .lines()
            .filter(|l| l.contains(&format!(" {item} completed runner:done ")))
            .count();
        assert_eq!(done, 1, "{log}");
    }
    let out = t.apply(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(t.root.join("TASKS.log")).unwrap(),
        log
    );
    // A write-back made again with its key (a run that died before recording it) adds nothing.
    let key = log
        .lines()
        .find_map(|l| l.split(" key=").nth(1))
        .unwrap()
        .to_string();
    let again = std::process::Command::new(&adapter)
        .args(["writeback", "TASKS.log"])
        .current_dir(&t.root)
        .env("RUNNER_ITEM", "task-bump-serde")
        .env("RUNNER_WRITEBACK_EVENT", "completed")
        .env("RUNNER_WRITEBACK_LABEL", "runner:done")
        .env("RUNNER_WRITEBACK_KEY", &key)
        .status()
        .unwrap();
    assert!(again.success());
    assert_eq!(
        std::fs::read_to_string(t.root.join("TASKS.log")).unwrap(),
        log
    );
    assert_eq!(
        std::fs::read_to_string(t.root.join("TASKS.md")).unwrap(),
        tasks
    );
    // Two tasks with one id: the source is unreadable, naming the id; nothing is dropped.
    std::fs::write(
        t.root.join("TASKS.md"),
        format!("{tasks}\n## [bump-serde] Again\n"),
    )
    .unwrap();
    let (code, plan, err) = t.plan();
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("bump-serde"), "{err}");
    assert_eq!(plan["unreadable_sources"][0]["name"], "task", "{plan:#}");
    assert_eq!(
        ids(&plan),
        ["task-bump-serde", "task-fix-the-login-redirect"],
        "{plan:#}"
    );
    // A file that is not there is unreadable too, never "nothing to do".
    std::fs::remove_file(t.root.join("TASKS.md")).unwrap();
    let (code, _, err) = t.plan();
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("cannot read the task file `TASKS.md`"),
        "{err}"
    );
}

/// `runner doctor` runs the GitLab source's `check`: glab reading the project's labels, the
/// missing ones named; a failed glab call in glab's words.
#[test]
fn doctor_checks_a_gitlab_tracker() {
    if !forge_runs() {
        return;
    }
    let t = Tracker::new(json!([]), "true", "");
    t.set_state(&json!({"repos": {"grp/api": {
        "issues": [issue(1, "One", &["runner"])],
        "labels": ["runner", "runner:working", "runner:done"]
    }}}));
    let adapter = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/sources/gitlab.sh");
    let manifest = std::fs::read_to_string(t.root.join("m.yaml"))
        .unwrap()
        .replace("sources/github.sh", "sources/gitlab.sh")
        .replace("acme/api", "grp/api")
        .replace(
            "    repo: api\n",
            &format!(
                "    check: [\"{}\", check, grp/api]\n    repo: api\n",
                adapter.display()
            ),
        );
    std::fs::write(t.root.join("m.yaml"), manifest).unwrap();
    let out = t.run(&["doctor", "m.yaml", "--no-probe"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("ok    source `issue`: read, 1 item"),
        "{text}"
    );
    assert!(
        text.contains("FAIL  source `issue` check: its check failed (exit 1): gitlab.sh: grp/api has no label runner:halted runner:held"),
        "{text}"
    );
    let mut state = t.state();
    state["repos"]["grp/api"]["labels"] = json!([
        "runner",
        "runner:working",
        "runner:done",
        "runner:halted",
        "runner:held"
    ]);
    t.set_state(&state);
    let text = stdout(&t.run(&["doctor", "m.yaml", "--no-probe"]));
    assert!(
        text.contains(
            "ok    source `issue` check: glab logged in to gitlab.com; grp/api has the labels"
        ),
        "{text}"
    );
    state["fail"] = json!({"api": "glab: 401 Unauthorized"});
    t.set_state(&state);
    let text = stdout(&t.run(&["doctor", "m.yaml", "--no-probe"]));
    assert!(
        text.contains("cannot read the labels of grp/api") && text.contains("401 Unauthorized"),
        "{text}"
    );
}
