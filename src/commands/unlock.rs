//! `runner unlock REPO`: an operator's release of a repository's lease and quarantine, refused
//! while any process runner started there lives.

use super::shared::state_path;
use crate::cli::UnlockArgs;
use crate::session::failure::{Ended, Failure};
use crate::vocab::EXIT_OK;
use std::path::Path;

/// Processes started by runner for the repository at `repo` (by `RUNNER_REPO_PATH`), with those
/// of runner's user started since `since` whose environment cannot be read (they may be). `Err`
/// when `/proc` cannot be read: then nothing can be proven.
fn processes_in(repo: &Path, since: Option<u64>) -> std::io::Result<Vec<i32>> {
    let prefix = format!("RUNNER_REPO_PATH={}", repo.display());
    let census =
        crate::process::census::pids_where(|var| var.starts_with(prefix.as_bytes()), since)?;
    Ok(census.found.into_iter().chain(census.unreadable).collect())
}

/// What keeps the lease of the repository whose git common dir is `common`: the processes its
/// holder's run left there (`holder`, its record), and whatever holds the lock file open.
fn keepers_of(common: &Path, holder: Option<&crate::lease::Record>) -> Vec<(i32, String)> {
    let mut found = holder
        .map(|h| {
            crate::process::census::survivors(&h.token, &h.repo, &h.cgroups, h.holder.start_time)
        })
        .unwrap_or_default();
    for k in crate::lease::lock_holders(common) {
        if !found.iter().any(|(p, _)| *p == k.0) {
            found.push(k);
        }
    }
    found
}

/// The folder `REPO` names: a path, or with `--manifest` also a repository's name in it.
fn repo_folder(args: &UnlockArgs) -> Result<std::path::PathBuf, Failure> {
    let given = std::path::absolute(&args.repo).unwrap_or_else(|_| args.repo.clone());
    let given = crate::support::fs::normalize(&given);
    let Some(m) = &args.manifest else {
        return Ok(given);
    };
    let loaded = super::shared::load(m)?;
    let name = args.repo.to_string_lossy();
    let located = crate::plan::repos::locate(&loaded);
    if let Some(l) = located.iter().find(|l| l.name == name) {
        return Ok(crate::support::fs::normalize(&l.path));
    }
    if given.exists() {
        return Ok(given);
    }
    let mut names: Vec<&str> = located.iter().map(|l| l.name.as_str()).collect();
    names.sort();
    Err(Failure::Invalid(format!(
        "`{name}` is neither a repository of `{}` nor a folder; its repositories: {}",
        m.display(),
        names.join(", ")
    )))
}

/// SIGTERM to `pids`, up to 5 seconds for them to go, then SIGKILL.
fn end_pids(pids: &[i32]) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    let alive = |p: i32| kill(Pid::from_raw(p), None).is_ok();
    for &p in pids {
        let _ = kill(Pid::from_raw(p), Signal::SIGTERM);
    }
    let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while std::time::Instant::now() < until && pids.iter().any(|&p| alive(p)) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    for &p in pids {
        let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
    }
    let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while std::time::Instant::now() < until && pids.iter().any(|&p| alive(p)) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

pub fn run(args: &UnlockArgs) -> Ended {
    let repo = repo_folder(args)?;
    let probe =
        crate::git::probe(&crate::git::Repos::default(), &repo).map_err(Failure::invalid)?;
    // The lease's descriptor lives on in every process spawned for the repository: a held lock
    // means one of them still runs.
    // `--kill`: a dead holder's leftovers are ended first (a live holder's never).
    if args.kill
        && crate::lease::is_held(&probe.common_dir)
        && let Some(h) =
            crate::lease::read_record(&probe.common_dir.join(crate::lease::RECORD_FILE))
        && h.holder.is_dead()
        && (!h.token.is_empty() || !h.cgroups.is_empty())
    {
        let ended = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
            .and_then(|rt| {
                rt.block_on(crate::engine::end_left(&h))
                    .map_err(|left| format!("processes {left:?} could not be ended"))
            });
        let pids = ended.map_err(|e| {
            Failure::Failed(format!("cannot end what run `{}` left: {e}", h.run_id))
        })?;
        eprintln!(
            "runner: ended {} process(es) that dead run `{}` left: {pids:?}",
            pids.len(),
            h.run_id
        );
        // What still keeps the lock — a process that left its group and cleared its
        // environment, invisible to the census — is found by the open lock file itself.
        let keepers = crate::lease::lock_holders(&probe.common_dir);
        if !keepers.is_empty() {
            let pids: Vec<i32> = keepers.iter().map(|(p, _)| *p).collect();
            end_pids(&pids);
            eprintln!(
                "runner: ended {} process(es) of dead run `{}` that kept its lease: {}",
                keepers.len(),
                h.run_id,
                keepers
                    .iter()
                    .map(|(pid, cmd)| format!("{pid} `{}`", crate::support::text::printable(cmd)))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    if crate::lease::is_held(&probe.common_dir) {
        let holder = crate::lease::read_record(&probe.common_dir.join(crate::lease::RECORD_FILE));
        let survivors = keepers_of(&probe.common_dir, holder.as_ref());
        let named = if survivors.is_empty() {
            String::new()
        } else {
            format!(
                "; its processes: {}",
                survivors
                    .iter()
                    .map(|(pid, cmd)| format!("{pid} `{}`", crate::support::text::printable(cmd)))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        return Err(Failure::Failed(format!(
            "the lease of `{}` is held{}{named}; refusing while its processes live",
            repo.display(),
            holder.map(|h| format!(" by {h}")).unwrap_or_default()
        )));
    }
    // Since the lease's last holder started, when it is known.
    let since = crate::lease::read_record(&probe.common_dir.join(crate::lease::RECORD_FILE))
        .and_then(|r| r.holder.start_time);
    let pids = processes_in(&repo, since).map_err(|e| {
        Failure::internal(format_args!(
            "cannot take a census of processes: {e}; refusing"
        ))
    })?;
    if !pids.is_empty() {
        return Err(Failure::Failed(format!(
            "processes of runner still work in `{}`, or may (pids {pids:?}, with any of runner's user whose environment cannot be read); refusing",
            repo.display()
        )));
    }
    let path = state_path(&args.state, args.manifest.as_deref());
    // No ledger yet: the quarantine is only the one kept with the repository.
    if let Some(mut ledger) = crate::ledger::store::open_existing(&path)? {
        ledger.release_quarantine(&repo.display().to_string())?;
    }
    let lifted = crate::lease::lift(
        &probe.common_dir,
        crate::lease::Lifted {
            by: crate::session::operator::who("unlock"),
            at: crate::support::clock::now(),
            why: args.reason.clone(),
        },
    );
    match lifted {
        Ok(true) => eprintln!(
            "runner: the quarantine of `{}` is lifted (recorded with who, when and why)",
            repo.display()
        ),
        Ok(false) => {}
        Err(e) => {
            return Err(Failure::Internal(format!(
                "cannot lift the quarantine of `{}`: {e}",
                repo.display()
            )));
        }
    }
    let _ = std::fs::remove_file(probe.common_dir.join(crate::lease::RECORD_FILE));
    eprintln!("runner: `{}` is released", repo.display());
    Ok(EXIT_OK)
}
