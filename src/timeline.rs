//! The night as a picture: the timed facts of one run, read from the ledger,
//! and the self-contained HTML page `report --html` draws from them
//! (docs/commands.md#report).
//!
//! The page is one file with inline CSS and an inline SVG timeline: no
//! script, no font, no network, so it opens from a mail attachment or a CI
//! artifact as it is and prints. One lane per worker; each round is a bar
//! split into its phases (writer, gate, review) plus the push of a shipped
//! item; a CI fix round (docs/github.md#fix-rounds) is outlined apart and
//! labelled `CI fix N` with the check it repairs; usage-limit sleeps are bands; the deadline and the run's start and
//! end are lines. Every text that came from an agent, a gate or the backlog
//! is HTML-escaped. This module does not decide anything about a run; it
//! only shows what the ledger holds.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use sqlx::PgPool;
use uuid::Uuid;

use crate::agent::Role;
use crate::ledger::timeline::{
    self as ledger, CallFacts, FixFacts, RoundFacts, RunFacts, SleepFacts, TimelineRows,
};
use crate::outcome::{Outcome, Phase};

/// The phase a bar segment shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Segment {
    /// The writer agent's call.
    Writer,
    /// The gate commands, one after the other.
    Gate,
    /// The reviewer agent's call.
    Review,
    /// Commit, push and the PR, after the last round.
    Push,
}

impl Segment {
    /// The run phase the segment shows.
    pub fn phase(self) -> Phase {
        match self {
            Segment::Writer => Phase::Writer,
            Segment::Gate => Phase::Gate,
            Segment::Review => Phase::Review,
            Segment::Push => Phase::Push,
        }
    }

    /// The CSS class and legend word: the phase's ledger text.
    pub fn as_str(self) -> &'static str {
        self.phase().as_str()
    }
}

/// A span of time (UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// Start.
    pub from: DateTime<Utc>,
    /// End (not before `from`).
    pub to: DateTime<Utc>,
}

/// One round of one item, with its phases.
#[derive(Debug, Clone)]
pub struct RoundBar {
    /// The item's index in the plan (1-based, as `plan` shows it).
    pub item_index: i32,
    /// The round (1-based).
    pub n: i32,
    /// The whole round.
    pub span: Span,
    /// Its phases, in order, each within `span`.
    pub segments: Vec<(Segment, Span)>,
    /// The CI fix round it is, if it is one: not the item's own work but a
    /// repair of its PR's red check (docs/github.md#fix-rounds).
    pub fix: Option<FixOf>,
}

/// Which CI fix round a round is: its number among the PR's fix rounds
/// and the failed check(s) it was to repair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FixOf {
    /// 1-based.
    pub n: i32,
    /// The check names, comma-separated, as GitHub names them.
    pub checks: String,
}

impl FixOf {
    /// `CI fix 1 (lint)`: the words the page labels the round with.
    pub fn label(&self) -> String {
        format!("CI fix {} ({})", self.n, self.checks)
    }
}

/// The fix round `r` (of item `key`) is, if any: the latest fix round its
/// item's watch asked for before `r` started. A fix round is always asked
/// after the item's own rounds ended (its PR was pushed first), so every
/// round that follows such an ask is a fix round's.
fn fix_of(r: &RoundFacts, fixes: &[FixFacts]) -> Option<FixOf> {
    let f = (fixes.iter())
        .filter(|f| f.item_key == r.item_key && f.at <= r.started_at)
        .max_by_key(|f| f.at)?;
    Some(FixOf {
        n: f.n,
        checks: f.checks.replace('`', ""),
    })
}

/// One item as the table under the timeline lists it.
pub use crate::ledger::timeline::ItemLine;

/// Everything the page shows of one run.
#[derive(Debug, Clone)]
pub struct Timeline {
    /// The run.
    pub run_id: Uuid,
    /// Its status word.
    pub status: String,
    /// The zone local times are shown in.
    pub tz: Tz,
    /// Start and end (the end is the last fact seen while it runs).
    pub span: Span,
    /// The deadline (UTC).
    pub deadline: Option<DateTime<Utc>>,
    /// Items in plan order.
    pub items: Vec<ItemLine>,
    /// Rounds in time order.
    pub rounds: Vec<RoundBar>,
    /// Pushes of shipped items: (item index, span).
    pub pushes: Vec<(i32, Span)>,
    /// Usage-limit sleeps: (item index if any, agent, span).
    pub sleeps: Vec<(Option<i32>, String, Span)>,
}

