//! The scheduler against a simulated world: random plans, bounds, claim and lease answers, finish
//! orders, probes and signals, with no process, clock or file.

use super::*;
use proptest::prelude::*;

fn setup(repos: &[u8], workers: u32) -> Setup {
    Setup {
        repo_of: repos.iter().map(|r| format!("r{r}")).collect(),
        queue: (0..repos.len()).collect(),
        workers,
        probe: false,
        wait_for_locks: None,
        stall_after: 3,
        clone_errors: HashMap::new(),
        nothing_found: repos.is_empty(),
        unreadable: None,
        paused: None,
        budget: None,
        estimates: Vec::new(),
        after: Vec::new(),
        labels: Vec::new(),
    }
}

fn done(outcome: ItemOutcome) -> ItemRun {
    ItemRun {
        outcome,
        reason: None,
        cause: None,
        progress: outcome == ItemOutcome::Completed,
        halt: None,
        tree_gone: true,
        quarantine: None,
    }
}

#[test]
fn admits_in_order_one_per_repository_up_to_the_bound() {
    let t = Instant::now();
    let mut s = Scheduler::new(setup(&[0, 0, 1, 2], 2));
    assert_eq!(s.next(t), Decision::Admit(0));
    s.admitted(0, Admission::Started, t);
    // Item 1 shares r0 with a running item: item 2 goes first.
    assert_eq!(s.next(t), Decision::Admit(2));
    s.admitted(2, Admission::Started, t);
    assert_eq!(s.next(t), Decision::Wait { until: None });
    let settled = s.finished(0, done(ItemOutcome::Completed));
    assert_eq!(settled.outcome, ItemOutcome::Completed);
    // r0 is busy until its result is durable and its lease released.
    assert_eq!(s.next(t), Decision::Admit(3));
    s.admitted(3, Admission::Started, t);
    assert_eq!(s.next(t), Decision::Wait { until: None });
    s.released("r0");
    s.finished(2, done(ItemOutcome::Completed));
    s.released("r1");
    assert_eq!(s.next(t), Decision::Admit(1));
}

#[test]
fn a_repository_is_done_with_once_nothing_of_it_is_pending_running_or_unreleased() {
    let t = Instant::now();
    let mut s = Scheduler::new(setup(&[0, 0, 1], 2));
    assert!(!s.done_with("r0") && !s.done_with("r1"));
    assert_eq!(s.next(t), Decision::Admit(0));
    s.admitted(0, Admission::Started, t);
    assert_eq!(s.next(t), Decision::Admit(2));
    s.admitted(2, Admission::Started, t);
    s.finished(2, done(ItemOutcome::Completed));
    // Finished, but its lease not yet released.
    assert!(!s.done_with("r1"));
    s.released("r1");
    assert!(s.done_with("r1"));
    s.finished(0, done(ItemOutcome::Completed));
    s.released("r0");
    // Item 1 of r0 is still to run.
    assert!(!s.done_with("r0"));
    assert_eq!(s.next(t), Decision::Admit(1));
    assert!(!s.done_with("r0"), "being admitted");
    s.admitted(1, Admission::Started, t);
    s.finished(1, done(ItemOutcome::Completed));
    s.released("r0");
    assert!(s.done_with("r0"));
}

#[test]
fn a_lease_held_elsewhere_is_waited_for_then_held() {
    let t = Instant::now();
    let mut st = setup(&[0, 0, 1], 2);
    st.wait_for_locks = Some(Duration::from_secs(1));
    let mut s = Scheduler::new(st);
    assert_eq!(s.next(t), Decision::Admit(0));
    s.admitted(
        0,
        Admission::LeaseBusy {
            holder: None,
            cooperating: false,
        },
        t,
    );
    // The other repository goes on meanwhile.
    assert_eq!(s.next(t), Decision::Admit(2));
    s.admitted(2, Admission::Started, t);
    assert_eq!(
        s.next(t),
        Decision::Wait {
            until: Some(t + LEASE_RETRY)
        }
    );
    let later = t + Duration::from_secs(2);
    assert_eq!(s.next(later), Decision::Admit(0));
    s.admitted(
        0,
        Admission::LeaseBusy {
            holder: Some("run `x` (pid 1 on h)".into()),
            cooperating: false,
        },
        later,
    );
    for item in [0, 1] {
        let Decision::Settle(st) = s.next(later) else {
            panic!("item {item} not held")
        };
        assert_eq!((st.item, st.outcome), (item, ItemOutcome::Held));
        assert_eq!(st.reason.as_deref(), Some("repo-busy"));
        assert_eq!(st.cause.as_deref(), Some("leased by run `x` (pid 1 on h)"));
    }
    assert_eq!(s.next(later), Decision::Wait { until: None });
}

