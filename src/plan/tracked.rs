//! A tracker's items as data: what a source printed, what reading it gave, and where an item
//! of it is in the plan. Nothing here reads a source or routes an item (`source` does): the
//! plan's model names this, and `source` names both.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// One item of a tracker: an issue, a ticket, a task.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SourceItem {
    /// Stable within the source (an issue's number); the item's id is `<source>-<id>`.
    pub id: Id,
    pub title: String,
    #[serde(default)]
    pub body: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<String>,
    /// Oldest first, as the tracker gives them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub comments: Vec<Comment>,
    /// The declared repository the item belongs to, when the tracker says (one tracker for
    /// several repositories).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
    /// Values for `{item.<var>}`, over the source's own `vars`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub vars: BTreeMap<String, String>,
}

/// An id as a tracker gives it: a number or a string.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum Id {
    Number(u64),
    Text(String),
}

impl std::fmt::Display for Id {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Id::Number(n) => write!(f, "{n}"),
            Id::Text(s) => f.write_str(s),
        }
    }
}

/// A comment on an item.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Comment {
    pub author: String,
    /// When it was written (RFC 3339).
    #[serde(default)]
    pub at: String,
    pub body: String,
}

/// What reading one source gave, for the plan.
#[derive(Clone, Debug)]
pub struct SourceRead {
    /// The source's name.
    pub name: String,
    /// Its items, or why it could not be read.
    pub items: Result<Vec<SourceItem>, String>,
    /// What it gave the last time a run read it (from the ledger), and how many.
    pub previous: Vec<SourceItem>,
    /// Its items whose pull requests runner opened and has not seen merged or closed (from the
    /// ledger): followed whether or not the source lists them now.
    pub followed: Vec<Followed>,
}

/// An item of a source whose pull request is followed until it is merged or closed.
#[derive(Clone, Debug, Default)]
pub struct Followed {
    pub repo: String,
    /// The plan's id of the item (`<source>-<id>`).
    pub item: String,
    pub branch: String,
    /// The tracker's id, title and link of the item.
    pub source_id: String,
    pub title: String,
    pub url: Option<String>,
}

/// Where an item of a source is in the plan: the source, the tracker's id, and what the worker
/// is told of it (`RUNNER_BRIEF`).
#[derive(Clone, Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SourceRef {
    /// The source's name.
    pub name: String,
    /// The tracker's id of the item.
    pub id: String,
    pub title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The whole item, for the brief; not part of the plan's JSON.
    #[serde(skip)]
    #[schemars(skip)]
    pub item: Option<Arc<SourceItem>>,
    /// The source no longer lists the item (its issue was closed, or its label taken off): its
    /// pull request is still followed until merged or closed, but no review round is made.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unlisted: bool,
}
