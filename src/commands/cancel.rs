//! `runner cancel RUN`: stop a live run (SIGTERM), recording who asked and why.

use super::shared::{found, state_path};
use crate::cli::CancelArgs;
use crate::session::prepare::who;
use crate::ui::term::Ui;
use crate::vocab::{EXIT_INTERNAL, EXIT_OK};

pub fn run(ui: &Ui, args: &CancelArgs) -> i32 {
    let path = state_path(&args.state, args.manifest.as_deref());
    let shared = crate::ledger::store::is_shared(&path);
    let mut ledger = match super::shared::open_store(ui, &path) {
        Ok(l) => l,
        Err(c) => return c,
    };
    let run = match found(ui, ledger.run(&args.run), &args.run, &path) {
        Ok(r) => r,
        Err(c) => return c,
    };
    if run.status() != crate::ledger::RunStatus::Live {
        ui.error(format_args!(
            "run `{}` is not live ({})",
            run.id,
            run.status()
        ));
        return crate::vocab::EXIT_FAILURES;
    }
    if !shared && run.holder.host != crate::support::host::hostname() {
        ui.error(format_args!(
            "run `{}` runs on {}; cancel it there",
            run.id, run.holder.host
        ));
        return crate::vocab::EXIT_FAILURES;
    }
    // Who and why are recorded before the signal, so the run can name them as it ends.
    if let Err(e) = ledger.request_stop(
        &run.id,
        &format!(
            "{}{}",
            who("cancel"),
            super::shared::affected(&*ledger, &run.manifest, Some(&run.id))
        ),
        args.reason.as_deref(),
        &crate::support::clock::now(),
    ) {
        ui.error(e);
        return EXIT_INTERNAL;
    }
    if run.holder.host == crate::support::host::hostname() {
        let pid = nix::unistd::Pid::from_raw(run.holder.pid as i32);
        if let Err(e) = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM) {
            ui.error(format_args!("cannot signal pid {}: {e}", run.holder.pid));
            return EXIT_INTERNAL;
        }
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
        return EXIT_OK;
    }
    let until = args.timeout.map(|t| std::time::Instant::now() + t);
    loop {
        match ledger.run(&run.id) {
            Ok(Some(r)) if r.status() != crate::ledger::RunStatus::Live => {
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
                return EXIT_OK;
            }
            Ok(_) => {}
            Err(e) => {
                ui.error(e);
                return EXIT_INTERNAL;
            }
        }
        if until.is_some_and(|u| std::time::Instant::now() >= u) {
            ui.error(format_args!("run `{}` has not ended yet", run.id));
            return crate::vocab::EXIT_FAILURES;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
