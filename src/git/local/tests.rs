//! The checkout reads against git's own answers, on real repositories made for each case.

use super::reads::SMALL_FILE;
use super::*;
use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

pub(super) fn git(dir: &Path, args: &[&str]) -> String {
    let out = super::super::base_command()
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn write(path: PathBuf, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// A repository with files at several depths, an executable and a symlink, all committed.
fn repo() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    git(d, &["init", "-q", "-b", "main"]);
    write(d.join("README.md"), "hello\n");
    write(d.join("src/lib/a.rs"), "fn a() {}\n");
    write(d.join("src/lib/ab.rs"), "fn ab() {}\n");
    write(d.join("src/main.rs"), "fn main() {}\n");
    write(d.join("run.sh"), "#!/bin/sh\n");
    let mut p = std::fs::metadata(d.join("run.sh")).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut p, 0o755);
    std::fs::set_permissions(d.join("run.sh"), p).unwrap();
    std::os::unix::fs::symlink("README.md", d.join("link")).unwrap();
    git(d, &["add", "."]);
    git(d, &["commit", "-q", "-m", "init"]);
    // Past the index's own write time, so that no entry is racy.
    std::thread::sleep(std::time::Duration::from_millis(10));
    git(d, &["update-index", "--refresh", "-q"]);
    t
}

/// What git prints for `args`, trimmed; `None` when nothing (or when it fails).
fn answer(g: &crate::git::Repos, d: &Path, args: &[&str]) -> Option<String> {
    let out = super::super::command(g, d).args(args).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    Some(text.trim().to_string()).filter(|t| !t.is_empty())
}

/// What the reader says, checked against git: a checkout it calls clean has no change git
/// can see, and the HEAD and branch it reads are git's.
/// The small reads ([`Reads::Small`]) say the same, or nothing.
fn read(g: &crate::git::Repos, d: &Path) -> Option<Probe> {
    let fast = clean_checkout(g, d, Reads::All);
    if let Some(small) = clean_checkout(g, d, Reads::Small) {
        assert_eq!(Some(small), fast, "small reads answered otherwise");
    }
    if let Some(p) = &fast {
        let status = git(d, &["status", "--porcelain", "--untracked-files=all"]);
        assert_eq!(status, "", "read as clean, but git sees changes");
        let head = answer(g, d, &["rev-parse", "-q", "--verify", "HEAD"]);
        assert_eq!(p.head, head);
        let branch = answer(g, d, &["symbolic-ref", "-q", "--short", "HEAD"]);
        assert_eq!(p.branch, branch);
        assert_eq!(p.common_dir, std::path::absolute(d).unwrap().join(".git"));
    }
    fast
}

#[test]
fn a_clean_checkout_is_read_from_its_files() {
    let g = &crate::git::Repos::default();
    let t = repo();
    let p = read(g, t.path()).expect("a committed checkout reads as clean");
    assert_eq!(p.branch.as_deref(), Some("main"));
    // Folders hold nothing for git: empty ones are no change.
    std::fs::create_dir_all(t.path().join("empty/deeper")).unwrap();
    std::fs::create_dir_all(t.path().join("src/lib/empty")).unwrap();
    read(g, t.path()).expect("empty folders are no change");
}

#[test]
fn small_reads_answer_for_a_small_checkout_and_no_other() {
    let g = &crate::git::Repos::default();
    let t = repo();
    let d = t.path();
    let all = clean_checkout(g, d, Reads::All).expect("clean");
    assert_eq!(clean_checkout(g, d, Reads::Small), Some(all.clone()));
    assert_eq!(head(d, Reads::Small), head(d, Reads::All));
    // An index larger than a small read takes: no answer, though the checkout is clean.
    for i in 0..200 {
        write(d.join(format!("many/file-{i:03}.txt")), "x\n");
    }
    git(d, &["add", "."]);
    git(d, &["commit", "-q", "-m", "many"]);
    std::thread::sleep(std::time::Duration::from_millis(10));
    git(d, &["update-index", "--refresh", "-q"]);
    assert!(std::fs::metadata(d.join(".git/index")).unwrap().len() > SMALL_FILE);
    assert!(clean_checkout(g, d, Reads::All).is_some());
    assert_eq!(clean_checkout(g, d, Reads::Small), None);
    // HEAD's commit in a pack (its index may be large): no answer either.
    let t = repo();
    let d = t.path();
    // A commit no other test made (their trees are known once read: see `commit_tree`).
    let unique = format!("{:?}", std::time::SystemTime::now());
    git(d, &["commit", "-q", "--allow-empty", "-m", &unique]);
    git(d, &["gc", "-q"]);
    assert_eq!(clean_checkout(g, d, Reads::Small), None);
    let all = clean_checkout(g, d, Reads::All);
    assert!(all.is_some(), "packed commits are read");
    // Once read, a commit's tree is known without a read: a small question answers.
    assert_eq!(clean_checkout(g, d, Reads::Small), all);
    // Refs packed: a small packed-refs file is read.
    assert_eq!(head(d, Reads::Small), head(d, Reads::All));
    assert!(head(d, Reads::Small).unwrap().head.is_some());
}

