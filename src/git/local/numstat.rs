//! What `git diff --numstat --no-renames --no-textconv --no-ext-diff <from> <to>` totals — files
//! changed, lines inserted, lines deleted — counted in process where the count is certain to be
//! git's, so that an item's report needs no git process for it.
//!
//! git counts the lines its diff marks, and its diff is not always the shortest: it first sets
//! aside lines the other file lacks, and with them, in a run of such lines, lines the other file
//! has many of (`xdl_cleanup_records`); then it searches the rest for the shortest edit, giving
//! that search up past a cost of 256 for a guess. What is set aside is decided here by the same
//! rule, and what is left is searched exactly, with a bound well below git's: where the edit
//! costs more, the count is git's to make. The line counts are differential-tested against git
//! on crafted and random files (`numstat_counts_what_git_counts`).
//!
//! Left to git (`None`): anything an attribute could change (a `.gitattributes` file in the
//! checkout along a changed path or anywhere in its index, or in either tree along one; an
//! attributes file of the repository, the user or the system — the caller sees the configured
//! ones and every setting that changes git's count), a submodule, a path that changes between a
//! file, a link and a folder, replaced objects, a blob over 16 MiB or not hashing to its name,
//! a large index. Hand-written: gitoxide's `gix-diff` diffs lines with `imara-diff`, whose edits
//! are its own, not git's, and a report must say what git would.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use super::objects::{Objects, Reach};
use super::reads::Oid;

/// The most an edit may cost, in lines inserted and deleted after git's setting aside, for the
/// shortest one to be searched here: git's own search is exact below 256.
const MOST_COST: usize = 200;

/// The largest index read to see whether it names a `.gitattributes`.
const MOST_INDEX: u64 = 8 << 20;

/// Files changed, lines inserted and deleted between the commits `from` and `to` of the checkout
/// `top` (its git folder `git_dir`); `None`: ask git.
pub(super) fn totals(top: &Path, git_dir: &Path, from: &Oid, to: &Oid) -> Option<(u64, u64, u64)> {
    if std::env::var_os("GIT_ATTR_SOURCE").is_some()
        || std::env::var_os("GIT_DIFF_OPTS").is_some()
        || super::fresh::attributes_elsewhere(git_dir)
        || super::repo::rewrites_history(git_dir, super::reads::Reads::All)?
        || index_names_attributes(&git_dir.join("index"))?
    {
        return None;
    }
    let store = Objects::open(&git_dir.join("objects"), Reach::All)?;
    let (a, b) = (store.commit_tree(from)?, store.commit_tree(to)?);
    let mut changes = Vec::new();
    diff_trees(&store, Some(a), Some(b), Vec::new(), &mut changes)?;
    use std::os::unix::ffi::OsStrExt;
    let mut seen = HashSet::new();
    let (mut ins, mut del) = (0u64, 0u64);
    for change in &changes {
        // The attributes files git reads for the path, in the checkout.
        let mut dir = Vec::new();
        for part in change.path.split(|c| *c == b'/') {
            if seen.insert(dir.clone()) {
                let folder = top.join(std::ffi::OsStr::from_bytes(&dir));
                if std::fs::symlink_metadata(folder.join(".gitattributes")).is_ok() {
                    return None;
                }
            }
            if !dir.is_empty() {
                dir.push(b'/');
            }
            dir.extend_from_slice(part);
        }
        let blob = |side: Option<Oid>| -> Option<Vec<u8>> {
            match side {
                Some(oid) => store.of_kind(&oid, gix_object::Kind::Blob),
                None => Some(Vec::new()),
            }
        };
        let (old, new) = (blob(change.old)?, blob(change.new)?);
        // git's test for a binary file: a NUL among its first 8,000 bytes. Counted as a file.
        let binary = |b: &[u8]| b[..b.len().min(8000)].contains(&0);
        if binary(&old) || binary(&new) || change.old == change.new {
            continue;
        }
        let (i, d) = line_changes(&old, &new)?;
        ins += i as u64;
        del += d as u64;
    }
    Some((changes.len() as u64, ins, del))
}

