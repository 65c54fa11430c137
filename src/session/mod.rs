//! A run session: what stands between the verbs and the engine.
//!
//! A session has three parts, each in a file of its own. [`prepare`] settles the worker bound
//! (the manifest's, `-j`, and a nested run's ceiling: `bounds`) into the plan before anything is
//! estimated from it, lays the ledger's standing over the plan (`standing`), and builds what the
//! engine is handed; `workspace` is where its files go, [`operator`] who asked.
//! [`fanout`] is the one place that hands each event to the ledger, the progress display, the
//! report and the event stream. [`finish`] ends the run in the ledger, writes the reports, runs
//! retention and the history page, and says the last line. [`records`] reads a manifest's runs
//! back from the ledger for those verbs that only read (`report`, `gc`); [`budget`] says what a
//! run may spend; [`metrics`] renders a manifest's metrics for monitoring. [`sources`], `pulls`
//! and `writeback` ask the trackers and the forges, and [`incidents`] tells a person, each
//! through an adapter command (`adapter`: the command with its role's secrets, the redactor).
//! [`failure`] is how any of it fails, up to the verb. The files use each other one way (a
//! session's parts are data in `parts`, which names none of the steps).
//!
//! `apply` wires them: [`Session::prepare`], [`Session::drain`], [`Session::finish`]. `plan`
//! uses the same preparation, so what it estimates is what `apply` will do.

pub(crate) mod adapter;
pub(crate) mod bounds;
pub mod budget;
pub mod failure;
pub mod fanout;
mod feedback;
pub mod finish;
pub mod incidents;
pub(crate) mod keys;
pub mod metrics;
pub mod operator;
mod parts;
pub mod prepare;
pub mod pulls;
pub mod records;
mod run;
pub mod sources;
pub(crate) mod standing;
pub(crate) mod workspace;
pub(crate) mod writeback;

pub(crate) use parts::{Options, Session};
