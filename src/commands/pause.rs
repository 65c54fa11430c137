//! `runner pause M` / `runner resume M`: a durable pause of a manifest's drains, and its lifting.

use super::{EXIT_INTERNAL, EXIT_OK, Ui, state_path, who};
use crate::cli::PauseArgs;
use crate::ledger::sqlite::SqliteLedger;

pub fn run(ui: &Ui, args: &PauseArgs, on: bool) -> i32 {
    let loaded = match super::load(ui, &args.manifest) {
        Ok(l) => l,
        Err(c) => return c,
    };
    let path = state_path(&args.state, Some(&args.manifest));
    let mut ledger = match SqliteLedger::open(&path) {
        Ok(l) => l,
        Err(e) => {
            ui.error(e);
            return EXIT_INTERNAL;
        }
    };
    let name = &loaded.manifest.name;
    let r = if on {
        ledger
            .set_paused(
                name,
                &who(),
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
    match r {
        Ok(()) => EXIT_OK,
        Err(e) => {
            ui.error(e);
            EXIT_INTERNAL
        }
    }
}
