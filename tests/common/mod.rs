//! Helpers shared by the integration tests: the built binary, real git repositories in temp
//! dirs, manifests written to disk.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The built `runner` binary with a clean, colourless environment.
pub fn runner() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_runner"));
    c.env("NO_COLOR", "1")
        .env_remove("RUNNER_ROLE")
        .env_remove("RUNNER_STATE");
    c
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
