//! Items from trackers: what a source's command printed (`runner.items/v1`), where each item
//! goes, and what becomes of a source that could not be read.
//!
//! A source is a command (the manifest's `sources`) that prints the tracker's open work as JSON.
//! Reading it is the session's (it runs a process and asks the ledger what the source gave
//! before); deciding here is pure: each item is routed to a declared repository — the one it
//! names, else the one a label of it maps to, else the source's own — and becomes an item of
//! the plan, or is held `unroutable`. A source that could not be read is never "nothing to do":
//! the items it gave last time are held `source-unreadable`.

use super::model::{ItemPlan, Origin};
use crate::manifest::SourceSpec;
use crate::vocab::{HoldReason, ItemState};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};

pub use super::tracked::{Comment, Followed, Id, SourceItem, SourceRead, SourceRef};
use std::sync::Arc;

/// The tag of the items a source prints.
pub const ITEMS_SCHEMA: &str = "runner.items/v1";

/// What a source's command prints: `{"schema": "runner.items/v1", "items": [...]}`, every open
/// item of the tracker (the command follows the tracker's pages to the end).
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ItemsDoc {
    /// Always `runner.items/v1`.
    pub schema: String,
    pub items: Vec<SourceItem>,
}

/// The marker runner's own write-back comments carry, so that they are never read back as
/// grooming.
pub const WRITEBACK_MARKER: &str = "<!-- runner:writeback";

impl SourceItem {
    /// The comments a person wrote: runner's own write-back comments left out.
    pub fn grooming(&self) -> impl Iterator<Item = &Comment> {
        self.comments
            .iter()
            .filter(|c| !c.body.contains(WRITEBACK_MARKER))
    }
}

/// Read a source's output. `Err` says what is wrong with it, with the line and column.
pub fn parse(text: &str) -> Result<Vec<SourceItem>, String> {
    let doc: ItemsDoc = serde_json::from_str(text).map_err(|e| {
        format!(
            "its output is not `{ITEMS_SCHEMA}` JSON (line {}, column {}): {e}",
            e.line(),
            e.column()
        )
    })?;
    if doc.schema != ITEMS_SCHEMA {
        return Err(format!(
            "its output says schema `{}`; runner reads `{ITEMS_SCHEMA}`",
            doc.schema
        ));
    }
    let mut seen = HashSet::new();
    for it in &doc.items {
        if !seen.insert(it.id.to_string()) {
            return Err(format!("it gives item id `{}` twice", it.id));
        }
    }
    Ok(doc.items)
}

/// The items of every source, routed: those of a declared repository, and those held
/// (`unroutable`, `source-unreadable`), with what the user should hear.
#[derive(Debug, Default)]
pub(super) struct Routed {
    /// Pending items by repository name, in the order the sources gave them.
    pub(super) by_repo: BTreeMap<String, Vec<ItemPlan>>,
    /// Items that are held whatever their repository's state.
    pub(super) held: Vec<ItemPlan>,
    pub(super) warnings: Vec<String>,
    pub(super) unreadable: Vec<super::model::UnreadableSource>,
}

