//! Containment of each item's processes, in both modes: a cgroup per item (where the machine
//! lets runner make one) and process groups with the token census. Processes are found in
//! `/proc`; cgroups in the cgroup file system.

use crate::common;

use common::{processes_matching, repo, run_in, runner, stderr, wait_for};
use std::path::Path;
use std::process::Output;

const CGROUP: (&str, &str) = ("RUNNER_CONTAINMENT", "cgroup");
const GROUPS: (&str, &str) = ("RUNNER_CONTAINMENT", "process-group");

/// Whether runner can contain items in cgroups here. Where it cannot, the cgroup tests say they
/// did not run, except in CI (this kind of machine can: they must run there), where they fail.
fn cgroups_usable() -> bool {
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("r"));
    write_manifest(dir.path(), "true", "");
    let out = apply_with(dir.path(), &[CGROUP]);
    if out.status.code() == Some(0) {
        return true;
    }
    common::not_run(&format!(
        "cgroup containment is not usable here: {}",
        stderr(&out).trim()
    ));
    false
}

fn write_manifest(root: &Path, worker: &str, extra: &str) {
    std::fs::write(
        root.join("m.yaml"),
        format!(
            "version: 1\nname: contain\nrepositories: [{{path: r}}]\nworker:\n  run: {}\n{extra}items: [{{repo: r, id: a}}]\n",
            serde_json::to_string(worker).unwrap()
        ),
    )
    .unwrap();
}

