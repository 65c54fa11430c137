//! What the verbs share: loading and planning a manifest with its problems printed, where the
//! ledger lives, and the ledger opened for a verb that steers or reads runs.

use crate::manifest::LoadedManifest;
use crate::session::failure::Failure;
use std::path::Path;

/// Load a manifest; `Err` carries every problem it has.
pub fn load(path: &Path) -> Result<LoadedManifest, Failure> {
    Ok(crate::manifest::load_file(path)?)
}

pub(crate) fn state_path(
    state: &crate::cli::StateArgs,
    manifest: Option<&Path>,
) -> std::path::PathBuf {
    if let Some(p) = &state.state {
        return p.clone();
    }
    let dir = manifest
        .and_then(|m| std::path::absolute(m).ok())
        .and_then(|m| m.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| std::path::PathBuf::from("."));
    dir.join(".runner").join("state.db")
}

/// The items running now (of `run`, or of any run of `manifest`) for a provenance record:
/// ` while 2 items ran: api/parse, web/login` (at most ten named), or nothing.
pub(crate) fn affected(
    ledger: &dyn crate::ledger::Ledger,
    manifest: &str,
    run: Option<&str>,
) -> String {
    let Ok(claims) = ledger.live_claims_of(manifest) else {
        return String::new();
    };
    let names: Vec<String> = claims
        .iter()
        .filter(|(_, r)| run.is_none_or(|id| id == r))
        .map(|(k, _)| format!("{}/{}", k.repo, k.item))
        .collect();
    match names.len() {
        0 => " while no item ran".to_string(),
        n => format!(
            " while {n} item{} ran: {}{}",
            if n == 1 { "" } else { "s" },
            names
                .iter()
                .take(10)
                .cloned()
                .collect::<Vec<_>>()
                .join(", "),
            if n > 10 { ", …" } else { "" }
        ),
    }
}

/// A looked-up run, or why there is none.
pub(crate) fn found<T>(
    r: crate::ledger::Result<Option<T>>,
    run: &str,
    path: &Path,
) -> Result<T, Failure> {
    match r? {
        Some(v) => Ok(v),
        None => {
            let shown = crate::support::text::printable(run);
            // A manifest given where a run id goes is the likely slip.
            let hint = if Path::new(run).is_file() {
                format!(
                    "; `{shown}` is a file: give a run id (`runner status {shown}` lists the runs) and `--manifest {shown}`"
                )
            } else {
                String::new()
            };
            Err(Failure::Invalid(format!(
                "no run `{shown}` in `{}`{hint}",
                path.display()
            )))
        }
    }
}

/// Open the ledger for a reading command: a shared PostgreSQL ledger (`--state postgres://…`),
/// or the SQLite file, which must exist (reading commands never create one).
pub(crate) fn open_store(path: &Path) -> Result<crate::ledger::store::Store, Failure> {
    open_store_if_made(path)?.ok_or_else(|| {
        Failure::Invalid(format!(
            "no state ledger at `{}`; give the manifest or `--state`",
            path.display()
        ))
    })
}

/// [`open_store`], with `None` for a SQLite ledger not made yet (no run so far).
pub(crate) fn open_store_if_made(
    path: &Path,
) -> Result<Option<crate::ledger::store::Store>, Failure> {
    Ok(crate::ledger::store::open_existing(path)?)
}
