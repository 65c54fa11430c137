//! Progress for people, on stderr: bars on a terminal (indicatif), plain lines otherwise.
//!
//! A consumer of the event stream like the report builder; it never touches a process.
//!
//! [`Progress::on`] is longer than the house's 150 lines on purpose: it is one flat `match` over
//! the closed vocabulary of [`Event`], each arm the line or bar change that event makes.

pub mod log;
pub mod term;

use crate::events::Event;
use crate::plan::{ItemState, Plan};
use crate::support::text::printable;
use crate::vocab::{GateResult, WorkerClass};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::HashMap;
use std::time::Duration;

pub(crate) struct Progress {
    names: Vec<String>,
    /// With history: what is left, by the plan's estimates, for the ETA.
    eta: Option<Eta>,
    total: usize,
    finished: usize,
    bars: Option<Bars>,
    /// Per running item: attempt, model, current gate.
    state: HashMap<usize, (u32, Option<String>, Option<String>)>,
    /// Items per outcome so far: those the plan settled, then each that finished.
    counts: std::collections::BTreeMap<crate::vocab::ItemOutcome, usize>,
}

/// The ETA from the plan's estimates: the least the items not yet finished could take,
/// max(their total / workers, the longest repository's share).
struct Eta {
    left: HashMap<usize, (String, u64)>,
    workers: u64,
    /// When the drain is expected to end, in milliseconds since `origin`; counted down between
    /// item endings.
    origin: std::time::Instant,
    ends_at: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl Eta {
    fn update(&self) {
        let mut per_repo: HashMap<&str, u64> = HashMap::new();
        let mut total = 0u64;
        for (repo, ms) in self.left.values() {
            total += ms;
            *per_repo.entry(repo.as_str()).or_default() += ms;
        }
        let longest = per_repo.values().copied().max().unwrap_or(0);
        let left = total.div_ceil(self.workers.max(1)).max(longest);
        let now = self.origin.elapsed().as_millis() as u64;
        self.ends_at
            .store(now + left, std::sync::atomic::Ordering::Relaxed);
    }
}

struct Bars {
    multi: MultiProgress,
    overall: ProgressBar,
    items: HashMap<usize, ProgressBar>,
}

impl Progress {
    /// `fancy`: draw bars (stderr is a terminal and progress was not turned off).
    /// `color`: colour the bars.
    pub fn new(plan: &Plan, fancy: bool, color: bool) -> Self {
        let names = plan
            .items
            .iter()
            .map(|i| format!("{}/{}", i.repo, i.id))
            .collect();
        let total = plan
            .items
            .iter()
            .filter(|i| i.state == ItemState::Pending)
            .count();
        let eta = plan.expected.map(|_| {
            let est = plan.estimates();
            let e = Eta {
                left: plan
                    .items
                    .iter()
                    .enumerate()
                    .filter(|(_, i)| i.state == ItemState::Pending)
                    .map(|(k, i)| (k, (i.repo.clone(), est[k])))
                    .collect(),
                workers: u64::from(plan.capacity.workers),
                origin: std::time::Instant::now(),
                ends_at: Default::default(),
            };
            e.update();
            e
        });
        let bars = fancy.then(|| {
            let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
            let overall = multi.add(ProgressBar::new(total as u64));
            let mut style = ProgressStyle::with_template(if color {
                "{bar:30.cyan/blue} {pos}/{len} items · {elapsed} elapsed · ETA {eta}"
            } else {
                "{bar:30} {pos}/{len} items · {elapsed} elapsed · ETA {eta}"
            })
            .unwrap_or_else(|_| ProgressStyle::default_bar());
            // With history the ETA is the plan's estimate of what is left, not a rate.
            if let Some(e) = &eta {
                let (origin, ends_at) = (e.origin, e.ends_at.clone());
                style = style.with_key(
                    "eta",
                    move |_: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                        let ms = ends_at
                            .load(std::sync::atomic::Ordering::Relaxed)
                            .saturating_sub(origin.elapsed().as_millis() as u64);
                        let _ =
                            write!(w, "{}", indicatif::HumanDuration(Duration::from_millis(ms)));
                    },
                );
            }
            overall.set_style(style);
            overall.enable_steady_tick(Duration::from_millis(200));
            log::set_bars(Some(multi.clone()));
            Bars {
                multi,
                overall,
                items: HashMap::new(),
            }
        });
        let mut counts = std::collections::BTreeMap::new();
        for it in &plan.items {
            let outcome = match it.state {
                ItemState::Pending => continue,
                ItemState::Held => crate::vocab::ItemOutcome::Held,
                ItemState::Done | ItemState::Skipped => crate::vocab::ItemOutcome::Skipped,
            };
            *counts.entry(outcome).or_insert(0) += 1;
        }
        Progress {
            eta,
            names,
            total,
            finished: 0,
            bars,
            state: HashMap::new(),
            counts,
        }
    }

