//! What a person reads in the morning: the PR body (the evidence card of one
//! item) and the report of a run (docs/commands.md#report, docs/github.md#pr-body).
//!
//! Both are rendered from recorded facts only — the contract, git's proof,
//! the gate's exit codes and output tails, the reviewer's verdict — never
//! from an agent's own account of what it did. A PR body stays within
//! GitHub's 65,536-character limit by cutting long gate output to its tail
//! with a note.

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{Value, json};
use uuid::Uuid;

use crate::ledger::items::ItemRow;
use crate::ledger::runs::RunRow;
use crate::outcome::{Outcome, RunStatus};

/// GitHub's PR body limit, in characters.
pub use crate::forge::BODY_LIMIT;

/// Where a run's page is kept by default: `.nightshift/reports/<run id>.html`
/// in the repository (ignored by `.nightshift/.gitignore`).
pub fn page_path(repo: &std::path::Path, run: Uuid) -> std::path::PathBuf {
    repo.join(crate::config::DIR)
        .join("reports")
        .join(format!("{run}.html"))
}

pub mod board;
mod body;
pub mod ci;
pub mod quota;

pub use body::{Evidence, Overlap, RoundSummary, overlaps, pr_body};

/// The first `max` characters of `s` (cut at a line end when possible) and
/// whether it was cut.
fn head_chars_of(s: &str, max: usize) -> (String, bool) {
    if s.chars().count() <= max {
        return (s.to_string(), false);
    }
    let head: String = s.chars().take(max).collect();
    let cut = head
        .rfind('\n')
        .map(|i| head[..i].to_string())
        .unwrap_or(head);
    (cut, true)
}

fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}

/// `s` on one line (its whitespace runs as single spaces), cut to `max`
/// characters with `…` when longer.
pub fn one_line(s: &str, max: usize) -> String {
    let t: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if t.chars().count() > max {
        format!("{}…", t.chars().take(max).collect::<String>())
    } else {
        t
    }
}

/// The report's section on `nightshift/` branches whose head nightshift
/// did not push (docs/security.md#processes), or empty when there is none.
/// Each line is [`ForeignRef::line`](crate::user_repo::foreign::ForeignRef::line):
/// escaped and masked.
pub fn foreign_refs_section(refs: &[crate::user_repo::foreign::ForeignRef]) -> String {
    if refs.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "refs nightshift did not push (look at each: an agent that outlived its runner, or anyone else with the remote's credentials, pushed it during the night):\n",
    );
    for r in refs {
        let _ = writeln!(s, "  {}", r.line());
    }
    s
}

/// The report's lines on the sandbox (docs/security.md#the-sandbox): why
/// the run's calls ran without it (`unavailable`), and the connections its
/// proxy refused: how many, and each host once in the order first
/// refused. Empty when there is nothing to say. Hosts are names or
/// addresses the proxy parsed (letters, digits, `.`, `-`, `:`), escaped
/// all the same.
pub fn sandbox_section(unavailable: Option<&str>, refused: &[String]) -> String {
    let mut s = unavailable.map_or_else(String::new, |why| {
        format!(
            "{}: agents, gates and setup ran without it (docs/security.md#the-sandbox)\n",
            escape_controls(why, false)
        )
    });
    if refused.is_empty() {
        return s;
    }
    let mut hosts: Vec<&str> = Vec::new();
    for h in refused {
        if !hosts.contains(&h.as_str()) {
            hosts.push(h);
        }
    }
    let n = refused.len();
    let _ = writeln!(
        s,
        "sandbox refused {n} connection{}: {}",
        if n == 1 { "" } else { "s" },
        escape_controls(&hosts.join(", "), false)
    );
    s
}

