//! Which thread is runner's event loop, so that a call that blocks (git, a helper process, a
//! sleep) can check it is not made there. The check is a debug assertion: the test suite drives
//! the debug binary through every path of a drain, and a blocking call that slipped onto the
//! loop fails it there.

use std::cell::Cell;

thread_local! {
    static ON_EVENT_LOOP: Cell<bool> = const { Cell::new(false) };
}

/// Run `f` (the event loop: `block_on` of the drain) with this thread marked as the loop.
pub(crate) fn as_event_loop<T>(f: impl FnOnce() -> T) -> T {
    struct Unmark;
    impl Drop for Unmark {
        fn drop(&mut self) {
            ON_EVENT_LOOP.with(|c| c.set(false));
        }
    }
    ON_EVENT_LOOP.with(|c| c.set(true));
    let _unmark = Unmark;
    f()
}

/// Whether this thread is the event loop.
pub(crate) fn on_event_loop() -> bool {
    ON_EVENT_LOOP.with(Cell::get)
}

/// A call that blocks is about to be made: in debug builds, fail if this is the event loop.
#[track_caller]
pub fn blocking(what: &str) {
    debug_assert!(
        !on_event_loop(),
        "{what} would block the event loop; run it on the blocking pool"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_marked_thread_is_the_loop() {
        assert!(!on_event_loop());
        as_event_loop(|| {
            assert!(on_event_loop());
            std::thread::spawn(|| assert!(!on_event_loop()))
                .join()
                .unwrap();
        });
        assert!(!on_event_loop());
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "would block the event loop")]
    fn a_blocking_call_on_the_loop_fails() {
        as_event_loop(|| blocking("`git status`"));
    }
}
