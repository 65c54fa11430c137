//! Which thread is running runner's event loop, so that a call that blocks (git, a helper
//! process, a sleep) can check it is not made there. The check is a debug assertion: the test
//! suite drives the debug binary through every path of a drain, and a blocking call that
//! slipped onto the loop fails it there.
//!
//! The loop is the drain's future and the item tasks it spawns, polled by runner's main thread
//! (marked for the whole drain, [`as_event_loop`]); an item task is marked too whatever thread
//! polls it ([`OnLoop`]), never a closure of the blocking pool, so that the check holds for any
//! shape of runtime (the runtime gives every thread it starts the same start hook, so the mark
//! is the future's, not the thread's).

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

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

/// A future of the event loop (an item's task): whatever thread polls it is the loop while it
/// does.
pub(crate) struct OnLoop<F>(Pin<Box<F>>);

/// `f`, marked as the event loop's.
pub(crate) fn on_loop<F: Future>(f: F) -> OnLoop<F> {
    OnLoop(Box::pin(f))
}

impl<F: Future> Future for OnLoop<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        struct Restore(bool);
        impl Drop for Restore {
            fn drop(&mut self) {
                ON_EVENT_LOOP.with(|c| c.set(self.0));
            }
        }
        let _restore = Restore(on_event_loop());
        ON_EVENT_LOOP.with(|c| c.set(true));
        self.0.as_mut().poll(cx)
    }
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
    fn a_thread_is_the_loop_while_it_polls_a_task_of_the_loop_and_only_then() {
        let inside = std::cell::Cell::new(false);
        let mut task = on_loop(std::future::poll_fn(|_| {
            inside.set(on_event_loop());
            Poll::Ready(())
        }));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(Pin::new(&mut task).poll(&mut cx).is_ready());
        assert!(inside.get(), "marked while polled");
        assert!(!on_event_loop(), "unmarked after");
        // A blocking call inside such a task is caught like one on the loop's own thread.
        #[cfg(debug_assertions)]
        {
            let mut blocks = on_loop(std::future::poll_fn(|_| {
                blocking("`git status`");
                Poll::Ready(())
            }));
            let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let _ = Pin::new(&mut blocks).poll(&mut cx);
            }));
            assert!(caught.is_err());
            assert!(!on_event_loop(), "unmarked after a panic too");
        }
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "would block the event loop")]
    fn a_blocking_call_on_the_loop_fails() {
        as_event_loop(|| blocking("`git status`"));
    }
}