/// `s` with every character that could move, hide or reorder what a
/// person reads written out as an escape: C0 and C1 controls (`\n`, `\r`,
/// `\t`, `\e` as `\u{1b}`), DEL, the line and paragraph separators
/// U+2028/U+2029, bidirectional marks, embeddings, overrides and isolates
/// (U+061C, U+200E/F, U+202A–E, U+2066–9) and zero-width characters
/// (U+200B–D, U+2060, U+FEFF). With `keep_newlines`, `\n` and `\t` stay
/// (text inside a fence). The one escaping rule for agent-controlled text
/// in PR bodies and reports (docs/security.md).
pub fn escape_controls(s: &str, keep_newlines: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        let hidden = c.is_control()
            || matches!(
                c,
                '\u{2028}' | '\u{2029}' | '\u{061C}' | '\u{200B}'..='\u{200F}'
                    | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2069}' | '\u{FEFF}'
            );
        match c {
            '\n' | '\t' if keep_newlines => out.push(c),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if hidden => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// `url` (from GitHub data: a PR's address) when it is a plain web
/// link — `https:` or `http:`, no spaces, quotes, angle brackets or
/// parentheses — fit to be a link a person clicks in the report or on the
/// HTML page; `None` for anything else (`javascript:`, `data:`, a forged
/// row), which is then shown as text only.
pub fn web_link(url: &str) -> Option<&str> {
    let parsed = url::Url::parse(url).ok()?;
    let plain = !url
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || "\"'<>()`\\".contains(c));
    (matches!(parsed.scheme(), "https" | "http") && parsed.host().is_some() && plain).then_some(url)
}

/// Agent-controlled words for a line of markdown (a finding, a note):
/// controls escaped ([`escape_controls`]) and `<` written `&lt;`, so no HTML
/// tag or comment can start and swallow what follows.
pub fn md_text(s: &str) -> String {
    escape_controls(s, false).replace('<', "&lt;")
}

/// `s` as one markdown code span (a path, a command): controls escaped, and
/// delimited by one backtick more than the longest run of backticks inside,
/// so no backtick in it can close the span (CommonMark "Code spans").
pub fn md_code(s: &str) -> String {
    let s = escape_controls(s, false);
    let ticks = "`".repeat(longest_run(&s, '`') + 1);
    // A space each side keeps a backtick at either end from joining the
    // delimiter; CommonMark strips exactly one each side again.
    if s.starts_with('`') || s.ends_with('`') || (!s.is_empty() && s.trim().is_empty()) {
        format!("{ticks} {s} {ticks}")
    } else {
        format!("{ticks}{s}{ticks}")
    }
}

/// `s` as a fenced code block with info string `info`: controls other than
/// line breaks and tabs escaped, and a fence of one backtick more than the
/// longest run of backticks inside (at least three), so nothing in it can
/// close the block.
pub fn md_fence(info: &str, s: &str) -> String {
    let s = escape_controls(s, true);
    let fence = "`".repeat((longest_run(&s, '`') + 1).max(3));
    format!("{fence}{info}\n{s}\n{fence}")
}

/// Length of the longest run of `c` in `s`.
fn longest_run(s: &str, c: char) -> usize {
    let (mut best, mut run) = (0, 0);
    for x in s.chars() {
        run = if x == c { run + 1 } else { 0 };
        best = best.max(run);
    }
    best
}

/// The last `max` characters of `s` and whether it was cut.
fn tail_chars_of(s: &str, max: usize) -> (String, bool) {
    let n = s.chars().count();
    if n <= max {
        return (s.to_string(), false);
    }
    (s.chars().skip(n - max).collect(), true)
}

/// The night in numbers: what `report` prints under the table.
#[derive(Debug, Clone, PartialEq)]
pub struct NightTotals {
    /// Items whose PR was opened on GitHub (`pr_opened`).
    pub opened: usize,
    /// Items whose branch is pushed without a PR (`branch_pushed`: no
    /// GitHub access); the PR that would have been opened is kept.
    pub would_open: usize,
    /// Items that already had an open or merged PR.
    pub already: usize,
    /// Tended PRs pushed anew (`pr_updated`, docs/github.md "The second
    /// night").
    pub updated: usize,
    /// Items that ended in a failure outcome (docs/loop.md#outcomes).
    pub failed: usize,
    /// Items blocked by a question or by `max_attempts`.
    pub blocked: usize,
    /// Items not run: `not_approved`, `deadline` or `review_queue_full`.
    pub not_run: usize,
    /// Items whose writer changed nothing (`no_changes`).
    pub no_changes: usize,
    /// Tokens the agents reported.
    pub tokens: i64,
    /// Cost in USD, when any agent reported one.
    pub cost_usd: Option<f64>,
    /// Seconds slept at usage limits.
    pub slept_secs: i64,
    /// Seconds between the run's end (or `now`, while it runs) and its
    /// deadline; negative when it ended after it.
    pub left_secs: Option<i64>,
}

