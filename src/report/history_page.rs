//! The reports folder's `index.html`: every recent run of the manifest (ending, counts, duration,
//! cost), a trend chart of durations and outcomes, and each item's recent outcomes with flaky
//! items flagged. Self-contained like the run page, and readable without script.

use super::html::{Page, esc, human_ms, page_end, page_start, to_string};
use crate::vocab::ItemOutcome;
use std::collections::BTreeMap;
use std::fmt::Write;

/// A run as the history page shows it.
#[derive(Clone, Debug)]
pub struct HistoryRun {
    pub id: String,
    pub started_at: String,
    /// The ending (`drained`, `stalled`, …), or `running` / `died` for a run without one.
    pub status: String,
    pub cause: Option<String>,
    pub counts: Option<BTreeMap<ItemOutcome, usize>>,
    pub duration_ms: Option<u64>,
    pub cost_usd: Option<f64>,
    /// Its page, relative to the reports folder, when the run's folder has one.
    pub link: Option<String>,
}

/// An item's outcomes over recent runs, oldest first.
#[derive(Clone, Debug)]
pub struct ItemHistory {
    pub repo: String,
    pub id: String,
    pub outcomes: Vec<(std::sync::Arc<str>, ItemOutcome)>,
    /// Its pull request as the latest run found it.
    pub pull_request: Option<Box<crate::plan::pull::PullRequest>>,
}

/// Whether verdicts on the item flipped back: completed, then halted or failed, then completed
/// again (or the other way round) — the work or its gates do not decide the same way twice.
pub fn flaky(outcomes: &[ItemOutcome]) -> bool {
    let verdicts: Vec<bool> = outcomes
        .iter()
        .filter_map(|o| match o {
            ItemOutcome::Completed => Some(true),
            ItemOutcome::Halted | ItemOutcome::Failed => Some(false),
            _ => None,
        })
        .collect();
    verdicts.windows(2).filter(|w| w[0] != w[1]).count() >= 2
}

fn total(counts: &BTreeMap<ItemOutcome, usize>) -> usize {
    counts.values().sum()
}

/// Durations and outcomes over runs, oldest on the left: a stacked bar of outcomes per run and
/// a line of durations above them.
fn trend(runs: &[&HistoryRun], out: &mut Page<'_>) {
    const W: f64 = 1000.0;
    const H: f64 = 166.0;
    const LEFT: f64 = 48.0;
    let n = runs.len().max(1) as f64;
    let col = (W - LEFT - 8.0) / n;
    let most = runs
        .iter()
        .filter_map(|r| r.counts.as_ref().map(total))
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let longest = runs
        .iter()
        .filter_map(|r| r.duration_ms)
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let _ = writeln!(
        out,
        "<svg class=\"trend\" role=\"img\" aria-label=\"durations and outcomes of the last {} runs\" viewBox=\"0 0 {W} {H}\" width=\"100%\">",
        runs.len()
    );
    // Outcomes in the lower part, durations in the upper part; each scale labelled at its top
    // and its foot, and the runs' order under the axis.
    let (bars_top, bars_bottom, line_top, line_bottom) = (70.0, H - 30.0, 12.0, 62.0);
    let _ = writeln!(
        out,
        "<text x=\"4\" y=\"{}\">items</text><text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text><text x=\"{}\" y=\"{}\" text-anchor=\"end\">0</text>",
        bars_top + 22.0,
        LEFT - 4.0,
        bars_top + 8.0,
        most as u64,
        LEFT - 4.0,
        bars_bottom
    );
    let _ = writeln!(
        out,
        "<text x=\"4\" y=\"{}\">time</text><text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text><text x=\"{}\" y=\"{}\" text-anchor=\"end\">0</text>",
        line_top + 26.0,
        LEFT - 4.0,
        line_top + 8.0,
        human_ms(longest as u64),
        LEFT - 4.0,
        line_bottom
    );
    let _ = writeln!(
        out,
        "<line class=\"axis\" x1=\"{LEFT}\" y1=\"{bars_bottom}\" x2=\"{}\" y2=\"{bars_bottom}\"/><text x=\"{LEFT}\" y=\"{}\">oldest run</text><text x=\"{}\" y=\"{}\" text-anchor=\"end\">newest run</text>",
        W - 8.0,
        bars_bottom + 14.0,
        W - 8.0,
        bars_bottom + 14.0
    );
    let mut points = Vec::new();
    for (i, r) in runs.iter().enumerate() {
        let x = LEFT + col * i as f64;
        let mut title = format!("{} — {} — started {}", r.id, r.status, r.started_at);
        if let Some(d) = r.duration_ms {
            let _ = write!(title, "\ntook {}", human_ms(d));
            let y = line_bottom - (line_bottom - line_top) * d as f64 / longest;
            points.push(format!("{:.1},{y:.1}", x + col / 2.0));
        }
        let _ = write!(out, "<g><title>");
        if let Some(c) = &r.counts {
            for (o, k) in c.iter().filter(|(_, k)| **k > 0) {
                let _ = write!(title, "\n{k} {}", o.as_str());
            }
            let _ = write!(out, "{}</title>", esc(&title));
            let mut y = bars_bottom;
            for (o, k) in c.iter().filter(|(_, k)| **k > 0) {
                let h = (bars_bottom - bars_top) * *k as f64 / most;
                y -= h;
                let _ = write!(
                    out,
                    "<rect class=\"f-{}\" x=\"{:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{h:.1}\"/>",
                    o.as_str(),
                    x + col * 0.15,
                    (col * 0.7).max(1.0)
                );
            }
        } else {
            let _ = write!(out, "{}</title>", esc(&title));
        }
        out.push_str("</g>\n");
    }
    if !points.is_empty() {
        let _ = writeln!(
            out,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"currentColor\" stroke-width=\"1.5\" style=\"stroke: var(--fg)\"/>",
            points.join(" ")
        );
        for p in &points {
            let (px, py) = p.split_once(',').unwrap_or(("0", "0"));
            let _ = write!(
                out,
                "<circle cx=\"{px}\" cy=\"{py}\" r=\"2.5\" style=\"fill: var(--fg)\"/>"
            );
        }
    }
    out.push_str("</svg>\n");
}

