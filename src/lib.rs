//! runner: a declarative batch runner driven by YAML job manifests.
//!
//! The flow runs one way: `manifest` (text -> validated model) -> `plan` (model + disk -> items
//! with states, shared by `plan` and `apply`) -> execution. `git` is the thin adapter over the
//! git command line; `commands` holds one module per verb; `cli` the argument types.

pub mod cli;
pub mod commands;
pub mod git;
pub mod manifest;
pub mod plan;
