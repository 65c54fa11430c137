//! Worker failure classification: a pure function of how the process ended and its output tail.

use crate::manifest::Models;
use crate::process::Finished;
use crate::vocab::WorkerClass;

/// How much of the end of the output patterns are matched against: only the tail, so that a
/// diff or transcript quoting "rate limit" early in a long run is not taken for a rate limit.
pub(crate) const PATTERN_WINDOW: usize = 4096;

/// What makes a worker failure the provider's fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderPolicy {
    pub exit_codes: Vec<i32>,
    /// Exit codes that mean the provider refused the key (authentication, billing).
    pub refused_exit_codes: Vec<i32>,
    /// Lowercased.
    pub patterns: Vec<String>,
}

impl ProviderPolicy {
    pub(crate) fn from_models(models: Option<&Models>) -> Self {
        let pf = models.and_then(|m| m.provider_failure.as_ref());
        ProviderPolicy {
            exit_codes: pf
                .and_then(|p| p.exit_codes.clone())
                .unwrap_or_else(|| crate::manifest::DEFAULT_PROVIDER_EXIT_CODES.to_vec()),
            // The default gives way to a code the manifest made a provider failure.
            refused_exit_codes: pf
                .and_then(|p| p.refused_exit_codes.clone())
                .unwrap_or_else(|| {
                    crate::manifest::DEFAULT_REFUSED_EXIT_CODES
                        .iter()
                        .copied()
                        .filter(|c| {
                            !pf.and_then(|p| p.exit_codes.as_ref())
                                .is_some_and(|e| e.contains(c))
                        })
                        .collect()
                }),
            patterns: pf
                .map(|p| p.patterns.iter().map(|s| s.to_lowercase()).collect())
                .unwrap_or_default(),
        }
    }
}

/// Classify a finished worker. Structured signals (runner's own timers, exit codes) come first;
/// patterns are consulted only for a failed exit, and only over the tail.
pub fn classify(f: &Finished, policy: &ProviderPolicy) -> WorkerClass {
    if f.cancelled {
        return WorkerClass::Cancelled;
    }
    if f.silenced {
        return WorkerClass::Provider;
    }
    if f.timed_out {
        return WorkerClass::Timeout;
    }
    if f.spawn_error.is_some() {
        return WorkerClass::Failed;
    }
    match f.exit {
        Some(0) => WorkerClass::Ok,
        Some(code) if policy.refused_exit_codes.contains(&code) => WorkerClass::Refused,
        Some(code) if policy.exit_codes.contains(&code) => WorkerClass::Provider,
        _ => {
            let tail = tail_window(&f.tail).to_lowercase();
            if policy.patterns.iter().any(|p| tail.contains(p.as_str())) {
                WorkerClass::Provider
            } else {
                WorkerClass::Failed
            }
        }
    }
}

/// What a worker said when its provider refused the key: the adapter's own line when it wrote
/// one (`runner adapter: the provider refused the key (billing): …`), else its last line.
pub(crate) fn refusal_message(tail: &str) -> String {
    let lines: Vec<&str> = tail
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let line = lines
        .iter()
        .rev()
        .find_map(|l| l.strip_prefix("runner adapter:"))
        .map(str::trim)
        .or(lines.last().copied())
        .unwrap_or("it printed nothing");
    let mut end = line.len().min(300);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    line[..end].to_string()
}

pub(super) fn tail_window(s: &str) -> &str {
    if s.len() <= PATTERN_WINDOW {
        return s;
    }
    let mut cut = s.len() - PATTERN_WINDOW;
    while !s.is_char_boundary(cut) {
        cut += 1;
    }
    &s[cut..]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fin(exit: Option<i32>, tail: &str) -> Finished {
        Finished {
            exit,
            tail: tail.into(),
            ..Finished::default()
        }
    }

    fn policy() -> ProviderPolicy {
        ProviderPolicy {
            exit_codes: vec![75],
            refused_exit_codes: vec![77],
            patterns: vec!["rate limit".into(), "overloaded".into()],
        }
    }

    #[test]
    fn exit_codes_and_timers_decide_first() {
        assert_eq!(
            classify(&fin(Some(0), "rate limit"), &policy()),
            WorkerClass::Ok
        );
        assert_eq!(
            classify(&fin(Some(75), ""), &policy()),
            WorkerClass::Provider
        );
        assert_eq!(
            classify(&fin(Some(1), "boom"), &policy()),
            WorkerClass::Failed
        );
        let mut t = fin(None, "");
        t.timed_out = true;
        assert_eq!(classify(&t, &policy()), WorkerClass::Timeout);
        let mut s = fin(None, "");
        s.silenced = true;
        assert_eq!(classify(&s, &policy()), WorkerClass::Provider);
        let mut c = fin(Some(75), "");
        c.cancelled = true;
        assert_eq!(classify(&c, &policy()), WorkerClass::Cancelled);
    }

    #[test]
    fn patterns_match_only_the_tail_of_a_failure() {
        assert_eq!(
            classify(&fin(Some(1), "Error: Rate Limit exceeded\n"), &policy()),
            WorkerClass::Provider
        );
        let quoted_early = format!(
            "diff: handle \"rate limit\"\n{}",
            "x".repeat(PATTERN_WINDOW + 10)
        );
        assert_eq!(
            classify(&fin(Some(1), &quoted_early), &policy()),
            WorkerClass::Failed
        );
    }

    #[test]
    fn a_refusal_is_told_in_the_adapters_words_or_the_last_line() {
        assert_eq!(
            refusal_message(
                "noise\nrunner adapter: the provider refused the key (billing): low credit\nbye\n"
            ),
            "the provider refused the key (billing): low credit"
        );
        assert_eq!(
            refusal_message("a\nError: 401 invalid x-api-key\n\n"),
            "Error: 401 invalid x-api-key"
        );
        assert_eq!(refusal_message(""), "it printed nothing");
        assert_eq!(refusal_message(&"é".repeat(400)).len(), 300);
    }
}
