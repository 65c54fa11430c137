//! `runner pause M` / `runner resume M`: a durable pause of a manifest's drains, and its lifting.

use super::shared::state_path;
use crate::cli::PauseArgs;
use crate::ledger::Ledger;
use crate::session::prepare::who;
use crate::ui::term::Ui;
use crate::vocab::{EXIT_INTERNAL, EXIT_OK};

pub fn run(ui: &Ui, args: &PauseArgs, on: bool) -> i32 {
    let loaded = match super::shared::load(ui, &args.manifest) {
        Ok(l) => l,
        Err(c) => return c,
    };
    let path = state_path(&args.state, Some(&args.manifest));
    // A pause given here is seen by every runner of the ledger: on a shared PostgreSQL ledger,
    // by every machine's.
    let mut ledger = match crate::ledger::store::open(&path) {
        Ok(l) => l,
        Err(e) => {
            ui.error(e);
            return EXIT_INTERNAL;
        }
    };
    let name = &loaded.manifest.name;
    if args.wait && !on {
        ui.error("`--wait` is for `pause`: a resume has nothing to wait for");
        return crate::vocab::EXIT_INVALID;
    }
    let r = if on {
        ledger
            .set_paused(
                name,
                &format!(
                    "{}{}",
                    who("pause"),
                    super::shared::affected(&*ledger, name, None)
                ),
                args.reason.as_deref(),
                &crate::support::clock::now(),
            )
            .map(|()| {
                eprintln!("runner: `{name}` is paused; running items finish, no new ones start")
            })
    } else {
        ledger.clear_paused(name).map(|was| {
            if was {
                eprintln!("runner: `{name}` is resumed")
            } else {
                eprintln!("runner: `{name}` was not paused")
            }
        })
    };
    if let Err(e) = r {
        ui.error(e);
        return EXIT_INTERNAL;
    }
    if args.wait {
        return wait_for_drain(ui, &*ledger, name, args.timeout);
    }
    EXIT_OK
}

/// Wait until no item of manifest `name` runs any more (exit 0); a resume meanwhile, or the
/// timeout, ends the wait with exit 1 (the pause stays on a timeout).
fn wait_for_drain(
    ui: &Ui,
    ledger: &dyn Ledger,
    name: &str,
    timeout: Option<std::time::Duration>,
) -> i32 {
    let until = timeout.map(|t| std::time::Instant::now() + t);
    loop {
        let running = match ledger.live_claims_of(name) {
            Ok(c) => c,
            Err(e) => {
                ui.error(e);
                return EXIT_INTERNAL;
            }
        };
        match ledger.paused(name) {
            Ok(Some(_)) => {}
            Ok(None) => {
                ui.error(format_args!(
                    "`{name}` was resumed while waiting for its drain to end; {} item(s) still run",
                    running.len()
                ));
                return crate::vocab::EXIT_FAILURES;
            }
            Err(e) => {
                ui.error(e);
                return EXIT_INTERNAL;
            }
        }
        if running.is_empty() {
            eprintln!("runner: no item of `{name}` runs any more");
            return EXIT_OK;
        }
        if until.is_some_and(|u| std::time::Instant::now() >= u) {
            let items: Vec<String> = running
                .iter()
                .map(|(k, run)| format!("{}/{} (run {run})", k.repo, k.item))
                .collect();
            ui.error(format_args!(
                "`{name}` stays paused, but items still run: {}",
                crate::support::text::printable(&items.join(", "))
            ));
            return crate::vocab::EXIT_FAILURES;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