/// Route every source's items. `repos` are the names of the located repositories.
pub(super) fn route(specs: &[SourceSpec], reads: &[SourceRead], repos: &[&str]) -> Routed {
    let mut out = Routed::default();
    for spec in specs {
        let Some(read) = reads.iter().find(|r| r.name == spec.name) else {
            continue;
        };
        match &read.items {
            Ok(items) => {
                if items.is_empty() && !read.previous.is_empty() {
                    out.warnings.push(format!(
                        "source `{}` gave no item, where the last run read {} from it; if that is not expected, check its command",
                        spec.name,
                        read.previous.len()
                    ));
                }
                for it in items {
                    place(spec, it, repos, &mut out);
                }
                let listed: HashSet<String> = items.iter().map(|i| i.id.to_string()).collect();
                let followed: Vec<&Followed> = read
                    .followed
                    .iter()
                    .filter(|f| !listed.contains(&f.source_id))
                    .collect();
                for f in &followed {
                    let mut plan = unlisted(spec, f);
                    plan.state = ItemState::Done;
                    plan.detail = Some(format!(
                        "source `{}` no longer lists it; its pull request is followed until merged or closed",
                        spec.name
                    ));
                    out.held.push(plan);
                }
                // What the source gave last and no longer lists, with nothing to follow: a
                // closed issue whose item had not run is dropped, and said so.
                let gone: Vec<String> = read
                    .previous
                    .iter()
                    .filter(|p| !listed.contains(&p.id.to_string()))
                    .filter(|p| !followed.iter().any(|f| f.source_id == p.id.to_string()))
                    .map(|p| format!("`{}`", item_id(spec, p)))
                    .collect();
                if !gone.is_empty() {
                    out.warnings.push(format!(
                        "source `{}` no longer lists {} item{} it gave last (closed, or its label taken off): {}; dropped from the queue",
                        spec.name,
                        gone.len(),
                        if gone.len() == 1 { "" } else { "s" },
                        gone.join(", ")
                    ));
                }
            }
            Err(why) => {
                let given: HashSet<String> =
                    read.previous.iter().map(|i| i.id.to_string()).collect();
                let followed: Vec<&Followed> = read
                    .followed
                    .iter()
                    .filter(|f| !given.contains(&f.source_id))
                    .collect();
                let held = read.previous.len() + followed.len();
                out.unreadable.push(super::model::UnreadableSource {
                    name: spec.name.clone(),
                    detail: why.clone(),
                    held,
                });
                for f in followed {
                    let mut plan = unlisted(spec, f);
                    plan.state = ItemState::Held;
                    plan.reason = Some(HoldReason::SourceUnreadable);
                    plan.detail = Some(format!("source `{}`: {why}", spec.name));
                    out.held.push(plan);
                }
                out.warnings.push(match held {
                    0 => format!(
                        "source `{}` could not be read: {why}; no earlier run read items from it",
                        spec.name
                    ),
                    n => format!(
                        "source `{}` could not be read: {why}; the {n} item{} it gave last {} held `source-unreadable`",
                        spec.name,
                        if n == 1 { "" } else { "s" },
                        if n == 1 { "is" } else { "are" }
                    ),
                });
                for it in &read.previous {
                    let mut plan = item_plan(spec, it, destination(spec, it, repos).ok());
                    plan.state = ItemState::Held;
                    plan.reason = Some(HoldReason::SourceUnreadable);
                    plan.detail = Some(format!("source `{}`: {why}", spec.name));
                    out.held.push(plan);
                }
            }
        }
    }
    out
}

/// One read item into the plan: to its repository's pending items, or held `unroutable`.
fn place(spec: &SourceSpec, it: &SourceItem, repos: &[&str], out: &mut Routed) {
    let id = item_id(spec, it);
    if !crate::manifest::load::valid_item_id(&id) {
        out.warnings.push(format!(
            "source `{}` gave an item whose id `{}` runner cannot use (letters, digits, `.`, `_`, `/`, `-`); skipped",
            spec.name,
            crate::support::text::printable(&id)
        ));
        return;
    }
    match destination(spec, it, repos) {
        Ok(repo) => {
            let plan = item_plan(spec, it, Some(repo.clone()));
            out.by_repo.entry(repo).or_default().push(plan);
        }
        Err(why) => {
            let mut plan = item_plan(spec, it, None);
            plan.state = ItemState::Held;
            plan.reason = Some(HoldReason::Unroutable);
            plan.detail = Some(why);
            out.held.push(plan);
        }
    }
}

/// The repository an item goes to: the one it names, else the one its labels in the source's
/// `labels` map to (labels that map to two repositories are an error: which was meant is not
/// guessed), else the source's `repo`. `Err` says why none.
fn destination(spec: &SourceSpec, it: &SourceItem, repos: &[&str]) -> Result<String, String> {
    let declared = |name: &str| repos.contains(&name);
    if let Some(r) = &it.repo {
        return if declared(r) {
            Ok(r.clone())
        } else {
            Err(format!("it names repository `{r}`, which is not declared"))
        };
    }
    let mapped: Vec<(&String, &String)> = it
        .labels
        .iter()
        .filter_map(|l| spec.labels.get(l).map(|r| (l, r)))
        .collect();
    let mut targets: Vec<&String> = mapped.iter().map(|(_, r)| *r).collect();
    targets.sort();
    targets.dedup();
    if targets.len() > 1 {
        // Which one was meant is not runner's to guess.
        let named: Vec<String> = mapped
            .iter()
            .map(|(l, r)| format!("`{l}` to `{r}`"))
            .collect();
        return Err(format!(
            "its labels map it to {} repositories: {}",
            targets.len(),
            named.join(", ")
        ));
    }
    if let Some(&(label, r)) = mapped.first() {
        return if declared(r) {
            Ok(r.clone())
        } else {
            Err(format!(
                "its label `{label}` maps to repository `{r}`, which is not declared"
            ))
        };
    }
    match &spec.repo {
        Some(r) if declared(r) => Ok(r.clone()),
        Some(r) => Err(format!(
            "the source's repository `{r}` is not declared"
        )),
        None => Err(
            "it names no repository, carries none of the source's `labels`, and the source has no `repo`"
                .into(),
        ),
    }
}

