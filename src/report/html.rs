//! `index.html`: the run as one self-contained page — a timeline with a lane per worker slot and
//! a bar per attempt, and a table of items that expand to their attempts, gates and output tails.
//!
//! No network request, no external font or script: the styles and a few lines of script are
//! inline. Everything that matters reads without script (the timeline is SVG with native
//! tooltips, the rows are `<details>`); the script adds the outcome and repository filters and
//! opens a row when its bar is clicked.

use super::model::{AttemptReport, ItemReport, Report, timestamp};
use crate::vocab::{GateResult, ItemOutcome, WorkerClass};
use std::fmt::Write;

/// `s` for HTML text and attribute values.
pub(super) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `s` for HTML text, its `code` spans (between backticks, as runner writes commands, paths and
/// names in its messages) shown as code rather than as backticks; an unpaired backtick stays as
/// it is.
pub(super) fn esc_text(s: &str) -> String {
    let parts: Vec<&str> = s.split('`').collect();
    let pairs = (parts.len() - 1) / 2;
    let mut out = String::with_capacity(s.len() + 16);
    for (i, part) in parts.iter().enumerate() {
        if i % 2 == 1 && i <= pairs * 2 {
            out.push_str("<code>");
            out.push_str(&esc(part));
            out.push_str("</code>");
        } else {
            if i > pairs * 2 && i > 0 {
                out.push('`');
            }
            out.push_str(&esc(part));
        }
    }
    out
}

/// `850 ms`, `12.3 s`, `4 min 05 s`, `2 h 03 min`.
pub(super) fn human_ms(ms: u64) -> String {
    let s = ms / 1000;
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{} min {:02} s", s / 60, s % 60),
        _ => format!("{} h {:02} min", s / 3600, (s % 3600) / 60),
    }
}

