//! Drains coordinated through one PostgreSQL ledger, as several machines would run them: each
//! `runner apply` has its own folder, manifest and clones of the same repositories (`url:`
//! repositories, cloned into its own workspace), and they share only `--state postgres://…`.

use crate::common;

use common::{postgres_db, runner, stderr};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// `repos` bare origins under `root/origin`, and `machines` folders, each with a manifest over
/// all of them (`per` items each) whose worker logs start and end lines to `root/ran.log`.
fn fleet(root: &Path, repos: usize, per: usize, machines: usize, work: &str) -> Vec<PathBuf> {
    let log = root.join("ran.log");
    for r in 0..repos {
        common::origin(root, &format!("svc-{r:02}"));
    }
    (0..machines)
        .map(|m| {
            let dir = root.join(format!("machine-{m}"));
            std::fs::create_dir_all(&dir).unwrap();
            let mut y =
                String::from("version: 1\nname: fleet\ncapacity: {workers: 2}\nrepositories:\n");
            for r in 0..repos {
                y.push_str(&format!(
                    "  - {{url: {}/origin/svc-{r:02}.git, name: svc-{r:02}}}\n",
                    root.display()
                ));
            }
            let stamp = |what: &str| {
                format!(
                    "echo \"{what} $RUNNER_REPO $RUNNER_ITEM $(date +%s%N) {m}\" >> {}",
                    log.display()
                )
            };
            y.push_str(&format!(
                "worker:\n  run: '{}; {work}; {}'\nitems:\n",
                stamp("start"),
                stamp("end")
            ));
            for r in 0..repos {
                for i in 0..per {
                    y.push_str(&format!("  - {{repo: svc-{r:02}, id: t{i}}}\n"));
                }
            }
            std::fs::write(dir.join("m.yaml"), y).unwrap();
            dir
        })
        .collect()
}

fn apply(dir: &Path, url: &str, lapse: &str) -> Child {
    runner()
        .current_dir(dir)
        .args(["apply", "m.yaml", "--no-progress", "--state", url])
        .env("RUNNER_HEARTBEAT_LAPSE", lapse)
        // Each folder stands for a machine of its own: its host-wide units are its own.
        .env("RUNNER_RESOURCES_DIR", dir.join(".units"))
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.join("err.txt")).unwrap())
        .spawn()
        .unwrap()
}

/// One run of an item: start (ns), end (ns, when it ended), the machine.
type Ran = (u128, Option<u128>, String);

/// (repo, item) → its runs, from the workers' log.
fn runs(root: &Path) -> BTreeMap<(String, String), Vec<Ran>> {
    let text = std::fs::read_to_string(root.join("ran.log")).unwrap_or_default();
    let mut out: BTreeMap<(String, String), Vec<Ran>> = BTreeMap::new();
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let key = (w[1].to_string(), w[2].to_string());
        let t: u128 = w[3].parse().unwrap();
        let list = out.entry(key).or_default();
        match w[0] {
            "start" => list.push((t, None, w[4].to_string())),
            _ => {
                if let Some(open) = list.iter_mut().rev().find(|r| r.1.is_none() && r.2 == w[4]) {
                    open.1 = Some(t);
                }
            }
        }
    }
    out
}

/// Every item ended exactly once, and no repository had two items running at once.
fn exactly_once_and_exclusive(root: &Path, items: usize) {
    let all = runs(root);
    let ended: usize = all
        .values()
        .map(|v| v.iter().filter(|r| r.1.is_some()).count())
        .sum();
    assert_eq!(all.len(), items, "every item ran");
    assert_eq!(ended, items, "every item ended exactly once: {all:?}");
    let mut by_repo: BTreeMap<&str, Vec<(u128, u128)>> = BTreeMap::new();
    for ((repo, _), v) in &all {
        for (s, e, _) in v {
            if let Some(e) = e {
                by_repo.entry(repo).or_default().push((*s, *e));
            }
        }
    }
    for (repo, mut iv) in by_repo {
        iv.sort();
        for w in iv.windows(2) {
            assert!(w[1].0 >= w[0].1, "two items of {repo} at once: {w:?}");
        }
    }
}

