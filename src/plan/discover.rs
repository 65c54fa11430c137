//! Discovery: the files a `discover` rule matches in a repository become items, each with what
//! its branch already holds (the commit that closed it, the files it touched).

use super::model::{ItemPlan, Origin};
use super::repos::Located;
use crate::git::{self};
use crate::manifest::compile_glob;
use crate::manifest::load::valid_item_id;
use crate::manifest::template;
use crate::manifest::{LoadedManifest, Problem};
use crate::support::text::printable;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// The matches of rule `di` an item on a work branch will see: on the base, the checkout's
/// matches that are committed there (edited ones kept, with a note); off it, the base's own
/// matching files. What the item would not see is named, with the fix.
fn seen_on_branch(
    l: &Located,
    di: usize,
    glob: &str,
    matcher: &globset::GlobMatcher,
    matches: Vec<String>,
    committed: &mut Committed,
    notes: &mut Vec<String>,
) -> Vec<String> {
    let (root, _) = glob_root(glob);
    let roots = vec![root.to_string_lossy().replace('\\', "/")];
    let base = committed.base.clone().unwrap_or_else(|| "HEAD".into());
    let files = match committed.files(&l.path, &roots) {
        Ok(None) => return matches,
        Ok(Some(f)) => f,
        Err(e) => {
            if !matches.is_empty() {
                notes.push(format!(
                    "`discover[{di}]` in repository `{}`: {e}; its {} match{} are not run",
                    l.name,
                    matches.len(),
                    if matches.len() == 1 { "" } else { "es" }
                ));
            }
            return Vec::new();
        }
    };
    let candidates: Vec<String> = if files.on_base {
        matches
    } else {
        let mut c: Vec<String> = files
            .tree
            .keys()
            .filter(|p| matcher.is_match(p.as_str()))
            .cloned()
            .collect();
        c.sort();
        c
    };
    let mut kept = Vec::new();
    let mut absent = Vec::new();
    for rel in candidates {
        if files.tree.get(&rel) == Some(&true) {
            notes.push(format!(
                "`discover[{di}]` in repository `{}`: `{}` is a symbolic link in `{base}`; skipped",
                l.name,
                printable(&rel)
            ));
            continue;
        }
        match files.seen(&rel) {
            Seen::Committed => kept.push(rel),
            Seen::Edited => {
                notes.push(format!(
                    "`discover[{di}]` in repository `{}`: `{}` has edits that are not committed; its item works on a branch from `{base}` and sees the committed version: commit them",
                    l.name,
                    printable(&rel)
                ));
                kept.push(rel);
            }
            Seen::Absent => absent.push(rel),
        }
    }
    if !absent.is_empty() {
        let shown: Vec<String> = absent
            .iter()
            .take(5)
            .map(|p| format!("`{}`", printable(p)))
            .collect();
        let more = absent.len().saturating_sub(5);
        notes.push(format!(
            "`discover[{di}]` in repository `{}`: {}{} {} not committed on `{base}`, from which {} work branch{} made, so {} not run: commit {} (`git add` and `git commit` in `{}`)",
            l.name,
            shown.join(", "),
            if more > 0 { format!(" and {more} more") } else { String::new() },
            if absent.len() == 1 { "is" } else { "are" },
            if absent.len() == 1 { "its" } else { "their" },
            if absent.len() == 1 { " is" } else { "es are" },
            if absent.len() == 1 { "it is" } else { "they are" },
            if absent.len() == 1 { "it" } else { "them" },
            l.path.display()
        ));
    }
    kept
}

/// Literal folder prefix of a glob, and how deep below it a match can be (`None`: unbounded).
fn glob_root(glob: &str) -> (PathBuf, Option<usize>) {
    let mut base = PathBuf::new();
    let mut depth = 0;
    let mut unbounded = false;
    let mut in_pattern = false;
    let segs: Vec<&str> = glob.split('/').filter(|s| !s.is_empty()).collect();
    for (i, seg) in segs.iter().enumerate() {
        let last = i + 1 == segs.len();
        if !in_pattern && !last && !seg.contains(['*', '?', '[', '{']) {
            base.push(seg);
        } else {
            in_pattern = true;
            depth += 1;
            if seg.contains("**") {
                unbounded = true;
            }
        }
    }
    (base, (!unbounded).then_some(depth))
}

