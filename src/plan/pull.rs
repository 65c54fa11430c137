//! Pull requests runner opened, as their forge tells them now (`publish.state`): what a merged,
//! closed or unreadable one means for its item.
//!
//! Reading the state is the session's (it runs the publish adapter); the overlay here is pure:
//! a merged pull request makes its item done for good, one closed without merge makes it
//! `rejected` (never run again unless `--rerun rejected`), and one whose state cannot be read
//! holds it (`pr-unknown`) — never taken as merged or closed.

use super::model::Plan;
use crate::vocab::HoldReason;
use crate::vocab::ItemState;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// The tag of what `publish.state` prints.
pub const PR_SCHEMA: &str = "runner.pr/v1";

/// What `publish.state` prints for one pull request.
#[derive(Clone, Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PrDoc {
    /// Always `runner.pr/v1`.
    pub schema: String,
    pub state: PrStatus,
    /// The review's verdict, when there is one.
    #[serde(default)]
    pub review: Review,
    /// The required checks, taken together.
    #[serde(default)]
    pub checks: Checks,
    /// The commit the pull request's branch points at on the forge.
    #[serde(default)]
    pub head: Option<String>,
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
}

impl PullRequest {
    /// `merged`, `open (changes requested, checks failing)`, ...
    pub fn describe(&self) -> String {
        let state = match self.state {
            PrStatus::Open => "open",
            PrStatus::Merged => "merged",
            PrStatus::Closed => "closed without merge",
            PrStatus::Unknown => "state unknown",
        };
        let mut notes = Vec::new();
        match self.review {
            Review::Approved => notes.push("approved"),
            Review::ChangesRequested => notes.push("changes requested"),
            Review::None => {}
        }
        match self.checks {
            Checks::Failing => notes.push("checks failing"),
            Checks::Pending => notes.push("checks pending"),
            Checks::Passing | Checks::None => {}
        }
        if self.head.is_some() && self.pushed.is_some() && self.head != self.pushed {
            notes.push("head moved by someone else");
        }
        if notes.is_empty() || self.state != PrStatus::Open {
            state.to_string()
        } else {
            format!("{state} ({})", notes.join(", "))
        }
    }
}

/// Read what `publish.state` printed. `Err` says what is wrong with it.
pub fn parse(text: &str) -> Result<PrDoc, String> {
    let doc: PrDoc = serde_json::from_str(text.trim()).map_err(|e| {
        format!(
            "its output is not `{PR_SCHEMA}` JSON (line {}, column {}): {e}",
            e.line(),
            e.column()
        )
    })?;
    if doc.schema != PR_SCHEMA {
        return Err(format!(
            "its output says schema `{}`; runner reads `{PR_SCHEMA}`",
            doc.schema
        ));
    }
    Ok(doc)
}

/// Pull requests by item (repository, id).
pub type Pulls = HashMap<(String, String), PullRequest>;

/// Lay the pull requests' states over the plan: each item shows its own; a merged one's item is
/// done for good, a closed one's `rejected` (pending again with `rerun_rejected`), an unreadable
/// one's held `pr-unknown`.
pub fn overlay(plan: &mut Plan, pulls: &Pulls, rerun_rejected: bool) {
    for it in &mut plan.items {
        let Some(pr) = pulls.get(&(it.repo.clone(), it.id.clone())) else {
            continue;
        };
        it.pull_request = Some(pr.clone());
        if matches!(it.state, ItemState::Skipped) {
            continue;
        }
        match pr.state {
            PrStatus::Merged => {
                it.state = ItemState::Done;
                it.reason = None;
                it.detail = Some(format!("pull request merged: {}", pr.url));
            }
            PrStatus::Closed if rerun_rejected => {
                it.state = ItemState::Pending;
                it.reason = None;
                it.detail = Some(format!(
                    "pull request closed without merge: {}; run again (`--rerun rejected`)",
                    pr.url
                ));
            }
            PrStatus::Closed => {
                it.state = ItemState::Skipped;
                it.reason = Some(HoldReason::Rejected);
                it.detail = Some(format!(
                    "pull request closed without merge: {}; `--rerun rejected` runs it again",
                    pr.url
                ));
            }
            PrStatus::Unknown => {
                it.state = ItemState::Held;
                it.reason = Some(HoldReason::PrUnknown);
                it.detail = Some(format!(
                    "the state of pull request {} cannot be read: {}",
                    pr.url,
                    pr.detail.as_deref().unwrap_or("no reason given")
                ));
            }
            PrStatus::Open => {}
        }
    }
    let mut counts = std::collections::BTreeMap::new();
    for it in &plan.items {
        *counts.entry(it.state).or_insert(0) += 1;
    }
    plan.counts = counts;
}