fn wait_all(children: Vec<Child>) -> Vec<Option<i32>> {
    children
        .into_iter()
        .map(|mut c| c.wait().unwrap().code())
        .collect()
}

#[test]
fn four_runners_drain_sixty_items_once_without_sharing_a_repository() {
    let Some(url) = postgres_db() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let machines = fleet(dir.path(), 12, 5, 4, "sleep 0.1");
    let children: Vec<Child> = machines.iter().map(|m| apply(m, &url, "30")).collect();
    let codes = wait_all(children);
    for (m, c) in machines.iter().zip(&codes) {
        let err = std::fs::read_to_string(m.join("err.txt")).unwrap();
        assert_eq!(*c, Some(0), "{err}");
    }
    exactly_once_and_exclusive(dir.path(), 60);
    // The work was shared.
    let all = runs(dir.path());
    let by: BTreeSet<&str> = all
        .values()
        .flat_map(|v| v.iter().map(|r| r.2.as_str()))
        .collect();
    assert!(by.len() > 1, "more than one runner worked: {by:?}");

    // `status` and `report` read the shared ledger from anywhere: four ended runs, and each
    // run's report, rendered again from it, counts what that runner completed.
    let out = runner()
        .args(["status", "--state", &url, "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let listed = status["runs"].as_array().unwrap();
    assert_eq!(listed.len(), 4, "{status}");
    assert!(listed.iter().all(|r| r["status"] == "ended"), "{status}");
    let mut completed = 0;
    for r in listed {
        let id = r["id"].as_str().unwrap();
        let out = runner()
            .args(["report", id, "--state", &url, "--format", "json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["run_id"], id);
        completed += report["counts"]["completed"].as_u64().unwrap();
    }
    assert_eq!(
        completed, 60,
        "the four reports together count every item once"
    );
    // A machine's run-history page lists the runs of every machine.
    let last = machines.last().unwrap();
    let page = std::fs::read_to_string(last.join("runner-reports/index.html")).unwrap();
    for r in listed {
        assert!(page.contains(r["id"].as_str().unwrap()), "{r}");
    }
}

#[test]
fn a_runner_killed_mid_drain_leaves_its_items_to_the_others() {
    let Some(url) = postgres_db() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let machines = fleet(dir.path(), 12, 5, 4, "sleep 0.5");
    let mut children: Vec<Child> = machines.iter().map(|m| apply(m, &url, "10")).collect();
    // Once the victim has items running, it is killed as a lost machine would be.
    let victim = "1";
    let until = Instant::now() + Duration::from_secs(30);
    while Instant::now() < until
        && !runs(dir.path())
            .values()
            .any(|v| v.iter().any(|r| r.2 == victim && r.1.is_none()))
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    // As if it ran on another machine: its death cannot be seen from here, only its
    // heartbeat stopping (the others must wait for the lapse, then take its claims over).
    common::psql(
        &url,
        "UPDATE runs SET host = 'another-machine' WHERE manifest_path LIKE '%machine-1/%';
         UPDATE claims SET host = 'another-machine'
          WHERE run_id IN (SELECT id FROM runs WHERE host = 'another-machine')",
    );
    let pid = nix::unistd::Pid::from_raw(children[1].id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
    let killed = children.remove(1);
    let codes = wait_all(children);
    drop(killed);
    for c in &codes {
        assert_eq!(*c, Some(0));
    }
    let all = runs(dir.path());
    let cut: Vec<_> = all
        .iter()
        .filter(|(_, v)| v.iter().any(|r| r.2 == victim && r.1.is_none()))
        .map(|(k, _)| k.clone())
        .collect();
    assert!(!cut.is_empty(), "the victim was cut off mid-item");
    exactly_once_and_exclusive(dir.path(), 60);
    for k in cut {
        assert!(
            all[&k].iter().any(|r| r.2 != victim && r.1.is_some()),
            "{k:?} was finished by another runner"
        );
    }
}

#[test]
fn a_pause_on_one_machine_stops_admission_on_all() {
    let Some(url) = postgres_db() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let machines = fleet(dir.path(), 6, 4, 3, "sleep 0.4");
    let children: Vec<Child> = machines[..2].iter().map(|m| apply(m, &url, "30")).collect();
    let until = Instant::now() + Duration::from_secs(30);
    while Instant::now() < until && runs(dir.path()).is_empty() {
        std::thread::sleep(Duration::from_millis(20));
    }
    // From the third machine.
    let out = runner()
        .current_dir(&machines[2])
        .args([
            "pause",
            "m.yaml",
            "--state",
            &url,
            "--reason",
            "deploy freeze",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let codes = wait_all(children);
    for (m, c) in machines.iter().zip(&codes) {
        let err = std::fs::read_to_string(m.join("err.txt")).unwrap();
        assert_eq!(*c, Some(1), "a paused drain exits 1: {err}");
        assert!(err.contains("paused"), "{err}");
    }
    let started = runs(dir.path()).len();
    assert!(started < 24, "admission stopped: {started} of 24 started");
    // Every started item finished; nothing started after the pause.
    let open: usize = runs(dir.path())
        .values()
        .map(|v| v.iter().filter(|r| r.1.is_none()).count())
        .sum();
    assert_eq!(open, 0);
    let out = runner()
        .current_dir(&machines[2])
        .args(["resume", "m.yaml", "--state", &url])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let code = wait_all(vec![apply(&machines[2], &url, "30")]);
    assert_eq!(code, [Some(0)]);
    exactly_once_and_exclusive(dir.path(), 24);
}

#[test]
fn a_run_on_another_machine_is_cancelled_through_the_ledger() {
    let Some(url) = postgres_db() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let machines = fleet(dir.path(), 2, 10, 2, "sleep 0.5");
    let child = apply(&machines[0], &url, "30");
    let until = Instant::now() + Duration::from_secs(30);
    while Instant::now() < until && runs(dir.path()).is_empty() {
        std::thread::sleep(Duration::from_millis(20));
    }
    // As the ledger would show a run of another machine: no signal can reach it.
    common::psql(&url, "UPDATE runs SET host = 'another-machine'");
    let run_id = common::psql(&url, "SELECT id FROM runs");
    let out = runner()
        .current_dir(&machines[1])
        .args([
            "cancel",
            &run_id,
            "--state",
            &url,
            "--reason",
            "wrong branch",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("through the shared ledger"),
        "{}",
        stderr(&out)
    );
    let code = wait_all(vec![child]);
    let err = std::fs::read_to_string(machines[0].join("err.txt")).unwrap();
    assert_eq!(code, [Some(143)], "ended as SIGTERM would end it: {err}");
    assert!(
        err.contains("wrong branch"),
        "the cause names who and why: {err}"
    );
    assert!(runs(dir.path()).len() < 20, "it stopped early");
    let _ = Command::new("true").status();
}

/// The run folders in a machine's reports folder.
fn report_folders(machine: &Path) -> BTreeSet<String> {
    common::run_folders(machine).into_iter().collect()
}

#[test]
fn retention_on_a_shared_ledger_counts_every_machines_runs_and_each_removes_its_own_folders() {
    let Some(url) = postgres_db() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let machines: Vec<PathBuf> = (0..2)
        .map(|m| {
            let d = dir.path().join(format!("machine-{m}"));
            common::repo(&d.join("r"));
            std::fs::write(
                d.join("m.yaml"),
                r#"version: 1
name: shared-keep
repositories: [{path: r}]
reports: {keep: {runs: 2}}
worker: {run: 'test "$RUNNER_ITEM" != bad'}
items:
  - {repo: r, id: good}
  - {repo: r, id: bad}
"#,
            )
            .unwrap();
            d
        })
        .collect();
    // Two runs on the first machine, then two on the second: a0, a1, b2, b3.
    let mut ids = Vec::new();
    for (n, m) in [0, 0, 1, 1].into_iter().enumerate() {
        let mut args = vec![
            "apply",
            "m.yaml",
            "--no-progress",
            "--json",
            "--state",
            &url,
        ];
        if n > 0 {
            args.extend(["--rerun", "failed"]);
        }
        let out = runner()
            .current_dir(&machines[m])
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        ids.push(report["run_id"].as_str().unwrap().to_string());
    }
    let (a0, a1, b2, b3) = (&ids[0], &ids[1], &ids[2], &ids[3]);
    // The second machine's runs kept the latest two runs of both, b2 and b3: a0 and a1 lost
    // their events, but their folders are on the first machine, so their rows stay, marked,
    // for a runner there to remove them.
    let events_of = |id: &str| {
        common::psql(
            &url,
            &format!("SELECT count(*) FROM events WHERE run_id = '{id}'"),
        )
    };
    assert_eq!(events_of(a0), "0");
    assert_eq!(events_of(a1), "0");
    assert_ne!(events_of(b2), "0");
    let pruned = |id: &str| {
        common::psql(
            &url,
            &format!(
                "SELECT coalesce(bool_or(pruned_at IS NOT NULL)::text, 'gone') FROM runs WHERE id = '{id}'"
            ),
        )
    };
    assert_eq!(
        (pruned(a0), pruned(a1), pruned(b2)),
        ("true".into(), "true".into(), "false".into())
    );
    assert_eq!(
        report_folders(&machines[0]),
        BTreeSet::from([a0.clone(), a1.clone()])
    );
    assert_eq!(
        report_folders(&machines[1]),
        BTreeSet::from([b2.clone(), b3.clone()])
    );
    // `done` still knows both items: `good` by its completion in the pruned a0.
    let plan = runner()
        .current_dir(&machines[0])
        .args(["plan", "m.yaml", "--json", "--state", &url])
        .output()
        .unwrap();
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    assert_eq!(plan["counts"]["done"], 2, "{plan:#}");
    // A pruned run's report is gone, and `report` says why, from either machine.
    let out = runner()
        .current_dir(&machines[1])
        .args(["report", a0, "--manifest", "m.yaml", "--state", &url])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("was pruned"), "{}", stderr(&out));

    // `gc` on the first machine removes the folders of the runs the second pruned; a1's row
    // goes with its folder, a0's stays while `good`'s completion names it. Again: nothing.
    let gc = || {
        runner()
            .current_dir(&machines[0])
            .args(["gc", "m.yaml", "--state", &url])
            .output()
            .unwrap()
    };
    let out = gc();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("removed 2 report folders of runs pruned before"),
        "{}",
        stderr(&out)
    );
    assert!(report_folders(&machines[0]).is_empty());
    assert_eq!((pruned(a0), pruned(a1)), ("true".into(), "gone".into()));
    let out = gc();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("nothing to remove"),
        "{}",
        stderr(&out)
    );
    // A run that recorded no end, on another machine, silent for a minute: its claims may be
    // taken over, but it may still be working (a network partition), so it is not pruned;
    // silent for two days, it is.
    common::psql(
        &url,
        "INSERT INTO runs (id, manifest, manifest_path, manifest_sha256, host, pid, started_by,
            started_at, workers, run_dir, plan_json, heartbeat_at)
         VALUES ('20240101T000000Z-silent', 'shared-keep', '/m.yaml', 'x', 'elsewhere', 1, 'cron',
            '2024-01-01T00:00:00.000Z', 1, '/elsewhere/runner-reports/20240101T000000Z-silent',
            '{}', now() - interval '1 minute')",
    );
    let out = gc();
    assert!(
        stderr(&out).contains("nothing to remove"),
        "{}",
        stderr(&out)
    );
    assert_eq!(pruned("20240101T000000Z-silent"), "false");
    common::psql(
        &url,
        "UPDATE runs SET heartbeat_at = now() - interval '2 days' WHERE id = '20240101T000000Z-silent'",
    );
    let out = gc();
    assert!(stderr(&out).contains("pruned 1 run"), "{}", stderr(&out));
    assert_eq!(pruned("20240101T000000Z-silent"), "true");
    // `status` lists the runs kept only.
    let out = runner()
        .current_dir(&machines[0])
        .args(["status", "--state", &url])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(b2.as_str()) && text.contains(b3.as_str()),
        "{text}"
    );
    assert!(
        !text.contains(a0.as_str()) && !text.contains(a1.as_str()),
        "{text}"
    );
}

#[test]
fn a_runner_pruning_while_another_does_leaves_it_to_that_one_and_says_so() {
    let Some(url) = postgres_db() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    common::repo(&root.join("r"));
    let manifest = |keep: u32| {
        std::fs::write(
            root.join("m.yaml"),
            format!("version: 1\nname: turn\nrepositories: [{{path: r}}]\nreports: {{keep: {{runs: {keep}}}}}\nworker: {{run: \"true\"}}\nitems: [{{repo: r, id: a}}]\n"),
        )
        .unwrap();
    };
    manifest(100);
    for _ in 0..3 {
        let out = common::run_in(
            root,
            &[
                "apply",
                "m.yaml",
                "--no-progress",
                "--rerun",
                "all",
                "--state",
                &url,
            ],
        );
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
    manifest(1);
    // Another runner's prune in progress: the lock it holds for the manifest (the key runner
    // derives from the manifest's name, as a repository's lock is derived from its identity).
    let key = {
        use sha2::{Digest, Sha256};
        let d = Sha256::digest(b"runner.repository\0runner.prune\0turn");
        i64::from_be_bytes(d[..8].try_into().unwrap())
    };
    let mut other = Command::new("psql")
        .args([
            url.as_str(),
            "-qAt",
            "-c",
            &format!("BEGIN; SELECT pg_advisory_xact_lock({key}); SELECT pg_sleep(30); COMMIT;"),
        ])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        common::wait_for(10, || common::psql(
            &url,
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted
               AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        ) == "1"),
        "the other session holds the lock"
    );
    let out = common::run_in(root, &["gc", "m.yaml", "--state", &url]);
    // Its session ends (the server is told: a client gone mid-sleep is noticed only later).
    let locks = "FROM pg_locks WHERE locktype = 'advisory' AND granted
       AND database = (SELECT oid FROM pg_database WHERE datname = current_database())";
    common::psql(&url, &format!("SELECT pg_terminate_backend(pid) {locks}"));
    let _ = other.wait();
    assert!(common::wait_for(10, || common::psql(
        &url,
        &format!("SELECT count(*) {locks}")
    ) == "0"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("another runner is pruning this manifest's history right now"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        common::run_folders(root).len(),
        3,
        "nothing removed meanwhile"
    );
    // Once it is done (its session gone), this runner prunes.
    let out = common::run_in(root, &["gc", "m.yaml", "--state", &url]);
    assert!(stderr(&out).contains("pruned 2 runs"), "{}", stderr(&out));
    assert_eq!(common::run_folders(root).len(), 1);
}

#[test]
fn an_unreachable_server_is_named_without_its_password() {
    let dir = tempfile::tempdir().unwrap();
    let machines = fleet(dir.path(), 1, 1, 1, "true");
    let out = runner()
        .current_dir(&machines[0])
        .args(["apply", "m.yaml", "--no-progress"])
        .args([
            "--state",
            "postgres://runner:hunter2secret@127.0.0.1:1/queue",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("127.0.0.1:1/queue") && err.contains("Connection refused"),
        "{err}"
    );
    assert!(!err.contains("hunter2secret"), "{err}");
    assert!(!dir.path().join("ran.log").exists(), "nothing ran");
}

/// A PostgreSQL server of this test's own (the others' keep running): its URL and data folder.
fn own_server(port: u16) -> Option<(String, PathBuf)> {
    let data = std::env::temp_dir().join(format!("runner-test-pg-{port}-{}", std::process::id()));
    let out = Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/postgres/start.sh"))
        .env("RUNNER_TEST_PGDATA", &data)
        .env("RUNNER_TEST_PGPORT", port.to_string())
        .output()
        .ok()?;
    if !out.status.success() {
        common::not_run(&format!(
            "no PostgreSQL server could be started: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
        return None;
    }
    Some((
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
        data,
    ))
}

/// `pg_ctl` on the test's server (as the `postgres` user when root, as the script starts it).
fn pg_ctl(data: &Path, args: &[&str]) {
    let bin = std::fs::read_dir("/usr/lib/postgresql")
        .unwrap()
        .flatten()
        .map(|e| e.path().join("bin/pg_ctl"))
        .find(|p| p.exists())
        .unwrap();
    let mut c = if nix::unistd::getuid().is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(&bin);
        c
    } else {
        Command::new(&bin)
    };
    let out = c.arg("-D").arg(data).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "pg_ctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The shared ledger's server stops mid-drain and comes back: the run waits for it, starts
/// nothing meanwhile, records what finished during the outage once it is back, and every item
/// runs exactly once.
#[test]
fn a_ledger_server_restart_mid_drain_loses_and_repeats_nothing() {
    let Some((admin, data)) = own_server(54339) else {
        return;
    };
    let db = format!("failover_{}", std::process::id());
    common::psql(&admin, &format!("CREATE DATABASE {db}"));
    let url = format!("{}/{db}", admin.rsplit_once('/').unwrap().0);
    let dir = tempfile::tempdir().unwrap();
    let machines = fleet(dir.path(), 4, 4, 1, "sleep 0.7");
    let mut child = apply(&machines[0], &url, "30");
    assert!(common::wait_for(30, || runs(dir.path()).len() >= 3));
    pg_ctl(&data, &["stop", "-m", "fast", "-w"]);
    std::thread::sleep(Duration::from_secs(4));
    let started_during = runs(dir.path()).len();
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        runs(dir.path()).len(),
        started_during,
        "an item started while the ledger was down"
    );
    pg_ctl(
        &data,
        &[
            "start",
            "-w",
            "-l",
            &data.join("server.log").display().to_string(),
            "-o",
            &format!(
                "-c listen_addresses=127.0.0.1 -p 54339 -c unix_socket_directories={} -c fsync=off",
                data.display()
            ),
        ],
    );
    let code = child.wait().unwrap().code();
    let err = std::fs::read_to_string(machines[0].join("err.txt")).unwrap();
    pg_ctl(&data, &["stop", "-m", "immediate", "-w"]);
    let _ = std::fs::remove_dir_all(&data);
    let _ = std::fs::remove_file(data.with_extension("lock"));
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("16 completed"), "{err}");
    exactly_once_and_exclusive(dir.path(), 16);
}

/// The event loop never waits on the ledger: with the shared ledger's server stopped, an item's
/// 3 s timeout still ends it at 3 s, its output kept, and a SIGTERM to runner stops the other item
/// at once; what became of both is recorded once the server is back.
#[test]
fn a_ledger_server_away_holds_back_no_timeout_and_no_signal() {
    let Some((admin, data)) = own_server(54341) else {
        return;
    };
    let db = format!("away_{}", std::process::id());
    common::psql(&admin, &format!("CREATE DATABASE {db}"));
    let url = format!("{}/{db}", admin.rsplit_once('/').unwrap().0);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let log = root.join("ran.log");
    for r in ["fast", "slow"] {
        common::origin(root, r);
    }
    let machine = root.join("machine");
    std::fs::create_dir_all(&machine).unwrap();
    // The worker says something, logs its start, and logs the SIGTERM that ends it.
    let worker = machine.join("worker.sh");
    std::fs::write(
        &worker,
        format!(
            "trap 'echo \"term $RUNNER_REPO $(date +%s%N)\" >> {log}; exit 143' TERM\n\
             echo output of $RUNNER_REPO\n\
             echo \"start $RUNNER_REPO $(date +%s%N)\" >> {log}\n\
             sleep 60 &\nwait\n",
            log = log.display()
        ),
    )
    .unwrap();
    std::fs::write(
        machine.join("m.yaml"),
        format!(
            "version: 1\nname: away\ncapacity: {{workers: 2}}\nrepositories:\n  \
             - {{url: {o}/origin/fast.git, name: fast, worker: {{timeout: 3s}}}}\n  \
             - {{url: {o}/origin/slow.git, name: slow}}\n\
             worker:\n  run: [sh, {w}]\n  timeout: 2m\n  grace: 2s\n\
             items:\n  - {{repo: fast, id: t0}}\n  - {{repo: slow, id: t0}}\n",
            o = root.display(),
            w = worker.display(),
        ),
    )
    .unwrap();
    let mut child = runner()
        .current_dir(&machine)
        .args(["apply", "m.yaml", "--no-progress", "--state", &url])
        .env("RUNNER_LEDGER_RETRY", "2m")
        .env("RUNNER_RESOURCES_DIR", machine.join(".units"))
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(machine.join("err.txt")).unwrap())
        .spawn()
        .unwrap();
    // When each repository's worker started and was told to stop (ns), from the workers' log.
    let stamps = |what: &str| -> BTreeMap<String, u128> {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let mut f = l.split(' ');
                (f.next() == Some(what)).then_some(())?;
                Some((f.next()?.to_string(), f.next()?.parse().ok()?))
            })
            .collect()
    };
    let now_ns = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    };
    let both_started = common::wait_for(30, || stamps("start").len() == 2);
    let stopped_at = Instant::now();
    pg_ctl(&data, &["stop", "-m", "fast", "-w"]);
    let started = stamps("start");
    // Six seconds after the fast item started (its timeout is long past), runner is told to stop.
    let six = started.get("fast").map_or(0, |s| s + 6_000_000_000);
    while now_ns() < six {
        std::thread::sleep(Duration::from_millis(20));
    }
    let signalled = now_ns();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    common::wait_for(10, || stamps("term").len() == 2);
    let termed = stamps("term");
    // The server stays away 20 s in all.
    std::thread::sleep(Duration::from_secs(20).saturating_sub(stopped_at.elapsed()));
    let pg_back = |data: &Path| {
        pg_ctl(
            data,
            &[
                "start",
                "-w",
                "-l",
                &data.join("server.log").display().to_string(),
                "-o",
                &format!(
                    "-c listen_addresses=127.0.0.1 -p 54341 -c unix_socket_directories={} -c fsync=off",
                    data.display()
                ),
            ],
        )
    };
    pg_back(&data);
    let ended = common::wait_for(60, || child.try_wait().unwrap().is_some());
    if !ended {
        let _ = child.kill();
    }
    let code = child.wait().unwrap().code();
    let err = std::fs::read_to_string(machine.join("err.txt")).unwrap();
    let recorded = common::psql(
        &url,
        "SELECT repo || ' ' || outcome FROM item_results ORDER BY repo",
    );
    pg_ctl(&data, &["stop", "-m", "immediate", "-w"]);
    let _ = std::fs::remove_dir_all(&data);
    let _ = std::fs::remove_file(data.with_extension("lock"));
    assert!(both_started, "both items started: {started:?}\n{err}");
    let secs = |from: u128, to: Option<&u128>| to.map(|t| (*t as f64 - from as f64) / 1e9);
    let fast_ended = secs(started["fast"], termed.get("fast"));
    assert!(
        fast_ended.is_some_and(|s| (2.0..=4.0).contains(&s)),
        "the fast item's 3 s timeout ended it after {fast_ended:?} s\n{err}"
    );
    let slow_stopped = secs(signalled, termed.get("slow"));
    assert!(
        slow_stopped.is_some_and(|s| s < 1.0),
        "runner's SIGTERM reached the running item after {slow_stopped:?} s\n{err}"
    );
    assert!(ended, "runner ended once the server was back\n{err}");
    assert_eq!(code, Some(143), "{err}");
    assert!(
        recorded.contains("fast halted") && recorded.contains("slow cancelled"),
        "the results written once the server was back: {recorded}\n{err}"
    );
    let kept = common::walk_files(&machine.join("runner-reports"))
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .any(|p| std::fs::read_to_string(p).is_ok_and(|t| t.contains("output of fast")));
    assert!(
        kept,
        "the timed-out worker's output is kept in its log\n{err}"
    );
}
