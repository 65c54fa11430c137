//! How long an item rests after a provider-class failure: a pure function of the failure count,
//! the configured back-off, the retry hint in the worker's output, and a random draw.
//!
//! Exponential back-off with full jitter: after the k-th provider failure in a row the wait is
//! drawn uniformly from `[0, min(max, initial × 2^(k-1))]`, so that items failing together do
//! not retry together. A retry hint the provider printed (`Retry-After: 30`, `try again in
//! 20s`, `retry in 1.5 seconds`) is honoured instead, up to `max`.

use regex::Regex;
use std::sync::LazyLock;
use std::time::Duration;

/// `models.backoff`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Backoff {
    pub initial: Duration,
    pub max: Duration,
}

impl Backoff {
    /// The rest after the `k`-th provider failure in a row (`k` ≥ 1), given the worker's
    /// output `tail` and `unit`, a random number in `[0, 1)`.
    pub fn delay(&self, k: u32, tail: &str, unit: f64) -> Duration {
        if let Some(hint) = retry_hint(tail) {
            return hint.min(self.max);
        }
        let doubling = 2u32.saturating_pow(k.saturating_sub(1).min(30));
        let cap = self.initial.saturating_mul(doubling).min(self.max);
        cap.mul_f64(unit.clamp(0.0, 1.0))
    }
}

/// The wait a provider asked for in `tail` (its last 4 KiB), if it asked for one.
pub(crate) fn retry_hint(tail: &str) -> Option<Duration> {
    static HINT: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(
            r"(?i)(?:retry-after|retry after|try again in|retry in|retrying in|please retry in)\s*[:=]?\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|milliseconds?|s\b|secs?\b|seconds?|m\b|mins?\b|minutes?|h\b|hours?)?",
        )
        .expect("a valid pattern")
    });
    let window = super::classify::tail_window(tail);
    let caps = HINT.captures_iter(window).last()?;
    let n: f64 = caps.get(1)?.as_str().parse().ok()?;
    let unit = caps.get(2).map_or("s", |u| u.as_str()).to_ascii_lowercase();
    let secs = match unit.chars().next() {
        Some('m') if unit.starts_with("ms") || unit.starts_with("milli") => n / 1000.0,
        Some('m') => n * 60.0,
        Some('h') => n * 3600.0,
        _ => n,
    };
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(86_400.0)))
}

/// A random number in `[0, 1)`.
pub fn unit() -> f64 {
    (uuid::Uuid::new_v4().as_u128() >> 75) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const B: Backoff = Backoff {
        initial: Duration::from_secs(10),
        max: Duration::from_secs(600),
    };

    #[test]
    fn hints_are_read_in_their_units() {
        assert_eq!(
            retry_hint("HTTP 429\nRetry-After: 30"),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            retry_hint("Rate limit reached. Please try again in 20s."),
            Some(Duration::from_secs(20))
        );
        assert_eq!(
            retry_hint("quota exceeded, retry in 1.5 seconds"),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            retry_hint("try again in 2 minutes"),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            retry_hint("retry after 250ms"),
            Some(Duration::from_millis(250))
        );
        assert_eq!(retry_hint("rate limit exceeded"), None);
    }

    #[test]
    fn a_hint_wins_but_never_past_the_maximum() {
        assert_eq!(B.delay(1, "retry-after: 30", 0.0), Duration::from_secs(30));
        assert_eq!(
            B.delay(1, "retry-after: 9999", 0.5),
            Duration::from_secs(600)
        );
    }

    #[test]
    fn the_cap_doubles_up_to_the_maximum() {
        let top = |k| B.delay(k, "", 0.999_999);
        assert!(top(1) <= Duration::from_secs(10) && top(1) > Duration::from_secs(9));
        assert!(top(2) <= Duration::from_secs(20) && top(2) > Duration::from_secs(19));
        assert!(top(7) <= Duration::from_secs(600));
        assert!(top(60) <= Duration::from_secs(600));
        assert_eq!(B.delay(3, "", 0.0), Duration::ZERO);
    }

    proptest! {
        #[test]
        fn a_delay_is_within_its_cap(k in 1u32..100, u in 0.0f64..1.0) {
            let d = B.delay(k, "", u);
            let cap = B.initial.saturating_mul(2u32.saturating_pow((k - 1).min(30))).min(B.max);
            prop_assert!(d <= cap);
        }

        #[test]
        fn randomness_stays_in_the_unit_interval(_n in 0u8..50) {
            let u = unit();
            prop_assert!((0.0..1.0).contains(&u));
        }
    }
}