#[test]
fn a_holder_that_is_no_live_run_is_asked_again_for_a_moment_before_the_repository_is_held() {
    let t = Instant::now();
    let foreign = || Admission::LeaseBusy {
        holder: None,
        cooperating: false,
    };
    let live = Admission::LeaseBusy {
        holder: Some("run `b`".into()),
        cooperating: true,
    };
    let mut s = Scheduler::new(setup(&[0], 1));
    assert_eq!(s.next(t), Decision::Admit(0));
    s.admitted(0, foreign(), t);
    // Within the grace: asked again, not held (the holder may be coming or going).
    let soon = t + LEASE_GRACE / 2;
    assert_eq!(s.next(soon), Decision::Admit(0));
    // A live run of this ledger took it meanwhile, and held it for an hour: waited for.
    s.admitted(0, live, soon);
    let hour = soon + Duration::from_secs(3600);
    assert_eq!(s.next(hour), Decision::Admit(0));
    // It let go as its run ended, just before the record was read: the grace starts again.
    s.admitted(0, foreign(), hour);
    let a_bit = hour + LEASE_GRACE / 2;
    assert_eq!(s.next(a_bit), Decision::Admit(0), "not held at once");
    s.admitted(0, foreign(), a_bit);
    // Still busy after the grace, with no live run holding it: held.
    let past = hour + LEASE_GRACE;
    assert_eq!(s.next(past), Decision::Admit(0));
    s.admitted(0, foreign(), past);
    let Decision::Settle(st) = s.next(past) else {
        panic!("not held after the grace")
    };
    assert_eq!(
        (st.outcome, st.reason.as_deref()),
        (ItemOutcome::Held, Some("repo-busy"))
    );
}

#[test]
fn the_probe_is_read_before_each_admission_while_items_run() {
    let t = Instant::now();
    let mut st = setup(&[0, 1, 2], 3);
    st.probe = true;
    let mut s = Scheduler::new(st);
    assert_eq!(s.next(t), Decision::Admit(0), "nothing runs: no probe");
    s.admitted(0, Admission::Started, t);
    assert_eq!(s.next(t), Decision::Probe);
    s.probed(1);
    assert_eq!(s.next(t), Decision::Wait { until: None });
    assert_eq!(s.next(t), Decision::Probe, "read again on the next pass");
    s.probed(7);
    assert_eq!(s.next(t), Decision::Admit(1));
}

#[test]
fn a_lease_another_live_run_holds_is_waited_for_without_a_window() {
    let t = Instant::now();
    let mut s = Scheduler::new(setup(&[0], 1));
    assert_eq!(s.next(t), Decision::Admit(0));
    let busy = Admission::LeaseBusy {
        holder: Some("run `b`".into()),
        cooperating: true,
    };
    s.admitted(0, busy.clone(), t);
    let much_later = t + Duration::from_secs(3600);
    assert_eq!(
        s.next(much_later),
        Decision::Admit(0),
        "asked again, not held"
    );
    s.admitted(0, busy, much_later);
    assert!(matches!(
        s.next(much_later),
        Decision::Wait { until: Some(_) }
    ));
    let later_still = much_later + LEASE_RETRY;
    assert_eq!(s.next(later_still), Decision::Admit(0));
    s.admitted(
        0,
        Admission::DoneElsewhere {
            run: "b".into(),
            outcome: "completed".into(),
        },
        later_still,
    );
    let Decision::Settle(st) = s.next(later_still) else {
        panic!()
    };
    assert_eq!(
        (st.outcome, st.reason.as_deref()),
        (ItemOutcome::Skipped, Some("done"))
    );
    assert_eq!(s.next(later_still), Decision::Done);
}

