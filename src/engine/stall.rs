//! The consecutive-halt guard: when several items in a row halt with no gate passing anywhere in
//! between, the environment is broken (a missing toolchain, a wrong working directory), not the
//! work; the run stops as `stalled` instead of burning the backlog, and names what the halts
//! share.

use crate::vocab::ItemOutcome;
use std::collections::BTreeMap;

/// What a halt looked like: normalised so that identical environmental failures compare equal,
/// with one real line of it kept to show the user.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct HaltSignature {
    /// `gate `test`` or `worker`.
    pub stage: String,
    /// The failure, normalised (see [`fingerprint`]): what halts are compared by.
    pub failure: String,
    /// The failure as it was printed (its last line, colour removed): what the user is shown.
    pub line: String,
}

impl HaltSignature {
    /// The signature of a failure at `stage` whose output ended with `tail`.
    pub fn of(stage: impl Into<String>, tail: &str, exit: Option<i32>) -> Self {
        HaltSignature {
            stage: stage.into(),
            failure: fingerprint(tail, exit),
            line: shown_line(tail, exit),
        }
    }

    /// A failure described in words rather than output (a time-out, an error of runner's).
    pub(crate) fn described(stage: impl Into<String>, what: &str) -> Self {
        HaltSignature {
            stage: stage.into(),
            failure: what.to_string(),
            line: what.to_string(),
        }
    }
}

/// What the guard learns from one item that ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Observed {
    pub outcome: ItemOutcome,
    /// A gate passed on it, or it completed: the environment works.
    pub progress: bool,
    pub halt: Option<HaltSignature>,
}

#[derive(Debug)]
pub(crate) struct StallGuard {
    after: u32,
    streak: Vec<HaltSignature>,
}

impl StallGuard {
    pub fn new(after: u32) -> Self {
        StallGuard {
            after: after.max(1),
            streak: Vec::new(),
        }
    }

    /// One item ended. An item on which anything passed is progress: it clears the streak and
    /// never joins it. A halted or failed item with nothing passing joins it. Anything else
    /// (cancelled, held, skipped) leaves it as it is. Returns the cause when the guard fires.
    pub(crate) fn observe(&mut self, o: &Observed) -> Option<String> {
        if o.progress {
            self.streak.clear();
            return None;
        }
        // A hold counts only when it carries a failure: the environment's (a clone, git, the
        // lease's record), which is what the guard watches for.
        let counts = match o.outcome {
            ItemOutcome::Halted | ItemOutcome::Failed => true,
            ItemOutcome::Held => o.halt.is_some(),
            _ => false,
        };
        if !counts {
            return None;
        }
        let sig = o.halt.clone()?;
        self.streak.push(sig);
        ((self.streak.len() as u32) >= self.after).then(|| cause(&self.streak))
    }
}

/// Why the guard fired: the failure the halts share, quoting one real line, or plainly that they
/// share none.
fn cause(streak: &[HaltSignature]) -> String {
    let n = streak.len();
    let mut counts: BTreeMap<(&str, &str), (usize, &HaltSignature)> = BTreeMap::new();
    for s in streak {
        counts
            .entry((s.stage.as_str(), s.failure.as_str()))
            .or_insert((0, s))
            .0 += 1;
    }
    // The most shared failure; among equals, the one seen first.
    let mut best: Option<(usize, &HaltSignature)> = None;
    for s in streak {
        let (c, first) = counts[&(s.stage.as_str(), s.failure.as_str())];
        if best.is_none_or(|(b, _)| c > b) {
            best = Some((c, first));
        }
    }
    let head = format!("{n} items halted in a row with no gate passing anywhere");
    match best {
        Some((c, s)) if c == n => format!(
            "{head}; all {n} failed at {} with the same failure: `{}`; suspect the environment (a missing tool, a wrong working directory, a broken service) rather than the work",
            s.stage, s.line
        ),
        Some((c, s)) if c >= 2 => format!(
            "{head}; {c} of them failed at {} with the same failure: `{}`; suspect the environment (a missing tool, a wrong working directory, a broken service) rather than the work",
            s.stage, s.line
        ),
        _ => format!(
            "{head}; they share no failure (the first failed at {} with `{}`); read their logs before running them again",
            streak[0].stage, streak[0].line
        ),
    }
}

/// The last non-empty line of `tail`, colour removed, at most 200 characters; or what the exit
/// says when there is no output.
fn shown_line(tail: &str, exit: Option<i32>) -> String {
    let line = tail
        .lines()
        .rev()
        .map(strip_ansi)
        .find(|l| !l.trim().is_empty())
        .map(|l| l.trim().chars().take(200).collect::<String>());
    match (line, exit) {
        (Some(l), _) => l,
        (None, Some(code)) => format!("exit code {code}, no output"),
        (None, None) => "no output".to_string(),
    }
}

