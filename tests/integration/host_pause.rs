//! The host-wide pause: `runner pause --host` stops admission in every drain on the host, of
//! every manifest; each ends `paused` once its running items finish. `pause --wait` returns for
//! its own pause only; who paused and why is shown by `status`; an unreadable pause file is a
//! pause.

use crate::common;

use common::{outcomes, repo, runner, stderr, wait_for};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Manifest `name` in `root/name`: one repository, `items` items, one at a time, each worker
/// marking its start in `root/started-<name>-<item>` and sleeping `secs`.
fn manifest(root: &Path, name: &str, items: usize, secs: f32) -> PathBuf {
    let dir = root.join(name);
    repo(&dir.join("repo"));
    let mut m = format!(
        "version: 1\nname: {name}\ncapacity: {{workers: 1}}\nrepositories: [{{path: repo}}]\nworker:\n  run: 'touch {}/started-{name}-$RUNNER_ITEM; sleep {secs}'\nitems:\n",
        root.display()
    );
    for i in 1..=items {
        m.push_str(&format!("  - {{repo: repo, id: i{i}}}\n"));
    }
    std::fs::write(dir.join("m.yaml"), m).unwrap();
    dir
}

/// `runner` sharing the host folder and the host's units of `root`.
fn on_host(root: &Path) -> Command {
    let mut c = runner();
    c.env("RUNNER_HOST_DIR", root.join("host"))
        .env("RUNNER_RESOURCES_DIR", root.join("units"));
    c
}

fn drain(root: &Path, dir: &Path) -> Child {
    on_host(root)
        .current_dir(dir)
        .args(["apply", "m.yaml", "--no-progress", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn a_host_pause_stops_every_manifests_drain_and_wait_returns_once_they_have_ended() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let (a, b) = (
        manifest(root, "alpha", 3, 1.5),
        manifest(root, "beta", 3, 1.5),
    );
    let (da, db) = (drain(root, &a), drain(root, &b));
    assert!(wait_for(20, || root.join("started-alpha-i1").exists()
        && root.join("started-beta-i1").exists()));
    let paused = on_host(root)
        .args(["pause", "--host", "--reason", "kernel upgrade", "--wait"])
        .output()
        .unwrap();
    let said = stderr(&paused);
    assert_eq!(paused.status.code(), Some(0), "{said}");
    assert!(said.contains("nothing runs any more"), "{said}");
    // `--wait` returned only once both drains' running items had ended.
    for child in [da, db] {
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains("the host is paused") && err.contains("runner resume --host"),
            "{err}"
        );
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["ending"], "paused", "{report}");
        let got = outcomes(&report);
        assert_eq!(
            (got[0].0.as_str(), got[0].1.as_str()),
            ("i1", "completed"),
            "{got:?}"
        );
        assert!(
            got[1..]
                .iter()
                .all(|(_, o, r)| o == "held" && r == "paused"),
            "{got:?}"
        );
        assert!(
            report["items"][1]["cause"]
                .as_str()
                .unwrap_or_default()
                .contains("kernel upgrade")
                || report["cause"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("kernel upgrade"),
            "{report}"
        );
    }
    assert!(!root.join("started-alpha-i2").exists());
    assert!(!root.join("started-beta-i2").exists());
    // Who paused, when and why, for either manifest, and a plan that holds its items.
    let status = on_host(root)
        .current_dir(&a)
        .args(["status", "m.yaml", "--json"])
        .output()
        .unwrap();
    let st: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(st["host_pause"]["reason"], "kernel upgrade", "{st}");
    assert!(
        st["host_pause"]["by"]
            .as_str()
            .unwrap()
            .contains("runner pause --host"),
        "{st}"
    );
    let text = on_host(root)
        .current_dir(&b)
        .args(["status", "m.yaml"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("HOST PAUSED: host paused by"),
        "{}",
        String::from_utf8_lossy(&text.stdout)
    );
    let plan = on_host(root)
        .current_dir(&b)
        .args(["plan", "m.yaml", "--json"])
        .output()
        .unwrap();
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    assert_eq!(plan["items"][1]["reason"], "paused", "{plan}");
    // Lifted: both drains take the rest.
    let resumed = on_host(root).args(["resume", "--host"]).output().unwrap();
    assert!(stderr(&resumed).contains("the host is resumed"));
    for dir in [&a, &b] {
        let out = drain(root, dir).wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(root.join("started-alpha-i3").exists() && root.join("started-beta-i3").exists());
}

/// Manifest `alpha` of one 4-second item, drained, its item started: its folder and drain.
fn one_item_running(root: &Path) -> (PathBuf, Child) {
    let a = manifest(root, "alpha", 1, 4.0);
    let da = drain(root, &a);
    assert!(wait_for(20, || root.join("started-alpha-i1").exists()));
    (a, da)
}

#[test]
fn pause_wait_returns_for_its_own_pause_only() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let (_, da) = one_item_running(root);
    let wait = |reason: &str| {
        on_host(root)
            .args(["pause", "--host", "--wait", "--reason", reason])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    // A newer pause by someone else replaces this one: said, not mistaken for its own.
    let first = wait("first");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let second = wait("second");
    let out = first.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("was paused again") && err.contains("second"),
        "{err}"
    );
    // A resume by someone else: said too.
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        on_host(root)
            .args(["resume", "--host"])
            .status()
            .unwrap()
            .success()
    );
    let out = second.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("was resumed"), "{err}");
    let _ = da.wait_with_output();
}

#[test]
fn an_unreadable_host_pause_is_a_pause() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let a = manifest(root, "alpha", 1, 0.0);
    std::fs::create_dir_all(root.join("host")).unwrap();
    std::fs::write(root.join("host/pause.json"), "{ not json").unwrap();
    let out = on_host(root)
        .current_dir(&a)
        .args(["apply", "m.yaml", "--no-progress"])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("unreadable") && err.contains("pause.json"),
        "{err}"
    );
    assert!(!root.join("started-alpha-i1").exists());
    // `resume --host` removes it.
    assert!(
        on_host(root)
            .args(["resume", "--host"])
            .status()
            .unwrap()
            .success()
    );
    let out = on_host(root)
        .current_dir(&a)
        .args(["apply", "m.yaml", "--no-progress"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

/// The manifest's `pause --wait` likewise: a newer pause of the manifest by someone else is
/// said, not taken for its own.
#[test]
fn a_manifests_pause_wait_says_when_someone_pauses_it_again() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let (a, da) = one_item_running(root);
    let first = on_host(root)
        .current_dir(&a)
        .args(["pause", "m.yaml", "--wait", "--reason", "first"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let again = on_host(root)
        .current_dir(&a)
        .args(["pause", "m.yaml", "--reason", "second"])
        .output()
        .unwrap();
    assert!(again.status.success(), "{}", stderr(&again));
    let out = first.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("was paused again") && err.contains("second"),
        "{err}"
    );
    let _ = da.wait_with_output();
}
