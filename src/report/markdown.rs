//! `summary.md`: the run for people, PR comments and `$GITHUB_STEP_SUMMARY`.

use super::Report;
use crate::vocab::ItemOutcome;

fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

pub fn render(r: &Report) -> String {
    let mut out = String::new();
    let ending = r.ending.map_or("unfinished", |e| e.as_str());
    out.push_str(&format!("# runner: `{}` — {ending}\n\n", r.manifest.name));
    out.push_str(&format!(
        "Run `{}` · started {} · ended {} · up to {} workers\n\n",
        r.run_id,
        r.started_at,
        r.ended_at.as_deref().unwrap_or("-"),
        r.capacity.workers
    ));
    if let Some(c) = &r.cause {
        out.push_str(&format!("**Cause:** {}\n\n", cell(c)));
    }
    let counts: Vec<String> = r
        .counts
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(o, n)| format!("{n} {}", o.as_str()))
        .collect();
    out.push_str(&format!(
        "**{} items:** {}\n\n",
        r.items.len(),
        if counts.is_empty() {
            "none".to_string()
        } else {
            counts.join(", ")
        }
    ));
    if r.items.is_empty() {
        return out;
    }
    out.push_str("| repository | item | outcome | model | attempts | detail |\n");
    out.push_str("|---|---|---|---|---|---|\n");
    for it in &r.items {
        let detail = match (&it.reason, &it.cause) {
            (Some(r), Some(c)) => format!("{r}: {c}"),
            (Some(r), None) => r.clone(),
            (None, Some(c)) => c.clone(),
            (None, None) => String::new(),
        };
        let mark = match it.outcome {
            ItemOutcome::Completed => "✅ completed",
            ItemOutcome::Halted => "❌ halted",
            ItemOutcome::Failed => "💥 failed",
            ItemOutcome::Skipped => "⏭️ skipped",
            ItemOutcome::Held => "⏸️ held",
            ItemOutcome::Cancelled => "⛔ cancelled",
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            cell(&it.repo),
            cell(&it.id),
            mark,
            cell(it.model.as_deref().unwrap_or("")),
            it.attempts.len(),
            cell(&detail)
        ));
    }
    let held: Vec<_> = r
        .items
        .iter()
        .filter(|i| i.outcome == ItemOutcome::Held)
        .collect();
    if !held.is_empty() {
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
    let failing: Vec<_> = r
        .items
        .iter()
        .filter(|i| matches!(i.outcome, ItemOutcome::Halted | ItemOutcome::Failed))
        .collect();
    if !failing.is_empty() {
        out.push_str("\n## Failures\n");
        for it in failing {
            out.push_str(&format!("\n### {}/{}\n\n", it.repo, it.id));
            for a in &it.attempts {
                let w = a.worker.as_ref().map_or("not run".to_string(), |w| {
                    format!(
                        "worker {} (exit {:?}, {} ms)",
                        w.class.as_str(),
                        w.exit,
                        w.duration_ms
                    )
                });
                out.push_str(&format!(
                    "- attempt {} on `{}`: {w}\n",
                    a.n,
                    a.model.as_deref().unwrap_or("-")
                ));
                for g in &a.gates {
                    out.push_str(&format!("  - gate `{}`: {}\n", g.name, g.result.as_str()));
                    if !g.output_tail.is_empty() && g.result != crate::vocab::GateResult::Passed {
                        out.push_str("\n```text\n");
                        out.push_str(&g.output_tail);
                        out.push_str("\n```\n\n");
                    }
                }
            }
        }
    }
    out
}
