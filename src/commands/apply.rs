//! `runner apply M`: a run session prepared, drained and finished (`crate::session`), once or
//! in rounds (`--loop`), with the exit code `docs/commands.md` documents.

use super::shared::load;
use crate::cli::{ApplyArgs, StandingHolds};
use crate::plan::PlanOptions;
use crate::report;
use crate::session::failure::{Ended, Failure};
use crate::session::prepare;
use crate::session::standing::Standing;
use crate::session::{Options, Session};
use crate::ui::term::Ui;
use crate::vocab::{EXIT_FAILURES, EXIT_OK, ItemOutcome};

/// The session's options from `apply`'s flags.
fn options(args: &ApplyArgs) -> Options {
    Options {
        workers: args.workers,
        plan: PlanOptions {
            only: args.filter.only.clone(),
            items: args.filter.items.clone(),
            shard: args.shard,
            fresh: args.fresh,
            sources: Vec::new(),
        },
        rerun: args.rerun,
        state: super::shared::state_path(&args.state, Some(&args.manifest)),
        report_dir: args.report_dir.clone(),
        json: args.json,
        events: args.events.clone(),
        no_progress: args.no_progress,
        wait_for_locks: args.wait_for_locks,
        no_cache: args.no_cache,
        no_probe: args.no_probe,
        standing_holds_pass: args.standing_holds == StandingHolds::Pass,
    }
}

pub fn run(ui: &Ui, args: &ApplyArgs) -> Ended {
    let loaded = load(&args.manifest)?;
    let mut session = Session::prepare(ui, loaded, options(args))?;
    let end = session.drain(ui)?;
    Ok(session.finish(ui, end))
}

/// How many items `apply` with `args` would run now, as `plan` shows it.
fn pending_now(ui: &Ui, args: &ApplyArgs) -> Result<usize, Failure> {
    let loaded = load(&args.manifest)?;
    let mut opts = options(args);
    let ledger = crate::ledger::store::open_snapshot(&opts.state)?;
    // The trackers are asked too: their new issues are work a next round takes.
    opts.plan.sources = crate::session::sources::read_all(&loaded, ledger.as_ref());
    let mut plan = prepare::planned(ui, &crate::git::Repos::default(), &loaded, &opts.plan)?;
    let standing = match &ledger {
        Some(ledger) => Standing::read(ledger, &loaded.manifest.name)
            .map(|s| s.with_pulls(&loaded, &plan, Some(ledger))),
        None => Ok(Standing::none()),
    };
    standing?.lay_over(&mut plan, args.rerun, true);
    Ok(plan
        .items
        .iter()
        .filter(|it| it.state == crate::plan::ItemState::Pending)
        .count())
}

/// `apply --loop`: rounds of plan-and-drain until a plan finds nothing pending. A round that
/// ends other than drained (a stall, a cancel, a paused manifest, a spent budget, runner's own
/// failure) ends the loop with its exit code; otherwise the loop's exit code is the last
/// round's (0, or 1 when an item halted, failed or was held). A round that could not begin
/// ends it with that round's failure, said after the loop's summary is written.
pub(crate) fn run_loop(ui: &Ui, args: &ApplyArgs) -> Ended {
    let max = args.max_rounds.unwrap_or(100).max(1);
    let mut round_args = args.clone();
    let mut summary = LoopSummary::start();
    let (mut last, mut rounds_run) = (EXIT_OK, 0u32);
    let mut failure = None;
    let ending = loop {
        let round = rounds_run + 1;
        if round > max {
            eprintln!("runner: loop: stopped after {max} rounds (`--max-rounds`) — exit {last}");
            break "max-rounds".to_string();
        }
        let pending = pending_now(ui, &round_args)?;
        if pending == 0 {
            eprintln!(
                "runner: loop: round {round} found nothing pending; {rounds_run} round{} drained — exit {last}",
                if rounds_run == 1 { "" } else { "s" }
            );
            break if rounds_run == 0 {
                "nothing-found".to_string()
            } else {
                "drained".to_string()
            };
        }
        eprintln!("runner: loop: round {round}, {pending} pending");
        let ended = run(ui, &round_args);
        last = ended.as_ref().map_or_else(Failure::code, |c| *c);
        failure = ended.err();
        rounds_run += 1;
        summary.add_round(args, last);
        if failure.is_some() || !matches!(last, EXIT_OK | EXIT_FAILURES) {
            eprintln!("runner: loop: round {round} ended the loop — exit {last}");
            break summary
                .rounds
                .last()
                .and_then(|r| r.ending.clone())
                .unwrap_or_else(|| "failed".to_string());
        }
        // `--rerun` (and `--fresh`) is for the first round: later rounds take what is new.
        round_args.rerun = None;
        round_args.fresh = false;
        if let Some(d) = args.interval {
            std::thread::sleep(d);
        }
    };
    summary.finish(ui, args, ending, last);
    match failure {
        Some(f) => Err(f),
        None => Ok(last),
    }
}

