//! An item working in the repository's own checkout (no work branch), cut short by `kill -9`:
//! the next run proves the uncommitted edit its dead predecessor's, saves it as a patch, resets
//! the checkout and runs the item; a change it cannot prove the dead run's (HEAD moved since)
//! stays `dirty-tree`, the checkout untouched.

use crate::common;

use common::{commit_file, git, repo, run_in, stderr, wait_for};
use std::path::Path;

/// A repository `api` with `gone.txt` and `old/deep/x.txt` committed, and a manifest whose
/// in-place item `fix` appends to the README, adds a file, removes one and a whole folder —
/// then, on its first run, hangs.
fn cut_short(root: &Path, sleep: &str) {
    let api = repo(&root.join("api"));
    commit_file(&api, "gone.txt", "soon gone\n");
    commit_file(&api, "old/deep/x.txt", "a whole folder, soon gone\n");
    let again = root.join("again");
    // `sleep N` shows only once the edits are made (the script's own command line does not name
    // it); each test sleeps its own N.
    std::fs::write(
        root.join("work.sh"),
        format!(
            "echo edit >> README.md; echo new > added.txt; rm -f gone.txt; rm -rf old; test -e {} && exit 0; exec {sleep}\n",
            again.display()
        ),
    )
    .unwrap();
    std::fs::write(
        root.join("m.yaml"),
        format!(
            "version: 1\nname: inplace\nrepositories: [{{path: api}}]\nworker:\n  run: [sh, {}]\nitems: [{{repo: api, id: fix}}]\n",
            root.join("work.sh").display()
        ),
    )
    .unwrap();
    common::kill_only_runner_while(root, &[], &[sleep]);
    // The run's guardian ends the worker it left.
    assert!(
        wait_for(20, || common::processes_matching(sleep).is_empty()),
        "the worker outlived its run"
    );
    let status = git(&api, &["status", "--porcelain"]);
    assert!(
        status.contains("README.md") && status.contains("added.txt"),
        "{status}"
    );
    std::fs::write(&again, "").unwrap();
}

#[test]
fn a_killed_in_place_items_edit_is_saved_the_checkout_reset_and_the_item_run() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    cut_short(root, "sleep 4713");
    // `plan` says what `apply` will do, and touches nothing.
    let out = run_in(root, &["plan", "m.yaml"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("`apply` saves what it left uncommitted"),
        "{err}"
    );
    assert!(
        !common::stdout(&out).contains("dirty-tree"),
        "{}",
        common::stdout(&out)
    );
    let marker = std::fs::read_to_string(root.join("api/.git/runner.inplace.json")).unwrap();
    assert!(marker.contains("\"item\":\"fix\""), "{marker}");
    let out = run_in(root, &["apply", "m.yaml", "--no-progress"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("died while its item `fix` worked in the repository's own checkout")
            && err.contains("4 paths"),
        "{err}"
    );
    assert!(
        err.contains("api/fix: what an earlier run left uncommitted is saved in"),
        "{err}"
    );
    // The patch holds the dead attempt's edit, whole.
    let patch = walk_for(&root.join("runner-reports"), "fix.patch").expect("a patch saved");
    let text = std::fs::read_to_string(&patch).unwrap();
    assert!(
        text.contains("+edit")
            && text.contains("added.txt")
            && text.contains("gone.txt")
            && text.contains("old/deep/x.txt"),
        "{text}"
    );
    // The checkout was reset before the item ran again: one edit, not two, and committed.
    let api = root.join("api");
    assert_eq!(
        std::fs::read_to_string(api.join("README.md")).unwrap(),
        "hello\nedit\n"
    );
    assert_eq!(git(&api, &["status", "--porcelain"]), "");
    // The marker says no item works here (blank; it is rewritten in place, never removed).
    let marker = std::fs::read_to_string(api.join(".git/runner.inplace.json")).unwrap();
    assert!(marker.trim().is_empty(), "{marker}");
}

#[test]
fn a_checkout_whose_head_moved_since_the_killed_item_began_stays_dirty_tree() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    cut_short(root, "sleep 4714");
    let api = root.join("api");
    git(
        &api,
        &["commit", "-q", "--allow-empty", "-m", "someone else's"],
    );
    let before = git(&api, &["status", "--porcelain"]);
    let out = run_in(root, &["apply", "m.yaml", "--no-progress"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "held: {err}");
    assert!(err.contains("api/fix (dirty-tree)"), "{err}");
    assert!(err.contains("HEAD moved since run"), "{err}");
    assert_eq!(git(&api, &["status", "--porcelain"]), before, "untouched");
    assert!(walk_for(&root.join("runner-reports"), "fix.patch").is_none());
}

/// A change older than the marker is not the dead item's: here the marker is written again
/// (same bytes, a newer change time) after the item's edits, so every one of them predates it.
#[test]
fn a_change_older_than_the_marker_stays_dirty_tree() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    cut_short(root, "sleep 4715");
    let api = root.join("api");
    let marker = api.join(".git/runner.inplace.json");
    let bytes = std::fs::read(&marker).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(&marker, &bytes).unwrap();
    let before = git(&api, &["status", "--porcelain"]);
    let out = run_in(root, &["apply", "m.yaml", "--no-progress"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "held: {err}");
    assert!(
        err.contains("api/fix (dirty-tree)") && err.contains("began: not that run's"),
        "{err}"
    );
    assert_eq!(git(&api, &["status", "--porcelain"]), before, "untouched");
}

/// The first file named `name` under `dir`.
fn walk_for(dir: &Path, name: &str) -> Option<std::path::PathBuf> {
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        if p.is_dir() {
            if let Some(found) = walk_for(&p, name) {
                return Some(found);
            }
        } else if p.file_name().is_some_and(|n| n == name) {
            return Some(p);
        }
    }
    None
}
