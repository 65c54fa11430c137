//! Hostile and unlucky surroundings: a reader that went away, a device given as a manifest,
//! control characters in recorded text, a closed terminal, runner's control verbs run from inside
//! a worker. The built binary, real pipes, real signals.

use crate::common;

use common::{git, repo, run_in, runner, stderr};
use std::path::Path;

fn fixture(root: &Path) {
    repo(&root.join("r"));
    std::fs::write(
        root.join("m.yaml"),
        "version: 1\nname: hostile\nrepositories: [{path: r}]\nworker: {run: [\"true\"]}\nitems: [{repo: r, id: a}]\n",
    )
    .unwrap();
}

/// Run runner with its standard output a pipe whose reader is already gone.
fn with_closed_stdout(root: &Path, args: &[&str]) -> std::process::Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    runner()
        .current_dir(root)
        .args(args)
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap()
}

#[test]
fn a_reader_that_went_away_ends_output_quietly_with_the_commands_own_code() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    for (args, code) in [
        (&["plan", "m.yaml"][..], 0),
        (&["plan", "m.yaml", "--json"][..], 0),
        (&["plan", "m.yaml", "--detailed-exitcode"][..], 2),
        (&["validate", "m.yaml"][..], 0),
        (&["schema"][..], 0),
        (&["completions", "bash"][..], 0),
        (&["apply", "m.yaml", "--no-progress", "--json"][..], 0),
        (&["status", "m.yaml"][..], 0),
    ] {
        let out = with_closed_stdout(dir.path(), args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert!(
            !err.contains("internal error") && !err.contains("panicked"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn a_closed_terminal_stops_the_run_like_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("r"));
    let started = dir.path().join("started");
    std::fs::write(
        dir.path().join("m.yaml"),
        format!(
            "version: 1\nname: hup\nrepositories: [{{path: r}}]\nworker:\n  run: 'touch {}; sleep 4127'\n  grace: 2s\nitems: [{{repo: r, id: a}}, {{repo: r, id: b}}]\n",
            started.display()
        ),
    )
    .unwrap();
    let child = runner()
        .current_dir(dir.path())
        .args(["apply", "m.yaml", "--no-progress"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    assert!(common::wait_for(20, || started.exists()));
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(129), "{err}");
    assert!(
        common::processes_matching("sleep 4127").is_empty(),
        "a worker outlived the hangup"
    );
    let report = common::latest_report(&dir.path().join("runner-reports"));
    assert_eq!(report["ending"], "cancelled");
    // The sender, from the signal itself: this test's own process.
    let by = format!("cancelled by pid {} (uid ", std::process::id());
    let cause = report["cause"].as_str().unwrap();
    assert!(
        cause.contains(&by) && cause.ends_with("(SIGHUP)"),
        "{report:#}"
    );
    assert!(
        err.lines()
            .last()
            .unwrap()
            .contains(&format!("exit 129: {by}")),
        "{err}"
    );
}

#[test]
fn a_device_or_fifo_is_refused_before_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_in(dir.path(), &["validate", "/dev/zero"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("not a regular file"),
        "{}",
        stderr(&out)
    );
    let fifo = dir.path().join("m.yaml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    // Nobody writes the FIFO: reading it would block for ever.
    let out = run_in(dir.path(), &["validate", "m.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("not a regular file"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn steering_verbs_are_refused_inside_a_worker_and_the_ceiling_fails_closed() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    for args in [
        &["pause", "m.yaml"][..],
        &["resume", "m.yaml"][..],
        &["cancel", "some-run", "--manifest", "m.yaml"][..],
        &["unlock", "r"][..],
    ] {
        let out = runner()
            .current_dir(dir.path())
            .args(args)
            .env("RUNNER_ROLE", "worker")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            stderr(&out).contains("is refused inside a worker"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    let r = dir.path().join("r");
    for (max, path) in [
        (Some("lots"), Some(&r)),
        (None, Some(&r)),
        (Some("2"), None),
    ] {
        let mut c = runner();
        c.current_dir(dir.path())
            .args(["apply", "m.yaml", "--no-progress"])
            .env("RUNNER_ROLE", "worker")
            .env_remove("RUNNER_MAX_WORKERS")
            .env_remove("RUNNER_REPO_PATH");
        if let Some(m) = max {
            c.env("RUNNER_MAX_WORKERS", m);
        }
        if let Some(p) = path {
            c.env("RUNNER_REPO_PATH", p);
        }
        let out = c.output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(2),
            "{max:?} {path:?}: {}",
            stderr(&out)
        );
        assert!(!dir.path().join("runner-reports").exists(), "it ran");
    }
}

#[test]
fn recorded_text_reaches_the_terminal_escaped() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    let reason = "maintenance\u{1b}[2J\u{1b}]0;owned\u{7}\nrunner: all clear";
    let out = run_in(dir.path(), &["pause", "m.yaml", "--reason", reason]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = run_in(dir.path(), &["status", "m.yaml"]);
    let text = common::stdout(&out);
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{7}'),
        "{text:?}"
    );
    assert!(text.contains("maintenance\\u{1b}[2J"), "{text}");
    assert!(
        !text.lines().any(|l| l.starts_with("runner: all clear")),
        "{text}"
    );
}

/// Every file under `dir`, read whole.
fn every_file(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(b) = std::fs::read(&p) {
                out.push((p, b));
            }
        }
    }
    out
}

#[test]
fn secrets_printed_in_pieces_never_reach_a_file_runner_writes() {
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("r"));
    let token = "tok-3f9a1c7e5b";
    let pem =
        "-----BEGIN KEY-----\nMIIEvQIBADANBgkqhkiG9w\nA0BAQEFAASCBKcwggSjAgE\n-----END KEY-----";
    let in_env = "envkey-77d41e0a9";
    std::fs::write(
        dir.path().join("m.yaml"),
        format!(
            r#"version: 1
name: secrets
repositories: [{{path: r}}]
env: {{pass: [PATH], secrets: [AGENT_TOKEN, DEPLOY_PEM]}}
worker:
  env: {{SERVICE_API_KEY: {in_env}}}
  run: 'printf "token=tok-3f9"; sleep 0.2; printf "a1c7e5b done\n"; printf "%s\n" "$DEPLOY_PEM"; echo "$SERVICE_API_KEY"; exit 1'
items: [{{repo: r, id: a}}]
"#
        ),
    )
    .unwrap();
    let out = runner()
        .current_dir(dir.path())
        .args(["apply", "m.yaml", "--no-progress", "--json"])
        .env("AGENT_TOKEN", token)
        .env("DEPLOY_PEM", pem)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let mut needles: Vec<&str> = vec![token, in_env];
    needles.extend(pem.lines().filter(|l| l.len() >= 4));
    let mut files = every_file(&dir.path().join("runner-reports"));
    files.extend(every_file(&dir.path().join(".runner")));
    files.push(("stdout".into(), out.stdout.clone()));
    files.push(("stderr".into(), out.stderr.clone()));
    let mut seen_log = false;
    for (path, bytes) in &files {
        let text = String::from_utf8_lossy(bytes);
        seen_log |= text.contains("token=*** done");
        for n in &needles {
            assert!(!text.contains(n), "`{n}` in {}", path.display());
        }
    }
    assert!(seen_log, "the worker's output was logged, redacted");
}

#[test]
fn a_hostile_folder_name_or_value_is_never_shell_syntax() {
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("checkouts/svc-ok"));
    repo(&dir.path().join("checkouts/svc $(touch PWNED)"));
    let seen = dir.path().join("seen.txt");
    std::fs::write(
        dir.path().join("m.yaml"),
        format!(
            r#"version: 1
name: hostile
repositories: [{{glob: "checkouts/svc*"}}]
worker:
  run: 'echo {{repo}} {{item.task}} >> {seen}'
items:
  - {{repo: svc-ok, id: a, vars: {{task: "fix; touch PWNED2 && echo $(touch PWNED3) 'quoted'"}}}}
"#,
            seen = seen.display()
        ),
    )
    .unwrap();
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("whose folder name is not a valid repository name"),
        "{err}"
    );
    for f in ["PWNED", "PWNED2", "PWNED3"] {
        let hits: Vec<_> = every_file(dir.path())
            .into_iter()
            .filter(|(p, _)| p.file_name().is_some_and(|n| n == f))
            .collect();
        assert!(
            hits.is_empty(),
            "{f} was created: a value ran as shell syntax"
        );
    }
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap(),
        "svc-ok fix; touch PWNED2 && echo $(touch PWNED3) 'quoted'\n"
    );
}

