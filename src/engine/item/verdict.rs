//! What one attempt means for its item, decided from the worker's class and the gates' results
//! alone: no process, no git, no clock. The attempt loop ([`super::attempt`]) performs what
//! these say — rests, moves along the model chain, writes feedback, keeps the work.

use crate::engine::stall::HaltSignature;
use crate::process::Finished;
use crate::vocab::{GateResult, WorkerClass};
use std::time::Duration;

/// What comes of the worker's pass of an attempt.
#[derive(Debug, PartialEq)]
pub(super) enum AfterWorker {
    /// runner could not start it: the item fails, with why.
    Unstarted(String),
    /// The run was stopped while it ran.
    Cancelled,
    /// Its provider refused the key: no attempt is spent; the chain decides what goes on.
    Refused,
    /// A provider-class failure: no attempt is spent; rest and the chain decide.
    Provider,
    /// The attempt is spent on the worker itself: why, and the halt it would be.
    Failed { cause: String, halt: HaltSignature },
    /// It finished: its work goes to the gates.
    Judge,
}

/// The worker of an attempt ended as `fin`, classed `class`, within `timeout`.
pub(super) fn worker_verdict(class: WorkerClass, fin: &Finished, timeout: Duration) -> AfterWorker {
    if let Some(e) = &fin.spawn_error {
        return AfterWorker::Unstarted(e.clone());
    }
    match class {
        WorkerClass::Cancelled => AfterWorker::Cancelled,
        WorkerClass::Refused => AfterWorker::Refused,
        WorkerClass::Provider => AfterWorker::Provider,
        WorkerClass::Timeout | WorkerClass::Failed => AfterWorker::Failed {
            cause: if class == WorkerClass::Timeout {
                format!(
                    "worker timed out after {}",
                    crate::manifest::format_duration(timeout)
                )
            } else {
                format!("worker failed ({})", exit_text(fin))
            },
            halt: HaltSignature::of("worker", &fin.tail, fin.exit),
        },
        WorkerClass::Ok => AfterWorker::Judge,
    }
}

/// A gate that failed an attempt: why (as the item's cause), the stage its feedback names, and
/// the halt it would be.
#[derive(Debug, PartialEq)]
pub(super) struct GateFailure {
    pub(super) cause: String,
    pub(super) stage: String,
    pub(super) halt: HaltSignature,
}

/// Gate `gate` failed the attempt: it ended as `fin`, or timed out, or failed for `why` where
/// its exit does not say (too few tests ran).
pub(super) fn gate_failed(
    gate: &str,
    fin: &Finished,
    timed_out: bool,
    why: Option<&str>,
) -> GateFailure {
    let stage = format!("gate `{gate}`");
    let (cause, halt) = if timed_out {
        (
            format!("gate `{gate}` timed out"),
            HaltSignature::described(stage.clone(), "timed out"),
        )
    } else {
        (
            match why {
                Some(w) => format!("gate `{gate}` failed: {w}"),
                None => format!("gate `{gate}` failed ({})", exit_text(fin)),
            },
            HaltSignature::of(stage.clone(), &fin.tail, fin.exit),
        )
    };
    GateFailure { cause, stage, halt }
}

/// A gate's result from how its process ended, before `min_tests` and baselines have a say.
pub(super) fn gate_result(fin: &Finished) -> GateResult {
    if fin.cancelled {
        GateResult::NotRun
    } else if fin.timed_out {
        GateResult::TimedOut
    } else if fin.success() {
        GateResult::Passed
    } else {
        GateResult::Failed
    }
}

/// Why a gate that passed by its exit fails all the same: it ran `counted` tests (lines matching
/// `pattern`), fewer than `min_tests.count` (`min`). `None` when enough ran or it did not pass.
pub(super) fn too_few_tests(
    result: GateResult,
    counted: u64,
    min: u32,
    pattern: &str,
) -> Option<String> {
    (result == GateResult::Passed && counted < u64::from(min)).then(|| {
        format!(
            "{counted} test{} ran (lines matching `{pattern}`), fewer than `min_tests.count` {min}",
            if counted == 1 { "" } else { "s" },
        )
    })
}