/// Whether the index at `path` may name a `.gitattributes` (git reads one from the index where
/// the checkout has none): its bytes hold the name, or it is not a version 2 or 3 index (version
/// 4 shares the start of each path with the one before), or too large to look at here. An index
/// not there names none. `None`: it cannot be read.
fn index_names_attributes(path: &Path) -> Option<bool> {
    let bytes = match crate::support::fs::read_regular(path, Some(MOST_INDEX)) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Some(false),
        Err(_) => return None,
    };
    let plain =
        bytes.len() >= 12 && &bytes[..4] == b"DIRC" && matches!(bytes[4..8], [0, 0, 0, 2 | 3]);
    Some(!plain || memchr::memmem::find(&bytes, b".gitattributes").is_some())
}

/// One path whose blob differs between the two trees: its blob on each side (`None`: not there).
struct Change {
    path: Vec<u8>,
    old: Option<Oid>,
    new: Option<Oid>,
}

/// What a tree entry is, for the diff: a file (its mode's kind, the executable bit aside, which
/// git counts as a change of no lines), a link, a folder.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sort {
    File { executable: bool },
    Link,
    Tree,
}

/// The entries of tree `oid` by name; `None` for a submodule, a `.gitattributes`, two entries
/// of one name, or a tree that cannot be read.
fn entries(store: &Objects, oid: Option<Oid>) -> Option<HashMap<Vec<u8>, (Sort, Oid)>> {
    use gix_object::tree::EntryKind;
    let mut map = HashMap::new();
    let Some(oid) = oid else {
        return Some(map);
    };
    let body = store.of_kind(&oid, gix_object::Kind::Tree)?;
    for entry in gix_object::TreeRefIter::from_bytes(&body, gix_hash::Kind::Sha1) {
        let entry = entry.ok()?;
        let name: &[u8] = entry.filename.as_ref();
        if name.eq_ignore_ascii_case(b".gitattributes") {
            return None;
        }
        let sort = match entry.mode.kind() {
            EntryKind::Tree => Sort::Tree,
            EntryKind::Blob => Sort::File { executable: false },
            EntryKind::BlobExecutable => Sort::File { executable: true },
            EntryKind::Link => Sort::Link,
            EntryKind::Commit => return None,
        };
        let id: Oid = entry.oid.as_bytes().try_into().ok()?;
        if map.insert(name.to_vec(), (sort, id)).is_some() {
            return None;
        }
    }
    Some(map)
}

/// The blobs that differ between trees `a` and `b` (`None`: not there) at `prefix`, added to
/// `changes`; `None` for anything left to git.
fn diff_trees(
    store: &Objects,
    a: Option<Oid>,
    b: Option<Oid>,
    prefix: Vec<u8>,
    changes: &mut Vec<Change>,
) -> Option<()> {
    if a == b {
        return Some(());
    }
    let (old, new) = (entries(store, a)?, entries(store, b)?);
    let mut names: Vec<&Vec<u8>> = old.keys().chain(new.keys()).collect();
    names.sort();
    names.dedup();
    for name in names {
        let mut path = prefix.clone();
        path.extend_from_slice(name);
        let (o, n) = (old.get(name).copied(), new.get(name).copied());
        let is_tree = |e: Option<(Sort, Oid)>| e.map(|(s, _)| s == Sort::Tree);
        match (is_tree(o), is_tree(n)) {
            (Some(true), Some(false)) | (Some(false), Some(true)) => return None,
            (Some(true), _) | (_, Some(true)) => {
                path.push(b'/');
                diff_trees(store, o.map(|e| e.1), n.map(|e| e.1), path, changes)?;
            }
            _ => {
                let link = |e: Option<(Sort, Oid)>| e.map(|(s, _)| s == Sort::Link);
                if let (Some(x), Some(y)) = (link(o), link(n))
                    && x != y
                {
                    return None;
                }
                if o != n {
                    changes.push(Change {
                        path,
                        old: o.map(|e| e.1),
                        new: n.map(|e| e.1),
                    });
                }
            }
        }
    }
    Some(())
}