#[test]
fn branch_names_git_refuses_or_that_name_no_branch_of_its_own_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("r"));
    for bad in ["a b", "../../x", "x.lock", "-b", "HEAD", "refs/heads/x"] {
        std::fs::write(
            dir.path().join("m.yaml"),
            format!(
                "version: 1\nname: b\nrepositories: [{{path: r}}]\nworker: {{run: [\"true\"]}}\nitems: [{{repo: r, id: a, branch: {}}}]\n",
                serde_json::to_string(bad).unwrap()
            ),
        )
        .unwrap();
        let out = run_in(dir.path(), &["validate", "m.yaml"]);
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("invalid-branch"),
            "{bad}: {}",
            stderr(&out)
        );
    }
    // The branch the checkout is on depends on the disk: validation, which plans the manifest,
    // and plan refuse it, with the reason.
    std::fs::write(
        dir.path().join("m.yaml"),
        "version: 1\nname: b\nrepositories: [{path: r}]\nworker: {run: [\"true\"]}\nitems: [{repo: r, id: a, branch: main}]\n",
    )
    .unwrap();
    for verb in ["validate", "plan"] {
        let out = run_in(dir.path(), &[verb, "m.yaml"]);
        assert_eq!(out.status.code(), Some(2), "{verb}");
        assert!(
            stderr(&out).contains("which the checkout"),
            "{verb}: {}",
            stderr(&out)
        );
    }
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(2));
}

/// Commit what is in repository `r` and write `root/m.yaml`, whose items are discovered from
/// `tasks/*/task.md` in it, each named after its folder.
fn discover_tasks(root: &Path, r: &Path) {
    common::git(r, &["add", "."]);
    common::git(r, &["commit", "-q", "-m", "tasks"]);
    std::fs::write(
        root.join("m.yaml"),
        "version: 1\nname: d\nrepositories: [{path: r}]\nworker: {run: [\"true\"]}\ndiscover: [{glob: \"tasks/*/task.md\", id: \"{match.parent}\"}]\n",
    )
    .unwrap();
}

