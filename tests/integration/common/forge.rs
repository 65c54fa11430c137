//! A folder with a repository and a fake forge (`tests/forge/fake-forge` as `gh` and `glab` on
//! PATH): what the tracker and pull-request tests share.

use super::{repo, runner, stderr, stdout};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Output;

/// A folder with repository `api`, a fake forge holding `issues` for `acme/api`, `gh` on PATH,
/// and a manifest whose source reads the issues labelled `runner`.
pub struct Tracker {
    _dir: tempfile::TempDir,
    pub root: PathBuf,
    pub bin: PathBuf,
}

/// The fake forge is Python and answers `--jq` through jq: without them the tests cannot run
/// (a failure in CI, "not run" elsewhere).
pub fn forge_runs() -> bool {
    super::have(
        "python3 (for the fake forge)",
        std::process::Command::new("python3").arg("--version"),
    ) && super::have(
        "jq (for the fake forge's --jq)",
        std::process::Command::new("jq").arg("--version"),
    )
}

impl Tracker {
    pub fn new(issues: Value, worker: &str, extra: &str) -> Tracker {
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

    pub fn forge(&self) -> PathBuf {
        self.root.join("forge.json")
    }

    /// The forge's file, read whole (the fake rewrites it in place under its lock: a read in
    /// between sees it empty or cut, and is made again).
    pub fn state(&self) -> Value {
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

    pub fn set_state(&self, v: &Value) {
        std::fs::write(self.forge(), serde_json::to_string_pretty(v).unwrap()).unwrap();
    }

    pub fn set_issues(&self, issues: Value) {
        self.set_state(&json!({"repos": {"acme/api": {"issues": issues}}}));
    }

    /// runner in the folder, with the fake forge first on PATH.
    pub fn command(&self, args: &[&str]) -> std::process::Command {
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

    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    pub fn plan(&self) -> (Option<i32>, Value, String) {
        self.plan_with(&[])
    }

    pub fn plan_with(&self, extra: &[&str]) -> (Option<i32>, Value, String) {
        let mut args = vec!["plan", "m.yaml", "--json"];
        args.extend(extra);
        let out = self.run(&args);
        let plan = serde_json::from_str(&stdout(&out)).unwrap_or(Value::Null);
        (out.status.code(), plan, stderr(&out))
    }

    pub fn apply(&self, extra: &[&str]) -> Output {
        let mut args = vec!["apply", "m.yaml", "--no-progress"];
        args.extend(extra);
        self.run(&args)
    }
}

/// The report of the run whose stderr is `err` (`latest` names the last run that did work).
pub fn report_of(err: &str) -> Value {
    let dir = report_dir(err);
    serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap()
}

/// The folder of the report of the run whose stderr is `err`.
pub fn report_dir(err: &str) -> PathBuf {
    let line = err
        .lines()
        .find_map(|l| l.strip_prefix("runner: report in "))
        .expect("the run names its report");
    Path::new(line.trim()).parent().unwrap().to_path_buf()
}

pub fn issue(number: u64, title: &str, labels: &[&str]) -> Value {
    json!({"number": number, "title": title, "body": format!("The body of {number}."), "labels": labels})
}

pub fn ids(plan: &Value) -> Vec<String> {
    let mut v: Vec<String> = plan["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap().to_string())
        .collect();
    v.sort();
    v
}

/// The comments runner posted on issue `n` about its completion.
pub fn completed_comments(t: &Tracker, n: u64) -> usize {
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

/// The pull requests of the forge's `acme/api`.
pub fn pulls(t: &Tracker) -> Vec<Value> {
    t.state()["repos"]["acme/api"]["pulls"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

pub fn item_of<'a>(plan: &'a Value, id: &str) -> &'a Value {
    plan["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"] == id)
        .unwrap_or_else(|| panic!("no {id} in {plan:#}"))
}
