//! The run's view of each model's provider: a pure state machine fed with provider-class
//! failures as items meet them.
//!
//! A provider failure is evidence about the model, not only the item. Once `threshold` provider
//! failures of one model fall within `window`, from at least two different items (one item's
//! trouble is that item's: its own chain handles it), the model is demoted: items that start
//! from then on begin on the next model of their chain that is not demoted. A demoted model is trusted
//! again once `quiet` has passed without a provider failure of its own, and new items start on
//! it again. An item's own chain stays as it is once started (see `super::chain`).
//!
//! A model whose provider refused the key (authentication, billing) is another matter: one
//! refusal is enough, it is never trusted again in the run, and no item, running or starting,
//! uses it again.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// How long a window of failures counts, and how long a demoted model must stay quiet.
pub(crate) const WINDOW: Duration = Duration::from_secs(300);
pub(crate) const QUIET: Duration = Duration::from_secs(300);

/// A model demoted: its provider failures in the window, and the items that met them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Demoted {
    pub failures: usize,
    pub items: Vec<String>,
}

#[derive(Debug)]
pub struct Health {
    threshold: u32,
    window: Duration,
    quiet: Duration,
    /// Recent provider failures per model, oldest first, with the item that met each.
    failures: HashMap<String, VecDeque<(Instant, String)>>,
    /// Demoted models, with their latest provider failure.
    demoted: HashMap<String, Instant>,
    /// Models whose provider refused the key, with what it said, in the order refused.
    refused: Vec<(String, String)>,
}

impl Health {
    pub fn new(threshold: u32, window: Duration, quiet: Duration) -> Self {
        Health {
            threshold: threshold.max(1),
            window,
            quiet,
            failures: HashMap::new(),
            demoted: HashMap::new(),
            refused: Vec::new(),
        }
    }

    /// The provider refused `model`'s key, saying `message`: no item uses the model again in
    /// this run. Whether this is the first refusal of it.
    pub fn refuse(&mut self, model: &str, message: &str) -> bool {
        if self.is_refused(model) {
            return false;
        }
        self.refused.push((model.to_string(), message.to_string()));
        true
    }

    pub(crate) fn is_refused(&self, model: &str) -> bool {
        self.refused.iter().any(|(m, _)| m == model)
    }

    /// The models refused so far, with what their provider said.
    pub fn refused(&self) -> &[(String, String)] {
        &self.refused
    }

    /// Why an item on `chain` cannot run: each model, with what its provider said.
    pub(crate) fn refusal_cause(&self, chain: &[String]) -> String {
        let named: Vec<String> = chain
            .iter()
            .map(|m| {
                let said = self
                    .refused
                    .iter()
                    .find(|(r, _)| r == m)
                    .map_or("", |(_, s)| s.as_str());
                if m.is_empty() {
                    format!("the worker's provider refused it ({said})")
                } else {
                    format!("`{m}` ({said})")
                }
            })
            .collect();
        format!(
            "no model of the chain can be used: {}; the next run tries again",
            named.join(", ")
        )
    }

    /// The first model of `chain` from `from` on that is not refused.
    pub fn usable(&self, chain: &[String], from: usize) -> Option<usize> {
        (from..chain.len()).find(|&i| !self.is_refused(&chain[i]))
    }

    /// A provider failure of `model` at `now`, met by `item` (`repo/id`). When this one demoted
    /// the model: the failures in the window and the items that gave them, in order.
    pub fn failed(&mut self, model: &str, item: &str, now: Instant) -> Option<Demoted> {
        let seen = self.failures.entry(model.to_string()).or_default();
        seen.push_back((now, item.to_string()));
        while seen
            .front()
            .is_some_and(|(t, _)| now.saturating_duration_since(*t) > self.window)
        {
            seen.pop_front();
        }
        let count = seen.len();
        let mut items: Vec<String> = Vec::new();
        for (_, i) in seen.iter() {
            if !items.contains(i) {
                items.push(i.clone());
            }
        }
        if let Some(last) = self.demoted.get_mut(model) {
            *last = now;
            return None;
        }
        if count >= self.threshold as usize && items.len() >= 2 {
            self.demoted.insert(model.to_string(), now);
            return Some(Demoted {
                failures: count,
                items,
            });
        }
        None
    }

