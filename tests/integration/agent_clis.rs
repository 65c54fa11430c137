//! The shipped adapters with the real agent CLIs: Claude Code, Codex, Gemini CLI and opencode,
//! installed from npm at the versions `tests/clis/package.json` pins, and aider, from PyPI at the
//! version `tests/clis/requirements.txt` pins (both installed by `.ci/run`), driven through
//! runner against a loopback model API (`tests/clis/mock_api.py`: Anthropic Messages, OpenAI
//! Responses and Chat Completions, Gemini `streamGenerateContent`). The mock answers by model
//! and task:
//! an edit made with the CLI's own file tool lands in the item's commit; a broken first edit is
//! fixed on attempt 2 from runner's feedback; a 429 with `retry-after`, an overload (529, 503), a
//! refused key (401) and a stream that stalls after its first event each reach runner at once —
//! one request, no retries of the CLI's own — and runner's back-off, chain and provider health
//! decide what follows; the key and a manifest secret appear in nothing runner keeps.
//!
//! Each test prints the CLI's version and fails when it is not the pinned one, or when the CLI's
//! output no longer carries what its adapter reads (naming it). Where a CLI is not installed the
//! test says it did not run (a failure in CI).

use crate::common;

use common::{git, latest_report, report_item, stderr};
use serde_json::Value;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

const KEY: &str = "sk-test-Zq8vN3kLw0pR5tYu";
const TOKEN: &str = "tok-manifest-secret-7Hd2Kx";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// One agent CLI and how its adapter is pointed at the mock.
#[derive(Clone, Copy)]
struct Cli {
    program: &'static str,
    package: &'static str,
    adapter: &'static str,
    /// What the CLI writes outside the item, as its adapter documents it for
    /// `sandbox.writable` (the test's home is `~`).
    writable: &'static str,
    /// What the CLI tries to write outside those or to reach besides its provider, is denied,
    /// and does without (a part of each path or `host:port`, with why): the report lists
    /// these, and nothing else.
    denied: &'static [&'static str],
    /// The model as the chain names it (the mock reads the part after any `provider/`), with
    /// the trouble as a suffix.
    model: &'static str,
    /// The provider's words for a refused key, as the mock gives them.
    refused: &'static str,
    /// The status the mock answers an overloaded model with.
    overloaded: u16,
    /// Requests of one task done: Claude Code reads the file, writes it and says it is done;
    /// Codex runs one command and Gemini CLI writes the file, each then says it is done.
    turns: usize,
    /// The wait the CLI shows from the provider's 429 (the mock asks for 2 s), which its
    /// adapter hands on: Gemini CLI shows the `RetryInfo` delay; neither Claude Code nor Codex
    /// shows a `retry-after` once its own retries are off.
    retry_hint_ms: Option<u64>,
    /// The `silence` of the stall test, in seconds: longer than the CLI takes to start and send
    /// its first request while the other tests load both cores (aider imports litellm first,
    /// and was seen silent for over 4 s before asking anything; gemini and opencode, started by
    /// node, over 4 s on a machine also building).
    silence_s: u64,
}

const CLAUDE: Cli = Cli {
    program: "claude",
    package: "@anthropic-ai/claude-code",
    adapter: "claude.sh",
    writable: r#"["~/.claude", "~/.claude.json"]"#,
    // Its atomic save of `~/.claude.json` writes a temporary file beside it, in the home; refused
    // that, it writes the file in place.
    denied: &["/.claude.json.tmp."],
    model: "claude-sonnet-4-5",
    // Claude Code puts its own words in place of the provider's.
    refused: "Invalid API key",
    overloaded: 529,
    turns: 3,
    retry_hint_ms: None,
    silence_s: 8,
};

