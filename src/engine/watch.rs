//! The watch kept over quarantined repositories.
//!
//! A repository is quarantined when its item's processes could not be proven gone (one stuck in
//! the kernel, in a frozen cgroup, on a hung mount). The run that quarantined it keeps its lease
//! until it ends; after that, each later run looks, before its first item, for what that item
//! left — the processes that keep the repository's lease lock open, that are in the item's
//! cgroups, or that carry both the token of the run named by the lease's record and the
//! repository's name — and ends them (SIGTERM, a short grace, SIGKILL). What it found is
//! recorded beside the quarantine ([`crate::lease::Watch`]) for `status`, and in the run's
//! events. Nothing else is touched: a process that cannot be proven the item's is not one of
//! them. Lifting the quarantine stays `runner unlock`'s.

use super::run::{RunCx, RunSink};
use crate::events::Event;
use crate::lease::{self, Record, Watch};
use crate::support::host::command_line;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long the leftovers have after SIGTERM (they had theirs when their item ended).
const GRACE: Duration = Duration::from_secs(2);
/// How long SIGKILL is given to empty the repository of them, scan after scan.
const KILL_DEADLINE: Duration = Duration::from_secs(5);
const SCAN_GAP: Duration = Duration::from_millis(50);
/// The longest pause between two looks at what is left (the guardian's).
pub(crate) const MAX_PAUSE: Duration = Duration::from_secs(60);

/// The processes proven to belong to the item that left the repository at `common` (git common
/// dir) quarantined, its lease's record being `rec`; and those that may belong to it but cannot
/// be read (never signalled, never taken for gone).
fn leftovers(common: &Path, rec: Option<&Record>) -> (Vec<i32>, Vec<i32>) {
    let mut pids: Vec<i32> = lease::lock_holders(common)
        .into_iter()
        .map(|(pid, _)| pid)
        .collect();
    let mut unknown = Vec::new();
    if let Some(r) = rec {
        if let Some(unified) = r.cgroups.first() {
            match crate::process::cgroup::members(unified) {
                Ok(m) => pids.extend(m),
                Err(e) => tracing::warn!("{e}"),
            }
        }
        if !r.token.is_empty() {
            let token = format!("RUNNER_TOKEN={}", r.token);
            let repo = format!("RUNNER_REPO={}", r.repo);
            let census =
                crate::process::census::pids_carrying(&[&token, &repo], r.holder.start_time)
                    .unwrap_or_default();
            pids.extend(census.found);
            unknown = census.unreadable;
        }
    }
    pids.sort_unstable();
    pids.dedup();
    unknown.retain(|p| !pids.contains(p));
    (pids, unknown)
}

/// [`leftovers`], off the event loop (it reads every process's descriptors and environment).
async fn scan(common: &Path, rec: Option<&Record>) -> (Vec<i32>, Vec<i32>) {
    let (common, rec) = (common.to_path_buf(), rec.cloned());
    tokio::task::spawn_blocking(move || leftovers(&common, rec.as_ref()))
        .await
        .unwrap_or_default()
}

/// End `found`, and whatever else [`leftovers`] finds meanwhile: the pids ended, and those still
/// there at the deadline.
async fn end(common: &Path, rec: Option<&Record>, found: Vec<i32>) -> (Vec<i32>, Vec<i32>) {
    let mut seen = found;
    for &pid in &seen {
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    }
    let signal_all = |pids: &[i32], sig| {
        for &pid in pids {
            let _ = kill(Pid::from_raw(pid), sig);
        }
    };
    let mut left = seen.clone();
    let grace_until = Instant::now() + GRACE;
    let kill_until = grace_until + KILL_DEADLINE;
    while !left.is_empty() && Instant::now() < kill_until {
        tokio::time::sleep(SCAN_GAP).await;
        left = scan(common, rec).await.0;
        seen.extend(&left);
        if Instant::now() >= grace_until {
            signal_all(&left, Signal::SIGKILL);
        } else {
            // New ones (started by those going) get their SIGTERM too.
            signal_all(&left, Signal::SIGTERM);
        }
    }
    seen.sort_unstable();
    seen.dedup();
    let ended = seen.into_iter().filter(|p| !left.contains(p)).collect();
    (ended, left)
}

/// The quarantined repositories of the run's plan whose item's run has ended: the common dir,
/// the quarantine's run and the lease's record.
fn watched(cx: &RunCx) -> Vec<(String, PathBuf, lease::Quarantine, Option<Record>)> {
    cx.plan
        .repositories
        .iter()
        .filter_map(|r| {
            let common = r.common_dir.as_ref()?;
            let q = lease::quarantined(common)?;
            let rec = lease::read_record(&common.join(lease::RECORD_FILE));
            // A live holder — the run that quarantined it, still going — keeps its own watch.
            if rec.as_ref().is_some_and(|r| !r.holder.is_dead()) {
                return None;
            }
            Some((r.name.clone(), common.clone(), q, rec))
        })
        .collect()
}

