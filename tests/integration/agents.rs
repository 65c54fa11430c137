//! The shipped manifests validate, and each agent adapter under `manifests/agents/` reads its
//! CLI's outcomes right: run against a stub of the CLI that replays outputs in the style the
//! CLI's documentation and error messages show, every provider trouble (rate limit, overload,
//! quota) exits 75, a refused key or billing 77, a crash exits with a failure of its own, and a success
//! exits 0 with the usage the agent reported written to `$RUNNER_USAGE`.

use crate::common;

use common::{run_in, stderr};
use std::path::{Path, PathBuf};

fn manifests() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests")
}

/// Write an executable stand-in for CLI `name` into `bin` (created when missing).
fn stub_cli(bin: &Path, name: &str, script: &str) {
    std::fs::create_dir_all(bin).unwrap();
    std::fs::write(bin.join(name), script).unwrap();
    std::fs::set_permissions(
        bin.join(name),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
}

/// `PATH` with `bin` first, so that its stubs stand in for the real CLIs.
fn path_with(bin: &Path) -> String {
    format!("{}:{}", bin.display(), std::env::var("PATH").unwrap())
}

#[test]
fn every_shipped_manifest_validates() {
    let mut seen = 0;
    for entry in std::fs::read_dir(manifests()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        seen += 1;
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.lines().take_while(|l| l.starts_with('#')).count() >= 5,
            "{} opens with a header saying what it is for and how to adapt it",
            path.display()
        );
        let out = run_in(&manifests(), &["validate", path.to_str().unwrap()]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}: {}",
            path.display(),
            stderr(&out)
        );
    }
    assert!(seen >= 4, "the four common jobs at least: found {seen}");
}

/// One replayed outcome: what the CLI prints and its exit code.
struct Replay {
    scenario: &'static str,
    output: &'static str,
    exit: i32,
}

/// What runner should read from the adapter's exit code.
#[derive(Debug, PartialEq)]
enum Read {
    Ok,
    Provider,
    /// The provider refused the key: authentication, or billing.
    Refused,
    Failed,
}

fn expected(agent: &str, scenario: &str) -> Read {
    match (agent, scenario) {
        (_, "success" | "success-json") => Read::Ok,
        (_, "crash" | "crash-exit-0" | "work-mentions-limits") => Read::Failed,
        (_, "auth") => Read::Refused,
        // A credit balance, or a quota the account's plan and billing set, is money, not time.
        ("claude" | "codex" | "aider", "quota") => Read::Refused,
        _ => Read::Provider,
    }
}

