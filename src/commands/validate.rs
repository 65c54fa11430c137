//! `runner validate M`: parse and check a manifest; every problem at once.
//!
//! Beyond the manifest itself, validation plans it as `plan` would (reading only): discovery's
//! matches are counted, ids two matches share are errors, and a repository that is not there is
//! named — what `apply` would meet is said before it runs.

use super::shared::load;
use crate::manifest::{CommandSpec, Problem};
use crate::plan::{Origin, RepoStatus};
use crate::session::failure::{Ended, Failure};
use crate::ui::term::Ui;
use crate::vocab::EXIT_OK;
use std::path::Path;

pub fn run(ui: &Ui, path: &Path) -> Ended {
    let loaded = load(path)?;
    let plan = crate::session::prepare::planned_whole(ui, &loaded)?;
    let missing = programs_not_on_path(&loaded);
    if !missing.is_empty() {
        return Err(Failure::Manifest(crate::manifest::LoadError::Invalid(
            loaded.error(missing),
        )));
    }
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
    Ok(EXIT_OK)
}

/// A list `run` whose program is a bare name (no `/`) that is not on `PATH` — as its command
/// will look it up (runner's `PATH`, or `/bin:/usr/bin` without one): the command could never
/// start, as a relative path that does not exist could not.
fn programs_not_on_path(loaded: &crate::manifest::LoadedManifest) -> Vec<Problem> {
    let m = &loaded.manifest;
    let mut commands: Vec<(String, &CommandSpec)> = vec![("worker.run".into(), &m.worker.run)];
    for (i, g) in m.gates.iter().enumerate() {
        commands.push((format!("gates[{i}].run"), &g.run));
    }
    for (r, repo) in m.repositories.iter().enumerate() {
        if let Some(run) = repo.worker.as_ref().and_then(|w| w.run.as_ref()) {
            commands.push((format!("repositories[{r}].worker.run"), run));
        }
        for (i, g) in repo.gates.iter().flatten().enumerate() {
            commands.push((format!("repositories[{r}].gates[{i}].run"), &g.run));
        }
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/bin:/usr/bin".into());
    let found = |program: &str| {
        std::env::split_paths(&path).any(|d| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(d.join(program))
                .is_ok_and(|md| md.is_file() && md.permissions().mode() & 0o111 != 0)
        })
    };
    let mut problems = Vec::new();
    for (key, cmd) in commands {
        let CommandSpec::Argv(argv) = cmd else {
            continue;
        };
        let Some(program) = argv.first() else {
            continue;
        };
        if program.is_empty() || program.contains('/') || program.contains('{') || found(program) {
            continue;
        }
        let mut p = Problem::new(
            "program-not-found",
            key,
            format!(
                "`{program}` is not on `PATH` (`{}`)",
                path.to_string_lossy()
            ),
        )
        .help("install it, give its path, or run `runner validate` where it is installed");
        if let Some(span) = span_of(&loaded.text, program) {
            p = p.at(span);
        }
        problems.push(p);
    }
    problems
}

/// Where `needle` first appears in `text` as a quoted or bare word.
fn span_of(text: &str, needle: &str) -> Option<crate::manifest::yaml::Span> {
    let offset = [
        format!("\"{needle}\""),
        format!("'{needle}'"),
        format!("[{needle},"),
    ]
    .iter()
    .find_map(|n| text.find(n.as_str()).map(|at| at + 1))
    .or_else(|| text.find(needle))?;
    let before = &text[..offset];
    let line = before.matches('\n').count() as u64 + 1;
    let column = (offset - before.rfind('\n').map_or(0, |i| i + 1)) as u64 + 1;
    Some(crate::manifest::yaml::Span {
        offset,
        len: needle.len(),
        line,
        column,
    })
}