/// The styles both pages share: light and dark, readable from a laptop screen up.
pub(super) const STYLE: &str = r#"
:root { color-scheme: light dark; --bg: #ffffff; --fg: #1f2328; --muted: #59636e; --line: #d1d9e0;
  --panel: #f6f8fa; --completed: #1a7f37; --halted: #cf222e; --failed: #8250df; --skipped: #8c959f;
  --held: #bf8700; --cancelled: #57606a; --retried: #d4a72c; --gate-ok: #4ac26b; --gate-bad: #ff8182;
  --gate-other: #d0d7de; --backoff: #bf8700; }
@media (prefers-color-scheme: dark) {
  :root { --bg: #0d1117; --fg: #e6edf3; --muted: #9198a1; --line: #3d444d; --panel: #151b23;
    --completed: #3fb950; --halted: #f85149; --failed: #ab7df8; --skipped: #6e7681; --held: #d29922;
    --cancelled: #8b949e; --retried: #bb8009; --gate-ok: #238636; --gate-bad: #da3633;
    --gate-other: #484f58; --backoff: #d29922; }
}
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1400px; padding: 1.25rem; background: var(--bg); color: var(--fg);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
h1 { font-size: 1.35rem; margin: 0 0 .25rem; } h2 { font-size: 1.1rem; margin: 1.5rem 0 .5rem; }
code, pre, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px; }
pre { background: var(--panel); border: 1px solid var(--line); border-radius: 6px; padding: .5rem .75rem;
  overflow: auto; max-height: 24rem; white-space: pre-wrap; word-break: break-all; }
a { color: inherit; }
.muted { color: var(--muted); }
.facts { display: flex; flex-wrap: wrap; gap: .25rem 1.5rem; margin: .5rem 0; padding: 0; }
.facts div { display: flex; gap: .4rem; } .facts dt { color: var(--muted); } .facts dd { margin: 0; }
.badge { display: inline-block; padding: 0 .45rem; border-radius: 999px; color: #fff; font-size: 12px;
  font-weight: 600; line-height: 1.4rem; white-space: nowrap; }
.o-completed { background: var(--completed); } .o-halted { background: var(--halted); }
.o-failed { background: var(--failed); } .o-skipped { background: var(--skipped); }
.o-held { background: var(--held); } .o-cancelled { background: var(--cancelled); }
.o-retried { background: var(--retried); } .o-running { background: var(--muted); }
.counts { display: flex; flex-wrap: wrap; gap: .4rem; margin: .5rem 0; }
.warnings { border-left: 3px solid var(--held); padding: .25rem .75rem; background: var(--panel); }
svg text { fill: var(--fg); font-size: 11px; font-family: system-ui, sans-serif; }
svg .axis { stroke: var(--line); } svg .lane { fill: var(--panel); }
svg .gate-passed { fill: var(--gate-ok); } svg .gate-failed, svg .gate-timed-out { fill: var(--gate-bad); }
svg .gate-skipped, svg .gate-not-run { fill: var(--gate-other); }
svg .bar-label { fill: #fff; stroke: rgba(0,0,0,.55); stroke-width: 2px; paint-order: stroke; font-size: 9px; pointer-events: none; }
svg .bar { stroke: var(--bg); stroke-width: 1; } svg a:hover .bar { stroke: var(--fg); stroke-width: 2; }
svg .f-completed { fill: var(--completed); } svg .f-halted { fill: var(--halted); }
svg .f-failed { fill: var(--failed); } svg .f-cancelled { fill: var(--cancelled); }
svg .f-retried { fill: var(--retried); } svg .f-skipped { fill: var(--skipped); } svg .f-held { fill: var(--held); }
svg .f-running { fill: var(--muted); }
svg .hatch { stroke: var(--backoff); stroke-width: 2; }
.legend { display: flex; flex-wrap: wrap; gap: .25rem 1rem; font-size: 12px; color: var(--muted); margin: .25rem 0 1rem; }
.legend i { display: inline-block; width: .9rem; height: .7rem; border-radius: 2px; margin-right: .3rem; vertical-align: -1px; }
.filters { display: flex; flex-wrap: wrap; gap: .75rem; align-items: center; margin: .5rem 0; }
select { background: var(--bg); color: var(--fg); border: 1px solid var(--line); border-radius: 6px; padding: .2rem .4rem; }
.items { border: 1px solid var(--line); border-radius: 6px; }
.row { display: grid; grid-template-columns: minmax(7rem,1fr) minmax(8rem,1.6fr) 7.5rem minmax(6rem,1fr) 5rem 6rem minmax(10rem,3fr);
  gap: .75rem; align-items: center; padding: .35rem .75rem; }
.head { font-weight: 600; color: var(--muted); border-bottom: 1px solid var(--line); }
details.item { border-bottom: 1px solid var(--line); } details.item:last-child { border-bottom: 0; }
details.item > summary { list-style: none; cursor: pointer; } details.item > summary::-webkit-details-marker { display: none; }
details.item > summary:hover, details.item:target > summary { background: var(--panel); }
details.item[open] > summary { background: var(--panel); font-weight: 600; }
.cell { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.detail { padding: .5rem 1rem 1rem 2rem; }
.attempt { margin: .5rem 0 1rem; } .attempt h4 { margin: .25rem 0; font-size: 13px; }
table.steps { border-collapse: collapse; margin: .25rem 0; } table.steps td, table.steps th { text-align: left;
  padding: .15rem .75rem .15rem 0; border-bottom: 1px solid var(--line); font-weight: normal; }
table.runs { border-collapse: collapse; width: 100%; } table.runs th, table.runs td { text-align: left;
  padding: .3rem .6rem; border-bottom: 1px solid var(--line); } table.runs th { color: var(--muted); }
.dots { display: inline-flex; gap: 2px; } .dots span { width: .75rem; height: .75rem; border-radius: 2px; display: inline-block; }
.flaky { color: var(--held); font-weight: 600; }
@media (max-width: 900px) { .row { grid-template-columns: 1fr 1.5fr 7rem; } .row .wide { display: none; } }
"#;

/// Where a page is written as it is built: a report's file (a run of thousands of items is never
/// held whole in memory) or a string. The first write error is kept and ends the writing.
pub(super) struct Page<'w> {
    w: &'w mut dyn std::io::Write,
    err: Option<std::io::Error>,
}

impl<'w> Page<'w> {
    pub(super) fn new(w: &'w mut dyn std::io::Write) -> Self {
        Page { w, err: None }
    }

    pub(super) fn push_str(&mut self, s: &str) {
        if self.err.is_none()
            && let Err(e) = self.w.write_all(s.as_bytes())
        {
            self.err = Some(e);
        }
    }

    pub(super) fn finish(self) -> std::io::Result<()> {
        match self.err {
            Some(e) => Err(e),
            None => self.w.flush(),
        }
    }
}

impl std::fmt::Write for Page<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.push_str(s);
        Ok(())
    }
}

/// The start of a page: everything up to its body.
pub(super) fn page_start(out: &mut Page<'_>, title: &str) {
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    out.push_str("<meta name=\"color-scheme\" content=\"light dark\">\n");
    // The page may load nothing from anywhere: inline styles and scripts only.
    out.push_str("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n");
    let _ = writeln!(out, "<title>{}</title>", esc(title));
    let _ = writeln!(out, "<style>{STYLE}</style>\n</head>\n<body>");
}

