//! Kernel confinement of items, tried as an attacker would: a hostile worker (item `a1`,
//! `tests/confinement/hostile.sh`) makes each attempt to reach out of its item while two other
//! items run (one in a worktree, one in its repository's own checkout), and says which
//! succeeded. Confined, every attempt is denied; with `sandbox: {mode: off}` the same script's
//! attempts succeed, so the test proves the confinement, not the script.

use crate::common;

use common::{git, repo, runner, stderr};
use std::collections::BTreeMap;
use std::path::Path;

/// What the hostile worker tries; each must be denied when confined.
const ESCAPES: &[&str] = &[
    "other-worktree",
    "other-checkout",
    "peer-cmdline",
    "peer-cwd",
    "other-repo-read",
    "other-worktree-read",
    "other-tmpdir",
    "ledger-read",
    "ledger-write",
    "manifest",
    "gate-script",
    "reports",
    "gate-mode",
    "manifest-time",
    "reports-mode",
    "runner-environ",
    "peer-environ",
    "signal-runner",
    "home-gitconfig",
    "home-ssh",
    "git-config",
    "git-hook",
    "git-branch",
    "git-tag",
    "git-main",
    "git-info",
    "shared-tmp",
    "io-uring",
    "network",
];

/// What an item may do all the same.
const ALLOWED: &[&str] = &["own-worktree", "own-tmpdir"];

/// Whether this kernel has Landlock and network namespaces: without them the confined half
/// cannot run (a failure in CI, "not run" elsewhere).
fn kernel_confines() -> bool {
    // SAFETY: the Landlock version query reads and writes no memory.
    let abi = unsafe { libc::syscall(444, std::ptr::null::<u8>(), 0usize, 1u32) };
    let netns = std::process::Command::new("unshare")
        .args(["-rn", "true"])
        .status()
        .is_ok_and(|s| s.success());
    let ok = abi >= 6 && netns;
    if !ok {
        common::not_run(&format!(
            "this kernel lacks Landlock ABI 6 (it has {abi}) or network namespaces ({netns})"
        ));
    }
    ok
}

struct Fixture {
    root: tempfile::TempDir,
    listener: std::net::TcpListener,
}

fn fixture(sandbox: &str) -> Fixture {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    for name in ["a", "b", "c"] {
        repo(&r.join(name));
    }
    std::fs::create_dir_all(r.join("home")).unwrap();
    std::fs::create_dir_all(r.join("runner-reports")).unwrap();
    std::fs::write(r.join("home/.gitconfig"), "").unwrap();
    std::fs::write(r.join("gate.sh"), "#!/bin/sh\nexit 0\n").unwrap();
    let hostile = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/confinement/hostile.sh");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::fs::write(
        r.join("m.yaml"),
        format!(
            r#"version: 1
name: confinement
capacity: {{workers: 3}}
repositories: [{{path: a}}, {{path: b}}, {{path: c}}]
worker:
  run: ["{hostile}", "{root}", "{port}"]
  timeout: 60s
  env: {{ITEM_SECRET: "s3cr3t-{{item}}"}}
gates:
  - name: check
    run: ["sh", "{root}/gate.sh"]
items:
  - {{repo: a, id: a1, branch: runner/a1}}
  - {{repo: b, id: b1, branch: runner/b1}}
  - {{repo: c, id: c1}}
{sandbox}
"#,
            hostile = hostile.display(),
            root = r.display(),
        ),
    )
    .unwrap();
    Fixture { root, listener }
}

/// Drain `r/m.yaml` with no folder of the operator's made writable, expecting every item to
/// complete; what runner said on stderr.
fn drained(r: &Path) -> String {
    let out = runner()
        .current_dir(r)
        .args(["apply", "m.yaml", "--no-progress"])
        .env_remove("RUNNER_SANDBOX_WRITABLE")
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    err
}

/// Run the drain; the hostile worker's answers by attempt.
fn attack(f: &Fixture) -> (BTreeMap<String, String>, String) {
    let r = f.root.path();
    let out = runner()
        .current_dir(r)
        .args(["apply", "m.yaml", "--no-progress"])
        .env_remove("RUNNER_SANDBOX_WRITABLE")
        .env("HOME", r.join("home"))
        .env("RUNNER_ONLY_SECRET", "not-for-items")
        .output()
        .unwrap();
    let err = stderr(&out);
    let log = find_log(&r.join("runner-reports"), "attempt own-worktree")
        .unwrap_or_else(|| panic!("the hostile worker's log is missing: {err}"));
    let answers = log
        .lines()
        .filter_map(|l| l.strip_prefix("attempt "))
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    (answers, err)
}