fn replays(agent: &str) -> Vec<Replay> {
    let r = |scenario, output, exit| Replay {
        scenario,
        output,
        exit,
    };
    match agent {
        "claude" => vec![
            r(
                "success",
                concat!(
                    r#"{"type":"system","subtype":"init","model":"some-model","tools":["Edit","Read"]}"#,
                    "\n",
                    r#"{"type":"assistant","message":{"content":[{"type":"text","text":"Looking at the test."}],"usage":{"input_tokens":4,"cache_creation_input_tokens":26313,"output_tokens":5}}}"#,
                    "\n",
                    // A tool call that failed along the way is not the run failing.
                    r#"{"type":"user","message":{"content":[{"type":"tool_result","content":"cargo test: 1 failed","is_error":true}]}}"#,
                    "\n",
                    r#"{"type":"result","subtype":"success","is_error":false,"result":"Fixed the test.","total_cost_usd":0.4213,"usage":{"input_tokens":12034,"cache_read_input_tokens":900,"output_tokens":1820},"modelUsage":{"some-model":{"inputTokens":12034,"outputTokens":1820,"cacheReadInputTokens":900,"cacheCreationInputTokens":0,"costUSD":0.4101},"small-model":{"inputTokens":350,"outputTokens":40,"cacheReadInputTokens":0,"cacheCreationInputTokens":0,"costUSD":0.0112}},"model_usage_since_last_result":{"some-model":{"inputTokens":12034,"outputTokens":1820,"costUSD":0.4101}}}"#
                ),
                0,
            ),
            r(
                "rate-limit",
                r#"API Error: 429 {"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization of 50,000 input tokens per minute."}}"#,
                1,
            ),
            r(
                "overload",
                r#"API Error: 529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
                1,
            ),
            r(
                "quota",
                "Credit balance is too low to access the Anthropic API.",
                1,
            ),
            r("auth", "Invalid API key · Please run /login", 1),
            r(
                "crash",
                "TypeError: Cannot read properties of undefined (reading 'map')\n    at cli.js:12:5",
                1,
            ),
            // Some versions exit 0 with a result that says the run failed.
            r(
                "crash-exit-0",
                r#"{"type":"result","subtype":"error_during_execution","is_error":true,"num_turns":3}"#,
                0,
            ),
            // The agent's own work (its messages, what its tools read) may name rate limits and
            // HTTP statuses; only what the CLI itself says about the run decides.
            r(
                "work-mentions-limits",
                concat!(
                    r#"{"type":"assistant","message":{"content":[{"type":"text","text":"Adding the rate limit: answer 429 Too Many Requests when the quota is exceeded."}]}}"#,
                    "\n",
                    r#"{"type":"user","message":{"content":[{"type":"tool_result","content":"src/limit.rs:12: // overloaded: 503 Service Unavailable, try again later"}]}}"#,
                    "\n",
                    r#"{"type":"result","subtype":"error_max_turns","is_error":true,"num_turns":30}"#
                ),
                1,
            ),
        ],
        "codex" => vec![
            r(
                "success",
                "{\"type\":\"thread.started\"}\n{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":24763,\"cached_input_tokens\":24448,\"output_tokens\":122}}",
                0,
            ),
            r(
                "rate-limit",
                "ERROR: exceeded retry limit, last status: 429 Too Many Requests",
                1,
            ),
            r("overload", "stream error: 503 Service Unavailable", 1),
            r(
                "quota",
                "ERROR: You exceeded your current quota, please check your plan and billing details.",
                1,
            ),
            r(
                "auth",
                "ERROR: unexpected status 401 Unauthorized: Incorrect API key provided",
                1,
            ),
            r(
                "crash",
                "thread 'main' panicked at codex-rs/exec/src/lib.rs:88:5:\nno such file",
                101,
            ),
            r(
                "work-mentions-limits",
                concat!(
                    r#"{"type":"item.completed","item":{"type":"agent_message","text":"The client now retries on 429 Too Many Requests and on 503 Service Unavailable."}}"#,
                    "\n",
                    r#"{"type":"item.completed","item":{"type":"command_execution","aggregated_output":"test quota_exceeded ... FAILED\nerror: rate limit test failed","exit_code":101}}"#,
                    "\n",
                    r#"{"type":"turn.failed","error":{"message":"the model stopped: context window exhausted"}}"#
                ),
                1,
            ),
        ],
        "gemini" => vec![
            r(
                "success",
                concat!(
                    r#"{"type":"init","session_id":"s1","model":"some-model"}"#,
                    "\n",
                    r#"{"type":"message","role":"assistant","content":"Done.","delta":true}"#,
                    "\n",
                    r#"{"type":"result","status":"success","stats":{"total_tokens":5760,"input_tokens":5120,"output_tokens":640,"duration_ms":8012,"tool_calls":2}}"#
                ),
                0,
            ),
            r(
                "success-json",
                r#"{"response":"Done.","stats":{"models":{"gemini-2.5-pro":{"tokens":{"prompt":5120,"candidates":640,"total":5760}}}}}"#,
                0,
            ),
            r(
                "rate-limit",
                "[API Error: got status: 429 Too Many Requests. Please retry in 37.2s.]",
                1,
            ),
            r(
                "overload",
                "[API Error: The model is overloaded. Please try again later.]",
                1,
            ),
            r(
                "quota",
                "Quota exceeded for quota metric 'Generate Content API requests per day'",
                1,
            ),
            r(
                "auth",
                "Error authenticating: API key not valid. Please pass a valid API key.",
                1,
            ),
            r(
                "crash",
                "Error: ENOENT: no such file or directory, open 'x'",
                42,
            ),
            r(
                "work-mentions-limits",
                concat!(
                    r#"{"type":"message","role":"assistant","content":"I will handle RESOURCE_EXHAUSTED and 429 from the API with a back-off.","delta":true}"#,
                    "\n",
                    r#"{"type":"tool_result","tool_id":"t1","status":"success","output":"quota.py: raise QuotaExceeded('quota exceeded, try again later')"}"#,
                    "\n",
                    r#"{"type":"result","status":"error","error":{"type":"FatalTurnLimitedError","message":"Reached max session turns"}}"#
                ),
                53,
            ),
        ],
        "aider" => vec![
            r(
                "success",
                "Applied edit to src/lib.rs\nTokens: 12k sent, 1.5k received. Cost: $0.05 message, $0.07 session.",
                0,
            ),
            r(
                "rate-limit",
                "litellm.RateLimitError: AnthropicException - rate_limit_error: Number of request tokens has exceeded your per-minute rate limit",
                1,
            ),
            r(
                "overload",
                "litellm.InternalServerError: AnthropicException - Overloaded",
                1,
            ),
            r(
                "quota",
                "litellm.RateLimitError: OpenAIException - insufficient_quota: You exceeded your current quota",
                1,
            ),
            r(
                "auth",
                "litellm.AuthenticationError: AnthropicException - invalid x-api-key",
                1,
            ),
            r(
                "crash",
                "Traceback (most recent call last):\n  File \"aider/main.py\", line 9\nValueError: bad edit format",
                1,
            ),
        ],
        "opencode" => vec![
            r("success", "Updated 2 files.", 0),
            r("rate-limit", "AI_APICallError: Rate limit exceeded", 1),
            r("overload", "AI_APICallError: Overloaded", 1),
            r("quota", "AI_APICallError: quota exceeded for this key", 1),
            r(
                "auth",
                "AI_LoadAPIKeyError: Anthropic API key is missing.",
                1,
            ),
            r("crash", "Segmentation fault (core dumped)", 139),
        ],
        other => panic!("no replays for {other}"),
    }
}