/// The end of a page begun with [`page_start`].
pub(super) fn page_end(out: &mut Page<'_>, script: &str) {
    if !script.is_empty() {
        let _ = writeln!(out, "<script>{script}</script>");
    }
    out.push_str("</body>\n</html>\n");
}

/// A page written into a string.
pub(super) fn to_string(write: impl FnOnce(&mut Page<'_>)) -> String {
    let mut bytes = Vec::new();
    let mut page = Page::new(&mut bytes);
    write(&mut page);
    // Writing into memory does not fail, and everything written is text.
    let _ = page.finish();
    String::from_utf8(bytes).unwrap_or_default()
}

/// One attempt's place on the timeline, in milliseconds from the run's start.
#[derive(Clone, Debug, PartialEq)]
pub struct Bar {
    pub item: usize,
    pub n: u32,
    pub lane: usize,
    pub start: i64,
    pub end: i64,
    /// `completed`, `halted`, … for an item's last attempt; `retried` for the ones before it.
    pub class: &'static str,
    /// Gate segments: name, result, start, end.
    pub gates: Vec<(String, GateResult, i64, i64)>,
    /// The provider back-off the attempt waited out before it started: from, to (a wait for a
    /// free slot may follow it).
    pub backoff_from: Option<i64>,
    pub backoff_to: i64,
}

/// The run laid out on lanes: no two bars of a lane overlap, and there are at least as many lanes
/// as the run's capacity.
#[derive(Clone, Debug, PartialEq)]
pub struct Timeline {
    pub lanes: usize,
    pub span: i64,
    pub bars: Vec<Bar>,
}

fn class_of(it: &ItemReport, last: bool) -> &'static str {
    if !last {
        return "retried";
    }
    match it.outcome {
        ItemOutcome::Completed => "completed",
        ItemOutcome::Halted => "halted",
        ItemOutcome::Failed => "failed",
        ItemOutcome::Skipped => "skipped",
        ItemOutcome::Held => "held",
        // An attempt that started and has no verdict yet was still running (or cut off).
        ItemOutcome::Cancelled if it.ended_at.is_none() => "running",
        ItemOutcome::Cancelled => "cancelled",
    }
}

fn attempt_work_ms(a: &AttemptReport) -> i64 {
    let w = a.worker.as_ref().map_or(0, |w| w.duration_ms);
    (w + a.gates.iter().map(|g| g.duration_ms).sum::<u64>()) as i64
}

/// Lay the run's attempts out: each attempt from its start to the next attempt's back-off (or
/// the item's end), the worker first and the gates after it in order, packed on the lowest free
/// lane.
pub fn timeline(r: &Report) -> Timeline {
    let origin = timestamp(&r.started_at);
    let at = |s: &str| -> Option<i64> {
        let t = timestamp(s)?;
        Some(t.duration_since(origin?).as_millis() as i64)
    };
    let mut bars = Vec::new();
    for (i, it) in r.items.iter().enumerate() {
        let it = &*it;
        let ended = it.ended_at.as_deref().and_then(at);
        for (k, a) in it.attempts.iter().enumerate() {
            let Some(start) = at(&a.started_at) else {
                continue;
            };
            let work = attempt_work_ms(a);
            let next = it.attempts.get(k + 1);
            let until = match next {
                Some(b) => at(&b.started_at)
                    .map(|s| s - (b.waited_ms.unwrap_or(0) + b.slot_wait_ms.unwrap_or(0)) as i64),
                None => ended,
            };
            let end = until
                .filter(|e| *e > start)
                .unwrap_or(start + work)
                .max(start + 1);
            let mut gates = Vec::new();
            let mut t = start + a.worker.as_ref().map_or(0, |w| w.duration_ms as i64);
            for g in &a.gates {
                let g_end = (t + g.duration_ms as i64).min(end);
                gates.push((g.name.clone(), g.result, t.min(end), g_end));
                t = g_end;
            }
            bars.push(Bar {
                item: i,
                n: a.n,
                lane: 0,
                start,
                end,
                class: class_of(it, next.is_none()),
                gates,
                backoff_from: a
                    .waited_ms
                    .filter(|w| *w > 0)
                    .map(|w| start - (w + a.slot_wait_ms.unwrap_or(0)) as i64),
                backoff_to: start - a.slot_wait_ms.unwrap_or(0) as i64,
            });
        }
    }
    bars.sort_by_key(|b| (b.start, b.item, b.n));
    // As many lanes as the run had slots: an attempt that seems to start before a lane is free
    // (its slot's last item was still being recorded, clocks read a moment apart) takes the
    // lane that frees first, never a lane the run did not have.
    let slots = (r.capacity.workers as usize).max(1);
    let mut free_at: Vec<i64> = Vec::new();
    for b in &mut bars {
        let lane = match free_at.iter().position(|f| *f <= b.start) {
            Some(l) => l,
            None if free_at.len() < slots => {
                free_at.push(i64::MIN);
                free_at.len() - 1
            }
            None => (0..free_at.len()).min_by_key(|l| free_at[*l]).unwrap_or(0),
        };
        b.lane = lane;
        free_at[lane] = free_at[lane].max(b.end);
    }
    let run_end = r.ended_at.as_deref().and_then(at).unwrap_or(0);
    let span = bars.iter().map(|b| b.end).fold(run_end, i64::max).max(1);
    Timeline {
        lanes: free_at.len().max(r.capacity.workers as usize).max(1),
        span,
        bars,
    }
}