const CODEX: Cli = Cli {
    program: "codex",
    package: "@openai/codex",
    adapter: "codex.sh",
    writable: r#"["$CODEX_HOME"]"#,
    // It looks for a newer release on GitHub and asks ChatGPT's backend about the account:
    // hosts the manifest does not list, so refused at the proxy.
    denied: &["github.com:443", "chatgpt.com:443"],
    model: "gpt-5-codex",
    refused: "Incorrect API key provided",
    overloaded: 503,
    turns: 2,
    retry_hint_ms: None,
    silence_s: 8,
};

const OPENCODE: Cli = Cli {
    program: "opencode",
    package: "opencode-linux-x64",
    adapter: "opencode.sh",
    writable: r#"["~/.config/opencode", "~/.local/share/opencode", "~/.local/state/opencode", "~/.cache/opencode"]"#,
    // opencode names a model by its provider: here Anthropic's, at the mock's address.
    // It caches a project id in the repository's shared git folder, and makes npm's cache
    // folder and asks npm's registry for plugins it has none of.
    denied: &["/.git/opencode", "/home/.npm", "registry.npmjs.org:443"],
    model: "anthropic/claude-sonnet-4-5",
    refused: "invalid x-api-key",
    overloaded: 529,
    turns: 3,
    retry_hint_ms: None,
    silence_s: 8,
};

const GEMINI: Cli = Cli {
    program: "gemini",
    package: "@google/gemini-cli",
    adapter: "gemini.sh",
    writable: r#"["~/.gemini"]"#,
    denied: &[],
    model: "gemini-2.5-pro",
    refused: "API key not valid",
    overloaded: 503,
    turns: 2,
    retry_hint_ms: Some(2000),
    silence_s: 8,
};

const AIDER: Cli = Cli {
    program: "aider",
    package: "aider-chat",
    adapter: "aider.sh",
    writable: r#"["~/.aider", "~/.cache"]"#,
    // aider (through litellm) names a model by its provider: here OpenAI's, at the mock's
    // address (`OPENAI_API_BASE`).
    // litellm fetches its model price list from GitHub: not a listed host.
    denied: &["raw.githubusercontent.com:443"],
    model: "openai/gpt-4.1",
    // litellm's words for OpenAI's 401.
    refused: "not able to authenticate you",
    overloaded: 503,
    // aider asks once and answers with an edit block it applies itself.
    turns: 1,
    // aider shows its own first wait (`Retrying in 0.2 seconds...`), not the provider's.
    retry_hint_ms: Some(200),
    silence_s: 15,
};

/// Where the installed CLIs are: npm's bin folder, the folder of opencode's platform package
/// (which ships its binary and no bin entry; `opencode-ai`, which would link it, installs the
/// packages of every platform, not all of which the registry here has), and the virtual
/// environment aider is installed in from PyPI (`tests/clis/requirements.txt`).
fn bins() -> Vec<PathBuf> {
    let clis = root().join("tests/clis");
    vec![
        clis.join("node_modules/.bin"),
        clis.join("node_modules/opencode-linux-x64/bin"),
        clis.join("venv/bin"),
    ]
}