/// What an item on a work branch will see of a repository: the committed tree of the base its
/// worktree is made from, not the checkout's files. Asked of git once, only when the checkout's
/// own files cannot prove it is that tree (clean, on the base).
pub(super) struct Committed {
    /// The run's handle on the repositories' git folders.
    git: crate::git::Repos,
    /// The base new work branches are forked from (`None`: HEAD).
    base: Option<String>,
    /// The branch the checkout is on.
    head_branch: Option<String>,
    /// `Some(None)`: the checkout is proven to be its HEAD commit, on the base; `Some(Some(..))`:
    /// the base's files and the checkout's uncommitted ones, as git gave them; `None`: not yet
    /// asked.
    view: Option<Option<CommittedFiles>>,
}

pub(super) struct CommittedFiles {
    /// The base's files (`true`: a symbolic link).
    tree: HashMap<String, bool>,
    /// The checkout's files that differ from its HEAD commit, when the checkout is on the
    /// base; empty otherwise.
    uncommitted: std::collections::HashSet<String>,
    /// The checkout is on the base: its files are the candidates.
    on_base: bool,
}

/// How a file a `discover` rule matched stands for an item on a work branch.
enum Seen {
    /// The item sees it as it is here.
    Committed,
    /// Committed, but with edits in the checkout the item will not see.
    Edited,
    /// Not in the base's tree: the item would not see it.
    Absent,
}

impl Committed {
    pub(super) fn new(
        git: &crate::git::Repos,
        base: Option<String>,
        head_branch: Option<String>,
    ) -> Self {
        Committed {
            git: git.clone(),
            base,
            head_branch,
            view: None,
        }
    }

    fn on_base(&self) -> bool {
        self.base.is_none() || self.base == self.head_branch
    }

    /// The base's files and what the checkout holds uncommitted, under `roots`; `None` when the
    /// checkout is proven to be the base's tree already.
    fn files(&mut self, dir: &Path, roots: &[String]) -> Result<Option<&CommittedFiles>, String> {
        if self.view.is_none() {
            let on_base = self.on_base();
            if on_base && git::proven_clean(&self.git, dir).is_some() {
                self.view = Some(None);
            } else {
                let rev = self.base.clone().unwrap_or_else(|| "HEAD".into());
                let tree = git::tree_files(&self.git, dir, &rev, roots)
                    .map_err(|e| format!("cannot read the files of `{rev}`: {e}"))?
                    .into_iter()
                    .map(|f| (f.path, f.symlink))
                    .collect();
                let uncommitted = if on_base {
                    git::uncommitted_under(&self.git, dir, roots)
                        .map_err(|e| format!("cannot tell which files are committed: {e}"))?
                } else {
                    Default::default()
                };
                self.view = Some(Some(CommittedFiles {
                    tree,
                    uncommitted,
                    on_base,
                }));
            }
        }
        Ok(self.view.as_ref().and_then(Option::as_ref))
    }
}

impl CommittedFiles {
    fn seen(&self, rel: &str) -> Seen {
        match (self.tree.contains_key(rel), self.uncommitted.contains(rel)) {
            (false, _) => Seen::Absent,
            (true, true) => Seen::Edited,
            (true, false) => Seen::Committed,
        }
    }
}

/// Discover items in one repository: every file matching a `discover` glob becomes an item.
/// Returns how many files each rule matched; a folder it could not read is noted. A rule whose
/// items work on a branch matches what their worktree will hold — the committed files of the
/// base — and names a match the checkout has that the base does not (untracked, ignored, or
/// only staged): the fix is to commit it.
pub(super) fn discover(
    loaded: &LoadedManifest,
    l: &Located,
    items: &mut Vec<ItemPlan>,
    problems: &mut Vec<Problem>,
    notes: &mut Vec<String>,
    committed: &mut Committed,
) -> Vec<usize> {
    let mut matched = vec![0; loaded.manifest.discover.len()];
    let repo_root = std::fs::canonicalize(&l.path).ok();
    let mut ids: HashMap<String, String> = items
        .iter()
        .map(|i| (i.id.clone(), "an explicit item".to_string()))
        .collect();
    for (di, d) in loaded.manifest.discover.iter().enumerate() {
        let Ok(matcher) = compile_glob(&d.glob) else {
            continue;
        };
        let Some(mut matches) = walk(l, di, &d.glob, &matcher, repo_root.as_deref(), notes) else {
            continue;
        };
        // What the rule matched here, committed or not: a rule that matches nothing anywhere
        // is warned of apart from files it matched that are not committed.
        matched[di] = matches.len();
        matches.sort();
        if d.branch.is_some() {
            matches = seen_on_branch(l, di, &d.glob, &matcher, matches, committed, notes);
        }
        let rule = Rule { l, di, d };
        for rel in matches {
            if let Some(item) = rule.item(rel, &mut ids, problems) {
                items.push(item);
            }
        }
    }
    matched
}