fn apply_with(root: &Path, env: &[(&str, &str)]) -> Output {
    runner()
        .current_dir(root)
        .args(["apply", "m.yaml", "--no-progress"])
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn worker_log(root: &Path) -> String {
    item_log(root, "r", "a")
}

/// Everything logged for item `id` of repository `repo` in the latest run.
fn item_log(root: &Path, repo: &str, id: &str) -> String {
    let reports = root.join("runner-reports");
    let latest = std::fs::read_dir(&reports)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .max()
        .unwrap();
    let logs = latest.join("logs").join(repo).join(id);
    let mut text = String::new();
    // A silent item has no log folder: nothing was logged.
    let Ok(entries) = std::fs::read_dir(logs) else {
        return text;
    };
    for e in entries.flatten() {
        text.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
    }
    text
}

/// Item `a`'s worker leaves a process that left its session and cleared its environment (and
/// waits a moment so that the escape is complete before it ends); item `b`, next in the same
/// repository, looks for it.
fn escape_with_cleared_environment(root: &Path, env: (&str, &str), marker: &str) {
    repo(&root.join("r"));
    std::fs::write(
        root.join("m.yaml"),
        format!(
            "version: 1\nname: contain\ncapacity: {{workers: 1}}\nrepositories: [{{path: r}}]\nworker:\n  run: 'if [ {{item}} = a ]; then setsid env -i sleep {marker} & sleep 0.3; elif ps -eo args | grep -q \"^sleep {marker}\"; then echo STILL-ALIVE; fi'\nitems: [{{repo: r, id: a}}, {{repo: r, id: b}}]\n"
        ),
    )
    .unwrap();
    let out = apply_with(root, &[env]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        !item_log(root, "r", "b").contains("STILL-ALIVE"),
        "the escapee outlived its item in {} mode",
        env.1
    );
    assert!(processes_matching(&format!("sleep {marker}")).is_empty());
}

#[test]
fn an_escapee_with_a_cleared_environment_ends_with_its_item_in_process_group_mode() {
    let dir = tempfile::tempdir().unwrap();
    escape_with_cleared_environment(dir.path(), GROUPS, "7301");
    let report = common::latest_report(&dir.path().join("runner-reports"));
    assert_eq!(report["containment"]["mode"], "process-group", "{report}");
}

#[test]
fn an_escapee_with_a_cleared_environment_ends_with_its_item_in_cgroup_mode() {
    if !cgroups_usable() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    escape_with_cleared_environment(dir.path(), CGROUP, "7302");
    let report = common::latest_report(&dir.path().join("runner-reports"));
    assert_eq!(report["containment"]["mode"], "cgroup", "{report}");
    // The run's cgroup is gone with it.
    let cgroup = report["containment"]["detail"].as_str().unwrap();
    assert!(!Path::new(cgroup).exists(), "{cgroup} was left behind");
}

#[test]
fn escapees_no_item_can_claim_end_with_the_run() {
    // Two items run at once, and each leaves a process with a cleared environment in the root
    // folder: neither can be told apart by environment or directory. They go when the run ends.
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("r"));
    repo(&dir.path().join("s"));
    std::fs::write(
        dir.path().join("m.yaml"),
        "version: 1\nname: two\ncapacity: {workers: 2}\nrepositories: [{path: r}, {path: s}]\nworker:\n  run: 'cd / && setsid env -i sleep 7303 & sleep 1'\nitems: [{repo: r, id: a}, {repo: s, id: b}]\n",
    )
    .unwrap();
    let out = apply_with(dir.path(), &[GROUPS]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(processes_matching("sleep 7303").is_empty(), "left alive");
}

#[test]
fn each_item_runs_in_a_cgroup_of_its_own_and_status_says_so() {
    if !cgroups_usable() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("r"));
    write_manifest(dir.path(), "cat /proc/self/cgroup; sleep 7304", "");
    let child = runner()
        .current_dir(dir.path())
        .args(["apply", "m.yaml", "--no-progress"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_for(20, || !processes_matching("sleep 7304").is_empty()));
    let status = common::stdout(&run_in(dir.path(), &["status", "m.yaml"]));
    assert!(
        status.contains("processes contained by cgroup ("),
        "{status}"
    );
    // The worker's shell and its `sleep` both name `sleep 7304`, and the shell ends when the
    // sleep does: a pid listed may be gone by its turn.
    let signalled = processes_matching("sleep 7304")
        .into_iter()
        .filter(|&pid| {
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            )
            .is_ok()
        })
        .count();
    assert!(signalled > 0, "no worker was signalled");
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let log = worker_log(dir.path());
    let unified = log
        .lines()
        .find(|l| l.starts_with("0::"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(
        unified.contains("/runner-") && unified.contains("/repo-r/g"),
        "{unified}"
    );
}

/// An item's worker leaves a process that ignores SIGTERM: it is killed with its item, and the
/// five items of the repository after it all complete, each in a fresh cgroup (a killed one
/// kills what the kernel later creates in it).
#[test]
fn a_leftover_that_ignores_sigterm_is_ended_with_its_item_and_the_next_items_complete() {
    if !cgroups_usable() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("r"));
    std::fs::write(
        dir.path().join("m.yaml"),
        "version: 1\nname: stubborn\ncapacity: {workers: 1}\nrepositories: [{path: r}]\nworker:\n  run: 'if [ \"$RUNNER_ITEM\" = first ]; then bash -c \"trap \\\"\\\" TERM; exec sleep 3011\" & sleep 0.3; fi; echo ok'\n  grace: 1s\ngates: [{name: g, run: \"true\"}]\nitems: [{repo: r, id: first}, {repo: r, id: i2}, {repo: r, id: i3}, {repo: r, id: i4}, {repo: r, id: i5}, {repo: r, id: i6}]\n",
    )
    .unwrap();
    let out = apply_with(dir.path(), &[CGROUP]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("6 completed"), "{err}");
    assert!(
        processes_matching("sleep 3011").is_empty(),
        "the leftover lives on"
    );
}

#[test]
fn limits_are_enforced_per_item() {
    if !cgroups_usable() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("r"));
    // Allocating a 256 MiB buffer under a 64 MiB limit is fatal; 40 processes under a limit of
    // 16 cannot all start.
    write_manifest(
        dir.path(),
        "dd if=/dev/zero of=/dev/null bs=256M count=1 2>/dev/null; echo dd=$?; for i in $(seq 40); do sleep 2 & done; wait",
        "  limits: {memory: 64M, pids: 16}\n",
    );
    let out = apply_with(dir.path(), &[]);
    let log = worker_log(dir.path());
    assert!(log.contains("dd=137"), "not killed for memory: {log}");
    assert!(
        log.to_lowercase().contains("fork"),
        "forks were not limited: {log}\n{}",
        stderr(&out)
    );
}