fn find_log(dir: &Path, needle: &str) -> Option<String> {
    common::walk_files(dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .find(|t| t.contains(needle))
}

fn answered(answers: &BTreeMap<String, String>, name: &str) -> String {
    answers
        .get(name)
        .cloned()
        .unwrap_or_else(|| panic!("no answer for `{name}`: {answers:?}"))
}

#[test]
fn a_confined_worker_reaches_nothing_outside_its_item() {
    if !kernel_confines() {
        return;
    }
    let f = fixture("sandbox: {mode: required, network: none}");
    let r = f.root.path();
    let (answers, err) = attack(&f);
    let escaped: Vec<&str> = ESCAPES
        .iter()
        .copied()
        .filter(|a| answered(&answers, a) != "denied")
        .collect();
    assert!(
        escaped.is_empty(),
        "escaped confinement: {escaped:?}\n{err}"
    );
    for a in ALLOWED {
        assert_eq!(answered(&answers, a), "escaped", "{a} must work: {err}");
    }
    // What the attempts would have left is not there.
    assert!(
        !r.join(".runner/workspace/worktrees/b/b1/planted-by-a1")
            .exists()
    );
    assert!(!r.join("c/planted-by-a1").exists());
    assert!(!r.join("runner-reports/forged").exists());
    assert_eq!(
        std::fs::read_to_string(r.join("home/.gitconfig")).unwrap(),
        ""
    );
    assert!(!git(&r.join("a"), &["config", "--list", "--local"]).contains("fsmonitor"));
    assert!(!git(&r.join("a"), &["branch", "--list"]).contains("planted"));
    assert!(git(&r.join("a"), &["tag", "--list"]).is_empty());
    assert!(
        f.listener.accept().is_err(),
        "the listener got a connection"
    );
    // The item's own work was committed as usual.
    assert!(git(&r.join("a"), &["show", "--stat", "runner/a1"]).contains("own-work.txt"));
    // Each denied write is recorded for the reviewer: in the report, under the item, with the
    // program that tried; and nothing of what the item may write is.
    let report = common::latest_report(&r.join("runner-reports"));
    let items = report["items"].as_array().unwrap();
    let a1 = items.iter().find(|i| i["id"] == "a1").unwrap();
    let denied: Vec<(String, String, String)> = a1["denied"]
        .as_array()
        .unwrap_or_else(|| panic!("no denied accesses recorded: {a1}"))
        .iter()
        .map(|d| {
            assert_eq!(d["process"], "worker", "{d}");
            assert_eq!(d["attempt"], 1, "{d}");
            (
                d["access"].as_str().unwrap().to_string(),
                d["path"].as_str().unwrap().to_string(),
                d["program"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let root = r.canonicalize().unwrap();
    let ws = root.join(".runner/workspace");
    let home = root.join("home");
    for (access, path) in [
        ("write", ws.join("worktrees/b/b1/planted-by-a1")),
        ("write", root.join("c/planted-by-a1")),
        ("write", root.join("m.yaml")),
        ("write", root.join("gate.sh")),
        ("write", root.join("runner-reports/forged")),
        ("write", home.join(".gitconfig")),
        ("create folder", home.join(".ssh")),
        ("write", root.join("a/.git/hooks/post-checkout")),
        ("write", root.join("a/.git/info/exclude")),
        ("change metadata", root.join("gate.sh")),
        ("change metadata", root.join("runner-reports")),
    ] {
        let path = path.display().to_string();
        assert!(
            denied.iter().any(|(a, p, _)| a == access && *p == path),
            "`{access} {path}` not recorded: {denied:#?}"
        );
    }
    assert!(
        denied.iter().any(|(a, p, prog)| a == "write"
            && p.starts_with("/tmp/planted-by-a1-")
            && prog == "sh"),
        "{denied:#?}"
    );
    assert!(
        !denied
            .iter()
            .any(|(_, p, _)| p.contains("own-work") || p.contains("scratch")),
        "an allowed write was recorded as denied: {denied:#?}"
    );
    assert!(err.contains("a/a1: the sandbox denied its worker"), "{err}");
    let summary = std::fs::read_to_string(r.join("runner-reports/latest/summary.md")).unwrap();
    assert!(summary.contains("## Denied by the sandbox"), "{summary}");
    assert!(
        summary.contains(&format!("write `{}`", root.join("m.yaml").display())),
        "{summary}"
    );
}

#[test]
fn unconfined_the_same_worker_escapes() {
    let f = fixture("sandbox: {mode: off}");
    let r = f.root.path();
    let (answers, err) = attack(&f);
    let denied: Vec<&str> = ESCAPES
        .iter()
        .chain(ALLOWED)
        .copied()
        .filter(|a| answered(&answers, a) != "escaped")
        .collect();
    assert!(
        denied.is_empty(),
        "the attack script failed unconfined: {denied:?}\n{err}"
    );
    assert!(r.join("c/planted-by-a1").exists());
    assert!(
        f.listener.accept().is_ok(),
        "no connection reached the listener"
    );
    // Nothing was denied, so nothing is recorded as denied.
    let report = common::latest_report(&r.join("runner-reports"));
    assert!(
        report["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i.get("denied").is_none()),
        "{report}"
    );
    assert!(!err.contains("sandbox denied"), "{err}");
}

/// An item in its repository's own checkout may write its `.git` (the kernel cannot take a
/// folder out of a writable one): what it changes there is found after it, the item held and
/// the repository quarantined with the change named, before runner's own git runs there again.
#[test]
fn a_change_to_the_shared_git_state_quarantines_the_repository() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let c = repo(&r.join("c"));
    let evil = r.join("evil-ran");
    std::fs::write(
        r.join("m.yaml"),
        format!(
            r#"version: 1
name: tamper
repositories: [{{path: c}}]
worker:
  run: 'echo work > work.txt && git config core.fsmonitor "touch {evil}" && mkdir -p .git/hooks && echo "touch {evil}" > .git/hooks/pre-commit'
items: [{{repo: c, id: t1}}, {{repo: c, id: t2}}]
"#,
            evil = evil.display()
        ),
    )
    .unwrap();
    let out = runner()
        .current_dir(r)
        .args(["apply", "m.yaml", "--no-progress"])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    // The attack itself succeeded: the config names the program.
    assert!(git(&c, &["config", "--get", "core.fsmonitor"]).contains("evil-ran"));
    assert!(
        err.contains("`config` changed") && err.contains("`hooks/pre-commit` added"),
        "{err}"
    );
    assert!(err.contains("quarantined"), "{err}");
    // Nothing of it ran, and the item's work was not committed.
    assert!(!evil.exists(), "a program the item named ran");
    assert_eq!(git(&c, &["rev-list", "--count", "HEAD"]), "1");
    // The second item did not run there, nor does the next run.
    let report = common::latest_report(&r.join("runner-reports"));
    let out = runner()
        .current_dir(r)
        .args(["apply", "m.yaml", "--no-progress"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(git(&c, &["rev-list", "--count", "HEAD"]), "1");
    assert_eq!(report["counts"]["held"], 2, "{report}");
    let status = common::stdout(
        &runner()
            .current_dir(r)
            .args(["status", "m.yaml"])
            .output()
            .unwrap(),
    );
    assert!(status.contains("`config` changed"), "{status}");
}

/// The item after another in the same checkout starts from the state the one before left (the
/// capture after it, moments before): a change it makes is found all the same, and the one
/// before, which changed nothing there, keeps its commit.
#[test]
fn a_change_by_the_second_item_in_a_checkout_is_found_after_a_clean_first() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let c = repo(&r.join("c"));
    std::fs::write(
        r.join("m.yaml"),
        r#"version: 1
name: tamper-second
repositories: [{path: c}]
worker:
  run: 'echo "$RUNNER_ITEM" > "$RUNNER_ITEM.txt"; if [ "$RUNNER_ITEM" = t2 ]; then git config core.fsmonitor "touch evil"; fi'
items: [{repo: c, id: t1}, {repo: c, id: t2}]
"#,
    )
    .unwrap();
    let out = runner()
        .current_dir(r)
        .args(["apply", "m.yaml", "--no-progress"])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let report = common::latest_report(&r.join("runner-reports"));
    let t1 = common::report_item(&report, "id", "t1");
    let t2 = common::report_item(&report, "id", "t2");
    assert_eq!(t1["outcome"], "completed", "{t1:#}");
    assert!(t1["commit"].is_string(), "{t1:#}");
    assert_eq!(t2["outcome"], "held", "{t2:#}");
    let cause = t2["cause"].as_str().unwrap();
    assert!(cause.contains("`config` changed"), "{cause}");
    assert_eq!(git(&c, &["rev-list", "--count", "HEAD"]), "2");
}

/// An item reads what it wrote in its private `TMPDIR` (and in its worktree), though the
/// workspace holding them did not exist before the run: the layer hiding the ledger beside it
/// grants what exists when it is made, so the run makes the workspace first. (The reader of the
/// FIFO is the worker's own background job, waited for: started in a subshell, it could still
/// be writing `seen.txt` when the worker ended and its work was committed.)
#[test]
fn an_item_reads_back_what_it_wrote_in_a_workspace_made_by_its_run() {
    if !kernel_confines() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    repo(&r.join("a"));
    std::fs::write(
        r.join("m.yaml"),
        "version: 1\nname: fresh\nrepositories: [{path: a}]\nworker:\n  run: 'echo tmp > \"$TMPDIR/x\" && cat \"$TMPDIR/x\" && mkfifo \"$TMPDIR/p\"; cat \"$TMPDIR/p\" > seen.txt & echo piped > \"$TMPDIR/p\" && wait'\nitems: [{repo: a, id: in-place}, {repo: a, id: in-worktree, branch: runner/w}]\nsandbox: {mode: required}\n",
    )
    .unwrap();
    assert!(!r.join(".runner").exists());
    drained(r);
    assert_eq!(git(&r.join("a"), &["show", "runner/w:seen.txt"]), "piped");
}

/// Each secret reaches the commands `env.roles` names: a worker its model key and not the
/// forge token, a gate none unless named, a source the forge token; `plan` says who gets what.
#[test]
fn each_secret_reaches_only_the_roles_it_is_given_to() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    repo(&r.join("a"));
    let seen = r.join("seen");
    std::fs::create_dir_all(&seen).unwrap();
    let dump = |who: &str| {
        format!(
            "env | grep -E '^(MODEL_KEY|FORGE_TOKEN|GATE_TOKEN)=' | sort > {}/{who}.txt",
            seen.display()
        )
    };
    std::fs::write(
        r.join("source.sh"),
        format!(
            "#!/bin/sh\n{}\necho '{{\"schema\":\"runner.items/v1\",\"items\":[]}}'\n",
            dump("source")
        ),
    )
    .unwrap();
    std::fs::write(
        r.join("m.yaml"),
        format!(
            "version: 1\nname: roles\nrepositories: [{{path: a}}]\nworker: {{run: \"{w}\"}}\ngates: [{{name: g, run: \"{g}\"}}]\nitems: [{{repo: a, id: x}}]\nsources: [{{name: t, run: [sh, source.sh], repo: a}}]\nenv:\n  secrets: [MODEL_KEY, FORGE_TOKEN, GATE_TOKEN]\n  roles:\n    FORGE_TOKEN: [source, publish, notify]\n    GATE_TOKEN: [gate]\nsandbox: {{writable: [seen]}}\n",
            w = dump("worker"),
            g = dump("gate"),
        ),
    )
    .unwrap();
    let env = [
        ("MODEL_KEY", "model-key-8f3k"),
        ("FORGE_TOKEN", "forge-token-2m9x"),
        ("GATE_TOKEN", "gate-token-7q1z"),
    ];
    let plan = runner()
        .current_dir(r)
        .args(["plan", "m.yaml"])
        .envs(env)
        .output()
        .unwrap();
    let text = common::stdout(&plan);
    assert!(
        text.contains("secret FORGE_TOKEN reaches: source, publish, notify")
            && text.contains("secret MODEL_KEY reaches: worker, source, publish, notify")
            && text.contains("secret GATE_TOKEN reaches: gate"),
        "{text}{}",
        stderr(&plan)
    );
    let out = runner()
        .current_dir(r)
        .args(["apply", "m.yaml", "--no-progress"])
        .envs(env)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let read = |who: &str| std::fs::read_to_string(seen.join(format!("{who}.txt"))).unwrap();
    assert_eq!(read("worker"), "MODEL_KEY=model-key-8f3k\n");
    assert_eq!(read("gate"), "GATE_TOKEN=gate-token-7q1z\n");
    assert_eq!(
        read("source"),
        "FORGE_TOKEN=forge-token-2m9x\nMODEL_KEY=model-key-8f3k\n"
    );
}

/// The one place of the run's folder a worker may write is its usage folder: a FIFO planted
/// where runner reads its usage is refused at once, never waited on.
#[test]
fn a_fifo_in_place_of_the_usage_file_is_refused_not_waited_on() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    repo(&r.join("a"));
    std::fs::write(
        r.join("m.yaml"),
        "version: 1\nname: fifo\nrepositories: [{path: a}]\nworker: {run: 'mkfifo \"$RUNNER_USAGE\"'}\nitems: [{repo: a, id: x}]\n",
    )
    .unwrap();
    let mut child = runner()
        .current_dir(r)
        .args(["apply", "m.yaml", "--no-progress"])
        .env_remove("RUNNER_SANDBOX_WRITABLE")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let ended = common::wait_for(30, || child.try_wait().unwrap().is_some());
    if !ended {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    assert!(ended, "runner waited on the FIFO: {}", stderr(&out));
    assert!(stderr(&out).contains("1 completed"), "{}", stderr(&out));
}

/// `sandbox.network: [hosts]`: an item reaches the listed host through runner's proxy, and
/// nothing else: another port on the same machine is refused at the proxy (and recorded as a
/// denied access), and no connection goes around the proxy. With `network: open` the same
/// worker reaches both (the test proves the list, not the script).
fn reach(network: &str) -> (String, serde_json::Value, Vec<u8>) {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    repo(&r.join("a"));
    let serve = |body: &'static str| {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                use std::io::{Read, Write};
                let mut stream = stream;
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf);
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        port
    };
    let (allowed, other) = (serve("allowed-host"), serve("other-host"));
    std::fs::write(
        r.join("reach.sh"),
        format!(
            "#!/bin/sh\n\
             echo \"allowed: $(curl -s http://127.0.0.1:{allowed}/)\"\n\
             echo \"other: $(curl -s http://127.0.0.1:{other}/)\"\n\
             echo \"around: $(curl -s --noproxy '*' --max-time 5 http://127.0.0.1:{allowed}/)\"\n"
        ),
    )
    .unwrap();
    std::fs::write(
        r.join("m.yaml"),
        format!(
            "version: 1\nname: reach\nrepositories: [{{path: a}}]\nworker: {{run: ['sh', '{}/reach.sh']}}\nitems: [{{repo: a, id: n1}}]\nsandbox: {{mode: required, network: {network}}}\n",
            r.display()
        )
        .replace("{allowed}", &allowed.to_string()),
    )
    .unwrap();
    let out = runner()
        .current_dir(r)
        .args(["apply", "m.yaml", "--no-progress"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let log = find_log(&r.join("runner-reports"), "allowed:").expect("the worker's log");
    let report = common::latest_report(&r.join("runner-reports"));
    (log, report, out.stderr)
}

#[test]
fn an_allow_list_reaches_its_host_and_nothing_else() {
    if !kernel_confines() {
        return;
    }
    let (log, report, err) = reach(r#"["127.0.0.1:{allowed}"]"#);
    let err = String::from_utf8_lossy(&err);
    assert!(log.contains("allowed: allowed-host"), "{log}");
    assert!(
        log.contains("other: runner:") && log.contains("sandbox.network"),
        "{log}"
    );
    assert!(!log.contains("other-host"), "{log}");
    assert!(!log.contains("around: allowed-host"), "{log}");
    let denied = &report["items"][0]["denied"];
    assert!(
        denied
            .as_array()
            .is_some_and(|d| d.iter().any(|a| a["access"] == "connect"
                && a["path"]
                    .as_str()
                    .is_some_and(|p| p.starts_with("127.0.0.1:")))),
        "{report}"
    );
    assert!(
        err.contains("the sandbox denied its worker: connect 127.0.0.1:"),
        "{err}"
    );
    // A refused host is an access denied, not a write.
    assert!(
        report["warnings"].as_array().unwrap().iter().any(|w| w
            .as_str()
            .unwrap()
            .contains("denied its worker 1 access outside the item")),
        "{report}"
    );
    let plan = report["containment"]["sandbox"]
        .as_str()
        .unwrap_or_default();
    assert!(plan.contains("network only 127.0.0.1:"), "{report}");
}

#[test]
fn with_the_network_open_the_same_worker_reaches_every_host() {
    let (log, report, _) = reach("open");
    assert!(log.contains("allowed: allowed-host"), "{log}");
    assert!(log.contains("other: other-host"), "{log}");
    assert!(log.contains("around: allowed-host"), "{log}");
    assert!(report["items"][0].get("denied").is_none(), "{report}");
}

/// One item in repository `a` under `root`, its worker the shell command `worker`, run confined
/// (`sandbox: required`) by `apply`.
fn one_confined_item(root: &Path, worker: &str) -> std::process::Output {
    repo(&root.join("a"));
    let manifest = serde_json::json!({
        "version": 1, "name": "one", "repositories": [{"path": "a"}],
        "worker": {"run": worker}, "items": [{"repo": "a", "id": "i1"}],
        "sandbox": {"mode": "required"},
    });
    // JSON is YAML.
    std::fs::write(root.join("m.yaml"), manifest.to_string()).unwrap();
    runner()
        .current_dir(root)
        .args(["apply", "m.yaml", "--no-progress"])
        .env_remove("RUNNER_SANDBOX_WRITABLE")
        .output()
        .unwrap()
}

/// A path the worker names is its to choose: one with terminal escapes, denied, reaches
/// runner's console line and `summary.md` shown as text, never as a sequence the terminal obeys.
#[test]
fn a_denied_path_with_terminal_escapes_is_shown_as_text() {
    if !kernel_confines() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let out = one_confined_item(
        r,
        &format!(
            "echo x > \"{}/$(printf \"\\033]0;pwned\\007\\033[2J\")evil\" ; true",
            r.display()
        ),
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("the sandbox denied its worker"), "{err}");
    assert!(err.contains("evil"), "{err}");
    assert!(!err.contains('\u{1b}') && !err.contains('\u{7}'), "{err:?}");
    let summary = std::fs::read_to_string(r.join("runner-reports/latest/summary.md")).unwrap();
    assert!(summary.contains("evil"), "{summary}");
    assert!(
        !summary.contains('\u{1b}') && !summary.contains('\u{7}'),
        "{summary:?}"
    );
}

/// Each denied write names the program that tried it, even one that ends the moment its call
/// fails: its name is read while the call waits for the recorder's answer.
#[test]
fn a_denied_write_names_its_program_however_short_it_lived() {
    if !kernel_confines() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let out = one_confined_item(
        r,
        &format!(
            "for i in $(seq 40); do sh -c \"echo x > {}/out-$i\" 2>/dev/null; done; true",
            r.display()
        ),
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(r.join("runner-reports/latest/report.json")).unwrap(),
    )
    .unwrap();
    let denied = report["items"][0]["denied"]
        .as_array()
        .unwrap_or_else(|| panic!("{report:#}"));
    assert_eq!(denied.len(), 40, "{denied:#?}");
    let unnamed: Vec<&serde_json::Value> = denied.iter().filter(|d| d["program"] != "sh").collect();
    assert!(unnamed.is_empty(), "{unnamed:#?}");
}

/// Twelve repositories in one folder, with a folder of tools, a file and a link beside them:
/// each item's commands run with that folder covered whole and what they may see bound back.
/// The item sees its own repository, the tools, the file and the link, and no other
/// repository — by its path, or by `..` from the checkout it works in. Returns each item's
/// answers (`NAME: ANSWER` lines of its worker log) by item id.
fn many_repositories(mode: &str) -> BTreeMap<String, String> {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let repos = r.join("repos");
    for k in 1..=12 {
        repo(&repos.join(format!("r{k}")));
    }
    std::fs::create_dir_all(repos.join("tools")).unwrap();
    std::fs::write(repos.join("tools/tool.sh"), "#!/bin/sh\necho tool-ran\n").unwrap();
    std::process::Command::new("chmod")
        .args(["+x", &repos.join("tools/tool.sh").display().to_string()])
        .status()
        .unwrap();
    std::fs::write(repos.join("NOTES.txt"), "notes\n").unwrap();
    std::os::unix::fs::symlink("tools", repos.join("link")).unwrap();
    let worker = format!(
        r#"#!/bin/sh
R={repos}
say() {{ echo "$RUNNER_ITEM $1: $2"; }}
say listing "$(ls "$R" | tr '\n' ' ')"
say by-path "$(cat "$R/r7/README.md" 2>/dev/null || echo hidden)"
say by-dotdot "$(cd .. 2>/dev/null && cat r7/README.md 2>/dev/null || echo hidden)"
say dotdot-listing "$(cd "$(git rev-parse --show-toplevel)/.." && ls | tr '\n' ' ')"
say notes "$(cat "$R/NOTES.txt")"
say tool "$("$R/tools/tool.sh")"
say link "$("$R/link/tool.sh")"
echo work > own-work.txt
say add "$(git add own-work.txt 2>&1 && echo added)"
"#,
        repos = repos.display()
    );
    std::fs::write(r.join("worker.sh"), worker).unwrap();
    let repositories: Vec<serde_json::Value> = (1..=12)
        .map(|k| serde_json::json!({"path": format!("repos/r{k}"), "name": format!("r{k}")}))
        .collect();
    let manifest = serde_json::json!({
        "version": 1, "name": "many", "repositories": repositories,
        "worker": {"run": ["sh", r.join("worker.sh").display().to_string()]},
        "items": [
            {"repo": "r1", "id": "in-place"},
            {"repo": "r2", "id": "branch", "branch": "runner/branch"},
        ],
        "sandbox": {"mode": mode},
    });
    std::fs::write(r.join("m.yaml"), manifest.to_string()).unwrap();
    let err = drained(r);
    assert!(
        git(&repos.join("r2"), &["show", "--stat", "runner/branch"]).contains("own-work.txt"),
        "{err}"
    );
    let mut answers = BTreeMap::new();
    for id in ["in-place", "branch"] {
        let log = find_log(&r.join("runner-reports"), &format!("{id} listing"))
            .unwrap_or_else(|| panic!("no worker log of {id}: {err}"));
        for line in log.lines() {
            if let Some((k, v)) = line.split_once(": ") {
                answers.insert(k.to_string(), v.trim().to_string());
            }
        }
    }
    answers
}

#[test]
fn a_folder_of_many_repositories_is_covered_whole_and_the_rest_of_it_stays_in_sight() {
    if !kernel_confines() {
        return;
    }
    let a = many_repositories("required");
    let get = |k: &str| {
        a.get(k)
            .cloned()
            .unwrap_or_else(|| panic!("no `{k}`: {a:#?}"))
    };
    assert_eq!(get("in-place listing"), "NOTES.txt link r1 tools", "{a:#?}");
    assert_eq!(get("branch listing"), "NOTES.txt link r2 tools", "{a:#?}");
    assert_eq!(get("in-place dotdot-listing"), "NOTES.txt link r1 tools");
    for id in ["in-place", "branch"] {
        assert_eq!(get(&format!("{id} by-path")), "hidden", "{a:#?}");
        assert_eq!(get(&format!("{id} notes")), "notes");
        assert_eq!(get(&format!("{id} tool")), "tool-ran");
        assert_eq!(get(&format!("{id} link")), "tool-ran");
        // Its repository's object store, bound back with the rest of it, takes its writes.
        assert_eq!(get(&format!("{id} add")), "added");
    }
    // From its own checkout, `..` leads to the covered folder, not to what it covers.
    assert_eq!(get("in-place by-dotdot"), "hidden");
}

#[test]
fn unconfined_every_repository_of_the_folder_is_in_sight() {
    let a = many_repositories("off");
    assert_eq!(a["in-place by-path"], "hello", "{a:#?}");
    assert_eq!(a["in-place by-dotdot"], "hello", "{a:#?}");
    assert!(a["branch listing"].contains("r12"), "{a:#?}");
}

/// What an item sees of the items that start after it: item `x1` runs first; `z1` ends at once
/// and `y1` takes its slot, writes a note in its temporary folder and works in its worktree,
/// then tells `x1` (through a folder both may write) to look. Returns what `x1` found.
fn a_later_item(mode: &str) -> (String, String) {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    for name in ["x", "y", "z"] {
        repo(&r.join(name));
    }
    std::fs::create_dir_all(r.join("shared")).unwrap();
    let ws = r.join(".runner/workspace");
    let worker = format!(
        r#"#!/bin/sh
ws={ws}
case $RUNNER_ITEM in
x1)
  for i in $(seq 200); do [ -e {shared}/flag ] && break; sleep 0.1; done
  echo "tmp: $(cat "$ws/tmp/y/note" 2>/dev/null || echo hidden)"
  echo "worktree: $(cat "$ws/worktrees/y/y1/README.md" 2>/dev/null || echo hidden)" ;;
y1)
  mkdir -p "$ws/tmp/y" && echo "note of y1" > "$ws/tmp/y/note"
  touch {shared}/flag
  sleep 3 ;;
esac
"#,
        ws = ws.display(),
        shared = r.join("shared").display()
    );
    std::fs::write(r.join("worker.sh"), worker).unwrap();
    let manifest = serde_json::json!({
        "version": 1, "name": "later", "capacity": {"workers": 2},
        "repositories": [{"path": "x"}, {"path": "y"}, {"path": "z"}],
        "worker": {"run": ["sh", r.join("worker.sh").display().to_string()]},
        "items": [
            {"repo": "x", "id": "x1", "branch": "runner/x1"},
            {"repo": "z", "id": "z1"},
            {"repo": "y", "id": "y1", "branch": "runner/y1"},
        ],
        "sandbox": {"mode": mode, "writable": [r.join("shared").display().to_string()]},
    });
    std::fs::write(r.join("m.yaml"), manifest.to_string()).unwrap();
    let err = drained(r);
    let log = find_log(&r.join("runner-reports"), "worktree: ")
        .unwrap_or_else(|| panic!("no log of x1: {err}"));
    let said = |key: &str| {
        log.lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("no `{key}` in {log}"))
            .trim()
            .to_string()
    };
    (said("tmp: "), said("worktree: "))
}

#[test]
fn an_item_that_starts_later_is_out_of_sight_too() {
    if !kernel_confines() {
        return;
    }
    assert_eq!(
        a_later_item("required"),
        ("hidden".to_string(), "hidden".to_string())
    );
}

#[test]
fn unconfined_an_item_that_starts_later_is_in_sight() {
    assert_eq!(
        a_later_item("off"),
        ("note of y1".to_string(), "hello".to_string())
    );
}

/// Under Landlock a worktree item may make only files and folders in git's folders it writes
/// (the object store, its worktree's own git folder): a FIFO or a link planted where git looks
/// for a pack index is refused by the kernel, and its run goes on with nothing left for
/// runner's git to wait on. (Unconfined, the same plants are made, found and named:
/// `hostile::what_a_worker_plants_in_gits_folders_is_named_not_waited_on`.)
#[test]
fn the_kernel_keeps_fifos_and_links_out_of_a_worktrees_git_folders() {
    if !kernel_confines() {
        return;
    }
    for (what, plant, _) in crate::hostile::PLANTS
        .iter()
        .filter(|(_, p, _)| p.contains("objects/pack"))
    {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        let a = repo(&r.join("a"));
        let worker = format!(
            "c=$(cd \"$(git rev-parse --git-common-dir)\" && pwd); echo work > work.txt; {plant}; echo \"planting: $?\""
        );
        let manifest = serde_json::json!({
            "version": 1, "name": "kept-out", "repositories": [{"path": "a"}],
            "worker": {"run": ["sh", "-c", worker]},
            "items": [{"repo": "a", "id": "w", "branch": "work/w"}],
            "sandbox": {"mode": "required"},
        });
        std::fs::write(r.join("m.yaml"), manifest.to_string()).unwrap();
        let out = runner()
            .current_dir(r)
            .args(["apply", "m.yaml", "--no-progress"])
            .env_remove("RUNNER_SANDBOX_WRITABLE")
            .env("RUNNER_GIT_TIMEOUT", "30s")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{what}: {}", stderr(&out));
        let pack = a.join(".git/objects/pack");
        let odd: Vec<_> = std::fs::read_dir(&pack)
            .unwrap()
            .flatten()
            .filter(|e| !e.file_type().unwrap().is_file())
            .map(|e| e.path())
            .collect();
        assert!(odd.is_empty(), "{what}: planted {odd:?}");
        let log = std::fs::read_to_string(r.join("runner-reports/latest/logs/a/w/1-worker.log"))
            .unwrap_or_default();
        assert!(log.contains("ermission denied"), "{what}: {log}");
        assert_eq!(git(&a, &["cat-file", "-t", "work/w"]), "commit");
    }
}
