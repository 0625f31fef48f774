//! What a person reads in the morning: the PR body (the evidence card of one
//! item) and the report of a run (SPEC §2 `report`, §8 PR body).
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

use crate::contract::Contract;
use crate::forge;
use crate::gate::GateRun;
use crate::ledger::records::{ItemRow, RunRow};
use crate::review::Verdict;

/// GitHub's PR body limit, in characters.
pub const BODY_LIMIT: usize = 65_536;

/// One round as the PR body lists it.
#[derive(Debug, Clone)]
pub struct RoundSummary {
    /// 1-based round.
    pub n: u32,
    /// `tests_failed`, `review_rejected`, `approved`, `error`.
    pub result: String,
    /// Failure signature or findings.
    pub note: String,
    /// Gate runs of the round.
    pub gate: Vec<GateRun>,
    /// The verdict, when the reviewer ran.
    pub verdict: Option<Verdict>,
}

/// Everything the PR body shows.
#[derive(Debug, Clone)]
pub struct Evidence {
    /// The sealed contract.
    pub contract: Contract,
    /// Its SHA.
    pub contract_sha: String,
    /// Run id.
    pub run_id: Uuid,
    /// Branch.
    pub branch: String,
    /// Base commit.
    pub base_commit: String,
    /// Files changed according to git.
    pub changed: Vec<crate::proof::FileChange>,
    /// Every round.
    pub rounds: Vec<RoundSummary>,
    /// The approving verdict.
    pub verdict: Verdict,
    /// Wall time of the item.
    pub duration: Duration,
    /// Tokens used (as reported by the agents).
    pub tokens: u64,
    /// Cost in USD, where reported.
    pub cost_usd: Option<f64>,
    /// Writer findings filed as issues.
    pub findings: Vec<String>,
}

/// Renders the PR body: the morning-review card (SPEC §8). At most
/// [`BODY_LIMIT`] characters; gate output tails are shortened first.
pub fn pr_body(e: &Evidence) -> String {
    for tail in [4000usize, 1500, 400, 0] {
        let body = render_body(e, tail);
        if body.chars().count() <= BODY_LIMIT {
            return body;
        }
    }
    // Even without gate output the body is too long (a huge contract): cut
    // the contract text, keeping the marker at the end.
    let body = render_body(e, 0);
    let marker = forge::item_marker(&e.contract.key);
    let keep: String = body.chars().take(BODY_LIMIT - marker.chars().count() - 200).collect();
    format!("{keep}\n\n_[nightshift: body cut to fit GitHub's 65,536-character limit]_\n\n{marker}\n")
}

