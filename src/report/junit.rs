//! `junit.xml`: the run for CI test tabs. One testsuite per repository, one testcase per item;
//! halted and failed items are failures carrying the failing step's output tail, held, skipped and
//! cancelled items are skipped with their reason, and each attempt's steps are in the case's
//! system-out.

use super::{ItemReport, Report};
use crate::vocab::{GateResult, ItemOutcome, WorkerClass};
use quick_junit::{NonSuccessKind, TestCase, TestCaseStatus, TestSuite};
use std::collections::BTreeMap;
use std::time::Duration;

fn seconds_between(from: Option<&str>, to: Option<&str>) -> Option<Duration> {
    let a = super::timestamp(from?)?;
    let b = super::timestamp(to?)?;
    let d = b.duration_since(a);
    (!d.is_negative()).then(|| Duration::from_secs_f64(d.as_secs_f64()))
}

fn stamp(s: &str) -> Option<chrono::DateTime<chrono::FixedOffset>> {
    chrono::DateTime::parse_from_rfc3339(s).ok()
}

/// What the item's attempts did, a line per step.
fn steps(it: &ItemReport) -> String {
    let mut out = String::new();
    for a in &it.attempts {
        let model = a
            .model
            .as_deref()
            .map(|m| format!(" ({m})"))
            .unwrap_or_default();
        if let Some(w) = &a.worker {
            out.push_str(&format!(
                "attempt {}{model}: worker {} in {} ms\n",
                a.n,
                w.class.as_str(),
                w.duration_ms
            ));
        }
        for g in &a.gates {
            out.push_str(&format!(
                "attempt {}: gate `{}` {} in {} ms{}{}\n",
                a.n,
                g.name,
                g.result.as_str(),
                g.duration_ms,
                if g.forgiven {
                    ", forgiven (the base commit fails so too)"
                } else {
                    ""
                },
                g.cached
                    .as_ref()
                    .map(|c| format!(", cached from run {}", c.run_id))
                    .unwrap_or_default()
            ));
            if let Some(f) = &g.failures {
                for (what, lines) in [("new failure", &f.new), ("forgiven", &f.forgiven)] {
                    for l in lines {
                        out.push_str(&format!("  {what}: {l}\n"));
                    }
                }
            }
        }
    }
    out
}

/// The output tail of the step that failed last.
fn failing_tail(it: &ItemReport) -> Option<String> {
    let last = it.attempts.last()?;
    if let Some(g) = last.gates.iter().rev().find(|g| {
        !matches!(
            g.result,
            GateResult::Passed | GateResult::Skipped | GateResult::NotRun
        )
    }) {
        return Some(format!("gate `{}`:\n{}", g.name, g.output_tail));
    }
    let w = last.worker.as_ref()?;
    (w.class != WorkerClass::Ok).then(|| format!("worker:\n{}", w.output_tail))
}

pub fn render(r: &Report) -> Result<String, quick_junit::SerializeError> {
    let mut report = quick_junit::Report::new(format!("runner {}", r.manifest.name));
    if let Some(t) = seconds_between(Some(&r.started_at), r.ended_at.as_deref()) {
        report.set_time(t);
    }
    if let Some(at) = stamp(&r.started_at) {
        report.set_timestamp(at);
    }
    let mut suites: BTreeMap<&str, Vec<&ItemReport>> = BTreeMap::new();
    for it in &r.items {
        suites.entry(it.repo.as_str()).or_default().push(it);
    }
    for (repo, items) in suites {
        let mut suite = TestSuite::new(repo);
        // A suite's time is what its items took; it starts when its first item did.
        let mut took = Duration::ZERO;
        if let Some(first) = items.iter().filter_map(|i| i.started_at.as_deref()).min()
            && let Some(at) = stamp(first)
        {
            suite.set_timestamp(at);
        }
        for it in items {
            let detail = match (&it.reason, &it.cause) {
                (Some(r), Some(c)) => format!("{r}: {c}"),
                (Some(r), None) => r.clone(),
                (None, Some(c)) => c.clone(),
                (None, None) => it.outcome.as_str().to_string(),
            };
            let status = match it.outcome {
                ItemOutcome::Completed => TestCaseStatus::success(),
                ItemOutcome::Halted | ItemOutcome::Failed => {
                    let kind = if it.outcome == ItemOutcome::Failed {
                        NonSuccessKind::Error
                    } else {
                        NonSuccessKind::Failure
                    };
                    let mut s = TestCaseStatus::non_success(kind);
                    s.set_message(detail).set_type(it.outcome.as_str());
                    if let Some(tail) = failing_tail(it) {
                        s.set_description(tail);
                    }
                    s
                }
                ItemOutcome::Held | ItemOutcome::Skipped | ItemOutcome::Cancelled => {
                    let mut s = TestCaseStatus::skipped();
                    s.set_message(format!("{}: {detail}", it.outcome.as_str()))
                        .set_type(it.outcome.as_str());
                    s
                }
            };
            let mut case = TestCase::new(it.id.as_str(), status);
            case.set_classname(repo);
            if let Some(t) = seconds_between(it.started_at.as_deref(), it.ended_at.as_deref()) {
                case.set_time(t);
                took += t;
            }
            let steps = steps(it);
            if !steps.is_empty() {
                case.set_system_out(steps);
            }
            suite.add_test_case(case);
        }
        suite.set_time(took);
        report.add_test_suite(suite);
    }
    report.to_string()
}