/// The usage a successful replay of `agent` reports.
fn expected_usage(agent: &str) -> Option<serde_json::Value> {
    let u = |i: u64, o: u64, c: Option<f64>| {
        let mut v = serde_json::json!({"input_tokens": i, "output_tokens": o});
        if let Some(c) = c {
            v["cost_usd"] = c.into();
        }
        Some(v)
    };
    match agent {
        // From `modelUsage`, the side requests of a smaller model and the cached input included:
        // the source `total_cost_usd` prices.
        "claude" => u(13284, 1860, Some(0.4213)),
        // Codex and Gemini CLI print no cost: it is left out (unknown), never written as 0.
        "codex" => u(24763, 122, None),
        "gemini" => u(5120, 640, None),
        "aider" => u(12000, 1500, Some(0.07)),
        _ => None,
    }
}

/// Run `agent`'s adapter against a stub CLI replaying `replay`, in a scratch repository.
/// Returns how runner reads it, what it printed, and the usage it wrote.
fn run_adapter(agent: &str, replay: &Replay) -> (Read, String, Option<serde_json::Value>) {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    stub_cli(
        &bin,
        agent,
        "#!/bin/sh\necho \"$*\" > \"$STUB_ARGS\"\ncat \"$STUB_OUTPUT\"\nexit \"$STUB_EXIT\"\n",
    );
    let output = dir.path().join("output");
    std::fs::write(&output, format!("{}\n", replay.output)).unwrap();
    std::fs::write(dir.path().join("task.md"), "Fix the flaky test.\n").unwrap();
    let usage = dir.path().join("usage.json");
    let args = dir.path().join("args");
    let out = std::process::Command::new(manifests().join(format!("agents/{agent}.sh")))
        .args(["some-model", "task.md"])
        .current_dir(dir.path())
        .env("PATH", path_with(&bin))
        .env("STUB_OUTPUT", &output)
        .env("STUB_EXIT", replay.exit.to_string())
        .env("STUB_ARGS", &args)
        .env("RUNNER_USAGE", &usage)
        .output()
        .unwrap();
    let read = match out.status.code() {
        Some(0) => Read::Ok,
        Some(75) => Read::Provider,
        Some(77) => Read::Refused,
        _ => Read::Failed,
    };
    let passed = std::fs::read_to_string(&args).unwrap_or_default();
    assert!(
        passed.contains("some-model") && passed.contains("Fix the flaky test."),
        "{agent}: the model and the task text reach the CLI: {passed}"
    );
    // The formats that print as the agent works, not one object at the end.
    let streaming = match agent {
        "claude" => "--output-format stream-json --verbose",
        "gemini" => "--output-format stream-json",
        "codex" => "--json",
        _ => "",
    };
    assert!(passed.contains(streaming), "{agent}: {passed}");
    let usage = std::fs::read_to_string(&usage)
        .ok()
        .map(|t| serde_json::from_str(&t).unwrap());
    (
        read,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        usage,
    )
}