/// Sums a run's items (docs/commands.md#report). `now` stands in for the end of a
/// run still going.
pub fn totals(
    run: &RunRow,
    items: &[ItemRow],
    slept_secs: i64,
    now: chrono::DateTime<chrono::Utc>,
) -> NightTotals {
    let count = |os: &[Outcome]| {
        items
            .iter()
            .filter(|i| i.outcome.is_some_and(|o| os.contains(&o)))
            .count()
    };
    let costs: Vec<f64> = items.iter().filter_map(|i| i.facts.cost_usd).collect();
    NightTotals {
        opened: items
            .iter()
            .filter(|i| i.outcome == Some(Outcome::PrOpened))
            .count(),
        would_open: count(&[Outcome::BranchPushed]),
        already: count(&[Outcome::AlreadyOpen, Outcome::AlreadyMerged]),
        updated: count(&[Outcome::PrUpdated]),
        failed: items
            .iter()
            .filter(|i| i.outcome.is_some_and(Outcome::fails_run))
            .count(),
        blocked: count(&[Outcome::Blocked]),
        not_run: count(&[
            Outcome::NotApproved,
            Outcome::Deadline,
            Outcome::ReviewQueueFull,
        ]),
        no_changes: count(&[Outcome::NoChanges]),
        tokens: items.iter().map(|i| i.facts.tokens as i64).sum(),
        cost_usd: (!costs.is_empty()).then(|| costs.iter().sum()),
        slept_secs: slept_secs.max(0),
        left_secs: run
            .deadline
            .map(|d| (d - run.ended_at.unwrap_or(now)).num_seconds()),
    }
}

/// What agents as root could read, said by the card, `drain`'s start and
/// the report when the config allows it (docs/security.md "Without
/// agent_user"): root overrides nightshift's non-dumpable flag.
pub const AGENTS_AS_ROOT_NOTE: &str = "agents run as root (agents_as_root = true, no agent_user): wherever the sandbox is not built ([sandbox] mode = \"off\", or a kernel without it) they can read everything nightshift holds — its memory with the GitHub token and the ledger's URL, the approval key, every file on this machine";

/// `report --json` (docs/commands.md#report---json shape; more fields than the reference names, none
/// fewer), with the night's totals when given.
pub fn to_json_with(run: &RunRow, items: &[ItemRow], totals: Option<&NightTotals>) -> Value {
    let mut v = json!({
        "run_id": run.id.to_string(),
        "status": run.status,
        "kind": run.kind,
        "plan_sha": run.plan_sha,
        "started_at": run.started_at,
        "ended_at": run.ended_at,
        "deadline": run.deadline,
        "agents_as_root": run.agents_as_root.then_some(AGENTS_AS_ROOT_NOTE),
        "items": items.iter().map(|i| json!({
            "index": i.item_index,
            "key": i.item_key,
            "title": i.title,
            "contract_sha": i.contract_sha,
            "outcome": outcome_text(i.outcome),
            "reason": i.facts.reason,
            "question": i.facts.question,
            "branch": i.facts.branch,
            "pr_number": i.facts.pr_number,
            "pr_url": i.facts.pr_url,
            "rounds": i.facts.rounds,
            "tokens": i.facts.tokens,
            "cost_usd": i.facts.cost_usd,
            "seconds": i.ended_at.map(|e| (e - i.started_at).num_seconds()),
            "pr_body": i.facts.pr_body,
            "worker": i.worker,
        })).collect::<Vec<_>>(),
    });
    if let Some(t) = totals {
        v["totals"] = json!({
            "prs_opened": t.opened,
            "branches_pushed": t.would_open,
            "already_open_or_merged": t.already,
            "prs_updated": t.updated,
            "failed": t.failed,
            "blocked": t.blocked,
            "not_run": t.not_run,
            "no_changes": t.no_changes,
            "tokens": t.tokens,
            "cost_usd": t.cost_usd,
            "slept_seconds": t.slept_secs,
            "seconds_left_before_deadline": t.left_secs,
        });
    }
    v
}