#[test]
fn limits_are_refused_where_they_cannot_be_enforced() {
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("r"));
    write_manifest(dir.path(), "true", "  limits: {memory: 1G}\n");
    let out = apply_with(dir.path(), &[GROUPS]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("`worker.limits` needs a cgroup per item"),
        "{}",
        stderr(&out)
    );
    assert!(
        !dir.path().join("runner-reports").exists(),
        "nothing ran, nothing was written"
    );
    // A size that is not one is a manifest error with its place.
    write_manifest(dir.path(), "true", "  limits: {memory: 4X}\n");
    let out = run_in(dir.path(), &["validate", "m.yaml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("worker.limits.memory"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_cgroup_run_killed_mid_item_is_cleaned_up_by_the_next() {
    if !cgroups_usable() {
        return;
    }
    // A process with a cleared environment carries no token: only the dead run's cgroup, named
    // in the lease record, finds it.
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("r"));
    let again = dir.path().join("again");
    // Unconfined: a confined item's pid namespace ends the escapee with the killed runner
    // (`hostile.rs`); here the cgroup must.
    write_manifest(
        dir.path(),
        &format!(
            "test -e {} && exit 0; setsid env -i sleep 7305 & sleep 7306",
            again.display()
        ),
        "sandbox: {mode: off}\n",
    );
    common::kill_runner_while(dir.path(), &[CGROUP], &["sleep 7305", "sleep 7306"]);
    assert!(
        !processes_matching("sleep 7305").is_empty(),
        "the escapee outlives the killed runner until the next run"
    );
    std::fs::write(&again, "").unwrap();
    let out = apply_with(dir.path(), &[CGROUP]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(processes_matching("sleep 7305").is_empty(), "left alive");
    let report = common::latest_report(&dir.path().join("runner-reports"));
    let warnings = report["warnings"].to_string();
    assert!(warnings.contains("that dead run"), "{report:#}");
}

#[test]
fn a_killed_runs_empty_cgroup_is_removed_by_a_later_run() {
    if !cgroups_usable() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("r"));
    // An argv: the worker is `sleep` itself, runner's direct child, which dies with runner.
    std::fs::write(
        dir.path().join("m.yaml"),
        "version: 1\nname: contain\nrepositories: [{path: r}]\nworker:\n  run: [sleep, \"7307\"]\nitems: [{repo: r, id: a}]\n",
    )
    .unwrap();
    let child = runner()
        .current_dir(dir.path())
        .args(["apply", "m.yaml", "--no-progress"])
        .env(CGROUP.0, CGROUP.1)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    assert!(wait_for(20, || !processes_matching("sleep 7307").is_empty()));
    let worker = processes_matching("sleep 7307")[0];
    let cgroup = std::fs::read_to_string(format!("/proc/{worker}/cgroup")).unwrap();
    // The worker is in a leaf of its item's cgroup.
    let leaf = cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap()
        .to_string();
    let item = Path::new(&leaf)
        .parent()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let run = Path::new(&item).parent().unwrap().to_path_buf();
    assert!(
        run.to_string_lossy().ends_with(&format!(".{pid}")),
        "{run:?} names its owner"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let _ = child.wait_with_output();
    // The worker dies with runner; its cgroup, empty, stays behind.
    assert!(wait_for(10, || processes_matching("sleep 7307").is_empty()));
    let mount = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .find(|l| l.contains(" - cgroup2 "))
        .map(|l| l.split(' ').nth(4).unwrap().to_string())
        .unwrap();
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("0::").map(str::to_string))
        .unwrap();
    let on_disk = Path::new(&mount).join(run.strip_prefix("/").unwrap());
    assert!(
        on_disk.exists() || !own.is_empty(),
        "{on_disk:?} should be left by the killed run"
    );
    // Any later run under the same parent removes it.
    let other = tempfile::tempdir().unwrap();
    repo(&other.path().join("r"));
    write_manifest(other.path(), "true", "");
    let out = apply_with(other.path(), &[CGROUP]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!on_disk.exists(), "{on_disk:?} was left behind");
}

#[test]
fn in_cgroup_mode_an_escapee_ends_with_its_item_while_others_still_run() {
    if !cgroups_usable() {
        return;
    }
    // Two items at once: `a` leaves a process with a cleared environment and ends; `b`, in
    // another repository, is still working when it looks. Only a cgroup can tell whose the
    // escapee was (in process-group mode it goes only when the run ends).
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("r"));
    repo(&dir.path().join("s"));
    std::fs::write(
        dir.path().join("m.yaml"),
        "version: 1\nname: two\ncapacity: {workers: 2}\nrepositories: [{path: r}, {path: s}]\nworker:\n  run: 'if [ {item} = a ]; then cd / && setsid env -i sleep 7308 & sleep 0.3; else sleep 2; ps -eo args | grep -q \"^sleep 7308\" && echo STILL-ALIVE; fi; true'\nitems: [{repo: r, id: a}, {repo: s, id: b}]\nsandbox: {mode: off}\n",
    )
    .unwrap();
    // Unconfined: a confined item sees no other item's processes, and its escapee ends with
    // it in either mode (its pid namespace).
    for (mode, alive_while_b_runs) in [(CGROUP, false), (GROUPS, true)] {
        let _ = std::fs::remove_dir_all(dir.path().join(".runner"));
        let _ = std::fs::remove_dir_all(dir.path().join("runner-reports"));
        let out = apply_with(dir.path(), &[mode]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let log = item_log(dir.path(), "s", "b");
        assert_eq!(
            log.contains("STILL-ALIVE"),
            alive_while_b_runs,
            "{} mode: {log}",
            mode.1
        );
        assert!(
            processes_matching("sleep 7308").is_empty(),
            "{} mode",
            mode.1
        );
    }
}