impl Timeline {
    /// Reads run `run` from the ledger. `Ok(None)`: no such run.
    ///
    /// # Errors
    /// Database errors.
    pub async fn load(pool: &PgPool, run: Uuid) -> sqlx::Result<Option<Timeline>> {
        let Some(rows) = ledger::timeline_rows(pool, run).await? else {
            return Ok(None);
        };
        let TimelineRows {
            run: facts,
            items,
            rounds,
            calls,
            gates,
            sleeps,
            fixes,
        } = rows;
        let end = run_end(&facts, &items, &sleeps);
        let index_of = |item_id: i64| items.iter().find(|i| i.id == item_id).map(|i| i.item_index);
        let bars = rounds
            .iter()
            .map(|r| {
                let mut bar =
                    round_bar(r, index_of(r.run_item_id).unwrap_or(0), &calls, &gates, end);
                bar.fix = fix_of(r, &fixes);
                bar
            })
            .collect::<Vec<_>>();
        let pushes = items
            .iter()
            .filter_map(|i| push_span(i, &rounds))
            .collect::<Vec<_>>();
        let sleeps = sleeps
            .into_iter()
            .map(|(item, agent, from, to)| {
                let span = Span {
                    from,
                    to: to.max(from),
                };
                (item.and_then(index_of), agent, span)
            })
            .collect();
        Ok(Some(Timeline {
            run_id: run,
            status: facts.status,
            tz: facts.timezone.parse().unwrap_or(Tz::UTC),
            span: Span {
                from: facts.started_at,
                to: end,
            },
            deadline: facts.deadline,
            items,
            rounds: bars,
            pushes,
            sleeps,
        }))
    }
}

fn ms(n: i64) -> chrono::Duration {
    chrono::Duration::milliseconds(n.max(0))
}

/// One round with its phases: the writer's call, then the gate commands one
/// after the other from the writer's end (the ledger keeps their durations),
/// then the reviewer's call. Each phase is clipped to the round.
fn round_bar(
    r: &RoundFacts,
    item_index: i32,
    calls: &[CallFacts],
    gates: &[(i64, i64)],
    now: DateTime<Utc>,
) -> RoundBar {
    let span = Span {
        from: r.started_at,
        to: r.ended_at.unwrap_or(now).max(r.started_at),
    };
    let clip = |from: DateTime<Utc>, to: DateTime<Utc>| Span {
        from: from.clamp(span.from, span.to),
        to: to.clamp(span.from, span.to),
    };
    let mut segments = Vec::new();
    let mut writer_end = span.from;
    for c in calls.iter().filter(|c| c.round_id == Some(r.id)) {
        let end = c.started_at + ms(c.duration_ms);
        let seg = if c.role == Role::Reviewer.as_str() {
            Segment::Review
        } else {
            writer_end = writer_end.max(end);
            Segment::Writer
        };
        segments.push((seg, clip(c.started_at, end)));
    }
    let gate_ms: i64 = gates.iter().filter(|g| g.0 == r.id).map(|g| g.1).sum();
    if gates.iter().any(|g| g.0 == r.id) {
        segments.push((Segment::Gate, clip(writer_end, writer_end + ms(gate_ms))));
    }
    segments.sort_by_key(|s| s.1.from);
    RoundBar {
        item_index,
        n: r.n,
        span,
        segments,
        fix: None,
    }
}

/// The push of an item that shipped (or tried to): from its last round's
/// end to the item's end.
fn push_span(item: &ItemLine, rounds: &[RoundFacts]) -> Option<(i32, Span)> {
    let shipped = matches!(
        item.outcome,
        Some(Outcome::PrOpened | Outcome::PrFailed | Outcome::PushFailed | Outcome::BranchPushed)
    );
    let end = item.ended_at?;
    let last = rounds
        .iter()
        .filter(|r| r.run_item_id == item.id)
        .filter_map(|r| r.ended_at)
        .max()?;
    (shipped && end >= last).then_some((
        item.item_index,
        Span {
            from: last,
            to: end,
        },
    ))
}

/// HTML-escapes `s` for text and attribute values.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    pulldown_cmark_escape::escape_html(&mut out, s).expect("writing to a String");
    out
}

/// Width of the SVG's coordinate space; the page scales it to the screen.
const WIDTH: f64 = 1000.0;
/// Left margin for lane names.
const LEFT: f64 = 90.0;
/// Height of one lane.
const LANE: f64 = 34.0;
/// Height of the axis under the lanes.
const AXIS: f64 = 26.0;