/// The plan's item for a followed item its source no longer lists.
fn unlisted(spec: &SourceSpec, f: &Followed) -> ItemPlan {
    ItemPlan {
        branch: Some(f.branch.clone()),
        source: Some(Box::new(SourceRef {
            name: spec.name.clone(),
            id: f.source_id.clone(),
            title: f.title.clone(),
            url: f.url.clone(),
            item: None,
            unlisted: true,
        })),
        ..ItemPlan::new(f.repo.clone(), f.item.clone(), Origin::Source)
    }
}

/// `<source>-<id>`.
fn item_id(spec: &SourceSpec, it: &SourceItem) -> String {
    format!("{}-{}", spec.name, it.id)
}

/// The plan's item for a source's item, pending, in `repo` (`-` for none): its branch from the
/// source's template, its vars the source's own under the item's, then `source`, `source_id`,
/// `title` and `url`.
fn item_plan(spec: &SourceSpec, it: &SourceItem, repo: Option<String>) -> ItemPlan {
    let id = item_id(spec, it);
    let repo = repo.unwrap_or_else(|| "-".into());
    let branch = spec.branch.as_ref().map(|b| {
        crate::manifest::template::render(b, |name| match name {
            "repo" => Some(repo.clone()),
            "item" => Some(id.clone()),
            _ => None,
        })
        .unwrap_or_else(|_| format!("runner/{id}"))
    });
    let mut vars = spec.vars.clone();
    vars.extend(it.vars.clone());
    ItemPlan {
        branch,
        vars,
        source: Some(Box::new(SourceRef {
            name: spec.name.clone(),
            id: it.id.to_string(),
            title: it.title.clone(),
            url: it.url.clone(),
            item: Some(Arc::new(it.clone())),
            unlisted: false,
        })),
        ..ItemPlan::new(repo, id, Origin::Source)
    }
}