#[test]
fn each_adapter_reads_its_clis_outcomes() {
    for agent in ["claude", "codex", "gemini", "aider", "opencode"] {
        for replay in replays(agent) {
            let (read, printed, usage) = run_adapter(agent, &replay);
            assert_eq!(
                read,
                expected(agent, replay.scenario),
                "{agent} {}: printed {printed}",
                replay.scenario
            );
            assert!(
                printed.contains(replay.output.lines().next().unwrap()),
                "{agent} {}: the CLI's output is passed on: {printed}",
                replay.scenario
            );
            if replay.scenario.starts_with("success") {
                let numbers = |u: Option<serde_json::Value>| {
                    u.map(|u| {
                        (
                            u["input_tokens"].as_u64(),
                            u["output_tokens"].as_u64(),
                            u["cost_usd"].as_f64(),
                        )
                    })
                };
                assert_eq!(
                    numbers(usage),
                    numbers(expected_usage(agent)),
                    "{agent}: usage"
                );
            }
        }
    }
}

#[test]
fn an_adapter_drives_a_real_drain_with_back_off_and_usage() {
    // The claude adapter in a manifest, its CLI stubbed: rate limited once, then done.
    let dir = tempfile::tempdir().unwrap();
    common::repo(&dir.path().join("r"));
    let bin = dir.path().join("bin");
    let count = dir.path().join("count");
    stub_cli(
        &bin,
        "claude",
        &format!(
            "#!/bin/sh\nn=$(cat {c} 2>/dev/null || echo 0); echo $((n+1)) > {c}\nif [ \"$n\" = 0 ]; then echo 'API Error: 429 rate_limit_error. Retry after 1s'; exit 1; fi\necho done > done.txt\necho '{{\"is_error\":false,\"total_cost_usd\":0.25,\"usage\":{{\"input_tokens\":100,\"output_tokens\":10}}}}'\n",
            c = count.display()
        ),
    );
    std::fs::write(
        dir.path().join("m.yaml"),
        format!(
            "version: 1\nname: agent\nrepositories: [{{path: r}}]\nmodels: {{primary: m1, threshold: 3}}\nworker:\n  run: [\"{}\", \"{{model}}\", \"Write done.txt\"]\nenv: {{pass: [PATH, HOME]}}\nitems: [{{repo: r, id: a}}]\n",
            manifests().join("agents/claude.sh").display()
        ),
    )
    .unwrap();
    let out = common::runner()
        .current_dir(dir.path())
        .args(["apply", "m.yaml", "--no-progress"])
        .env("PATH", path_with(&bin))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report = common::latest_report(&dir.path().join("runner-reports"));
    let item = &report["items"][0];
    assert_eq!(
        item["attempts"][0]["worker"]["class"], "provider",
        "{item:#}"
    );
    assert!(item["attempts"][1]["waited_ms"].as_u64().unwrap() >= 1000);
    assert_eq!(item["usage"]["cost_usd"], 0.25, "{item:#}");
}

