//! Reads that fail closed: what runner cannot read of a process (another user's under
//! `hidepid`, one whose environment is closed to it) is unknown — never dead, never gone, never
//! someone else's. Each test runs runner as another user, as an operator without root would.

use crate::common::*;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// Whether processes may be run as another user, in a mount namespace of their own.
fn can_switch_users() -> bool {
    let ok = nix::unistd::getuid().is_root()
        && Command::new("unshare")
            .args(["-m", "sh", "-c", "mount -t proc -o hidepid=2 proc /proc"])
            .output()
            .is_ok_and(|o| o.status.success());
    if !ok {
        not_run(
            "running as another user with a hidepid=2 /proc (`unshare -m`, `setpriv`) needs root",
        );
    }
    ok
}

/// `sh -c script` as user `nobody`, in `dir`, with `/proc` mounted `hidepid=2` when `hide`.
fn as_nobody(dir: &Path, hide: bool, script: &str) -> std::process::Output {
    let mount = if hide {
        "mount -t proc -o hidepid=2 proc /proc && "
    } else {
        ""
    };
    Command::new("unshare")
        .args(["-m", "sh", "-c"])
        .arg(format!(
            "{mount}cd {} && exec setpriv --reuid=65534 --regid=65534 --clear-groups sh -c '{script}'",
            dir.display()
        ))
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

/// Under `hidepid`, another user's processes are not in `/proc`: `status`, run by a user who
/// cannot see a live run's process, says the run is live — not that it died — and offers nothing
/// of it as a dead run's leftovers.
#[test]
fn a_run_whose_process_cannot_be_seen_is_not_taken_for_dead() {
    if !can_switch_users() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("r0"));
    let started = dir.path().join("started");
    std::fs::write(
        dir.path().join("m.yaml"),
        format!(
            "version: 1\nname: hidden\nrepositories:\n  - path: r0\nworker:\n  run: touch {}; sleep 30\nitems:\n  - {{repo: r0, id: a}}\n",
            started.display()
        ),
    )
    .unwrap();
    let mut child = runner()
        .current_dir(dir.path())
        .args(["apply", "m.yaml", "--no-progress"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_for(30, || started.exists()), "the item started");
    // The other user may read the ledger (and make its lock files) and the manifest.
    let _ = Command::new("chmod")
        .args(["-R", "a+rwX"])
        .arg(dir.path())
        .status();
    let out = as_nobody(
        dir.path(),
        true,
        &format!("{} status m.yaml --json", env!("CARGO_BIN_EXE_runner")),
    );
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = child.wait();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "{err}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["runs"][0]["status"], "live", "{v:#}\n{err}");
    assert!(
        err.contains("is not presumed dead"),
        "the operator is told: {err}"
    );
}

/// A process of runner's user whose environment runner cannot read (it made itself
/// non-dumpable, as ssh-agent does) may be one runner started in the repository: `unlock`
/// refuses, as it does for one it can see there.
#[test]
fn a_process_whose_environment_cannot_be_read_is_not_taken_for_gone() {
    if !can_switch_users() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path().join("r0");
    repo(&r);
    // The operator's own: git works only in a repository of its user's.
    let _ = Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(dir.path())
        .status();
    let marker = format!("closed-env-{}", std::process::id());
    // As `nobody`: a process carrying the repository's path that closes its environment (the
    // system's Python: a user's own may live where `nobody` cannot read).
    let python = Path::new("/usr/bin/python3");
    if !python.exists() {
        not_run("no /usr/bin/python3 to close a process's environment with");
        return;
    }
    let mut closed = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(python)
        .arg("-c")
        .arg(format!(
            "import ctypes, time\nctypes.CDLL(None).prctl(4, 0, 0, 0, 0)\nopen('{}', 'w').close()\ntime.sleep(60)  # {marker}",
            dir.path().join("closed").display()
        ))
        .env("RUNNER_REPO_PATH", &r)
        .spawn()
        .unwrap();
    assert!(wait_for(10, || dir.path().join("closed").exists()));
    let unreadable = as_nobody(
        dir.path(),
        false,
        &format!("cat /proc/{}/environ", closed.id()),
    );
    let out = as_nobody(
        dir.path(),
        false,
        &format!("{} unlock {}", env!("CARGO_BIN_EXE_runner"), r.display()),
    );
    let _ = closed.kill();
    let _ = closed.wait();
    assert!(
        !unreadable.status.success(),
        "the environment is closed to its own user: {}",
        String::from_utf8_lossy(&unreadable.stdout)
    );
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("{}", closed.id())) && err.contains("refusing"),
        "{err}"
    );
}
