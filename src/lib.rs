//! runner: a declarative batch runner driven by YAML job manifests.
//!
//! The flow runs one way: `manifest` (text -> validated model) -> `plan` (model + disk -> items
//! with states, shared by `plan` and `apply`) -> `engine` (the pool, one run per repository) ->
//! `events` -> consumers (`report`, `ui`). `process` is the one place that spawns; `git` the thin
//! adapter over the git command line; `lease` the per-repository lock; `commands` holds one
//! module per verb; `cli` the argument types.

pub mod cli;
pub mod commands;
pub mod engine;
pub mod events;
pub mod git;
pub mod lease;
pub mod ledger;
pub mod manifest;
pub mod plan;
pub mod process;
pub mod report;
pub mod support;
pub mod ui;
pub mod vocab;
