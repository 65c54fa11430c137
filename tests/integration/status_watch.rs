//! `runner status --watch`: a live view of a drain from another process — in a real terminal
//! (tmux) redrawn in place, and piped as plain pictures one after the other — showing the items
//! running with their attempt, phase and elapsed time, the run's counts and, once items have
//! ended, an ETA.

use crate::common;

use common::{have, not_run, repo, runner, wait_for};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};

/// Two repositories, two items each; a worker that marks its start and runs `then`, then a gate.
fn manifest(root: &Path, then: &str) {
    for r in ["api", "web"] {
        repo(&root.join(r));
    }
    std::fs::write(
        root.join("m.yaml"),
        format!(
            "version: 1\nname: watched\ncapacity: {{workers: 2}}\nrepositories: [{{path: api}}, {{path: web}}]\nworker: {{run: 'touch {}/started-$RUNNER_ITEM; {then}'}}\ngates: [{{name: tests, run: 'sleep 0.2'}}]\nitems: [{{repo: api, id: one}}, {{repo: api, id: two}}, {{repo: web, id: three}}, {{repo: web, id: four}}]\n",
            root.display()
        ),
    )
    .unwrap();
}

fn drain(root: &Path) -> Child {
    runner()
        .current_dir(root)
        .args(["apply", "m.yaml", "--no-progress"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn piped_the_watch_prints_plain_pictures_of_what_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    manifest(root, "sleep 2");
    let mut d = drain(root);
    assert!(wait_for(20, || root.join("started-one").exists()));
    let mut watch = runner()
        .current_dir(root)
        .args(["status", "m.yaml", "--watch", "--interval", "300ms"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut seen = String::new();
    let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    // Until a picture shows an item running in its worker, and one shows the run's ETA.
    while std::time::Instant::now() < deadline {
        let Some(Ok(line)) = lines.next() else { break };
        seen.push_str(&line);
        seen.push('\n');
        let running = seen
            .lines()
            .any(|l| l.trim_start().starts_with("api/one") && l.contains("worker"));
        if running && seen.contains("ETA") {
            break;
        }
    }
    let _ = watch.kill();
    let _ = watch.wait();
    let _ = d.wait();
    assert!(seen.contains("runner status — `watched` —"), "{seen}");
    assert!(
        seen.lines().any(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.first() == Some(&"api/one") && w.get(1) == Some(&"1") && w.contains(&"worker")
        }),
        "an item in its worker, attempt 1: {seen}"
    );
    assert!(
        seen.contains("2 workers:") && seen.contains("running"),
        "{seen}"
    );
    assert!(seen.contains("; ETA "), "once items ended, an ETA: {seen}");
    assert!(
        !seen.contains('\x1b'),
        "no terminal codes when piped: {seen:?}"
    );
}

#[test]
fn in_a_terminal_the_watch_redraws_in_place() {
    if !have("tmux", std::process::Command::new("tmux").arg("-V")) {
        return not_run("tmux is not installed");
    }
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    // The first worker holds its slot until the test has seen the screen twice (at most 60 s):
    // on a loaded machine tmux and the watch may take longer to start than a fixed sleep.
    let release = root.join("release");
    manifest(
        root,
        &format!(
            "i=0; while [ ! -e {} ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done",
            release.display()
        ),
    );
    let mut d = drain(root);
    assert!(wait_for(20, || root.join("started-one").exists()));
    let session = format!("runner-watch-{}", std::process::id());
    let socket = root.join("tmux.sock");
    let tmux = |args: &[&str]| {
        std::process::Command::new("tmux")
            .arg("-S")
            .arg(&socket)
            .args(args)
            .output()
            .unwrap()
    };
    let command = format!(
        "cd {} && env NO_COLOR=1 RUNNER_HOST_DIR={} RUNNER_RESOURCES_DIR={} {} status m.yaml --watch --interval 300ms",
        root.display(),
        root.join("host").display(),
        root.join("units").display(),
        env!("CARGO_BIN_EXE_runner")
    );
    let started = tmux(&[
        "new-session",
        "-d",
        "-s",
        &session,
        "-x",
        "150",
        "-y",
        "40",
        &command,
    ]);
    assert!(
        started.status.success(),
        "{}",
        String::from_utf8_lossy(&started.stderr)
    );
    let mut screen = String::new();
    let shown = wait_for(20, || {
        screen = String::from_utf8_lossy(&tmux(&["capture-pane", "-p", "-t", &session]).stdout)
            .into_owned();
        screen
            .lines()
            .any(|l| l.trim_start().starts_with("api/one") && l.contains("worker"))
    });
    // Several refreshes later, the screen still holds one picture: redrawn, not scrolled.
    std::thread::sleep(std::time::Duration::from_millis(900));
    let later =
        String::from_utf8_lossy(&tmux(&["capture-pane", "-p", "-t", &session]).stdout).into_owned();
    tmux(&["kill-server"]);
    std::fs::write(&release, "").unwrap();
    let _ = d.wait();
    assert!(shown, "{screen}");
    assert_eq!(
        later.matches("runner status — `watched` —").count(),
        1,
        "{later}"
    );
}
