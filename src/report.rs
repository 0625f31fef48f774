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

use crate::contract::Contract;
use crate::forge;
use crate::gate::GateRun;
use crate::ledger::items::ItemRow;
use crate::ledger::runs::RunRow;
use crate::outcome::{Outcome, RoundResult, RunStatus};
use crate::review::Verdict;

/// GitHub's PR body limit, in characters.
pub use crate::forge::BODY_LIMIT;

/// Where a run's page is kept by default: `.nightshift/reports/<run id>.html`
/// in the repository (ignored by `.nightshift/.gitignore`).
pub fn page_path(repo: &std::path::Path, run: Uuid) -> std::path::PathBuf {
    repo.join(crate::config::DIR)
        .join("reports")
        .join(format!("{run}.html"))
}

/// One round as the PR body lists it.
#[derive(Debug, Clone)]
pub struct RoundSummary {
    /// 1-based round.
    pub n: u32,
    /// Wall time of the round, seconds (writer, gate and review).
    pub seconds: u64,
    /// How the round ended: approved, or the failing step's outcome.
    pub result: RoundResult,
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
    /// Setup commands run in the fresh checkout (docs/loop.md#checkout), in order.
    pub setup: Vec<GateRun>,
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
    /// The change as a unified diff from the base (from git).
    pub diff: String,
    /// The writer's own account of its last round (not evidence).
    pub writer_note: String,
    /// The reviewer's prose besides its verdict.
    pub reviewer_note: String,
    /// What the agents' CLIs reported in the last round although the calls
    /// did not fail (denied tools, failed tool calls), `role: sentence`; and
    /// what nightshift saw in the checkout that the PR cannot carry,
    /// `checkout: sentence`.
    pub agent_notes: Vec<String>,
    /// Earlier PRs of this night that change some of the same files: merged
    /// one after the other they may conflict (docs/github.md#pr-body: merge order).
    pub overlaps: Vec<Overlap>,
}

/// An earlier PR of the same night that changes some of the same files
/// (the ledger reads the night's pushed branches as these).
pub use crate::ledger::events::Overlap;

/// The earlier PRs in `opened` (each a title, branch, PR number and the
/// files it changes) that change any of `changed`, with the shared files.
pub fn overlaps(opened: &[Overlap], changed: &[crate::proof::FileChange]) -> Vec<Overlap> {
    opened
        .iter()
        .filter_map(|o| {
            let files: Vec<String> = o
                .files
                .iter()
                .filter(|f| changed.iter().any(|c| &c.path == *f))
                .cloned()
                .collect();
            (!files.is_empty()).then(|| Overlap { files, ..o.clone() })
        })
        .collect()
}

/// Renders the PR body: the morning-review card (docs/github.md#pr-body). At most
/// [`BODY_LIMIT`] characters: command output tails are shortened first (each
/// cut one says so and how much was left out), then the contract text.
pub fn pr_body(e: &Evidence) -> String {
    for tail in [4000usize, 1500, 400, 0] {
        let body = render_body(e, tail);
        if body.chars().count() <= BODY_LIMIT {
            return body;
        }
    }
    // Even without output tails the body is too long (a huge contract): the
    // forge's last guard cuts it, keeping the marker at the end.
    forge::fit_body(&render_body(e, 0), &e.contract.key)
}

/// One command with exit code, duration and the tail of its output.
fn command_lines(s: &mut String, g: &GateRun, tail_chars: usize) {
    let code = match (g.exit_code, g.timed_out) {
        (_, true) => "killed at the timeout".to_string(),
        (Some(c), _) => format!("exit {c}"),
        (None, _) => "killed by a signal".to_string(),
    };
    let mark = if g.passed() { "✅" } else { "❌" };
    let _ = writeln!(
        s,
        "- {mark} {} → {code} in {:.1}s",
        md_code(&g.command),
        g.duration_ms as f64 / 1000.0
    );
    if g.output_tail.trim().is_empty() {
        return;
    }
    if tail_chars == 0 {
        let _ = writeln!(
            s,
            "  _(output left out to fit GitHub's body limit; it is in the run's logs)_"
        );
        return;
    }
    let total = g.output_tail.chars().count();
    let (t, cut) = tail_chars_of(&g.output_tail, tail_chars);
    let label = if cut {
        format!("output: last {tail_chars} of {total} characters kept (cut to its tail)")
    } else {
        "output".to_string()
    };
    let _ = writeln!(
        s,
        "\n<details><summary>{label}</summary>\n\n{}\n</details>\n",
        md_fence("", t.trim_end())
    );
}

