//! `runner pause M` / `runner resume M`: a durable pause of a manifest's drains, and its lifting.

use super::shared::state_path;
use crate::cli::PauseArgs;
use crate::session::failure::{Ended, Failure};
use crate::session::operator::who;
use crate::vocab::EXIT_OK;

pub fn run(args: &PauseArgs, on: bool) -> Ended {
    if args.wait && !on {
        return Err(Failure::invalid(
            "`--wait` is for `pause`: a resume has nothing to wait for",
        ));
    }
    let Some(manifest) = &args.manifest else {
        return host(args, on);
    };
    let loaded = super::shared::load(manifest)?;
    let path = state_path(&args.state, Some(manifest));
    // A pause given here is seen by every runner of the ledger: on a shared PostgreSQL ledger,
    // by every machine's.
    let mut ledger = crate::ledger::store::open(&path)?;
    let name = &loaded.manifest.name;
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
    r?;
    if args.wait {
        // The pause just written, as the ledger says it: a different one later is not ours.
        let own = ledger.paused(name)?;
        return wait_for(args.timeout, &format!("`{name}`"), || {
            let running = ledger
                .live_claims_of(name)
                .map_err(|e| e.to_string())?
                .iter()
                .map(|(k, run)| format!("{}/{} (run {run})", k.repo, k.item))
                .collect();
            let now = ledger.paused(name).map_err(|e| e.to_string())?;
            Ok((running, ours(own.as_deref(), now.map(|p| (p.clone(), p)))))
        });
    }
    Ok(EXIT_OK)
}

/// Whether the pause standing now (`now`: what tells it apart, and its text) is the one this
/// command wrote (told apart by `own`): `Err` says what replaced or lifted it.
fn ours(own: Option<&str>, now: Option<(String, String)>) -> Result<(), String> {
    match now {
        None => Err("was resumed".into()),
        Some((key, _)) if Some(key.as_str()) == own => Ok(()),
        Some((_, text)) => Err(format!(
            "was paused again ({}): that pause is not this one",
            crate::support::text::printable(&text)
        )),
    }
}

/// `runner pause --host` / `resume --host`: the host's pause, in the host folder.
fn host(args: &PauseArgs, on: bool) -> Ended {
    use crate::lease::{clear_host_pause, host_pause, host_slots_in_use, set_host_pause};
    if !on {
        return match clear_host_pause() {
            Ok(Some(p)) => {
                eprintln!(
                    "runner: the host is resumed (it was {})",
                    crate::support::text::printable(&p.text())
                );
                Ok(EXIT_OK)
            }
            Ok(None) => {
                eprintln!("runner: the host was not paused");
                Ok(EXIT_OK)
            }
            Err(e) => Err(Failure::internal(format_args!(
                "cannot lift the host's pause: {e}"
            ))),
        };
    }
    let own = set_host_pause(
        who("pause --host"),
        args.reason.clone(),
        crate::support::clock::now(),
    )
    .map_err(|e| {
        Failure::internal(format_args!(
            "cannot pause the host in `{}`: {e}",
            crate::lease::host_dir().display()
        ))
    })?;
    eprintln!(
        "runner: the host is paused; every drain on it lets its running items finish and starts no new one"
    );
    if !args.wait {
        return Ok(EXIT_OK);
    }
    wait_for(args.timeout, "the host", || {
        let n = host_slots_in_use().map_err(|e| e.to_string())?;
        let running = (0..n).map(|_| "an item".to_string()).collect();
        let now = host_pause().map(|p| (p.token.clone(), p.text()));
        Ok((running, ours(Some(&own.token), now)))
    })
}

/// Wait until `look` finds nothing running (exit 0) under this command's own pause; that pause
/// lifted or replaced meanwhile (said, not mistaken for this one), or the timeout, ends the wait
/// with exit 1 — the pause stays on a timeout. `look` gives what still runs and whether the
/// pause standing is this command's.
fn wait_for(
    timeout: Option<std::time::Duration>,
    what: &str,
    mut look: impl FnMut() -> Result<(Vec<String>, Result<(), String>), String>,
) -> Ended {
    let until = timeout.map(|t| std::time::Instant::now() + t);
    loop {
        let (running, own) = look().map_err(Failure::Internal)?;
        if let Err(why) = own {
            return Err(Failure::Failed(format!(
                "{what} {why} while waiting for its drains to end; {} item(s) still run",
                running.len()
            )));
        }
        if running.is_empty() {
            eprintln!("runner: {what}: nothing runs any more");
            return Ok(EXIT_OK);
        }
        if until.is_some_and(|u| std::time::Instant::now() >= u) {
            return Err(Failure::Failed(format!(
                "{what} stays paused, but items still run: {}",
                crate::support::text::printable(&running.join(", "))
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