#[test]
fn a_stop_admits_nothing_more_and_cancels_the_rest() {
    let t = Instant::now();
    let mut s = Scheduler::new(setup(&[0, 1, 2], 1));
    assert_eq!(s.next(t), Decision::Admit(0));
    s.admitted(0, Admission::Started, t);
    assert_eq!(s.signal(libc::SIGTERM), StopLevel::Graceful);
    assert_eq!(s.signal(libc::SIGTERM), StopLevel::Immediate);
    assert_eq!(s.next(t), Decision::Wait { until: None });
    s.finished(0, done(ItemOutcome::Cancelled));
    s.released("r0");
    assert_eq!(s.next(t), Decision::Done);
    let (left, ending, cause) = s.finish(Some("alice".into()));
    assert_eq!(ending, RunEnding::Cancelled);
    assert_eq!(cause.as_deref(), Some("cancelled by alice (SIGTERM)"));
    assert_eq!(
        left.iter().map(|l| (l.item, l.outcome)).collect::<Vec<_>>(),
        vec![(1, ItemOutcome::Cancelled), (2, ItemOutcome::Cancelled)]
    );
}

#[test]
fn a_pause_holds_what_is_left() {
    let t = Instant::now();
    let mut s = Scheduler::new(setup(&[0, 1], 2));
    assert_eq!(s.next(t), Decision::Admit(0));
    s.admitted(0, Admission::Paused("paused by bob".into()), t);
    assert_eq!(s.next(t), Decision::Done);
    let (left, ending, _) = s.finish(None);
    assert_eq!(ending, RunEnding::Paused);
    assert!(
        left.iter()
            .all(|l| l.outcome == ItemOutcome::Held && l.reason.as_deref() == Some("paused"))
    );
    assert_eq!(left.len(), 2);
}

#[test]
fn an_unproven_stop_quarantines_the_repository() {
    let t = Instant::now();
    let mut s = Scheduler::new(setup(&[0, 0], 1));
    assert_eq!(s.next(t), Decision::Admit(0));
    s.admitted(0, Admission::Started, t);
    let mut f = done(ItemOutcome::Failed);
    f.tree_gone = false;
    let settled = s.finished(0, f);
    assert!(settled.cause.unwrap().contains("quarantined"));
    let Decision::Settle(st) = s.next(t) else {
        panic!()
    };
    assert_eq!((st.item, st.reason.as_deref()), (1, Some("quarantined")));
}

#[test]
fn a_resting_item_frees_its_slot_and_takes_the_next_one_first() {
    let t = Instant::now();
    let ms = Duration::from_millis;
    // Two slots; items 0 and 1 rest, 2 and 3 take their slots, 4 waits its turn.
    let mut s = Scheduler::new(setup(&[0, 1, 2, 3, 4], 2));
    for i in [0, 1] {
        assert_eq!(s.next(t), Decision::Admit(i));
        s.admitted(i, Admission::Started, t);
    }
    s.rest(0, t + ms(5));
    s.rest(1, t + ms(5));
    for i in [2, 3] {
        assert_eq!(s.next(t), Decision::Admit(i));
        s.admitted(i, Admission::Started, t);
    }
    // Rests over, every slot taken: nothing goes on, nothing new starts.
    assert_eq!(s.next(t + ms(10)), Decision::Wait { until: None });
    let x = s.finished(2, done(ItemOutcome::Completed));
    assert_eq!(x.item, 2);
    s.released("r2");
    // The freed slot goes to a rested item before item 4.
    assert_eq!(s.next(t + ms(10)), Decision::Resume(0));
    assert_eq!(s.next(t + ms(10)), Decision::Wait { until: None });
    assert_eq!(s.resting(), 1);
    // While it rests, its repository is its own: a wait until its rest is over, not the end.
    let mut s = Scheduler::new(setup(&[0], 1));
    assert_eq!(s.next(t), Decision::Admit(0));
    s.admitted(0, Admission::Started, t);
    s.rest(0, t + ms(50));
    assert_eq!(
        s.next(t),
        Decision::Wait {
            until: Some(t + ms(50))
        }
    );
    assert_eq!(s.next(t + ms(50)), Decision::Resume(0));
}