/// Tick spacing on the time axis: a round step giving four to ten ticks.
fn tick_step(span: i64) -> i64 {
    const STEPS: [i64; 16] = [
        10, 50, 100, 250, 500, 1_000, 2_000, 5_000, 10_000, 15_000, 30_000, 60_000, 120_000,
        300_000, 600_000, 1_800_000,
    ];
    STEPS
        .iter()
        .copied()
        .find(|s| span / s <= 10)
        .unwrap_or_else(|| (span / 10 / 3_600_000 + 1) * 3_600_000)
}

fn axis_label(ms: i64) -> String {
    match ms {
        0 => "0".into(),
        m if m < 1_000 => format!("{m} ms"),
        m if m < 60_000 => format!("{} s", m as f64 / 1000.0),
        m if m < 3_600_000 => format!("{}:{:02}", m / 60_000, (m % 60_000) / 1000),
        m => format!("{} h {:02}", m / 3_600_000, (m % 3_600_000) / 60_000),
    }
}

fn item_anchor(i: usize) -> String {
    format!("item-{i}")
}

/// The timeline as inline SVG.
fn timeline_svg(r: &Report, t: &Timeline, out: &mut Page<'_>) {
    const W: f64 = 1000.0;
    const LEFT: f64 = 64.0;
    const TOP: f64 = 22.0;
    const LANE: f64 = 30.0;
    let width = W - LEFT - 8.0;
    let x = |ms: i64| LEFT + width * (ms.max(0) as f64) / (t.span as f64);
    let height = TOP + LANE * t.lanes as f64 + 6.0;
    let _ = writeln!(
        out,
        "<svg class=\"timeline\" role=\"img\" aria-label=\"timeline: {lanes} slot{ls}, {bars} attempt{bs}\" viewBox=\"0 0 {W} {height}\" width=\"100%\" data-lanes=\"{lanes}\">",
        lanes = t.lanes,
        bars = t.bars.len(),
        ls = if t.lanes == 1 { "" } else { "s" },
        bs = if t.bars.len() == 1 { "" } else { "s" }
    );
    out.push_str("<defs><pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\"><line class=\"hatch\" x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\"/></pattern></defs>\n");
    for lane in 0..t.lanes {
        let y = TOP + LANE * lane as f64;
        let _ = writeln!(
            out,
            "<g class=\"lane-row\" data-lane=\"{n}\"><rect class=\"lane\" x=\"{LEFT}\" y=\"{y}\" width=\"{width}\" height=\"{h}\" rx=\"3\"/><text x=\"4\" y=\"{ty}\">slot {n}</text></g>",
            n = lane + 1,
            h = LANE - 4.0,
            ty = y + 17.0
        );
    }
    let step = tick_step(t.span);
    let mut tick = 0;
    while tick <= t.span {
        let tx = x(tick);
        // A label near the right edge ends at its tick, so that it is not cut off.
        let anchor = if tx > W - 40.0 { "end" } else { "middle" };
        let _ = writeln!(
            out,
            "<line class=\"axis\" x1=\"{tx:.1}\" y1=\"14\" x2=\"{tx:.1}\" y2=\"{y2}\"/><text x=\"{tx:.1}\" y=\"11\" text-anchor=\"{anchor}\">{label}</text>",
            y2 = height - 4.0,
            label = axis_label(tick)
        );
        tick += step;
    }
    for b in &t.bars {
        let Some(it) = r.items.get(b.item) else {
            continue;
        };
        let y = TOP + LANE * b.lane as f64;
        if let Some(from) = b.backoff_from {
            let _ = writeln!(
                out,
                "<rect class=\"backoff\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{}\" fill=\"url(#hatch)\"><title>{} attempt {}: provider back-off, {}</title></rect>",
                x(from),
                y + LANE - 10.0,
                (x(b.backoff_to) - x(from)).max(1.0),
                5,
                esc(&format!("{}/{}", it.repo, it.id)),
                b.n,
                human_ms((b.backoff_to - from).max(0) as u64)
            );
        }
        let attempt = it.attempts.iter().find(|a| a.n == b.n);
        let mut title = format!(
            "{}/{} — attempt {} — {}",
            it.repo,
            it.id,
            b.n,
            if b.class == "retried" {
                "retried"
            } else {
                it.outcome.as_str()
            }
        );
        if let Some(m) = attempt.and_then(|a| a.model.as_deref()) {
            let _ = write!(title, "\nmodel: {m}");
        }
        if let Some(w) = attempt.and_then(|a| a.worker.as_ref()) {
            let _ = write!(
                title,
                "\nworker: {} in {}",
                w.class.as_str(),
                human_ms(w.duration_ms)
            );
            if let Some(e) = &w.ended {
                let _ = write!(title, " (ended: {e})");
            }
        }
        for (name, result, s, e) in &b.gates {
            let _ = write!(
                title,
                "\ngate {name}: {} in {}",
                result.as_str(),
                human_ms((e - s).max(0) as u64)
            );
        }
        let _ = write!(title, "\n{} in all", human_ms((b.end - b.start) as u64));
        let (bx, bw) = (x(b.start), (x(b.end) - x(b.start)).max(2.0));
        let _ = writeln!(
            out,
            "<a href=\"#{anchor}\" data-item=\"{anchor}\"><g class=\"attempt\" data-lane=\"{lane}\"><title>{title}</title><rect class=\"bar f-{class}\" x=\"{bx:.1}\" y=\"{y:.1}\" width=\"{bw:.1}\" height=\"18\" rx=\"2\"/>",
            anchor = item_anchor(b.item),
            lane = b.lane + 1,
            title = esc(&title),
            class = b.class
        );
        // A gate is drawn however short it was (a cached verdict, a gate done within the
        // millisecond): one pixel at least, as the attempt's bar has two.
        for (_, result, s, e) in &b.gates {
            let _ = writeln!(
                out,
                "<rect class=\"gate gate-{}\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"8\"/>",
                result.as_str(),
                x(*s),
                y + 5.0,
                (x(*e) - x(*s)).max(1.0)
            );
        }
        // The item's id on its bar, where the bar is wide enough to hold some of it.
        let room = ((bw - 8.0) / 6.5).floor() as usize;
        if room >= 4 {
            let name = &it.id;
            let shown: String = if name.chars().count() > room {
                name.chars().take(room - 1).chain(['…']).collect()
            } else {
                name.clone()
            };
            let _ = writeln!(
                out,
                "<text class=\"bar-label\" x=\"{:.1}\" y=\"{:.1}\">{}</text>",
                bx + 4.0,
                y + 16.5,
                esc(&shown)
            );
        }
        out.push_str("</g></a>\n");
    }
    out.push_str("</svg>\n");
}