/// The PR body with command output tails of at most `tail_chars`
/// characters each (0: left out), section by section as docs/github.md#pr-body
/// lists them; the item marker is its last line.
fn render_body(e: &Evidence, tail_chars: usize) -> String {
    let mut s = String::new();
    body_header(&mut s, e);
    acceptance_section(&mut s, e);
    command_sections(&mut s, e, tail_chars);
    verdict_section(&mut s, e);
    files_section(&mut s, e);
    diff_and_notes(&mut s, e, tail_chars);
    rounds_section(&mut s, e);
    findings_section(&mut s, e);
    judge_section(&mut s, e);
    contract_section(&mut s, e);
    // Only the last line may carry an item marker (forge::carries_marker):
    // any copy inside quoted output or findings is defused.
    s = s.replace("<!-- nightshift-item:", "&lt;!-- nightshift-item:");
    let _ = writeln!(s, "{}", forge::item_marker(&e.contract.key));
    s
}

/// The title, who prepared it, and the table of contract, branch, rounds,
/// time, tokens and cost, and verdict.
fn body_header(s: &mut String, e: &Evidence) {
    let c = &e.contract;
    let _ = writeln!(s, "## {}\n", c.title);
    let _ = writeln!(
        s,
        "Prepared by **nightshift** (run `{}`). Nothing was merged; a person decides.\n",
        e.run_id
    );
    let _ = writeln!(s, "| | |\n|---|---|");
    let _ = writeln!(s, "| contract | `{}` |", e.contract_sha);
    let _ = writeln!(
        s,
        "| branch | `{}` from `{}` (`{}`) |",
        e.branch,
        c.base,
        short(&e.base_commit)
    );
    let _ = writeln!(
        s,
        "| rounds | {} of {} |",
        e.rounds.len(),
        c.limits.rounds.value
    );
    let _ = writeln!(
        s,
        "| time | {} |",
        crate::config::format_duration(Duration::from_secs(e.duration.as_secs().max(1)))
    );
    let cost = e
        .cost_usd
        .map(|c| format!("${c:.4}"))
        .unwrap_or_else(|| "not reported by the agent".into());
    let _ = writeln!(s, "| tokens / cost | {} / {} |", e.tokens, cost);
    let _ = writeln!(s, "| verdict | **{}** |\n", e.verdict.verdict.as_str());
}

/// The acceptance conditions as boxes for a person to tick, each with the
/// reviewer's judgement.
fn acceptance_section(s: &mut String, e: &Evidence) {
    let c = &e.contract;
    let _ = writeln!(s, "### Acceptance conditions (for you to check)");
    if c.accept.is_empty() {
        let _ = writeln!(s, "_None written; the gate and the reviewer decided._");
    }
    // Each with the reviewer's judgement and where it saw the evidence: a
    // claim to check, not a proof.
    for (i, a) in c.accept.iter().enumerate() {
        let judged = e
            .verdict
            .conditions
            .iter()
            .find(|k| k.index as usize == i + 1);
        match judged {
            Some(k) if k.met && !k.evidence.trim().is_empty() => {
                let _ = writeln!(
                    s,
                    "- [ ] {a}\n  — reviewer: met; evidence: {}",
                    md_text(&one_line(&k.evidence, 500))
                );
            }
            Some(k) if k.met => {
                let _ = writeln!(s, "- [ ] {a}\n  — reviewer: met (no evidence named)");
            }
            Some(k) => {
                let _ = writeln!(
                    s,
                    "- [ ] {a}\n  — reviewer: NOT met; {}",
                    md_text(&one_line(&k.evidence, 500))
                );
            }
            None => {
                let _ = writeln!(s, "- [ ] {a}\n  — reviewer: not judged");
            }
        }
    }
    let _ = writeln!(s);
}