/// An item's outcome as the report shows it: `running` while it has none.
fn outcome_text(o: Option<Outcome>) -> &'static str {
    o.map_or(RunStatus::Running.as_str(), Outcome::as_str)
}

/// One table row, as text cells.
struct Row {
    index: String,
    title: String,
    outcome: String,
    pr: String,
    rounds: String,
    time: String,
    usage: String,
    reason: String,
}

/// A reason at least this long (in characters), shared by several rows,
/// is printed once: the later rows point at the first.
const REPEATED_REASON: usize = 40;

/// The rows of `items`, with a long reason that several rows share given
/// in full only on the first of them, which says how many more share it
/// ("… and 4 more"); the others say `same as item N`.
fn rows(items: &[ItemRow]) -> Vec<Row> {
    let mut rows = plain_rows(items);
    let mut first: std::collections::HashMap<String, usize> = Default::default();
    let mut count: Vec<usize> = vec![0; rows.len()];
    for (n, r) in rows.iter().enumerate() {
        if r.reason.chars().count() >= REPEATED_REASON {
            let at = *first.entry(r.reason.clone()).or_insert(n);
            count[at] += 1;
        }
    }
    for n in 0..rows.len() {
        let Some(&at) = first.get(&rows[n].reason) else {
            continue;
        };
        if at == n && count[n] > 1 {
            rows[n].reason = format!(
                "{} … and {} more",
                one_line(&rows[n].reason, 120),
                count[n] - 1
            );
        } else if at != n {
            rows[n].reason = format!("same as item {}", rows[at].index);
        }
    }
    rows
}

fn plain_rows(items: &[ItemRow]) -> Vec<Row> {
    items
        .iter()
        .map(|i| Row {
            // A tended PR has no place in the backlog (docs/github.md).
            index: match (i.item_index, i.facts.pr_number) {
                (0, Some(_)) => "PR".into(),
                (n, _) => n.to_string(),
            },
            title: i.title.clone(),
            outcome: outcome_text(i.outcome).to_string(),
            pr: match (i.facts.pr_number, &i.facts.branch) {
                (Some(n), _) => format!("#{n}"),
                // Pushed; GitHub not reachable (would open) or the create failed.
                (None, Some(_)) if i.outcome == Some(Outcome::BranchPushed) => "would open".into(),
                (None, Some(_)) if i.facts.pr_body.is_some() => "not opened".into(),
                _ => "-".into(),
            },
            rounds: i.facts.rounds.to_string(),
            time: i
                .ended_at
                .map(|e| seconds((e - i.started_at).num_milliseconds()))
                .unwrap_or_else(|| "…".into()),
            usage: format!(
                "{} / {}",
                i.facts.tokens,
                i.facts
                    .cost_usd
                    .map(|c| format!("${c:.2}"))
                    .unwrap_or_else(|| "-".into())
            ),
            reason: match (&i.facts.question, &i.facts.reason) {
                (Some(q), _) => format!("question: {q}"),
                (None, Some(r)) => r.clone(),
                _ => String::new(),
            },
        })
        .collect()
}

fn totals_line(t: &NightTotals) -> String {
    let cost = t
        .cost_usd
        .map(|c| format!("${c:.2}"))
        .unwrap_or_else(|| "cost not reported".into());
    let left = match t.left_secs {
        Some(s) if s >= 0 => format!("{} left before the deadline", seconds(s * 1000)),
        Some(s) => format!("ended {} after the deadline", seconds(-s * 1000)),
        None => "no deadline".into(),
    };
    format!(
        "{} PR(s) opened{}{} · {} already open or merged · {} failed · {} blocked · {} not run{} · slept {} at usage limits · {left} · {} tokens · {cost} for the night",
        t.opened,
        if t.updated > 0 {
            format!(" · {} PR(s) updated", t.updated)
        } else {
            String::new()
        },
        if t.would_open > 0 {
            format!(
                " · {} branch(es) pushed whose PR would have been opened (no GitHub access)",
                t.would_open
            )
        } else {
            String::new()
        },
        t.already,
        t.failed,
        t.blocked,
        t.not_run,
        if t.no_changes > 0 {
            format!(" · {} with nothing to change", t.no_changes)
        } else {
            String::new()
        },
        seconds(t.slept_secs * 1000),
        t.tokens,
    )
}

