//! The consecutive-halt guard: when several items in a row halt with no gate passing anywhere in
//! between, the environment is broken (a missing toolchain, a wrong working directory), not the
//! work; the run stops as `stalled` instead of burning the backlog, and names what the halts
//! share.

use std::collections::BTreeMap;

/// What a halt looked like, normalised so that identical environmental failures compare equal.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct HaltSignature {
    /// `gate `test`` or `worker`.
    pub stage: String,
    /// The failure, normalised (see [`fingerprint`]).
    pub failure: String,
}

#[derive(Debug)]
pub struct StallGuard {
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

    /// A gate passed somewhere, or an item completed: the environment works.
    pub fn progress(&mut self) {
        self.streak.clear();
    }

    /// An item halted (or failed). Returns the suspected cause when the guard fires.
    pub fn halted(&mut self, sig: HaltSignature) -> Option<String> {
        self.streak.push(sig);
        if (self.streak.len() as u32) < self.after {
            return None;
        }
        let mut counts: BTreeMap<&HaltSignature, usize> = BTreeMap::new();
        for s in &self.streak {
            *counts.entry(s).or_insert(0) += 1;
        }
        let (common, n) = counts
            .into_iter()
            .max_by_key(|(_, n)| *n)
            .unwrap_or((&self.streak[0], 1));
        let shared = if n == self.streak.len() {
            format!(
                "all {n} failed at {} with: {}",
                common.stage, common.failure
            )
        } else {
            format!(
                "{n} of {} failed at {} with: {}",
                self.streak.len(),
                common.stage,
                common.failure
            )
        };
        Some(format!(
            "{} items halted in a row with no gate passing anywhere; {shared}; suspect the environment (a missing tool, a wrong working directory, a broken service) rather than the work",
            self.streak.len()
        ))
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

    fn sig(stage: &str, failure: &str) -> HaltSignature {
        HaltSignature {
            stage: stage.into(),
            failure: failure.into(),
        }
    }

    #[test]
    fn fires_after_consecutive_halts_and_names_the_shared_failure() {
        let mut g = StallGuard::new(3);
        assert!(g.halted(sig("gate `test`", "cargo: not found")).is_none());
        assert!(g.halted(sig("gate `test`", "cargo: not found")).is_none());
        let cause = g.halted(sig("gate `test`", "cargo: not found")).unwrap();
        assert!(
            cause.contains("all 3 failed at gate `test` with: cargo: not found"),
            "{cause}"
        );
    }

    #[test]
    fn progress_anywhere_resets_the_streak() {
        let mut g = StallGuard::new(3);
        g.halted(sig("worker", "x"));
        g.halted(sig("worker", "x"));
        g.progress();
        assert!(g.halted(sig("worker", "x")).is_none());
        assert!(g.halted(sig("worker", "x")).is_none());
        assert!(g.halted(sig("worker", "x")).is_some());
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
    }
}
