//! `runner validate M`: parse and check a manifest; every problem at once.
//!
//! Beyond the manifest itself, validation plans it as `plan` would (reading only): discovery's
//! matches are counted, ids two matches share are errors, and a repository that is not there is
//! named — what `apply` would meet is said before it runs.

use super::{EXIT_INVALID, EXIT_OK, Ui, load};
use crate::plan::{Origin, PlanOptions, RepoStatus};
use std::path::Path;

pub fn run(ui: &Ui, path: &Path) -> i32 {
    let loaded = match load(ui, path) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let Some(plan) = super::plan(ui, &loaded, &PlanOptions::default()) else {
        return EXIT_INVALID;
    };
    let m = &loaded.manifest;
    let plural =
        |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let repos = plan.repositories.len();
    let missing = plan
        .repositories
        .iter()
        .filter(|r| r.status == RepoStatus::NotFound)
        .count();
    let discovered = plan
        .items
        .iter()
        .filter(|i| i.origin == Origin::Discovered)
        .count();
    let mut repo_part = plural(repos, "repository", "repositories");
    if missing > 0 {
        repo_part.push_str(&format!(" ({missing} not found)"));
    }
    let items_part = if m.discover.is_empty() {
        plural(plan.items.len(), "item", "items")
    } else {
        format!(
            "{} ({} declared, {discovered} discovered now by {})",
            plural(plan.items.len(), "item", "items"),
            m.items.len(),
            plural(m.discover.len(), "discovery rule", "discovery rules"),
        )
    };
    outln!(
        "`{}` is valid: manifest `{}`, {repo_part}, {items_part}",
        loaded.display_path,
        m.name,
    );
    EXIT_OK
}
