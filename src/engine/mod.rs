//! The engine: a capacity-bounded pool over the plan's pending items, one run per repository at
//! a time, across processes too (the repository lease).
//!
//! Decisions and effects are apart. [`scheduler`] decides, purely, what happens next: which item
//! to admit (the bound is `workers`, lowered by the capacity probe re-read whenever a slot
//! fills), which items leave the queue without running, when to wait, when the run is over, and
//! how it ended; it owns the stall guard. `drain` is the thin loop that performs those decisions
//! (claims, leases, the item tasks of [`item`], signals) and reports back what came of them. The
//! first SIGINT/SIGTERM stops admission and ends running trees with their grace period, a second
//! kills at once. Everything the engine learns goes out as [`Event`]s through a [`RunSink`]; it
//! knows none of the consumers behind it.

pub mod backoff;
pub mod chain;
pub mod child_env;
pub mod classify;
pub mod config;
pub mod confine;
mod drain;
pub(crate) mod guard;
pub mod health;
pub(crate) mod inplace;
pub mod item;
pub mod preflight;
pub mod publish;
pub mod run;
pub mod scheduler;
pub mod stall;
pub mod verdicts;
mod watch;

pub use drain::drain;
pub(crate) use drain::end_left;
pub use run::Answer;
pub use run::ClaimAnswer;
pub use run::DrainEnd;
pub use run::LockError;
pub use run::RepoLock;
pub use run::RunCx;
pub use run::RunSink;
pub(crate) use scheduler::signal_name;
