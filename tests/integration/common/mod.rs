//! Helpers shared by the integration tests: the built binary, real git repositories in temp
//! dirs, manifests written to disk.
#![allow(
    dead_code,
    reason = "each test binary uses some of these helpers; `expect` would fail in those using all"
)]

pub mod forge;
pub mod github;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The built `runner` binary with a clean, colourless environment. Host-wide units (shared
/// resources, a manifest's worker slots) and the host's pause live in a folder of the calling
/// test's own, so that tests running at once with manifests of one name do not share them (a
/// test sets `RUNNER_RESOURCES_DIR` or `RUNNER_HOST_DIR` itself to share them on purpose).
pub fn runner() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_runner"));
    c.env("NO_COLOR", "1")
        .env_remove("RUNNER_ROLE")
        .env_remove("RUNNER_STATE")
        .env_remove("RUNNER_CONTAINMENT")
        .env_remove("RUNNER_CGROUP")
        // Items run confined (the default), and may write their tests' markers: every test's
        // files are under the temporary folder. tests/confinement.rs takes this away.
        .env("RUNNER_SANDBOX_WRITABLE", std::env::temp_dir())
        .env("RUNNER_RESOURCES_DIR", test_units_dir())
        .env("RUNNER_HOST_DIR", test_units_dir().join("host"));
    c
}

/// The calling test's folder for host-wide units, under this test process's own folder
/// (`runner-test-units-<pid>` in the temporary folder). The folders of test processes that are
/// gone are removed when the first test asks for one, so that runs of the suite leave nothing
/// behind them but the last.
fn test_units_dir() -> PathBuf {
    use std::hash::{Hash, Hasher};
    static OURS: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let ours = OURS.get_or_init(|| {
        remove_dead_units_dirs();
        std::env::temp_dir().join(format!("runner-test-units-{}", std::process::id()))
    });
    let mut h = std::collections::hash_map::DefaultHasher::new();
    std::thread::current().name().unwrap_or("main").hash(&mut h);
    ours.join(format!("{:x}", h.finish()))
}

/// Remove the unit folders of test processes no longer running (`runner-test-units-<pid>`, and
/// `runner-test-units-<pid>-<test>` as earlier suites left them).
fn remove_dead_units_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name
            .to_str()
            .and_then(|n| n.strip_prefix("runner-test-units-"))
        else {
            continue;
        };
        let Ok(pid) = rest.split('-').next().unwrap_or_default().parse::<i32>() else {
            continue;
        };
        let gone = pid > 0
            && nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
                == Err(nix::errno::Errno::ESRCH);
        if gone {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Start `runner apply m.yaml` in `root` with `env`, wait until a process matching each of
/// `running` is alive, then SIGKILL runner and the run's guardian with it (as when the machine's
/// OOM killer takes both): what the run left is then the next run's to end.
pub fn kill_runner_while(root: &Path, env: &[(&str, &str)], running: &[&str]) {
    kill_while(root, env, running, true);
}

/// [`kill_runner_while`], the run's guardian left alone.
pub fn kill_only_runner_while(root: &Path, env: &[(&str, &str)], running: &[&str]) {
    kill_while(root, env, running, false);
}

fn kill_while(root: &Path, env: &[(&str, &str)], running: &[&str], guardian_too: bool) {
    let child = runner()
        .current_dir(root)
        .args(["apply", "m.yaml", "--no-progress"])
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    assert!(wait_for(20, || running
        .iter()
        .all(|m| !processes_matching(m).is_empty())));
    if guardian_too {
        let guardian = format!("guard-run --for {}", child.id());
        for g in processes_matching(&guardian) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(g),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
    let _ = child.wait_with_output();
}

pub fn run_in(dir: &Path, args: &[&str]) -> Output {
    runner()
        .current_dir(dir)
        .args(args)
        .output()
        .expect("runner binary runs")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Run git in `dir`, panicking with its stderr on failure.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "test")
        .env("GIT_AUTHOR_EMAIL", "test@example.com")
        .env("GIT_COMMITTER_NAME", "test")
        .env("GIT_COMMITTER_EMAIL", "test@example.com")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A git repository at `dir` on branch `main` with one commit.
pub fn repo(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q", "-b", "main"]);
    std::fs::write(dir.join("README.md"), "hello\n").unwrap();
    git(dir, &["add", "."]);
    git(dir, &["commit", "-q", "-m", "init"]);
    dir.to_path_buf()
}

/// Commit a file with `content` in `dir`; returns the new commit.
pub fn commit_file(dir: &Path, file: &str, content: &str) -> String {
    let p = dir.join(file);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(&p, content).unwrap();
    git(dir, &["add", "."]);
    git(dir, &["commit", "-q", "-m", &format!("add {file}")]);
    git(dir, &["rev-parse", "HEAD"])
}

/// Every file under `dir` with its size and modification time: a fingerprint that changes when
/// anything is written.
pub fn tree_fingerprint(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            let rel = e.path().strip_prefix(dir).unwrap().display().to_string();
            if m.is_dir() {
                stack.push(e.path());
                out.push(format!("{rel}/"));
            } else {
                out.push(format!("{rel} {} {:?}", m.len(), m.modified().unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// Pids of live processes whose command line contains `marker` (zombies excluded).
pub fn processes_matching(marker: &str) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, r)| r.trim_start().starts_with('Z'))
            })
            .unwrap_or(true);
        if cmd.contains(marker) && !zombie {
            out.push(pid);
        }
    }
    out
}

