//! The model chain of one item: a pure state machine.
//!
//! Every item starts on the primary. After `threshold` consecutive provider-class failures the
//! chain moves to the next model and never comes back; any other outcome resets the count. The
//! move is the item's own, never global. After the last model the chain is exhausted and stays
//! so: it never skips a model, never goes back, and ends after at most
//! `models × threshold` provider failures.
//!
//! A chain of one model (no fallbacks) has nowhere to move: it keeps that model, the item
//! resting with back-off between tries, for [`NO_FALLBACK_LIMIT`] provider failures in a row,
//! then gives up for this run ([`ChainStep::Unavailable`]: the item is held, not halted — the
//! provider's trouble is no verdict on the work, and the next run tries again).

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ChainStep {
    /// Same model again.
    Stay,
    /// Moved to the next model.
    Moved,
    /// No model left.
    Exhausted,
    /// The only model (a chain without fallbacks) kept failing: give up for this run.
    Unavailable,
}

/// Provider failures in a row a chain without fallbacks takes on its only model before the item
/// is held (`provider-unavailable`); with back-off between them (10 s doubling up to 10 min by
/// default) that is about half an hour of a provider's trouble.
pub(crate) const NO_FALLBACK_LIMIT: u32 = 8;

#[derive(Clone, Debug)]
pub(crate) struct ModelChain {
    models: Vec<String>,
    threshold: u32,
    pos: usize,
    consecutive: u32,
}

impl ModelChain {
    /// An empty list stands for one unnamed model (a manifest without `models`).
    pub fn new(models: Vec<String>, threshold: u32) -> Self {
        ModelChain {
            models,
            threshold: threshold.max(1),
            pos: 0,
            consecutive: 0,
        }
    }

    fn len(&self) -> usize {
        self.models.len().max(1)
    }

    /// Begin on model `pos` of the chain instead of the primary (the run found the models before
    /// it failing): the models before it count as tried.
    pub(crate) fn start_at(&mut self, pos: usize) {
        self.pos = pos.min(self.len().saturating_sub(1));
    }

    /// Where in the chain the next attempt is.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Go on at model `pos` (later in the chain: the ones between were refused), its count of
    /// provider failures from zero.
    pub(crate) fn move_to(&mut self, pos: usize) {
        debug_assert!(pos >= self.pos, "a chain never goes back");
        self.pos = pos.max(self.pos).min(self.len());
        self.consecutive = 0;
    }

    pub fn exhausted(&self) -> bool {
        self.pos >= self.len()
    }

    /// The model the next attempt runs on.
    pub fn current(&self) -> Option<&str> {
        self.models.get(self.pos).map(String::as_str)
    }

    pub fn provider_failure(&mut self) -> ChainStep {
        if self.exhausted() {
            return ChainStep::Exhausted;
        }
        self.consecutive += 1;
        if self.len() == 1 {
            return if self.consecutive >= NO_FALLBACK_LIMIT {
                ChainStep::Unavailable
            } else {
                ChainStep::Stay
            };
        }
        if self.consecutive < self.threshold {
            return ChainStep::Stay;
        }
        self.consecutive = 0;
        self.pos += 1;
        if self.exhausted() {
            ChainStep::Exhausted
        } else {
            ChainStep::Moved
        }
    }

    /// Any outcome that is not the provider's fault breaks the streak.
    pub(crate) fn other_outcome(&mut self) {
        self.consecutive = 0;
    }

    /// The models tried so far, in order.
    pub fn tried(&self) -> Vec<String> {
        let end = (self.pos + 1).min(self.models.len());
        self.models[..end].to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_chain_without_fallbacks_keeps_its_model_then_gives_up_for_the_run() {
        let mut c = ModelChain::new(vec!["only".into()], 2);
        for _ in 1..NO_FALLBACK_LIMIT {
            assert_eq!(c.provider_failure(), ChainStep::Stay);
            assert_eq!(c.current(), Some("only"));
        }
        assert_eq!(c.provider_failure(), ChainStep::Unavailable);
        // Any other outcome starts the count again.
        let mut c = ModelChain::new(vec!["only".into()], 2);
        for _ in 1..NO_FALLBACK_LIMIT {
            c.provider_failure();
        }
        c.other_outcome();
        assert_eq!(c.provider_failure(), ChainStep::Stay);
    }

    #[test]
    fn moves_after_threshold_consecutive_provider_failures() {
        let mut c = ModelChain::new(vec!["a".into(), "b".into()], 2);
        assert_eq!(c.current(), Some("a"));
        assert_eq!(c.provider_failure(), ChainStep::Stay);
        c.other_outcome();
        assert_eq!(c.provider_failure(), ChainStep::Stay);
        assert_eq!(c.provider_failure(), ChainStep::Moved);
        assert_eq!(c.current(), Some("b"));
        assert_eq!(c.provider_failure(), ChainStep::Stay);
        assert_eq!(c.provider_failure(), ChainStep::Exhausted);
        assert_eq!(c.provider_failure(), ChainStep::Exhausted);
        assert_eq!(c.tried(), vec!["a".to_string(), "b".to_string()]);
    }

    proptest! {
        #[test]
        fn never_skips_never_goes_back_always_ends(
            n in 0usize..5,
            threshold in 1u32..4,
            steps in prop::collection::vec(any::<bool>(), 0..200),
        ) {
            let models: Vec<String> = (0..n).map(|i| format!("m{i}")).collect();
            let mut c = ModelChain::new(models.clone(), threshold);
            let mut last = 0usize;
            let mut provider_failures = 0usize;
            for provider in steps {
                if c.exhausted() { break; }
                if provider {
                    provider_failures += 1;
                    c.provider_failure();
                } else {
                    c.other_outcome();
                }
                let pos = models.iter().position(|m| Some(m.as_str()) == c.current()).unwrap_or(models.len().max(1));
                prop_assert!(pos == last || pos == last + 1, "skipped or went back: {last} -> {pos}");
                last = pos;
            }
            // Ends: with only provider failures a chain with fallbacks is exhausted after
            // models × threshold of them; one without gives up after NO_FALLBACK_LIMIT.
            let mut c2 = ModelChain::new(models.clone(), threshold);
            let mut k = 0;
            let end = loop {
                match c2.provider_failure() {
                    ChainStep::Stay | ChainStep::Moved => {}
                    step => break step,
                }
                k += 1;
                prop_assert!(k < 1000);
            };
            if n > 1 {
                prop_assert_eq!(end, ChainStep::Exhausted);
                prop_assert_eq!(k + 1, n * threshold as usize);
            } else {
                prop_assert_eq!(end, ChainStep::Unavailable);
                prop_assert_eq!(k + 1, NO_FALLBACK_LIMIT as usize);
                prop_assert!(!c2.exhausted(), "the only model is kept");
            }
            let _ = provider_failures;
        }
    }
}