/// Lines inserted and deleted from `old` to `new` as git's diff counts them; `None` where the
/// shortest edit of what git does not set aside costs more than [`MOST_COST`].
pub(super) fn line_changes(old: &[u8], new: &[u8]) -> Option<(usize, usize)> {
    // Lines as git's records are: each with its newline, the last without one where the file
    // does not end with one; equal lines share a number.
    let mut numbers: HashMap<&[u8], u32> = HashMap::new();
    let mut a = Vec::new();
    let mut b = Vec::new();
    for (text, into) in [(old, &mut a), (new, &mut b)] {
        for line in text.split_inclusive(|c| *c == b'\n') {
            let next = numbers.len() as u32;
            into.push(*numbers.entry(line).or_insert(next));
        }
    }
    let classes = numbers.len();
    // How often each line is in each file, whole.
    let mut in_a = vec![0usize; classes];
    let mut in_b = vec![0usize; classes];
    for &l in &a {
        in_a[l as usize] += 1;
    }
    for &l in &b {
        in_b[l as usize] += 1;
    }
    // The lines the two share at the start and the end.
    let start = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let most = a.len().min(b.len()) - start;
    let end = a
        .iter()
        .rev()
        .zip(b.iter().rev())
        .take(most)
        .take_while(|(x, y)| x == y)
        .count();
    let (a, b) = (&a[start..a.len() - end], &b[start..b.len() - end]);
    let (kept_a, set_aside_a) = set_aside(a, &in_b, most_matches(a.len() + start + end));
    let (kept_b, set_aside_b) = set_aside(b, &in_a, most_matches(b.len() + start + end));
    let cost = shortest_edit(&kept_a, &kept_b, MOST_COST)?;
    let common = (kept_a.len() + kept_b.len() - cost) / 2;
    Some((
        set_aside_b + kept_b.len() - common,
        set_aside_a + kept_a.len() - common,
    ))
}

/// git's square root by shifts (`xdl_bogosqrt`), capped at 1,024: how many times a line must be
/// in the other file of `records` lines to count as one it has many of.
fn most_matches(records: usize) -> usize {
    let (mut n, mut i) = (records, 1usize);
    while n > 0 {
        n >>= 2;
        i <<= 1;
    }
    i.min(1024)
}

/// The lines of `lines` (between the shared start and end) git searches, and how many it sets
/// aside as changed: a line the other file lacks, and one the other file has at least `many`
/// of (`in_other`: how often each line is there) where it sits in a run of such lines and those
/// lacking that is mostly lines lacking.
fn set_aside(lines: &[u32], in_other: &[usize], many: usize) -> (Vec<u32>, usize) {
    // 0: lacking; 1: matched; 2: matched many times.
    let kind: Vec<u8> = lines
        .iter()
        .map(|&l| match in_other[l as usize] {
            0 => 0,
            n if n >= many => 2,
            _ => 1,
        })
        .collect();
    let mut kept = Vec::with_capacity(lines.len());
    let mut aside = 0;
    for (i, &l) in lines.iter().enumerate() {
        if kind[i] == 1 || (kind[i] == 2 && !in_a_lacking_run(&kind, i)) {
            kept.push(l);
        } else {
            aside += 1;
        }
    }
    (kept, aside)
}

/// How far either way a run is looked at, and how many of its lines may be matched many times
/// for every one: git's `XDL_SIMSCAN_WINDOW` and `XDL_KPDIS_RUN`.
const WINDOW: usize = 100;
const KEPT_RUN: usize = 4;

