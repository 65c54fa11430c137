//! runner's own git calls give git's own answers about the repository they are asked about,
//! whatever `GIT_*` variables runner was started with (as it is from a hook or an alias, where
//! git itself sets `GIT_DIR`, `GIT_INDEX_FILE` or `GIT_CONFIG_PARAMETERS`).

use crate::common;

use common::{commit_file, git, repo, runner, stderr, stdout};
use serde_json::Value;
use std::path::Path;

/// A repository whose checkout planning must ask git about (a config extension keeps the
/// in-process reader out), with an item `in-place` without a branch, and an item `cont` that
/// continues branch `work` and must contain marker tag `m`.
fn fixture(root: &Path) -> std::path::PathBuf {
    let r = repo(&root.join("r"));
    git(&r, &["config", "extensions.worktreeConfig", "true"]);
    std::fs::write(
        root.join("manifest.yaml"),
        r#"version: 1
name: git-env
repositories:
  - path: r
    critical_base: [m]
worker:
  run: ["true"]
items:
  - {repo: r, id: in-place}
  - {repo: r, id: cont, branch: work}
"#,
    )
    .unwrap();
    r
}

fn plan(root: &Path, env: &[(&str, &str)]) -> Value {
    let mut c = runner();
    c.current_dir(root)
        .args(["plan", "manifest.yaml", "--json"]);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{env:?}: {}", stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

fn item<'a>(plan: &'a Value, id: &str) -> &'a Value {
    plan["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"] == id)
        .unwrap()
}

/// What a plan says about the repository and its items, without paths or digests.
fn facts(plan: &Value) -> Value {
    let r = &plan["repositories"][0];
    serde_json::json!({
        "status": r["status"],
        "head": r["head"],
        "base": r["base"],
        "in-place": [item(plan, "in-place")["state"], item(plan, "in-place")["reason"]],
        "cont": [item(plan, "cont")["state"], item(plan, "cont")["reason"]],
    })
}

#[test]
fn variables_that_redirect_git_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let r = fixture(dir.path());
    git(&r, &["tag", "m"]);
    git(&r, &["branch", "work"]);
    let other = repo(&dir.path().join("other"));
    commit_file(&other, "x", "other\n");
    git(&other, &["checkout", "-q", "-b", "elsewhere"]);
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let want = facts(&plan(dir.path(), &[]));
    assert_eq!(want["in-place"][0], "pending", "{want}");
    assert_eq!(want["cont"][0], "pending", "{want}");
    let other_git = other.join(".git").display().to_string();
    let empty_s = empty.display().to_string();
    let missing_index = dir.path().join("no-index").display().to_string();
    let cases: [(&str, &str); 4] = [
        // Another repository's head and branches.
        ("GIT_DIR", &other_git),
        // An empty work tree: every tracked file deleted.
        ("GIT_WORK_TREE", &empty_s),
        // An empty index: every file untracked.
        ("GIT_INDEX_FILE", &missing_index),
        // No objects: HEAD unreadable.
        ("GIT_OBJECT_DIRECTORY", &empty_s),
    ];
    for (k, v) in cases {
        assert_eq!(facts(&plan(dir.path(), &[(k, v)])), want, "with {k}={v}");
    }
}

#[test]
fn configuration_passed_by_a_parent_git_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let r = fixture(dir.path());
    git(&r, &["tag", "m"]);
    std::fs::write(r.join("untracked.txt"), "left behind\n").unwrap();
    let ignore_all = dir.path().join("ignore-all");
    std::fs::write(&ignore_all, "*\n").unwrap();
    let want = facts(&plan(dir.path(), &[]));
    assert_eq!(want["in-place"][1], "dirty-tree", "{want}");
    // What `git -c core.excludesFile=…` hands to hooks and aliases it runs.
    let param = format!("'core.excludesfile'='{}'", ignore_all.display());
    let ignore = ignore_all.display().to_string();
    for env in [
        vec![("GIT_CONFIG_PARAMETERS", param.as_str())],
        vec![
            ("GIT_CONFIG_COUNT", "1"),
            ("GIT_CONFIG_KEY_0", "core.excludesfile"),
            ("GIT_CONFIG_VALUE_0", ignore.as_str()),
        ],
    ] {
        assert_eq!(facts(&plan(dir.path(), &env)), want, "with {env:?}");
    }
}

