//! Items of one repository on work branches take turns in one worktree: the repository's spare,
//! left cleaned by an item that completes and taken by the next, which pays for the files that
//! differ rather than for a whole checkout. Each item must still start as in a worktree made
//! afresh: at its base, nothing of the last item left — not its files, not its ignored build
//! output, not what it did to the index.

use crate::common;

use common::{git, repo, runner, stderr};
use std::path::Path;

/// The worker: says what it found at its start (one `NAME: VALUE` line each), then leaves what
/// an item leaves — its work, ignored build output, a file it does not commit.
const WORKER: &str = r#"
echo "git-dir: $(git rev-parse --absolute-git-dir)"
echo "status: $(git status --porcelain --ignored --untracked-files=all | tr '\n' ' ')"
echo "others: $(ls item-*.txt 2>/dev/null | tr '\n' ' ')"
echo "readme: $(cat README.md)"
echo "head: $(git rev-parse HEAD)"
mkdir -p target && echo built > target/out.o
echo "{item}" > "item-{item}.txt"
"#;

fn manifest(root: &Path, worker: &str, items: &[&str]) {
    let items: Vec<serde_json::Value> = items
        .iter()
        .map(|id| serde_json::json!({"repo": "r", "id": id, "branch": format!("work/{id}")}))
        .collect();
    let manifest = serde_json::json!({
        "version": 1, "name": "turns", "repositories": [{"path": "r"}],
        "worker": {"run": ["sh", "-c", worker]},
        "items": items,
    });
    std::fs::write(root.join("m.yaml"), manifest.to_string()).unwrap();
}

/// What each item's worker said at its start, by item id.
fn starts(
    root: &Path,
    items: &[&str],
) -> std::collections::BTreeMap<String, Vec<(String, String)>> {
    let mut out = std::collections::BTreeMap::new();
    for id in items {
        let log = common::walk_files(&root.join("runner-reports"))
            .into_iter()
            .filter(|p| {
                p.to_string_lossy().contains(&format!("/{id}/"))
                    && p.extension().is_some_and(|e| e == "log")
            })
            .filter_map(|p| std::fs::read_to_string(p).ok())
            .find(|t| t.contains("git-dir: "))
            .unwrap_or_else(|| panic!("no worker log of {id}"));
        let lines = log
            .lines()
            .filter_map(|l| l.split_once(": "))
            .map(|(k, v)| (k.to_string(), v.trim().to_string()))
            .collect();
        out.insert(id.to_string(), lines);
    }
    out
}

fn said<'a>(lines: &'a [(String, String)], key: &str) -> &'a str {
    lines
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no `{key}` in {lines:?}"))
}

/// Drain `r/m.yaml`, expecting every item to complete.
fn drained(r: &Path) {
    let out = runner()
        .current_dir(r)
        .args(["apply", "m.yaml", "--no-progress"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

fn setup() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let r = repo(&root.path().join("r"));
    std::fs::write(r.join(".gitignore"), "target/\n").unwrap();
    git(&r, &["add", ".gitignore"]);
    git(&r, &["commit", "-q", "-m", "ignore target"]);
    root
}

#[test]
fn items_of_one_repository_take_turns_in_one_worktree_each_starting_clean() {
    let root = setup();
    let r = root.path();
    let items = ["i1", "i2", "i3", "i4"];
    manifest(r, WORKER, &items);
    let base = git(&r.join("r"), &["rev-parse", "HEAD"]).trim().to_string();
    drained(r);
    let seen = starts(r, &items);
    for (id, lines) in &seen {
        assert_eq!(
            said(lines, "status"),
            "",
            "{id} did not start clean: {lines:?}"
        );
        assert_eq!(said(lines, "others"), "", "{id} found another item's work");
        assert_eq!(said(lines, "head"), base, "{id} did not start at the base");
        // Its branch holds its own work and nothing of another item's.
        let files = git(
            &r.join("r"),
            &["show", "--name-only", "--format=", &format!("work/{id}")],
        );
        assert_eq!(files.trim(), format!("item-{id}.txt"), "{id}");
    }
    // One worktree served them all: each later item ran in the first one's, taken over.
    let dirs: std::collections::BTreeSet<&str> =
        seen.values().map(|l| said(l, "git-dir")).collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    // The last item removed it: nothing is left in the workspace or in git's records.
    let listed = git(&r.join("r"), &["worktree", "list", "--porcelain"]);
    assert_eq!(listed.matches("worktree ").count(), 1, "{listed}");
    let left: Vec<_> = std::fs::read_dir(r.join(".runner/workspace/worktrees/r"))
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
}

/// An item that changes a tracked file and hides the change from git (marked skip-worktree in
/// its index, so that `git status` says nothing) would hand it to the next item in a worktree
/// taken over as it is. Its snapshot starts from the index as it was before the worker, so the
/// change is its work, committed on its branch as the worker left the file; the spare's index is
/// made anew and every file hashed, and the next items start at their base.
#[test]
fn a_change_hidden_from_the_index_does_not_reach_the_next_item() {
    let root = setup();
    let r = root.path();
    let hostile = format!(
        "if [ \"$RUNNER_ITEM\" = i1 ]; then echo planted > README.md; git update-index --skip-worktree README.md; fi\n{WORKER}"
    );
    let items = ["i1", "i2", "i3"];
    manifest(r, &hostile, &items);
    drained(r);
    let seen = starts(r, &items);
    for id in ["i2", "i3"] {
        assert_eq!(said(&seen[id], "readme"), "hello", "{id}: {:?}", seen[id]);
        assert_eq!(said(&seen[id], "status"), "", "{id}");
    }
    // The hidden change is i1's work, and i1's alone.
    let readme = |id: &str| git(&r.join("r"), &["show", &format!("work/{id}:README.md")]);
    assert_eq!(readme("i1").trim(), "planted");
    assert_eq!(readme("i2").trim(), "hello");
    assert_eq!(readme("i3").trim(), "hello");
}

/// Without the index made anew, the same hidden change survives a worktree's hand-over: a
/// detached HEAD, `git clean -ffdx`, a move and `git switch` leave it in place, and `git status`
/// calls the worktree clean.
#[test]
fn without_a_new_index_the_hidden_change_survives_the_hand_over() {
    let root = setup();
    let r = root.path().join("r");
    let wt = root.path().join("wt");
    let spare = root.path().join("spare");
    let (w, s) = (wt.to_str().unwrap(), spare.to_str().unwrap());
    git(&r, &["worktree", "add", "-q", "-b", "work/i1", w]);
    std::fs::write(wt.join("README.md"), "planted\n").unwrap();
    git(&wt, &["update-index", "--skip-worktree", "README.md"]);
    git(&wt, &["checkout", "-q", "--detach"]);
    git(&wt, &["clean", "-ffdxq"]);
    git(&r, &["worktree", "move", w, s]);
    git(&spare, &["switch", "-q", "-c", "work/i2", "main"]);
    assert_eq!(git(&spare, &["status", "--porcelain", "--ignored"]), "");
    assert_eq!(
        std::fs::read_to_string(spare.join("README.md")).unwrap(),
        "planted\n"
    );
}