fn render_body(e: &Evidence, tail_chars: usize) -> String {
    let c = &e.contract;
    let mut s = String::new();
    let _ = writeln!(s, "## {}\n", c.title);
    let _ = writeln!(s, "Opened by **nightshift** (run `{}`). Nothing was merged; a person decides.\n", e.run_id);
    let _ = writeln!(s, "| | |\n|---|---|");
    let _ = writeln!(s, "| contract | `{}` |", e.contract_sha);
    let _ = writeln!(s, "| branch | `{}` from `{}` |", e.branch, short(&e.base_commit));
    let _ = writeln!(s, "| rounds | {} of {} |", e.rounds.len(), c.limits.rounds.value);
    let _ = writeln!(s, "| time | {} |", crate::config::format_duration(Duration::from_secs(e.duration.as_secs().max(1))));
    let cost = e.cost_usd.map(|c| format!("${c:.4}")).unwrap_or_else(|| "not reported by the agent".into());
    let _ = writeln!(s, "| tokens / cost | {} / {} |", e.tokens, cost);
    let _ = writeln!(s, "| verdict | **{}** |\n", e.verdict.verdict.as_str());

    let _ = writeln!(s, "### Acceptance conditions");
    if c.accept.is_empty() {
        let _ = writeln!(s, "_None written; the gate and the reviewer decided._");
    }
    for a in &c.accept {
        let _ = writeln!(s, "- [ ] {a}");
    }
    let _ = writeln!(s);

    let _ = writeln!(s, "### Gate (run by nightshift, not by the agent)");
    if let Some(last) = e.rounds.last() {
        for g in &last.gate {
            let _ = writeln!(s, "- `{}` → exit {} in {:.1}s", g.command, g.exit_code.map(|c| c.to_string()).unwrap_or("none".into()), g.duration_ms as f64 / 1000.0);
            if tail_chars > 0 && !g.output_tail.trim().is_empty() {
                let (t, cut) = tail_chars_of(&g.output_tail, tail_chars);
                let _ = writeln!(s, "\n<details><summary>output tail{}</summary>\n\n```\n{}\n```\n</details>\n", if cut { " (cut to the last lines)" } else { "" }, t.trim_end().replace("```", "ʼʼʼ"));
            }
        }
        if last.gate.is_empty() {
            let _ = writeln!(s, "_No gate command is configured for this item._");
        }
    }
    let _ = writeln!(s);

    let _ = writeln!(s, "### Reviewer verdict: {}", e.verdict.verdict.as_str());
    for f in &e.verdict.findings {
        let _ = writeln!(s, "- {f}");
    }
    if e.verdict.findings.is_empty() {
        let _ = writeln!(s, "_No findings._");
    }
    let _ = writeln!(s);

    let _ = writeln!(s, "### Files changed (from git)");
    for f in &e.changed {
        let _ = writeln!(s, "- `{}` {} +{} −{}", f.path, f.status.letter(), f.added, f.removed);
    }
    let _ = writeln!(s);

    let _ = writeln!(s, "### Rounds");
    for r in &e.rounds {
        let note = if r.note.is_empty() { String::new() } else { format!(" — {}", one_line(&r.note, 200)) };
        let _ = writeln!(s, "{}. {}{note}", r.n, r.result);
    }
    let _ = writeln!(s);

    if !e.findings.is_empty() {
        let _ = writeln!(s, "### Findings filed as issues (proposals, not in this PR)");
        for f in &e.findings {
            let _ = writeln!(s, "- {f}");
        }
        let _ = writeln!(s);
    }

    let _ = writeln!(s, "### Still for a person to judge");
    let _ = writeln!(s, "- Does the change do what the item means, not only what the conditions say?");
    let _ = writeln!(s, "- Is anything outside the diff affected (docs, migrations, other callers)?");
    if c.verify.is_empty() {
        let _ = writeln!(s, "- No gate ran: the change is untested by nightshift.");
    }
    if e.cost_usd.is_none() {
        let _ = writeln!(s, "- The agent reported no cost: the cost cap was not enforced.");
    }
    let _ = writeln!(s);

    let _ = writeln!(s, "<details><summary>Contract (sha256 {})</summary>\n\n```json\n{}\n```\n</details>\n", short(&e.contract_sha), serde_json::to_string_pretty(&serde_json::from_str::<Value>(&c.canonical_json()).unwrap_or(Value::Null)).unwrap_or_default().replace("```", "ʼʼʼ"));
    let _ = writeln!(s, "{}", forge::item_marker(&c.key));
    s
}

fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}

fn one_line(s: &str, max: usize) -> String {
    let t: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if t.chars().count() > max { format!("{}…", t.chars().take(max).collect::<String>()) } else { t }
}

/// The last `max` characters of `s` and whether it was cut.
fn tail_chars_of(s: &str, max: usize) -> (String, bool) {
    let n = s.chars().count();
    if n <= max {
        return (s.to_string(), false);
    }
    (s.chars().skip(n - max).collect(), true)
}

/// `report --json` (SPEC §2).
pub fn to_json(run: &RunRow, items: &[ItemRow]) -> Value {
    json!({
        "run_id": run.id.to_string(),
        "status": run.status,
        "kind": run.kind,
        "plan_sha": run.plan_sha,
        "started_at": run.started_at,
        "ended_at": run.ended_at,
        "deadline": run.deadline,
        "items": items.iter().map(|i| json!({
            "index": i.item_index,
            "key": i.item_key,
            "title": i.title,
            "contract_sha": i.contract_sha,
            "outcome": i.outcome.clone().unwrap_or_else(|| "running".into()),
            "reason": i.reason,
            "question": i.question,
            "branch": i.branch,
            "pr_number": i.pr_number,
            "pr_url": i.pr_url,
            "rounds": i.rounds,
            "tokens": i.tokens,
            "cost_usd": i.cost_usd,
            "seconds": i.ended_at.map(|e| (e - i.started_at).num_seconds()),
            "pr_body": i.pr_body,
        })).collect::<Vec<_>>(),
    })
}