/// The brief a worker gets for a source's item (`RUNNER_BRIEF`): the title, the link, the body,
/// then every comment a person wrote, oldest first, with its author and time — so a later
/// correction reads after, and over, the note it corrects.
pub fn brief(it: &SourceItem) -> String {
    let mut out = format!("# {}\n\n", it.title.trim());
    if let Some(u) = &it.url {
        out.push_str(&format!("{u}\n\n"));
    }
    if !it.labels.is_empty() {
        out.push_str(&format!("Labels: {}\n\n", it.labels.join(", ")));
    }
    let body = it.body.trim();
    out.push_str(if body.is_empty() {
        "(no description)"
    } else {
        body
    });
    out.push('\n');
    let comments: Vec<&Comment> = it.grooming().collect();
    if !comments.is_empty() {
        out.push_str(&format!(
            "\n## {} comment{}, oldest first (where a later one corrects an earlier one, the later one stands)\n",
            comments.len(),
            if comments.len() == 1 { "" } else { "s" }
        ));
        for c in comments {
            let at = if c.at.is_empty() {
                String::new()
            } else {
                format!(", {}", c.at)
            };
            out.push_str(&format!("\n### {}{at}\n\n{}\n", c.author, c.body.trim()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> SourceSpec {
        SourceSpec {
            name: "gh".into(),
            run: crate::manifest::CommandSpec::Shell("true".into()),
            timeout: None,
            repo: Some("api".into()),
            labels: BTreeMap::from([("area:web".to_string(), "web".to_string())]),
            branch: Some("runner/{item}".into()),
            vars: BTreeMap::new(),
            writeback: None,
            check: None,
            span: Default::default(),
        }
    }

    fn item(id: u64, labels: &[&str], repo: Option<&str>) -> SourceItem {
        SourceItem {
            id: Id::Number(id),
            title: format!("issue {id}"),
            body: String::new(),
            url: None,
            labels: labels.iter().map(|l| l.to_string()).collect(),
            comments: Vec::new(),
            repo: repo.map(str::to_string),
            vars: BTreeMap::new(),
        }
    }

    #[test]
    fn an_item_goes_where_it_names_then_by_label_then_to_the_source() {
        let s = spec();
        let repos = ["api", "web"];
        assert_eq!(
            destination(&s, &item(1, &[], None), &repos),
            Ok("api".into())
        );
        assert_eq!(
            destination(&s, &item(2, &["bug", "area:web"], None), &repos),
            Ok("web".into())
        );
        assert_eq!(
            destination(&s, &item(3, &["area:web"], Some("api")), &repos),
            Ok("api".into())
        );
        assert!(destination(&s, &item(4, &[], Some("docs")), &repos).is_err());
        let mut bare = spec();
        bare.repo = None;
        assert!(destination(&bare, &item(5, &[], None), &repos).is_err());
    }

    #[test]
    fn an_unreadable_source_holds_what_it_gave_last_and_an_empty_one_is_warned_of() {
        let s = spec();
        let read = SourceRead {
            name: "gh".into(),
            items: Err("exit 1".into()),
            previous: vec![item(7, &[], None), item(8, &[], None)],
            followed: Vec::new(),
        };
        let r = route(std::slice::from_ref(&s), &[read], &["api"]);
        assert!(r.by_repo.is_empty());
        assert_eq!(r.held.len(), 2);
        assert!(
            r.held
                .iter()
                .all(|i| i.reason == Some(HoldReason::SourceUnreadable))
        );
        assert_eq!(r.held[0].id, "gh-7");
        assert_eq!(r.held[0].repo, "api");
        let empty = SourceRead {
            name: "gh".into(),
            items: Ok(Vec::new()),
            previous: vec![item(7, &[], None)],
            followed: Vec::new(),
        };
        let r = route(&[s], &[empty], &["api"]);
        assert!(r.warnings[0].contains("gave no item"), "{:?}", r.warnings);
    }

    #[test]
    fn the_brief_keeps_comments_in_order_and_leaves_runners_own_out() {
        let mut it = item(1, &["bug"], None);
        it.body = "The login loops.".into();
        it.comments = vec![
            Comment {
                author: "ann".into(),
                at: "2026-01-01T00:00:00Z".into(),
                body: "Use the session cookie.".into(),
            },
            Comment {
                author: "runner".into(),
                at: "2026-01-02T00:00:00Z".into(),
                body: format!("{WRITEBACK_MARKER} key=x -->\nStarted."),
            },
            Comment {
                author: "bob".into(),
                at: "2026-01-03T00:00:00Z".into(),
                body: "Correction: not the cookie, the token.".into(),
            },
        ];
        let b = brief(&it);
        let ann = b.find("Use the session cookie").unwrap();
        let bob = b.find("Correction").unwrap();
        assert!(ann < bob, "{b}");
        assert!(!b.contains("Started."), "{b}");
        assert!(b.contains("### bob, 2026-01-03T00:00:00Z"), "{b}");
    }

    #[test]
    fn output_is_checked_and_named_where_it_is_wrong() {
        assert!(
            parse(r#"{"schema":"runner.items/v1","items":[]}"#)
                .unwrap()
                .is_empty()
        );
        let e =
            parse("{\"schema\":\"runner.items/v1\",\n\"items\":[{\"title\":\"x\"}]}").unwrap_err();
        assert!(e.contains("line 2"), "{e}");
        assert!(
            parse(r#"{"schema":"other/v1","items":[]}"#)
                .unwrap_err()
                .contains("other/v1")
        );
        let twice =
            r#"{"schema":"runner.items/v1","items":[{"id":1,"title":"a"},{"id":"1","title":"b"}]}"#;
        assert!(parse(twice).unwrap_err().contains("twice"));
    }
}