/// The files of the repository rule `di`'s glob matches, repository-relative with `/`; `None`
/// when its walk starts in no folder of the repository (a folder it leads outside through a
/// link is noted). Discovery never leaves the repository: a matching link that resolves outside
/// it (or nowhere) is noted and skipped.
fn walk(
    l: &Located,
    di: usize,
    glob: &str,
    matcher: &globset::GlobMatcher,
    repo_root: Option<&Path>,
    notes: &mut Vec<String>,
) -> Option<Vec<String>> {
    let (base, depth) = glob_root(glob);
    let root = l.path.join(&base);
    if !root.is_dir() {
        return None;
    }
    // The folder the walk starts from is inside the repository, or nothing is matched under
    // it: a tracked link to a folder elsewhere (`tasks -> /x/tasks`) would make files outside
    // the repository work items.
    if let Some(top) = repo_root
        && !std::fs::canonicalize(&root).is_ok_and(|r| r.starts_with(top))
    {
        notes.push(format!(
            "`discover[{di}]` in repository `{}`: `{}` leads outside the repository (a link); nothing under it is matched",
            l.name,
            printable(&base.to_string_lossy())
        ));
        return None;
    }
    let mut walker = walkdir::WalkDir::new(&root).min_depth(1);
    if let Some(depth) = depth {
        walker = walker.max_depth(depth);
    }
    let mut matches = Vec::new();
    let mut it = walker.into_iter();
    while let Some(entry) = it.next() {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                let at = e.path().unwrap_or(&root).display().to_string();
                notes.push(format!(
                    "`discover[{di}]` in repository `{}`: cannot read `{at}`: {e}",
                    l.name
                ));
                continue;
            }
        };
        if entry.file_type().is_dir() {
            if entry.file_name() == ".git" {
                it.skip_current_dir();
            }
            continue;
        }
        let Ok(rel) = entry.path().strip_prefix(&l.path) else {
            continue;
        };
        let rel = rel.to_string_lossy().replace('\\', "/");
        if !matcher.is_match(&rel) {
            continue;
        }
        if entry.path_is_symlink() {
            let inside = match (std::fs::canonicalize(entry.path()), repo_root) {
                (Ok(target), Some(root)) => target.starts_with(root),
                _ => false,
            };
            if !inside {
                notes.push(format!(
                    "`discover[{di}]` in repository `{}`: `{}` is a link that leads outside the repository; skipped",
                    l.name,
                    printable(&rel)
                ));
                continue;
            }
        }
        matches.push(rel);
    }
    Some(matches)
}

/// One `discover` rule in one repository.
struct Rule<'a> {
    l: &'a Located,
    di: usize,
    d: &'a crate::manifest::DiscoverSpec,
}

