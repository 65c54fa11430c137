//! Items from a tracker: the shipped GitHub source adapter (`manifests/sources/github.sh`) run
//! unchanged against a fake `gh` (`tests/forge/fake-forge`, the forge cannot be reached from
//! here), through the built binary on real repositories.

mod common;

use common::{latest_report, repo, report_item, runner, stderr, stdout};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Output;

/// A folder with repository `api`, a fake forge holding `issues` for `acme/api`, `gh` on PATH,
/// and a manifest whose source reads the issues labelled `runner`.
struct Tracker {
    _dir: tempfile::TempDir,
    root: PathBuf,
    bin: PathBuf,
}

/// The fake forge is Python and answers `--jq` through jq: without them the tests cannot run
/// (a failure in CI, "not run" elsewhere).
fn forge_runs() -> bool {
    common::have(
        "python3 (for the fake forge)",
        std::process::Command::new("python3").arg("--version"),
    ) && common::have(
        "jq (for the fake forge's --jq)",
        std::process::Command::new("jq").arg("--version"),
    )
}

impl Tracker {
    fn new(issues: Value, worker: &str, extra: &str) -> Tracker {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        repo(&root.join("api"));
        let bin = root.join("bin");
        std::fs::create_dir(&bin).unwrap();
        let forge = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/forge/fake-forge");
        for cli in ["gh", "glab"] {
            std::os::unix::fs::symlink(&forge, bin.join(cli)).unwrap();
        }
        let t = Tracker {
            _dir: dir,
            root,
            bin,
        };
        t.set_issues(issues);
        let adapter = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/sources/github.sh");
        std::fs::write(
            t.root.join("m.yaml"),
            format!(
                r#"version: 1
name: tracker
repositories: [{{path: api}}]
sources:
  - name: issue
    run: ["{adapter}", list, acme/api, runner]
    writeback: ["{adapter}", writeback, acme/api]
    repo: api
    branch: "runner/{{item}}"
{extra}env: {{pass: [PATH, HOME, FAKE_FORGE]}}
worker:
  run: {worker}
"#,
                adapter = adapter.display(),
                worker = serde_json::to_string(worker).unwrap()
            ),
        )
        .unwrap();
        t
    }

    fn forge(&self) -> PathBuf {
        self.root.join("forge.json")
    }

