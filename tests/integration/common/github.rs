//! The real GitHub CLI (`gh`) against a loopback GitHub Enterprise host
//! (`tests/forge/github-standin`: GraphQL and REST over HTTPS with a test CA), with a repository
//! `api` whose remote `github` is on that host (for `gh pr create`) and whose remote `origin` is a
//! bare repository runner pushes to, and whose branches the host's pull requests follow.

use super::{repo, runner, stderr, stdout};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

/// A folder with the host, the repository, and a manifest whose source reads the issues of
/// `acme/api` labelled `runner` and whose pull requests are opened and read through `gh`.
pub struct Github {
    _dir: tempfile::TempDir,
    pub root: PathBuf,
    /// `127.a.b.c`: the host's address and name (`GH_HOST`).
    pub host: String,
    server: Child,
}

impl Drop for Github {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

/// `gh` (Debian's package), Python (the host) and openssl (its test CA): without them the tests
/// cannot run (a failure in CI, "not run" elsewhere). The version is printed.
pub fn gh_runs() -> bool {
    let ok = super::have("gh (the GitHub CLI)", Command::new("gh").arg("--version"))
        && super::have(
            "python3 (for the GitHub stand-in)",
            Command::new("python3").arg("--version"),
        )
        && super::have(
            "openssl (for the stand-in's test CA)",
            Command::new("openssl").arg("version"),
        )
        && super::have("jq (for the adapters)", Command::new("jq").arg("--version"));
    if ok {
        let v = Command::new("gh").arg("--version").output().unwrap();
        eprintln!(
            "{}",
            String::from_utf8_lossy(&v.stdout)
                .lines()
                .next()
                .unwrap_or("")
        );
    }
    ok
}

static NEXT: AtomicU32 = AtomicU32::new(0);

impl Github {
    /// The host, holding `issues` for `acme/api` (and the labels runner sets), and the folder.
    /// `None` (said "not run") where port 443 cannot be had: `gh` matches a remote to its host
    /// without the port, so the host listens on 443 of an address of its own.
    pub fn start(issues: Value, worker: &str) -> Option<Github> {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let api = root.join("api");
        repo(&api);
        let origin = root.join("origin.git");
        super::git(&root, &["init", "-q", "--bare", origin.to_str().unwrap()]);
        super::git(&api, &["remote", "add", "origin", origin.to_str().unwrap()]);
        let standin = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/forge/github-standin");
        let state = json!({"repos": {"acme/api": {
            "issues": issues,
            "labels": ["runner", "runner:working", "runner:done", "runner:halted", "runner:held"],
            "git": origin,
        }}});
        std::fs::write(
            root.join("forge.json"),
            serde_json::to_string_pretty(&state).unwrap(),
        )
        .unwrap();
        let mut last = String::new();
        for _ in 0..8 {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let host = format!(
                "127.{}.{}.{}",
                20 + std::process::id() % 200,
                n / 250,
                1 + n % 250
            );
            let _ = std::fs::remove_file(root.join("ready"));
            let mut server = Command::new("python3")
                .arg(&standin)
                .arg(&root)
                .arg(&host)
                .stderr(std::fs::File::create(root.join("standin.log")).unwrap())
                .spawn()
                .unwrap();
            let started = std::time::Instant::now();
            while started.elapsed() < std::time::Duration::from_secs(30) {
                if root.join("ready").exists() {
                    super::git(
                        &api,
                        &[
                            "remote",
                            "add",
                            "github",
                            &format!("https://{host}/acme/api.git"),
                        ],
                    );
                    let g = Github {
                        _dir: dir,
                        root,
                        host,
                        server,
                    };
                    g.write_manifest(worker);
                    return Some(g);
                }
                if let Ok(Some(_)) = server.try_wait() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            let _ = server.kill();
            let _ = server.wait();
            last = std::fs::read_to_string(root.join("standin.log")).unwrap_or_default();
            if last.contains("Permission denied") {
                super::not_run("the GitHub stand-in cannot listen on port 443 here (not root)");
                return None;
            }
        }
        panic!("the GitHub stand-in did not start: {last}");
    }

    fn write_manifest(&self, worker: &str) {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests");
        let (source, publish) = (dir.join("sources/github.sh"), dir.join("publish/github.sh"));
        std::fs::write(
            self.root.join("m.yaml"),
            format!(
                r#"version: 1
name: tracker
repositories: [{{path: api}}]
sources:
  - name: issue
    run: ["{source}", list, "{host}/acme/api", runner]
    writeback: ["{source}", writeback, "{host}/acme/api"]
    check: ["{source}", check, "{host}/acme/api", runner]
    repo: api
    branch: "runner/{{item}}"
publish:
  review_rounds: 3
  pr: ["{publish}", pr, "{{branch}}"]
  state: ["{publish}", state]
env:
  pass: [PATH, HOME, GH_HOST, GH_CONFIG_DIR, SSL_CERT_FILE]
  secrets: [GH_ENTERPRISE_TOKEN]
  roles: {{GH_ENTERPRISE_TOKEN: [source, publish]}}
worker:
  run: {worker}
"#,
                source = source.display(),
                publish = publish.display(),
                host = self.host,
                worker = serde_json::to_string(worker).unwrap()
            ),
        )
        .unwrap();
    }

    /// The host's file: what it keeps, and the calls it was asked.
    pub fn state(&self) -> Value {
        serde_json::from_str(&std::fs::read_to_string(self.root.join("forge.json")).unwrap())
            .unwrap()
    }

    pub fn set_state(&self, v: &Value) {
        let tmp = self.root.join("forge.json.edit");
        std::fs::write(&tmp, serde_json::to_string_pretty(v).unwrap()).unwrap();
        std::fs::rename(tmp, self.root.join("forge.json")).unwrap();
    }

    /// Change the repository's record in the host's file.
    pub fn edit(&self, f: impl FnOnce(&mut Value)) {
        let mut state = self.state();
        f(&mut state["repos"]["acme/api"]);
        self.set_state(&state);
    }

    /// Make the host answer HTTP 500 to these calls (`graphql IssueSearch`, `rest GET /repos/…`),
    /// or to none.
    pub fn fail(&self, calls: &[(&str, &str)]) {
        let mut state = self.state();
        state["fail"] = calls
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect::<serde_json::Map<_, _>>()
            .into();
        self.set_state(&state);
    }

    /// The calls the host was asked since the last `forget_calls`.
    pub fn calls(&self) -> Vec<String> {
        self.state()["calls"]
            .as_array()
            .map(|a| a.iter().map(|c| c.as_str().unwrap().to_string()).collect())
            .unwrap_or_default()
    }

    pub fn forget_calls(&self) {
        let mut state = self.state();
        state["calls"] = json!([]);
        self.set_state(&state);
    }

    /// The environment a GitHub Enterprise user sets for `gh`.
    pub fn gh_env(&self, c: &mut Command) {
        c.env("GH_HOST", &self.host)
            .env("GH_ENTERPRISE_TOKEN", "ghe-test-token")
            .env("SSL_CERT_FILE", self.root.join("ca.pem"))
            .env("GH_CONFIG_DIR", self.root.join("gh-config"))
            .env("HOME", &self.root)
            .env("GH_PROMPT_DISABLED", "1")
            .env("GH_NO_UPDATE_NOTIFIER", "1")
            .env_remove("GH_TOKEN")
            .env_remove("GITHUB_TOKEN");
    }

    pub fn run(&self, args: &[&str]) -> Output {
        let mut c = runner();
        c.current_dir(&self.root).args(args);
        self.gh_env(&mut c);
        c.output().unwrap()
    }

    pub fn plan(&self) -> (Option<i32>, Value, String) {
        let out = self.run(&["plan", "m.yaml", "--json"]);
        let plan = serde_json::from_str(&stdout(&out)).unwrap_or(Value::Null);
        (out.status.code(), plan, stderr(&out))
    }

    pub fn apply(&self, extra: &[&str]) -> Output {
        let mut args = vec!["apply", "m.yaml", "--no-progress"];
        args.extend(extra);
        let out = self.run(&args);
        // The drain's last lines, as a cron log would keep them.
        let err = stderr(&out);
        let lines: Vec<&str> = err.lines().collect();
        eprintln!(
            "--- runner {} (exit {:?}), its last lines:\n{}",
            args.join(" "),
            out.status.code(),
            lines[lines.len().saturating_sub(4)..].join("\n")
        );
        out
    }

    /// The pull request of `branch`.
    pub fn pull(&self, branch: &str) -> Value {
        self.state()["repos"]["acme/api"]["pulls"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["headRefName"] == branch)
            .cloned()
            .unwrap_or_else(|| panic!("no pull request of {branch}"))
    }

    /// Issue `n`.
    pub fn issue(&self, n: u64) -> Value {
        self.state()["repos"]["acme/api"]["issues"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["number"] == n)
            .cloned()
            .unwrap()
    }
}

/// An open issue.
pub fn issue(number: u64, title: &str, labels: &[&str]) -> Value {
    json!({"number": number, "title": title, "body": format!("Do {title}."), "labels": labels, "state": "open", "comments": []})
}