/// The setup commands (when there were any) and the last round's gate, each
/// with its exit code, time and output tail of at most `tail_chars`.
fn command_sections(s: &mut String, e: &Evidence, tail_chars: usize) {
    if !e.setup.is_empty() {
        let _ = writeln!(s, "### Setup (run by nightshift in the fresh checkout)");
        for g in &e.setup {
            command_lines(s, g, tail_chars);
        }
        let _ = writeln!(s);
    }

    let _ = writeln!(s, "### Gate (run by nightshift, not by the agent)");
    if let Some(last) = e.rounds.last() {
        for g in &last.gate {
            command_lines(s, g, tail_chars);
        }
        if last.gate.is_empty() {
            let _ = writeln!(s, "_No gate command is configured for this item._");
        }
    }
    let _ = writeln!(s);
}

/// The reviewer's verdict and its findings (at most 30 shown).
fn verdict_section(s: &mut String, e: &Evidence) {
    let _ = writeln!(s, "### Reviewer verdict: {}", e.verdict.verdict.as_str());
    // Findings are the agents' words: each is capped so that a flood of
    // them cannot push the evidence sections out of the body.
    for f in e.verdict.findings.iter().take(30) {
        let _ = writeln!(s, "- {}", md_text(&one_line(f, 1000)));
    }
    if e.verdict.findings.len() > 30 {
        let _ = writeln!(
            s,
            "- … and {} more (in the ledger)",
            e.verdict.findings.len() - 30
        );
    }
    if e.verdict.findings.is_empty() {
        let _ = writeln!(s, "_No findings._");
    }
    let _ = writeln!(s);
}

/// The files changed according to git, with their totals and how to look
/// at the branch.
fn files_section(s: &mut String, e: &Evidence) {
    let _ = writeln!(s, "### Files changed (from git, not from the agent)");
    let (add, del) = e
        .changed
        .iter()
        .fold((0, 0), |(a, d), f| (a + f.added, d + f.removed));
    for f in &e.changed {
        let what = if f.binary {
            "binary".to_string()
        } else {
            format!("+{} −{}", f.added, f.removed)
        };
        let renamed = f
            .old_path
            .as_ref()
            .map(|o| format!(" (from {})", md_code(o)))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "- {}{renamed} {} {what}",
            md_code(&f.path),
            f.status.letter()
        );
    }
    let _ = writeln!(s, "\n{} file(s), +{add} −{del}\n", e.changed.len());
    let _ = writeln!(
        s,
        "To look at it yourself: `git fetch origin {} && git diff {}..FETCH_HEAD`\n",
        e.branch,
        short(&e.base_commit)
    );
}

/// The diff (its head, within six times `tail_chars`) and the writer's and
/// reviewer's own words (their tails), folded; none of them when
/// `tail_chars` is 0.
fn diff_and_notes(s: &mut String, e: &Evidence, tail_chars: usize) {
    if !e.diff.trim().is_empty() && tail_chars > 0 {
        let budget = tail_chars * 6;
        let lines = e.diff.lines().count();
        let (shown, cut) = head_chars_of(&e.diff, budget);
        let note = if cut {
            format!(" (first {} of {lines} lines)", shown.lines().count())
        } else {
            format!(" ({lines} lines)")
        };
        let _ = writeln!(
            s,
            "<details><summary>The diff{note}</summary>\n\n{}\n</details>\n",
            md_fence("diff", shown.trim_end())
        );
    }
    for (title, text) in [
        (
            "The writer's account (its own words, not evidence)",
            &e.writer_note,
        ),
        ("The reviewer's notes", &e.reviewer_note),
    ] {
        if !text.trim().is_empty() && tail_chars > 0 {
            let (t, cut) = tail_chars_of(text, tail_chars / 2);
            let _ = writeln!(
                s,
                "<details><summary>{title}{}</summary>\n\n{}\n</details>\n",
                if cut { " (last part)" } else { "" },
                md_fence("text", t.trim())
            );
        }
    }
}