#[test]
fn each_adapter_streams_what_its_agent_prints_as_it_comes() {
    // Every adapter, its CLI stubbed to print a line every 0.3 s: a short task ends after 2.4 s
    // (longer than `silence`, which an adapter holding the output back until the end would
    // trip), a long one never ends and is cut by the timeout, its log keeping what it printed.
    // No adapter leaves a file of its own behind, cut short or not.
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    let tmp = dir.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    for cli in ["claude", "codex", "gemini", "aider", "opencode"] {
        stub_cli(
            &bin,
            cli,
            "#!/bin/sh\nn=0\nlast=8\nfor a in \"$@\"; do case \"$a\" in *long*) last=1000;; esac; done\nwhile [ $n -lt $last ]; do n=$((n+1)); echo \"tick $n\"; sleep 0.3; done\necho finished\n",
        );
    }
    let mut items = String::new();
    let mut repos = String::new();
    for agent in ["claude", "codex", "gemini", "aider", "opencode"] {
        for task in ["short", "long"] {
            let name = format!("{agent}-{task}");
            common::repo(&dir.path().join(&name));
            repos.push_str(&format!("  - {{path: {name}}}\n"));
            items.push_str(&format!(
                "  - {{repo: {name}, id: a, vars: {{adapter: \"{}\", task: {task}}}}}\n",
                manifests().join(format!("agents/{agent}.sh")).display()
            ));
        }
    }
    std::fs::write(
        dir.path().join("m.yaml"),
        format!(
            "version: 1\nname: stream\ncapacity: {{workers: 10}}\nrepositories:\n{repos}models:\n  primary: m1\n  provider_failure: {{silence: 1500ms}}\nworker:\n  run: [\"{{item.adapter}}\", \"{{model}}\", \"{{item.task}}\"]\n  timeout: 4s\n  grace: 2s\nenv: {{pass: [PATH, HOME, TMPDIR]}}\nitems:\n{items}"
        ),
    )
    .unwrap();
    let out = common::runner()
        .current_dir(dir.path())
        .args(["apply", "m.yaml", "--no-progress"])
        .env("PATH", path_with(&bin))
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    let report = common::latest_report(&dir.path().join("runner-reports"));
    for agent in ["claude", "codex", "gemini", "aider", "opencode"] {
        let short = common::report_item(&report, "repo", &format!("{agent}-short"));
        assert_eq!(
            short["outcome"],
            "completed",
            "{agent}: a task printing as it goes is not a stalled stream: {short:#}\n{}",
            stderr(&out)
        );
        let long = common::report_item(&report, "repo", &format!("{agent}-long"));
        let attempt = &long["attempts"][0];
        assert_eq!(attempt["worker"]["class"], "timeout", "{agent}: {long:#}");
        let log = std::fs::read_to_string(
            dir.path()
                .join("runner-reports/latest")
                .join(attempt["worker"]["log"].as_str().unwrap()),
        )
        .unwrap();
        assert!(
            log.contains("tick 1\n") && log.contains("tick 5\n"),
            "{agent}: what the agent printed before the timeout is in the log: {log:?}"
        );
    }
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().collect();
    assert!(left.is_empty(), "adapters left files behind: {left:?}");
}

#[test]
fn an_adapter_ends_when_its_agent_does_though_a_process_it_left_holds_the_output() {
    // The CLI starts a background process that keeps its standard output open, then finishes.
    // The adapter passes on what the agent printed and exits with the agent; runner ends what
    // was left.
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    stub_cli(
        &bin,
        "claude",
        "#!/bin/sh\nsleep 2929 &\necho '{\"type\":\"result\",\"is_error\":false,\"total_cost_usd\":0.1,\"usage\":{\"input_tokens\":3,\"output_tokens\":2}}'\n",
    );
    let started = std::time::Instant::now();
    let out = std::process::Command::new(manifests().join("agents/claude.sh"))
        .args(["some-model", "a task"])
        .current_dir(dir.path())
        .env("PATH", path_with(&bin))
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Read only until the adapter itself exits: the pipe stays open while the sleep lives.
    let mut child = out;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "the adapter waited on the process its agent left"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0));
    for pid in common::processes_matching("sleep 2929") {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let mut printed = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut printed).unwrap();
    assert!(printed.contains("\"total_cost_usd\":0.1"), "{printed}");
}