/// Normalise a failure for comparison: the last non-empty line of the output, with ANSI escapes
/// removed, digits collapsed and absolute paths shortened to their last segment, so that the
/// same failure in different repositories and at different times compares equal.
pub fn fingerprint(tail: &str, exit: Option<i32>) -> String {
    let line = tail
        .lines()
        .rev()
        .map(strip_ansi)
        .find(|l| !l.trim().is_empty())
        .unwrap_or_default();
    let mut out = String::new();
    let mut last_digit = false;
    for word in line.split_whitespace() {
        let word = if word.starts_with('/') {
            word.rsplit('/').next().unwrap_or(word)
        } else {
            word
        };
        if !out.is_empty() {
            out.push(' ');
        }
        for c in word.chars() {
            if c.is_ascii_digit() {
                if !last_digit {
                    out.push('N');
                }
                last_digit = true;
            } else {
                out.push(c);
                last_digit = false;
            }
        }
        last_digit = false;
    }
    let out: String = out.chars().take(200).collect();
    match (out.is_empty(), exit) {
        (true, Some(code)) => format!("exit code {code}, no output"),
        (true, None) => "no output".to_string(),
        (false, Some(code)) => format!("exit code {code}: {out}"),
        (false, None) => out,
    }
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn halt(stage: &str, tail: &str) -> Observed {
        Observed {
            outcome: ItemOutcome::Halted,
            progress: false,
            halt: Some(HaltSignature::of(stage, tail, Some(1))),
        }
    }

    fn passed_then_halted(stage: &str, tail: &str) -> Observed {
        Observed {
            progress: true,
            ..halt(stage, tail)
        }
    }

    #[test]
    fn fires_after_consecutive_halts_and_quotes_the_shared_failure() {
        let mut g = StallGuard::new(3);
        assert!(
            g.observe(&halt("gate `test`", "sh: 1: cargo: not found"))
                .is_none()
        );
        assert!(
            g.observe(&halt("gate `test`", "sh: 2: cargo: not found"))
                .is_none()
        );
        let cause = g
            .observe(&halt("gate `test`", "sh: 3: cargo: not found"))
            .unwrap();
        assert!(
            cause.contains(
                "all 3 failed at gate `test` with the same failure: `sh: 1: cargo: not found`"
            ),
            "{cause}"
        );
        assert!(
            !cause.contains("sh: N"),
            "the normalised key leaked: {cause}"
        );
    }

    #[test]
    fn an_item_that_passed_a_gate_never_joins_the_streak() {
        let mut g = StallGuard::new(3);
        assert!(
            g.observe(&passed_then_halted("gate `second`", "boom"))
                .is_none()
        );
        assert!(g.observe(&halt("gate `first`", "x")).is_none());
        assert!(
            g.observe(&halt("gate `first`", "y")).is_none(),
            "fired on a streak of two"
        );
    }

    #[test]
    fn halts_that_share_nothing_are_named_as_such() {
        let mut g = StallGuard::new(2);
        g.observe(&halt("worker", "quota"));
        let cause = g.observe(&halt("gate `lint`", "style")).unwrap();
        assert!(cause.contains("they share no failure"), "{cause}");
        assert!(!cause.contains("suspect the environment"), "{cause}");
    }

    #[test]
    fn fingerprints_ignore_numbers_paths_and_colour() {
        let a = fingerprint(
            "ok\n\x1b[31merror\x1b[0m at /tmp/a1/src/lib.rs:12\n\n",
            Some(1),
        );
        let b = fingerprint("error at /home/x/b/src/lib.rs:99\n", Some(1));
        assert_eq!(a, b);
        assert_eq!(a, "exit code 1: error at lib.rs:N");
        assert_eq!(fingerprint("", Some(127)), "exit code 127, no output");
        assert_eq!(
            shown_line(
                "ok\n\x1b[31merror\x1b[0m at /tmp/a1/src/lib.rs:12\n\n",
                Some(1)
            ),
            "error at /tmp/a1/src/lib.rs:12"
        );
    }

    fn observed() -> impl Strategy<Value = Observed> {
        (
            prop_oneof![
                Just(ItemOutcome::Completed),
                Just(ItemOutcome::Halted),
                Just(ItemOutcome::Failed),
                Just(ItemOutcome::Cancelled),
                Just(ItemOutcome::Held),
            ],
            any::<bool>(),
            proptest::option::of(0u8..3),
        )
            .prop_map(|(outcome, gate_passed, halt)| Observed {
                progress: gate_passed || outcome == ItemOutcome::Completed,
                outcome,
                halt: halt.map(|h| HaltSignature::of("gate `t`", &format!("fail {h}"), Some(1))),
            })
    }

    proptest! {
        /// Against the rule written as plainly as it can be: count halts (and holds for the
        /// environment's fault) with nothing passing, since the last item on which anything
        /// passed.
        #[test]
        fn fires_exactly_when_the_reference_model_does(
            after in 1u32..5,
            seq in proptest::collection::vec(observed(), 0..40),
        ) {
            let mut g = StallGuard::new(after);
            let mut streak = 0u32;
            for (i, o) in seq.iter().enumerate() {
                if o.progress {
                    streak = 0;
                } else if matches!(o.outcome, ItemOutcome::Halted | ItemOutcome::Failed | ItemOutcome::Held)
                    && o.halt.is_some()
                {
                    streak += 1;
                }
                let fired = g.observe(o);
                prop_assert_eq!(fired.is_some(), !o.progress && o.halt.is_some()
                    && matches!(o.outcome, ItemOutcome::Halted | ItemOutcome::Failed | ItemOutcome::Held)
                    && streak >= after, "item {}", i);
                if let Some(c) = fired {
                    prop_assert!(c.starts_with(&format!("{streak} items halted in a row")), "{}", c);
                    prop_assert!(!c.contains("fail N"), "{}", c);
                }
            }
        }
    }
}