#[test]
fn in_cgroup_mode_what_an_item_left_is_reaped_when_it_ends() {
    if !cgroups_usable() {
        return;
    }
    // `a` leaves a process behind; its cgroup ends it, and runner, to which it was re-parented,
    // must collect it then, not at the end of the run: `b`, still running in another
    // repository, finds no dead child of runner's waiting to be reaped.
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("r"));
    repo(&dir.path().join("s"));
    std::fs::write(
        dir.path().join("m.yaml"),
        "version: 1\nname: two\ncapacity: {workers: 2}\nrepositories: [{path: r}, {path: s}]\nworker:\n  run: 'if [ {item} = a ]; then setsid sleep 7309 & sleep 0.3; else sleep 2; for s in /proc/[0-9]*/stat; do set -- $(sed \"s/.*) //\" $s 2>/dev/null); [ \"$1\" = Z ] && [ \"$2\" = \"$PPID\" ] && echo UNREAPED; done; fi; true'\nitems: [{repo: r, id: a}, {repo: s, id: b}]\n",
    )
    .unwrap();
    let out = apply_with(dir.path(), &[CGROUP]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let log = item_log(dir.path(), "s", "b");
    assert!(!log.contains("UNREAPED"), "{log}");
    assert!(processes_matching("sleep 7309").is_empty());
}

/// Each repository's cgroup stays for the run, but no descriptor of it does: a cgroup-mode drain
/// over more repositories than runner may have files open runs every item. (With a descriptor
/// per repository held for the run, items past the limit failed "Too many open files" and
/// their repositories were quarantined.)
#[test]
fn a_cgroup_drain_over_more_repositories_than_open_files_allowed_runs_every_item() {
    if !cgroups_usable() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let repos = 50;
    let mut items = String::new();
    for i in 0..repos {
        repo(&root.join(format!("repos/r{i:02}")));
        items.push_str(&format!("  - {{repo: r{i:02}, id: a}}\n"));
    }
    std::fs::write(
        root.join("m.yaml"),
        format!(
            "version: 1\nname: many\ncapacity: {{workers: 2}}\nrepositories: [{{glob: \"repos/*\"}}]\nworker:\n  run: [\"true\"]\nitems:\n{items}"
        ),
    )
    .unwrap();
    // Fewer files than repositories, and room enough for everything else a drain holds open
    // (some twenty files at rest, and what an item starting while another ends
    // holds for a moment: pipes, a pidfd, their cgroups' files).
    let mut cmd = runner();
    cmd.current_dir(root)
        .env(CGROUP.0, CGROUP.1)
        .args(["apply", "m.yaml", "--no-progress"]);
    let out = with_open_files(&mut cmd, 48).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("{repos} completed")),
        "{}",
        stderr(&out)
    );
}

/// `cmd`, to run with at most `files` files open (as after `ulimit -n`).
fn with_open_files(cmd: &mut std::process::Command, files: u64) -> &mut std::process::Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: only setrlimit, between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: files,
                rlim_max: files,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// A repository's cgroup goes once nothing more of it runs in the drain, not when the run ends:
/// each costs the kernel memory (about 8 KiB here, far more with controllers), and a drain may
/// cover thousands of repositories.
#[test]
fn a_repositorys_cgroup_goes_once_its_last_item_has_ended() {
    if !cgroups_usable() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    repo(&root.join("a"));
    repo(&root.join("b"));
    // Item b/1, which runs after a/1, lists the run's cgroup (its process is in a leaf of its
    // item's).
    let worker = r#"if [ {repo} = b ]; then cg=$(sed -n 's/^0:://p' /proc/self/cgroup); for m in /sys/fs/cgroup/unified /sys/fs/cgroup; do if [ -d "$m$cg" ]; then ls "$(dirname "$(dirname "$m$cg")")"; break; fi; done; fi"#;
    std::fs::write(
        root.join("m.yaml"),
        format!(
            "version: 1\nname: gone\ncapacity: {{workers: 1}}\nrepositories: [{{path: a}}, {{path: b}}]\nworker:\n  run: {}\nitems: [{{repo: a, id: i1}}, {{repo: b, id: i1}}]\n",
            serde_json::to_string(worker).unwrap()
        ),
    )
    .unwrap();
    let out = apply_with(root, &[CGROUP]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let listed = item_log(root, "b", "i1");
    assert!(listed.lines().any(|l| l == "repo-b"), "{listed}");
    assert!(
        !listed.lines().any(|l| l == "repo-a"),
        "repository a's cgroup outlived its last item: {listed}"
    );
}
