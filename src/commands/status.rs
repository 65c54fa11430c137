//! `runner status [M]`: live and recent runs, running and held items, leases, quarantines and
//! pauses, for people or (`--json`) machines.

use super::shared::{open_store, state_path};
use crate::cli::StatusArgs;
use crate::ledger::store::Store;
use crate::manifest::LoadedManifest;
use crate::session::failure::{Ended, Failure};
use crate::vocab::EXIT_OK;

use super::outputs::*;

mod watch;

pub fn run(args: &StatusArgs) -> Ended {
    if args.watch {
        return watch::run(args);
    }
    let path = state_path(&args.state, args.manifest.as_deref());
    // With a manifest, a ledger not made yet (no run so far) is an answer: nothing ran, and its
    // repositories' leases and quarantines are as they are.
    let ledger = if args.manifest.is_some() {
        super::shared::open_store_if_made(&path)?
    } else {
        Some(open_store(&path)?)
    };
    let loaded = match &args.manifest {
        Some(m) => Some(super::shared::load(m)?),
        None => None,
    };
    if args.metrics
        && let Some(loaded) = &loaded
    {
        return print_metrics(ledger.as_ref(), loaded);
    }
    let st = gather(ledger.as_ref(), loaded.as_ref(), &path)?;
    if args.json {
        let json = serde_json::to_string_pretty(&st)
            .map_err(|e| Failure::internal(format_args!("cannot encode the status: {e}")))?;
        outln!("{json}");
        return Ok(EXIT_OK);
    }
    print(&st, loaded.is_some(), ledger.is_some());
    Ok(EXIT_OK)
}

/// `status M --metrics`: the manifest's metrics, as `reports.metrics` receives them (before the
/// first run, from an empty ledger).
fn print_metrics(ledger: Option<&Store>, loaded: &LoadedManifest) -> Ended {
    let t = crate::session::metrics::render(
        ledger.map(|l| &**l as &dyn crate::ledger::Ledger),
        loaded,
    )?;
    out!("{t}");
    Ok(EXIT_OK)
}

/// What the ledger (and, with a manifest, its repositories) say now; with no ledger yet, what
/// the repositories say.
fn gather(
    ledger: Option<&Store>,
    loaded: Option<&LoadedManifest>,
    path: &std::path::Path,
) -> crate::ledger::Result<Status> {
    let (leases, kept_with_repos) = loaded.map(leases).unwrap_or_default();
    let slots = loaded.map(|l| {
        let bound = crate::plan::effective_workers(l, None);
        Slots {
            in_use: crate::lease::HostSlots::in_use(&l.manifest.name, bound),
            bound,
        }
    });
    let mut st = Status {
        spend: Vec::new(),
        pull_requests: Vec::new(),
        slots,
        schema: STATUS_SCHEMA,
        ledger: path.display().to_string(),
        paused: None,
        host_pause: crate::lease::host_pause(),
        runs: Vec::new(),
        running: Vec::new(),
        held: Vec::new(),
        quarantined: Vec::new(),
        leases,
        notices_owed: Vec::new(),
        waiting_for_lease: Vec::new(),
    };
    if let Some(ledger) = ledger {
        from_ledger(&mut st, ledger, loaded)?;
    }
    // The quarantines kept beside the repositories, with their watches, over the ledger's.
    for q in kept_with_repos {
        match st.quarantined.iter_mut().find(|k| k.path == q.path) {
            Some(k) => k.watch = q.watch,
            None => st.quarantined.push(q),
        }
    }
    // Spend against the manifest's caps (`budget`), over every run of it.
    if let Some((l, b)) = loaded.and_then(|l| l.manifest.budget.map(|b| (l, b))) {
        use crate::session::budget::Window;
        for (cap, window) in [(b.daily_usd, Window::Day), (b.monthly_usd, Window::Month)] {
            let Some(cap) = cap else { continue };
            let (since, resets_at) = window.bounds(jiff::Timestamp::now());
            let spent_usd = match ledger {
                Some(ledger) => ledger.spend_since(&l.manifest.name, &since)?,
                None => 0.0,
            };
            st.spend.push(SpendView {
                window: window.name().into(),
                cap_usd: cap,
                spent_usd,
                resets_at,
            });
        }
    }
    Ok(st)
}

