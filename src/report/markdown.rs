//! `summary.md`: the run for people, PR comments and `$GITHUB_STEP_SUMMARY`.

use super::model::Report;
use crate::vocab::ItemOutcome;

/// Text for a line or a table cell of Markdown: shown as text, never read as Markdown or HTML
/// (a worker's output, a model name, a path are not runner's to render): HTML is escaped, link
/// brackets too, a line end is a space, other control characters are shown escaped. Backticks
/// stay: runner's own messages name things in code spans.
fn cell(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '|' => out.push_str("\\|"),
            '\n' | '\r' => out.push(' '),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '[' => out.push_str("\\["),
            ']' => out.push_str("\\]"),
            c if c.is_control() && c != '\t' => {
                out.push_str(&crate::support::text::printable(&c.to_string()));
            }
            c => out.push(c),
        }
    }
    out
}

/// A code span of text that is not runner's (a path a worker named): its fence longer than
/// any run of backticks in it, so nothing in it ends the span.
fn code(s: &str) -> String {
    let longest = s.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    let pad = if s.starts_with('`') || s.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{}{pad}{fence}", cell(s))
}

/// `1 item`, `2 items`.
fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A worker's or gate's output as a code block: its fence longer than any run of backticks in
/// it (so nothing it prints closes the block), its control characters shown escaped.
fn fence(out: &mut String, tail: &str) {
    let longest = tail.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let ticks = "`".repeat(longest.max(2) + 1);
    let shown: String = tail
        .trim_end()
        .split('\n')
        .map(|l| {
            l.chars()
                .map(|c| {
                    if c.is_control() && c != '\t' {
                        crate::support::text::printable(&c.to_string())
                    } else {
                        c.to_string()
                    }
                })
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("\n");
    out.push_str(&format!("\n{ticks}text\n{shown}\n{ticks}\n\n"));
}

pub fn render(r: &Report) -> String {
    let mut out = String::new();
    head(&mut out, r);
    if r.items.is_empty() {
        return out;
    }
    out.push_str("| repository | item | outcome | model | attempts | detail |\n");
    out.push_str("|---|---|---|---|---|---|\n");
    for it in r.items.iter() {
        out.push_str(&row(&it));
    }
    held(&mut out, r);
    denied(&mut out, r);
    failures(&mut out, r);
    incomplete_logs(&mut out, r);
    out
}

/// The heading, the run's line, its cause, suspect gates, counts, usage and warnings.
fn head(out: &mut String, r: &Report) {
    out.push_str(&format!(
        "# runner: `{}` — {}\n\n",
        r.manifest.name,
        super::model::ending_with_counts(r)
    ));
    out.push_str(&format!(
        "Run `{}` · started {} · ended {} · up to {} at once\n\n",
        r.run_id,
        r.started_at,
        r.ended_at.as_deref().unwrap_or(if super::model::died(r) {
            "never (the run died)"
        } else {
            "still running"
        }),
        count(r.capacity.workers as usize, "item", "items")
    ));
    if let Some(c) = &r.cause {
        out.push_str(&format!("**Cause:** {}\n\n", cell(c)));
    }
    for s in &r.suspect_gates {
        out.push_str(&format!(
            "**Suspected misconfigured gate:** {}\n\n",
            cell(&super::model::suspect_line(s))
        ));
    }
    let counts = super::model::nonzero_counts(&r.counts);
    out.push_str(&format!(
        "**{}:** {}\n\n",
        count(r.items.len(), "item", "items"),
        if counts.is_empty() {
            "none".to_string()
        } else {
            counts.join(", ")
        }
    ));
    if let Some(u) = &r.usage {
        out.push_str(&format!(
            "**Usage:** {} · {} input tokens · {} output tokens",
            u.total.cost_text(),
            u.total.input_tokens,
            u.total.output_tokens
        ));
        if u.by_model.len() > 1 {
            let per: Vec<String> = u
                .by_model
                .iter()
                .map(|(m, x)| format!("{} {}", cell(m), x.cost_text()))
                .collect();
            out.push_str(&format!(" ({})", per.join(", ")));
        }
        out.push_str("\n\n");
    }
    if !r.warnings.is_empty() {
        out.push_str("## Warnings\n\n");
        for w in &r.warnings {
            out.push_str(&format!("- {}\n", cell(w)));
        }
        out.push('\n');
    }
}

/// `detail`, then `; more` (or `more` alone when there is no detail yet).
fn append(detail: &mut String, more: &str) {
    if !detail.is_empty() {
        detail.push_str("; ");
    }
    detail.push_str(more);
}

/// An item's row of the table.
fn row(it: &super::model::ItemReport) -> String {
    let mut detail = match (&it.reason, &it.cause) {
        (Some(r), Some(c)) => format!("{r}: {c}"),
        (Some(r), None) => r.clone(),
        (None, Some(c)) => c.clone(),
        (None, None) => String::new(),
    };
    if let Some(p) = &it.publish {
        let what = match (&p.error, &p.url) {
            (Some(e), _) => format!("not published: {e}"),
            (None, Some(u)) => format!("pull request: {u}"),
            (None, None) if p.pushed => format!("pushed `{}` to `{}`", p.branch, p.remote),
            (None, None) => format!(
                "`{}` on `{}` already where it was: nothing pushed",
                p.branch, p.remote
            ),
        };
        append(&mut detail, &what);
    }
    if let Some(pr) = &it.pull_request
        && it.publish.is_none()
    {
        append(
            &mut detail,
            &format!("pull request {}: {}", pr.describe(), pr.url),
        );
    }
    let mark = match it.outcome {
        ItemOutcome::Completed => "✅ completed",
        ItemOutcome::Halted => "❌ halted",
        ItemOutcome::Failed => "💥 failed",
        ItemOutcome::Skipped => "⏭️ skipped",
        ItemOutcome::Held => "⏸️ held",
        ItemOutcome::Cancelled => "⛔ cancelled",
    };
    let mark = if it.marks.is_empty() {
        mark.to_string()
    } else {
        format!("{mark} ({})", it.marks.join(", "))
    };
    if let Some(c) = &it.commit {
        let stat = it.diffstat.as_ref().map_or(String::new(), |d| {
            format!(
                ": {}, +{} −{}",
                count(d.files as usize, "file", "files"),
                d.insertions,
                d.deletions
            )
        });
        append(
            &mut detail,
            &format!("commit `{}`{stat}", &c[..c.len().min(10)]),
        );
    }
    if let Some(last) = it.attempts.last() {
        for note in super::model::gate_notes(last) {
            append(&mut detail, &note);
        }
    }
    if !it.uncommitted.is_empty() {
        let files: Vec<String> = it.uncommitted.iter().map(|f| format!("`{f}`")).collect();
        append(
            &mut detail,
            &format!("left uncommitted: {}", files.join(", ")),
        );
    }
    // Passes the provider failed do not use up attempts: counted apart.
    let retries = it
        .attempts
        .iter()
        .filter(|a| {
            a.worker
                .as_ref()
                .is_some_and(|w| w.class == crate::vocab::WorkerClass::Provider)
        })
        .count();
    let attempts = it.attempts.len() - retries;
    let attempts = match retries {
        0 => attempts.to_string(),
        n => format!(
            "{attempts} (+{})",
            count(n, "provider retry", "provider retries")
        ),
    };
    format!(
        "| {} | {} | {} | {} | {} | {} |\n",
        cell(&it.repo),
        cell(&it.id),
        mark,
        cell(it.model.as_deref().unwrap_or("")),
        attempts,
        cell(&detail)
    )
}

/// The held items and why.
fn held(out: &mut String, r: &Report) {
    let held: Vec<_> = r
        .items
        .iter_where(|o| o == ItemOutcome::Held)
        .map(|(_, it)| it)
        .collect();
    if held.is_empty() {
        return;
    }
    out.push_str("\n## Held\n\n");
    for it in held {
        out.push_str(&format!(
            "- `{}/{}` — {}{}\n",
            it.repo,
            it.id,
            it.reason.as_deref().unwrap_or("held"),
            it.cause
                .as_deref()
                .map(|c| format!(": {}", cell(c)))
                .unwrap_or_default()
        ));
    }
}

/// What each item's sandbox denied it, for the reviewer.
fn denied(out: &mut String, r: &Report) {
    let items: Vec<_> = r.items.iter().filter(|it| !it.denied.is_empty()).collect();
    if items.is_empty() {
        return;
    }
    out.push_str("\n## Denied by the sandbox\n\n");
    for it in items {
        out.push_str(&format!("- `{}/{}`\n", it.repo, it.id));
        for d in &it.denied {
            out.push_str(&format!(
                "  - attempt {}, {} ({}): {} {}{}\n",
                d.attempt,
                cell(&d.process),
                code(&d.access.program),
                d.access.access,
                code(&d.access.path),
                if d.more > 0 {
                    format!(", and {} more", d.more)
                } else {
                    String::new()
                }
            ));
        }
    }
}

/// Each halted or failed item, pass by pass: its worker, its gates and their output.
fn failures(out: &mut String, r: &Report) {
    let failing = r
        .items
        .iter_where(|o| matches!(o, ItemOutcome::Halted | ItemOutcome::Failed))
        .map(|(_, it)| it)
        .peekable();
    let mut failing = failing;
    if failing.peek().is_none() {
        return;
    }
    out.push_str("\n## Failures\n");
    for it in failing {
        out.push_str(&format!("\n### {}/{}\n\n", it.repo, it.id));
        for a in &it.attempts {
            pass(out, a);
        }
    }
}

/// One pass of a failing item.
fn pass(out: &mut String, a: &super::model::AttemptReport) {
    let w = a.worker.as_ref().map_or("not run".to_string(), |w| {
        let exit = w
            .exit
            .map_or("no exit code".to_string(), |c| format!("exit {c}"));
        let ended = w
            .ended
            .as_deref()
            .map_or(String::new(), |e| format!("; ended: {}", cell(e)));
        format!(
            "worker {} ({exit}{ended}, {:.1} s)",
            w.class.as_str(),
            w.duration_ms as f64 / 1000.0
        )
    });
    let on = a
        .model
        .as_deref()
        .map(|m| format!(" on `{m}`"))
        .unwrap_or_default();
    out.push_str(&format!("- pass {}{on}: {w}\n", a.n));
    if let Some(w) = &a.worker
        && !w.output_tail.is_empty()
    {
        fence(out, &w.output_tail);
    }
    for g in &a.gates {
        let cached = if g.cached.is_some() { " (cached)" } else { "" };
        out.push_str(&format!(
            "  - gate `{}`: {}{cached}\n",
            g.name,
            g.result.as_str()
        ));
        if let Some(f) = &g.failures {
            for (what, lines) in [("new", &f.new), ("forgiven", &f.forgiven)] {
                for l in lines {
                    out.push_str(&format!("    - {what}: `{}`\n", cell(l).replace('`', "'")));
                }
            }
        }
        if !g.output_tail.is_empty() && g.result != crate::vocab::GateResult::Passed {
            fence(out, &g.output_tail);
        }
    }
}

/// Logs that lack output: a full disk (the run exited 4 for them), or output past the limit.
fn incomplete_logs(out: &mut String, r: &Report) {
    let mut incomplete = Vec::new();
    for it in r.items.iter() {
        for a in &it.attempts {
            let worker = a.worker.iter().map(|w| {
                let gap = super::model::log_gap(w.log_error.as_deref(), w.unlogged_bytes);
                ("worker".to_string(), &w.log, gap)
            });
            let gates = a.gates.iter().map(|g| {
                let gap = super::model::log_gap(g.log_error.as_deref(), g.unlogged_bytes);
                (format!("gate `{}`", g.name), &g.log, gap)
            });
            for (what, log, gap) in worker.chain(gates) {
                if let Some(e) = gap {
                    incomplete.push(format!(
                        "- `{}/{}` pass {}, {what}: {}{}\n",
                        it.repo,
                        it.id,
                        a.n,
                        cell(&e),
                        log.as_deref()
                            .map(|l| format!(" (`{l}`)"))
                            .unwrap_or_default()
                    ));
                }
            }
        }
    }
    if !incomplete.is_empty() {
        out.push_str("\n## Incomplete logs\n\n");
        out.extend(incomplete);
    }
}