/// The report `drain` prints at its end: [`to_text_at`] without the PR
/// bodies, and without the warning about agents as root, which the drain
/// printed when it started (one warning per output, not one per part);
/// then the connections the sandbox's proxy refused (`sandbox_refused`,
/// `host:port` in order), worded as `report` words them
/// ([`sandbox_section`]), after a blank line. Why the sandbox was not
/// built is left out: the drain said so when it started.
pub fn to_text_after_drain(
    run: &RunRow,
    items: &[ItemRow],
    slept_secs: i64,
    sandbox_refused: &[String],
) -> String {
    let text = to_text_at(run, items, slept_secs, false, chrono::Utc::now());
    let note = format!("warning: {AGENTS_AS_ROOT_NOTE}\n");
    let mut text = text.replacen(&note, "", 1);
    let sandbox = sandbox_section(None, sandbox_refused);
    if !sandbox.is_empty() {
        // Masked as `report` masks its sections: a host is text an agent chose.
        let _ = write!(text, "\n{}", crate::secret::redact_known(&sandbox));
    }
    text
}

/// What `worker` prints at its end: how many items it ended, then one line
/// per item (index, title, outcome, PR or reason), and how many failed.
pub fn worker_summary(run: Uuid, items: &[ItemRow]) -> String {
    use std::fmt::Write as _;
    let mut s = format!("worker: ended {} item(s) of run {run}\n", items.len());
    let mut failed = 0;
    for i in items {
        let outcome = i.outcome.map_or("running", Outcome::as_str);
        let what = match (&i.facts.pr_url, &i.facts.reason) {
            (Some(url), _) => url.clone(),
            (None, Some(r)) => escape_controls(&one_line(r, 120), false),
            (None, None) => String::new(),
        };
        failed += usize::from(i.outcome.is_some_and(Outcome::fails_run));
        let title = escape_controls(&i.title, false);
        let _ = writeln!(
            s,
            "  {} \"{title}\" · {outcome}{}",
            i.item_index,
            if what.is_empty() {
                String::new()
            } else {
                format!(" · {what}")
            }
        );
    }
    if failed > 0 {
        let _ = writeln!(
            s,
            "worker: {failed} of its item(s) failed (exit 1; `nightshift report` has the run)"
        );
    }
    s
}

/// The human report (docs/commands.md#report): a header, one table row per
/// item (item, outcome, PR, rounds, time, tokens/cost, reason), the totals,
/// then the PR bodies when `show_bodies` (and, without GitHub access, the
/// PRs that would have been opened); `now` stands in for the end of a run
/// still going.
pub fn to_text_at(
    run: &RunRow,
    items: &[ItemRow],
    slept_secs: i64,
    show_bodies: bool,
    now: chrono::DateTime<chrono::Utc>,
) -> String {
    let mut s = String::new();
    let tz = run.zone();
    let _ = writeln!(
        s,
        "run {} · {} · {} · started {}",
        run.id,
        run.kind,
        status_words(run, items),
        run.started_at
            .with_timezone(&tz)
            .format("%Y-%m-%d %H:%M %Z")
    );
    let _ = writeln!(s, "plan {}", run.plan_sha);
    if run.agents_as_root {
        let _ = writeln!(s, "warning: {AGENTS_AS_ROOT_NOTE}");
    }
    let _ = writeln!(s);
    item_table(&mut s, items);
    worker_lines(&mut s, items);
    let _ = writeln!(s);
    let _ = writeln!(s, "{}", totals_line(&totals(run, items, slept_secs, now)));
    let prs: Vec<&ItemRow> = items.iter().filter(|i| i.facts.pr_url.is_some()).collect();
    if !prs.is_empty() {
        let _ = writeln!(s);
        for i in prs {
            let _ = writeln!(
                s,
                "  #{} {}",
                i.facts.pr_number.unwrap_or(0),
                i.facts.pr_url.as_deref().unwrap_or("")
            );
        }
    }
    append_bodies(&mut s, items, show_bodies);
    s
}

