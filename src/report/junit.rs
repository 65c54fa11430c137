//! `junit.xml`: the run for CI test tabs. One testsuite per repository, one testcase per item;
//! halted and failed items are failures carrying the failing step's output tail, held, skipped and
//! cancelled items are skipped with their reason, and each attempt's steps are in the case's
//! system-out.

use super::model::{ItemReport, Report};
use crate::vocab::{GateResult, ItemOutcome, WorkerClass};
use std::collections::BTreeMap;
use std::time::Duration;

fn seconds_between(from: Option<&str>, to: Option<&str>) -> Option<Duration> {
    let a = super::model::timestamp(from?)?;
    let b = super::model::timestamp(to?)?;
    let d = b.duration_since(a);
    (!d.is_negative()).then(|| Duration::from_secs_f64(d.as_secs_f64()))
}

/// A timestamp as JUnit consumers read it: RFC 3339 with milliseconds and a numeric offset.
fn stamp(s: &str) -> Option<String> {
    super::model::timestamp(s).map(|t| t.strftime("%Y-%m-%dT%H:%M:%S%.3f+00:00").to_string())
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

/// The report as JUnit XML.
pub fn render(r: &Report) -> String {
    let mut bytes = Vec::new();
    // Writing into memory does not fail, and everything written is text.
    let _ = render_to(r, &mut bytes);
    String::from_utf8(bytes).unwrap_or_default()
}

/// What a suite (or all of them) counts.
#[derive(Default)]
struct Tally {
    tests: usize,
    skipped: usize,
    failures: usize,
    errors: usize,
}

impl Tally {
    fn add(&mut self, it: &ItemReport) {
        self.tests += 1;
        match it.outcome {
            ItemOutcome::Completed => {}
            ItemOutcome::Halted => self.failures += 1,
            ItemOutcome::Failed => self.errors += 1,
            ItemOutcome::Held | ItemOutcome::Skipped | ItemOutcome::Cancelled => self.skipped += 1,
        }
    }
}

/// One repository's suite: its items (by index) and their totals.
#[derive(Default)]
struct Suite {
    items: Vec<usize>,
    tally: Tally,
    took: Duration,
    /// When its first item started (RFC 3339).
    first: Option<String>,
}

/// The report as JUnit XML, written into `w` case by case: a run of thousands of items is never
/// held as a document too.
pub(crate) fn render_to(r: &Report, w: &mut dyn std::io::Write) -> std::io::Result<()> {
    // One pass for the totals of the run and of each repository's suite; the cases are
    // written in a second, each record read again (a run's records are not held together).
    let mut suites: BTreeMap<String, Suite> = BTreeMap::new();
    let mut all = Tally::default();
    for (i, it) in r.items.iter().enumerate() {
        let suite = suites.entry(it.repo.clone()).or_default();
        suite.items.push(i);
        suite.tally.add(&it);
        all.add(&it);
        // A suite's time is what its items took; it starts when its first item did.
        if let Some(t) = seconds_between(it.started_at.as_deref(), it.ended_at.as_deref()) {
            suite.took += t;
        }
        if let Some(at) = it.started_at.as_deref()
            && suite.first.as_deref().is_none_or(|f| at < f)
        {
            suite.first = Some(at.to_string());
        }
    }
    w.write_all(b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n")?;
    write!(
        w,
        "<testsuites name=\"{}\" tests=\"{}\" skipped=\"{}\" failures=\"{}\" errors=\"{}\"",
        attr(&format!("runner {}", r.manifest.name)),
        all.tests,
        all.skipped,
        all.failures,
        all.errors
    )?;
    if let Some(at) = stamp(&r.started_at) {
        write!(w, " timestamp=\"{at}\"")?;
    }
    if let Some(t) = seconds_between(Some(&r.started_at), r.ended_at.as_deref()) {
        write!(w, " time=\"{:.3}\"", t.as_secs_f64())?;
    }
    w.write_all(b">\n")?;
    for (repo, suite) in suites {
        let tally = &suite.tally;
        write!(
            w,
            "    <testsuite name=\"{}\" tests=\"{}\" skipped=\"{}\" errors=\"{}\" failures=\"{}\"",
            attr(&repo),
            tally.tests,
            tally.skipped,
            tally.errors,
            tally.failures
        )?;
        if let Some(at) = suite.first.as_deref().and_then(stamp) {
            write!(w, " timestamp=\"{at}\"")?;
        }
        writeln!(w, " time=\"{:.3}\">", suite.took.as_secs_f64())?;
        for i in suite.items {
            if let Some(it) = r.items.get(i) {
                case(w, &repo, &it)?;
            }
        }
        w.write_all(b"    </testsuite>\n")?;
    }
    w.write_all(b"</testsuites>\n")?;
    w.flush()
}

/// One item's testcase.
fn case(w: &mut dyn std::io::Write, repo: &str, it: &ItemReport) -> std::io::Result<()> {
    let detail = match (&it.reason, &it.cause) {
        (Some(r), Some(c)) => format!("{r}: {c}"),
        (Some(r), None) => r.clone(),
        (None, Some(c)) => c.clone(),
        (None, None) => it.outcome.as_str().to_string(),
    };
    write!(
        w,
        "        <testcase name=\"{}\" classname=\"{}\"",
        attr(&it.id),
        attr(repo)
    )?;
    if let Some(t) = seconds_between(it.started_at.as_deref(), it.ended_at.as_deref()) {
        write!(w, " time=\"{:.3}\"", t.as_secs_f64())?;
    }
    w.write_all(b">\n")?;
    let (tag, message, description) = match it.outcome {
        ItemOutcome::Completed => ("", String::new(), None),
        ItemOutcome::Halted => ("failure", detail, failing_tail(it)),
        ItemOutcome::Failed => ("error", detail, failing_tail(it)),
        ItemOutcome::Held | ItemOutcome::Skipped | ItemOutcome::Cancelled => (
            "skipped",
            format!("{}: {detail}", it.outcome.as_str()),
            None,
        ),
    };
    if !tag.is_empty() {
        write!(
            w,
            "            <{tag} message=\"{}\" type=\"{}\"",
            attr(&message),
            it.outcome.as_str()
        )?;
        match description {
            Some(d) => writeln!(w, ">{}</{tag}>", text(&d))?,
            None => w.write_all(b"/>\n")?,
        }
    }
    let steps = steps(it);
    if !steps.is_empty() {
        writeln!(w, "            <system-out>{}</system-out>", text(&steps))?;
    }
    w.write_all(b"        </testcase>\n")
}

/// Text as XML 1.0 allows it: colour codes removed, and every character XML does not allow
/// (control characters but tab and line ends, U+FFFE, U+FFFF) shown escaped (`\u{fffe}`).
fn clean(s: &str) -> String {
    let allowed = |c: char| {
        matches!(c, '\t' | '\n' | '\r')
            || ('\u{20}'..='\u{d7ff}').contains(&c)
            || ('\u{e000}'..='\u{fffd}').contains(&c)
            || c >= '\u{10000}'
    };
    let mut out = String::new();
    for c in crate::failures::strip_ansi(s).chars() {
        if allowed(c) {
            out.push(c);
        } else {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        }
    }
    out
}

/// Element text, escaped.
fn text(s: &str) -> String {
    clean(s)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// An attribute value, escaped.
fn attr(s: &str) -> String {
    text(s).replace('"', "&quot;").replace('\'', "&apos;")
}