/// What the ledger says: runs, running and held items, the pause, quarantines, the latest run's
/// pull requests.
fn from_ledger(
    st: &mut Status,
    ledger: &Store,
    loaded: Option<&LoadedManifest>,
) -> crate::ledger::Result<()> {
    let name = loaded.map(|l| l.manifest.name.as_str());
    st.runs = ledger
        .recent_runs(name, 10)?
        .into_iter()
        .map(|r| {
            Ok(RunView {
                status: r.status(),
                counts: ledger.counts_of(&r.id)?,
                usage: ledger.usage_of(&r.id).ok().flatten(),
                run: r,
            })
        })
        .collect::<crate::ledger::Result<Vec<_>>>()?;
    for r in st
        .runs
        .iter()
        .filter(|r| r.status == crate::ledger::RunStatus::Live)
    {
        for (repo, item, since, holder) in ledger.lease_waits(&r.run.id)? {
            st.waiting_for_lease.push(LeaseWaitView {
                repo,
                item,
                run_id: r.run.id.clone(),
                since,
                holder,
            });
        }
    }
    st.running = ledger
        .live_claims()?
        .into_iter()
        .map(|(run_id, repo, item, h)| Running {
            resting_until: ledger.resting_until(&run_id, &repo, &item).ok().flatten(),
            waiting_for: ledger
                .waiting_for_resource(&run_id, &repo, &item)
                .ok()
                .flatten()
                .map(|(resource, since)| Waiting { resource, since }),
            run_id,
            repo,
            item,
            pid: h.pid,
            host: h.host,
        })
        .collect();
    if let Some(n) = name {
        st.held = ledger
            .held_items(n)?
            .into_iter()
            .map(|(repo, item, reason, cause)| Held {
                repo,
                item,
                reason,
                cause,
            })
            .collect();
        st.paused = ledger.paused(n)?;
        if loaded.is_some_and(|l| l.manifest.notify.is_some()) {
            st.notices_owed = owed_notices(ledger, n)?;
        }
        if let Some(latest) = st.runs.first() {
            st.pull_requests = pulls_of(ledger, &latest.run.id);
        }
    }
    st.quarantined = ledger
        .quarantines()?
        .into_iter()
        .map(|(path, run_id, reason)| Quarantined {
            path,
            run_id,
            reason,
            watch: None,
        })
        .collect();
    Ok(())
}

/// The notices of `manifest`'s incidents not delivered yet.
fn owed_notices(ledger: &Store, manifest: &str) -> crate::ledger::Result<Vec<OwedNotice>> {
    Ok(ledger
        .incidents(manifest)?
        .into_iter()
        .filter_map(|row| {
            let notice = row.owed?;
            let summary = serde_json::from_str::<crate::session::incidents::Incident>(&row.body)
                .map_or_else(|_| row.cause.clone(), |i| i.summary);
            Some(OwedNotice {
                cause: row.cause,
                notice,
                summary,
                failed_attempts: row.failures,
                failing_since: row.failed_since,
            })
        })
        .collect())
}

/// The pull requests of run `run_id`'s items, as its report recorded them when it began (none
/// when its report cannot be read).
fn pulls_of(ledger: &Store, run_id: &str) -> Vec<PullView> {
    let Some(dir) = ledger.run_dir(run_id).ok().flatten() else {
        return Vec::new();
    };
    crate::session::records::pull_requests_in(std::path::Path::new(&dir))
        .into_iter()
        .map(|(repo, item, pull_request)| PullView {
            repo,
            item,
            run_id: run_id.to_string(),
            pull_request,
        })
        .collect()
}