fn legend(out: &mut Page<'_>) {
    out.push_str("<div class=\"legend\">");
    for (class, label) in [
        ("o-completed", "completed"),
        ("o-halted", "halted"),
        ("o-failed", "failed"),
        ("o-cancelled", "cancelled"),
        ("o-retried", "attempt retried"),
    ] {
        let _ = write!(out, "<span><i class=\"{class}\"></i>{label}</span>");
    }
    out.push_str("<span><i style=\"background:var(--gate-ok)\"></i>gate passed</span>");
    out.push_str("<span><i style=\"background:var(--gate-bad)\"></i>gate failed</span>");
    out.push_str("<span><i style=\"background:repeating-linear-gradient(45deg,var(--backoff) 0 2px,transparent 2px 5px)\"></i>provider back-off</span>");
    out.push_str("</div>\n");
}

fn detail_of(it: &ItemReport) -> String {
    let mut parts: Vec<String> = Vec::new();
    match (&it.reason, &it.cause) {
        (Some(r), Some(c)) => parts.push(format!("{r}: {c}")),
        (Some(r), None) => parts.push(r.clone()),
        (None, Some(c)) => parts.push(c.clone()),
        (None, None) => {}
    }
    if !it.marks.is_empty() {
        parts.push(it.marks.join(", "));
    }
    if let Some(c) = &it.commit {
        let stat = it.diffstat.as_ref().map_or(String::new(), |d| {
            let files = if d.files == 1 { "file" } else { "files" };
            format!(" ({} {files}, +{} −{})", d.files, d.insertions, d.deletions)
        });
        parts.push(format!("commit {}{stat}", &c[..c.len().min(10)]));
    }
    if let Some(p) = &it.publish {
        parts.push(match (&p.error, &p.url) {
            (Some(e), _) => format!("not published: {e}"),
            (None, Some(u)) => format!("pull request {u}"),
            (None, None) if p.pushed => format!("pushed {} to {}", p.branch, p.remote),
            (None, None) => format!(
                "{} on {} already where it was: nothing pushed",
                p.branch, p.remote
            ),
        });
    } else if let Some(pr) = &it.pull_request {
        parts.push(format!("pull request {}: {}", pr.describe(), pr.url));
    }
    parts.join("; ")
}