#[test]
fn an_adapter_clears_what_a_killed_one_left_in_tmpdir() {
    // An adapter killed outright (SIGKILL, as when runner itself is killed) runs no clean-up:
    // the next adapter removes the folder it left, the agent's output in it, by its dead pid.
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    let tmp = dir.path().join("tmp");
    stub_cli(&bin, "opencode", "#!/bin/sh\necho done\n");
    let dead = {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        pid
    };
    for (name, pid) in [
        ("runner-agent.dead", dead),
        ("runner-agent.live", std::process::id()),
    ] {
        std::fs::create_dir_all(tmp.join(name)).unwrap();
        std::fs::write(tmp.join(name).join("pid"), format!("{pid}\n")).unwrap();
        std::fs::write(tmp.join(name).join("output"), "the agent's output\n").unwrap();
    }
    // An adapter starting alongside, its pid file made but not yet written: not taken for dead
    // (two adapters starting at once once removed each other's folder this way).
    std::fs::create_dir_all(tmp.join("runner-agent.starting")).unwrap();
    std::fs::write(tmp.join("runner-agent.starting").join("pid"), "").unwrap();
    let out = std::process::Command::new(manifests().join("agents/opencode.sh"))
        .args(["some-model", "a task"])
        .current_dir(dir.path())
        .env("PATH", path_with(&bin))
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let mut left: Vec<String> = std::fs::read_dir(&tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["runner-agent.live", "runner-agent.starting"]);
}

/// On a later attempt the adapter hands the CLI the task and then, marked off after it, what
/// runner recorded of the attempt before; and each CLI runs with its own retries off.
#[test]
fn each_adapter_hands_the_feedback_to_its_agent_after_the_task_with_retries_off() {
    for agent in ["claude", "codex", "gemini", "aider", "opencode"] {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        stub_cli(
            &bin,
            agent,
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > \"$STUB_ARGS\"\nenv > \"$STUB_ENV\"\nexit 0\n",
        );
        std::fs::write(dir.path().join("task.md"), "Fix the flaky test.\n").unwrap();
        let feedback = dir.path().join("1-feedback.txt");
        std::fs::write(
            &feedback,
            "attempt 1 failed at gate `test`; the end of its output:\n\nassertion failed: left == right\n",
        )
        .unwrap();
        let (args, env) = (dir.path().join("args"), dir.path().join("env"));
        let out = std::process::Command::new(manifests().join(format!("agents/{agent}.sh")))
            .args(["some-model", "task.md"])
            .current_dir(dir.path())
            .env("PATH", path_with(&bin))
            .env("STUB_ARGS", &args)
            .env("STUB_ENV", &env)
            .env("RUNNER_FEEDBACK", &feedback)
            .output()
            .unwrap();
        assert!(out.status.success(), "{agent}: {out:?}");
        let passed = std::fs::read_to_string(&args).unwrap();
        let task = passed.find("Fix the flaky test.").expect("the task");
        let said = passed
            .find("attempt 1 failed at gate `test`")
            .unwrap_or_else(|| panic!("{agent}: the feedback reaches the CLI: {passed}"));
        assert!(task < said, "{agent}: after the task: {passed}");
        assert!(
            passed.contains("<runner-feedback>") && passed.contains("</runner-feedback>"),
            "{agent}: marked off: {passed}"
        );
        assert!(
            passed.contains("assertion failed: left == right"),
            "{agent}"
        );
        let env = std::fs::read_to_string(&env).unwrap();
        match agent {
            "claude" => {
                assert!(env.contains("CLAUDE_CODE_MAX_RETRIES=0"), "{env}");
                assert!(
                    env.contains("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1"),
                    "{env}"
                );
            }
            "codex" => {
                assert!(passed.contains("request_max_retries=0"), "{passed}");
                assert!(passed.contains("stream_max_retries=0"), "{passed}");
            }
            _ => {}
        }
    }
}