/// How a process ended, in words: why it could not start, its exit code, or its signal.
pub(super) fn exit_text(f: &Finished) -> String {
    if let Some(why) = &f.spawn_error {
        return why.clone();
    }
    match (f.exit, f.signal) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => "no exit status".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(exit: Option<i32>, signal: Option<i32>, tail: &str) -> Finished {
        Finished {
            exit,
            signal,
            tail: tail.into(),
            ..Finished::default()
        }
    }

    #[test]
    fn a_worker_that_could_not_start_fails_the_item_whatever_its_class() {
        let fin = Finished::unstarted("`agent` not found", Duration::ZERO);
        for class in [WorkerClass::Failed, WorkerClass::Ok, WorkerClass::Provider] {
            assert_eq!(
                worker_verdict(class, &fin, Duration::from_secs(60)),
                AfterWorker::Unstarted("`agent` not found".into())
            );
        }
    }

    #[test]
    fn provider_trouble_spends_no_attempt_and_a_stop_ends_the_item() {
        let fin = ended(Some(75), None, "429");
        let t = Duration::from_secs(60);
        assert_eq!(
            worker_verdict(WorkerClass::Provider, &fin, t),
            AfterWorker::Provider
        );
        assert_eq!(
            worker_verdict(WorkerClass::Refused, &fin, t),
            AfterWorker::Refused
        );
        assert_eq!(
            worker_verdict(WorkerClass::Cancelled, &fin, t),
            AfterWorker::Cancelled
        );
        assert_eq!(
            worker_verdict(WorkerClass::Ok, &ended(Some(0), None, ""), t),
            AfterWorker::Judge
        );
    }

    #[test]
    fn a_failed_or_timed_out_worker_spends_the_attempt_and_says_why() {
        let t = Duration::from_secs(90);
        let AfterWorker::Failed { cause, halt } =
            worker_verdict(WorkerClass::Failed, &ended(Some(3), None, "boom\n"), t)
        else {
            panic!("a failed worker spends its attempt")
        };
        assert_eq!(cause, "worker failed (exit code 3)");
        assert_eq!(halt.stage, "worker");
        let AfterWorker::Failed { cause, .. } =
            worker_verdict(WorkerClass::Timeout, &ended(None, Some(15), ""), t)
        else {
            panic!("a timed-out worker spends its attempt")
        };
        assert_eq!(cause, "worker timed out after 1m30s");
    }

    #[test]
    fn a_gate_failure_names_the_gate_and_why() {
        let fin = ended(Some(1), None, "assertion failed at src/lib.rs:7\n");
        let f = gate_failed("test", &fin, false, None);
        assert_eq!(f.cause, "gate `test` failed (exit code 1)");
        assert_eq!(f.stage, "gate `test`");
        assert_eq!(f.halt, HaltSignature::of("gate `test`", &fin.tail, Some(1)));
        let f = gate_failed("test", &fin, false, Some("2 tests ran, fewer than 10"));
        assert_eq!(f.cause, "gate `test` failed: 2 tests ran, fewer than 10");
        let f = gate_failed("lint", &ended(None, Some(9), ""), true, None);
        assert_eq!(f.cause, "gate `lint` timed out");
        assert_eq!(f.halt, HaltSignature::described("gate `lint`", "timed out"));
    }

    #[test]
    fn a_gate_that_ran_too_few_tests_fails_however_it_exited() {
        let passed = ended(Some(0), None, "");
        assert_eq!(gate_result(&passed), GateResult::Passed);
        assert_eq!(
            too_few_tests(GateResult::Passed, 1, 10, "^test "),
            Some("1 test ran (lines matching `^test `), fewer than `min_tests.count` 10".into())
        );
        assert_eq!(too_few_tests(GateResult::Passed, 10, 10, "^test "), None);
        // A gate that failed anyway says why by its exit.
        assert_eq!(too_few_tests(GateResult::Failed, 0, 10, "^test "), None);
        let timed_out = Finished {
            timed_out: true,
            ..ended(None, Some(9), "")
        };
        assert_eq!(gate_result(&timed_out), GateResult::TimedOut);
        let cancelled = Finished {
            cancelled: true,
            ..ended(None, Some(15), "")
        };
        assert_eq!(gate_result(&cancelled), GateResult::NotRun);
        assert_eq!(gate_result(&ended(Some(1), None, "")), GateResult::Failed);
    }

    #[test]
    fn exit_text_says_how_a_process_ended() {
        assert_eq!(exit_text(&ended(Some(2), None, "")), "exit code 2");
        assert_eq!(exit_text(&ended(None, Some(9), "")), "killed by signal 9");
        assert_eq!(exit_text(&ended(None, None, "")), "no exit status");
    }
}
