//! The run's view of each model's provider: a pure state machine fed with provider-class
//! failures as items meet them.
//!
//! A provider failure is evidence about the model, not only the item. Once `threshold` provider
//! failures of one model fall within `window`, the model is demoted: items that start from then
//! on begin on the next model of their chain that is not demoted. A demoted model is trusted
//! again once `quiet` has passed without a provider failure of its own, and new items start on
//! it again. An item's own chain stays as it is once started (see `super::chain`).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// How long a window of failures counts, and how long a demoted model must stay quiet.
pub const WINDOW: Duration = Duration::from_secs(300);
pub const QUIET: Duration = Duration::from_secs(300);

#[derive(Debug)]
pub struct Health {
    threshold: u32,
    window: Duration,
    quiet: Duration,
    /// Recent provider failures per model, oldest first.
    failures: HashMap<String, VecDeque<Instant>>,
    /// Demoted models, with their latest provider failure.
    demoted: HashMap<String, Instant>,
}

impl Health {
    pub fn new(threshold: u32, window: Duration, quiet: Duration) -> Self {
        Health {
            threshold: threshold.max(1),
            window,
            quiet,
            failures: HashMap::new(),
            demoted: HashMap::new(),
        }
    }

    /// A provider failure of `model` at `now`. Returns the number of failures in the window when
    /// this one demoted the model.
    pub fn failed(&mut self, model: &str, now: Instant) -> Option<usize> {
        let seen = self.failures.entry(model.to_string()).or_default();
        seen.push_back(now);
        while seen
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) > self.window)
        {
            seen.pop_front();
        }
        let count = seen.len();
        if let Some(last) = self.demoted.get_mut(model) {
            *last = now;
            return None;
        }
        if count >= self.threshold as usize {
            self.demoted.insert(model.to_string(), now);
            return Some(count);
        }
        None
    }

    /// Where in `chain` an item starting at `now` begins: the first model not demoted (the
    /// last one when every model is), after trusting again the models quiet for long enough.
    pub fn start(&mut self, chain: &[String], now: Instant) -> usize {
        let quiet = self.quiet;
        self.demoted
            .retain(|_, last| now.saturating_duration_since(*last) < quiet);
        chain
            .iter()
            .position(|m| !self.demoted.contains_key(m))
            .unwrap_or(chain.len().saturating_sub(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain() -> Vec<String> {
        vec!["a".into(), "b".into(), "c".into()]
    }

    #[test]
    fn a_model_is_demoted_after_threshold_failures_in_the_window_and_trusted_after_quiet() {
        let t = Instant::now();
        let s = Duration::from_secs;
        let mut h = Health::new(2, s(60), s(120));
        assert_eq!(h.start(&chain(), t), 0);
        assert_eq!(h.failed("a", t), None);
        assert_eq!(h.start(&chain(), t), 0, "one failure is not a pattern");
        assert_eq!(h.failed("a", t + s(10)), Some(2));
        assert_eq!(h.start(&chain(), t + s(11)), 1, "new items start on b");
        // A failure keeps it demoted; quiet brings it back.
        h.failed("a", t + s(100));
        assert_eq!(h.start(&chain(), t + s(150)), 1);
        assert_eq!(h.start(&chain(), t + s(221)), 0);
    }

    #[test]
    fn failures_outside_the_window_do_not_add_up() {
        let t = Instant::now();
        let s = Duration::from_secs;
        let mut h = Health::new(2, s(60), s(120));
        h.failed("a", t);
        assert_eq!(h.failed("a", t + s(61)), None);
        assert_eq!(h.start(&chain(), t + s(62)), 0);
    }

    #[test]
    fn with_every_model_demoted_items_start_on_the_last() {
        let t = Instant::now();
        let mut h = Health::new(1, WINDOW, QUIET);
        for m in chain() {
            h.failed(&m, t);
        }
        assert_eq!(h.start(&chain(), t), 2);
    }
}
