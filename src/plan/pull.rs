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
use serde::Deserialize;
use std::collections::HashMap;

pub use super::pr::{Answered, Checks, FailingCheck, PrStatus, PullRequest, Review, ReviewComment};

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
    /// What reviewers wrote, oldest first: the review round's feedback.
    #[serde(default)]
    pub comments: Vec<ReviewComment>,
    /// The checks that failed.
    #[serde(default)]
    pub failing_checks: Vec<FailingCheck>,
}

impl ReviewComment {
    /// What tells this comment from every other: its author, time, place and text.
    pub fn fingerprint(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        for part in [
            self.author.as_str(),
            self.at.as_str(),
            self.path.as_deref().unwrap_or(""),
            &self.line.map(|l| l.to_string()).unwrap_or_default(),
            self.body.as_str(),
        ] {
            h.update(part.as_bytes());
            h.update([0]);
        }
        crate::support::hex(&h.finalize()[..12])
    }
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

impl PullRequest {
    /// The comments no earlier round was given, oldest first.
    pub fn new_comments(&self) -> impl Iterator<Item = &ReviewComment> {
        self.comments
            .iter()
            .filter(|c| !self.answered.comments.contains(&c.fingerprint()))
    }

    /// Checks failing on a head no earlier round saw them fail on.
    pub fn new_failures(&self) -> bool {
        self.checks == Checks::Failing
            && self
                .head
                .as_ref()
                .is_none_or(|h| !self.answered.heads.contains(h))
    }

    /// Whether the reviewers want more that no round has answered yet: a comment made since,
    /// checks failing on a head no round saw fail, or changes requested before any round. A
    /// decision that stands (GitHub keeps "changes requested" until the reviewer reviews again)
    /// is not asked again.
    pub fn wants_a_round(&self) -> bool {
        self.state == PrStatus::Open
            && (self.new_comments().next().is_some()
                || self.new_failures()
                || (self.review == Review::ChangesRequested && self.rounds == 0))
    }

    /// Changes asked or checks failing, but nothing new since the last round: the reviewer is
    /// waited for.
    pub fn waits_for_review(&self) -> bool {
        self.state == PrStatus::Open
            && !self.wants_a_round()
            && (self.review == Review::ChangesRequested || self.checks == Checks::Failing)
    }

    /// What a round answers, for the ledger: every comment it was given and the head it saw.
    pub fn answering(&self) -> (Vec<String>, Option<String>) {
        (
            self.comments
                .iter()
                .map(ReviewComment::fingerprint)
                .collect(),
            self.head.clone(),
        )
    }