fn duration_of(it: &ItemReport) -> Option<u64> {
    let a = timestamp(it.started_at.as_deref()?)?;
    let b = timestamp(it.ended_at.as_deref()?)?;
    let d = b.duration_since(a);
    (!d.is_negative()).then(|| d.as_millis() as u64)
}

fn log_link(out: &mut Page<'_>, log: Option<&str>, error: Option<&str>) {
    if let Some(l) = log {
        let _ = write!(out, " · <a href=\"{}\">log</a>", esc(l));
    }
    if let Some(e) = error {
        let _ = write!(out, " · <strong>log incomplete</strong>: {}", esc(e));
    }
}

fn attempts_html(it: &ItemReport, out: &mut Page<'_>) {
    if it.attempts.is_empty() {
        out.push_str("<p class=\"muted\">No attempt ran.</p>\n");
    }
    for a in &it.attempts {
        let _ = write!(out, "<div class=\"attempt\"><h4>Attempt {}", a.n);
        if let Some(m) = &a.model {
            let _ = write!(out, " · model <code>{}</code>", esc(m));
        }
        if let Some(u) = &a.model_used {
            let _ = write!(out, " (used <code>{}</code>)", esc(u));
        }
        if let Some(w) = a.waited_ms.filter(|w| *w > 0) {
            let _ = write!(out, " · after {} of provider back-off", human_ms(w));
        }
        if let Some(w) = a.slot_wait_ms {
            let _ = write!(out, " and {} waiting for a free slot", human_ms(w));
        }
        let _ = writeln!(
            out,
            " · <span class=\"muted\">{}</span></h4>",
            esc(&a.started_at)
        );
        out.push_str(
            "<table class=\"steps\"><tr><th>step</th><th>result</th><th>time</th><th></th></tr>\n",
        );
        if let Some(w) = &a.worker {
            let exit = w
                .exit
                .map_or("no exit code".into(), |c| format!("exit {c}"));
            // Why runner ended it, when it did (silence, its timeout).
            let ended = w
                .ended
                .as_deref()
                .map_or(String::new(), |e| format!("; ended: {}", esc(e)));
            let _ = write!(
                out,
                "<tr><td>worker</td><td>{} ({exit}{ended})</td><td>{}</td><td>",
                w.class.as_str(),
                human_ms(w.duration_ms)
            );
            log_link(
                out,
                w.log.as_deref(),
                super::model::log_gap(w.log_error.as_deref(), w.unlogged_bytes).as_deref(),
            );
            out.push_str("</td></tr>\n");
        }
        for g in &a.gates {
            let mut also = String::new();
            if g.forgiven {
                also.push_str(" (forgiven: the base commit fails so too)");
            }
            if let Some(c) = &g.cached {
                let _ = write!(also, " (cached from run {})", esc(&c.run_id));
            }
            let _ = write!(
                out,
                "<tr><td>gate <code>{}</code></td><td>{}{}{also}</td><td>{}</td><td>",
                esc(&g.name),
                g.result.as_str(),
                g.reason
                    .as_deref()
                    .map(|r| format!(": {}", esc(r)))
                    .unwrap_or_default(),
                human_ms(g.duration_ms)
            );
            log_link(
                out,
                g.log.as_deref(),
                super::model::log_gap(g.log_error.as_deref(), g.unlogged_bytes).as_deref(),
            );
            out.push_str("</td></tr>\n");
            if let Some(f) = &g.failures {
                for (what, lines) in [("new failure", &f.new), ("forgiven", &f.forgiven)] {
                    for l in lines {
                        let _ = writeln!(
                            out,
                            "<tr><td></td><td colspan=\"3\">{what}: <code>{}</code></td></tr>",
                            esc(l)
                        );
                    }
                }
            }
        }
        out.push_str("</table>\n");
        if let Some(w) = &a.worker
            && w.class != WorkerClass::Ok
            && !w.output_tail.is_empty()
        {
            let _ = writeln!(
                out,
                "<div class=\"muted\">worker output, last lines</div><pre>{}</pre>",
                esc(w.output_tail.trim_end())
            );
        }
        for g in &a.gates {
            if g.result != GateResult::Passed && !g.output_tail.is_empty() {
                let _ = writeln!(
                    out,
                    "<div class=\"muted\">gate <code>{}</code> output, last lines</div><pre>{}</pre>",
                    esc(&g.name),
                    esc(g.output_tail.trim_end())
                );
            }
        }
        out.push_str("</div>\n");
    }
}