/// The lease of each of the manifest's repositories, and the quarantines kept beside them.
fn leases(l: &LoadedManifest) -> (Vec<LeaseStatus>, Vec<Quarantined>) {
    let mut leases = Vec::new();
    let mut quarantined = Vec::new();
    for r in crate::plan::repos::locate(l) {
        let Ok(p) = crate::git::probe(&crate::git::Repos::default(), &r.path) else {
            continue;
        };
        if let Some(q) = crate::lease::quarantined(&p.common_dir) {
            quarantined.push(Quarantined {
                path: r.path.display().to_string(),
                watch: crate::lease::Watch::latest(&p.common_dir, &q),
                run_id: q.run_id,
                reason: q.reason,
            });
        }
        let held = crate::lease::is_held(&p.common_dir);
        let holder = crate::lease::read_record(&p.common_dir.join(crate::lease::RECORD_FILE));
        let survivors = match &holder {
            Some(h) if held && h.holder.is_dead() => {
                let mut found = crate::process::census::survivors(
                    &h.token,
                    &h.repo,
                    &h.cgroups,
                    h.holder.start_time,
                );
                // Also what keeps the lock file open, whatever its environment.
                for k in crate::lease::lock_holders(&p.common_dir) {
                    if !found.iter().any(|(pid, _)| *pid == k.0) {
                        found.push(k);
                    }
                }
                found
                    .into_iter()
                    .map(|(pid, command)| Survivor { pid, command })
                    .collect()
            }
            _ => Vec::new(),
        };
        leases.push(LeaseStatus {
            repo: r.name,
            path: r.path,
            held,
            holder,
            survivors,
        });
    }
    (leases, quarantined)
}

/// Recorded text, escaped before it reaches a terminal.
fn safe(s: &str) -> String {
    crate::support::text::printable(s)
}

/// The status for people: every section but the headings is recorded text, escaped.
fn print(st: &Status, with_manifest: bool, made: bool) {
    if made {
        outln!("ledger {}", safe(&st.ledger));
    } else {
        outln!("ledger {} (not made yet: no run so far)", safe(&st.ledger));
    }
    if let Some(h) = &st.host_pause {
        outln!("HOST PAUSED: {}", safe(&h.text()));
    }
    if let Some(p) = &st.paused {
        outln!("PAUSED: {}", safe(p));
    }
    for s in &st.spend {
        outln!(
            "spend, {}: ${:.2} of the ${:.2} cap (it resets at {})",
            s.window,
            s.spent_usd,
            s.cap_usd,
            s.resets_at
        );
    }
    if let Some(s) = &st.slots {
        outln!(
            "worker slots on this host: {} of {} in use (over every run of the manifest)",
            s.in_use,
            s.bound
        );
    }
    outln!("\nruns (newest first):");
    if st.runs.is_empty() {
        outln!("  none");
    }
    for r in &st.runs {
        print_run(r);
    }
    outln!("\nrunning items:");
    if st.running.is_empty() {
        outln!("  none");
    }
    for r in &st.running {
        outln!(
            "  {}",
            safe(&format!(
                "{}/{}  run {} (pid {} on {}){}",
                r.repo,
                r.item,
                r.run_id,
                r.pid,
                r.host,
                r.resting_until
                    .as_deref()
                    .map(|u| format!("  resting after a provider failure until {u}"))
                    .or_else(|| r.waiting_for.as_ref().map(|w| format!(
                        "  waiting for shared resource `{}` since {}",
                        w.resource, w.since
                    )))
                    .unwrap_or_default()
            ))
        );
    }
    if !st.waiting_for_lease.is_empty() {
        outln!("\nwaiting for a repository's lease:");
        for w in &st.waiting_for_lease {
            outln!(
                "  {}",
                safe(&format!(
                    "{}/{}  run {}  since {}, held by {}",
                    w.repo,
                    w.item,
                    w.run_id,
                    w.since,
                    w.holder.as_deref().unwrap_or("another process")
                ))
            );
        }
    }
    outln!("\nquarantined repositories:");
    if st.quarantined.is_empty() {
        outln!("  none");
    }
    for q in &st.quarantined {
        outln!(
            "  {}",
            safe(&format!("{}  {} (run {})", q.path, q.reason, q.run_id))
        );
        if let Some(w) = &q.watch {
            outln!("    kept watch: {}", safe(&w.describe()));
        }
    }
    if !st.notices_owed.is_empty() {
        outln!("\nnotices owed (the next run sends them):");
        for n in &st.notices_owed {
            let tried = match (&n.failed_attempts, &n.failing_since) {
                (0, _) => "not tried yet".to_string(),
                (k, Some(since)) => format!("no notifier took it: {k} tries since {since}"),
                (k, None) => format!("no notifier took it: {k} tries"),
            };
            outln!(
                "  {}",
                safe(&format!(
                    "{} ({})  {tried} — {}",
                    n.cause, n.notice, n.summary
                ))
            );
        }
    }
    if with_manifest {
        print_held(&st.held);
        print_leases(&st.leases);
        if !st.pull_requests.is_empty() {
            outln!("\npull requests (as the latest run found them):");
            for p in &st.pull_requests {
                outln!(
                    "  {}",
                    safe(&format!(
                        "{}/{}  {}  {}",
                        p.repo,
                        p.item,
                        p.pull_request.describe(),
                        p.pull_request.url
                    ))
                );
            }
        }
    }
}