/// Which worker (`host:pid:n`, docs/workers.md) ran which items, when more
/// than one worker ran the run's items: one line per worker.
fn worker_lines(s: &mut String, items: &[ItemRow]) {
    let mut by: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
    for i in items {
        if let Some(w) = i.worker.as_deref() {
            by.entry(w).or_default().push(i.item_index.to_string());
        }
    }
    if by.len() < 2 {
        return;
    }
    let _ = writeln!(s);
    for (w, idx) in by {
        let _ = writeln!(
            s,
            "  worker {} ran items {}",
            escape_controls(w, false),
            idx.join(", ")
        );
    }
}

/// The terminal table: a header row and a row per item, each column as
/// wide as its widest cell (titles cut to 40 characters, reasons to 160).
fn item_table(s: &mut String, items: &[ItemRow]) {
    let rows = rows(items);
    let cut = |t: &str, n: usize| {
        if t.chars().count() > n {
            format!("{}…", t.chars().take(n - 1).collect::<String>())
        } else {
            t.to_string()
        }
    };
    let head = Row {
        index: "#".into(),
        title: "item".into(),
        outcome: "outcome".into(),
        pr: "PR".into(),
        rounds: "rounds".into(),
        time: "time".into(),
        usage: "tokens / cost".into(),
        reason: "reason".into(),
    };
    let all: Vec<&Row> = std::iter::once(&head).chain(rows.iter()).collect();
    let w = |f: &dyn Fn(&Row) -> usize| all.iter().map(|r| f(r)).max().unwrap_or(0);
    let (wi, wt, wo, wp, wr, wm, wu) = (
        w(&|r| r.index.chars().count()),
        w(&|r| cut(&escape_controls(&r.title, false), 40).chars().count()),
        w(&|r| r.outcome.chars().count()),
        w(&|r| r.pr.chars().count()),
        w(&|r| r.rounds.chars().count()),
        w(&|r| r.time.chars().count()),
        w(&|r| r.usage.chars().count()),
    );
    let pad = |t: &str, n: usize| format!("{t}{}", " ".repeat(n.saturating_sub(t.chars().count())));
    for r in &all {
        let line = format!(
            "{:>wi$}  {}  {}  {}  {:>wr$}  {:>wm$}  {}  {}",
            r.index,
            pad(&cut(&escape_controls(&r.title, false), 40), wt),
            pad(&r.outcome, wo),
            pad(&r.pr, wp),
            r.rounds,
            r.time,
            pad(&r.usage, wu),
            escape_controls(&one_line(&r.reason, 160), false)
        );
        let _ = writeln!(s, "{}", line.trim_end());
    }
}

/// The run's status (docs/loop.md#run-statuses), with its failed items when it completed with
/// some: "completed, 1 item failed" says why `drain` exited 1 (docs/commands.md#exit-codes).
fn status_words(run: &RunRow, items: &[ItemRow]) -> String {
    let failed = items
        .iter()
        .filter(|i| i.outcome.is_some_and(Outcome::fails_run))
        .count();
    match failed {
        0 => run.status.to_string(),
        1 => format!("{}, 1 item failed", run.status),
        n => format!("{}, {n} items failed", run.status),
    }
}

fn append_bodies(s: &mut String, items: &[ItemRow], show_bodies: bool) {
    if show_bodies {
        for i in items.iter().filter(|i| i.facts.pr_body.is_some()) {
            let what = if i.facts.pr_url.is_some() {
                "PR body"
            } else {
                "PR that would have been opened (no GitHub access)"
            };
            let _ = writeln!(
                s,
                "\n──── item {} · {what} · branch {}\n{}",
                i.item_index,
                i.facts.branch.as_deref().unwrap_or("?"),
                fold_contract(i.facts.pr_body.as_deref().unwrap_or(""))
            );
        }
    } else if items
        .iter()
        .any(|i| i.facts.pr_body.is_some() && i.facts.pr_url.is_none())
    {
        let _ = writeln!(
            s,
            "\nPRs that would have been opened are kept with their bodies: `nightshift report --show-body`."
        );
    }
}

