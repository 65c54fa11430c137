//! A checkout's state read from its own files, without starting git.
//!
//! Planning asks every repository what HEAD is and whether the checkout has uncommitted
//! changes. A `git status` for that costs a process start and a few milliseconds of CPU per
//! repository, which for a hundred repositories is most of `runner plan`'s time. This module
//! answers the common case in-process and answers only one way: "clean, and here is HEAD", and
//! only when it has proven it. The proof is the one git itself makes:
//!
//! - the index's cached tree (its `TREE` extension) names the very tree HEAD's commit names, so
//!   nothing is staged;
//! - every index entry's file has exactly the stat data the index recorded, and was not changed
//!   in the same instant the index was written (a "racy" entry, which git settles by reading the
//!   content), so nothing is modified;
//! - every file in the working tree is in the index, so nothing is untracked.
//!
//! Everything it does not fully understand ends the attempt with `None`, and the caller asks
//! git: a linked worktree, a repository owned by another user, a config extension or include,
//! replace refs or grafts, a split or sparse index, a conflict, a submodule, an intent-to-add
//! or skip-worktree entry, any difference in stat data, and any file the index does not name (even one that `.gitignore` would ignore). So a wrong
//! "clean" needs git's own index to be wrong; every other mistake only costs the git call that
//! would have been made anyway.
//!
//! Objects — commits and tags, loose or in a pack, whole or as deltas — are read through
//! gitoxide's object database (`objects`); the index, refs and the start of the configuration
//! are read here, by hand: they are small, runner reads them on every item where a library's
//! repository handle would cost more than the answer, and each is property-tested against any
//! bytes (`untrusted_bytes`) and differential-tested against git (`tests`).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::ffi::OsStr;
use std::io::ErrorKind;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::support::refname::valid_branch_name;
use objects::{Kind, Objects, Reach};

/// A SHA-1 object name.
type Oid = [u8; 20];

/// The tree of an empty index.
const EMPTY_TREE: Oid = [
    0x4b, 0x82, 0x5d, 0xc6, 0x42, 0xcb, 0x6e, 0xb9, 0xa0, 0x60, 0xe5, 0x4b, 0xf8, 0xd6, 0x92, 0x88,
    0xfb, 0xee, 0x49, 0x04,
];

/// How much a question may read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reads {
    /// Whatever it takes.
    All,
    /// Only files of at most [`SMALL_FILE`] bytes, and no pack: an answer whose cost does not
    /// grow with the repository (an index that small names a few hundred files at most), cheap
    /// enough to be had on the event loop. A larger file ends the attempt with `None`.
    Small,
}

/// The largest file a [`Reads::Small`] question reads.
pub(crate) const SMALL_FILE: u64 = 8 * 1024;

impl Reads {
    /// A FIFO or device in place of a file is not waited on: it is left to git, which runs with
    /// a deadline.
    fn bytes(self, path: &Path) -> std::io::Result<Vec<u8>> {
        let limit = (self == Reads::Small).then_some(SMALL_FILE);
        crate::support::fs::read_regular(path, limit)
    }

    /// The objects a question may read.
    fn reach(self) -> Reach {
        match self {
            Reads::All => Reach::All,
            Reads::Small => Reach::Loose(SMALL_FILE),
        }
    }

    fn text(self, path: &Path) -> std::io::Result<String> {
        String::from_utf8(self.bytes(path)?).map_err(std::io::Error::other)
    }
}

/// What one `git rev-parse` tells about a checkout (or the checkout's own files, where they
/// tell it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// Root of the working tree.
    pub toplevel: PathBuf,
    /// The common git dir, shared by all worktrees of one clone (where leases live).
    pub common_dir: PathBuf,
    /// The commit HEAD points at; `None` in a repository without commits.
    pub head: Option<String>,
    /// The branch HEAD is on; `None` when detached.
    pub branch: Option<String>,
}