#[test]
fn replace_refs_are_honoured_whatever_the_environment_says() {
    let dir = tempfile::tempdir().unwrap();
    let r = fixture(dir.path());
    // `work` does not contain `m`; a replace ref grafts `m` under its tip, so git's default
    // answer is that it does.
    git(&r, &["branch", "work"]);
    git(&r, &["checkout", "-q", "-b", "side"]);
    commit_file(&r, "marker.txt", "m\n");
    git(&r, &["tag", "m"]);
    git(&r, &["checkout", "-q", "main"]);
    let tip = git(&r, &["rev-parse", "work"]);
    git(&r, &["replace", "--graft", &tip, "m"]);
    let want = facts(&plan(dir.path(), &[]));
    assert_eq!(want["cont"][0], "pending", "{want}");
    assert_eq!(
        facts(&plan(dir.path(), &[("GIT_NO_REPLACE_OBJECTS", "1")])),
        want
    );
    // Packed, the replace ref is still seen (the in-process reader must not answer here).
    git(&r, &["pack-refs", "--all", "--prune"]);
    assert_eq!(facts(&plan(dir.path(), &[])), want);
}

#[test]
fn a_clone_lands_where_runner_puts_it() {
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("upstream"));
    let bystander = repo(&dir.path().join("bystander"));
    let before = git(&bystander, &["for-each-ref"]);
    std::fs::write(
        dir.path().join("manifest.yaml"),
        r#"version: 1
name: clone-env
repositories:
  - url: upstream
worker:
  run: ["true"]
items:
  - {repo: upstream, id: a}
"#,
    )
    .unwrap();
    let out = runner()
        .current_dir(dir.path())
        .args(["apply", "manifest.yaml"])
        .env("GIT_DIR", bystander.join(".git"))
        .env("GIT_WORK_TREE", &bystander)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let clone = dir.path().join(".runner/workspace/repos/upstream");
    assert!(clone.join(".git/HEAD").is_file(), "no clone at {clone:?}");
    assert_eq!(git(&bystander, &["for-each-ref"]), before);
}