    fn name(&self, i: usize) -> &str {
        self.names.get(i).map_or("?", String::as_str)
    }

    fn line(&self, msg: &str) {
        match &self.bars {
            Some(b) => b.multi.suspend(|| eprintln!("{msg}")),
            // One write per line: lines of concurrent runners sharing a log stay whole, and a
            // drain of thousands of items makes a third of the calls.
            None => {
                use std::io::Write;
                let _ = std::io::stderr().write_all(format!("runner: {msg}\n").as_bytes());
            }
        }
    }

    fn refresh(&mut self, item: usize) {
        let Some(b) = &self.bars else { return };
        let Some(bar) = b.items.get(&item) else {
            return;
        };
        let (n, model, gate) = self.state.get(&item).cloned().unwrap_or_default();
        let mut msg = if n == 0 {
            format!("{} · starting", self.name(item))
        } else {
            format!("{} · attempt {n}", self.name(item))
        };
        if let Some(m) = model {
            msg.push_str(&format!(" · {m}"));
        }
        match gate {
            Some(g) => msg.push_str(&format!(" · gate {g}")),
            None => msg.push_str(" · worker"),
        }
        bar.set_message(msg);
    }

    pub fn on(&mut self, ev: &Event) {
        if let Some((item, n, what, e)) = ev.log_error() {
            self.line(&format!(
                "warning: {} attempt {n}: the {what}'s log is incomplete: {e}",
                self.name(item)
            ));
        }
        if let Some((item, n, what, bytes)) = ev.unlogged() {
            self.line(&format!(
                "warning: {} attempt {n}: the {what} printed more than its log keeps: {bytes} bytes were not logged (RUNNER_LOG_LIMIT); its last lines end the log",
                self.name(item)
            ));
        }
        match ev {
            Event::RunStarted {
                run_id,
                workers,
                pending,
                ..
            } => {
                self.line(&format!(
                    "run {run_id}: {pending} pending item{}, up to {workers} at once",
                    if *pending == 1 { "" } else { "s" }
                ));
            }
            Event::Worktree {
                item,
                backup: Some(b),
                ..
            } => self.line(&format!(
                "{}: starts anew from its base; its old branch is kept as `{b}`",
                self.name(*item)
            )),
            Event::Work { .. }
            | Event::Worktree { .. }
            | Event::Usage { .. }
            | Event::LeaseWaited { .. } => {}
            Event::SetupFinished {
                item, ok, duration, ..
            } => self.line(&format!(
                "{}: worktree setup {} ({:.1}s)",
                self.name(*item),
                if *ok { "done" } else { "failed" },
                duration.as_secs_f64()
            )),
            Event::UsageUnknown { item, n, why } => {
                self.line(&format!(
                    "{} attempt {n}: usage unknown: {why}",
                    self.name(*item)
                ));
            }
            Event::ResourceWaiting {
                item,
                n,
                resource,
                gate,
            } => {
                let step = gate
                    .as_deref()
                    .map_or("worker".to_string(), |g| format!("gate {g}"));
                self.line(&format!(
                    "{} attempt {n}: {step} waits for resource `{resource}`",
                    self.name(*item)
                ));
            }
            Event::ResourceAcquired { .. } => {}
            Event::LeaseWaiting { item, holder } => {
                self.line(&format!(
                    "{} waits for its repository's lease, {}",
                    self.name(*item),
                    holder.as_deref().map_or_else(
                        || "held by another process".to_string(),
                        |h| format!("held by {h}")
                    )
                ));
            }
            Event::PullRequestSettled { item, url, state } => {
                self.line(&format!("{} pull request {state}: {url}", self.name(*item)));
            }
            Event::Published {
                item,
                branch,
                url,
                error,
                ..
            } => self.line(&match (error, url) {
                (Some(e), _) => format!("{} not published: {e}", self.name(*item)),
                (None, Some(u)) => format!("{} published `{branch}`: {u}", self.name(*item)),
                (None, None) => format!("{} published `{branch}`", self.name(*item)),
            }),
            Event::ModelDemoted {
                model,
                failures,
                items,
                next,
                ..
            } => self.line(&format!(
                "model {model} failed for the provider's reasons {failures} times ({}): {}",
                items.join(", "),
                match next {
                    Some(n) => format!("new items start on {n}"),
                    None => "it is the last model of the chain: new items go on with it".into(),
                }
            )),
            Event::ModelRefused {
                item,
                model,
                message,
            } => self.line(&format!(
                "{}: the provider refused {} ({message}): no attempt starts on it again in this run (one already running on it finishes)",
                self.name(*item),
                model
                    .as_deref()
                    .map_or_else(|| "the worker's key".to_string(), |m| format!("model {m}"))
            )),
            Event::Probed {
                model,
                verdict,
                message,
                duration,
            } => {
                let took = format!("{:.1}s", duration.as_secs_f64());
                let said = message.as_deref().unwrap_or("no message");
                self.line(&match verdict {
                    crate::vocab::ProbeVerdict::Ok => {
                        format!("probe: model {model} answered ({took})")
                    }
                    crate::vocab::ProbeVerdict::Refused => format!(
                        "probe: the provider refused model {model} ({said}): no item uses it in this run"
                    ),
                    crate::vocab::ProbeVerdict::Unavailable => format!(
                        "probe: model {model} did not answer for the provider's reasons ({said}); the run goes on"
                    ),
                    crate::vocab::ProbeVerdict::Failed => format!(
                        "probe: the worker failed to ask model {model} ({said}); the run goes on"
                    ),
                })
            }
            Event::Reaped { run, pids, .. } => self.line(&format!(
                "ended {} process(es) that dead run {run} had left: {pids:?}",
                pids.len()
            )),
            Event::Watched { .. } => self.line(&ev.watched().unwrap_or_default()),
            Event::Denied {
                item,
                process,
                accesses,
                more,
                ..
            } => {
                // The path is the worker's to choose: shown as text.
                let first = accesses
                    .first()
                    .map(|a| format!("{} {}", a.access, printable(&a.path)))
                    .unwrap_or_default();
                let others = accesses.len() as u64 - 1 + more;
                self.line(&format!(
                    "{}: the sandbox denied its {process}: {first}{}",
                    self.name(*item),
                    if others > 0 {
                        format!(" (and {others} more)")
                    } else {
                        String::new()
                    }
                ));
            }
            Event::Leftovers { item, patch } => self.line(&format!(
                "{}: what an earlier run left uncommitted is saved in {} and removed",
                self.name(*item),
                patch.display()
            )),
            Event::ItemStarted { item } => {
                self.state.insert(*item, (0, None, None));
                if let Some(b) = &mut self.bars {
                    let bar = b.multi.add(ProgressBar::new_spinner());
                    bar.set_style(
                        ProgressStyle::with_template("  {spinner} {msg} · {elapsed}")
                            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                    );
                    bar.enable_steady_tick(Duration::from_millis(200));
                    b.items.insert(*item, bar);
                } else {
                    self.line(&format!("start {}", self.name(*item)));
                }
                self.refresh(*item);
            }
            Event::Resting {
                item,
                n,
                wait,
                hinted,
            } => {
                self.line(&format!(
                    "{} attempt {n}: the provider failed; resting {:.1}s before the next{}",
                    self.name(*item),
                    wait.as_secs_f64(),
                    if *hinted { " (as it asked)" } else { "" }
                ));
            }
            Event::AttemptStarted { item, n, model, .. } => {
                self.state.insert(*item, (*n, model.clone(), None));
                self.refresh(*item);
            }
            Event::WorkerFinished {
                item,
                n,
                exit,
                class,
                duration,
                ended,
                ..
            } => {
                // Plain logs name what went wrong; what went right is in the item's last line.
                if self.bars.is_none() && *class != WorkerClass::Ok {
                    self.line(&format!(
                        "{} attempt {n}: worker {} ({}{}, {:.1}s)",
                        self.name(*item),
                        class.as_str(),
                        exit.map_or("no exit code".to_string(), |c| format!("exit {c}")),
                        ended
                            .as_deref()
                            .map_or(String::new(), |e| format!("; ended: {e}")),
                        duration.as_secs_f64()
                    ));
                }
            }
            Event::GateStarted { item, gate, .. } => {
                if let Some(s) = self.state.get_mut(item) {
                    s.2 = Some(gate.clone());
                }
                self.refresh(*item);
            }
            Event::GateFinished {
                item,
                n,
                gate,
                result,
                duration,
                cached,
                failures,
                ..
            } => {
                let forgiven = failures.as_ref().map_or(0, |f| f.forgiven.len());
                if self.bars.is_none()
                    && (*result != GateResult::Passed || forgiven > 0 || cached.is_some())
                {
                    let mut also = String::new();
                    if forgiven > 0 && *result == GateResult::Passed {
                        also.push_str(&format!(
                            ", forgiving {forgiven} failure{} the base has",
                            if forgiven == 1 { "" } else { "s" }
                        ));
                    }
                    if let Some(c) = cached {
                        also.push_str(&format!(", cached from run {}", c.run_id));
                    }
                    self.line(&format!(
                        "{} attempt {n}: gate {gate} {} ({:.1}s{also})",
                        self.name(*item),
                        result.as_str(),
                        duration.as_secs_f64()
                    ));
                }
            }
            Event::GateBaseline {
                item,
                gate,
                commit,
                result,
                failures,
                cached,
                ..
            } => {
                if self.bars.is_none() {
                    self.line(&format!(
                        "{}: gate {gate} on the base commit {}: {}{}{}",
                        self.name(*item),
                        commit.get(..10).unwrap_or(commit),
                        result.as_str(),
                        match failures.len() {
                            0 => String::new(),
                            1 => " (1 failure)".to_string(),
                            k => format!(" ({k} failures)"),
                        },
                        if cached.is_some() { ", cached" } else { "" }
                    ));
                }
            }
            Event::ItemFinished {
                item,
                outcome,
                reason,
                cause,
            } => {
                self.state.remove(item);
                *self.counts.entry(*outcome).or_insert(0) += 1;
                if let Some(e) = &mut self.eta
                    && e.left.remove(item).is_some()
                {
                    e.update();
                }
                let started = self.bars.as_mut().and_then(|b| b.items.remove(item));
                if let Some(bar) = started {
                    bar.finish_and_clear();
                }
                if let Some(b) = &self.bars {
                    b.overall.inc(1);
                }
                self.finished += 1;
                let mut msg = format!(
                    "[{}/{}] {} {}",
                    self.finished.min(self.total.max(self.finished)),
                    self.total,
                    self.name(*item),
                    outcome.as_str()
                );
                if let Some(r) = reason {
                    msg.push_str(&format!(" ({r})"));
                }
                if let Some(c) = cause {
                    msg.push_str(&format!(": {c}"));
                }
                self.line(&msg);
            }
            Event::RunEnded { ending, cause } => {
                if let Some(b) = &self.bars {
                    b.overall.finish_and_clear();
                    let _ = b.multi.clear();
                    log::set_bars(None);
                }
                let counts: Vec<String> = self
                    .counts
                    .iter()
                    .filter(|(_, n)| **n > 0)
                    .map(|(o, n)| format!("{n} {}", o.as_str()))
                    .collect();
                let mut msg = format!(
                    "run ended: {} ({})",
                    ending.as_str(),
                    if counts.is_empty() {
                        "no items".to_string()
                    } else {
                        counts.join(", ")
                    }
                );
                if let Some(c) = cause {
                    msg.push_str(&format!(" — {c}"));
                }
                self.line(&msg);
            }
        }
    }
}