/// Keep watch over the plan's quarantined repositories, before the run's first item.
pub(crate) async fn keep_watch(cx: &RunCx, sink: &mut dyn RunSink) {
    for (repo, common, q, rec) in watched(cx) {
        let (found, unknown) = scan(&common, rec.as_ref()).await;
        let (ended, mut left) = if found.is_empty() {
            (Vec::new(), Vec::new())
        } else {
            end(&common, rec.as_ref(), found).await
        };
        // What may be the item's but cannot be read is left as it is, and said.
        let unread: Vec<i32> = unknown.into_iter().filter(|p| !left.contains(p)).collect();
        left.extend(&unread);
        let latest = Watch::latest(&common, &q);
        // A quiet watch is recorded once: the first time, or when the last one found some.
        let quiet = ended.is_empty() && left.is_empty();
        if quiet && latest.is_some_and(|w| w.ended.is_empty() && w.left.is_empty()) {
            continue;
        }
        let watch = Watch {
            run_id: cx.run_id.clone(),
            at: crate::support::clock::now(),
            ended: ended.clone(),
            left: left
                .iter()
                .map(|&pid| {
                    let cmd = command_line(pid);
                    if unread.contains(&pid) {
                        (
                            pid,
                            format!("{cmd} (its environment cannot be read: it may be the item's)"),
                        )
                    } else {
                        (pid, cmd)
                    }
                })
                .map(|(pid, cmd)| (pid, cx.redactor.redact(&cmd)))
                .collect(),
        };
        if let Err(e) = watch.record(&common) {
            tracing::warn!(%repo, "cannot record the watch over its quarantine: {e}");
        }
        if !quiet {
            tracing::info!(%repo, ?ended, ?left, "kept watch over a quarantine");
            sink.event(&Event::Watched {
                repo,
                run: q.run_id,
                ended,
                left,
            });
        }
    }
}

/// Keep watch, from a run's guardian once the run is over, over the quarantines it left
/// (repositories' git common dirs `commons`): what each item left is ended as a later run's
/// watch would, and recorded beside the quarantine, again and again — a second apart at first,
/// up to a minute — until nothing of the item is left or an operator lifted the quarantine.
/// Command lines are recorded by program name only: the guardian has no secrets to redact.
pub(crate) async fn watch_until_gone(
    mut commons: Vec<PathBuf>,
    run_id: &str,
    say: impl Fn(String),
) {
    let mut pause = Duration::from_secs(1);
    loop {
        let mut still = Vec::new();
        for common in commons {
            let Some(q) = lease::quarantined(&common) else {
                say(format!("`{}`: the quarantine was lifted", common.display()));
                continue;
            };
            let rec = lease::read_record(&common.join(lease::RECORD_FILE));
            let (found, unknown) = scan(&common, rec.as_ref()).await;
            let (ended, mut left) = if found.is_empty() {
                (Vec::new(), Vec::new())
            } else {
                end(&common, rec.as_ref(), found).await
            };
            left.extend(
                unknown
                    .iter()
                    .filter(|p| !left.contains(p))
                    .copied()
                    .collect::<Vec<_>>(),
            );
            if ended.is_empty()
                && !left.is_empty()
                && Watch::latest(&common, &q).is_some_and(|w| {
                    w.ended.is_empty() && w.left.iter().map(|l| l.0).eq(left.iter().copied())
                })
            {
                // Nothing changed since the last look: not recorded again.
                still.push(common);
                continue;
            }
            let watch = Watch {
                run_id: run_id.to_string(),
                at: crate::support::clock::now(),
                ended: ended.clone(),
                left: left.iter().map(|&pid| (pid, program_of(pid))).collect(),
            };
            if let Err(e) = watch.record(&common) {
                say(format!(
                    "`{}`: the watch cannot be recorded: {e}",
                    common.display()
                ));
            }
            say(format!(
                "`{}`: ended {ended:?}, left {left:?}",
                common.display()
            ));
            if !left.is_empty() {
                still.push(common);
            }
        }
        commons = still;
        if commons.is_empty() {
            return;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// A process's program name (its command line's first word, the folders left out).
fn program_of(pid: i32) -> String {
    let cmd = command_line(pid);
    let first = cmd.split(' ').next().unwrap_or_default();
    first.rsplit('/').next().unwrap_or_default().to_string()
}