#[test]
fn a_spent_budget_stops_admission_and_ends_the_run_budget() {
    let t = Instant::now();
    let mut st = setup(&[0, 1, 2], 1);
    st.budget = Some(BudgetLimit {
        usd: 2.0,
        cap: None,
        before: 0.0,
    });
    let mut s = Scheduler::new(st);
    assert_eq!(s.next(t), Decision::Admit(0));
    s.admitted(0, Admission::Started, t);
    assert_eq!(s.spent(1.5), None);
    assert!(s.spent(0.5).unwrap().contains("$2.00 of the $2.00 budget"));
    assert_eq!(s.spent(1.0), None, "said once");
    s.finished(0, done(ItemOutcome::Completed));
    s.released("r0");
    assert_eq!(s.next(t), Decision::Done, "nothing new starts");
    let (left, ending, _) = s.finish(None);
    assert_eq!(ending, RunEnding::Budget);
    assert_eq!(left.len(), 2);
    assert!(left.iter().all(|l| l.outcome == ItemOutcome::Cancelled));
}

#[test]
fn a_spent_cap_holds_what_it_kept_from_running_and_one_spent_before_admits_nothing() {
    let t = Instant::now();
    let cap = |usd: f64, before: f64| BudgetLimit {
        usd,
        cap: Some("the daily cap of $5.00 (it resets at 2026-12-04T00:00:00Z)".into()),
        before,
    };
    let mut st = setup(&[0, 1, 2], 1);
    st.budget = Some(cap(2.0, 3.0));
    let mut s = Scheduler::new(st);
    assert_eq!(s.next(t), Decision::Admit(0));
    s.admitted(0, Admission::Started, t);
    let cause = s.spent(2.5).unwrap();
    assert!(
        cause.contains("daily cap of $5.00")
            && cause.contains("$5.50 reported, $2.50 of it by this run"),
        "{cause}"
    );
    s.finished(0, done(ItemOutcome::Completed));
    s.released("r0");
    assert_eq!(s.next(t), Decision::Done);
    let (left, ending, _) = s.finish(None);
    assert_eq!(ending, RunEnding::Budget);
    assert!(
        left.iter()
            .all(|l| l.outcome == ItemOutcome::Held && l.reason.as_deref() == Some("budget")),
        "{left:?}"
    );
    // Spent before the run: nothing is admitted at all.
    let mut st = setup(&[0, 1], 1);
    st.budget = Some(cap(-1.0, 6.0));
    let mut s = Scheduler::new(st);
    assert_eq!(s.next(t), Decision::Done);
    let (left, ending, cause) = s.finish(None);
    assert_eq!(ending, RunEnding::Budget);
    assert!(cause.unwrap().contains("$6.00 reported"));
    assert_eq!(left.len(), 2);
    assert!(
        left[0]
            .cause
            .as_deref()
            .unwrap()
            .contains("resets at 2026-12-04T00:00:00Z")
    );
}

#[test]
fn nothing_found_is_not_drained() {
    let mut s = Scheduler::new(setup(&[], 2));
    assert_eq!(s.next(Instant::now()), Decision::Done);
    assert_eq!(s.finish(None).1, RunEnding::NothingFound);
}