impl Rule<'_> {
    /// The item the matched file `rel` becomes: its id, vars and branch rendered from the
    /// rule's templates. `None`, with the problem recorded, when one cannot be or the id is
    /// invalid or taken (`ids`: each id taken so far, and by what).
    fn item(
        &self,
        rel: String,
        ids: &mut HashMap<String, String>,
        problems: &mut Vec<Problem>,
    ) -> Option<ItemPlan> {
        let (l, di, d) = (self.l, self.di, self.d);
        // A path is named in messages with its control characters escaped: a folder name can
        // hold a newline or a terminal escape.
        let shown = printable(&rel);
        let p = Path::new(&rel);
        let dir = p
            .parent()
            .map(|d| d.to_string_lossy().to_string())
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| ".".into());
        let name = p
            .file_name()
            .map(|f| f.to_string_lossy().to_string())
            .unwrap_or_default();
        let stem = p
            .file_stem()
            .map(|f| f.to_string_lossy().to_string())
            .unwrap_or_default();
        let parent = p
            .parent()
            .and_then(|d| d.file_name())
            .map(|f| f.to_string_lossy().to_string())
            .unwrap_or_else(|| l.name.clone());
        let lookup = |n: &str| -> Option<String> {
            match n {
                "repo" => Some(l.name.clone()),
                "match.path" => Some(rel.clone()),
                "match.dir" => Some(dir.clone()),
                "match.name" => Some(name.clone()),
                "match.stem" => Some(stem.clone()),
                "match.parent" => Some(parent.clone()),
                _ => None,
            }
        };
        let id = match template::render(&d.id, lookup) {
            Ok(id) => id,
            Err(e) => {
                problems.push(
                    Problem::new("invalid-template", format!("discover[{di}].id"), e).at(d.span),
                );
                return None;
            }
        };
        if !valid_item_id(&id) {
            problems.push(
                Problem::new(
                    "invalid-id",
                    format!("discover[{di}].id"),
                    format!("`{shown}` in repository `{}` yields the id `{}`, which is not a valid item id", l.name, printable(&id)),
                )
                .at(d.span),
            );
            return None;
        }
        if let Some(first) = ids.insert(id.clone(), format!("`{shown}`")) {
            problems.push(
                Problem::new(
                    "duplicate",
                    format!("discover[{di}].id"),
                    format!("`{shown}` in repository `{}` yields the id `{id}`, already taken by {first}", l.name),
                )
                .at(d.span)
                .help("make the `id` template distinguish these matches, e.g. with `{match.dir}`"),
            );
            return None;
        }
        let mut vars = BTreeMap::new();
        let mut ok = true;
        for (k, v) in &d.vars {
            match template::render(v, lookup) {
                Ok(s) => {
                    vars.insert(k.clone(), s);
                }
                Err(e) => {
                    problems.push(
                        Problem::new("invalid-template", format!("discover[{di}].vars.{k}"), e)
                            .at(d.span),
                    );
                    ok = false;
                }
            }
        }
        let branch = match &d.branch {
            Some(b) => {
                let rendered = template::render(b, |n| {
                    if n == "item" {
                        Some(id.clone())
                    } else {
                        lookup(n)
                    }
                });
                let branch = self.branch(rendered, &shown, problems);
                ok &= branch.is_some();
                branch
            }
            None => None,
        };
        ok.then(|| ItemPlan {
            branch,
            vars,
            matched: Some(rel.clone()),
            ..ItemPlan::new(l.name.clone(), id, Origin::Discovered)
        })
    }

    /// The rendered branch of the match `shown`, when git accepts it; else the problem recorded.
    fn branch(
        &self,
        rendered: Result<String, String>,
        shown: &str,
        problems: &mut Vec<Problem>,
    ) -> Option<String> {
        let (di, d) = (self.di, self.d);
        match rendered {
            Ok(b) if crate::support::refname::work_branch_problem(&b).is_none() => Some(b),
            Ok(b) => {
                problems.push(
                    Problem::new(
                        "invalid-branch",
                        format!("discover[{di}].branch"),
                        format!(
                            "`{shown}` yields branch `{}`, which git does not accept",
                            printable(&b)
                        ),
                    )
                    .at(d.span),
                );
                None
            }
            Err(e) => {
                problems.push(
                    Problem::new("invalid-template", format!("discover[{di}].branch"), e)
                        .at(d.span),
                );
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn glob_roots() {
        assert_eq!(
            glob_root("changes/*/proposal.md"),
            (PathBuf::from("changes"), Some(2))
        );
        assert_eq!(glob_root("docs/**/*.md"), (PathBuf::from("docs"), None));
        assert_eq!(glob_root("TODO.md"), (PathBuf::new(), Some(1)));
        assert_eq!(glob_root("a/b/c.md"), (PathBuf::from("a/b"), Some(1)));
    }
}