#[test]
fn small_reads_never_wait_on_a_fifo() {
    let g = &crate::git::Repos::default();
    let t = repo();
    let d = t.path();
    for name in ["HEAD", "config", "index"] {
        let path = d.join(".git").join(name);
        let saved = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).unwrap();
        // No writer ever comes: a plain open would wait for one for ever.
        assert_eq!(clean_checkout(g, d, Reads::Small), None, "{name}");
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, saved).unwrap();
    }
    assert!(clean_checkout(g, d, Reads::Small).is_some());
}

/// `is_ancestor` against git's own answer, for every pair of `revs`.
fn ancestry_agrees_with_git(
    g: &crate::git::Repos,
    d: &Path,
    markers: &[&str],
    branches: &[&str],
) -> usize {
    let mut answered = 0;
    for m in markers {
        for b in branches {
            let rev = format!("refs/heads/{b}");
            let Some(fast) = is_ancestor(d, m, &rev) else {
                continue;
            };
            answered += 1;
            let out = super::super::command(g, d)
                .args([
                    "merge-base",
                    "--is-ancestor",
                    &format!("{m}^{{commit}}"),
                    &rev,
                ])
                .output()
                .unwrap();
            assert_eq!(fast, out.status.code() == Some(0), "{m} in {b}");
        }
    }
    answered
}

#[test]
fn ancestry_is_read_from_the_files_as_git_reads_it() {
    let g = &crate::git::Repos::default();
    let t = repo();
    let d = t.path();
    let commit = |msg: &str| {
        write(d.join(format!("{}.txt", msg.replace(' ', "-"))), msg);
        git(d, &["add", "."]);
        git(d, &["commit", "-q", "-m", msg]);
    };
    commit("one");
    git(d, &["tag", "light"]);
    git(d, &["tag", "-a", "-m", "annotated", "annotated"]);
    git(d, &["branch", "side"]);
    commit("two");
    git(d, &["checkout", "-q", "side"]);
    commit("side work");
    git(d, &["tag", "side-only"]);
    git(d, &["checkout", "-q", "main"]);
    git(d, &["merge", "-q", "--no-edit", "-m", "merge", "side"]);
    git(d, &["branch", "old", "HEAD~1"]);
    let head = git(d, &["rev-parse", "HEAD"]);
    let markers = [
        "light",
        "annotated",
        "side-only",
        "main",
        head.trim(),
        "nowhere",
    ];
    let branches = ["main", "side", "old"];
    assert!(ancestry_agrees_with_git(g, d, &markers, &branches) >= 12);
    // A marker that names nothing, or uses revision syntax, is left to git.
    assert_eq!(is_ancestor(d, "nowhere", "refs/heads/main"), None);
    assert_eq!(is_ancestor(d, "main~1", "refs/heads/main"), None);
    // Packed refs and objects too.
    git(d, &["gc", "-q"]);
    assert!(ancestry_agrees_with_git(g, d, &markers, &branches) >= 1);
    // A shallow clone is git's to answer.
    std::fs::write(d.join(".git/shallow"), head).unwrap();
    assert_eq!(is_ancestor(d, "light", "refs/heads/main"), None);
}

#[test]
fn packed_refs_and_objects_are_read() {
    let g = &crate::git::Repos::default();
    let t = repo();
    let d = t.path();
    git(d, &["gc", "-q"]);
    assert!(
        !d.join(".git/refs/heads/main").exists(),
        "gc packs the refs"
    );
    read(g, d).expect("a packed repository reads as clean");
}

#[test]
fn an_index_of_version_four_is_read() {
    let g = &crate::git::Repos::default();
    let t = repo();
    let d = t.path();
    git(d, &["update-index", "--index-version", "4"]);
    std::thread::sleep(std::time::Duration::from_millis(10));
    git(d, &["update-index", "--refresh", "-q"]);
    read(g, d).expect("a version 4 index reads as clean");
}

#[test]
fn a_detached_head_and_an_unborn_branch_are_read() {
    let g = &crate::git::Repos::default();
    let t = repo();
    git(t.path(), &["checkout", "-q", "--detach"]);
    let p = read(g, t.path()).expect("detached");
    assert_eq!(p.branch, None);

    let u = tempfile::tempdir().unwrap();
    git(u.path(), &["init", "-q", "-b", "trunk"]);
    let p = read(g, u.path()).expect("an empty repository is clean");
    assert_eq!((p.head, p.branch.as_deref()), (None, Some("trunk")));
    write(u.path().join("new"), "x");
    assert!(read(g, u.path()).is_none(), "an untracked file");
    git(u.path(), &["add", "new"]);
    assert!(
        read(g, u.path()).is_none(),
        "a staged file on an unborn branch"
    );
}