/// Wait until `cond` holds or `secs` pass.
pub fn wait_for(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < until {
        if cond() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    cond()
}

/// The `report.json` of the latest run under `reports`.
pub fn latest_report(reports: &Path) -> serde_json::Value {
    let text =
        std::fs::read_to_string(reports.join("latest/report.json")).expect("report.json written");
    serde_json::from_str(&text).expect("report.json is JSON")
}

/// The report's first item whose `field` is `value` (e.g. `("repo", "api")`).
pub fn report_item<'a>(
    report: &'a serde_json::Value,
    field: &str,
    value: &str,
) -> &'a serde_json::Value {
    report["items"]
        .as_array()
        .expect("report items")
        .iter()
        .find(|i| i[field] == value)
        .unwrap_or_else(|| panic!("no item with {field} `{value}` in {report}"))
}

/// Each item of a report as `(id, outcome, reason)`, in the report's order (no reason: empty).
pub fn outcomes(report: &serde_json::Value) -> Vec<(String, String, String)> {
    report["items"]
        .as_array()
        .expect("report items")
        .iter()
        .map(|i| {
            (
                i["id"].as_str().unwrap_or_default().to_string(),
                i["outcome"].as_str().unwrap_or_default().to_string(),
                i["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// Intervals `(repo, start_ns, end_ns)` from a log of `start REPO ITEM NS` / `end REPO ITEM NS`
/// lines written by test workers.
pub fn intervals(log: &Path) -> Vec<(String, String, u128, u128)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut starts = std::collections::HashMap::new();
    let mut out = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != 4 {
            continue;
        }
        let key = (f[1].to_string(), f[2].to_string());
        let t: u128 = f[3].parse().unwrap();
        match f[0] {
            "start" => {
                starts.insert(key, t);
            }
            "end" => {
                if let Some(s) = starts.remove(&key) {
                    out.push((key.0, key.1, s, t));
                }
            }
            _ => {}
        }
    }
    out
}

/// Most intervals open at one instant.
pub fn max_overlap(iv: &[(String, String, u128, u128)]) -> usize {
    let mut events: Vec<(u128, i32)> = Vec::new();
    for (_, _, s, e) in iv {
        events.push((*s, 1));
        events.push((*e, -1));
    }
    // Ends sort before starts at the same instant.
    events.sort();
    let (mut cur, mut max) = (0i32, 0i32);
    for (_, d) in events {
        cur += d;
        max = max.max(cur);
    }
    max as usize
}

/// Whether two intervals of one repository overlap.
pub fn repo_overlap(iv: &[(String, String, u128, u128)]) -> Option<String> {
    for (i, a) in iv.iter().enumerate() {
        for b in &iv[i + 1..] {
            if a.0 == b.0 && a.2 < b.3 && b.2 < a.3 {
                return Some(format!("{}: {} and {} overlap", a.0, a.1, b.1));
            }
        }
    }
    None
}

/// Hold the lease of the repository at `repo` from another process for `secs` seconds, the way
/// a second runner would; returns once it is held.
pub fn hold_lease(repo: &Path, secs: u32) -> std::process::Child {
    let lock = repo.join(".git/runner.lock");
    let holder = Command::new("flock")
        .arg(&lock)
        .args(["sleep", &secs.to_string()])
        .spawn()
        .expect("flock runs");
    assert!(wait_for(5, || {
        let f = std::fs::OpenOptions::new().write(true).open(&lock);
        f.is_ok_and(|f| f.try_lock().is_err())
    }));
    holder
}

/// Whether an outside tool is here. Missing in CI is a failure; elsewhere the check does not
/// run, and says so: on stderr, and — under the README's test command (`tests/run.sh`) — in the
/// list of checks that did not run it prints at the end. Never a silent pass.
pub fn have(tool: &str, probe: &mut Command) -> bool {
    let ok = probe
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        not_run(&format!("{tool} is not installed here"));
    }
    ok
}

/// Python's jsonschema (Draft 2020-12) validates `files` against `schemas/<schema>.schema.json`:
/// an implementation of JSON Schema other than the one that generated the schema. A machine
/// without it does not run the check (a failure in CI, see [`have`]).
pub fn validates(schema: &str, files: &[PathBuf]) {
    if !have(
        "Python's jsonschema",
        Command::new("python3").args(["-c", "import jsonschema"]),
    ) {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("python3")
        .arg(root.join("tests/schemas/validate.py"))
        .arg(root.join(format!("schemas/{schema}.schema.json")))
        .args(files)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{schema}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// This check cannot run (`why`): a failure in CI; elsewhere recorded as not run.
pub fn not_run(why: &str) {
    assert!(
        std::env::var_os("CI").is_none(),
        "{why}: it is needed in CI (.ci/run installs it)"
    );
    let test = std::thread::current()
        .name()
        .unwrap_or("a check")
        .to_string();
    eprintln!("NOT RUN: {test}: {why} (.ci/run installs it; this check runs in CI)");
    if let Some(dir) = std::env::var_os("RUNNER_NOT_RUN_DIR") {
        let binary = std::env::current_exe()
            .ok()
            .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
            .map(|s| s.rsplit_once('-').map_or(s.clone(), |(b, _)| b.to_string()))
            .unwrap_or_default();
        let _ = std::fs::create_dir_all(&dir);
        let name = format!("{binary}::{test}").replace(['/', ':'], "_");
        let _ = std::fs::write(
            Path::new(&dir).join(name),
            format!("{binary}::{test}: {why}\n"),
        );
    }
}

/// A fresh, empty PostgreSQL database for one test, on the private server
/// `tests/postgres/start.sh` starts (or the one `RUNNER_TEST_POSTGRES` names: a URL whose
/// user may create databases). `None` — recorded as not run — when no server can be started
/// outside CI; in CI that fails the test.
pub fn postgres_db() -> Option<String> {
    static SERVER: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let admin = SERVER.get_or_init(|| {
        if let Ok(url) = std::env::var("RUNNER_TEST_POSTGRES") {
            return Some(url);
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/postgres/start.sh");
        let out = Command::new("bash").arg(script).output().ok()?;
        if out.status.success() {
            Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            eprintln!(
                "no PostgreSQL server: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            None
        }
    });
    let Some(admin) = admin else {
        not_run("no PostgreSQL server can be started here");
        return None;
    };
    let name = format!("t_{}", uuid_like());
    let out = Command::new("psql")
        .args([
            admin.as_str(),
            "-q",
            "-c",
            &format!("CREATE DATABASE {name}"),
        ])
        .output()
        .expect("psql runs");
    assert!(
        out.status.success(),
        "CREATE DATABASE: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let base = admin.rsplit_once('/').map_or(admin.as_str(), |(b, _)| b);
    Some(format!("{base}/{name}"))
}

/// A name unique to this process and moment.
fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    format!(
        "{}_{t}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// The run folders in the reports folder of the manifest in `root` (`runner-reports`), sorted.
pub fn run_folders(root: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root.join("runner-reports"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name() != "latest" && e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Run SQL against a test database with psql; its output.
pub fn psql(url: &str, sql: &str) -> String {
    let out = Command::new("psql")
        .args([url, "-qAt", "-c", sql])
        .output()
        .expect("psql runs");
    assert!(
        out.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A repository to clone from, as a remote would hold it: `root/origin/<name>.git` (bare), made
/// from a fresh repository at `root/src-<name>`. Returns the bare repository's path.
pub fn origin(root: &Path, name: &str) -> PathBuf {
    let src = root.join(format!("src-{name}"));
    repo(&src);
    let bare = root.join(format!("origin/{name}.git"));
    git(
        root,
        &[
            "clone",
            "-q",
            "--bare",
            src.to_str().unwrap(),
            bare.to_str().unwrap(),
        ],
    );
    bare
}

/// Every file beneath `dir` (folders walked, not listed).
pub fn walk_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(e.path());
            } else {
                out.push(e.path());
            }
        }
    }
    out
}