/// Maps instants to x coordinates.
struct Scale {
    from: DateTime<Utc>,
    secs: f64,
}

impl Scale {
    fn x(&self, t: DateTime<Utc>) -> f64 {
        let s = (t - self.from).num_milliseconds() as f64 / 1000.0;
        LEFT + (WIDTH - LEFT - 10.0) * (s / self.secs).clamp(0.0, 1.0)
    }
    fn w(&self, span: Span) -> f64 {
        (self.x(span.to) - self.x(span.from)).max(1.5)
    }
}

/// A lane's label, at most 14 characters: a worker is `host:pid:n`
/// (docs/workers.md), and its slot number `n` must stay visible when the
/// host's name is long, or two lanes of one process read the same.
fn lane_label(lane: &str) -> String {
    if lane.chars().count() <= 14 {
        return lane.to_string();
    }
    match lane.rsplit_once(':') {
        Some((head, n)) if n.len() <= 4 => {
            let keep = 13usize.saturating_sub(n.len());
            format!("{}…:{n}", head.chars().take(keep).collect::<String>())
        }
        _ => format!("{}…", lane.chars().take(13).collect::<String>()),
    }
}

impl Timeline {
    /// The lanes: one per worker that ran an item, in first-seen order; one
    /// lane (`nightshift`) when no item names a worker.
    pub fn lanes(&self) -> Vec<String> {
        let mut lanes: Vec<String> = Vec::new();
        for w in self.items.iter().filter_map(|i| i.worker.clone()) {
            if !lanes.contains(&w) {
                lanes.push(w);
            }
        }
        if lanes.is_empty() {
            lanes.push("nightshift".to_string());
        }
        lanes
    }

    fn lane_of(&self, item_index: Option<i32>) -> usize {
        let lanes = self.lanes();
        item_index
            .and_then(|ix| self.items.iter().find(|i| i.item_index == ix))
            .and_then(|i| i.worker.as_ref())
            .and_then(|w| lanes.iter().position(|l| l == w))
            .unwrap_or(0)
    }

    fn local(&self, t: DateTime<Utc>) -> String {
        t.with_timezone(&self.tz).format("%H:%M").to_string()
    }

    /// The deadline when it falls on the picture: up to a quarter of the
    /// night's length after its end (a 07:00 deadline of a night that ended
    /// at 01:00 would squash the night into a corner; it is then named in
    /// words instead).
    fn deadline_drawn(&self) -> Option<DateTime<Utc>> {
        let len = self.span.to - self.span.from;
        self.deadline
            .filter(|d| *d <= self.span.to + len / 4 && *d >= self.span.from)
    }

    fn scale(&self) -> Scale {
        let to = self
            .deadline_drawn()
            .map_or(self.span.to, |d| d.max(self.span.to));
        Scale {
            from: self.span.from,
            secs: ((to - self.span.from).num_milliseconds() as f64 / 1000.0).max(1.0),
        }
    }
}