/// Each round: its result, time, gate exit codes and note.
fn rounds_section(s: &mut String, e: &Evidence) {
    let _ = writeln!(s, "### Rounds");
    for r in &e.rounds {
        let gate: Vec<String> = r
            .gate
            .iter()
            .map(|g| {
                format!(
                    "{} {}",
                    md_code(&g.command),
                    g.exit_code
                        .map(|c| format!("exit {c}"))
                        .unwrap_or("killed".into())
                )
            })
            .collect();
        let gate = if gate.is_empty() {
            String::new()
        } else {
            format!(" (gate: {})", gate.join(", "))
        };
        let note = if r.note.is_empty() {
            String::new()
        } else {
            format!(" — {}", md_text(&one_line(&r.note, 200)))
        };
        let _ = writeln!(
            s,
            "{}. {} in {}{gate}{note}",
            r.n,
            r.result,
            crate::config::format_duration(Duration::from_secs(r.seconds)).replace("0ms", "0s")
        );
    }
    let _ = writeln!(s);
}

/// The writer's findings outside the item (at most 30), when it had any.
fn findings_section(s: &mut String, e: &Evidence) {
    if !e.findings.is_empty() {
        let _ = writeln!(
            s,
            "### The writer's findings (proposals outside this item, not in this PR; filed as issues when GitHub is reachable)"
        );
        for f in e.findings.iter().take(30) {
            let _ = writeln!(s, "- {}", md_text(&one_line(f, 1000)));
        }
        let _ = writeln!(s);
    }
}

/// What a person must still judge: the standing questions, then what the
/// recorded facts make worth a look.
fn judge_section(s: &mut String, e: &Evidence) {
    let c = &e.contract;
    let _ = writeln!(s, "### Still for a person to judge");
    let _ = writeln!(
        s,
        "- Does the change do what the item means, not only what the conditions say?"
    );
    let _ = writeln!(
        s,
        "- Is anything outside the diff affected (docs, migrations, other callers)?"
    );
    if c.accept.is_empty() {
        let _ = writeln!(
            s,
            "- No acceptance condition was written: only the gate and the reviewer judged it."
        );
    }
    if c.verify.is_empty() {
        let _ = writeln!(s, "- No gate ran: the change is untested by nightshift.");
    }
    if e.rounds.len() > 1 {
        let _ = writeln!(
            s,
            "- It took {} rounds: read the earlier failures above.",
            e.rounds.len()
        );
    }
    if e.cost_usd.is_none() {
        let _ = writeln!(
            s,
            "- The agent reported no cost: the cost cap was not enforced."
        );
    }
    judge_links_and_gate_files(s, e);
    judge_agent_notes(s, e);
    judge_public_api(s, e);
    judge_overlaps(s, e);
    let _ = writeln!(s);
}

/// Symbolic links the diff adds that leave the repository, and files the
/// gate runs or reads that the change edits.
fn judge_links_and_gate_files(s: &mut String, e: &Evidence) {
    let c = &e.contract;
    let outward = crate::proof::links_leaving_the_repository(&e.diff);
    if !outward.is_empty() {
        let shown: Vec<String> = outward
            .iter()
            .take(5)
            .map(|(l, t)| md_code(&format!("{l} → {t}")))
            .collect();
        let _ = writeln!(
            s,
            "- It adds symbolic links that point outside the repository ({}).",
            shown.join(", ")
        );
    }
    let gate_files = crate::proof::gate_files_changed(&c.verify, &c.setup, &e.changed);
    if !gate_files.is_empty() {
        let shown: Vec<String> = gate_files.iter().map(|f| md_code(f)).collect();
        let _ = writeln!(
            s,
            "- The change edits what the gate runs or sees ({}): the green gate above ran the writer's version of it.",
            shown.join(", ")
        );
    }
}