const RUN_SCRIPT: &str = r#"
(function () {
  var f = document.getElementById('filters'); f.hidden = false;
  var o = document.getElementById('f-outcome'), r = document.getElementById('f-repo');
  var n = document.getElementById('f-count');
  function apply() {
    var shown = 0;
    document.querySelectorAll('details.item').forEach(function (d) {
      var ok = (!o.value || d.dataset.outcome === o.value) && (!r.value || d.dataset.repo === r.value);
      d.hidden = !ok; if (ok) shown++;
    });
    n.textContent = shown + ' shown';
  }
  o.addEventListener('change', apply); r.addEventListener('change', apply);
  function open() {
    var d = location.hash && document.getElementById(location.hash.slice(1));
    if (d && d.tagName === 'DETAILS') { d.hidden = false; d.open = true; d.scrollIntoView({block: 'nearest'}); }
  }
  window.addEventListener('hashchange', open); open(); apply();
})();
"#;

/// The run's page, as a string.
pub fn render(r: &Report) -> String {
    to_string(|b| write_page(r, b))
}

/// The run's page, written into `w` as it is built.
pub(crate) fn render_to(r: &Report, w: &mut dyn std::io::Write) -> std::io::Result<()> {
    let mut page = Page::new(w);
    write_page(r, &mut page);
    page.finish()
}

fn write_page(r: &Report, b: &mut Page<'_>) {
    page_start(b, &format!("runner: {} — {}", r.manifest.name, r.run_id));
    header(r, b);
    if !r.warnings.is_empty() {
        b.push_str("<section class=\"warnings\"><h2>Warnings</h2><ul>");
        for w in &r.warnings {
            let _ = write!(b, "<li>{}</li>", esc_text(w));
        }
        b.push_str("</ul></section>\n");
    }
    let t = timeline(r);
    b.push_str("<section><h2>Timeline</h2>\n");
    if t.bars.is_empty() {
        b.push_str("<p class=\"muted\">No attempt ran in this run.</p>\n");
    } else {
        timeline_svg(r, &t, b);
        legend(b);
    }
    b.push_str("</section>\n");

    items(r, b);
    let _ = writeln!(
        b,
        "<footer><p class=\"muted\">Written by runner {} from the run's events. <a href=\"../index.html\">All runs</a></p></footer>",
        esc(&r.runner_version)
    );
    page_end(b, RUN_SCRIPT);
}

/// The page's header: the ending with its counts, the run's facts, its cause and suspect gates.
fn header(r: &Report, b: &mut Page<'_>) {
    let _ = writeln!(
        b,
        "<header><h1>runner: {} — {}</h1>",
        esc(&r.manifest.name),
        esc(&super::model::ending_with_counts(r))
    );
    b.push_str("<dl class=\"facts\">");
    let mut fact = |k: &str, v: String| {
        let _ = write!(b, "<div><dt>{k}</dt><dd>{v}</dd></div>");
    };
    fact("run", format!("<code>{}</code>", esc(&r.run_id)));
    fact("started", esc(&r.started_at));
    if let Some(e) = &r.ended_at {
        fact("ended", esc(e));
    }
    if let (Some(a), Some(z)) = (
        timestamp(&r.started_at),
        r.ended_at.as_deref().and_then(timestamp),
    ) {
        fact(
            "took",
            human_ms(z.duration_since(a).as_millis().max(0) as u64),
        );
    }
    fact("capacity", r.capacity.workers.to_string());
    if let Some(c) = &r.containment {
        fact("containment", esc(c.mode.as_str()));
        if let Some(s) = &c.sandbox {
            fact("sandbox", esc(s));
        }
    }
    if let Some(u) = &r.usage {
        fact(
            "usage",
            format!(
                "{} · {} in / {} out tokens",
                u.total.cost_text(),
                u.total.input_tokens,
                u.total.output_tokens
            ),
        );
    }
    fact("runner", esc(&r.runner_version));
    b.push_str("</dl>\n");
    if let Some(c) = &r.cause {
        let _ = writeln!(b, "<p><strong>Cause:</strong> {}</p>", esc_text(c));
    }
    for s in &r.suspect_gates {
        let _ = writeln!(
            b,
            "<p><strong>Suspected misconfigured gate:</strong> {}</p>",
            esc_text(&super::model::suspect_line(s))
        );
    }
    b.push_str("<div class=\"counts\">");
    for (o, n) in r.counts.iter().filter(|(_, n)| **n > 0) {
        let _ = write!(
            b,
            "<span class=\"badge o-{o}\">{n} {o}</span>",
            o = o.as_str()
        );
    }
    b.push_str("</div></header>\n");
}

