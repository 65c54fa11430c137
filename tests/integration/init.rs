//! `runner init` writes a starter manifest for the checkouts of a folder that validates as
//! written, with a test gate guessed per project and the agent found on `PATH`.

use crate::common;

use common::{repo, runner, stderr, stdout};
use std::path::Path;

fn init(dir: &Path, path: &str) -> std::process::Output {
    runner()
        .current_dir(dir)
        .arg("init")
        .env("PATH", path)
        .output()
        .unwrap()
}

#[test]
fn init_finds_three_checkouts_guesses_their_gates_and_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for (name, file, text) in [
        ("engine", "Cargo.toml", "[package]\nname = \"engine\"\n"),
        (
            "scripts",
            "pyproject.toml",
            "[project]\nname = \"scripts\"\n\n[tool.pytest.ini_options]\naddopts = \"-q\"\n",
        ),
        // A Python project that does not name pytest gets the standard library's runner.
        ("tools", "setup.cfg", "[metadata]\nname = tools\n"),
        (
            "web",
            "package.json",
            "{\"scripts\": {\"test\": \"jest\"}}\n",
        ),
    ] {
        let r = repo(&root.join(name));
        std::fs::write(r.join(file), text).unwrap();
        std::fs::create_dir_all(r.join(".runner-tasks")).unwrap();
        std::fs::write(r.join(".runner-tasks/first.md"), "Tidy the README.\n").unwrap();
        common::git(&r, &["add", "."]);
        common::git(&r, &["commit", "-q", "-m", "project"]);
    }
    // A folder that is no checkout is not a repository.
    std::fs::create_dir_all(root.join("notes")).unwrap();
    // An agent CLI on PATH.
    let bin = root.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(bin.join("codex"), "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(
        bin.join("codex"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let out = init(root, &path);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("4 task files under .runner-tasks/ already; commit any that are not"),
        "{}",
        stderr(&out)
    );
    let manifest = std::fs::read_to_string(root.join("runner.yaml")).unwrap();
    for want in [
        "run: \"cargo test\"",
        "run: \"python3 -m pytest\"",
        "run: \"python3 -m unittest\"",
        "run: \"npm test\"",
        "./runner-agents/codex.sh",
        "OPENAI_API_KEY",
    ] {
        assert!(manifest.contains(want), "`{want}` in:\n{manifest}");
    }
    assert!(!manifest.contains("notes"), "{manifest}");
    assert!(root.join("runner-agents/codex.sh").exists());
    assert!(root.join("runner-agents/common.sh").exists());
    let out = common::run_in(root, &["validate", "runner.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let out = common::run_in(root, &["plan", "runner.yaml", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut repos: Vec<&str> = plan["repositories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    repos.sort();
    assert_eq!(repos, ["engine", "scripts", "tools", "web"], "{plan:#}");
    let human = stdout(&common::run_in(root, &["plan", "runner.yaml"]));
    assert!(
        human.contains("4 repositories; 4 items: 4 pending"),
        "{human}"
    );
    for r in ["engine", "scripts", "tools", "web"] {
        assert!(
            human.lines().any(|l| l.contains(r) && l.contains("first")),
            "{human}"
        );
    }
    // It never overwrites unasked.
    let out = init(root, &path);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("--force"), "{}", stderr(&out));
}

#[test]
fn init_without_an_agent_writes_a_worker_to_fill_in_that_still_validates() {
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("only"));
    let out = init(dir.path(), "/usr/bin:/bin");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no agent CLI found"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out)
            .contains("next, add task files under .runner-tasks/ in a repository and commit them"),
        "{}",
        stderr(&out)
    );
    let out = common::run_in(dir.path(), &["validate", "runner.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let manifest = std::fs::read_to_string(dir.path().join("runner.yaml")).unwrap();
    assert!(
        manifest.contains("No test command could be guessed"),
        "{manifest}"
    );
}

#[test]
fn init_prepares_worktrees_for_the_projects_it_recognises() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let web = repo(&root.join("web"));
    common::commit_file(
        &web,
        "package.json",
        "{\"scripts\": {\"test\": \"node t.js\"}}\n",
    );
    common::commit_file(&web, "package-lock.json", "{}\n");
    let lib = repo(&root.join("lib"));
    common::commit_file(&lib, "Cargo.toml", "[package]\nname = \"lib\"\n");
    common::commit_file(&lib, ".gitignore", "Cargo.lock\ntarget/\n");
    std::fs::write(lib.join("Cargo.lock"), "version = 3\n").unwrap();
    let py = repo(&root.join("py"));
    common::commit_file(&py, "pyproject.toml", "[tool.pytest.ini_options]\n");
    common::commit_file(&py, "src/pkg/__init__.py", "");
    common::commit_file(&py, ".gitignore", ".venv/\n");
    std::fs::create_dir_all(py.join(".venv/bin")).unwrap();
    // A lock file the repository ignores is not in a worktree: `npm ci` could not run there.
    let js = repo(&root.join("js"));
    common::commit_file(
        &js,
        "package.json",
        "{\"scripts\": {\"test\": \"uvu test\"}}\n",
    );
    common::commit_file(&js, ".gitignore", "node_modules\n*-lock.*\n");
    std::fs::write(js.join("package-lock.json"), "{}\n").unwrap();
    std::fs::create_dir_all(js.join("node_modules/uvu")).unwrap();
    let bare = repo(&root.join("bare"));
    common::commit_file(&bare, "test_math.py", "import unittest\n");
    let out = init(root, "/usr/bin:/bin");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let manifest = std::fs::read_to_string(root.join("runner.yaml")).unwrap();
    for want in [
        "setup: \"npm ci\"",
        "share: [\"Cargo.lock\"]",
        "share: [\".venv\"]",
        "share: [\"node_modules\"]",
        "run: \"PYTHONPATH=src python3 -m pytest\"",
        "run: \"python3 -m unittest\"",
    ] {
        assert!(manifest.contains(want), "`{want}` in:\n{manifest}");
    }
    let out = common::run_in(root, &["validate", "runner.yaml"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(manifest.matches("npm ci").count(), 1, "{manifest}");
}