#[test]
fn no_change_is_read_as_clean() {
    let g = &crate::git::Repos::default();
    type Change = fn(&Path);
    let changes: &[(&str, Change)] = &[
        ("an untracked file", |d| write(d.join("notes.txt"), "x")),
        ("an untracked file deep down", |d| {
            write(d.join("src/lib/new/x.rs"), "x")
        }),
        ("an ignored file (left to git)", |d| {
            write(d.join(".git/info/exclude"), "*.log\n");
            write(d.join("build.log"), "x");
        }),
        ("a deleted file", |d| {
            std::fs::remove_file(d.join("src/main.rs")).unwrap()
        }),
        ("a same-size edit with its mtime put back", |d| {
            let f = d.join("README.md");
            let m = std::fs::metadata(&f).unwrap().modified().unwrap();
            std::fs::write(&f, "jello\n").unwrap();
            std::fs::File::options()
                .write(true)
                .open(&f)
                .unwrap()
                .set_modified(m)
                .unwrap();
        }),
        ("a staged change with the file restored", |d| {
            write(d.join("README.md"), "changed\n");
            git(d, &["add", "README.md"]);
            write(d.join("README.md"), "hello\n");
        }),
        ("a staged change whose tree is written", |d| {
            write(d.join("README.md"), "changed\n");
            std::thread::sleep(std::time::Duration::from_millis(10));
            git(d, &["add", "README.md"]);
            git(d, &["write-tree"]);
        }),
        ("a file hidden by skip-worktree", |d| {
            git(d, &["update-index", "--skip-worktree", "src/main.rs"]);
            std::fs::remove_file(d.join("src/main.rs")).unwrap();
        }),
        ("a staged removal", |d| {
            git(d, &["rm", "-q", "--cached", "src/main.rs"]);
        }),
        ("an executable bit", |d| {
            let f = d.join("README.md");
            let mut p = std::fs::metadata(&f).unwrap().permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut p, 0o755);
            std::fs::set_permissions(&f, p).unwrap();
        }),
        ("a file turned into a symlink", |d| {
            std::fs::remove_file(d.join("src/main.rs")).unwrap();
            std::os::unix::fs::symlink("lib/a.rs", d.join("src/main.rs")).unwrap();
        }),
        ("an intent to add", |d| {
            write(d.join("later.rs"), "x");
            git(d, &["add", "-N", "later.rs"]);
        }),
        ("a nested repository", |d| {
            git(d, &["init", "-q", "vendor/dep"]);
        }),
        ("an index written before its entries changed (racy)", |d| {
            let idx = std::fs::File::options()
                .write(true)
                .open(d.join(".git/index"))
                .unwrap();
            idx.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1))
                .unwrap();
        }),
        ("a config extension", |d| {
            git(d, &["config", "extensions.worktreeConfig", "true"]);
        }),
        ("a work tree set in config", |d| {
            git(d, &["config", "core.worktree", "/elsewhere"]);
        }),
        ("an include in config", |d| {
            git(d, &["config", "include.path", "/dev/null"]);
        }),
        (
            "a bare repository's flag, continued on the next line",
            |d| {
                let config = d.join(".git/config");
                let text = std::fs::read_to_string(&config).unwrap();
                let text = text.replace("bare = false", "bare = fal\\\nse\n\tbare");
                std::fs::write(&config, text).unwrap();
            },
        ),
        ("a replace ref", |d| {
            let head = git(d, &["rev-parse", "HEAD"]);
            git(d, &["update-ref", "refs/replace/x", head.trim()]);
        }),
        ("a packed replace ref", |d| {
            let head = git(d, &["rev-parse", "HEAD"]);
            git(d, &["update-ref", "refs/replace/x", head.trim()]);
            git(d, &["pack-refs", "--all", "--prune"]);
            let _ = std::fs::remove_dir_all(d.join(".git/refs/replace"));
            assert!(!d.join(".git/refs/replace").exists());
        }),
    ];
    for (what, change) in changes {
        let t = repo();
        assert!(read(g, t.path()).is_some(), "{what}: clean before");
        change(t.path());
        assert!(read(g, t.path()).is_none(), "{what}: read as clean");
    }
}

fn git_branches(d: &Path) -> BTreeSet<String> {
    git(
        d,
        &[
            "for-each-ref",
            "--format=%(refname:lstrip=2)",
            "refs/heads/",
        ],
    )
    .lines()
    .map(str::to_string)
    .collect()
}