/// HEAD of the checkout at `dir`, when the checkout is proven to have no uncommitted changes
/// (staged, unstaged or untracked). `None` says nothing either way.
pub(crate) fn clean_checkout(dir: &Path, reads: Reads) -> Option<Probe> {
    let (top, git_dir) = plain_checkout(dir, reads)?;
    if rewrites_history(&git_dir, reads)? {
        return None;
    }
    let (head, branch) = read_head(&git_dir, &git_dir, reads)?;
    let index = Index::read(&git_dir, reads)?;
    let staged = match &head {
        Some(commit) => index.tree? != commit_tree(&git_dir, commit, reads)?,
        None => !index.entries.is_empty(),
    };
    if staged {
        return None;
    }
    // The walk first: in a checkout with build output it stops at once, before a stat of every
    // tracked file.
    if !untracked::none(&top, index.entries.iter().map(|e| e.path.as_slice()))
        || !index.worktree_matches(&top)
    {
        return None;
    }
    Some(probe(top, git_dir, head, branch))
}

/// What the checkout at `dir` is and where HEAD points, whatever the state of its files: a plain
/// checkout, or a linked worktree (runner's own work branches), whose HEAD is its own and whose
/// branches are the main repository's. `None` says nothing: ask git.
pub fn head(dir: &Path, reads: Reads) -> Option<Probe> {
    if let Some((top, git_dir)) = plain_checkout(dir, reads) {
        let (head, branch) = read_head(&git_dir, &git_dir, reads)?;
        return Some(probe(top, git_dir, head, branch));
    }
    let (top, own, common) = linked_checkout(dir, reads)?;
    let (head, branch) = read_head(&own, &common, reads)?;
    Some(probe(top, common, head, branch))
}

/// The git common dir of the checkout at `dir` (its `.git`, or for a linked worktree the main
/// repository's), from its files. `None`: ask git.
pub(crate) fn common_dir(dir: &Path) -> Option<PathBuf> {
    match plain_checkout(dir, Reads::Small) {
        Some((_, git_dir)) => Some(git_dir),
        None => linked_checkout(dir, Reads::Small).map(|(_, _, common)| common),
    }
}

/// What the index of the checkout at `dir` holds, when this reader understands every entry of
/// it — which also says that no entry is flagged assume-unchanged or skip-worktree, none is a
/// submodule and none is in conflict: whether any entry is a symbolic link. `None`: ask git.
pub(crate) fn plain_index(dir: &Path) -> Option<PlainIndex> {
    plain_index_file(&index_file(dir)?)
}

/// [`plain_index`], of the index file at `path`.
pub(crate) fn plain_index_file(path: &Path) -> Option<PlainIndex> {
    let index = Index::read_file(path, Reads::All)?;
    Some(PlainIndex {
        links: index.entries.iter().any(|e| e.mode >> 12 == 0o12),
    })
}

/// Whether every file of the checkout at `dir` (but its `.git`) is in its index: then it has no
/// untracked file, ignored or not. `false` where that cannot be told here: ask git.
pub(crate) fn no_untracked_file(dir: &Path) -> bool {
    index_file(dir)
        .and_then(|p| Index::read_file(&p, Reads::All))
        .is_some_and(|index| untracked::none(dir, index.entries.iter().map(|e| e.path.as_slice())))
}

/// See [`plain_index`].
pub(crate) struct PlainIndex {
    pub links: bool,
}

/// The index file of the checkout at `dir` (`.git/index`, or a linked worktree's own), from
/// its files. `None`: ask git.
pub(crate) fn index_file(dir: &Path) -> Option<PathBuf> {
    match plain_checkout(dir, Reads::Small) {
        Some((_, git_dir)) => Some(git_dir.join("index")),
        None => linked_checkout(dir, Reads::Small).map(|(_, own, _)| own.join("index")),
    }
}