/// The human report: one line per item, then the PRs that would have been
/// opened (no GitHub access) with their bodies when `show_bodies`.
pub fn to_text(run: &RunRow, items: &[ItemRow], slept_secs: i64, show_bodies: bool) -> String {
    let mut s = String::new();
    let tz: chrono_tz::Tz = run.timezone.as_deref().and_then(|z| z.parse().ok()).unwrap_or(chrono_tz::UTC);
    let _ = writeln!(s, "run {} · {} · {} · started {}", run.id, run.kind, run.status, run.started_at.with_timezone(&tz).format("%Y-%m-%d %H:%M %Z"));
    let _ = writeln!(s, "plan {}", run.plan_sha);
    let _ = writeln!(s);
    let w = items.iter().map(|i| i.title.chars().count().min(48)).max().unwrap_or(5).max(5);
    let _ = writeln!(s, "  #  {:<w$}  {:<15} {:>6} {:>7}  {}", "item", "outcome", "rounds", "time", "PR / reason");
    for i in items {
        let title: String = i.title.chars().take(48).collect();
        let pad = w.saturating_sub(title.chars().count());
        let time = i.ended_at.map(|e| seconds((e - i.started_at).num_milliseconds())).unwrap_or_else(|| "…".into());
        let pr = match (&i.pr_url, &i.branch) {
            (Some(u), _) => u.clone(),
            (None, Some(b)) if i.pr_body.is_some() => format!("branch {b} pushed; PR not opened"),
            _ => String::new(),
        };
        let why = match (&i.question, &i.reason) {
            (Some(q), _) => format!("question: {q}"),
            (None, Some(r)) => r.clone(),
            _ => String::new(),
        };
        let tail = [pr, why].into_iter().filter(|x| !x.is_empty()).collect::<Vec<_>>().join(" · ");
        let _ = writeln!(s, "{:>3}  {}{}  {:<15} {:>6} {:>7}  {}", i.item_index, title, " ".repeat(pad), i.outcome.as_deref().unwrap_or("running"), i.rounds, time, tail);
    }
    let count = |o: &str| items.iter().filter(|i| i.outcome.as_deref() == Some(o)).count();
    let failed = items.iter().filter(|i| i.outcome.as_deref().is_some_and(|o| !crate::run::OK_OUTCOMES.contains(&o))).count();
    let costs: Vec<f64> = items.iter().filter_map(|i| i.cost_usd).collect();
    let cost = if costs.is_empty() { "cost not reported".to_string() } else { format!("${:.2}", costs.iter().fold(0.0, |a, b| a + b)) };
    let tokens: i64 = items.iter().map(|i| i.tokens).sum();
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "{} PR(s) opened · {} already open · {} failed · {} blocked · {} tokens · {cost} · slept {} at usage limits",
        count("pr_opened"),
        count("already_open"),
        failed,
        count("blocked"),
        tokens,
        seconds(slept_secs.max(0) * 1000),
    );
    if show_bodies {
        for i in items.iter().filter(|i| i.pr_body.is_some()) {
            let what = if i.pr_url.is_some() { "PR body" } else { "PR that would have been opened (no GitHub access)" };
            let _ = writeln!(s, "\n──── item {} · {what} · branch {}\n{}", i.item_index, i.branch.as_deref().unwrap_or("?"), i.pr_body.as_deref().unwrap_or(""));
        }
    } else if items.iter().any(|i| i.pr_body.is_some() && i.pr_url.is_none()) {
        let _ = writeln!(s, "\nPRs that would have been opened are kept with their bodies: `nightshift report --show-body`.");
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