/// What each run cost, as its workers reported it: one bar a run, oldest first (a run that
/// reported no cost has none).
fn costs(runs: &[&HistoryRun], out: &mut Page<'_>) {
    const W: f64 = 1000.0;
    const H: f64 = 90.0;
    const LEFT: f64 = 48.0;
    let (top, bottom) = (10.0, H - 20.0);
    let col = (W - LEFT - 8.0) / runs.len().max(1) as f64;
    let most = runs
        .iter()
        .filter_map(|r| r.cost_usd)
        .fold(0.0_f64, f64::max);
    let scale = if most > 0.0 { most } else { 1.0 };
    let _ = writeln!(
        out,
        "<svg class=\"costs\" role=\"img\" aria-label=\"cost of each of the last {} runs\" viewBox=\"0 0 {W} {H}\" width=\"100%\">",
        runs.len()
    );
    let _ = writeln!(
        out,
        "<text x=\"4\" y=\"{}\">cost</text><text x=\"{}\" y=\"{}\" text-anchor=\"end\">${most:.2}</text><text x=\"{}\" y=\"{bottom}\" text-anchor=\"end\">$0</text><line class=\"axis\" x1=\"{LEFT}\" y1=\"{bottom}\" x2=\"{}\" y2=\"{bottom}\"/>",
        top + 26.0,
        LEFT - 4.0,
        top + 8.0,
        LEFT - 4.0,
        W - 8.0
    );
    for (i, r) in runs.iter().enumerate() {
        let Some(c) = r.cost_usd else { continue };
        let h = (bottom - top) * c / scale;
        let _ = writeln!(
            out,
            "<g><title>{} — ${c:.2}</title><rect class=\"cost\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{h:.1}\" style=\"fill: var(--fg)\"/></g>",
            esc(&r.id),
            LEFT + col * i as f64 + col * 0.15,
            bottom - h,
            (col * 0.7).max(1.0)
        );
    }
    out.push_str("</svg>\n");
}

fn dots(outcomes: &[(std::sync::Arc<str>, ItemOutcome)], out: &mut Page<'_>) {
    out.push_str("<span class=\"dots\">");
    for (run, o) in outcomes {
        let _ = write!(
            out,
            "<span class=\"o-{o}\" title=\"{}: {o}\"></span>",
            esc(run),
            o = o.as_str()
        );
    }
    out.push_str("</span>");
}

pub fn render(manifest: &str, runs: &[HistoryRun], items: &[ItemHistory]) -> String {
    to_string(|b| write_page(manifest, runs, items, b))
}

/// The history page, written into `w` as it is built (a manifest of thousands of items is
/// never held as text).
pub(crate) fn render_to(
    manifest: &str,
    runs: &[HistoryRun],
    items: &[ItemHistory],
    w: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    let mut page = Page::new(w);
    write_page(manifest, runs, items, &mut page);
    page.finish()
}

