//! `runner status --watch`: a live view of the running drains, redrawn from the ledger every
//! `--interval` — each run's slots with their item, attempt, model, phase and elapsed time, what
//! waits (back-off, a shared resource), its counts and an ETA. It reads only the ledger, so it
//! works from another terminal or over ssh while cron runs the drain. On a terminal the screen
//! is redrawn in place; piped, each refresh is printed after the last, plain.

use crate::cli::StatusArgs;
use crate::commands::shared::state_path;
use crate::ledger::RunStatus;
use crate::ledger::store::Store;
use crate::session::failure::Ended;
use std::fmt::Write as _;

pub fn run(args: &StatusArgs) -> Ended {
    use std::io::{IsTerminal, Write};
    let path = state_path(&args.state, args.manifest.as_deref());
    let loaded = match &args.manifest {
        Some(m) => Some(crate::commands::shared::load(m)?),
        None => None,
    };
    let ledger = crate::ledger::store::open(&path)?;
    let name = loaded.as_ref().map(|l| l.manifest.name.clone());
    let interval = args.interval;
    let tty = std::io::stdout().is_terminal();
    loop {
        let frame = frame(&ledger, name.as_deref(), &path, interval)?;
        let mut out = std::io::stdout().lock();
        let written = if tty {
            // Home, clear below: redrawn in place without the flicker of a full clear.
            write!(out, "\x1b[H\x1b[J{frame}")
        } else {
            writeln!(out, "{frame}")
        };
        // A reader that went away (`| head`) ends the view.
        if written.and_then(|()| out.flush()).is_err() {
            return Ok(crate::vocab::EXIT_OK);
        }
        drop(out);
        std::thread::sleep(interval);
    }
}

/// One picture of what runs now.
fn frame(
    ledger: &Store,
    name: Option<&str>,
    path: &std::path::Path,
    interval: std::time::Duration,
) -> crate::ledger::Result<String> {
    let now = jiff::Timestamp::now();
    let mut f = String::new();
    let _ = writeln!(
        f,
        "runner status — {} — {} (every {}; Ctrl-C ends)",
        name.map_or_else(|| path.display().to_string(), |n| format!("`{n}`")),
        crate::support::clock::stamp(now),
        crate::manifest::format_duration(interval)
    );
    if let Some(h) = crate::lease::host_pause() {
        let _ = writeln!(f, "HOST PAUSED: {}", safe(&h.text()));
    }
    if let Some(n) = name
        && let Some(p) = ledger.paused(n)?
    {
        let _ = writeln!(f, "PAUSED: {}", safe(&p));
    }
    let claims = ledger.live_claims()?;
    let live: Vec<_> = ledger
        .recent_runs(name, 20)?
        .into_iter()
        .filter(|r| r.status() == RunStatus::Live)
        .collect();
    if live.is_empty() {
        let _ = writeln!(f, "\nno drain runs now");
    }
    for run in live {
        let Some(report) = crate::session::records::render(ledger, &run.id)? else {
            continue;
        };
        let items = &report.items;
        let ended: Vec<_> = items
            .iter()
            .filter(|i| i.started_at.is_some() && i.ended_at.is_some())
            .collect();
        let running: Vec<_> = items
            .iter()
            .filter(|i| i.started_at.is_some() && i.ended_at.is_none())
            .collect();
        let to_go = items
            .iter()
            .filter(|i| i.started_at.is_none() && i.reason.as_deref() == Some("in-progress"))
            .count();
        let done = |o: &str| ended.iter().filter(|i| i.outcome.as_str() == o).count();
        let workers = report.capacity.workers.max(1) as u64;
        let mean_ms = (!ended.is_empty()).then(|| {
            ended
                .iter()
                .filter_map(|i| span_ms(i.started_at.as_deref()?, i.ended_at.as_deref()?))
                .sum::<u64>()
                / ended.len() as u64
        });
        let eta = mean_ms.map(|m| {
            let rounds = (to_go as u64 + running.len() as u64).div_ceil(workers);
            clock(rounds * m)
        });
        let _ = writeln!(
            f,
            "\nrun {} on {} (pid {}), {} workers: {} completed, {} halted, {} failed — {} running, {} to go{}",
            run.id,
            safe(&run.holder.host),
            run.holder.pid,
            workers,
            done("completed"),
            done("halted"),
            done("failed"),
            running.len(),
            to_go,
            eta.map(|e| format!("; ETA {e}")).unwrap_or_default()
        );
        let _ = writeln!(
            f,
            "  {:<32} {:>7}  {:<18} {:<14} {:>8}  WAITING",
            "ITEM", "ATTEMPT", "MODEL", "PHASE", "ELAPSED"
        );
        for it in &running {
            let last = it.attempts.last();
            let phase = match last {
                None => "starting".to_string(),
                Some(a) if a.worker.is_none() => "worker".to_string(),
                Some(a) if a.gates.is_empty() => "gates".to_string(),
                Some(a) => format!("gates ({} done)", a.gates.len()),
            };
            let since = last
                .map(|a| a.started_at.as_str())
                .or(it.started_at.as_deref());
            let elapsed = since
                .and_then(|s| span_ms(s, &crate::support::clock::stamp(now)))
                .map(clock)
                .unwrap_or_else(|| "-".into());
            let claim = claims
                .iter()
                .find(|(r, repo, item, _)| *r == run.id && *repo == it.repo && *item == it.id);
            let waiting = match claim {
                Some((r, repo, item, _)) => {
                    if let Some(until) = ledger.resting_until(r, repo, item)? {
                        format!("back-off until {until}")
                    } else if let Some((res, since)) = ledger.waiting_for_resource(r, repo, item)? {
                        format!("resource `{res}` since {since}")
                    } else {
                        String::new()
                    }
                }
                None => String::new(),
            };
            let _ = writeln!(
                f,
                "  {:<32} {:>7}  {:<18} {:<14} {:>8}  {}",
                safe(&format!("{}/{}", it.repo, it.id)),
                last.map_or(0, |a| a.n),
                safe(it.model.as_deref().unwrap_or("-")),
                phase,
                elapsed,
                safe(&waiting)
            );
        }
    }
    Ok(f)
}

/// Milliseconds as a person reads a running clock: `42s`, `3m05s`, `2h07m`.
fn clock(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

fn span_ms(from: &str, to: &str) -> Option<u64> {
    let (a, z) = (
        crate::report::timestamp(from)?,
        crate::report::timestamp(to)?,
    );
    Some(z.duration_since(a).as_millis().max(0) as u64)
}

/// Recorded text, escaped before it reaches a terminal.
fn safe(s: &str) -> String {
    crate::support::text::printable(s)
}
