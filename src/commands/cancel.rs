//! `runner cancel RUN`: stop a live run (SIGTERM), recording who asked and why.

use super::shared::{found, state_path};
use crate::cli::CancelArgs;
use crate::session::failure::{Ended, Failure};
use crate::session::operator::who;
use crate::vocab::EXIT_OK;

pub fn run(args: &CancelArgs) -> Ended {
    let path = state_path(&args.state, args.manifest.as_deref());
    let shared = crate::ledger::store::is_shared(&path);
    let mut ledger = super::shared::open_store(&path)?;
    let run = found(ledger.run(&args.run), &args.run, &path)?;
    if run.status() != crate::ledger::RunStatus::Live {
        return Err(Failure::Failed(format!(
            "run `{}` is not live ({})",
            run.id,
            run.status()
        )));
    }
    if !shared && run.holder.host != crate::support::host::hostname() {
        return Err(Failure::Failed(format!(
            "run `{}` runs on {}; cancel it there",
            run.id, run.holder.host
        )));
    }
    // Who and why are recorded before the signal, so the run can name them as it ends.
    ledger.request_stop(
        &run.id,
        &format!(
            "{}{}",
            who("cancel"),
            super::shared::affected(&*ledger, &run.manifest, Some(&run.id))
        ),
        args.reason.as_deref(),
        &crate::support::clock::now(),
    )?;
    if run.holder.host == crate::support::host::hostname() {
        let pid = nix::unistd::Pid::from_raw(run.holder.pid as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).map_err(|e| {
            Failure::internal(format_args!("cannot signal pid {}: {e}", run.holder.pid))
        })?;
        eprintln!(
            "runner: asked run {} (pid {}) to stop",
            run.id, run.holder.pid
        );
    } else {
        // On another machine: the run reads the request from the shared ledger within seconds.
        eprintln!(
            "runner: asked run {} (pid {} on {}) to stop, through the shared ledger",
            run.id, run.holder.pid, run.holder.host
        );
    }
    if !args.wait {
        return Ok(EXIT_OK);
    }
    let until = args.timeout.map(|t| std::time::Instant::now() + t);
    loop {
        if let Some(r) = ledger.run(&run.id)?
            && r.status() != crate::ledger::RunStatus::Live
        {
            eprintln!(
                "runner: run {} {}{}",
                r.id,
                match r.status() {
                    crate::ledger::RunStatus::Died => "died without recording its end".into(),
                    _ => format!("ended {}", r.ending.as_deref().unwrap_or("")),
                },
                r.cause
                    .as_deref()
                    .map(|c| format!(" — {}", crate::support::text::printable(c)))
                    .unwrap_or_default()
            );
            return Ok(EXIT_OK);
        }
        if until.is_some_and(|u| std::time::Instant::now() >= u) {
            return Err(Failure::Failed(format!(
                "run `{}` has not ended yet",
                run.id
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