/// One simulated drain: `answers` drives every choice the world makes.
fn simulate(
    repos: Vec<u8>,
    workers: u32,
    probe: bool,
    wait: bool,
    answers: Vec<u8>,
    stop_at: Option<usize>,
) {
    let mut st = setup(&repos, workers);
    st.probe = probe;
    st.wait_for_locks = wait.then(|| Duration::from_millis(500));
    if repos.contains(&3) {
        st.clone_errors
            .insert("r3".into(), "fatal: repository not found".into());
    }
    let mut s = Scheduler::new(st);
    let mut answers = answers.into_iter();
    let mut pick = |n: u8| answers.next().map_or(0, |a| a % n);
    let mut now = Instant::now();
    let mut decided = vec![0u32; repos.len()];
    let mut running: HashMap<usize, String> = HashMap::new();
    let mut resting: HashMap<usize, (String, Instant)> = HashMap::new();
    let mut settling: Vec<String> = Vec::new();
    let mut stopped = false;
    let mut bound = workers;
    for step in 0.. {
        assert!(step < 100_000, "the drain does not end");
        if Some(step) == stop_at && !stopped {
            s.signal(libc::SIGTERM);
            stopped = true;
        }
        match s.next(now) {
            Decision::Probe => {
                bound = u32::from(pick(5));
                s.probed(bound);
                bound = bound.clamp(1, workers);
            }
            Decision::Admit(i) => {
                assert!(!stopped, "item {i} admitted after the stop");
                let repo = format!("r{}", repos[i]);
                let answer = match pick(10) {
                    0 => Admission::ClaimedElsewhere {
                        run: "other".into(),
                    },
                    1 => Admission::DoneElsewhere {
                        run: "other".into(),
                        outcome: "completed".into(),
                    },
                    2 | 3 => Admission::LeaseBusy {
                        holder: None,
                        cooperating: pick(2) == 0,
                    },
                    4 if pick(4) == 0 => Admission::Failed("no lease file".into()),
                    5 if pick(8) == 0 => Admission::Paused("paused".into()),
                    _ => Admission::Started,
                };
                if matches!(answer, Admission::Paused(_)) {
                    stopped = true;
                }
                if answer == Admission::Started {
                    assert!(
                        (running.len() as u32)
                            < workers.min(if probe && !running.is_empty() {
                                bound
                            } else {
                                workers
                            }),
                        "more than the bound"
                    );
                    assert!(
                        !running.values().any(|r| *r == repo)
                            && !resting.values().any(|(r, _)| *r == repo)
                            && !settling.contains(&repo),
                        "two items of {repo} at once"
                    );
                    running.insert(i, repo);
                }
                s.admitted(i, answer, now);
            }
            Decision::Settle(x) => decided[x.item] += 1,
            Decision::Resume(i) => {
                let (repo, until) = resting.remove(&i).expect("only a resting item goes on");
                if !s.halted() || s.stopped_by().is_none() {
                    assert!(until <= now, "item {i} went on before its rest was over");
                    assert!((running.len() as u32) < workers, "more than the bound");
                }
                running.insert(i, repo);
            }
            Decision::Wait { until } => {
                if !running.is_empty() {
                    // Time passes while items run: rests come due with every slot taken.
                    now += Duration::from_millis(u64::from(pick(20)));
                }
                if !running.is_empty() && pick(4) == 1 {
                    // A provider failure: the item rests, its slot free.
                    let mut keys: Vec<usize> = running.keys().copied().collect();
                    keys.sort();
                    let i = keys[usize::from(pick(keys.len() as u8))];
                    let repo = running.remove(&i).unwrap();
                    let until = now + Duration::from_millis(u64::from(pick(50)));
                    s.rest(i, until);
                    resting.insert(i, (repo, until));
                } else if !settling.is_empty() {
                    for r in settling.drain(..) {
                        s.released(&r);
                    }
                } else if !running.is_empty() {
                    let mut keys: Vec<usize> = running.keys().copied().collect();
                    keys.sort();
                    let i = keys[usize::from(pick(keys.len() as u8))];
                    let repo = running.remove(&i).unwrap();
                    let outcome = [
                        ItemOutcome::Completed,
                        ItemOutcome::Halted,
                        ItemOutcome::Failed,
                    ][usize::from(pick(3))];
                    let mut f = done(outcome);
                    f.tree_gone = pick(20) != 0;
                    f.halt = (outcome != ItemOutcome::Completed)
                        .then(|| HaltSignature::described("gate `test`", "boom"));
                    if f.tree_gone {
                        settling.push(repo);
                    }
                    let x = s.finished(i, f);
                    assert_eq!(x.item, i);
                    decided[i] += 1;
                } else {
                    let until = until.expect("waits for nothing with nothing running");
                    assert!(until > now, "a wait that spins");
                    now = until;
                }
                if s.halted() {
                    stopped = true;
                }
            }
            Decision::Done => break,
        }
    }
    assert!(running.is_empty(), "done while items run");
    assert!(resting.is_empty(), "done while items rest");
    let (left, _, _) = s.finish(None);
    for l in left {
        decided[l.item] += 1;
    }
    assert!(
        decided.iter().all(|&n| n == 1),
        "every item decided exactly once: {decided:?}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn every_item_is_decided_once_within_the_bound_and_its_repository(
        repos in proptest::collection::vec(0u8..5, 0..24),
        workers in 1u32..5,
        probe in any::<bool>(),
        wait in any::<bool>(),
        answers in proptest::collection::vec(any::<u8>(), 0..200),
        stop_at in proptest::option::of(0usize..60),
    ) {
        simulate(repos, workers, probe, wait, answers, stop_at);
    }
}