/// The names of the local branches of the checkout at `dir`, as `git for-each-ref refs/heads/`
/// lists them: loose refs and packed ones. `None` for anything unusual (a symbolic or broken
/// ref, a name git would not accept): ask git.
pub fn branches(dir: &Path) -> Option<BTreeSet<String>> {
    let (_, git_dir) = plain_checkout(dir, Reads::All)?;
    let mut names = BTreeSet::new();
    let heads = git_dir.join("refs/heads");
    let mut dirs = vec![String::new()];
    while let Some(prefix) = dirs.pop() {
        let listing = match std::fs::read_dir(heads.join(&prefix)) {
            Ok(l) => l,
            Err(e) if e.kind() == ErrorKind::NotFound && prefix.is_empty() => break,
            Err(_) => return None,
        };
        for entry in listing {
            let entry = entry.ok()?;
            let name = format!("{prefix}{}", entry.file_name().to_str()?);
            if entry.file_type().ok()?.is_dir() {
                dirs.push(format!("{name}/"));
                continue;
            }
            let content = Reads::All.bytes(&entry.path()).ok()?;
            parse_oid(content.strip_suffix(b"\n").unwrap_or(&content))?;
            if !valid_branch_name(&name) {
                return None;
            }
            names.insert(name);
        }
    }
    match Reads::All.text(&git_dir.join("packed-refs")) {
        Ok(packed) => {
            for line in packed.lines() {
                if line.starts_with('#') || line.starts_with('^') {
                    continue;
                }
                let (oid, name) = line.split_once(' ')?;
                parse_oid(oid.as_bytes())?;
                if let Some(branch) = name.strip_prefix("refs/heads/") {
                    if !valid_branch_name(branch) {
                        return None;
                    }
                    names.insert(branch.to_string());
                }
            }
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(_) => return None,
    }
    Some(names)
}

/// Whether the commit `marker` names is an ancestor of (or is) the tip of branch ref `rev`
/// (`refs/heads/...`), read from the repository's own files: git's `merge-base --is-ancestor`
/// without a process. `marker` is a full commit id or a ref name, resolved in git's order
/// (`refs/<m>`, `refs/tags/<m>`, `refs/heads/<m>`, `refs/remotes/<m>`, `refs/remotes/<m>/HEAD`),
/// annotated tags peeled. `None` says nothing, and git is asked: a marker with revision syntax or
/// that resolves nowhere here, a shallow clone, alternates, grafts or replace refs, an object
/// that cannot be read, or more than [`WALK_LIMIT`] commits to look at.
pub(crate) fn is_ancestor(dir: &Path, marker: &str, rev: &str) -> Option<bool> {
    let (_, git_dir) = plain_checkout(dir, Reads::All)?;
    if rewrites_history(&git_dir, Reads::All)?
        || git_dir.join("shallow").exists()
        || git_dir.join("objects/info/alternates").exists()
    {
        return None;
    }
    let target = resolve_marker(&git_dir, marker)?;
    let tip = resolve_ref(
        &git_dir,
        rev.strip_prefix("refs/heads/").map(|_| rev)?,
        Reads::All,
    )??;
    let objects = Objects::open(&git_dir.join("objects"), Reach::All)?;
    let mut seen: HashSet<Oid> = HashSet::new();
    let mut todo = vec![tip];
    while let Some(c) = todo.pop() {
        if c == target {
            return Some(true);
        }
        if !seen.insert(c) {
            continue;
        }
        if seen.len() > WALK_LIMIT {
            return None;
        }
        let (kind, body) = objects.commit_or_tag(&c)?;
        if kind != Kind::Commit {
            return None;
        }
        todo.extend(parents(&body)?);
    }
    Some(false)
}

/// How many commits `base` has that local branch `branch` lacks (`git rev-list --count
/// refs/heads/<branch>..<base>`), read from the repository's files as [`is_ancestor`] reads
/// them; `None` says nothing, and git is asked.
pub fn behind(dir: &Path, branch: &str, base: &str) -> Option<u64> {
    let (_, git_dir) = plain_checkout(dir, Reads::All)?;
    if rewrites_history(&git_dir, Reads::All)?
        || git_dir.join("shallow").exists()
        || git_dir.join("objects/info/alternates").exists()
    {
        return None;
    }
    let base = resolve_marker(&git_dir, base)?;
    let tip = resolve_ref(&git_dir, &format!("refs/heads/{branch}"), Reads::All)??;
    if base == tip {
        return Some(0);
    }
    let objects = Objects::open(&git_dir.join("objects"), Reach::All)?;
    let walk = |from: Oid, stop: &HashSet<Oid>, seen: &mut HashSet<Oid>| -> Option<()> {
        let mut todo = vec![from];
        while let Some(c) = todo.pop() {
            if stop.contains(&c) || !seen.insert(c) {
                continue;
            }
            if seen.len() > WALK_LIMIT {
                return None;
            }
            let (kind, body) = objects.commit_or_tag(&c)?;
            if kind != Kind::Commit {
                return None;
            }
            todo.extend(parents(&body)?);
        }
        Some(())
    };
    let mut on_branch = HashSet::new();
    walk(tip, &HashSet::new(), &mut on_branch)?;
    let mut only_base = HashSet::new();
    walk(base, &on_branch, &mut only_base)?;
    Some(only_base.len() as u64)
}

/// The most commits [`is_ancestor`] reads before it leaves the question to git.
pub(crate) const WALK_LIMIT: usize = 20_000;

/// The commit a marker names, peeling annotated tags.
fn resolve_marker(git_dir: &Path, marker: &str) -> Option<Oid> {
    let mut oid = match parse_oid(marker.as_bytes()) {
        Some(o) => o,
        None => {
            // Plain ref names only: anything with revision syntax is git's to read.
            if marker.is_empty()
                || marker.starts_with('-')
                || marker
                    .chars()
                    .any(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/')))
                || marker.contains("..")
                || marker
                    .split('/')
                    .any(|p| p.is_empty() || p.starts_with('.'))
            {
                return None;
            }
            // git looks in $GIT_DIR itself first (HEAD, FETCH_HEAD, …): leave those to git.
            if git_dir.join(marker).exists() {
                return None;
            }
            let mut found = None;
            for candidate in [
                format!("refs/{marker}"),
                format!("refs/tags/{marker}"),
                format!("refs/heads/{marker}"),
                format!("refs/remotes/{marker}"),
                format!("refs/remotes/{marker}/HEAD"),
            ] {
                if let Some(o) = resolve_ref(git_dir, &candidate, Reads::All)? {
                    found = Some(o);
                    break;
                }
            }
            found?
        }
    };
    let objects = Objects::open(&git_dir.join("objects"), Reach::All)?;
    for _ in 0..8 {
        let (kind, body) = objects.commit_or_tag(&oid)?;
        match kind {
            Kind::Commit => return Some(oid),
            Kind::Tag => oid = parse_oid(body.strip_prefix(b"object ")?.get(..40)?)?,
        }
    }
    None
}

/// A commit's parents, from the start of its body (the header lines come first).
fn parents(body: &[u8]) -> Option<Vec<Oid>> {
    let mut out = Vec::new();
    let mut lines = body.split(|&b| b == b'\n');
    lines.next()?.strip_prefix(b"tree ")?;
    for line in lines {
        match line.strip_prefix(b"parent ") {
            Some(p) => out.push(parse_oid(p)?),
            None => {
                // The header ends the parents: the author line follows them. A body cut short
                // before it says nothing.
                line.strip_prefix(b"author ")?;
                return Some(out);
            }
        }
    }
    None
}

/// Whether grafts or replace refs (loose or packed) may change what git sees as history; `None`
/// when that cannot be read.
fn rewrites_history(git_dir: &Path, reads: Reads) -> Option<bool> {
    if git_dir.join("info/grafts").exists() || git_dir.join("refs/replace").exists() {
        return Some(true);
    }
    match reads.text(&git_dir.join("packed-refs")) {
        Ok(packed) => Some(packed.lines().any(|l| l.contains(" refs/replace/"))),
        Err(e) if e.kind() == ErrorKind::NotFound => Some(false),
        Err(_) => None,
    }
}

/// The top level and git dir of `dir`, when it is a checkout this module can read: its `.git` a
/// folder of its own (not a linked worktree), owned like the checkout by this user, with a plain
/// config.
fn plain_checkout(dir: &Path, reads: Reads) -> Option<(PathBuf, PathBuf)> {
    let top = std::path::absolute(dir).ok()?;
    let git_dir = top.join(".git");
    let meta = std::fs::symlink_metadata(&git_dir).ok()?;
    // git refuses a repository that belongs to another user unless told it is safe; that
    // judgement stays with git.
    static EUID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    let uid = *EUID.get_or_init(|| nix::unistd::geteuid().as_raw());
    if !meta.is_dir() || meta.uid() != uid || std::fs::metadata(&top).ok()?.uid() != uid {
        return None;
    }
    plain_config(&git_dir, reads)?;
    if git_dir.join("commondir").exists() {
        return None;
    }
    Some((top, git_dir))
}

/// The text of the configuration file of the checkout at `dir`, when it is one this module reads
/// ([`plain_checkout`]: its own `.git` folder, this user's, no extension or include).
pub(crate) fn plain_config_text(dir: &Path) -> Option<String> {
    let (_, git_dir) = plain_checkout(dir, Reads::Small)?;
    Reads::Small.text(&git_dir.join("config")).ok()
}

/// A linked worktree at `dir` as `git worktree add` makes one: `.git` a file naming its own
/// git dir (`gitdir: …`), which names the main repository's (`commondir`). Returns the top
/// level, its own git dir and the common dir. Anything else — a checkout of another user, a
/// configuration git reads differently (extensions such as per-worktree config, includes) — is
/// `None`: ask git.
fn linked_checkout(dir: &Path, reads: Reads) -> Option<(PathBuf, PathBuf, PathBuf)> {
    let top = std::path::absolute(dir).ok()?;
    let dot = top.join(".git");
    let meta = std::fs::symlink_metadata(&dot).ok()?;
    let uid = nix::unistd::geteuid().as_raw();
    if !meta.is_file() || meta.uid() != uid || std::fs::metadata(&top).ok()?.uid() != uid {
        return None;
    }
    let text = Reads::Small.text(&dot).ok()?;
    let own = text.strip_prefix("gitdir: ")?.strip_suffix('\n')?;
    let own = top.join(own);
    let common = Reads::Small.text(&own.join("commondir")).ok()?;
    let common = std::fs::canonicalize(own.join(common.strip_suffix('\n')?)).ok()?;
    if std::fs::metadata(&common).ok()?.uid() != uid || own.join("config.worktree").exists() {
        return None;
    }
    plain_config(&common, reads)?;
    Some((top, own, common))
}

/// The own git dir of the linked worktree at `dir`, where runner may remove the worktree itself
/// as `git worktree remove --force` would: made as `git worktree add` makes one (see
/// [`linked_checkout`]), its git dir naming it back, not locked, and no submodule in its index.
/// `None`: ask git.
pub(crate) fn removable_worktree(dir: &Path) -> Option<PathBuf> {
    let (top, own, _) = linked_checkout(dir, Reads::Small)?;
    let back = Reads::Small.text(&own.join("gitdir")).ok()?;
    let same = |a: &Path, b: &Path| {
        std::fs::canonicalize(a)
            .ok()
            .is_some_and(|a| std::fs::canonicalize(b).ok() == Some(a))
    };
    if !same(Path::new(back.strip_suffix('\n')?), &top.join(".git")) || own.join("locked").exists()
    {
        return None;
    }
    plain_index_file(&own.join("index"))?;
    Some(own)
}

fn probe(top: PathBuf, git_dir: PathBuf, head: Option<Oid>, branch: Option<String>) -> Probe {
    Probe {
        common_dir: git_dir,
        toplevel: top,
        head: head.map(|h| hex(&h)),
        branch,
    }
}

/// `Some` when the repository's own config holds nothing that changes where the working tree
/// is or how refs and objects are stored.
fn plain_config(git_dir: &Path, reads: Reads) -> Option<()> {
    let text = reads.text(&git_dir.join("config")).ok()?;
    let mut section = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(rest) = line.strip_prefix('[') {
            let (header, after) = rest.split_once(']')?;
            // A key may follow the header on its line; such a file is left to git.
            if !after.trim().is_empty() {
                return None;
            }
            section = header
                .split(|c: char| c.is_whitespace() || c == '"' || c == '.')
                .next()
                .unwrap_or("")
                .to_ascii_lowercase();
            if section == "extensions" || section.starts_with("include") {
                return None;
            }
            continue;
        }
        if section != "core" {
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .map_or((line, "true"), |(k, v)| (k.trim(), v.trim()));
        let value = value.trim_matches('"').to_ascii_lowercase();
        match key.to_ascii_lowercase().as_str() {
            "worktree" => return None,
            "bare" if !matches!(value.as_str(), "false" | "no" | "off" | "0") => return None,
            "repositoryformatversion" if value != "0" && value != "1" => return None,
            _ => {}
        }
    }
    Some(())
}

/// The commit HEAD of `head_dir` names (`None` on a branch without commits) and its branch
/// (`None` when detached), resolved among the refs of `refs_dir` (the same folder for a plain
/// checkout; for a linked worktree, the main repository's).
fn read_head(
    head_dir: &Path,
    refs_dir: &Path,
    reads: Reads,
) -> Option<(Option<Oid>, Option<String>)> {
    let text = reads.text(&head_dir.join("HEAD")).ok()?;
    let text = text.strip_suffix('\n').unwrap_or(&text);
    match text.strip_prefix("ref: ") {
        Some(target) => {
            let branch = target.strip_prefix("refs/heads/")?;
            if !valid_branch_name(branch) {
                return None;
            }
            Some((
                resolve_ref(refs_dir, target, reads)?,
                Some(branch.to_string()),
            ))
        }
        None => Some((Some(parse_oid(text.as_bytes())?), None)),
    }
}

/// The commit a ref names: `Some(None)` when the ref does not exist.
fn resolve_ref(git_dir: &Path, name: &str, reads: Reads) -> Option<Option<Oid>> {
    match reads.bytes(&git_dir.join(name)) {
        Ok(t) => return Some(Some(parse_oid(t.strip_suffix(b"\n").unwrap_or(&t))?)),
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(_) => return None,
    }
    let packed = match reads.text(&git_dir.join("packed-refs")) {
        Ok(t) => t,
        Err(e) if e.kind() == ErrorKind::NotFound => return Some(None),
        Err(_) => return None,
    };
    for line in packed.lines() {
        if let Some((oid, r)) = line.split_once(' ')
            && r == name
            && !line.starts_with('#')
            && !line.starts_with('^')
        {
            return Some(Some(parse_oid(oid.as_bytes())?));
        }
    }
    Some(None)
}

fn parse_oid(text: &[u8]) -> Option<Oid> {
    if text.len() != 40 {
        return None;
    }
    let mut oid = [0u8; 20];
    for (i, pair) in text.chunks_exact(2).enumerate() {
        let digit = |c: u8| (c as char).to_digit(16);
        oid[i] = (digit(pair[0])? * 16 + digit(pair[1])?) as u8;
    }
    Some(oid)
}

fn hex(oid: &Oid) -> String {
    oid.iter().map(|b| format!("{b:02x}")).collect()
}

/// The tree a commit names, read from a loose object, or (where reads are not kept small) a
/// pack.
fn commit_tree(git_dir: &Path, commit: &Oid, reads: Reads) -> Option<Oid> {
    // A commit is named by its content, so its tree never changes: asked after every worker
    // pass of every item, it is read once per commit.
    static TREES: std::sync::LazyLock<std::sync::Mutex<HashMap<Oid, Oid>>> =
        std::sync::LazyLock::new(Default::default);
    if let Some(tree) = TREES
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(commit)
        .copied()
    {
        return Some(tree);
    }
    let tree = read_commit_tree(git_dir, commit, reads)?;
    let mut trees = TREES.lock().unwrap_or_else(|p| p.into_inner());
    // Bounded: a run sees a few commits per repository.
    if trees.len() >= 65_536 {
        trees.clear();
    }
    trees.insert(*commit, tree);
    Some(tree)
}

fn read_commit_tree(git_dir: &Path, commit: &Oid, reads: Reads) -> Option<Oid> {
    // A pack's index can be large: read only where reads are not kept small.
    let (kind, body) =
        Objects::open(&git_dir.join("objects"), reads.reach())?.commit_or_tag(commit)?;
    if kind != Kind::Commit {
        return None;
    }
    parse_oid(body.strip_prefix(b"tree ")?.get(..40)?)
}

/// One index entry's path and the stat data git recorded for it.
struct Entry {
    path: Vec<u8>,
    oid: Oid,
    ctime: (u32, u32),
    mtime: (u32, u32),
    ino: u32,
    mode: u32,
    uid: u32,
    gid: u32,
    size: u32,
}

struct Index {
    entries: Vec<Entry>,
    /// The tree the index holds, when git's cached tree covers the whole index.
    tree: Option<Oid>,
    /// When the index file was last written: entries changed at or after it are racy.
    written: (u32, u32),
}

impl Index {
    /// The index of a repository; an absent file is an empty index. `None` for anything this
    /// reader does not fully understand.
    fn read(git_dir: &Path, reads: Reads) -> Option<Index> {
        Index::read_file(&git_dir.join("index"), reads)
    }

    /// [`Index::read`], of the index file at `path`.
    fn read_file(path: &Path, reads: Reads) -> Option<Index> {
        let data = match reads.bytes(path) {
            Ok(d) => d,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Some(Index {
                    entries: Vec::new(),
                    tree: Some(EMPTY_TREE),
                    written: (0, 0),
                });
            }
            Err(_) => return None,
        };
        let meta = std::fs::metadata(path).ok()?;
        let written = (meta.mtime() as u32, meta.mtime_nsec() as u32);
        let mut index = parse(&data, written)?;
        if index.entries.is_empty() {
            index.tree = Some(EMPTY_TREE);
        }
        Some(index)
    }

    /// Whether every entry's file is still exactly as the index recorded it.
    fn worktree_matches(&self, top: &Path) -> bool {
        self.entries.iter().all(|e| {
            let Ok(m) = std::fs::symlink_metadata(top.join(OsStr::from_bytes(&e.path))) else {
                return false;
            };
            let kind = match e.mode >> 12 {
                0o10 => m.file_type().is_file() && (e.mode & 0o100 != 0) == (m.mode() & 0o100 != 0),
                0o12 => m.file_type().is_symlink(),
                _ => false,
            };
            // Without nanoseconds in the index (a git built without them), seconds decide.
            let nanos = e.mtime.1 != 0 || e.ctime.1 != 0;
            let at = |sec: i64, nsec: i64| (sec as u32, if nanos { nsec as u32 } else { 0 });
            let mtime = at(m.mtime(), m.mtime_nsec());
            let written = (self.written.0, if nanos { self.written.1 } else { 0 });
            kind && mtime == e.mtime
                && at(m.ctime(), m.ctime_nsec()) == e.ctime
                && m.ino() as u32 == e.ino
                && m.uid() == e.uid
                && m.gid() == e.gid
                && m.size() as u32 == e.size
                && e.mtime < written
        })
    }
}

/// Parse an index file (versions 2 to 4).
fn parse(data: &[u8], written: (u32, u32)) -> Option<Index> {
    let u32_at = |i: usize| -> Option<u32> {
        Some(u32::from_be_bytes(data.get(i..i + 4)?.try_into().ok()?))
    };
    if data.get(..4)? != b"DIRC" || data.len() < 12 + 20 {
        return None;
    }
    let version = u32_at(4)?;
    if !(2..=4).contains(&version) {
        return None;
    }
    let count = u32_at(8)? as usize;
    let end = data.len() - 20;
    // The count is the file's word: no more entries are made room for than its bytes can hold
    // (every entry takes at least 62).
    let mut entries: Vec<Entry> = Vec::with_capacity(count.min(end.saturating_sub(12) / 62));
    let mut i = 12;
    for _ in 0..count {
        let start = i;
        let flags = u16::from_be_bytes(data.get(i + 60..i + 62)?.try_into().ok()?);
        let mut name_at = i + 62;
        // Assume-valid, an extended entry (skip-worktree, intent-to-add) or a merge stage:
        // left to git.
        if flags & 0xf000 != 0 {
            return None;
        }
        let mode = u32_at(i + 24)?;
        if !matches!(mode >> 12, 0o10 | 0o12) {
            return None;
        }
        let path = if version == 4 {
            let prev: &[u8] = entries.last().map_or(&[], |e| &e.path);
            let strip = varint(data, &mut name_at)?;
            let keep = prev.len().checked_sub(strip)?;
            let len = data.get(name_at..end)?.iter().position(|&b| b == 0)?;
            let mut path = prev[..keep].to_vec();
            path.extend_from_slice(&data[name_at..name_at + len]);
            i = name_at + len + 1;
            path
        } else {
            let len = data.get(name_at..end)?.iter().position(|&b| b == 0)?;
            let path = data[name_at..name_at + len].to_vec();
            // Entries are padded with 1 to 8 NULs to a multiple of eight bytes.
            i = start + ((62 + len + 8) & !7);
            path
        };
        if path.is_empty() || i > end {
            return None;
        }
        entries.push(Entry {
            path,
            oid: data.get(start + 40..start + 60)?.try_into().ok()?,
            ctime: (u32_at(start)?, u32_at(start + 4)?),
            mtime: (u32_at(start + 8)?, u32_at(start + 12)?),
            ino: u32_at(start + 20)?,
            mode,
            uid: u32_at(start + 28)?,
            gid: u32_at(start + 32)?,
            size: u32_at(start + 36)?,
        });
    }
    let mut tree = None;
    while i < end {
        let sig = data.get(i..i + 4)?;
        let len = u32_at(i + 4)? as usize;
        let body = data.get(i + 8..(i + 8).checked_add(len)?)?;
        match sig {
            b"TREE" => tree = root_tree(body),
            // A lowercase signature is an extension git requires readers to understand
            // (a split index, a sparse index): not this one.
            [c, ..] if c.is_ascii_lowercase() => return None,
            _ => {}
        }
        i += 8 + len;
    }
    (i == end).then_some(Index {
        entries,
        tree,
        written,
    })
}

/// The root of a cached tree: `None` when it was invalidated since it was computed.
fn root_tree(body: &[u8]) -> Option<Oid> {
    // "<path>\0<entry count> <subtrees>\n<oid>", the root first with an empty path.
    let rest = body.strip_prefix(b"\0")?;
    let nl = rest.iter().position(|&b| b == b'\n')?;
    let counts = std::str::from_utf8(&rest[..nl]).ok()?;
    let entries: i64 = counts.split(' ').next()?.parse().ok()?;
    if entries < 0 {
        return None;
    }
    rest.get(nl + 1..nl + 21)?.try_into().ok()
}

/// git's offset varint (index version 4 path prefixes).
fn varint(data: &[u8], at: &mut usize) -> Option<usize> {
    let mut c = *data.get(*at)?;
    *at += 1;
    let mut value = usize::from(c & 0x7f);
    while c & 0x80 != 0 {
        c = *data.get(*at)?;
        *at += 1;
        value = value.checked_add(1)?.checked_mul(128)? | usize::from(c & 0x7f);
    }
    Some(value)
}

mod objects;
mod trees;
mod untracked;

/// `git write-tree` with `GIT_INDEX_FILE=index` in the checkout at `dir`, in process: the tree
/// the index holds, its trees written to the repository's objects. `None`: ask git.
pub(crate) fn write_index_tree(dir: &Path, index: &Path) -> Option<String> {
    let objects = objects_of(dir)?;
    let index = Index::read_file(index, Reads::All)?;
    let entries: Vec<trees::Entry<'_>> = index
        .entries
        .iter()
        .map(|e| (e.path.as_slice(), e.mode, e.oid))
        .collect();
    let store = Objects::open(&objects, Reach::All)?;
    trees::write_tree(&entries, &objects, &|oid| Some(store.contains(oid)))
}

/// An object of `kind` (`commit`) with `body`, written to the objects of the checkout at `dir`
/// unless there already; its name. `None`: ask git.
pub(crate) fn write_object(dir: &Path, kind: &str, body: &[u8]) -> Option<String> {
    let objects = objects_of(dir)?;
    let store = Objects::open(&objects, Reach::All)?;
    trees::write_object(&objects, kind, body, &|oid| Some(store.contains(oid)))
}

/// The object folder of the checkout at `dir`, where this reader understands the repository.
fn objects_of(dir: &Path) -> Option<PathBuf> {
    Some(git_dirs(dir)?.1.join("objects"))
}

/// The own git dir and the common one of the checkout at `dir` (the same folder but for a
/// linked worktree), where this reader understands the repository ([`plain_checkout`],
/// [`linked_checkout`]).
pub(crate) fn git_dirs(dir: &Path) -> Option<(PathBuf, PathBuf)> {
    match plain_checkout(dir, Reads::Small) {
        Some((_, git_dir)) => Some((git_dir.clone(), git_dir)),
        None => linked_checkout(dir, Reads::Small).map(|(_, own, common)| (own, common)),
    }
}

/// The commit the ref `name` of `git_dir` names, loose or packed: `Some(None)` when there is no
/// such ref, `None` when it cannot be read here (a symbolic ref, say).
pub(crate) fn ref_target(git_dir: &Path, name: &str) -> Option<Option<String>> {
    Some(resolve_ref(git_dir, name, Reads::All)?.map(|oid| hex(&oid)))
}

#[cfg(test)]
mod tests;
#[cfg(test)]
#[expect(
    unsafe_code,
    reason = "the tests' allocator, which measures what a parser asks for"
)]
mod untrusted_bytes;
