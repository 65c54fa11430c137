//! runner: a declarative batch runner driven by YAML job manifests.
//!
//! The module list below is the architecture, top floor first; an import only ever points down
//! (`tests/integration/architecture.rs` fails on one that points up). `cli` holds the argument types and
//! `commands` one module per verb, wiring a run `session` (prepare, fan-out, finish) where a run is
//! made; a verb returns its exit code or the `session::failure::Failure` that stopped it, which
//! `commands::run` alone says. `ui` (progress) and `report` consume the event stream; `ledger` is the durable state
//! behind the engine's `RunSink` (a SQLite file, or a PostgreSQL database shared by runners on
//! several machines). `engine` runs the drain: a pure `scheduler` decides, a thin loop performs.
//! `plan` turns the manifest and the repositories into items with states, shared by `plan` and
//! `apply`. `git` reaches git through its command line (one command builder) and reads and writes
//! the few files of git's that every item needs in process, what a run learns of its
//! repositories kept in the one handle the run holds (`git::Repos`); `process` the one place that spawns
//! (and the only module allowed `unsafe`), `lease` the per-repository lock, `manifest` the
//! validated model. `events`, `vocab` (the closed vocabularies), `failures` (the failures test
//! runners print, recognised) and `support` (atomic writes, clock, host identity) sit at the
//! bottom.

#![deny(unsafe_code)]

pub mod cli;
pub mod commands;
pub mod engine;
pub mod events;
pub mod failures;
pub mod git;
pub mod lease;
pub mod ledger;
pub mod manifest;
pub mod plan;
pub mod process;
pub mod report;
pub mod session;
pub mod support;
pub mod ui;
pub mod vocab;