/// A PR body for the terminal: its folded contract JSON (80 lines and more
/// per item, the same as the card `plan` printed) replaced by one line
/// saying where it is; the PR on GitHub and `report --json` keep it whole.
pub fn fold_contract(body: &str) -> String {
    const HEAD: &str = "<details><summary>Contract (sha256 ";
    let Some(start) = body.find(HEAD) else {
        return body.to_string();
    };
    let after = &body[start..];
    let Some(open) = after.find("</summary>\n\n") else {
        return body.to_string();
    };
    let sha = &after[HEAD.len()..open].trim_end_matches(')');
    let fenced = &after[open + "</summary>\n\n".len()..];
    let fence: String = fenced.chars().take_while(|c| *c == '`').collect();
    let close = format!("\n{fence}\n</details>\n");
    let Some(end) = fenced.find(&close).filter(|_| fence.len() >= 3) else {
        return body.to_string();
    };
    let rest = &fenced[end + close.len()..];
    format!(
        "{}Contract (sha256 {sha}): its JSON is in the PR and in `nightshift report --json` (`pr_body`)\n{rest}",
        &body[..start]
    )
}

/// The report as GitHub-flavoured markdown, for pasting into an issue or a
/// chat (`report --markdown`). Same facts as [`to_text_at`].
pub fn to_markdown(
    run: &RunRow,
    items: &[ItemRow],
    slept_secs: i64,
    show_bodies: bool,
    now: chrono::DateTime<chrono::Utc>,
) -> String {
    let mut s = String::new();
    let tz = run.zone();
    let _ = writeln!(s, "### nightshift run `{}`\n", run.id);
    let _ = writeln!(
        s,
        "{} · **{}** · started {} · plan `{}`\n",
        run.kind,
        status_words(run, items),
        run.started_at
            .with_timezone(&tz)
            .format("%Y-%m-%d %H:%M %Z"),
        short(&run.plan_sha)
    );
    if run.agents_as_root {
        let _ = writeln!(s, "**Warning:** {}\n", md_text(AGENTS_AS_ROOT_NOTE));
    }
    let _ = writeln!(
        s,
        "| # | item | outcome | PR | rounds | time | tokens / cost | reason |\n|---:|---|---|---|---:|---:|---|---|"
    );
    let cell = |t: &str| md_text(t).replace('|', "\\|");
    for (r, i) in rows(items).iter().zip(items) {
        let pr = match (&i.facts.pr_url, i.facts.pr_number) {
            (Some(u), Some(n)) => match web_link(u) {
                Some(u) => format!("[#{n}]({u})"),
                None => format!("#{n}"),
            },
            _ => r.pr.clone(),
        };
        let _ = writeln!(
            s,
            "| {} | {} | `{}` | {} | {} | {} | {} | {} |",
            r.index,
            cell(&r.title),
            r.outcome,
            pr,
            r.rounds,
            r.time,
            r.usage,
            cell(&one_line(&r.reason, 300))
        );
    }
    let _ = writeln!(s, "\n{}", totals_line(&totals(run, items, slept_secs, now)));
    if show_bodies {
        for i in items.iter().filter(|i| i.facts.pr_body.is_some()) {
            let what = if i.facts.pr_url.is_some() {
                "PR body"
            } else {
                "PR that would have been opened"
            };
            let _ = writeln!(
                s,
                "\n<details><summary>item {} · {what}</summary>\n\n{}\n</details>",
                i.item_index,
                fold_contract(i.facts.pr_body.as_deref().unwrap_or(""))
            );
        }
    }
    s
}

/// A wall time in milliseconds as `1.2s`, `3m20s` or `1h5m`.
fn seconds(ms: i64) -> String {
    let ms = ms.max(0);
    if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else {
        crate::config::format_duration(Duration::from_secs((ms / 1000) as u64))
    }
}