    /// A review round's feedback: the review comments oldest first (with file and line where
    /// the review gave them) and the failing checks.
    pub fn feedback(&self) -> String {
        let mut out = format!(
            "The review of pull request {} asks for changes ({}). Address every point below on this branch; runner pushes the result to the pull request.\n",
            self.url,
            self.describe()
        );
        let answered = self.comments.len() - self.new_comments().count();
        if answered > 0 {
            out.push_str(&format!(
                "\n{answered} earlier comment{} answered by earlier rounds; what is new since:\n",
                if answered == 1 { " was" } else { "s were" }
            ));
        }
        if self.new_comments().next().is_some() {
            out.push_str("\nReview comments, oldest first:\n");
            for c in self.new_comments() {
                let at = match (&c.path, c.line) {
                    (Some(p), Some(l)) => format!(" on {p}:{l}"),
                    (Some(p), None) => format!(" on {p}"),
                    _ => String::new(),
                };
                out.push_str(&format!("\n- {}{at}: {}\n", c.author, c.body.trim()));
            }
        }
        if !self.failing_checks.is_empty() {
            out.push_str("\nFailing checks:\n");
            for f in &self.failing_checks {
                out.push_str(&format!(
                    "\n- {}: {}{}\n",
                    f.name,
                    f.summary.trim(),
                    f.url
                        .as_deref()
                        .map(|u| format!(" ({u})"))
                        .unwrap_or_default()
                ));
            }
        }
        out
    }
}

/// Lay the pull requests' states over the plan: each item shows its own; a merged one's item is
/// done for good, a closed one's `rejected` (pending again with `rerun_rejected`), an unreadable
/// one's held `pr-unknown`. An open one whose reviewers asked for changes (or whose checks
/// fail) makes its done item pending again — a review round on its branch — up to `max_rounds`,
/// then held `needs-human`; only an item whose last run completed it (`completed`): a round that
/// halted waits for `--rerun failed`, as any halted item does.
pub fn overlay(
    plan: &mut Plan,
    pulls: &Pulls,
    rerun_rejected: bool,
    max_rounds: u32,
    completed: &std::collections::HashSet<(String, String)>,
) {
    for it in &mut plan.items {
        let Some(pr) = pulls.get(&(it.repo.clone(), it.id.clone())) else {
            continue;
        };
        let unlisted = it.source.as_ref().is_some_and(|s| s.unlisted);
        it.pull_request = Some(Box::new(pr.clone()));
        // An item of a source that cannot be read stays held, whatever its pull request says.
        if matches!(it.state, ItemState::Skipped) || it.reason == Some(HoldReason::SourceUnreadable)
        {
            continue;
        }
        match pr.state {
            PrStatus::Merged => {
                it.state = ItemState::Done;
                it.reason = None;
                it.detail = Some(format!("pull request merged: {}", pr.url));
            }
            PrStatus::Closed if rerun_rejected && !unlisted => {
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
            PrStatus::Open if pr.wants_a_round() && unlisted => {
                it.detail = Some(format!(
                    "pull request {} ({}); the source no longer lists the item, so no review round is made: a person takes it from here",
                    pr.url,
                    pr.describe()
                ));
            }
            PrStatus::Open
                if pr.wants_a_round()
                    && it.state == ItemState::Done
                    && completed.contains(&(it.repo.clone(), it.id.clone())) =>
            {
                if pr.rounds >= max_rounds {
                    it.state = ItemState::Held;
                    it.reason = Some(HoldReason::NeedsHuman);
                    it.detail = Some(format!(
                        "pull request {} still asks for changes after {} review round{}: a person takes it from here",
                        pr.url,
                        pr.rounds,
                        if pr.rounds == 1 { "" } else { "s" }
                    ));
                } else {
                    it.state = ItemState::Pending;
                    it.reason = None;
                    it.detail = Some(format!(
                        "review round {} of pull request {} ({})",
                        pr.rounds + 1,
                        pr.url,
                        pr.describe()
                    ));
                }
            }
            PrStatus::Open if pr.waits_for_review() && it.state == ItemState::Done => {
                it.detail = Some(format!(
                    "pull request {} ({}): nothing new since review round {}; waiting for the reviewer",
                    pr.url,
                    pr.describe(),
                    pr.rounds
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::model::{ItemPlan, Origin};

    fn plan_with(state: ItemState) -> Plan {
        let mut it = ItemPlan::new("api".into(), "issue-1".into(), Origin::Source);
        it.state = state;
        serde_json::from_value::<Plan>(serde_json::json!({
            "schema": "runner.plan/v1",
            "manifest": {"name": "m", "path": "m.yaml", "sha256": ""},
            "digest": "",
            "capacity": {"workers": 1, "probe": false},
            "repositories": [],
            "items": [it],
            "counts": {}
        }))
        .unwrap()
    }

    fn pr(state: PrStatus, review: Review, checks: Checks, rounds: u32) -> Pulls {
        Pulls::from([(
            ("api".to_string(), "issue-1".to_string()),
            PullRequest {
                url: "https://forge/pull/1".into(),
                state,
                review,
                checks,
                head: None,
                pushed: None,
                detail: Some("HTTP 502".into()),
                rounds,
                comments: Vec::new(),
                failing_checks: Vec::new(),
                answered: Answered::default(),
            },
        )])
    }

    fn after(
        state: ItemState,
        pulls: &Pulls,
        rerun_rejected: bool,
    ) -> (ItemState, Option<HoldReason>) {
        let mut plan = plan_with(state);
        let completed = std::collections::HashSet::from([("api".into(), "issue-1".into())]);
        overlay(&mut plan, pulls, rerun_rejected, 2, &completed);
        (plan.items[0].state, plan.items[0].reason)
    }

    #[test]
    fn each_state_means_what_it_says_for_the_item() {
        let none = (Review::None, Checks::None);
        let merged = pr(PrStatus::Merged, none.0, none.1, 0);
        assert_eq!(
            after(ItemState::Done, &merged, false),
            (ItemState::Done, None)
        );
        assert_eq!(
            after(ItemState::Pending, &merged, false),
            (ItemState::Done, None)
        );
        let closed = pr(PrStatus::Closed, none.0, none.1, 0);
        assert_eq!(
            after(ItemState::Done, &closed, false),
            (ItemState::Skipped, Some(HoldReason::Rejected))
        );
        assert_eq!(
            after(ItemState::Done, &closed, true),
            (ItemState::Pending, None)
        );
        let unknown = pr(PrStatus::Unknown, none.0, none.1, 0);
        assert_eq!(
            after(ItemState::Done, &unknown, false),
            (ItemState::Held, Some(HoldReason::PrUnknown))
        );
        let open = pr(PrStatus::Open, none.0, none.1, 0);
        assert_eq!(
            after(ItemState::Done, &open, false),
            (ItemState::Done, None)
        );
    }

    fn comment(body: &str) -> ReviewComment {
        ReviewComment {
            author: "rev".into(),
            at: "2026-12-03T10:00:00Z".into(),
            body: body.into(),
            path: None,
            line: None,
        }
    }

    #[test]
    fn only_feedback_no_round_was_given_makes_a_round() {
        let key = ("api".to_string(), "issue-1".to_string());
        // Before any round, the decision alone asks for one.
        let first = pr(PrStatus::Open, Review::ChangesRequested, Checks::None, 0);
        assert_eq!(
            after(ItemState::Done, &first, false),
            (ItemState::Pending, None)
        );
        // After one, the standing decision with the same comment waits for the reviewer.
        let mut standing = pr(PrStatus::Open, Review::ChangesRequested, Checks::None, 1);
        let p = standing.get_mut(&key).unwrap();
        p.comments = vec![comment("Rename it.")];
        p.answered
            .comments
            .insert(comment("Rename it.").fingerprint());
        assert_eq!(
            after(ItemState::Done, &standing, false),
            (ItemState::Done, None)
        );
        let mut plan = plan_with(ItemState::Done);
        let completed = std::collections::HashSet::from([key.clone()]);
        overlay(&mut plan, &standing, false, 2, &completed);
        assert!(
            plan.items[0]
                .detail
                .as_deref()
                .unwrap()
                .contains("waiting for the reviewer")
        );
        // A new comment is a round; its feedback holds only what is new.
        let p = standing.get_mut(&key).unwrap();
        p.comments.push(comment("Still wrong."));
        assert_eq!(
            after(ItemState::Done, &standing, false),
            (ItemState::Pending, None)
        );
        let feedback = standing[&key].feedback();
        assert!(feedback.contains("Still wrong."), "{feedback}");
        assert!(!feedback.contains("Rename it."), "{feedback}");
        assert!(
            feedback.contains("1 earlier comment was answered"),
            "{feedback}"
        );
        // Checks failing on a head a round already saw fail: not new; on another head: new.
        let mut failing = pr(PrStatus::Open, Review::None, Checks::Failing, 1);
        let p = failing.get_mut(&key).unwrap();
        p.head = Some("abc".into());
        p.answered.heads.insert("abc".into());
        assert_eq!(
            after(ItemState::Done, &failing, false),
            (ItemState::Done, None)
        );
        failing.get_mut(&key).unwrap().head = Some("def".into());
        assert_eq!(
            after(ItemState::Done, &failing, false),
            (ItemState::Pending, None)
        );
    }

    #[test]
    fn a_review_asking_for_changes_is_a_round_until_the_rounds_are_spent() {
        let mut asks = pr(PrStatus::Open, Review::ChangesRequested, Checks::Passing, 1);
        for p in asks.values_mut() {
            p.comments = vec![comment("Again.")];
        }
        assert_eq!(
            after(ItemState::Done, &asks, false),
            (ItemState::Pending, None)
        );
        let failing = pr(PrStatus::Open, Review::Approved, Checks::Failing, 0);
        assert_eq!(
            after(ItemState::Done, &failing, false),
            (ItemState::Pending, None)
        );
        let mut spent = pr(PrStatus::Open, Review::ChangesRequested, Checks::None, 2);
        for p in spent.values_mut() {
            p.comments = vec![comment("Once more.")];
        }
        assert_eq!(
            after(ItemState::Done, &spent, false),
            (ItemState::Held, Some(HoldReason::NeedsHuman))
        );
        // An item another run is on, or that waits for its repository, is left as it is.
        assert_eq!(
            after(ItemState::Skipped, &asks, false),
            (ItemState::Skipped, None)
        );
        // A round that halted is not made again by itself.
        let mut plan = plan_with(ItemState::Done);
        overlay(&mut plan, &asks, false, 2, &Default::default());
        assert_eq!(plan.items[0].state, ItemState::Done);
    }
}
