//! A quarantine that keeps watch: while a repository is quarantined, each later run ends what
//! the quarantined item left that it can prove is the item's — processes keeping the
//! repository's lease lock open, or carrying its run's token with the repository's name — and
//! says so in its report and in `status`; nothing else is touched, and lifting the quarantine
//! stays `runner unlock`'s.
//!
//! The quarantine is a real one: the item leaves a process frozen by the cgroup v1 freezer,
//! which no signal ends while it stays frozen (as a process stuck on a hung mount), so runner
//! cannot prove the item's processes gone.

use crate::common;

use common::{processes_matching, repo, runner, stderr, stdout, wait_for};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

const FREEZER: &str = "/sys/fs/cgroup/freezer";

/// A freezer cgroup of the test's own, thawed and removed when dropped.
struct Freezer(PathBuf);

impl Freezer {
    /// A freezer cgroup named for the calling test (the tests share one process).
    fn new(test: &str) -> Option<Freezer> {
        let dir = Path::new(FREEZER).join(format!("runner-watch-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        let f = Freezer(dir);
        std::fs::write(f.0.join("freezer.state"), "THAWED").ok()?;
        Some(f)
    }

    fn thaw(&self) {
        let _ = std::fs::write(self.0.join("freezer.state"), "THAWED");
    }
}

impl Drop for Freezer {
    fn drop(&mut self) {
        self.thaw();
        for pid in std::fs::read_to_string(self.0.join("cgroup.procs"))
            .unwrap_or_default()
            .split_whitespace()
        {
            let _ = Command::new("kill").args(["-9", pid]).status();
        }
        wait_for(5, || std::fs::remove_dir(&self.0).is_ok());
    }
}

/// Processes the test started, ended however the test ends.
struct Started(Vec<Child>);

impl Drop for Started {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn apply(root: &Path) -> Output {
    runner()
        .current_dir(root)
        .args(["apply", "m.yaml", "--no-progress"])
        .output()
        .unwrap()
}

/// `apply`, its guardian (which keeps watch over the quarantines the run leaves) then ended, as
/// if lost with the machine's restart: the later runs' watch is what is left.
fn apply_unguarded(root: &Path) -> Output {
    let child = runner()
        .current_dir(root)
        .args(["apply", "m.yaml", "--no-progress"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    end_guardian_of(pid);
    out
}

/// End the guardian of the runner whose pid was `pid`.
fn end_guardian_of(pid: u32) {
    for g in processes_matching(&format!("guard-run --for {pid}")) {
        let _ = Command::new("kill").args(["-9", &g.to_string()]).status();
    }
}

/// The `report.json` of the run whose stderr is `said` (its "report in …" line).
fn report_of(said: &str) -> Value {
    let summary = said
        .lines()
        .find_map(|l| l.strip_prefix("runner: report in "))
        .unwrap_or_else(|| panic!("no report named in {said}"));
    let json = Path::new(summary.trim()).with_file_name("report.json");
    serde_json::from_slice(&std::fs::read(json).unwrap()).unwrap()
}

fn status_json(root: &Path) -> Value {
    let out = runner()
        .current_dir(root)
        .args(["status", "m.yaml", "--json"])
        .output()
        .unwrap();
    serde_json::from_str(&stdout(&out)).unwrap()
}

fn status_text(root: &Path) -> String {
    let out = runner()
        .current_dir(root)
        .args(["status", "m.yaml"])
        .output()
        .unwrap();
    stdout(&out)
}

/// A process with only `env` for environment (cleared otherwise) running `sh -c script`.
fn spawn_with(env: &[(&str, &str)], script: &str) -> Child {
    let mut c = Command::new("sh");
    c.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .args(["-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    c.spawn().unwrap()
}

/// Repositories `r` and `s` under `root`, and a manifest over `items` whose item `a` leaves
/// `sleep MARKER` behind, frozen in `freezer` (which its confinement lets it write).
fn freezing(root: &Path, freezer: &Freezer, marker: u32, items: &str) {
    repo(&root.join("r"));
    repo(&root.join("s"));
    let worker = format!(
        "if [ {{item}} = a ]; then sleep {marker} & echo $! > {}; echo FROZEN > {}; fi; true",
        freezer.0.join("cgroup.procs").display(),
        freezer.0.join("freezer.state").display()
    );
    std::fs::write(
        root.join("m.yaml"),
        format!(
            "version: 1\nname: watch\ncapacity: {{workers: 1}}\nrepositories: [{{path: r}}, {{path: s}}]\nworker:\n  run: {}\n  grace: 1s\nitems: {items}\nsandbox: {{writable: [{}]}}\n",
            serde_json::to_string(&worker).unwrap(),
            freezer.0.display()
        ),
    )
    .unwrap();
}

#[test]
fn a_quarantine_keeps_watch_over_what_its_item_left() {
    let Some(freezer) = Freezer::new("later-runs") else {
        common::not_run("the cgroup v1 freezer (/sys/fs/cgroup/freezer) cannot be used here");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // Item r/a leaves `sleep 7391` behind, frozen: it keeps the lease's lock and the run's token.
    freezing(
        root,
        &freezer,
        7391,
        "[{repo: r, id: a}, {repo: r, id: b}, {repo: s, id: c}]",
    );

    // The first run: r/a's process cannot be ended, so `r` is quarantined and r/b held.
    let first = apply_unguarded(root);
    assert_eq!(first.status.code(), Some(1), "{}", stderr(&first));
    assert!(
        stderr(&first).contains("so repository `r` is quarantined"),
        "{}",
        stderr(&first)
    );
    let frozen = processes_matching("sleep 7391");
    assert_eq!(frozen.len(), 1, "the frozen process is there");
    let common = root.join("r/.git");
    let lease: Value =
        serde_json::from_slice(&std::fs::read(common.join("runner.lease.json")).unwrap()).unwrap();
    let token = lease["token"].as_str().unwrap().to_string();
    let first_run = lease["run_id"].as_str().unwrap().to_string();
    assert!(!token.is_empty());

    // What else the item might have left: a descendant carrying its run's token and repository,
    // and one that cleared its environment but keeps the lease's lock open. Beside them, a
    // process with the same token for another repository, and one that has nothing to do with
    // the run: neither may be touched.
    let lock = common.join("runner.lock");
    let mut started = Started(vec![
        spawn_with(
            &[("RUNNER_TOKEN", &token), ("RUNNER_REPO", "r")],
            "exec sleep 7392",
        ),
        spawn_with(&[], &format!("exec sleep 7393 9>>'{}'", lock.display())),
        spawn_with(
            &[("RUNNER_TOKEN", &token), ("RUNNER_REPO", "s")],
            "exec sleep 7394",
        ),
        spawn_with(&[("RUNNER_REPO", "r")], "exec sleep 7395"),
    ]);
    assert!(wait_for(5, || processes_matching("sleep 739").len() == 5));

    // The second run keeps watch: it ends what it can prove is the item's, names what it cannot
    // end, and runs nothing in `r`.
    let second = apply(root);
    let said = stderr(&second);
    assert_eq!(second.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!(
            "repository `r` is quarantined (run `{first_run}`): ended 2 process(es) its item had left"
        )),
        "{said}"
    );
    assert!(
        said.contains(&format!(
            "1 of its item's processes could not be ended (pids {})",
            frozen[0]
        )),
        "{said}"
    );
    for (marker, alive) in [
        ("sleep 7391", true),
        ("sleep 7392", false),
        ("sleep 7393", false),
        ("sleep 7394", true),
        ("sleep 7395", true),
    ] {
        assert_eq!(
            !processes_matching(marker).is_empty(),
            alive,
            "`{marker}` should be {}",
            if alive { "running" } else { "gone" }
        );
    }
    for c in &mut started.0[..2] {
        let _ = c.wait();
    }
    // A run that started nothing leaves `latest` where it was: its report is in its own folder.
    let report = report_of(&said);
    let warnings = report["warnings"].to_string();
    assert!(
        warnings.contains("ended 2 process(es) its item had left"),
        "{warnings}"
    );
    let st = status_json(root);
    let watch = &st["quarantined"][0]["watch"];
    assert_eq!(watch["ended"].as_array().unwrap().len(), 2, "{st}");
    assert_eq!(watch["left"][0][0], frozen[0], "{st}");
    assert_eq!(watch["left"][0][1], "sleep 7391", "{st}");
    let text = status_text(root);
    assert!(text.contains("kept watch: run "), "{text}");
    assert!(
        text.contains(&format!("1 could not be: {} `sleep 7391`", frozen[0])),
        "{text}"
    );

    // The hung process is freed (and ends, its kills pending): the third run finds nothing of
    // the item running, says so in `status`, and the quarantine stands until it is lifted.
    freezer.thaw();
    assert!(wait_for(5, || processes_matching("sleep 7391").is_empty()));
    let third = apply(root);
    assert_eq!(third.status.code(), Some(1), "{}", stderr(&third));
    assert!(
        !stderr(&third).contains("is quarantined ("),
        "{}",
        stderr(&third)
    );
    let text = status_text(root);
    assert!(text.contains("nothing of its item is running"), "{text}");
    let report = report_of(&stderr(&third));
    let rb = report["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"] == "b")
        .unwrap()
        .clone();
    assert_eq!(rb["reason"], "quarantined", "{rb}");

    let out = runner()
        .current_dir(root)
        .args(["unlock", "r", "--manifest", "m.yaml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let last = apply(root);
    assert_eq!(last.status.code(), Some(0), "{}", stderr(&last));
    assert!(stderr(&last).contains("1 completed"), "{}", stderr(&last));
    // The processes that could not be proven the item's ran on, untouched, to the end.
    assert!(!processes_matching("sleep 7394").is_empty());
    assert!(!processes_matching("sleep 7395").is_empty());
}

/// The run that quarantined a repository hands it to its guardian, which keeps watch once the
/// run is over, with no later run: what the item left and can be ended is, within seconds.
#[test]
fn a_quarantine_is_watched_by_the_runs_guardian_between_runs() {
    let Some(freezer) = Freezer::new("guardian") else {
        common::not_run("the cgroup v1 freezer (/sys/fs/cgroup/freezer) cannot be used here");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    freezing(root, &freezer, 7381, "[{repo: r, id: a}]");
    let child = runner()
        .current_dir(root)
        .args(["apply", "m.yaml", "--no-progress"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let first = child.wait_with_output().unwrap();
    assert!(
        stderr(&first).contains("so repository `r` is quarantined"),
        "{}",
        stderr(&first)
    );
    let common = root.join("r/.git");
    let lease: Value =
        serde_json::from_slice(&std::fs::read(common.join("runner.lease.json")).unwrap()).unwrap();
    let token = lease["token"].as_str().unwrap().to_string();
    let run = lease["run_id"].as_str().unwrap().to_string();
    // Something else of the item's turns up after the run ended.
    let mut late = Started(vec![spawn_with(
        &[("RUNNER_TOKEN", &token), ("RUNNER_REPO", "r")],
        "exec sleep 7382",
    )]);
    let late_pid = late.0[0].id() as i32;
    let ended = wait_for(20, || processes_matching("sleep 7382").is_empty());
    let _ = late.0[0].wait();
    late.0.clear();
    // What the guardian did: beside the quarantine, and in the run's logs.
    let read_watch = || -> Value {
        std::fs::read(common.join("runner.quarantine-watch.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    };
    wait_for(10, || {
        read_watch()["ended"]
            .as_array()
            .is_some_and(|e| e.contains(&Value::from(late_pid)))
    });
    let watch = read_watch();
    let log = common::walk_files(&root.join("runner-reports"))
        .iter()
        .find(|p| p.ends_with("logs/guardian.log"))
        .map(|p| std::fs::read_to_string(p).unwrap())
        .unwrap_or_default();
    freezer.thaw();
    let thawed = wait_for(10, || processes_matching("sleep 7381").is_empty());
    end_guardian_of(pid);
    assert!(ended, "the guardian ended what turned up: {log}");
    assert_eq!(watch["run_id"], run.as_str(), "{watch}\n{log}");
    assert!(
        watch["ended"]
            .as_array()
            .is_some_and(|e| e.contains(&Value::from(late_pid))),
        "{watch}"
    );
    assert!(thawed);
}