#[test]
fn branches_are_read_as_git_lists_them() {
    let u = tempfile::tempdir().unwrap();
    git(u.path(), &["init", "-q", "-b", "main"]);
    assert_eq!(
        branches(u.path()),
        Some(BTreeSet::new()),
        "no commit, no branch"
    );

    let t = repo();
    let d = t.path();
    for b in ["feature/a", "feature/deep/b", "fix-1"] {
        git(d, &["branch", b]);
    }
    git(d, &["gc", "-q"]);
    git(d, &["branch", "later"]);
    git(d, &["branch", "-D", "-q", "fix-1"]);
    let read = branches(d).expect("loose and packed refs");
    assert_eq!(read, git_branches(d));
    assert!(read.contains("feature/deep/b") && read.contains("later"));
    assert!(!read.contains("fix-1"));

    write(d.join(".git/refs/heads/broken"), "not a commit\n");
    assert_eq!(branches(d), None, "a broken ref is left to git");
}

/// A FIFO where a ref or `packed-refs` goes is not waited on: each read refuses it at once and
/// leaves the question to git (which runs with a deadline). A plain `open` of it, as
/// `gix-ref` makes, would wait until something wrote to it.
#[test]
fn a_fifo_at_a_ref_is_refused_not_waited_on() {
    let t = repo();
    let d = t.path();
    let head = git(d, &["rev-parse", "HEAD"]).trim().to_string();
    let git_dir = d.join(".git");
    let branch = git(d, &["branch", "--show-current"]).trim().to_string();
    for fifo in ["refs/heads/planted", "packed-refs"] {
        let path = git_dir.join(fifo);
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let started = std::time::Instant::now();
        assert_eq!(branches(d), None, "{fifo}");
        assert_eq!(ref_target(&git_dir, "refs/heads/planted"), None, "{fifo}");
        if fifo == "packed-refs" {
            // A loose ref is read before the packed ones are looked at.
            let own = format!("refs/heads/{branch}");
            assert_eq!(ref_target(&git_dir, &own), Some(Some(head.clone())));
            assert_eq!(ref_target(&git_dir, "refs/heads/absent"), None, "{fifo}");
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{fifo}"
        );
        std::fs::remove_file(&path).unwrap();
    }
    // Without its guard: a plain open waits (here, until the deadline of a thread's join).
    let path = git_dir.join("refs/heads/planted");
    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(std::fs::read(&path).is_ok()));
    assert!(
        rx.recv_timeout(std::time::Duration::from_millis(300))
            .is_err(),
        "a plain read of a FIFO returned"
    );
    // Let the waiting reader end.
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .open(git_dir.join("refs/heads/planted"));
}

#[test]
fn head_is_read_whatever_the_state_of_the_files() {
    let g = &crate::git::Repos::default();
    let t = repo();
    let d = t.path();
    write(d.join("untracked"), "x");
    assert!(read(g, d).is_none());
    let p = head(d, Reads::All).expect("HEAD of a plain checkout");
    assert_eq!(p.head, answer(g, d, &["rev-parse", "HEAD"]));
    assert_eq!(p.branch.as_deref(), Some("main"));
    git(d, &["config", "core.worktree", "/elsewhere"]);
    assert!(head(d, Reads::All).is_none(), "left to git");
}

#[test]
fn a_linked_worktrees_head_is_read_and_the_rest_left_to_git() {
    let g = &crate::git::Repos::default();
    let t = repo();
    let wt = t.path().join("wt");
    git(
        t.path(),
        &["worktree", "add", "-q", "-b", "side", wt.to_str().unwrap()],
    );
    // Its HEAD is its own, its branch the main repository's; what git says.
    let p = head(&wt, Reads::All).expect("HEAD of a linked worktree");
    assert_eq!(p.head, answer(g, &wt, &["rev-parse", "HEAD"]));
    assert_eq!(p.branch.as_deref(), Some("side"));
    assert_eq!(
        p.common_dir,
        std::fs::canonicalize(
            answer(
                g,
                &wt,
                &["rev-parse", "--path-format=absolute", "--git-common-dir"]
            )
            .unwrap()
        )
        .unwrap()
    );
    assert_eq!(
        super::index_file(&wt).map(|i| i.display().to_string()),
        answer(
            g,
            &wt,
            &["rev-parse", "--path-format=absolute", "--git-path", "index"]
        )
    );
    // A branch only in packed-refs, and a detached HEAD, read alike.
    git(t.path(), &["pack-refs", "--all"]);
    let p = head(&wt, Reads::All).expect("a packed branch");
    assert_eq!(p.head, answer(g, &wt, &["rev-parse", "HEAD"]));
    git(&wt, &["checkout", "-q", "--detach"]);
    let p = head(&wt, Reads::All).expect("a detached HEAD");
    assert_eq!(p.branch, None);
    assert_eq!(p.head, answer(g, &wt, &["rev-parse", "HEAD"]));
    // Whether it is clean, and its branches, are git's to say; so is a worktree with a
    // configuration of its own.
    assert!(read(g, &wt).is_none() && branches(&wt).is_none());
    git(t.path(), &["config", "extensions.worktreeConfig", "true"]);
    assert!(head(&wt, Reads::All).is_none(), "left to git");
}