/// One run's line: its status, its counts, and what it used.
fn print_run(r: &RunView) {
    let mut line = format!(
        "  {}  {:<6} {}  started {} by {} (pid {} on {})",
        r.run.id,
        r.status,
        r.run.manifest,
        r.run.started_at,
        r.run.started_by,
        r.run.holder.pid,
        r.run.holder.host
    );
    let counts = crate::report::nonzero_counts(&r.counts);
    let counts = if counts.is_empty() {
        "no items".to_string()
    } else {
        counts.join(", ")
    };
    match &r.run.ending {
        Some(e) => line.push_str(&format!("  ended {e} ({counts})")),
        None => line.push_str(&format!("  ({counts} so far)")),
    }
    if let Some(c) = &r.run.cause {
        line.push_str(&format!(" — {c}"));
    }
    if let Some(u) = &r.usage {
        line.push_str(&format!(
            "  [{}, {} in / {} out tokens]",
            u.cost_text(),
            u.input_tokens,
            u.output_tokens
        ));
    }
    if let Some(by) = &r.run.stop_requested_by {
        line.push_str(&format!(
            "  [stop asked by {by}{}]",
            r.run
                .stop_reason
                .as_ref()
                .map(|x| format!(": {x}"))
                .unwrap_or_default()
        ));
    }
    outln!("{}", safe(&line));
    if let Some(c) = &r.run.containment
        && r.status == crate::ledger::RunStatus::Live
    {
        outln!("      processes contained by {}", safe(c));
    }
}

fn print_held(held: &[Held]) {
    outln!("\nheld items (latest run):");
    if held.is_empty() {
        outln!("  none");
    }
    for h in held {
        outln!(
            "  {}",
            safe(&format!(
                "{}/{}  {}{}",
                h.repo,
                h.item,
                h.reason,
                h.cause
                    .as_ref()
                    .map(|c| format!(": {c}"))
                    .unwrap_or_default()
            ))
        );
    }
}

fn print_leases(leases: &[LeaseStatus]) {
    outln!("\nleases:");
    for l in leases {
        let who = match (&l.held, &l.holder) {
            (true, Some(h)) => {
                format!("held by {h}")
            }
            (true, None) => "held".to_string(),
            (false, Some(h)) => format!("free (last held by run {})", h.run_id),
            (false, None) => "free".to_string(),
        };
        outln!("  {}", safe(&format!("{}  {who}", l.repo)));
        if !l.survivors.is_empty() {
            outln!(
                "    its run is dead; these processes of it live on and keep the lease (the next run ends them):"
            );
            for p in &l.survivors {
                outln!("      {}", safe(&format!("{}  {}", p.pid, p.command)));
            }
        }
    }
}