/// The version `tests/clis` pins `package` at: in package.json (npm), else in
/// requirements.txt (PyPI).
fn pinned(package: &str) -> String {
    let npm: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("tests/clis/package.json")).unwrap(),
    )
    .unwrap();
    if let Some(v) = npm["dependencies"][package].as_str() {
        return v.to_string();
    }
    std::fs::read_to_string(root().join("tests/clis/requirements.txt"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{package}==")).map(str::to_string))
        .unwrap_or_else(|| panic!("tests/clis pins no version of {package}"))
}

/// The CLI is installed at its pinned version (printed), or the test does not run.
fn installed(cli: Cli) -> bool {
    let Some(program) = bins()
        .into_iter()
        .map(|b| b.join(cli.program))
        .find(|p| p.exists())
    else {
        common::not_run(&format!(
            "{} ({}) is not installed under tests/clis (see .ci/run)",
            cli.program, cli.package
        ));
        return false;
    };
    let pinned = pinned(cli.package);
    let out = Command::new(&program)
        .arg("--version")
        .env("HOME", std::env::temp_dir())
        .output()
        .unwrap();
    let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
    println!("{} --version: {version}", cli.program);
    eprintln!("{} --version: {version}", cli.program);
    assert!(
        version.contains(&pinned),
        "{} says it is `{version}`; its adapter (manifests/agents/{}) and these tests were \
         checked against {pinned} (tests/clis): check the CLI's flags and output \
         before moving the pin",
        cli.program,
        cli.adapter
    );
    true
}

/// The mock model API, listening on loopback until dropped.
struct Mock {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Drop for Mock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Mock {
    fn start(dir: &Path) -> Mock {
        let log = dir.join("api.log");
        let mut child = Command::new("python3")
            .arg(root().join("tests/clis/mock_api.py"))
            .arg("--log")
            .arg(&log)
            .env("MOCK_SECRET", TOKEN)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs the mock API");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().parse().expect("the mock prints its port");
        Mock { child, port, log }
    }

    /// The requests the mock answered, in order.
    fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The statuses answered to `model`'s requests, in order.
    fn statuses(&self, model: &str) -> Vec<u64> {
        let model = model.rsplit('/').next().unwrap_or(model);
        self.requests()
            .iter()
            .filter(|r| r["model"] == model)
            .map(|r| r["status"].as_u64().unwrap())
            .collect()
    }
}

/// A fleet of one repository per item, driven by `cli`'s adapter against a fresh mock.
struct Fleet {
    dir: tempfile::TempDir,
    mock: Mock,
    cli: Cli,
}

/// A task the mock reads: write `content` into greeting.txt (`first` on a first attempt).
fn task(content: &str, first: Option<&str>) -> String {
    let first = first.map(|f| format!("\\nfirst: {f}")).unwrap_or_default();
    format!("Write the greeting.\\nfile: greeting.txt\\ncontent: {content}{first}")
}

fn fleet(cli: Cli, models: &str, top: &str, tasks: &[String]) -> Fleet {
    let dir = tempfile::tempdir().unwrap();
    let mock = Mock::start(dir.path());
    let mut repos = String::new();
    let mut items = String::new();
    for (i, t) in tasks.iter().enumerate() {
        common::repo(&dir.path().join(format!("r{i}")));
        repos.push_str(&format!("  - path: r{i}\n"));
        items.push_str(&format!(
            "  - {{repo: r{i}, id: i{i}, branch: \"agent/{{item}}\", vars: {{task: \"{t}\"}}}}\n"
        ));
    }
    std::fs::create_dir_all(dir.path().join("home")).unwrap();
    std::fs::create_dir_all(dir.path().join("codex-home")).unwrap();
    // opencode reads its providers from the user's config: Anthropic's at the mock, with the
    // models the mock knows (a model opencode does not know it will not ask for).
    let opencode = dir.path().join("home/.config/opencode");
    std::fs::create_dir_all(&opencode).unwrap();
    // Who commits: aider writes a placeholder identity into the repository's shared config
    // when none is configured, which a confined item may not.
    std::fs::write(
        dir.path().join("home/.gitconfig"),
        "[user]\n\tname = agent\n\temail = agent@example.com\n",
    )
    .unwrap();
    let known: serde_json::Map<String, Value> = ["", "-401", "-429", "-529", "-stall"]
        .iter()
        .map(|t| (format!("claude-sonnet-4-5{t}"), serde_json::json!({})))
        .collect();
    std::fs::write(
        opencode.join("opencode.json"),
        serde_json::json!({"provider": {"anthropic": {
            "options": {"baseURL": format!("http://127.0.0.1:{}/v1", mock.port)},
            "models": known,
        }}})
        .to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("m.yaml"),
        format!(
            r#"version: 1
name: agent-{program}
capacity: {{workers: 2}}
repositories:
{repos}models: {models}
worker:
  run: ["{adapter}", "{{model}}", "{{item.task}}"]
  timeout: 2m
{top}
# Confined as the shipped adapter says: only what the CLI writes outside the item; and no
# network but the provider's (the mock's), through runner's proxy.
sandbox: {{writable: {writable}, network: ["127.0.0.1:{port}"]}}
gates:
  - name: test
    run: "grep -qx hello greeting.txt"
env:
  pass: [PATH, HOME, LANG, TMPDIR, ANTHROPIC_BASE_URL, OPENAI_BASE_URL, OPENAI_API_BASE, CODEX_HOME, GOOGLE_GEMINI_BASE_URL]
  secrets: [ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY, RUNNER_TEST_TOKEN]
items:
{items}"#,
            program = cli.program,
            port = mock.port,
            adapter = root().join("manifests/agents").join(cli.adapter).display(),
            writable = cli
                .writable
                .replace("$CODEX_HOME", &dir.path().join("codex-home").display().to_string()),
        ),
    )
    .unwrap();
    Fleet { dir, mock, cli }
}

impl Fleet {
    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Every log of the run, for a failure's message.
    fn logs(&self) -> String {
        let mut out = format!(
            "--- the mock's log\n{}\n",
            std::fs::read_to_string(&self.mock.log).unwrap_or_default()
        );
        let mut stack = vec![self.path().join("runner-reports")];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "log") {
                    let text = std::fs::read_to_string(&p).unwrap_or_default();
                    out.push_str(&format!("--- {}\n{text}\n", p.display()));
                }
            }
        }
        out
    }

    fn apply(&self) -> Output {
        let out = self.command(&[
            "apply",
            "m.yaml",
            "--no-progress",
            "--events",
            "events.jsonl",
        ]);
        self.nothing_kept_holds_a_secret(&out);
        out
    }

    /// runner with `args`, its environment pointing the CLIs at the mock.
    fn command(&self, args: &[&str]) -> Output {
        let url = format!("http://127.0.0.1:{}", self.mock.port);
        common::runner()
            .current_dir(self.path())
            .args(args)
            .env_remove("RUNNER_SANDBOX_WRITABLE")
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    std::env::join_paths(bins()).unwrap().to_string_lossy(),
                    std::env::var("PATH").unwrap()
                ),
            )
            .env("HOME", self.path().join("home"))
            .env("CODEX_HOME", self.path().join("codex-home"))
            .env("ANTHROPIC_BASE_URL", &url)
            .env("OPENAI_BASE_URL", format!("{url}/v1"))
            .env("OPENAI_API_BASE", format!("{url}/v1"))
            .env("GOOGLE_GEMINI_BASE_URL", &url)
            .env("ANTHROPIC_API_KEY", KEY)
            .env("OPENAI_API_KEY", KEY)
            .env("GEMINI_API_KEY", KEY)
            .env("RUNNER_TEST_TOKEN", TOKEN)
            .output()
            .unwrap()
    }

    /// The key and the manifest secret are in no log, report, event or ledger row, nor on
    /// runner's own output — though the mock echoed the key in its refusal and the agent
    /// printed the secret in its last message.
    fn nothing_kept_holds_a_secret(&self, out: &Output) {
        let mut files = vec![self.path().join("events.jsonl")];
        for top in [".runner", "runner-reports"] {
            files.extend(walk(&self.path().join(top)));
        }
        let mut read = 0;
        for file in files {
            let Ok(bytes) = std::fs::read(&file) else {
                continue;
            };
            read += 1;
            let text = String::from_utf8_lossy(&bytes);
            for secret in [KEY, TOKEN] {
                assert!(!text.contains(secret), "{} holds a secret", file.display());
            }
        }
        assert!(read >= 3, "runner kept nothing to look in: {}", stderr(out));
        for secret in [KEY, TOKEN] {
            assert!(!stderr(out).contains(secret), "{}", stderr(out));
            assert!(!common::stdout(out).contains(secret));
        }
    }

    fn report(&self) -> Value {
        latest_report(&self.path().join("runner-reports"))
    }

    fn item(&self, id: &str) -> Value {
        report_item(&self.report(), "id", id).clone()
    }

    fn model(&self, trouble: &str) -> String {
        format!("{}{trouble}", self.cli.model)
    }

    fn validates(&self) {
        common::validates(
            "report",
            &[self.path().join("runner-reports/latest/report.json")],
        );
        common::validates("events", &[self.path().join("events.jsonl")]);
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() && !p.is_symlink() {
            if p.file_name().is_some_and(|n| n == "worktrees") {
                continue;
            }
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// The agent's edit is the item's commit, and the usage it reported is in the report.
fn the_edit_lands_in_the_items_commit(cli: Cli) {
    if !installed(cli) {
        return;
    }
    let f = fleet(
        cli,
        &format!("{{primary: {}}}", cli.model),
        "",
        &[task("hello", None)],
    );
    let out = f.apply();
    assert_eq!(out.status.code(), Some(0), "{}\n{}", stderr(&out), f.logs());
    let item = f.item("i0");
    assert_eq!(item["outcome"], "completed", "{item:#}");
    let commit = item["commit"].as_str().expect("the item made a commit");
    assert_eq!(
        git(
            &f.path().join("r0"),
            &["show", &format!("{commit}:greeting.txt")]
        ),
        "hello"
    );
    // The folders its adapter declares writable are all it needs outside the item: what the
    // sandbox denied it is only what it is known to do without.
    let unexpected: Vec<&serde_json::Value> = item["denied"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| {
            let path = d["path"].as_str().unwrap_or_default();
            !cli.denied.iter().any(|known| path.contains(known))
        })
        .collect();
    assert!(
        unexpected.is_empty(),
        "{} tried to write where its adapter does not declare (add it to `sandbox.writable`): {unexpected:#?}",
        cli.program,
    );
    // What the adapter reads from the CLI's output: the tokens (and, for Claude, the cost).
    // The mock counts 100 input and 20 output tokens per request.
    let turns = cli.turns;
    let usage = &item["usage"];
    assert_eq!(
        (
            usage["input_tokens"].as_u64(),
            usage["output_tokens"].as_u64()
        ),
        (Some(100 * turns as u64), Some(20 * turns as u64)),
        "{} no longer reports the tokens its adapter reads as it did: {usage:#}",
        cli.program
    );
    if cli.program == "claude" {
        assert!(
            usage["cost_usd"].as_f64().is_some_and(|c| c > 0.0),
            "claude no longer reports `total_cost_usd`: {usage:#}"
        );
    }
    assert_eq!(
        f.mock.statuses(cli.model),
        vec![200; turns],
        "{:?}",
        f.mock.requests()
    );
    f.validates();
}

/// The first edit breaks the gate; the second attempt's prompt carries the feedback, and its
/// edit passes.
fn a_broken_edit_is_fixed_on_attempt_2_from_the_feedback(cli: Cli) {
    if !installed(cli) {
        return;
    }
    let f = fleet(
        cli,
        &format!("{{primary: {}}}", cli.model),
        "  attempts: 2",
        &[task("hello", Some("helo"))],
    );
    let out = f.apply();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let item = f.item("i0");
    assert_eq!(item["outcome"], "completed", "{item:#}");
    assert_eq!(item["attempts"].as_array().unwrap().len(), 2, "{item:#}");
    let feedback: Vec<bool> = f
        .mock
        .requests()
        .iter()
        .map(|r| r["feedback"].as_bool().unwrap())
        .collect();
    let turns = cli.turns;
    let expected: Vec<bool> = [vec![false; turns], vec![true; turns]].concat();
    assert_eq!(
        feedback, expected,
        "the second attempt's prompt did not carry runner's feedback"
    );
    let commit = item["commit"].as_str().unwrap();
    assert_eq!(
        git(
            &f.path().join("r0"),
            &["show", &format!("{commit}:greeting.txt")]
        ),
        "hello"
    );
}

/// A 429 with `retry-after` reaches runner in one request; runner rests and the next attempt
/// works on the same model.
fn a_rate_limit_is_runners_to_retry(cli: Cli) {
    if !installed(cli) {
        return;
    }
    let f = fleet(
        cli,
        &format!(
            "{{primary: {}-429, threshold: 3, backoff: {{initial: 1s, max: 5s}}}}",
            cli.model
        ),
        "",
        &[task("hello", None)],
    );
    let out = f.apply();
    assert_eq!(out.status.code(), Some(0), "{}\n{}", stderr(&out), f.logs());
    let item = f.item("i0");
    assert_eq!(item["outcome"], "completed", "{item:#}");
    assert_eq!(
        f.mock.statuses(&f.model("-429")),
        [vec![429], vec![200; cli.turns]].concat(),
        "the CLI retried on its own, or runner did not"
    );
    let attempts = item["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{item:#}");
    // runner rested before it: the wait the provider asked for where the CLI shows it, else
    // runner's own back-off (at most `initial` after one failure).
    let waited = attempts[1]["waited_ms"].as_u64().unwrap();
    match cli.retry_hint_ms {
        Some(hint) => assert!(
            (hint - 100..hint + 1000).contains(&waited),
            "the provider's retry delay was not honoured: {item:#}"
        ),
        None => assert!((1..=1000).contains(&waited), "{item:#}"),
    }
    f.validates();
}

/// An overloaded model fails at once, and the chain moves to the fallback.
fn an_overloaded_model_falls_back(cli: Cli) {
    if !installed(cli) {
        return;
    }
    let primary = format!("{}-{}", cli.model, cli.overloaded);
    let f = fleet(
        cli,
        &format!(
            "{{primary: {primary}, fallbacks: [{}], threshold: 1, backoff: {{initial: 1s, max: 1s}}}}",
            cli.model
        ),
        "",
        &[task("hello", None)],
    );
    let out = f.apply();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let item = f.item("i0");
    assert_eq!(item["outcome"], "completed", "{item:#}");
    assert_eq!(item["model"], cli.model, "{item:#}");
    assert_eq!(
        f.mock.statuses(&primary),
        vec![u64::from(cli.overloaded)],
        "the CLI retried on its own"
    );
}

/// A refused key stops the run at its first request, the provider's words named (the key
/// itself redacted), every item held.
fn a_refused_key_stops_the_run(cli: Cli) {
    if !installed(cli) {
        return;
    }
    let f = fleet(
        cli,
        &format!(
            "{{primary: {}-401, threshold: 3, backoff: {{initial: 30s, max: 30s}}}}",
            cli.model
        ),
        "",
        &[
            task("hello", None),
            task("hello", None),
            task("hello", None),
        ],
    );
    let started = std::time::Instant::now();
    let out = f.apply();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(6), "{err}");
    assert!(started.elapsed().as_secs() < 60, "{err}");
    assert!(err.contains(cli.refused), "{err}");
    // The two items started at once (capacity 2) each asked once; none asked again, and the
    // third never started.
    assert_eq!(
        f.mock.statuses(&f.model("-401")),
        vec![401, 401],
        "a refused key was asked again"
    );
    let report = f.report();
    for item in report["items"].as_array().unwrap() {
        assert_eq!(item["outcome"], "held", "{item:#}");
        assert_eq!(item["reason"], "provider-refused", "{item:#}");
    }
    let refused = report["refused"].as_array().unwrap();
    assert!(
        refused[0]["message"]
            .as_str()
            .unwrap()
            .contains(cli.refused),
        "{report:#}"
    );
    f.validates();
}

/// A stream that stalls after its first event is ended for silence, said so, and the chain
/// moves on.
fn a_stalled_stream_is_ended_for_silence(cli: Cli) {
    if !installed(cli) {
        return;
    }
    let f = fleet(
        cli,
        &format!(
            "{{primary: {}-stall, fallbacks: [{}], threshold: 1, backoff: {{initial: 1s, max: 1s}}, provider_failure: {{silence: {}s}}}}",
            cli.model, cli.model, cli.silence_s
        ),
        "",
        &[task("hello", None)],
    );
    let out = f.apply();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let silent = format!("no output for {}s", cli.silence_s);
    assert!(err.contains(&silent), "{err}");
    let item = f.item("i0");
    assert_eq!(item["outcome"], "completed", "{item:#}");
    assert_eq!(item["model"], cli.model, "{item:#}");
    let first = &item["attempts"][0];
    assert!(
        first["worker"]["ended"]
            .as_str()
            .unwrap_or("")
            .contains(&silent),
        "{item:#}"
    );
    assert_eq!(
        f.mock.statuses(&f.model("-stall")),
        vec![200],
        "{:?}",
        f.mock.requests()
    );
}

/// With `worker.probe`, the probe meets the refused key before the queue: one request, no
/// item started; `doctor` says the same (exit 6). A working model's probe answers.
fn the_probe_finds_a_refused_key_before_any_item(cli: Cli) {
    if !installed(cli) {
        return;
    }
    let f = fleet(
        cli,
        &format!("{{primary: {}-401, fallbacks: [{}]}}", cli.model, cli.model),
        "  probe: \"Reply with the single word OK.\"",
        &[task("hello", None), task("hello", None)],
    );
    // Only the refused model: the run stops before any item.
    let m = std::fs::read_to_string(f.path().join("m.yaml")).unwrap();
    let only = m.replace(&format!(", fallbacks: [{}]", cli.model), "");
    std::fs::write(f.path().join("m.yaml"), &only).unwrap();
    let out = f.apply();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(6), "{err}");
    assert!(err.contains("probe: the provider refused model"), "{err}");
    assert_eq!(f.mock.statuses(&f.model("-401")), vec![401], "{err}");
    let report = f.report();
    for item in report["items"].as_array().unwrap() {
        assert_eq!(item["outcome"], "held", "{item:#}");
        assert!(
            item["attempts"].as_array().is_none_or(|a| a.is_empty()),
            "{item:#}"
        );
    }
    assert_eq!(report["probes"][0]["verdict"], "refused", "{report:#}");
    f.validates();
    // With the fallback: the probe drops the primary, its answer clears the fallback, and the
    // items run on the fallback from their first attempt.
    std::fs::write(f.path().join("m.yaml"), &m).unwrap();
    let out = f.apply();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = f.report();
    for item in report["items"].as_array().unwrap() {
        assert_eq!(item["outcome"], "completed", "{item:#}");
        assert_eq!(item["attempts"][0]["model"], cli.model, "{item:#}");
    }
    let verdicts: Vec<&str> = report["probes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["verdict"].as_str().unwrap())
        .collect();
    assert_eq!(verdicts, vec!["refused", "ok"], "{report:#}");
    // `doctor` runs the same probe.
    let out = f.command(&["doctor", "m.yaml"]);
    let said = common::stdout(&out);
    assert_eq!(out.status.code(), Some(6), "{said}");
    assert!(
        said.contains(&format!("ok    probe of model `{}`: answered", cli.model)),
        "{said}"
    );
}

macro_rules! for_each_cli {
    ($($scenario:ident),*) => {
        mod claude {
            $(#[test] fn $scenario() { super::$scenario(super::CLAUDE) })*
        }
        mod codex {
            $(#[test] fn $scenario() { super::$scenario(super::CODEX) })*
        }
        mod gemini {
            $(#[test] fn $scenario() { super::$scenario(super::GEMINI) })*
        }
        mod opencode {
            $(#[test] fn $scenario() { super::$scenario(super::OPENCODE) })*
        }
        mod aider {
            $(#[test] fn $scenario() { super::$scenario(super::AIDER) })*
        }
    };
}

for_each_cli!(
    the_edit_lands_in_the_items_commit,
    a_broken_edit_is_fixed_on_attempt_2_from_the_feedback,
    a_rate_limit_is_runners_to_retry,
    an_overloaded_model_falls_back,
    a_refused_key_stops_the_run,
    a_stalled_stream_is_ended_for_silence,
    the_probe_finds_a_refused_key_before_any_item
);
