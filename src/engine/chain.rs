//! The model chain of one item: a pure state machine.
//!
//! Every item starts on the primary. After `threshold` consecutive provider-class failures the
//! chain moves to the next model and never comes back; any other outcome resets the count. The
//! move is the item's own, never global. After the last model the chain is exhausted and stays
//! so: it never skips a model, never goes back, and ends after at most
//! `models × threshold` provider failures.

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChainStep {
    /// Same model again.
    Stay,
    /// Moved to the next model.
    Moved,
    /// No model left.
    Exhausted,
}

#[derive(Clone, Debug)]
pub struct ModelChain {
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
    pub fn start_at(&mut self, pos: usize) {
        self.pos = pos.min(self.len().saturating_sub(1));
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
    pub fn other_outcome(&mut self) {
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
            // Ends: with only provider failures it is exhausted after models × threshold of them.
            let mut c2 = ModelChain::new(models.clone(), threshold);
            let mut k = 0;
            while c2.provider_failure() != ChainStep::Exhausted { k += 1; prop_assert!(k < 1000); }
            prop_assert_eq!(k + 1, n.max(1) * threshold as usize);
            let _ = provider_failures;
        }
    }
}