    /// The forge's file, read whole (the fake rewrites it in place under its lock: a read in
    /// between sees it empty or cut, and is made again).
    fn state(&self) -> Value {
        for _ in 0..200 {
            if let Ok(v) = serde_json::from_str(&std::fs::read_to_string(self.forge()).unwrap()) {
                return v;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!(
            "the fake forge's file stays unreadable: {:?}",
            std::fs::read_to_string(self.forge())
        );
    }

    fn set_state(&self, v: &Value) {
        std::fs::write(self.forge(), serde_json::to_string_pretty(v).unwrap()).unwrap();
    }

    fn set_issues(&self, issues: Value) {
        self.set_state(&json!({"repos": {"acme/api": {"issues": issues}}}));
    }

    /// runner in the folder, with the fake forge first on PATH.
    fn command(&self, args: &[&str]) -> std::process::Command {
        let path = format!(
            "{}:{}",
            self.bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut c = runner();
        c.current_dir(&self.root)
            .args(args)
            .env("PATH", path)
            .env("FAKE_FORGE", self.forge());
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    fn plan(&self) -> (Option<i32>, Value, String) {
        self.plan_with(&[])
    }

    fn plan_with(&self, extra: &[&str]) -> (Option<i32>, Value, String) {
        let mut args = vec!["plan", "m.yaml", "--json"];
        args.extend(extra);
        let out = self.run(&args);
        let plan = serde_json::from_str(&stdout(&out)).unwrap_or(Value::Null);
        (out.status.code(), plan, stderr(&out))
    }

    fn apply(&self, extra: &[&str]) -> Output {
        let mut args = vec!["apply", "m.yaml", "--no-progress"];
        args.extend(extra);
        self.run(&args)
    }
}

/// The report of the run whose stderr is `err` (`latest` names the last run that did work).
fn report_of(err: &str) -> Value {
    let line = err
        .lines()
        .find_map(|l| l.strip_prefix("runner: report in "))
        .expect("the run names its report");
    let dir = Path::new(line.trim()).parent().unwrap();
    serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap()
}

fn issue(number: u64, title: &str, labels: &[&str]) -> Value {
    json!({"number": number, "title": title, "body": format!("The body of {number}."), "labels": labels})
}

fn ids(plan: &Value) -> Vec<String> {
    let mut v: Vec<String> = plan["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap().to_string())
        .collect();
    v.sort();
    v
}

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

/// The comments runner posted on issue `n` about its completion.
fn completed_comments(t: &Tracker, n: u64) -> usize {
    let state = t.state();
    state["repos"]["acme/api"]["issues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["number"] == n)
        .unwrap()["comments"]
        .as_array()
        .map_or(0, |c| {
            c.iter()
                .filter(|c| {
                    c["author"] == "runner-bot"
                        && c["body"].as_str().unwrap().contains("completed this")
                })
                .count()
        })
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

/// The pull requests of the forge's `acme/api`.
fn pulls(t: &Tracker) -> Vec<Value> {
    t.state()["repos"]["acme/api"]["pulls"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn item_of<'a>(plan: &'a Value, id: &str) -> &'a Value {
    plan["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"] == id)
        .unwrap_or_else(|| panic!("no {id} in {plan:#}"))
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
    // A state that cannot be read is never taken as merged or closed.
    let mut state = t.state();
    state["fail"] = json!({"pr view": "HTTP 502: Server Error"});
    t.set_state(&state);
    let (_, plan, err) = t.plan();
    for id in ["issue-1", "issue-2", "issue-3"] {
        let it = item_of(&plan, id);
        assert_eq!(it["state"], "held", "{id}: {it:#} {err}");
        assert_eq!(it["reason"], "pr-unknown");
        assert!(
            it["detail"].as_str().unwrap().contains("HTTP 502"),
            "{it:#}"
        );
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

/// The folder of the report of the run whose stderr is `err`.
fn report_dir(err: &str) -> PathBuf {
    let line = err
        .lines()
        .find_map(|l| l.strip_prefix("runner: report in "))
        .expect("the run names its report");
    Path::new(line.trim()).parent().unwrap().to_path_buf()
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
fn a_review_asking_for_changes_is_a_round_with_its_feedback_then_needs_a_human() {
    if !forge_runs() {
        return;
    }
    let publish = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/publish/github.sh");
    let t = Tracker::new(
        json!([issue(1, "One", &["runner"])]),
        r#"if [ -n "$RUNNER_FEEDBACK" ]; then cp "$RUNNER_FEEDBACK" feedback.md; fi; echo "$RUNNER_ITEM $RUNNER_RUN_ID" >> done.txt"#,
        "",
    );
    let manifest = std::fs::read_to_string(t.root.join("m.yaml")).unwrap();
    std::fs::write(
        t.root.join("m.yaml"),
        format!(
            "{manifest}publish:\n  push: false\n  review_rounds: 1\n  pr: [\"{p}\", pr, \"{{branch}}\"]\n  state: [\"{p}\", state]\n",
            p = publish.display()
        ),
    )
    .unwrap();
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
    // Still asking after the one round allowed: a person takes it from here.
    let (_, plan, err) = t.plan();
    let one = item_of(&plan, "issue-1");
    assert_eq!(one["state"], "held", "{one:#} {err}");
    assert_eq!(one["reason"], "needs-human");
    assert!(
        one["detail"].as_str().unwrap().contains("pull/101"),
        "{one:#}"
    );
}

#[test]
fn a_round_after_someone_else_pushed_starts_from_their_head_and_never_forces() {
    if !forge_runs() {
        return;
    }
    let publish = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/publish/github.sh");
    let t = Tracker::new(
        json!([issue(1, "One", &["runner"])]),
        r#"echo "$RUNNER_RUN_ID" >> done.txt"#,
        "",
    );
    let api = t.root.join("api");
    let origin = t.root.join("origin.git");
    common::git(&t.root, &["init", "-q", "--bare", origin.to_str().unwrap()]);
    common::git(&api, &["remote", "add", "origin", origin.to_str().unwrap()]);
    let manifest = std::fs::read_to_string(t.root.join("m.yaml")).unwrap();
    std::fs::write(
        t.root.join("m.yaml"),
        format!(
            "{manifest}publish:\n  pr: [\"{p}\", pr, \"{{branch}}\"]\n  state: [\"{p}\", state]\n",
            p = publish.display()
        ),
    )
    .unwrap();
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