/// What a `--loop` came to, over its rounds: `<reports>/loop.json` and `loop.md`, rewritten by
/// each loop.
#[derive(serde::Serialize)]
struct LoopSummary {
    schema: &'static str,
    started_at: String,
    ended_at: Option<String>,
    /// `drained` (rounds ran, then a look found nothing), `nothing-found` (no round ran),
    /// `max-rounds`, or the ending of the round that ended the loop (`stalled`, `cancelled`, …).
    ending: Option<String>,
    exit: i32,
    rounds: Vec<LoopRound>,
    /// Items per outcome over every round.
    counts: std::collections::BTreeMap<ItemOutcome, usize>,
}

#[derive(serde::Serialize)]
struct LoopRound {
    run_id: Option<String>,
    ending: Option<String>,
    exit: i32,
    counts: std::collections::BTreeMap<ItemOutcome, usize>,
    duration_ms: Option<u64>,
}

impl LoopSummary {
    fn start() -> Self {
        LoopSummary {
            schema: "runner.loop/v1",
            started_at: crate::support::clock::now(),
            ended_at: None,
            ending: None,
            exit: EXIT_OK,
            rounds: Vec::new(),
            counts: Default::default(),
        }
    }

    /// The round that just ran, as the ledger recorded it.
    fn add_round(&mut self, args: &ApplyArgs, exit: i32) {
        let path = super::shared::state_path(&args.state, Some(&args.manifest));
        let name = crate::manifest::load_file(&args.manifest)
            .ok()
            .map(|l| l.manifest.name);
        let latest = name.and_then(|n| {
            crate::ledger::store::open_snapshot(&path)
                .ok()
                .flatten()?
                .run_history(&n, 1)
                .ok()?
                .into_iter()
                .next()
        });
        let (run_id, ending, totals) = match latest {
            Some(h) => (Some(h.run.id), h.run.ending, h.totals.unwrap_or_default()),
            None => (None, None, Default::default()),
        };
        for (o, n) in &totals.counts {
            *self.counts.entry(*o).or_insert(0) += n;
        }
        self.rounds.push(LoopRound {
            run_id,
            ending,
            exit,
            counts: totals.counts,
            duration_ms: totals.duration_ms,
        });
    }

    fn finish(&mut self, ui: &Ui, args: &ApplyArgs, ending: String, exit: i32) {
        self.ended_at = Some(crate::support::clock::now());
        self.ending = Some(ending);
        self.exit = exit;
        let Ok(loaded) = crate::manifest::load_file(&args.manifest) else {
            return;
        };
        let reports = crate::session::workspace::reports_dir(&loaded, args.report_dir.as_deref());
        let mut md = format!(
            "# runner: `{}` — loop {}\n\n{} round{} · started {} · ended {} · exit {exit}\n\n",
            loaded.manifest.name,
            self.ending.as_deref().unwrap_or_default(),
            self.rounds.len(),
            if self.rounds.len() == 1 { "" } else { "s" },
            self.started_at,
            self.ended_at.as_deref().unwrap_or_default(),
        );
        if !self.rounds.is_empty() {
            md.push_str("| round | run | ending | items |\n|---|---|---|---|\n");
            for (i, r) in self.rounds.iter().enumerate() {
                let counts = report::nonzero_counts(&r.counts);
                md.push_str(&format!(
                    "| {} | `{}` | {} | {} |\n",
                    i + 1,
                    r.run_id.as_deref().unwrap_or("-"),
                    r.ending.as_deref().unwrap_or("-"),
                    counts.join(", ")
                ));
            }
        }
        let written = std::fs::create_dir_all(&reports)
            .and_then(|()| serde_json::to_string_pretty(self).map_err(std::io::Error::other))
            .and_then(|json| {
                crate::support::fs::write_atomic(
                    &reports.join("loop.json"),
                    (json + "\n").as_bytes(),
                )
            })
            .and_then(|()| {
                crate::support::fs::write_atomic(&reports.join("loop.md"), md.as_bytes())
            });
        match written {
            Ok(()) => eprintln!(
                "runner: loop: summary in {}",
                reports.join("loop.md").display()
            ),
            Err(e) => ui.warn(format_args!(
                "the loop's summary was not written into `{}`: {e}",
                reports.display()
            )),
        }
    }
}