#[test]
fn a_host_whose_slots_are_taken_keeps_the_item_queued_and_asks_again() {
    let t = Instant::now();
    let mut s = Scheduler::new(setup(&[0, 1], 2));
    assert_eq!(s.next(t), Decision::Admit(0));
    s.admitted(0, Admission::HostFull, t);
    // Nothing runs here, yet the drain is not over: it waits for a slot.
    match s.next(t) {
        Decision::Wait { until: Some(u) } => assert_eq!(u, t + LEASE_RETRY),
        d => panic!("{d:?}"),
    }
    assert_eq!(s.next(t + LEASE_RETRY), Decision::Admit(0));
    s.admitted(0, Admission::Started, t + LEASE_RETRY);
    assert_eq!(s.next(t + LEASE_RETRY), Decision::Admit(1));
}

#[test]
fn an_item_held_for_a_refused_key_stops_admission_and_holds_the_rest() {
    let t = Instant::now();
    let mut s = Scheduler::new(setup(&[0, 1, 2], 1));
    assert_eq!(s.next(t), Decision::Admit(0));
    s.admitted(0, Admission::Started, t);
    let mut f = done(ItemOutcome::Held);
    f.reason = Some("provider-refused".into());
    f.cause = Some("no model of the chain can be used: `m1` (401)".into());
    s.finished(0, f);
    s.released("r0");
    assert!(s.halted());
    assert_eq!(s.next(t), Decision::Done, "nothing new starts");
    let (left, ending, cause) = s.finish(None);
    assert_eq!(ending, RunEnding::Refused);
    assert_eq!(
        cause.as_deref(),
        Some("no model of the chain can be used: `m1` (401)")
    );
    assert_eq!(left.len(), 2);
    for l in &left {
        assert_eq!(l.outcome, ItemOutcome::Held, "{l:?}");
        assert_eq!(l.reason.as_deref(), Some("provider-refused"));
    }
}

#[test]
fn an_item_waits_for_its_dependencies_and_is_blocked_when_one_does_not_complete() {
    let t = Instant::now();
    // r0: 0; r1: 1 after 0; r2: 2 after 1; r3: 3 (independent); r4: 4 after 3.
    let mut st = setup(&[0, 1, 2, 3, 4], 4);
    st.after = vec![vec![], vec![0], vec![1], vec![], vec![3]];
    st.labels = (0..5).map(|i| format!("r{i}/i{i}")).collect();
    let mut s = Scheduler::new(st);
    let mut admitted = Vec::new();
    while let Decision::Admit(i) = s.next(t) {
        s.admitted(i, Admission::Started, t);
        admitted.push(i);
    }
    admitted.sort_unstable();
    assert_eq!(admitted, [0, 3], "only items waiting for nothing start");
    // 3 halts: 4 is held blocked, naming it.
    s.finished(3, done(ItemOutcome::Halted));
    s.released("r3");
    let Decision::Settle(held) = s.next(t) else {
        panic!("4 not settled")
    };
    assert_eq!((held.item, held.outcome), (4, ItemOutcome::Held));
    assert_eq!(held.reason.as_deref(), Some("blocked"));
    assert_eq!(held.cause.as_deref(), Some("after `r3/i3`, which halted"));
    assert_eq!(s.next(t), Decision::Wait { until: None });
    // 0 completes: 1 is ready, 2 still waits for it.
    s.finished(0, done(ItemOutcome::Completed));
    s.released("r0");
    assert_eq!(s.next(t), Decision::Admit(1));
    s.admitted(1, Admission::Started, t);
    assert_eq!(s.next(t), Decision::Wait { until: None });
    // 1 fails: 2 is blocked, and the drain is over with nothing left.
    s.finished(1, done(ItemOutcome::Failed));
    s.released("r1");
    let Decision::Settle(held) = s.next(t) else {
        panic!("2 not settled")
    };
    assert_eq!(held.item, 2);
    assert_eq!(held.cause.as_deref(), Some("after `r1/i1`, which failed"));
    assert_eq!(s.next(t), Decision::Done);
}

#[test]
fn a_dependency_completed_by_another_run_meanwhile_lets_its_dependents_go_on() {
    let t = Instant::now();
    let mut st = setup(&[0, 1], 2);
    st.after = vec![vec![], vec![0]];
    let mut s = Scheduler::new(st);
    assert_eq!(s.next(t), Decision::Admit(0));
    s.admitted(
        0,
        Admission::DoneElsewhere {
            run: "r".into(),
            outcome: "completed".into(),
        },
        t,
    );
    let Decision::Settle(skipped) = s.next(t) else {
        panic!("0 not settled")
    };
    assert_eq!(skipped.item, 0);
    assert_eq!(s.next(t), Decision::Admit(1));
}