/// A worktree runner removes itself is gone as after `git worktree remove --force`: its files,
/// and git's record of it (git lists it no more, with nothing to prune); a locked one, or one
/// holding a submodule, is left to git.
#[test]
fn a_plain_worktree_is_removed_as_git_would() {
    let g = &crate::git::Repos::default();
    let r = repo();
    let d = r.path();
    let wt = d
        .join("../")
        .join(format!("{}-wt", d.file_name().unwrap().to_string_lossy()));
    let wt = std::path::absolute(&wt).unwrap();
    git(
        d,
        &["worktree", "add", "-q", "-b", "w", wt.to_str().unwrap()],
    );
    write(wt.join("src/new.rs"), "fn new() {}\n");
    write(wt.join("target/out.o"), "built\n");
    assert!(removable_worktree(&wt).is_some());
    super::super::remove_worktree(g, d, &wt).unwrap();
    assert!(!wt.exists());
    let listed = git(d, &["worktree", "list", "--porcelain"]);
    assert!(!listed.contains("-wt"), "{listed}");
    let pruned = git(d, &["worktree", "prune", "--dry-run", "--verbose"]);
    assert!(pruned.trim().is_empty(), "{pruned}");
    // The branch stays, as with git.
    assert!(git(d, &["branch", "--list", "w"]).contains('w'));

    git(
        d,
        &["worktree", "add", "-q", "-b", "v", wt.to_str().unwrap()],
    );
    git(d, &["worktree", "lock", wt.to_str().unwrap()]);
    assert!(
        removable_worktree(&wt).is_none(),
        "a locked worktree is git's"
    );
    git(d, &["worktree", "unlock", wt.to_str().unwrap()]);
    git(
        &wt,
        &[
            "update-index",
            "--add",
            "--cacheinfo",
            &format!("160000,{},sub", git(d, &["rev-parse", "HEAD"]).trim()),
        ],
    );
    assert!(removable_worktree(&wt).is_none(), "a submodule is git's");
    git(
        d,
        &[
            "worktree",
            "remove",
            "--force",
            "--force",
            wt.to_str().unwrap(),
        ],
    );
}

