//! What a ledger holds between its commits, and when it writes it: the same for every backend,
//! which only stores it.
//!
//! An event is buffered, numbered in its ledger's order, with the item result it records when
//! it is an item's end. The buffer is written with the next change that must be durable before
//! its effect (a claim, a run's end) — or at once, when it holds [`EVENTS_BUFFERED`] events (a
//! cancelled run settling 100,000 items is written as it comes) or an item's result that is to
//! be committed ([`crate::ledger::Ledger::commit_results`]).

use super::{LedgerError, Result};
use crate::events::Event;
use crate::vocab::ItemKey;
use crate::vocab::ItemOutcome;

/// The most events a ledger holds before it writes them, whatever else is pending: a burst (a
/// cancelled run settling 100,000 items at once) is written as it comes, not held.
pub(crate) const EVENTS_BUFFERED: usize = 1024;

/// An event waiting to be written.
pub(crate) struct PendingEvent {
    pub run_id: String,
    pub seq: i64,
    pub at: String,
    pub repo: Option<String>,
    pub item: Option<String>,
    /// The event as JSON.
    pub body: String,
}

/// An item's result, recorded with its `item-finished` event and written with the next commit.
pub(crate) struct PendingResult {
    pub key: ItemKey,
    pub run_id: String,
    pub outcome: ItemOutcome,
    pub reason: Option<String>,
    pub cause: Option<String>,
    pub at: String,
}

/// The result an event records, when it is an item's `item-finished`.
pub(crate) fn result_of(
    run_id: &str,
    item: Option<&ItemKey>,
    ev: &Event,
    at: &str,
) -> Option<PendingResult> {
    match (ev, item) {
        (
            Event::ItemFinished {
                outcome,
                reason,
                cause,
                ..
            },
            Some(key),
        ) => Some(PendingResult {
            key: key.clone(),
            run_id: run_id.to_string(),
            outcome: *outcome,
            reason: reason.clone(),
            cause: cause.clone(),
            at: at.to_string(),
        }),
        _ => None,
    }
}

/// Events and results recorded and not yet written, with the ledger's event count.
#[derive(Default)]
pub(crate) struct Buffer {
    pub events: Vec<PendingEvent>,
    pub results: Vec<PendingResult>,
    /// The last event's number in this ledger's order.
    seq: i64,
}

impl Buffer {
    /// Buffer event `ev` of run `run_id` (and the item result it records, at an item's end),
    /// numbered next. `Ok(true)` when the buffer is full and is to be written now; `ledger`
    /// names the ledger in an error.
    pub(crate) fn record(
        &mut self,
        run_id: &str,
        item: Option<&ItemKey>,
        ev: &Event,
        at: &str,
        ledger: &str,
    ) -> Result<bool> {
        let body = serde_json::to_string(ev).map_err(|source| LedgerError::Record {
            path: ledger.to_string(),
            what: "event to record".into(),
            source,
        })?;
        self.seq += 1;
        self.events.push(PendingEvent {
            run_id: run_id.to_string(),
            seq: self.seq,
            at: at.to_string(),
            repo: item.map(|k| k.repo.clone()),
            item: item.map(|k| k.item.clone()),
            body,
        });
        if let Some(r) = result_of(run_id, item, ev, at) {
            self.results.push(r);
        }
        Ok(self.events.len() >= EVENTS_BUFFERED)
    }

    /// Whether an item's result waits: what `commit_results` writes.
    pub(crate) fn has_results(&self) -> bool {
        !self.results.is_empty()
    }

    /// How many more events may be recorded before one asks for a write.
    pub(crate) fn room(&self) -> usize {
        EVENTS_BUFFERED.saturating_sub(self.events.len() + 1)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.events.is_empty() && self.results.is_empty()
    }

    /// What is buffered, to write; the count goes on.
    pub(crate) fn take(&mut self) -> Buffer {
        Buffer {
            events: std::mem::take(&mut self.events),
            results: std::mem::take(&mut self.results),
            seq: self.seq,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(item: &str) -> ItemKey {
        ItemKey {
            manifest: "m".into(),
            repo: "r".into(),
            item: item.into(),
            def_hash: "d".into(),
        }
    }

    #[test]
    fn events_are_numbered_in_order_and_an_items_end_carries_its_result() {
        let mut b = Buffer::default();
        let started = Event::ItemStarted { item: 0 };
        assert!(!b.record("run", None, &started, "t0", "l").unwrap());
        assert!(!b.has_results());
        let end = Event::ItemFinished {
            item: 0,
            outcome: ItemOutcome::Completed,
            reason: None,
            cause: None,
        };
        b.record("run", Some(&key("a")), &end, "t1", "l").unwrap();
        assert!(b.has_results());
        let taken = b.take();
        assert!(b.is_empty() && !taken.is_empty());
        assert_eq!(
            taken.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
            [1, 2]
        );
        assert_eq!(taken.results[0].key.item, "a");
        // The count goes on after a write.
        b.record("run", None, &started, "t2", "l").unwrap();
        assert_eq!(b.events[0].seq, 3);
    }

    #[test]
    fn a_full_buffer_asks_to_be_written() {
        let mut b = Buffer::default();
        let ev = Event::ItemStarted { item: 0 };
        let full = (0..EVENTS_BUFFERED)
            .map(|_| b.record("run", None, &ev, "t", "l").unwrap())
            .collect::<Vec<_>>();
        assert_eq!(full.iter().filter(|f| **f).count(), 1);
        assert!(full[EVENTS_BUFFERED - 1]);
    }
}