#[test]
fn runners_own_git_calls_run_no_hook_of_the_repository() {
    let dir = tempfile::tempdir().unwrap();
    let r = repo(&dir.path().join("r"));
    let ran = dir.path().join("hook-ran");
    let hook = r.join(".git/hooks/post-checkout");
    std::fs::write(&hook, format!("#!/bin/sh\ntouch {}\n", ran.display())).unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(
        dir.path().join("manifest.yaml"),
        "version: 1\nname: hooks\nrepositories: [{path: r}]\nworker: {run: [\"true\"]}\nitems: [{repo: r, id: a, branch: \"runner/a\"}]\n",
    )
    .unwrap();
    let out = runner()
        .current_dir(dir.path())
        .args(["apply", "manifest.yaml", "--no-progress"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!ran.exists(), "the repository's post-checkout hook ran");
}

/// A `git` (in `root/bin`, returned) that hangs while a worktree's files are checked out (`worktree
/// add`, or the `reset --hard` runner runs for it) — running `sleep SECS`, a stuck filter or a
/// dead network mount — and is the real git otherwise.
fn git_hanging_on_checkout(root: &Path, secs: &str) -> std::path::PathBuf {
    let bin = root.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let real = String::from_utf8(
        std::process::Command::new("sh")
            .args(["-c", "command -v git"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let fake = bin.join("git");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\ncase \"$*\" in *\"worktree add\"*|*\"reset --hard\"*) exec sleep {secs};; esac\nexec {} \"$@\"\n",
            real.trim()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    bin
}

#[test]
fn a_hung_git_holds_its_item_never_the_run() {
    let dir = tempfile::tempdir().unwrap();
    // Attributes leave the worktree's checkout to git (`reset --hard`), which hangs.
    let r = repo(&dir.path().join("r"));
    commit_file(&r, ".gitattributes", "*.md text\n");
    repo(&dir.path().join("s"));
    let bin = git_hanging_on_checkout(dir.path(), "5127");
    std::fs::write(
        dir.path().join("manifest.yaml"),
        "version: 1\nname: hung\nrepositories: [{path: r}, {path: s}]\nworker: {run: [\"true\"]}\nitems:\n  - {repo: r, id: a, branch: \"runner/a\"}\n  - {repo: s, id: b}\n",
    )
    .unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let out = runner()
        .current_dir(dir.path())
        .args(["apply", "manifest.yaml", "--no-progress", "--json"])
        .env("PATH", &path)
        .env("RUNNER_GIT_TIMEOUT", "1s")
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let items = report["items"].as_array().unwrap();
    let a = items.iter().find(|i| i["id"] == "a").unwrap();
    // The environment's fault: held, for the next run to try again.
    assert_eq!(a["outcome"], "held", "{a:#}");
    assert_eq!(a["reason"], "environment", "{a:#}");
    assert!(
        a["cause"]
            .as_str()
            .unwrap()
            .contains("did not finish within 1 s"),
        "{a:#}"
    );
    let b = items.iter().find(|i| i["id"] == "b").unwrap();
    assert_eq!(
        b["outcome"], "completed",
        "the rest of the run goes on: {b:#}"
    );
    assert!(
        common::processes_matching("sleep 5127").is_empty(),
        "the hung git was left"
    );
    let bad = runner()
        .current_dir(dir.path())
        .args(["plan", "manifest.yaml"])
        .env("RUNNER_GIT_TIMEOUT", "soon")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn runners_own_git_calls_run_no_filter_of_the_repository() {
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("filter-ran");
    // The first repository's configuration is asked of git, the others' read in process: each
    // names its filter in another way git reads the same.
    let spy = |key: &str| format!("echo {key} >> {}; cat", ran.display());
    let written = [
        None,
        Some(format!(
            "[filter \"spy\"]\n\tClean = \"{}\"\n\tsmudge = {} # a comment\n\trequired\n",
            spy("clean"),
            spy("smudge")
        )),
        Some(format!(
            "[FILTER \"spy\"] smudge = \\\n  {}\n[filter \"spy\"]\n  process = {}\n",
            spy("smudge").replace(';', "\";\""),
            spy("process")
        )),
    ];
    let mut items = String::new();
    for (n, config) in written.iter().enumerate() {
        let r = repo(&dir.path().join(format!("r{n}")));
        std::fs::write(r.join(".gitattributes"), "*.txt filter=spy\n").unwrap();
        commit_file(&r, "a.txt", "text\n");
        // Configured after the commits above, which would run it: a filter that records every
        // time git runs it, and that git must not do without.
        match config {
            None => {
                for key in ["clean", "smudge"] {
                    git(&r, &["config", &format!("filter.spy.{key}"), &spy(key)]);
                }
                git(&r, &["config", "filter.spy.required", "true"]);
            }
            Some(text) => {
                let path = r.join(".git/config");
                let mut c = std::fs::read_to_string(&path).unwrap();
                c.push_str(text);
                std::fs::write(&path, c).unwrap();
                assert!(
                    git(&r, &["config", "--get-regexp", "^filter\\.spy\\."])
                        .contains("smudge echo smudge"),
                    "{text}"
                );
            }
        }
        items.push_str(&format!(
            "  - {{repo: r{n}, id: a, branch: \"runner/a\"}}\n"
        ));
    }
    // A worktree is checked out (smudge), the worker's change is snapshotted and committed
    // (clean), and the tree's state is asked about (status, diff).
    std::fs::write(
        dir.path().join("manifest.yaml"),
        format!("version: 1\nname: filters\nrepositories: [{{glob: \"r*\"}}]\nworker: {{run: 'echo more >> a.txt'}}\nitems:\n{items}"),
    )
    .unwrap();
    let out = runner()
        .current_dir(dir.path())
        .args(["apply", "manifest.yaml", "--no-progress"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        !ran.exists(),
        "the repository's filter ran: {}",
        std::fs::read_to_string(&ran).unwrap_or_default()
    );
    for n in 0..written.len() {
        assert_eq!(
            git(
                &dir.path().join(format!("r{n}")),
                &["show", "runner/a:a.txt"]
            ),
            "text\nmore",
            "the work is committed as the worker left it"
        );
    }
}

#[test]
fn a_stop_ends_runners_own_git_calls_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    // Attributes leave the worktree's checkout to git (`reset --hard`), which hangs.
    let r = repo(&dir.path().join("r"));
    commit_file(&r, ".gitattributes", "*.md text\n");
    // Well past the default deadline of ten minutes.
    let bin = git_hanging_on_checkout(dir.path(), "5128");
    std::fs::write(
        dir.path().join("manifest.yaml"),
        "version: 1\nname: stop\nrepositories: [{path: r}]\nworker: {run: [\"true\"]}\nitems: [{repo: r, id: a, branch: \"runner/a\"}]\n",
    )
    .unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let child = runner()
        .current_dir(dir.path())
        .args(["apply", "manifest.yaml", "--no-progress", "--json"])
        .env("PATH", &path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    assert!(common::wait_for(20, || !common::processes_matching(
        "sleep 5128"
    )
    .is_empty()));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(143), "{err}");
    assert!(
        common::processes_matching("sleep 5128").is_empty(),
        "the git call outlived the stop"
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["items"][0]["outcome"], "cancelled", "{report:#}");
}

/// runner commits as the repository names who commits (its own or the global configuration);
/// where nothing does, as `runner <runner@localhost>` — asked of git once per repository, with
/// its filter drivers.
#[test]
fn commits_are_made_as_the_configuration_says_or_as_runner() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let home = root.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let named = repo(&root.join("named"));
    git(&named, &["config", "user.name", "Ada Named"]);
    git(&named, &["config", "user.email", "ada@example.invalid"]);
    let half = repo(&root.join("half"));
    git(&half, &["config", "user.name", "Only A Name"]);
    let bare = repo(&root.join("bare"));
    std::fs::write(
        root.join("m.yaml"),
        "version: 1\nname: who\nrepositories: [{path: named}, {path: half}, {path: bare}]\nworker:\n  run: 'echo x > work.txt'\nitems: [{repo: named, id: a, branch: w}, {repo: half, id: a, branch: w}, {repo: bare, id: a, branch: w}]\n",
    )
    .unwrap();
    let out = runner()
        .current_dir(root)
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", &home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env_remove("GIT_AUTHOR_NAME")
        .env_remove("GIT_AUTHOR_EMAIL")
        .env_remove("GIT_COMMITTER_NAME")
        .env_remove("GIT_COMMITTER_EMAIL")
        .args(["apply", "m.yaml", "--no-progress"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let who = |r: &Path| git(r, &["log", "-1", "--format=%an <%ae> / %cn <%ce>", "w"]);
    assert_eq!(
        who(&named).trim(),
        "Ada Named <ada@example.invalid> / Ada Named <ada@example.invalid>"
    );
    // Half an identity is none: git would refuse it.
    assert_eq!(
        who(&half).trim(),
        "runner <runner@localhost> / runner <runner@localhost>"
    );
    assert_eq!(
        who(&bare).trim(),
        "runner <runner@localhost> / runner <runner@localhost>"
    );
}

/// Runner's own settings in the environment are read at the start, and a value that cannot be
/// read is an error naming the variable (exit 2), never the default in its place:
/// `RUNNER_HEARTBEAT_LAPSE=1m` once meant 30 seconds.
#[test]
fn a_setting_runner_cannot_read_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("r"));
    std::fs::write(
        dir.path().join("manifest.yaml"),
        "version: 1\nname: settings\nrepositories: [{path: r}]\nworker: {run: [\"true\"]}\nitems: [{repo: r, id: a}]\n",
    )
    .unwrap();
    let plan = |var: &str, value: &str| {
        runner()
            .current_dir(dir.path())
            .args(["plan", "manifest.yaml"])
            .env(var, value)
            .output()
            .unwrap()
    };
    for (var, value) in [
        ("RUNNER_HEARTBEAT_LAPSE", "soon"),
        ("RUNNER_HEARTBEAT_LAPSE", "0s"),
        ("RUNNER_HEARTBEAT_LAPSE", "-5"),
        ("RUNNER_LEDGER_RETRY", "a while"),
        ("RUNNER_GIT_TIMEOUT", "0"),
        ("RUNNER_LOG_LIMIT", "lots"),
        ("RUNNER_CONTAINMENT", "docker"),
        ("RUNNER_MAX_WORKERS", "two"),
        ("RUNNER_SANDBOX_WRITABLE", "/cache:relative/dir"),
    ] {
        let out = plan(var, value);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{var}={value}: {err}");
        assert!(err.contains(&format!("`{var}`")), "{var}={value}: {err}");
    }
    for (var, value) in [
        ("RUNNER_HEARTBEAT_LAPSE", "1m"),
        ("RUNNER_HEARTBEAT_LAPSE", "45"),
        ("RUNNER_HEARTBEAT_LAPSE", "1500ms"),
    ] {
        let out = plan(var, value);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{var}={value}: {}",
            stderr(&out)
        );
    }
}

/// Each round of `apply --loop` is a run of its own, and reads the repositories' configuration
/// as it is then: a name set between two rounds signs the second round's commits (a loop may
/// wait an hour between rounds, while someone edits `.git/config` or `~/.gitconfig`).
#[test]
fn each_loop_round_reads_the_configuration_as_it_is_then() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let r = repo(&root.join("r"));
    git(&r, &["config", "user.name", "Before Rounds"]);
    git(&r, &["config", "user.email", "before@example.invalid"]);
    commit_file(&r, "tasks/1.md", "first\n");
    std::fs::write(
        root.join("m.yaml"),
        "version: 1\nname: rounds\nrepositories: [{path: r}]\nworker:\n  run: 'echo done > out-{item}.txt'\ndiscover:\n  - {glob: \"tasks/*.md\", id: \"{match.stem}\", branch: \"work/{match.stem}\"}\n",
    )
    .unwrap();
    let mut apply = runner();
    apply
        .current_dir(root)
        .args(["apply", "m.yaml", "--no-progress", "--loop"])
        .args(["--max-rounds", "2", "--interval", "4s"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    for k in [
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
    ] {
        apply.env_remove(k);
    }
    let child = apply.spawn().unwrap();
    // Round 1 ended (its report is written last); the loop now waits before its second look.
    assert!(common::wait_for(60, || root
        .join("runner-reports/latest/report.json")
        .exists()));
    git(&r, &["config", "user.name", "After Rounds"]);
    git(&r, &["config", "user.email", "after@example.invalid"]);
    commit_file(&r, "tasks/2.md", "second\n");
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("round 2, 1 pending"),
        "the edit came after the second look began: {err}"
    );
    assert_eq!(out.status.code(), Some(0), "{err}");
    let by = |b: &str| git(&r, &["log", "-1", "--format=%an <%ae> / %cn <%ce>", b]);
    assert_eq!(
        by("work/1"),
        "Before Rounds <before@example.invalid> / Before Rounds <before@example.invalid>"
    );
    assert_eq!(
        by("work/2"),
        "After Rounds <after@example.invalid> / After Rounds <after@example.invalid>"
    );
}