/// The tree written in process is git's own: the same name as `git write-tree` gives for the
/// same index — names that sort differently as files and as folders, links, executables,
/// nested folders, a file replaced by a folder — with objects git reads back and `fsck` finds
/// sound; an object already packed is not written again.
#[test]
fn the_tree_written_in_process_is_the_one_git_writes() {
    let g = &crate::git::Repos::default();
    let r = repo();
    let d = r.path();
    for name in [
        "a-b",
        "a.d",
        "a/c",
        "ab",
        "a/b/deep.txt",
        "z",
        "sp ace/é.txt",
    ] {
        write(d.join(name), &format!("{name}\n"));
    }
    std::os::unix::fs::symlink("a/c", d.join("to-c")).unwrap();
    git(d, &["add", "-A"]);
    git(d, &["commit", "-q", "-m", "more"]);
    // Packed, so some of what is written next is there already.
    git(d, &["gc", "-q"]);
    std::fs::remove_file(d.join("z")).unwrap();
    std::fs::create_dir_all(d.join("z")).unwrap();
    write(d.join("z/now-a-folder"), "x\n");
    write(d.join("src/main.rs"), "fn main() { changed() }\n");
    write(d.join("new/deeper/file"), "new\n");
    let index = tempfile::NamedTempFile::new().unwrap().into_temp_path();
    std::fs::copy(d.join(".git/index"), &index).unwrap();
    let with_index = |args: &[&str]| {
        let out = super::super::command(g, d)
            .env("GIT_INDEX_FILE", &index)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    with_index(&["add", "-A"]);
    // A shared repository's object folder (group-writable, set-group-id): new folders in it
    // are made alike.
    let shared = std::fs::Permissions::from_mode(0o2775);
    std::fs::set_permissions(d.join(".git/objects"), shared).unwrap();
    let before: std::collections::HashSet<_> = std::fs::read_dir(d.join(".git/objects"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let ours = write_index_tree(d, &index).expect("written in process");
    let mut made = 0;
    for e in std::fs::read_dir(d.join(".git/objects")).unwrap() {
        let p = e.unwrap().path();
        if !before.contains(&p) {
            let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o7777;
            assert_eq!(mode, 0o2775, "{}", p.display());
            made += 1;
        }
    }
    assert!(made > 0, "the trees went into folders made for them");
    let theirs = with_index(&["write-tree"]);
    assert_eq!(ours, theirs.trim());
    assert_eq!(git(d, &["cat-file", "-t", &ours]).trim(), "tree");
    let listed = git(d, &["ls-tree", "-r", "--name-only", &ours]);
    assert!(listed.contains("z/now-a-folder") && listed.contains("new/deeper/file"));
    git(d, &["fsck", "--strict", "--no-dangling"]);
    // The clean checkout's index gives the commit's own tree, packed: nothing new to write.
    git(d, &["reset", "-q", "--hard"]);
    let before = std::fs::read_dir(d.join(".git/objects")).unwrap().count();
    let head_tree = git(d, &["rev-parse", "HEAD^{tree}"]);
    assert_eq!(
        write_index_tree(d, &d.join(".git/index")).as_deref(),
        Some(head_tree.trim())
    );
    assert_eq!(
        std::fs::read_dir(d.join(".git/objects")).unwrap().count(),
        before
    );
}

/// [`repo`], whose configuration names who commits.
fn repo_of_ada() -> tempfile::TempDir {
    let r = repo();
    git(r.path(), &["config", "user.name", "Ada Named"]);
    git(r.path(), &["config", "user.email", "ada@example.invalid"]);
    r
}

/// The commit made in process is the one `git commit-tree` makes: the same name for the same
/// tree, parent, message, identity and second; the branch moved to it with git's reflog; a
/// signing setting leaves the commit to git.
#[test]
fn the_commit_made_in_process_is_the_one_git_makes() {
    let g = &crate::git::Repos::default();
    let r = repo_of_ada();
    let d = r.path();
    // Looked up once per folder, for a run: this test changes it.
    g.forget(d);
    git(d, &["branch", "w"]);
    let head = git(d, &["rev-parse", "HEAD"]).trim().to_string();
    write(d.join("src/new.rs"), "fn new() {}\n");
    git(d, &["add", "-A"]);
    let tree = git(d, &["write-tree"]).trim().to_string();
    assert!(super::super::commit_in_process(g, d, &tree, &head, "runner: item-1").is_some());
    let ours = super::super::commit_tree_on(g, d, &tree, &head, "w", "runner: item-1").unwrap();
    let raw = git(d, &["cat-file", "-p", &ours]);
    let when = raw
        .lines()
        .find_map(|l| l.strip_prefix("committer Ada Named <ada@example.invalid> "))
        .unwrap_or_else(|| panic!("{raw}"))
        .to_string();
    let out = super::super::command(g, d)
        .env("GIT_AUTHOR_DATE", &when)
        .env("GIT_COMMITTER_DATE", &when)
        .args(["commit-tree", &tree, "-p", &head, "-m", "runner: item-1"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), ours, "{raw}");
    assert_eq!(git(d, &["rev-parse", "w"]).trim(), ours);
    assert!(git(d, &["reflog", "show", "w"]).contains("commit: runner: item-1"));
    git(d, &["fsck", "--strict", "--no-dangling"]);
    git(d, &["config", "commit.gpgSign", "false"]);
    g.forget(d);
    assert!(super::super::commit_in_process(g, d, &tree, &head, "runner: item-2").is_none());
}

/// A branch moved in process is moved as `git update-ref` moves it: the same ref, the same
/// reflog lines (the branch's and the worktree HEAD's) but for the second they were written;
/// a ref not at the expected value, a lock held by another, or a setting that changes how refs
/// are written leaves it to git, with nothing written.
#[test]
fn a_branch_moved_in_process_is_moved_as_git_moves_it() {
    let g = &crate::git::Repos::default();
    let r = repo_of_ada();
    let d = r.path();
    let head = git(d, &["rev-parse", "HEAD"]).trim().to_string();
    let tree = git(d, &["rev-parse", "HEAD^{tree}"]).trim().to_string();
    let next = git(d, &["commit-tree", &tree, "-p", &head, "-m", "next"])
        .trim()
        .to_string();
    let (ours, theirs) = (d.join("ours"), d.join("theirs"));
    for (wt, b) in [(&ours, "w"), (&theirs, "v")] {
        git(d, &["worktree", "add", "-q", "-b", b, wt.to_str().unwrap()]);
        g.forget(wt);
    }
    let msg = "commit:  runner\titem-1 ";
    assert!(matches!(
        super::super::refs::update_in_process(g, &ours, "refs/heads/w", &next, Some(&head), msg),
        Some(Ok(()))
    ));
    let out = super::super::command(g, &theirs)
        .env("GIT_OPTIONAL_LOCKS", "1")
        .args(["update-ref", "-m", msg, "refs/heads/v", &next, &head])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(git(d, &["rev-parse", "w"]), git(d, &["rev-parse", "v"]));
    let masked = |path: PathBuf| {
        let text = std::fs::read_to_string(&path).unwrap();
        let re = regex::Regex::new(r"> \d+ [+-]\d{4}\t").unwrap();
        re.replace_all(&text, "> WHEN\t").into_owned()
    };
    let common = d.join(".git");
    let (w_log, v_log) = (
        masked(common.join("logs/refs/heads/w")),
        masked(common.join("logs/refs/heads/v")),
    );
    assert_eq!(w_log, v_log);
    assert!(w_log.ends_with(&format!(
        "{head} {next} Ada Named <ada@example.invalid> WHEN\tcommit: runner item-1\n"
    )));
    assert_eq!(
        masked(common.join("worktrees/ours/logs/HEAD")),
        masked(common.join("worktrees/theirs/logs/HEAD"))
    );
    assert_eq!(
        git(&ours, &["log", "-g", "-1", "--format=%gs", "HEAD"]).trim(),
        "commit: runner item-1"
    );
    assert!(!common.join("refs/heads/w.lock").exists());
    // Not where expected: git is asked, and nothing is written.
    let before = std::fs::read_to_string(common.join("logs/refs/heads/w")).unwrap();
    assert!(
        super::super::refs::update_in_process(g, &ours, "refs/heads/w", &head, Some(&head), msg)
            .is_none()
    );
    // Locked by another: left to git, the other's lock left alone.
    std::fs::write(common.join("refs/heads/w.lock"), "").unwrap();
    assert!(
        super::super::refs::update_in_process(g, &ours, "refs/heads/w", &head, Some(&next), msg)
            .is_none()
    );
    assert!(common.join("refs/heads/w.lock").exists());
    std::fs::remove_file(common.join("refs/heads/w.lock")).unwrap();
    assert_eq!(
        std::fs::read_to_string(common.join("logs/refs/heads/w")).unwrap(),
        before
    );
    assert_eq!(git(d, &["rev-parse", "w"]).trim(), next);
    // Only existing reflogs are written to: a packed branch without one gets none, and moves.
    git(d, &["branch", "p", &head]);
    git(d, &["pack-refs", "--all"]);
    std::fs::remove_file(common.join("logs/refs/heads/p")).unwrap();
    git(d, &["config", "core.logAllRefUpdates", "false"]);
    g.forget(d);
    assert!(matches!(
        super::super::refs::update_in_process(g, d, "refs/heads/p", &next, Some(&head), msg),
        Some(Ok(()))
    ));
    assert_eq!(git(d, &["rev-parse", "p"]).trim(), next);
    assert!(!common.join("logs/refs/heads/p").exists());
    git(d, &["fsck", "--strict", "--no-dangling"]);
    // Shared-repository permissions are git's to apply.
    git(d, &["config", "core.sharedRepository", "group"]);
    g.forget(d);
    assert!(
        super::super::refs::update_in_process(g, d, "refs/heads/p", &head, Some(&next), msg)
            .is_none()
    );
}

/// Commits stored as deltas in a pack (an aggressive repack makes some) are read in process, as
/// git reads them: the walk no longer hands them to git.
#[test]
fn commits_stored_as_deltas_are_walked() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    git(d, &["init", "-q", "-b", "main"]);
    for i in 0..60 {
        write(d.join("f"), &format!("{i}\n"));
        git(d, &["add", "f"]);
        git(
            d,
            &[
                "commit",
                "-q",
                "-m",
                "a long message, the same for every commit, so that a delta finds its base",
            ],
        );
    }
    git(d, &["repack", "-adfq", "--depth=50", "--window=250"]);
    let idx = std::fs::read_dir(d.join(".git/objects/pack"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "idx"))
        .unwrap();
    let listing = git(d, &["verify-pack", "-v", idx.to_str().unwrap()]);
    // `<oid> commit <size> <packed size> <offset> <depth> <base>`: a delta.
    let deltas: Vec<&str> = listing
        .lines()
        .filter(|l| l.split_whitespace().nth(1) == Some("commit"))
        .filter(|l| l.split_whitespace().count() == 7)
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert!(
        !deltas.is_empty(),
        "no commit stored as a delta:\n{listing}"
    );
    for c in &deltas {
        assert_eq!(is_ancestor(d, c, "refs/heads/main"), Some(true), "{c}");
    }
    let first = git(d, &["rev-list", "--max-parents=0", "HEAD"]);
    git(d, &["branch", "old", first.trim()]);
    assert_eq!(behind(d, "old", "main"), Some(59));
    // As git counts it, from branches anywhere along the history, and the other way round.
    for k in [0, 1, 17, 58] {
        let name = format!("b{k}");
        git(d, &["branch", &name, &format!("main~{k}")]);
        let count = |range: &str| {
            git(d, &["rev-list", "--count", range])
                .trim()
                .parse::<u64>()
        };
        assert_eq!(
            behind(d, &name, "main"),
            count(&format!("{name}..main")).ok()
        );
        assert_eq!(behind(d, "old", &name), count(&format!("old..{name}")).ok());
    }
}

/// A loose object whose content is not what its name says — a commit planted under the name of
/// one on the branch, claiming a marker as its parent — is not believed: the walk asks git,
/// which finds the forgery (git checks a commit's name against its content when it reads it).
/// Believed, it made the branch seem to hold a marker it does not.
#[test]
fn a_forged_loose_commit_is_not_believed() {
    let g = &crate::git::Repos::default();
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    git(d, &["init", "-q", "-b", "main"]);
    write(d.join("f"), "0\n");
    git(d, &["add", "f"]);
    git(d, &["commit", "-q", "-m", "root"]);
    git(d, &["checkout", "-q", "-b", "marker"]);
    write(d.join("f"), "marker\n");
    git(d, &["commit", "-qam", "the marker"]);
    let marker = git(d, &["rev-parse", "HEAD"]).trim().to_string();
    git(d, &["checkout", "-q", "main"]);
    write(d.join("f"), "1\n");
    git(d, &["commit", "-qam", "work"]);
    let tip = git(d, &["rev-parse", "HEAD"]).trim().to_string();
    assert_eq!(is_ancestor(d, &marker, "refs/heads/main"), Some(false));
    // The tip's file, rewritten: the same tree, the marker as its parent.
    let tree = git(d, &["rev-parse", "HEAD^{tree}"]).trim().to_string();
    let body = format!(
        "tree {tree}\nparent {marker}\nauthor a <a@b> 1 +0000\ncommitter a <a@b> 1 +0000\n\nforged\n"
    );
    let mut raw = format!("commit {}\0", body.len()).into_bytes();
    raw.extend_from_slice(body.as_bytes());
    let z = miniz_oxide::deflate::compress_to_vec_zlib(&raw, 6);
    let path = d.join(".git/objects").join(&tip[..2]).join(&tip[2..]);
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, &z).unwrap();
    assert_ne!(is_ancestor(d, &marker, "refs/heads/main"), Some(true));
    let by_git = super::super::command(g, d)
        .args(["merge-base", "--is-ancestor", &marker, "main"])
        .output()
        .unwrap();
    assert_ne!(by_git.status.code(), Some(0), "git believed the forgery");
}

/// A checkout without an index (a clone made with `--no-checkout`, an index removed) is
/// snapshot as git would stage it from nothing: every file hashed. The temporary index starts
/// missing, not empty (git calls an empty index file broken: "index file smaller than
/// expected").
#[test]
fn a_checkout_without_an_index_is_snapshot_from_nothing() {
    let g = &crate::git::Repos::default();
    let t = repo();
    let d = t.path();
    let head_tree = git(d, &["rev-parse", "HEAD^{tree}"]).trim().to_string();
    std::fs::remove_file(d.join(".git/index")).unwrap();
    let (tree, _index) = crate::git::snapshot(g, d).expect("a snapshot");
    assert_eq!(tree, head_tree);
    let base = crate::git::base_index_small(d).expect("no index is a small one");
    let (tree, _index) = crate::git::snapshot_from(g, d, Some(&base)).expect("a snapshot");
    assert_eq!(tree, head_tree);
}

/// A version 4 index git writes for a real tree is not taken for one made to expand; one whose
/// every path keeps the whole of the one before and adds a byte is, without being expanded.
#[test]
fn an_index_made_to_expand_is_told_from_a_real_one() {
    let g = &crate::git::Repos::default();
    let t = repo();
    let d = t.path();
    git(d, &["update-index", "--index-version", "4"]);
    assert!(!overexpands(&d.join(".git/index")), "a real tree");
    let blob = git(d, &["hash-object", "-w", "--stdin"]).trim().to_string();
    let mut lines = String::new();
    let mut path = String::new();
    for _ in 0..4000 {
        path.push('a');
        lines.push_str(&format!("100644 {blob}\t{path}\n"));
    }
    let mut add = super::super::command(g, d)
        .args(["update-index", "--index-info"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut add.stdin.take().unwrap(), lines.as_bytes()).unwrap();
    assert!(add.wait().unwrap().success());
    assert!(
        overexpands(&d.join(".git/index")),
        "4,000 paths, each the last and a byte"
    );
}
