//! An item's pull request as data: what the plan and the reports say of it and what review
//! feedback it holds. Nothing here reads a forge or a plan (`pull` does): the plan's model names
//! this, and `pull` names both.

use serde::{Deserialize, Serialize};

/// A reviewer's comment, at a line of a file when it was written there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviewComment {
    pub author: String,
    #[serde(default)]
    pub at: String,
    pub body: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
}

/// A check that failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FailingCheck {
    pub name: String,
    #[serde(default)]
    pub summary: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// Where a pull request stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum PrStatus {
    Open,
    Merged,
    Closed,
    /// Its state could not be read.
    Unknown,
}

#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Review {
    #[default]
    None,
    Approved,
    ChangesRequested,
}

#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Checks {
    #[default]
    None,
    Passing,
    Failing,
    Pending,
}

/// An item's pull request, as the plan and the reports show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PullRequest {
    pub url: String,
    pub state: PrStatus,
    #[serde(default)]
    pub review: Review,
    #[serde(default)]
    pub checks: Checks,
    /// The commit the forge's branch points at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
    /// The commit runner last pushed; another head means someone else pushed to the branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pushed: Option<String>,
    /// Why the state is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Review rounds runner has made on it so far.
    #[serde(default)]
    pub rounds: u32,
    /// The review comments and failing checks, for a review round's feedback.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub comments: Vec<ReviewComment>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failing_checks: Vec<FailingCheck>,
    /// The feedback earlier review rounds were given: a round starts only on feedback that is
    /// not in it.
    #[serde(skip)]
    #[schemars(skip)]
    pub answered: Answered,
}

/// The feedback earlier review rounds of a pull request were given: the comments (by
/// [`ReviewComment::fingerprint`]) and the heads whose failing checks they saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Answered {
    pub comments: std::collections::BTreeSet<String>,
    pub heads: std::collections::BTreeSet<String>,
}