/// Whether line `i` (matched many times) sits between lines lacking from the other file on both
/// sides, in a run of lacking and many-matched lines that is mostly lacking ones
/// (`xdl_clean_mmatch`).
fn in_a_lacking_run(kind: &[u8], i: usize) -> bool {
    let first = i.saturating_sub(WINDOW);
    let last = (i + WINDOW).min(kind.len() - 1);
    let run = |range: &mut dyn Iterator<Item = usize>| {
        let (mut lacking, mut many) = (0usize, 0usize);
        for j in range {
            match kind[j] {
                0 => lacking += 1,
                2 => many += 1,
                _ => break,
            }
        }
        (lacking, many)
    };
    let (lacking_before, many_before) = run(&mut (first..i).rev());
    if lacking_before == 0 {
        return false;
    }
    let (lacking_after, many_after) = run(&mut (i + 1..=last));
    if lacking_after == 0 {
        return false;
    }
    // The line itself counts among those matched many times, once on each side.
    let many = many_before + many_after + 2;
    let lacking = lacking_before + lacking_after;
    many * KEPT_RUN < many + lacking
}

/// The cost of the shortest edit from `a` to `b` (lines deleted plus lines inserted), by Myers'
/// search; `None` past `most`.
fn shortest_edit(a: &[u32], b: &[u32], most: usize) -> Option<usize> {
    let (n, m) = (a.len() as isize, b.len() as isize);
    let offset = most as isize + 1;
    let mut far = vec![0isize; 2 * most + 3];
    for d in 0..=most as isize {
        let mut k = -d;
        while k <= d {
            let at = |k: isize| (offset + k) as usize;
            let mut x = if k == -d || (k != d && far[at(k - 1)] < far[at(k + 1)]) {
                far[at(k + 1)]
            } else {
                far[at(k - 1)] + 1
            };
            let mut y = x - k;
            while x < n && y < m && a[x as usize] == b[y as usize] {
                x += 1;
                y += 1;
            }
            far[at(k)] = x;
            if x >= n && y >= m {
                return Some(d as usize);
            }
            k += 2;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::super::diff_totals;
    use super::super::tests::git;
    use super::*;
    use std::path::PathBuf;

    /// A small generator of numbers (xorshift), seeded: the same cases every run.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }
    }

    /// A file of `lines` lines, most of them ones a source file has many of (blank lines,
    /// closing braces), the rest from a few dozen: what makes git set lines aside.
    fn text(rng: &mut Rng, lines: usize) -> Vec<String> {
        const COMMON: &[&str] = &["\n", "}\n", "    }\n", "\n", "return;\n"];
        (0..lines)
            .map(|_| match rng.below(10) {
                0..=3 => COMMON[rng.below(COMMON.len())].to_string(),
                _ => format!("line {}\n", rng.below(40)),
            })
            .collect()
    }

    /// `old` edited at a few places: runs deleted, runs of new lines (some of them common ones)
    /// inserted, lines replaced.
    fn edit(rng: &mut Rng, old: &[String], serial: &mut usize) -> Vec<String> {
        let mut new = old.to_vec();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(new.len() + 1);
            match rng.below(3) {
                0 => {
                    let end = (at + 1 + rng.below(8)).min(new.len());
                    new.drain(at.min(end)..end);
                }
                _ => {
                    let mut run = Vec::new();
                    for _ in 0..1 + rng.below(12) {
                        *serial += 1;
                        run.push(if rng.below(3) == 0 {
                            "\n".to_string()
                        } else {
                            format!("new {serial}\n")
                        });
                    }
                    if rng.below(2) == 0 && at < new.len() {
                        new.remove(at);
                    }
                    new.splice(at..at, run);
                }
            }
        }
        new
    }

    fn write(path: PathBuf, bytes: &[u8]) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }

    fn commit(d: &Path, message: &str) -> String {
        git(d, &["add", "-A"]);
        git(d, &["commit", "-q", "--allow-empty", "-m", message]);
        git(d, &["rev-parse", "HEAD"]).trim().to_string()
    }

    /// git's own totals of `git diff --numstat --no-renames from to`.
    fn gits(d: &Path, from: &str, to: &str) -> (u64, u64, u64) {
        let text = git(d, &["diff", "--numstat", "--no-renames", from, to]);
        let mut t = (0, 0, 0);
        for line in text.lines() {
            let mut f = line.split('\t');
            t.0 += 1;
            t.1 += f.next().unwrap().parse::<u64>().unwrap_or(0);
            t.2 += f.next().unwrap().parse::<u64>().unwrap_or(0);
        }
        t
    }

    #[test]
    fn numstat_counts_what_git_counts() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        git(d, &["init", "-q", "-b", "main"]);
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut serial = 0;
        let mut pairs = Vec::new();
        for i in 0..400 {
            let lines = rng.below(300);
            let old = text(&mut rng, lines);
            let new = edit(&mut rng, &old, &mut serial);
            let mut bytes = |lines: &[String]| {
                let mut b = lines.concat().into_bytes();
                // Some files end without a newline.
                if rng.below(5) == 0 {
                    b.pop();
                }
                b
            };
            let (old, new) = (bytes(&old), bytes(&new));
            write(d.join(format!("f{i}")), &old);
            pairs.push((old, new));
        }
        let a = commit(d, "a");
        for (i, (_, new)) in pairs.iter().enumerate() {
            write(d.join(format!("f{i}")), new);
        }
        let b = commit(d, "b");
        let text = git(d, &["diff", "--numstat", "--no-renames", &a, &b]);
        let mut theirs = HashMap::new();
        for line in text.lines() {
            let f: Vec<&str> = line.split('\t').collect();
            theirs.insert(
                f[2].to_string(),
                (
                    f[0].parse::<usize>().unwrap(),
                    f[1].parse::<usize>().unwrap(),
                ),
            );
        }
        let (mut compared, mut not_shortest) = (0, 0);
        for (i, (old, new)) in pairs.iter().enumerate() {
            let git_says = theirs.get(&format!("f{i}")).copied().unwrap_or((0, 0));
            let Some(ours) = line_changes(old, new) else {
                continue;
            };
            compared += 1;
            assert_eq!(
                ours, git_says,
                "f{i}: counted here {ours:?}, by git {git_says:?}"
            );
            // What the shortest edit would say: git's count is not always that.
            let lines = |t: &[u8]| {
                t.split_inclusive(|c| *c == b'\n')
                    .map(<[u8]>::to_vec)
                    .collect::<Vec<_>>()
            };
            let (x, y) = (lines(old), lines(new));
            let mut ids: HashMap<Vec<u8>, u32> = HashMap::new();
            let mut id = |l: &Vec<u8>| {
                let n = ids.len() as u32;
                *ids.entry(l.clone()).or_insert(n)
            };
            let x: Vec<u32> = x.iter().map(&mut id).collect();
            let y: Vec<u32> = y.iter().map(&mut id).collect();
            let cost = shortest_edit(&x, &y, 2000).unwrap();
            let common = (x.len() + y.len() - cost) / 2;
            if (y.len() - common, x.len() - common) != git_says {
                not_shortest += 1;
            }
        }
        assert!(compared >= 360, "only {compared} of 400 counted here");
        // Git's setting aside shows: a count of the shortest edit would be wrong for these.
        assert!(
            not_shortest > 0,
            "no case where git's count is not the shortest edit's"
        );
        let ours = diff_totals(d, &a, &b).expect("counted in process");
        assert_eq!(ours, gits(d, &a, &b));
    }

    #[test]
    fn files_added_removed_and_changed_in_kind_are_counted_as_git_counts_them() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        git(d, &["init", "-q", "-b", "main"]);
        write(d.join("src/deep/a.rs"), b"fn a() {}\n}\n\n");
        write(d.join("gone.txt"), b"one\ntwo\n");
        write(d.join("run.sh"), b"#!/bin/sh\n");
        write(d.join("data.bin"), b"\x00\x01\x02");
        write(d.join("same.txt"), b"unchanged\n");
        std::os::unix::fs::symlink("same.txt", d.join("link")).unwrap();
        let a = commit(d, "a");
        write(d.join("src/deep/a.rs"), b"fn a() { 1 }\n}\n\nfn b() {}\n");
        std::fs::remove_file(d.join("gone.txt")).unwrap();
        let mut p = std::fs::metadata(d.join("run.sh")).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut p, 0o755);
        std::fs::set_permissions(d.join("run.sh"), p).unwrap();
        write(d.join("data.bin"), b"\x00\x03");
        std::fs::remove_file(d.join("link")).unwrap();
        std::os::unix::fs::symlink("src/deep/a.rs", d.join("link")).unwrap();
        write(d.join("new/dir/empty"), b"");
        write(d.join("new/dir/text"), b"x\ny");
        let b = commit(d, "b");
        let ours = diff_totals(d, &a, &b).expect("counted in process");
        assert_eq!(ours, gits(d, &a, &b));
        assert_eq!(diff_totals(d, &b, &a), Some(gits(d, &b, &a)));
        assert_eq!(diff_totals(d, &a, &a), Some((0, 0, 0)));

        // What an attribute could change is left to git: one in the checkout along a changed
        // path (and only along one), one in the index only, the repository's own.
        write(d.join("new/.gitattributes"), b"* -diff\n");
        assert_eq!(diff_totals(d, &a, &b), None);
        std::fs::rename(
            d.join("new/.gitattributes"),
            d.join("elsewhere.gitattributes"),
        )
        .unwrap();
        write(d.join("unrelated/.gitattributes"), b"* -diff\n");
        assert_eq!(diff_totals(d, &a, &b), Some(gits(d, &a, &b)));
        git(d, &["add", "unrelated/.gitattributes"]);
        std::fs::remove_file(d.join("unrelated/.gitattributes")).unwrap();
        assert_eq!(diff_totals(d, &a, &b), None);
        git(d, &["rm", "-q", "--cached", "unrelated/.gitattributes"]);
        assert_eq!(diff_totals(d, &a, &b), Some(gits(d, &a, &b)));
        write(d.join(".git/info/attributes"), b"*.rs -diff\n");
        assert_eq!(diff_totals(d, &a, &b), None);
        std::fs::remove_file(d.join(".git/info/attributes")).unwrap();

        // A file that becomes a link, and a submodule.
        std::fs::remove_file(d.join("same.txt")).unwrap();
        std::os::unix::fs::symlink("run.sh", d.join("same.txt")).unwrap();
        let c = commit(d, "c");
        assert_eq!(diff_totals(d, &b, &c), None);
        let sub = git(d, &["rev-parse", "HEAD"]);
        git(
            d,
            &[
                "update-index",
                "--add",
                "--cacheinfo",
                &format!("160000,{},sub", sub.trim()),
            ],
        );
        git(d, &["commit", "-q", "-m", "sub"]);
        let s = git(d, &["rev-parse", "HEAD"]).trim().to_string();
        assert_eq!(diff_totals(d, &c, &s), None);

        // A setting that changes git's count leaves the totals to git.
        let g = &crate::git::Repos::default();
        assert!(crate::git::command::plain_diffs(g, d));
        git(d, &["config", "diff.algorithm", "histogram"]);
        assert!(crate::git::command::plain_diffs(g, d), "kept for the run");
        g.forget(d);
        assert!(!crate::git::command::plain_diffs(g, d));
        assert!(
            !crate::git::command::plain_diffs(&crate::git::Repos::default(), d),
            "a new run reads it again"
        );
    }
}