/// The page's stylesheet: readable from 390 px (a phone) to 1280 px and
/// beyond, and on paper.
const STYLE: &str = "
:root{--writer:#4e79a7;--gate:#f28e2b;--review:#59a14f;--push:#b07aa1;--sleep:#bab0ac;--fail:#e15759;--ink:#1f2328;--muted:#656d76}
*{box-sizing:border-box}
body{margin:0;padding:16px;font:15px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:var(--ink);background:#fff}
main{max-width:1240px;margin:0 auto}
h1{font-size:1.35em;margin:0 0 4px}
.meta{color:var(--muted);margin:0 0 12px}
svg{width:100%;height:auto;display:block;border:1px solid #d0d7de;border-radius:6px}
svg text{font:11px system-ui,sans-serif;fill:var(--ink)}
svg text.label{fill:#fff;font-weight:600}
.tl{overflow-x:auto}
.round{fill:none;stroke:#57606a;stroke-width:.6}
.round.fix{stroke:var(--fail);stroke-width:1.6;stroke-dasharray:4 2}
.writer{fill:var(--writer)}.gate{fill:var(--gate)}.review{fill:var(--review)}.push{fill:var(--push)}
.sleep{fill:var(--sleep);opacity:.55}
.deadline{stroke:var(--fail);stroke-width:1.5;stroke-dasharray:4 3}
.edge{stroke:#57606a;stroke-width:1}
.legend{display:flex;flex-wrap:wrap;gap:12px;margin:8px 0 16px;color:var(--muted);font-size:.9em}
.legend i{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:4px;vertical-align:-1px}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:6px 8px;border-bottom:1px solid #d8dee4;vertical-align:top}
td{overflow-wrap:anywhere}
h1,.meta{overflow-wrap:anywhere}
th{font-size:.85em;color:var(--muted);font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.outcome{font-family:ui-monospace,monospace;font-size:.9em}
.failed .outcome{color:var(--fail);font-weight:600}
.fix{color:var(--fail);font-size:.9em}
.reason{color:var(--muted);font-size:.9em;white-space:pre-wrap;overflow-wrap:anywhere}
@media (max-width:640px){
 body{padding:10px;font-size:14px}
 thead{display:none}
 tr{display:block;border-bottom:1px solid #d8dee4;padding:6px 0}
 td{display:block;border:0;padding:2px 0}
 td.num{text-align:left}
 td[data-label]::before{content:attr(data-label) ': ';color:var(--muted)}
 .tl svg{min-width:900px}
}
@media print{body{padding:0}svg{border:0}a{color:inherit}}
";

impl Timeline {
    /// The whole page: header, timeline, legend, items.
    pub fn to_html(&self) -> String {
        self.page(None)
    }

    /// The whole page headed by the night's board (the view model the live
    /// board draws, [`crate::report::board`]): its line of counts under the
    /// title, so the morning page says what the board said at the end.
    pub fn to_html_with(&self, board: &crate::report::board::Board) -> String {
        self.page(Some(board))
    }

    fn page(&self, board: Option<&crate::report::board::Board>) -> String {
        let mut h = String::new();
        let title = format!("nightshift run {}", &self.run_id.to_string()[..8]);
        let _ = write!(
            h,
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
             <title>{t}</title><style>{STYLE}</style></head><body><main>\
             <h1>{t}</h1><p class=\"meta\">{status} · {from} – {to} ({tz}){deadline}</p>",
            t = esc(&title),
            status = esc(&self.status),
            from = self.local(self.span.from),
            to = self.local(self.span.to),
            tz = esc(self.tz.name()),
            deadline = self
                .deadline
                .map(|d| format!(" · deadline {}", self.local(d)))
                .unwrap_or_default(),
        );
        if let Some(b) = board {
            let _ = write!(h, "<p class=\"counts\">{}</p>", esc(&b.headline));
        }
        // At 390 px the picture scrolls sideways instead of shrinking its
        // text to a few pixels.
        h.push_str("<div class=\"tl\">");
        h.push_str(&self.svg());
        h.push_str("</div>");
        let quota = board.map(|b| b.quota.as_slice()).unwrap_or_default();
        let sc = self.scale();
        let quota = crate::report::quota::chart(quota, &|t| sc.x(t), (LEFT, WIDTH), self.tz);
        h.push_str("<div class=\"legend\">");
        for (class, word) in [
            ("writer", "writer"),
            ("gate", "gate"),
            ("review", "review"),
            ("push", "push"),
            ("sleep", "usage-limit sleep"),
        ] {
            let _ = write!(
                h,
                "<span><i style=\"background:var(--{class})\"></i>{word}</span>"
            );
        }
        h.push_str("<span><i style=\"background:var(--fail)\"></i>deadline</span>");
        if self.rounds.iter().any(|r| r.fix.is_some()) {
            h.push_str("<span><i style=\"border:2px dashed var(--fail)\"></i>CI fix round</span>");
        }
        h.push_str("</div>");
        // Each quota window's use on the timeline's time axis (docs/limits.md#gauges).
        h.push_str(&quota);
        h.push_str(&self.table(board));
        h.push_str("</main></body></html>\n");
        h
    }

    /// The inline SVG: lanes, round bars with their phases, sleeps, the
    /// start, end and deadline lines, and an hour axis.
    fn svg(&self) -> String {
        let lanes = self.lanes();
        let sc = self.scale();
        let height = lanes.len() as f64 * LANE + AXIS;
        let mut s = format!(
            "<svg viewBox=\"0 0 {WIDTH} {height}\" role=\"img\" aria-label=\"timeline of the night\" xmlns=\"http://www.w3.org/2000/svg\">"
        );
        for (n, lane) in lanes.iter().enumerate() {
            let y = n as f64 * LANE;
            let _ = write!(
                s,
                "<text x=\"4\" y=\"{:.1}\">{}</text>",
                y + LANE / 2.0 + 4.0,
                esc(&lane_label(lane))
            );
        }
        for (item, agent, span) in &self.sleeps {
            let y = self.lane_of(*item) as f64 * LANE;
            let _ = write!(
                s,
                "<rect class=\"sleep\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\"><title>{} usage limit: slept {} – {}</title></rect>",
                sc.x(span.from),
                y + 2.0,
                sc.w(*span),
                LANE - 4.0,
                esc(agent),
                self.local(span.from),
                self.local(span.to)
            );
        }
        for r in &self.rounds {
            s.push_str(&self.round_svg(r, &sc));
        }
        for (item, span) in &self.pushes {
            let y = self.lane_of(Some(*item)) as f64 * LANE;
            let _ = write!(
                s,
                "<rect class=\"push\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\"><title>item {item}: push and PR</title></rect>",
                sc.x(span.from),
                y + 8.0,
                sc.w(*span),
                LANE - 16.0
            );
        }
        s.push_str(&self.lines_svg(&sc, height));
        s.push_str("</svg>");
        s
    }

    fn round_svg(&self, r: &RoundBar, sc: &Scale) -> String {
        let y = self.lane_of(Some(r.item_index)) as f64 * LANE + 6.0;
        // A CI fix round is named as one, with the check it repairs.
        let what = match &r.fix {
            Some(f) => esc(&format!(
                "item {} round {} · {}",
                r.item_index,
                r.n,
                f.label()
            )),
            None => format!("item {} round {}", r.item_index, r.n),
        };
        let mut s = String::new();
        for (seg, span) in &r.segments {
            let _ = write!(
                s,
                "<rect class=\"{c}\" x=\"{:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\"><title>{what}: {c}</title></rect>",
                sc.x(span.from),
                sc.w(*span),
                LANE - 12.0,
                c = seg.as_str()
            );
        }
        let (class, fix_data) = match &r.fix {
            Some(f) => (
                "round fix",
                format!(" data-fix=\"{}\" data-checks=\"{}\"", f.n, esc(&f.checks)),
            ),
            None => ("round", String::new()),
        };
        let _ = write!(
            s,
            "<rect class=\"{class}\" data-item=\"{}\" data-round=\"{}\"{fix_data} x=\"{:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\"><title>{what}: {} – {}</title></rect>",
            r.item_index,
            r.n,
            sc.x(r.span.from),
            sc.w(r.span),
            LANE - 12.0,
            self.local(r.span.from),
            self.local(r.span.to)
        );
        // The item's number on its bar, where the bar is wide enough; a fix
        // round's says so where there is room.
        let label = match &r.fix {
            Some(f) if sc.w(r.span) >= 60.0 => format!("{} CI fix {}", r.item_index, f.n),
            _ => r.item_index.to_string(),
        };
        if sc.w(r.span) >= 14.0 {
            let _ = write!(
                s,
                "<text class=\"label\" x=\"{:.1}\" y=\"{:.1}\">{label}</text>",
                sc.x(r.span.from) + 3.0,
                y + (LANE - 12.0) / 2.0 + 4.0,
            );
        }
        s
    }

    fn lines_svg(&self, sc: &Scale, height: f64) -> String {
        let lanes_h = height - AXIS;
        let mut s = String::new();
        for (t, word) in [(self.span.from, "start"), (self.span.to, "end")] {
            let x = sc.x(t);
            let _ = write!(
                s,
                "<line class=\"edge\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"0\" y2=\"{lanes_h:.1}\"><title>{word} {}</title></line>",
                self.local(t)
            );
        }
        if let Some(d) = self.deadline_drawn() {
            let x = sc.x(d);
            let _ = write!(
                s,
                "<line class=\"deadline\" x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"0\" y2=\"{lanes_h:.1}\"><title>deadline {}</title></line>",
                self.local(d)
            );
        }
        let ticks = 6;
        let mut last_label = String::new();
        for k in 0..=ticks {
            let t = sc.from
                + chrono::Duration::milliseconds(
                    (sc.secs * 1000.0 * k as f64 / ticks as f64) as i64,
                );
            let x = sc.x(t);
            let anchor = match k {
                0 => "start",
                k if k == ticks => "end",
                _ => "middle",
            };
            // A night shorter than an hour needs the seconds to tell its
            // ticks apart; a tick that would repeat the last one is left out.
            let label = (t.with_timezone(&self.tz))
                .format(if sc.secs < 3600.0 {
                    "%H:%M:%S"
                } else {
                    "%H:%M"
                })
                .to_string();
            if label == last_label {
                continue;
            }
            let _ = write!(
                s,
                "<text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\">{label}</text>",
                height - 8.0,
            );
            last_label = label;
        }
        s
    }

    /// The items under the picture, one row each.
    fn table(&self, board: Option<&crate::report::board::Board>) -> String {
        let mut s = String::from(
            "<table><thead><tr><th>#</th><th>item</th><th>outcome</th><th>PR</th><th>CI</th><th>rounds</th><th>time</th><th>tokens</th><th>cost</th></tr></thead><tbody>",
        );
        for i in &self.items {
            // The PR's CI state (docs/github.md#ci), as the board has it.
            let ci = (board.into_iter())
                .flat_map(|b| b.finished.iter())
                .find(|f| f.index == i.item_index && f.pr_number.map(|n| n as i64) == i.pr_number)
                .and_then(|f| f.ci.as_deref())
                .map_or_else(|| "–".to_string(), esc);
            let failed = i.outcome.is_some_and(Outcome::fails_run);
            // Only a plain https:/http: address from GitHub's data is a link.
            let label = |n: Option<i64>| n.map_or_else(|| "PR".to_string(), |n| format!("#{n}"));
            let pr = match (
                i.pr_url.as_deref().map(crate::report::web_link),
                i.pr_number,
            ) {
                (Some(Some(url)), n) => format!("<a href=\"{}\">{}</a>", esc(url), label(n)),
                (Some(None), n) => esc(&label(n)),
                _ => "–".to_string(),
            };
            // Under a second is `<1s`, not `0s`; a running item has no time yet.
            let took = match i.ended_at.map(|e| (e - i.started_at).num_milliseconds()) {
                Some(ms) if ms < 1000 => "&lt;1s".to_string(),
                Some(ms) => crate::timeline::minutes(ms / 1000),
                None => "–".to_string(),
            };
            let mut reason = match (&i.reason, failed || i.outcome == Some(Outcome::Blocked)) {
                (Some(r), true) => format!("<div class=\"reason\">{}</div>", esc(r)),
                _ => String::new(),
            };
            reason.push_str(&self.fixes_of(i.item_index));
            let _ = write!(
                s,
                "<tr class=\"{cls}\"><td class=\"num\" data-label=\"#\">{}</td><td>{}{reason}</td>\
                 <td class=\"outcome\" data-label=\"outcome\">{}</td><td data-label=\"PR\">{pr}</td><td data-label=\"CI\">{ci}</td>\
                 <td class=\"num\" data-label=\"rounds\">{}</td><td class=\"num\" data-label=\"time\">{}</td>\
                 <td class=\"num\" data-label=\"tokens\">{}</td><td class=\"num\" data-label=\"cost\">{}</td></tr>",
                i.item_index,
                esc(&i.title),
                Outcome::or_running(i.outcome),
                i.rounds,
                took,
                i.tokens,
                i.cost_usd
                    .map_or_else(|| "–".to_string(), |c| format!("${c:.2}")),
                cls = if failed { "failed" } else { "ok" },
            );
        }
        s.push_str("</tbody></table>");
        s
    }
}

impl Timeline {
    /// The CI fix rounds of item `item_index` under its title in the
    /// table, one line each (`CI fix 1 (lint) · round 2`); empty when none.
    fn fixes_of(&self, item_index: i32) -> String {
        let mut s = String::new();
        for r in self.rounds.iter().filter(|r| r.item_index == item_index) {
            if let Some(f) = &r.fix {
                let _ = write!(
                    s,
                    "<div class=\"fix\">{} · round {}</div>",
                    esc(&f.label()),
                    r.n
                );
            }
        }
        s
    }
}

/// `1h 04m`, `3m 20s`, `12s`.
fn minutes(secs: i64) -> String {
    match secs {
        s if s >= 3600 => format!("{}h {:02}m", s / 3600, s % 3600 / 60),
        s if s >= 60 => format!("{}m {:02}s", s / 60, s % 60),
        s => format!("{s}s"),
    }
}

/// The run's last known moment (UTC): its end, last heartbeat, or the end
/// of its last item or sleep, whichever is latest, never before its start.
fn run_end(facts: &RunFacts, items: &[ItemLine], sleeps: &[SleepFacts]) -> DateTime<Utc> {
    [Some(facts.heartbeat_at), facts.ended_at]
        .into_iter()
        .flatten()
        .chain(items.iter().filter_map(|i| i.ended_at))
        .chain(sleeps.iter().map(|s| s.3))
        .max()
        .unwrap_or(facts.started_at)
        .max(facts.started_at)
}