/// The items, with the filters over them, each a row that opens on its attempts.
fn items(r: &Report, b: &mut Page<'_>) {
    b.push_str("<section><h2>Items</h2>\n");
    let mut repos: Vec<&str> = (0..r.items.len())
        .filter_map(|i| r.items.name(i))
        .map(|(repo, _)| repo)
        .collect();
    repos.sort_unstable();
    repos.dedup();
    b.push_str("<div class=\"filters\" id=\"filters\" hidden><label>Outcome <select id=\"f-outcome\"><option value=\"\">all</option>");
    for (o, n) in r.counts.iter().filter(|(_, n)| **n > 0) {
        let _ = write!(
            b,
            "<option value=\"{o}\">{o} ({n})</option>",
            o = o.as_str()
        );
    }
    b.push_str(
        "</select></label><label>Repository <select id=\"f-repo\"><option value=\"\">all</option>",
    );
    for repo in &repos {
        let _ = write!(b, "<option value=\"{0}\">{0}</option>", esc(repo));
    }
    b.push_str("</select></label><span class=\"muted\" id=\"f-count\"></span></div>\n");
    b.push_str("<div class=\"items\"><div class=\"row head\"><span>repository</span><span>item</span><span>outcome</span><span class=\"wide\">model</span><span class=\"wide\">attempts</span><span class=\"wide\">time</span><span class=\"wide\">detail</span></div>\n");
    for (i, it) in r.items.iter().enumerate() {
        item_html(i, &it, b);
    }
    b.push_str("</div></section>\n");
}

/// One item's row and its detail.
fn item_html(i: usize, it: &super::model::ItemReport, b: &mut Page<'_>) {
    let _ = write!(
        b,
        "<details class=\"item\" id=\"{}\" data-outcome=\"{}\" data-repo=\"{}\"><summary class=\"row\">",
        item_anchor(i),
        it.outcome.as_str(),
        esc(&it.repo)
    );
    let _ = write!(
        b,
        "<span class=\"cell\">{}</span><span class=\"cell mono\">{}</span><span><span class=\"badge o-{o}\">{o}</span></span>",
        esc(&it.repo),
        esc(&it.id),
        o = it.outcome.as_str()
    );
    let _ = write!(
        b,
        "<span class=\"cell wide mono\">{}</span><span class=\"wide\">{}</span><span class=\"wide\">{}</span><span class=\"cell wide\">{}</span></summary>",
        esc(it.model.as_deref().unwrap_or("")),
        it.attempts.len(),
        duration_of(it).map(human_ms).unwrap_or_default(),
        esc_text(&detail_of(it))
    );
    b.push_str("\n<div class=\"detail\">");
    if let Some(br) = &it.branch {
        let _ = write!(b, "<p>branch <code>{}</code>", esc(br));
        if let Some(w) = &it.worktree {
            let _ = write!(b, " · worktree <code>{}</code>", esc(w));
        }
        b.push_str("</p>\n");
    }
    if let Some(w) = &it.waited
        && (w.lease_ms > 0 || w.backoff_ms > 0)
    {
        let _ = writeln!(
            b,
            "<p class=\"muted\">waited {} for the repository's lease, {} in provider back-off</p>",
            human_ms(w.lease_ms),
            human_ms(w.backoff_ms)
        );
    }
    attempts_html(it, b);
    b.push_str("</div></details>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_spans_are_shown_as_code_and_their_text_escaped() {
        assert_eq!(
            esc_text("gate `test` failed in `<a>`"),
            "gate <code>test</code> failed in <code>&lt;a&gt;</code>"
        );
        assert_eq!(
            esc_text("a `b` and ` alone"),
            "a <code>b</code> and ` alone"
        );
        assert_eq!(esc_text("no code"), "no code");
        assert_eq!(esc_text("`"), "`");
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(
            esc(r#"<a href="x">&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;"
        );
    }

    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(human_ms(850), "850 ms");
        assert_eq!(human_ms(12_340), "12.3 s");
        assert_eq!(human_ms(245_000), "4 min 05 s");
        assert_eq!(human_ms(7_380_000), "2 h 03 min");
    }

    #[test]
    fn ticks_are_round_and_few() {
        for span in [5, 900, 12_000, 250_000, 4_000_000, 90_000_000] {
            let step = tick_step(span);
            assert!(span / step <= 10, "{span}: {step}");
        }
        assert_eq!(tick_step(12_000), 2_000);
    }
}
