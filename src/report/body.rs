//! The PR body: the evidence card of one item (docs/github.md#pr-body),
//! rendered from recorded facts only — the contract, git's proof, the gate's
//! exit codes and output tails, the reviewer's verdict — within GitHub's
//! 65,536-character limit. Not the report of a run (the parent module).

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::Value;
use uuid::Uuid;

use crate::contract::Contract;
use crate::forge::{self, BODY_LIMIT};
use crate::gate::GateRun;
use crate::outcome::RoundResult;
use crate::review::Verdict;

use super::{head_chars_of, md_code, md_fence, md_text, one_line, short, tail_chars_of};

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
    /// Which agents played the round when the contract names a fallback
    /// (`writer codex (fallback) · reviewer claude`, docs/limits.md#fallback);
    /// empty otherwise.
    pub agents: String,
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
        let agents = if r.agents.is_empty() {
            String::new()
        } else {
            format!(" · {}", md_text(&r.agents))
        };
        let _ = writeln!(
            s,
            "{}. {} in {}{agents}{gate}{note}",
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