#[test]
fn discovery_never_follows_a_link_out_of_the_repository() {
    let dir = tempfile::tempdir().unwrap();
    let r = repo(&dir.path().join("r"));
    std::fs::write(dir.path().join("outside.md"), "not yours\n").unwrap();
    std::fs::create_dir_all(r.join("tasks/inside")).unwrap();
    std::fs::create_dir_all(r.join("tasks/escape")).unwrap();
    std::fs::write(r.join("tasks/inside/task.md"), "yours\n").unwrap();
    std::os::unix::fs::symlink("../../../outside.md", r.join("tasks/escape/task.md")).unwrap();
    discover_tasks(dir.path(), &r);
    let out = run_in(dir.path(), &["plan", "m.yaml", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&str> = plan["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["inside"]);
    assert!(
        stderr(&out).contains("`tasks/escape/task.md` is a link that leads outside the repository"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_discovered_path_with_control_characters_is_named_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let r = repo(&dir.path().join("r"));
    let hostile = "new\nrunner: ok\u{1b}[2J";
    std::fs::create_dir_all(r.join("tasks").join(hostile)).unwrap();
    std::fs::write(r.join("tasks").join(hostile).join("task.md"), "x\n").unwrap();
    discover_tasks(dir.path(), &r);
    let out = run_in(dir.path(), &["plan", "m.yaml"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("`tasks/new\\nrunner: ok\\u{1b}[2J/task.md` in repository `r`"),
        "{err}"
    );
    assert!(
        err.contains("`new\\nrunner: ok\\u{1b}[2J`, which is not a valid"),
        "{err}"
    );
    assert!(!err.contains('\u{1b}'), "{err:?}");
    assert!(!err.lines().any(|l| l.starts_with("runner: ok")), "{err}");
}

/// Start `apply m.yaml` in `root`, wait until processes matching every one of `running` live,
/// then `kill -9` runner and reap it. (The tests of what a killed runner leaves run their items
/// unconfined: a confined item leaves nothing, see
/// `a_confined_item_leaves_nothing_behind_a_killed_runner`.)
fn kill_runner_while(root: &Path, running: &[&str]) {
    // Killed while in process-group mode: what it left is found by its token alone.
    common::kill_runner_while(root, &[("RUNNER_CONTAINMENT", "process-group")], running);
}

#[test]
fn after_runner_is_killed_the_next_run_ends_what_it_left_before_working() {
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("r"));
    let again = dir.path().join("again");
    std::fs::write(
        dir.path().join("m.yaml"),
        format!(
            "version: 1\nname: crash\nrepositories: [{{path: r}}]\nworker:\n  run: 'test -e {again} && exit 0; setsid sleep 4711 & sleep 4712'\nitems: [{{repo: r, id: a}}]\nsandbox: {{mode: off}}\n",
            again = again.display()
        ),
    )
    .unwrap();
    kill_runner_while(dir.path(), &["sleep 4711", "sleep 4712"]);
    // The worker itself (the shell), runner's direct child, dies with runner: a parent-death
    // signal...
    assert!(
        common::wait_for(10, || common::processes_matching("& sleep 4712").is_empty()),
        "the worker outlived runner"
    );
    // ...while what it started lives on until the next run ends it.
    assert!(
        !common::processes_matching("sleep 4711").is_empty(),
        "the escapee lives on"
    );
    // `status` and `unlock` name what keeps the lease.
    let status = common::stdout(&run_in(dir.path(), &["status", "m.yaml"]));
    assert!(status.contains("live on and keep the lease"), "{status}");
    assert!(status.contains("sleep 4711"), "{status}");
    let out = run_in(dir.path(), &["unlock", "r", "--manifest", "m.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("`sleep 4711`"), "{}", stderr(&out));
    std::fs::write(&again, "").unwrap();
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        common::processes_matching("sleep 4711").is_empty(),
        "left alive: {err}"
    );
    assert!(
        common::processes_matching("sleep 4712").is_empty(),
        "left alive: {err}"
    );
    let report = common::latest_report(&dir.path().join("runner-reports"));
    let warnings = report["warnings"].as_array().unwrap();
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().unwrap().contains("that dead run")),
        "{report:#}"
    );
    assert_eq!(
        common::report_item(&report, "id", "a")["outcome"],
        "completed"
    );
}

/// After a killed run (its guardian lost too) left a process in each of three repositories,
/// `status` lists each process once, under the lease of its own repository.
#[test]
fn a_dead_runs_processes_are_each_listed_once_under_their_own_lease() {
    let dir = tempfile::tempdir().unwrap();
    for r in ["r0", "r1", "r2"] {
        repo(&dir.path().join(r));
    }
    std::fs::write(
        dir.path().join("m.yaml"),
        "version: 1\nname: crash\ncapacity: {workers: 3}\nrepositories: [{path: r0}, {path: r1}, {path: r2}]\nworker:\n  run: 'setsid sleep 4751{item.n} & sleep 4752{item.n}'\nitems: [{repo: r0, id: a, vars: {n: '0'}}, {repo: r1, id: a, vars: {n: '1'}}, {repo: r2, id: a, vars: {n: '2'}}]\nsandbox: {mode: off}\n",
    )
    .unwrap();
    kill_runner_while(dir.path(), &["sleep 47510", "sleep 47511", "sleep 47512"]);
    let status = common::stdout(&run_in(dir.path(), &["status", "m.yaml"]));
    for pid in common::processes_matching("sleep 475") {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    for (n, r) in ["r0", "r1", "r2"].iter().enumerate() {
        let marker = format!("sleep 4751{n}");
        assert_eq!(
            status.matches(&marker).count(),
            1,
            "`{marker}` listed once: {status}"
        );
        // Under its own repository's lease: the nearest lease line above it.
        let lines: Vec<&str> = status.lines().collect();
        let at = lines.iter().position(|l| l.contains(&marker)).unwrap();
        let under = lines[..at]
            .iter()
            .rev()
            .find(|l| l.starts_with("  ") && !l.starts_with("   "))
            .unwrap_or(&"");
        assert!(
            under.trim_start().starts_with(r),
            "`{marker}` under {under}: {status}"
        );
    }
}

/// A killed runner's guardian ends what its unconfined item left — a descendant that left the
/// worker's session, forked twice and ignores SIGTERM — within seconds, with no later run. (With
/// the guardian killed too, it lives on until the next run:
/// `after_runner_is_killed_the_next_run_ends_what_it_left_before_working`.)
#[test]
fn a_killed_runners_guardian_ends_what_its_items_left_without_a_later_run() {
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("r"));
    std::fs::write(
        dir.path().join("m.yaml"),
        "version: 1\nname: crash\nrepositories: [{path: r}]\nworker:\n  run: 'setsid sh -c \"trap \\\"\\\" TERM; (sleep 4731 &); sleep 4732\" & sleep 4733'\nitems: [{repo: r, id: a}]\nsandbox: {mode: off}\n",
    )
    .unwrap();
    common::kill_only_runner_while(
        dir.path(),
        &[("RUNNER_CONTAINMENT", "process-group")],
        &["sleep 4731", "sleep 4732", "sleep 4733"],
    );
    let killed = std::time::Instant::now();
    assert!(
        common::wait_for(20, || common::processes_matching("sleep 473").is_empty()),
        "left alive: {:?}",
        common::processes_matching("sleep 473")
    );
    eprintln!("gone {:?} after runner was killed", killed.elapsed());
    // What it did, in the run's logs.
    let log = || {
        common::walk_files(&dir.path().join("runner-reports"))
            .iter()
            .find(|p| p.ends_with("logs/guardian.log"))
            .map(|p| std::fs::read_to_string(p).unwrap())
            .unwrap_or_default()
    };
    common::wait_for(20, || log().contains("ended the run's processes"));
    assert!(
        log().contains("ended the run's processes: pids"),
        "{}",
        log()
    );
}

/// A confined item runs in a pid namespace of its own, whose first process dies with runner
/// (a parent-death signal): the kernel then ends everything in the namespace, what left the
/// worker's session and cleared its environment included. Nothing keeps the lease; the next run
/// works at once.
#[test]
fn a_confined_item_leaves_nothing_behind_a_killed_runner() {
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("r"));
    let again = dir.path().join("again");
    std::fs::write(
        dir.path().join("m.yaml"),
        format!(
            "version: 1\nname: crash\nrepositories: [{{path: r}}]\nworker:\n  run: 'test -e {again} && exit 0; setsid env -i sleep 4721 & sleep 4722'\nitems: [{{repo: r, id: a}}]\nsandbox: {{mode: required}}\n",
            again = again.display()
        ),
    )
    .unwrap();
    kill_runner_while(dir.path(), &["sleep 4721", "sleep 4722"]);
    assert!(
        common::wait_for(10, || common::processes_matching("sleep 472").is_empty()),
        "left alive: {:?}",
        common::processes_matching("sleep 472")
    );
    std::fs::write(&again, "").unwrap();
    let out = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn unlock_with_kill_ends_what_a_dead_holder_left() {
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("r"));
    std::fs::write(
        dir.path().join("m.yaml"),
        "version: 1\nname: crash\nrepositories: [{path: r}]\nworker:\n  run: 'setsid sleep 5311 & sleep 5312'\nitems: [{repo: r, id: a}]\nsandbox: {mode: off}\n",
    )
    .unwrap();
    kill_runner_while(dir.path(), &["sleep 5311"]);
    let out = run_in(dir.path(), &["unlock", "r", "--manifest", "m.yaml"]);
    assert_eq!(out.status.code(), Some(1), "refused without --kill");
    let out = run_in(
        dir.path(),
        &["unlock", "r", "--manifest", "m.yaml", "--kill"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stderr(&out).contains("ended"), "{}", stderr(&out));
    assert!(common::processes_matching("sleep 5311").is_empty());
    assert!(common::processes_matching("sleep 5312").is_empty());
}

/// `runner apply m.yaml` in `root` with git's calls given `git_timeout`, killed if it has not
/// ended within `secs`: whether it ended, and what it printed on stderr.
fn apply_within(root: &Path, git_timeout: &str, secs: u64) -> (bool, std::process::Output) {
    let mut child = runner()
        .current_dir(root)
        .args(["apply", "m.yaml", "--no-progress"])
        .env("RUNNER_GIT_TIMEOUT", git_timeout)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let ended = common::wait_for(secs, || child.try_wait().unwrap().is_some());
    if !ended {
        child.kill().unwrap();
    }
    (ended, child.wait_with_output().unwrap())
}

#[test]
fn a_fifo_in_place_of_runners_files_in_git_dir_is_refused_not_waited_on() {
    // No writer or reader ever comes to these FIFOs: opened plainly, runner would wait on them
    // for ever, on its event loop, deaf to signals.
    for name in ["runner.lock", "runner.lease.json", "HEAD"] {
        let dir = tempfile::tempdir().unwrap();
        fixture(dir.path());
        let path = dir.path().join("r/.git").join(name);
        let _ = std::fs::remove_file(&path);
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let (ended, out) = apply_within(dir.path(), "5s", 60);
        assert!(ended, "runner waited on a FIFO at .git/{name}");
        let err = stderr(&out);
        match name {
            // The lock cannot be taken: the item fails, naming the file.
            "runner.lock" => {
                assert_eq!(out.status.code(), Some(1), "{err}");
                assert!(
                    err.contains("runner.lock") && err.contains("not a regular file"),
                    "{err}"
                );
            }
            // The record is informational: it is replaced by a file.
            "runner.lease.json" => {
                assert_eq!(out.status.code(), Some(0), "{err}");
                assert!(std::fs::metadata(&path).unwrap().is_file());
            }
            // git cannot read the repository either (its call has a deadline): not worked on.
            _ => assert!(
                err.contains("1 skipped (repo-not-found 1)"),
                "{name}: {err}"
            ),
        }
    }
}

/// A FIFO in place of a loose object (one git reads for HEAD's commit) is found up front, named,
/// by `plan` and `apply` alike: the repository is not worked on, and nothing waits on git's
/// deadlines.
#[test]
fn a_fifo_in_place_of_a_loose_object_is_named_up_front() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    let git_dir = dir.path().join("r/.git");
    let head = common::git(&dir.path().join("r"), &["rev-parse", "HEAD"]);
    let head = head.trim();
    let object = git_dir.join("objects").join(&head[..2]).join(&head[2..]);
    assert!(object.exists(), "HEAD's commit is a loose object");
    std::fs::remove_file(&object).unwrap();
    nix::unistd::mkfifo(&object, nix::sys::stat::Mode::S_IRWXU).unwrap();
    for verb in ["plan", "apply"] {
        let out = runner()
            .current_dir(dir.path())
            .args([verb, "m.yaml"])
            .env("RUNNER_GIT_TIMEOUT", "5s")
            .output()
            .unwrap();
        let err = stderr(&out);
        let said = format!("{}{err}", common::stdout(&out));
        assert!(
            said.contains(&format!("{}` is a FIFO, not a regular file", &head[2..])),
            "{verb}: {said}"
        );
        assert!(!said.contains("timed out"), "{verb}: {said}");
    }
}

/// A worker that removes its `RUNNER_*` variables is still inside its item: it cannot cancel its
/// own run, nor start a drain of another manifest. Told from its ancestry (process-group mode)
/// and its cgroup (cgroup mode).
#[test]
fn a_worker_without_its_runner_environment_still_cannot_steer_or_drain() {
    for containment in ["process-group", "cgroup"] {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        repo(&root.join("r"));
        repo(&root.join("other"));
        std::fs::write(
            root.join("other.yaml"),
            "version: 1\nname: other\nrepositories: [{path: other}]\nworker: {run: 'touch drained-by-a-worker'}\nitems: [{repo: other, id: x}]\n",
        )
        .unwrap();
        let exe = env!("CARGO_BIN_EXE_runner");
        std::fs::write(
            root.join("m.yaml"),
            format!(
                "version: 1\nname: steer\nrepositories: [{{path: r}}]\nworker:\n  run: 'env -u RUNNER_ROLE -u RUNNER_MAX_WORKERS -u RUNNER_REPO_PATH {exe} cancel \"$RUNNER_RUN_ID\" --manifest {m} > {out}/cancel.txt 2>&1; echo \"exit $?\" >> {out}/cancel.txt; env -i PATH=\"$PATH\" {exe} apply {o} --no-progress > {out}/apply.txt 2>&1; echo \"exit $?\" >> {out}/apply.txt'\nitems: [{{repo: r, id: a}}]\n",
                m = root.join("m.yaml").display(),
                o = root.join("other.yaml").display(),
                out = root.display()
            ),
        )
        .unwrap();
        let out = runner()
            .current_dir(root)
            .args(["apply", "m.yaml", "--no-progress"])
            .env("RUNNER_CONTAINMENT", containment)
            .output()
            .unwrap();
        let err = stderr(&out);
        if containment == "cgroup" && err.contains("cgroup") && out.status.code() == Some(2) {
            common::not_run(&format!("cgroup containment is not usable here: {err}"));
            continue;
        }
        assert_eq!(out.status.code(), Some(0), "{containment}: {err}");
        let cancel = std::fs::read_to_string(root.join("cancel.txt")).unwrap();
        assert!(
            cancel.contains("`runner cancel` is refused inside an item of a run")
                && cancel.ends_with("exit 2\n"),
            "{containment}: {cancel}"
        );
        let apply = std::fs::read_to_string(root.join("apply.txt")).unwrap();
        assert!(
            apply.contains("runs inside an item of a run") && apply.ends_with("exit 2\n"),
            "{containment}: {apply}"
        );
        assert!(
            !root.join("other/drained-by-a-worker").exists(),
            "{containment}"
        );
    }
}

/// A tracked link to a folder outside the repository is not walked by discovery: no file
/// outside becomes a work item.
#[test]
fn discovery_never_follows_a_folder_link_out_of_the_repository() {
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("elsewhere");
    std::fs::create_dir_all(outside.join("deep")).unwrap();
    std::fs::write(outside.join("secret.md"), "not yours\n").unwrap();
    std::fs::write(outside.join("deep/more.md"), "not yours\n").unwrap();
    let r = repo(&dir.path().join("r"));
    std::os::unix::fs::symlink(&outside, r.join("tasks")).unwrap();
    std::os::unix::fs::symlink(&outside, r.join("link")).unwrap();
    common::git(&r, &["add", "tasks", "link"]);
    common::git(&r, &["commit", "-q", "-m", "links"]);
    std::fs::write(
        dir.path().join("m.yaml"),
        "version: 1\nname: links\nrepositories: [{path: r}]\nworker: {run: 'true'}\ndiscover:\n  - {glob: 'tasks/*.md', id: '{match.stem}'}\n  - {glob: 'link/**/*', id: 'l-{match.stem}'}\n",
    )
    .unwrap();
    let out = run_in(dir.path(), &["plan", "m.yaml", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["items"], serde_json::json!([]), "{plan:#}");
    let err = stderr(&out);
    assert!(
        err.contains("`tasks` leads outside the repository")
            && err.contains("`link` leads outside"),
        "{err}"
    );
}

/// A FIFO where git expects a regular file is named at once by `plan` and `apply`, which do not
/// wait for git's deadline (10 minutes a call).
#[test]
fn a_fifo_git_would_wait_on_is_named_up_front() {
    for name in ["index", "packed-refs", "refs/heads/feature", "config"] {
        let dir = tempfile::tempdir().unwrap();
        fixture(dir.path());
        let path = dir.path().join("r/.git").join(name);
        let _ = std::fs::remove_file(&path);
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).unwrap();
        for verb in ["plan", "apply"] {
            let started = std::time::Instant::now();
            let mut child = runner()
                .current_dir(dir.path())
                .args([verb, "m.yaml"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let ended = common::wait_for(30, || child.try_wait().unwrap().is_some());
            if !ended {
                child.kill().unwrap();
            }
            let out = child.wait_with_output().unwrap();
            assert!(ended, "{verb} waited on a FIFO at .git/{name}");
            let err = stderr(&out);
            assert!(
                err.contains(&format!(".git/{name}` is a FIFO, not a regular file")),
                "{verb} {name}: {err}"
            );
            let _ = started;
        }
    }
    // A link where git looks for a pack index, to a FIFO elsewhere, is followed and named.
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    let fifo = dir.path().join("elsewhere");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let pack = dir
        .path()
        .join("r/.git/objects/pack/pack-2222222222222222222222222222222222222222");
    std::fs::create_dir_all(pack.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(&fifo, pack.with_extension("idx")).unwrap();
    std::fs::write(pack.with_extension("pack"), "").unwrap();
    let (ended, out) = apply_within(dir.path(), "10m", 30);
    assert!(ended, "apply waited on a linked FIFO");
    assert!(
        stderr(&out).contains("2222.idx` leads to a FIFO"),
        "{}",
        stderr(&out)
    );
}

/// A git call of runner's that blocks for ever (a FIFO in place of a loose object, which is
/// left to git) dies with runner: SIGTERM to `plan` leaves no git behind.
#[test]
fn runners_own_git_calls_die_with_it() {
    let dir = tempfile::tempdir().unwrap();
    fixture(dir.path());
    let r = dir.path().join("r");
    // A FIFO where git reads its excludes (the object store is looked at up front): git, asked
    // for the checkout's status, opens it and waits.
    let exclude = r.join(".git/info/exclude");
    std::fs::create_dir_all(exclude.parent().unwrap()).unwrap();
    let _ = std::fs::remove_file(&exclude);
    nix::unistd::mkfifo(&exclude, nix::sys::stat::Mode::S_IRWXU).unwrap();
    // Dirty, so that git is asked.
    std::fs::write(r.join("new.txt"), "x\n").unwrap();
    let child = runner()
        .current_dir(dir.path())
        .args(["plan", "m.yaml"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let blocked = || {
        common::processes_matching("git")
            .into_iter()
            .filter(|p| {
                std::fs::read_link(format!("/proc/{p}/cwd")).is_ok_and(|c| c.starts_with(&r))
            })
            .collect::<Vec<_>>()
    };
    assert!(
        common::wait_for(20, || !blocked().is_empty()),
        "git was not asked"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let _ = child.wait_with_output();
    assert!(
        common::wait_for(5, || blocked().is_empty()),
        "git outlived runner: {:?}",
        blocked()
    );
}

/// In process-group mode, an escapee that cleared its environment and outlived runner's
/// SIGKILL keeps the lease: `status` and `unlock` name it (found by the lock file it holds open),
/// and `unlock --kill` ends it.
#[test]
fn what_keeps_a_dead_runs_lease_is_named_and_can_be_ended() {
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("r"));
    std::fs::write(
        dir.path().join("m.yaml"),
        "version: 1\nname: crash\nrepositories: [{path: r}]\nworker:\n  run: 'setsid env -i /bin/sleep 5331 & sleep 5332'\nitems: [{repo: r, id: a}]\nsandbox: {mode: off}\n",
    )
    .unwrap();
    common::kill_runner_while(
        dir.path(),
        &[("RUNNER_CONTAINMENT", "process-group")],
        &["sleep 5331", "sleep 5332"],
    );
    // `setsid` and `env` may still be on their way to exec the sleep when runner is killed:
    // wait for them to become the one escapee.
    common::wait_for(5, || common::processes_matching("sleep 5331").len() == 1);
    let escapee = common::processes_matching("sleep 5331");
    assert_eq!(escapee.len(), 1, "the escapee lives on: {escapee:?}");
    let status = common::stdout(&run_in(dir.path(), &["status", "m.yaml"]));
    assert!(
        status.contains(&format!("{}  /bin/sleep 5331", escapee[0])),
        "{status}"
    );
    let out = run_in(dir.path(), &["unlock", "r", "--manifest", "m.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(&format!("{} `/bin/sleep 5331`", escapee[0])),
        "{}",
        stderr(&out)
    );
    let out = run_in(
        dir.path(),
        &["unlock", "r", "--manifest", "m.yaml", "--kill"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("that kept its lease"),
        "{}",
        stderr(&out)
    );
    assert!(common::processes_matching("sleep 5331").is_empty());
    assert!(common::processes_matching("sleep 5332").is_empty());
}

/// A pack index whose fan-out table claims every object of a bucket: 2^32 − 1 names where the
/// file holds none. Two of them, one for the even buckets and one for the odd, so whatever an
/// object is named, some index claims its bucket.
fn lying_pack_index(odd: bool) -> Vec<u8> {
    let mut out = vec![0xff, b't', b'O', b'c', 0, 0, 0, 2];
    for bucket in 0..256u32 {
        let claims = (bucket % 2 == 1) == odd;
        out.extend_from_slice(&if claims { u32::MAX } else { 0 }.to_be_bytes());
    }
    out
}

/// A worker replaces the commit its checkout stands on with a loose object whose header claims
/// two bytes and whose stream holds more: gitoxide's inflate (gix-zlib 0.4.1) indexed past the
/// room it made for the claimed size and panicked, so every later `runner plan` or `apply` of the
/// repository ended at once in an internal error (exit 4). Such an object is now refused, and
/// the later runs read the repository as git does (git finds the object corrupt).
#[test]
fn a_planted_loose_object_that_claims_less_than_it_holds_ends_no_later_run() {
    let dir = tempfile::tempdir().unwrap();
    let r = repo(&dir.path().join("r"));
    let evil = dir.path().join("evil");
    let raw = b"commit 2\0tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\n";
    std::fs::write(&evil, miniz_oxide::deflate::compress_to_vec_zlib(raw, 6)).unwrap();
    let worker = format!(
        "h=$(git rev-parse HEAD); f=.git/objects/$(echo $h | cut -c1-2)/$(echo $h | cut -c3-); rm -f \"$f\"; cp '{}' \"$f\"",
        evil.display()
    );
    two_items(dir.path(), "loose", &worker, true, false);
    let first = run_in(dir.path(), &["apply", "m.yaml", "--no-progress"]);
    assert!(
        !stderr(&first).contains("internal error"),
        "{}",
        stderr(&first)
    );
    // The attack is real: git itself finds the commit unreadable now.
    let cat = std::process::Command::new("git")
        .arg("-C")
        .arg(&r)
        .args(["cat-file", "-p", "HEAD"])
        .output()
        .unwrap();
    assert!(!cat.status.success(), "git read the planted object");
    for verb in ["plan", "apply"] {
        let out = run_in(dir.path(), &[verb, "m.yaml", "--no-progress"]);
        let err = stderr(&out);
        assert!(!err.contains("internal error"), "{verb}: {err}");
        assert_ne!(out.status.code(), Some(4), "{verb}: {err}");
    }
}

/// A worker plants pack indexes that lie about their size where runner looks for objects; its
/// item, the next item and the next run are recorded as ever. Runner once believed the fan-out
/// table, allocated 85 GB for one bucket's names and died (exit 134) with no report, the item
/// neither recorded nor released, and every later run of the repository died the same way.
#[test]
fn a_planted_pack_index_that_lies_about_its_size_is_not_believed() {
    let dir = tempfile::tempdir().unwrap();
    let r = repo(&dir.path().join("r"));
    let planted = dir.path().join("planted");
    std::fs::create_dir(&planted).unwrap();
    std::fs::write(planted.join("pack-even.idx"), lying_pack_index(false)).unwrap();
    std::fs::write(planted.join("pack-odd.idx"), lying_pack_index(true)).unwrap();
    let worker = format!(
        "cp {}/*.idx \"$(git rev-parse --git-common-dir)/objects/pack/\"; echo \"$RUNNER_ITEM\" > \"$RUNNER_ITEM.txt\"",
        planted.display()
    );
    let manifest = serde_json::json!({
        "version": 1, "name": "planted", "repositories": [{"path": "r"}],
        "worker": {"run": ["sh", "-c", worker]},
        "items": [
            {"repo": "r", "id": "a", "branch": "work/a"},
            {"repo": "r", "id": "b", "branch": "work/b"},
        ],
    });
    std::fs::write(dir.path().join("m.yaml"), manifest.to_string()).unwrap();
    let first = run_in(dir.path(), &["apply", "m.yaml"]);
    assert!(
        r.join(".git/objects/pack/pack-odd.idx").exists(),
        "the worker did not plant its files: {}",
        stderr(&first)
    );
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    for id in ["a", "b"] {
        let shown = git(&r, &["ls-tree", "--name-only", &format!("work/{id}")]);
        assert!(
            shown.lines().any(|l| l == format!("{id}.txt")),
            "item {id}'s work was not committed: {shown}\n{}",
            stderr(&first)
        );
    }
    // The files stay; the next run reads them again, and is not stopped by them either.
    std::fs::write(
        dir.path().join("m.yaml"),
        manifest.to_string().replace("work/", "again/"),
    )
    .unwrap();
    let again = run_in(dir.path(), &["apply", "m.yaml"]);
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    let status = run_in(dir.path(), &["status", "m.yaml"]);
    assert_eq!(status.status.code(), Some(0), "{}", stderr(&status));
}

/// What a worker can plant in the git folders it may write (the object store, its worktree's
/// own git folder, its worktree's `.git` file) so that runner's next git call waits on it or
/// follows it elsewhere, each as a shell line run in the worker's folder. `$c` is the common git
/// folder, `$own` the worker's own.
pub(crate) const PLANTS: &[(&str, &str, &str)] = &[
    (
        "a FIFO where a pack index goes",
        r#"p="$c/objects/pack/pack-0000000000000000000000000000000000000000"; mkfifo "$p.idx"; : > "$p.pack""#,
        "pack-0000000000000000000000000000000000000000.idx` is a FIFO",
    ),
    (
        "a link to a FIFO where a pack index goes",
        r#"mkfifo "$TMPDIR/f"; p="$c/objects/pack/pack-1111111111111111111111111111111111111111"; ln -s "$TMPDIR/f" "$p.idx"; : > "$p.pack""#,
        "pack-1111111111111111111111111111111111111111.idx` is a link made while the item ran",
    ),
    (
        "a FIFO in place of a loose object",
        r#"o=$(git rev-parse HEAD); f="$c/objects/$(echo $o | cut -c1-2)/$(echo $o | cut -c3-)"; rm -f "$f"; mkfifo "$f""#,
        "` is a FIFO, not a regular file",
    ),
    (
        "a FIFO in place of its worktree's HEAD",
        r#"rm "$own/HEAD"; mkfifo "$own/HEAD""#,
        "/HEAD` is a FIFO",
    ),
    (
        "its `.git` file led to a git folder of its own",
        r#"cp -r "$own" evil-git && echo "gitdir: $PWD/evil-git" > .git"#,
        "/.git` file was changed (it led git to `",
    ),
];

/// A worker plants, in the git folders it may write, what runner's next git call would wait on
/// (a FIFO where git looks for a pack index or an object, a link to one) or follow (its `.git`
/// file turned to a git folder it made): its item is held and the repository quarantined,
/// naming the file, at once — not after git's deadline, nor never (a read in process has none).
/// The attack itself is real: git, asked about the repository after the run, waits on the file.
/// Unconfined here, as on a machine without Landlock (`confinement::` has the kernel keep the
/// plants out of a worktree's git folders).
#[test]
fn what_a_worker_plants_in_gits_folders_is_named_not_waited_on() {
    for (what, plant, named) in PLANTS {
        for in_place in [false, true] {
            if in_place && (plant.contains("$own") || plant.contains(".git\"")) {
                continue;
            }
            let dir = tempfile::tempdir().unwrap();
            let r = repo(&dir.path().join("r"));
            let worker = format!(
                "c=$(cd \"$(git rev-parse --git-common-dir)\" && pwd); own=$(cd \"$(git rev-parse --git-dir)\" && pwd); echo work > work.txt; {plant}"
            );
            two_items(dir.path(), "planted", &worker, in_place, false);
            let base = git(&r, &["rev-parse", "main"]);
            let (ended, out) = apply_within(dir.path(), "10m", 60);
            let err = stderr(&out);
            assert!(
                ended,
                "{what} (in place: {in_place}): runner waited on it\n{err}"
            );
            assert_eq!(out.status.code(), Some(1), "{what}: {err}");
            assert!(err.contains(named), "{what} (in place: {in_place}): {err}");
            assert!(err.contains("quarantined"), "{what}: {err}");
            assert!(!err.contains("timed out"), "{what}: {err}");
            // The later item is told why the repository is quarantined: not processes.
            assert!(
                err.contains(
                    "an earlier item in this repository changed or left in its git folders"
                ),
                "{what}: {err}"
            );
            // Nothing of the item was committed (its branch, if made, is where it began), and
            // the second item did not run. Read without git: git would wait on the plant.
            if let Ok(tip) = std::fs::read_to_string(r.join(".git/refs/heads/work/a")) {
                assert_eq!(
                    tip.trim(),
                    base.trim(),
                    "{what}: the item's work was committed"
                );
            }
            let report = common::latest_report(&dir.path().join("runner-reports"));
            assert_eq!(report["counts"]["held"], 2, "{what}: {report}");
            // The attack is real: git waits on what was planted (a FIFO git reads for any
            // object, or the worktree's HEAD).
            if plant.contains("mkfifo") && !plant.contains("ln -s") && !plant.contains("$own/HEAD")
            {
                let waited = std::process::Command::new("timeout")
                    .args(["3", "git", "-C"])
                    .arg(&r)
                    .args(["cat-file", "-t", "HEAD"])
                    .output()
                    .unwrap();
                assert_eq!(waited.status.code(), Some(124), "{what}: git did not wait");
            }
        }
    }
}

/// `m.yaml` in `dir`: two items of repository `r` run by the shell command `worker`, the first in
/// the repository's own checkout or on its work branch `work/a`, the second in place; items
/// confined as by default or unconfined.
fn two_items(dir: &Path, name: &str, worker: &str, in_place: bool, confined: bool) {
    let mut first = serde_json::json!({"repo": "r", "id": "a"});
    if !in_place {
        first["branch"] = "work/a".into();
    }
    let mut manifest = serde_json::json!({
        "version": 1, "name": name, "repositories": [{"path": "r"}],
        "worker": {"run": ["sh", "-c", worker]},
        "items": [first, {"repo": "r", "id": "b"}],
    });
    if !confined {
        manifest["sandbox"] = serde_json::json!({"mode": "off"});
    }
    std::fs::write(dir.join("m.yaml"), manifest.to_string()).unwrap();
}

/// A worker that leaves its checkout's index as a version 4 index whose every path keeps the
/// whole of the one before and adds a byte (git's own writer makes it, from 4,000 entries named
/// `a`, `aa`, `aaa`, …) hands every later reader a file that expands quadratically: 260 KB here
/// lists 8 MB of paths, a 50 MB one some 300 GB, all held in memory by each git command. The
/// item is held and the repository quarantined, the index named, before any git of runner's
/// reads it — in place and in a worktree, whatever the kernel's rules (the worker may always
/// write its index). The attack is real: git itself lists thirty times the file's size.
#[test]
fn an_index_made_to_expand_without_bound_is_named_not_handed_to_git() {
    for in_place in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let keep = tempfile::tempdir().unwrap();
        let r = repo(&dir.path().join("r"));
        let planted = keep.path().join("planted-index");
        // The paths `a`, `aa`, … as `git update-index --index-info` reads them.
        let paths = keep.path().join("paths.awk");
        std::fs::write(
            &paths,
            "BEGIN { p = \"\"; for (i = 1; i <= 4000; i++) { p = p \"a\"; printf \"100644 %s\\t%s\\n\", b, p } }\n",
        )
        .unwrap();
        let worker = format!(
            "b=$(git hash-object -w --stdin </dev/null) && awk -v b=$b -f {} \
             | git update-index --index-info && git update-index --index-version 4 && \
             cp \"$(git rev-parse --git-path index)\" {}",
            paths.display(),
            planted.display()
        );
        two_items(dir.path(), "expanding", &worker, in_place, true);
        let out = runner()
            .current_dir(dir.path())
            .env("RUNNER_SANDBOX_WRITABLE", keep.path())
            .args(["apply", "m.yaml", "--no-progress"])
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "in place: {in_place}: {err}");
        assert!(
            err.contains("the item left an index git would exhaust memory on")
                && err.contains("quarantined"),
            "in place: {in_place}: {err}"
        );
        let report = common::latest_report(&dir.path().join("runner-reports"));
        assert_eq!(
            report["counts"]["held"], 2,
            "in place: {in_place}: {report}"
        );
        // What git makes of the file: every path, expanded.
        let size = std::fs::metadata(&planted).unwrap().len();
        let listed = std::process::Command::new("git")
            .arg("-C")
            .arg(&r)
            .args(["ls-files", "-z"])
            .env("GIT_INDEX_FILE", &planted)
            .output()
            .unwrap();
        assert!(listed.status.success(), "{}", stderr(&listed));
        assert!(
            listed.stdout.len() as u64 > 30 * size,
            "git listed {} bytes of paths from {size}",
            listed.stdout.len()
        );
    }
}

/// Run one item in a fresh repository `r` whose worker runs `before`, then the Python program
/// `forge` (which rewrites the index and prints "forged"), then checks that git sees no change;
/// a gate greps `file` for `line`. Asserts that the forgery worked (git believed it) and that
/// the run completed; returns the repository.
fn forged_index_run(
    dir: &Path,
    forge: &str,
    before: &str,
    file: &str,
    line: &str,
    branch: Option<&str>,
) -> std::path::PathBuf {
    let r = repo(&dir.join("r"));
    std::fs::write(dir.join("forge.py"), forge).unwrap();
    let worker = format!(
        "{before} && sleep 1.1 && python3 {} && git diff --quiet && echo 'git sees no change'",
        dir.join("forge.py").display()
    );
    let mut item = serde_json::json!({"repo": "r", "id": "a"});
    if let Some(b) = branch {
        item["branch"] = b.into();
    }
    let manifest = serde_json::json!({
        "version": 1, "name": "forged", "repositories": [{"path": "r"}],
        "worker": {"run": ["sh", "-c", worker]},
        "gates": [{"name": "seen", "run": ["grep", "-qx", line, file]}],
        "items": [item],
    });
    std::fs::write(dir.join("m.yaml"), manifest.to_string()).unwrap();
    let out = run_in(dir, &["apply", "m.yaml"]);
    let log = std::fs::read_to_string(dir.join("runner-reports/latest/logs/r/a/1-worker.log"))
        .unwrap_or_default();
    // The forgery itself worked: git, reading that index, saw nothing changed.
    assert!(
        log.contains("forged") && log.contains("git sees no change"),
        "{log}"
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    r
}

/// A worker that rewrites its worktree's index so that a file's entry names other content (its
/// stat data left as the file's, the index's checksum made again) does not get that content
/// committed: the gates judged the file on disk, and the item's commit holds that file. Runner
/// once started its snapshot from the worker's index, trusted the entry's stat data, and
/// committed content no gate saw.
#[test]
fn content_no_gate_saw_is_never_committed_through_a_forged_index() {
    let dir = tempfile::tempdir().unwrap();
    let forge = r#"import hashlib, subprocess
evil = subprocess.run(["git", "hash-object", "-w", "--stdin"], input=b"evil\n",
                      capture_output=True, check=True).stdout.strip().decode()
good = subprocess.run(["git", "rev-parse", ":f.txt"], capture_output=True,
                      check=True).stdout.strip().decode()
index = subprocess.run(["git", "rev-parse", "--git-path", "index"], capture_output=True,
                       check=True).stdout.strip().decode()
data = open(index, "rb").read()[:-20]
data = data.replace(bytes.fromhex(good), bytes.fromhex(evil))
open(index, "wb").write(data + hashlib.sha1(data).digest())
print("forged", good, "->", evil)
"#;
    let r = forged_index_run(
        dir.path(),
        forge,
        "printf 'good\\n' > f.txt && sleep 1.1 && git add f.txt",
        "f.txt",
        "good",
        Some("work/a"),
    );
    assert_eq!(git(&r, &["show", "work/a:f.txt"]).trim(), "good");
}

/// A worker that changes a tracked file and rewrites that file's index entry to the file's new
/// stat data, keeping the old content's name and the index's cached tree, makes the index
/// "prove" the checkout clean. Runner once believed it: the item said it changed nothing while
/// its gates had judged the changed file. A proof is read only from an index the item left
/// untouched; this one was touched, so the tree is snapshotted and the change is the item's.
/// (In the repository's own checkout: a linked worktree's proof is git's.)
#[test]
fn an_index_rewritten_to_prove_a_changed_checkout_clean_is_not_believed() {
    let dir = tempfile::tempdir().unwrap();
    let forge = r#"import hashlib, os, struct, subprocess
index = subprocess.run(["git", "rev-parse", "--git-path", "index"], capture_output=True,
                       check=True).stdout.strip().decode()
data = bytearray(open(index, "rb").read()[:-20])
at = data.index(b"README.md\0") - 62
st = os.stat("README.md")
struct.pack_into(">IIIIIIIIII", data, at, int(st.st_ctime), st.st_ctime_ns % 10**9,
                 int(st.st_mtime), st.st_mtime_ns % 10**9, st.st_dev & 0xffffffff,
                 st.st_ino & 0xffffffff, 0o100644, st.st_uid, st.st_gid, st.st_size)
open(index, "wb").write(bytes(data) + hashlib.sha1(bytes(data)).digest())
print("forged")
"#;
    let r = forged_index_run(
        dir.path(),
        forge,
        "git update-index --refresh -q; printf 'changed\\n' > README.md",
        "README.md",
        "changed",
        None,
    );
    assert_eq!(git(&r, &["show", "main:README.md"]).trim(), "changed");
}