/// What the agents' CLIs and nightshift's look at the checkout reported
/// (at most 10 notes).
fn judge_agent_notes(s: &mut String, e: &Evidence) {
    for n in e.agent_notes.iter().take(10) {
        match n.split_once(": ").unwrap_or(("agent", n)) {
            // What nightshift itself saw in the checkout.
            ("checkout", note) => {
                let _ = writeln!(s, "- {}", md_text(&one_line(note, 300)));
            }
            (role, note) => {
                let _ = writeln!(
                    s,
                    "- The {role}'s CLI reported: {}",
                    md_text(&one_line(note, 300))
                );
            }
        }
    }
}

/// Public declarations the diff changes or removes (at most 5 named).
fn judge_public_api(s: &mut String, e: &Evidence) {
    let changed_api = crate::proof::public_signatures_changed(&e.diff);
    if !changed_api.is_empty() {
        let shown: Vec<String> = changed_api
            .iter()
            .take(5)
            .map(|l| md_code(&one_line(l, 120)))
            .collect();
        let more = if changed_api.len() > 5 {
            format!(" and {} more", changed_api.len() - 5)
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "- It changes or removes public declarations ({}{more}): callers outside this diff may break.",
            shown.join(", ")
        );
    }
}

/// Earlier PRs of the night that change some of the same files (merge
/// order).
fn judge_overlaps(s: &mut String, e: &Evidence) {
    for o in &e.overlaps {
        let pr = o
            .pr_number
            .map_or_else(|| format!("branch `{}`", o.branch), |n| format!("#{n}"));
        let files: Vec<String> = o.files.iter().take(10).map(|f| md_code(f)).collect();
        let more = if o.files.len() > 10 {
            format!(" and {} more", o.files.len() - 10)
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "- Merge order: {pr} ({}) from the same night also changes {}{more}. Both start from the same base; after merging one, check the other still merges cleanly and its gate still passes.",
            md_text(&one_line(&o.title, 120)),
            files.join(", ")
        );
    }
}

/// The sealed contract as pretty JSON, folded.
fn contract_section(s: &mut String, e: &Evidence) {
    let c = &e.contract;
    let _ = writeln!(
        s,
        "<details><summary>Contract (sha256 {})</summary>\n\n{}\n</details>\n",
        short(&e.contract_sha),
        md_fence(
            "json",
            &serde_json::to_string_pretty(
                &serde_json::from_str::<Value>(&c.canonical_json()).unwrap_or(Value::Null)
            )
            .unwrap_or_default()
        )
    );
}

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

fn one_line(s: &str, max: usize) -> String {
    let t: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if t.chars().count() > max {
        format!("{}…", t.chars().take(max).collect::<String>())
    } else {
        t
    }
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
pub const AGENTS_AS_ROOT_NOTE: &str = "agents run as root (agents_as_root = true, no agent_user): they can read everything nightshift holds — its memory with the GitHub token and the ledger's URL, the approval key, every file on this machine";

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

fn rows(items: &[ItemRow]) -> Vec<Row> {
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

/// The human report (docs/commands.md#report): a header, one table row per item
/// (item, outcome, PR, rounds, time, tokens/cost, reason), the totals, then
/// the PR bodies when `show_bodies` (and, without GitHub access, the PRs
/// that would have been opened).
pub fn to_text(run: &RunRow, items: &[ItemRow], slept_secs: i64, show_bodies: bool) -> String {
    to_text_at(run, items, slept_secs, show_bodies, chrono::Utc::now())
}

/// [`to_text`] with the current instant given (for a run still going).
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
                i.facts.pr_body.as_deref().unwrap_or("")
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

/// The report as GitHub-flavoured markdown, for pasting into an issue or a
/// chat (`report --markdown`). Same facts as [`to_text`].
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
            (Some(u), Some(n)) => format!("[#{n}]({u})"),
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
                i.facts.pr_body.as_deref().unwrap_or("")
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
}