    /// Where in `chain` an item starting at `now` begins: the first model neither refused nor
    /// demoted (the last usable one when every usable model is demoted), after trusting again
    /// the models quiet for long enough; none when every model is refused.
    pub fn start(&mut self, chain: &[String], now: Instant) -> Option<usize> {
        let quiet = self.quiet;
        self.demoted
            .retain(|_, last| now.saturating_duration_since(*last) < quiet);
        let usable: Vec<usize> = (0..chain.len())
            .filter(|&i| !self.is_refused(&chain[i]))
            .collect();
        usable
            .iter()
            .copied()
            .find(|&i| !self.demoted.contains_key(&chain[i]))
            .or_else(|| usable.last().copied())
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
        assert_eq!(h.start(&chain(), t), Some(0));
        assert_eq!(h.failed("a", "r/1", t), None);
        assert_eq!(
            h.start(&chain(), t),
            Some(0),
            "one failure is not a pattern"
        );
        assert_eq!(
            h.failed("a", "r/2", t + s(10)),
            Some(Demoted {
                failures: 2,
                items: vec!["r/1".into(), "r/2".into()]
            })
        );
        assert_eq!(
            h.start(&chain(), t + s(11)),
            Some(1),
            "new items start on b"
        );
        // A failure keeps it demoted; quiet brings it back.
        h.failed("a", "r/3", t + s(100));
        assert_eq!(h.start(&chain(), t + s(150)), Some(1));
        assert_eq!(h.start(&chain(), t + s(221)), Some(0));
    }

    #[test]
    fn one_items_failures_never_demote_a_model_for_every_item() {
        let t = Instant::now();
        let s = Duration::from_secs;
        let mut h = Health::new(2, s(60), s(120));
        for k in 0..5 {
            assert_eq!(h.failed("a", "r/1", t + s(k)), None);
        }
        assert_eq!(
            h.start(&chain(), t + s(6)),
            Some(0),
            "new items still start on a"
        );
        assert!(h.failed("a", "r/2", t + s(7)).is_some());
    }

    #[test]
    fn failures_outside_the_window_do_not_add_up() {
        let t = Instant::now();
        let s = Duration::from_secs;
        let mut h = Health::new(2, s(60), s(120));
        h.failed("a", "r/1", t);
        assert_eq!(h.failed("a", "r/2", t + s(61)), None);
        assert_eq!(h.start(&chain(), t + s(62)), Some(0));
    }

    #[test]
    fn with_every_model_demoted_items_start_on_the_last() {
        let t = Instant::now();
        let mut h = Health::new(1, WINDOW, QUIET);
        for m in chain() {
            h.failed(&m, "r/1", t);
            h.failed(&m, "r/2", t);
        }
        assert_eq!(h.start(&chain(), t), Some(2));
    }

    #[test]
    fn a_refused_model_is_never_used_again_and_a_chain_all_refused_has_no_start() {
        let t = Instant::now();
        let mut h = Health::new(2, WINDOW, QUIET);
        assert!(h.refuse("a", "401 invalid x-api-key"));
        assert!(!h.refuse("a", "again"), "told once");
        assert_eq!(h.start(&chain(), t), Some(1));
        assert_eq!(h.usable(&chain(), 0), Some(1));
        // A demoted b is passed over for c; quiet never brings a refused model back.
        h.failed("b", "r/1", t);
        h.failed("b", "r/2", t);
        assert_eq!(h.start(&chain(), t), Some(2));
        h.refuse("c", "credit balance too low");
        assert_eq!(h.start(&chain(), t + QUIET * 3), Some(1));
        h.refuse("b", "403");
        assert_eq!(h.start(&chain(), t + QUIET * 3), None);
        assert_eq!(h.usable(&chain(), 0), None);
        assert_eq!(
            h.refusal_cause(&chain()),
            "no model of the chain can be used: `a` (401 invalid x-api-key), `b` (403), `c` (credit balance too low); the next run tries again"
        );
    }
}