/// The reason of an item stopped by `outcome` after an earlier round of it
/// failed: for `timed_out` and `budget_exceeded`, the stop followed by that
/// failure (`last`: its step and telling line, from [`gate_failure`] or the
/// writer's or reviewer's failure), so the report says what went wrong
/// before the clock or the money ran out (docs/loop.md). Other outcomes, or
/// an empty `last` (no round failed), keep `reason` as it is.
pub fn after_failure(outcome: Outcome, reason: String, last: &str) -> String {
    if last.is_empty() || !matches!(outcome, Outcome::TimedOut | Outcome::BudgetExceeded) {
        return reason;
    }
    format!("{reason}; the round before failed: {last}")
}

/// A failed gate as the report says it: the step, the command, how it
/// ended (exit code, or timed out when `exit_code` is `None`) and `said`,
/// the telling line of its output, e.g. "the gate failed in round 2:
/// `sh test.sh` exited 1: unknown word: bogus".
pub fn gate_failure(command: &str, exit_code: Option<i32>, said: &str, round: u32) -> String {
    let how = exit_code.map_or_else(|| "timed out".to_string(), |c| format!("exited {c}"));
    let said = if said.trim().is_empty() {
        "it printed nothing"
    } else {
        said.trim()
    };
    format!("the gate failed in round {round}: `{command}` {how}: {said}")
}

#[cfg(test)]
mod escape_tests {
    use super::*;

    #[test]
    fn controls_separators_and_bidi_are_written_out() {
        assert_eq!(
            escape_controls("a\nb\r\tc\u{1b}[31m\u{2028}\u{202e}d\u{200b}", false),
            "a\\nb\\r\\tc\\u{1b}[31m\\u{2028}\\u{202e}d\\u{200b}"
        );
        assert_eq!(escape_controls("a\n\tb\rc", true), "a\n\tb\\rc");
        assert_eq!(md_text("x <!-- y"), "x &lt;!-- y");
    }

    #[test]
    fn a_code_span_outlasts_every_backtick_run_inside() {
        assert_eq!(md_code("src/a.rs"), "`src/a.rs`");
        assert_eq!(md_code("a`b``c"), "```a`b``c```");
        assert_eq!(md_code("`x"), "`` `x ``");
        assert_eq!(md_code("a\n- ✅ b"), "`a\\n- ✅ b`");
        // Rendered, the span holds exactly the (escaped) text.
        for text in ["a`b", "``", "x\n`y`\nz", "` ", "ends`"] {
            let md = md_code(text);
            let parser = pulldown_cmark::Parser::new(&md);
            let code: Vec<String> = parser
                .filter_map(|e| match e {
                    pulldown_cmark::Event::Code(c) => Some(c.to_string()),
                    _ => None,
                })
                .collect();
            assert_eq!(code, [escape_controls(text, false)], "{md}");
        }
    }

    #[test]
    fn a_fence_outlasts_every_backtick_run_inside() {
        let inner = "before\n```\n## forged\n````\nafter";
        let md = md_fence("text", inner);
        assert!(
            md.starts_with("`````text\n") && md.ends_with("\n`````"),
            "{md}"
        );
        let events: Vec<_> = pulldown_cmark::Parser::new(&md).collect();
        assert!(
            !events.iter().any(|e| matches!(
                e,
                pulldown_cmark::Event::Start(pulldown_cmark::Tag::Heading { .. })
            )),
            "{events:?}"
        );
    }

    #[test]
    fn only_plain_web_links_from_github_data_are_links() {
        for good in [
            "https://github.com/o/r/pull/7",
            "http://127.0.0.1:8080/o/r/pull/7",
        ] {
            assert_eq!(web_link(good), Some(good));
        }
        for bad in [
            "javascript:alert(1)",
            "data:text/html,<b>x</b>",
            "JaVaScRiPt:alert(1)",
            "https://x.example/a\" onmouseover=\"x",
            "https://x.example/a) [evil](https://evil.example",
            "file:///etc/passwd",
            "//github.com/o/r",
        ] {
            assert_eq!(web_link(bad), None, "{bad}");
        }
    }
}