fn write_page(manifest: &str, runs: &[HistoryRun], items: &[ItemHistory], b: &mut Page<'_>) {
    page_start(b, &format!("runner: {manifest} — run history"));
    let _ = writeln!(
        b,
        "<header><h1>runner: {} — run history</h1><p class=\"muted\">The latest {} run{}, newest first.</p></header>",
        esc(manifest),
        runs.len(),
        if runs.len() == 1 { "" } else { "s" }
    );
    if runs.len() > 1 {
        b.push_str("<section><h2>Trend</h2>\n");
        let oldest_first: Vec<&HistoryRun> = runs.iter().rev().collect();
        trend(&oldest_first, b);
        if oldest_first.iter().any(|r| r.cost_usd.is_some()) {
            costs(&oldest_first, b);
        }
        b.push_str("</section>\n");
    }
    b.push_str("<section><h2>Runs</h2>\n<table class=\"runs\"><tr><th>run</th><th>started</th><th>ending</th><th>items</th><th>took</th><th>cost</th></tr>\n");
    for r in runs {
        let id = match &r.link {
            Some(l) => format!("<a href=\"{}\"><code>{}</code></a>", esc(l), esc(&r.id)),
            None => format!("<code>{}</code>", esc(&r.id)),
        };
        let ending = match &r.cause {
            Some(c) => format!(
                "{} <span class=\"muted\">({})</span>",
                esc(&r.status),
                super::html::esc_text(c)
            ),
            None => esc(&r.status),
        };
        let counts = r.counts.as_ref().map_or("—".to_string(), |c| {
            let parts: Vec<String> = c
                .iter()
                .filter(|(_, k)| **k > 0)
                .map(|(o, k)| format!("<span class=\"badge o-{o}\">{k} {o}</span>", o = o.as_str()))
                .collect();
            if parts.is_empty() {
                "no items".into()
            } else {
                parts.join(" ")
            }
        });
        let _ = writeln!(
            b,
            "<tr><td>{id}</td><td>{}</td><td>{ending}</td><td>{counts}</td><td>{}</td><td>{}</td></tr>",
            esc(&r.started_at),
            r.duration_ms.map(human_ms).unwrap_or_else(|| "—".into()),
            r.cost_usd
                .map(|c| format!("${c:.2}"))
                .unwrap_or_else(|| "—".into())
        );
    }
    b.push_str("</table></section>\n");
    if !items.is_empty() {
        let mut rows: Vec<(&ItemHistory, bool)> = items
            .iter()
            .map(|i| {
                let o: Vec<ItemOutcome> = i.outcomes.iter().map(|(_, o)| *o).collect();
                (i, flaky(&o))
            })
            .collect();
        // Flaky items first, then the ones whose latest verdict is not a completion.
        let last_ok = |i: &ItemHistory| {
            i.outcomes
                .last()
                .is_some_and(|(_, o)| *o == ItemOutcome::Completed)
        };
        rows.sort_by(|(a, fa), (b, fb)| {
            (!fa, last_ok(a), &a.repo, &a.id).cmp(&(!fb, last_ok(b), &b.repo, &b.id))
        });
        let flaky_n = rows.iter().filter(|(_, f)| *f).count();
        let _ = writeln!(
            b,
            "<section><h2>Items</h2><p class=\"muted\">Recent outcomes, oldest on the left. {flaky_n} flaky (completed, then halted or failed, then completed — or the other way round).</p>"
        );
        // A column for pull requests only where the manifest opens them.
        let with_prs = rows.iter().any(|(i, _)| i.pull_request.is_some());
        let _ = writeln!(
            b,
            "<table class=\"runs\"><tr><th>repository</th><th>item</th><th>recent outcomes</th><th>latest</th>{}<th></th></tr>",
            if with_prs {
                "<th>pull request</th>"
            } else {
                ""
            }
        );
        for (i, f) in rows {
            let _ = write!(
                b,
                "<tr data-flaky=\"{f}\"><td>{}</td><td><code>{}</code></td><td>",
                esc(&i.repo),
                esc(&i.id)
            );
            dots(&i.outcomes, b);
            let latest = i.outcomes.last().map_or("", |(_, o)| o.as_str());
            let pr = match &i.pull_request {
                _ if !with_prs => String::new(),
                Some(p) => format!(
                    "<td class=\"pr\"><a href=\"{}\">{}</a></td>",
                    esc(&p.url),
                    super::html::esc_text(&p.describe())
                ),
                None => "<td class=\"pr\"></td>".into(),
            };
            let _ = writeln!(
                b,
                "</td><td>{latest}</td>{pr}<td>{}</td></tr>",
                if f {
                    "<span class=\"flaky\">flaky</span>"
                } else {
                    ""
                }
            );
        }
        b.push_str("</table></section>\n");
    }
    page_end(b, "");
}

#[cfg(test)]
mod tests {
    use super::*;
    use ItemOutcome::*;

    #[test]
    fn flaky_means_a_verdict_that_flipped_back() {
        assert!(flaky(&[Completed, Halted, Completed]));
        assert!(flaky(&[Failed, Completed, Skipped, Halted]));
        assert!(!flaky(&[Halted, Halted, Completed]));
        assert!(!flaky(&[Completed, Held, Cancelled, Completed]));
        assert!(!flaky(&[]));
    }
}
