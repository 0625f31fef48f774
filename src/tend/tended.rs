//! The run's tended PRs as the report shows them (docs/github.md "The second
//! night"): read from the ledger's tended items and the run's `tend_ignored`
//! events, and the report's "Tended PRs" section. Not what a PR needs (the
//! parent module) nor the words said to agents and on GitHub ([`super::words`]).

use std::fmt::Write as _;

use super::words::crop;
use super::{Feedback, Ignored, UNTRUSTED_NOTE, short, shown};
use crate::ledger;

/// One tended PR of a run, as the report's "Tended PRs" section shows it
/// (read by [`tended_items`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tended {
    /// The PR number.
    pub pr: u64,
    /// The item's title.
    pub title: String,
    /// How the tend ended (`pr_updated`, `pr_left_alone`, or a failure);
    /// `None` while it runs.
    pub outcome: Option<crate::outcome::Outcome>,
    /// Why, for anything but `pr_updated`.
    pub reason: Option<String>,
    /// `conflict` or `changes_requested` (from the sealed card); `None` for
    /// a PR left alone, which had no card to seal.
    pub action: Option<String>,
    /// What was asked, verbatim (from the sealed card).
    pub asked: Vec<Feedback>,
    /// The head before tonight (the card's) and the head nightshift pushed
    /// last (the ledger's), equal when nothing was pushed.
    pub old_head: Option<String>,
    pub new_head: Option<String>,
    /// What the trust rule left out of the PR's card (from the run's
    /// `tend_ignored` events): never in a prompt, never obeyed.
    pub ignored: Vec<Ignored>,
    /// The PR had nothing to tend from trusted authors, so it is no run
    /// item: it is listed only for what was ignored on it.
    pub nothing: bool,
}

/// The tended PRs of run `run` for the report's section (see
/// [`ledger::tend::tended_items`]), each with what its card asked and what the trust
/// rule left out; a PR with nothing to tend but something ignored is
/// listed too ([`Tended::nothing`]), in PR order.
///
/// # Errors
/// Database errors.
pub async fn tended_items(pool: &sqlx::PgPool, run: uuid::Uuid) -> sqlx::Result<Vec<Tended>> {
    let mut out: Vec<Tended> = ledger::tend::tended_items(pool, run)
        .await?
        .into_iter()
        .map(Tended::from)
        .collect();
    for (pr, title, ignored) in ignored_in_run(pool, run).await? {
        match out.iter_mut().find(|t| t.pr == pr) {
            Some(t) => t.ignored = ignored,
            None => out.push(Tended {
                pr,
                title,
                outcome: None,
                reason: None,
                action: None,
                asked: vec![],
                old_head: None,
                new_head: None,
                ignored,
                nothing: true,
            }),
        }
    }
    out.sort_by_key(|t| t.pr);
    Ok(out)
}

/// The run's `tend_ignored` events: per PR (the last event of each, as a
/// resumed run writes them again), its title and what was ignored.
async fn ignored_in_run(
    pool: &sqlx::PgPool,
    run: uuid::Uuid,
) -> sqlx::Result<Vec<(u64, String, Vec<Ignored>)>> {
    let rows =
        ledger::events::of_kind_in_run(pool, run, crate::outcome::Event::TendIgnored.as_str())
            .await?;
    let mut out: Vec<(u64, String, Vec<Ignored>)> = Vec::new();
    for d in rows {
        let Some(pr) = d["pr"].as_u64() else { continue };
        let title = d["title"].as_str().unwrap_or_default().to_string();
        let ignored = serde_json::from_value(d["ignored"].clone()).unwrap_or_default();
        out.retain(|(p, _, _)| *p != pr);
        out.push((pr, title, ignored));
    }
    Ok(out)
}

impl From<ledger::tend::TendedRow> for Tended {
    /// The row's card counts only if it is a tend card (it names a PR and
    /// an action); an item's contract (a PR left alone) gives no action.
    fn from(r: ledger::tend::TendedRow) -> Tended {
        let card = r
            .card
            .filter(|c| c.get("pr").is_some() && c.get("action").is_some());
        let text = |k: &str| {
            card.as_ref()
                .and_then(|c| c[k].as_str().map(str::to_string))
        };
        Tended {
            pr: r.pr_number.unwrap_or(0) as u64,
            title: r.title,
            outcome: r.outcome,
            reason: r.reason,
            action: text("action"),
            asked: (card.as_ref())
                .and_then(|c| serde_json::from_value(c["comments"].clone()).ok())
                .unwrap_or_default(),
            old_head: text("head"),
            new_head: r.head,
            ignored: vec![],
            nothing: false,
        }
    }
}

impl Tended {
    /// The outcome's word, `running` while it has none, `nothing` for a
    /// PR listed only for what was ignored on it.
    pub fn word(&self) -> &'static str {
        if self.nothing {
            return "nothing";
        }
        self.outcome
            .map_or(crate::outcome::RunStatus::Running.as_str(), |o| o.as_str())
    }

    /// Whether this tend pushed a new head to the PR.
    pub fn pushed(&self) -> bool {
        self.outcome == Some(crate::outcome::Outcome::PrUpdated)
            && self.old_head.is_some()
            && self.old_head != self.new_head
    }

    /// The tended PR as `report --json` lists it under `"tended"`: `pr`,
    /// `title`, `outcome`, `reason`, `action`, `asked` (each request as the
    /// card has it: kind, author, path, line, body, at), `old_head` and
    /// `new_head` (`null` when nothing was pushed), and `ignored` (what the
    /// trust rule left out: author, association, kind, url, stop, at — no
    /// text).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "pr": self.pr,
            "title": self.title,
            "outcome": self.word(),
            "reason": self.reason,
            "action": self.action,
            "asked": self.asked,
            "old_head": self.old_head,
            "new_head": self.pushed().then_some(self.new_head.as_deref()).flatten(),
            "ignored": self.ignored,
        })
    }
}

/// The report's section on tended PRs: what was asked, what was done, the
/// new head. Empty when the run tended none. Comment text is shown as
/// [`super::card`] shows it (control characters written out).
pub fn report_section(tended: &[Tended]) -> String {
    if tended.is_empty() {
        return String::new();
    }
    let mut s = format!("Tended PRs ({})\n", tended.len());
    for t in tended {
        let _ = writeln!(s, "  PR #{} · {} · {}", t.pr, t.word(), shown(&t.title));
        if let Some(a) = &t.action {
            let asked = match a.as_str() {
                "conflict" => "bring the branch onto its moved base".to_string(),
                _ => format!("{} request(s)", t.asked.len()),
            };
            let _ = writeln!(s, "    asked     {asked}");
        }
        for fb in &t.asked {
            let place = match (&fb.path, fb.line) {
                (Some(p), Some(l)) => format!(" on {}:{l}", shown(p)),
                _ => String::new(),
            };
            let first = fb.body.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
            let _ = writeln!(
                s,
                "      - {}{place}: {}",
                shown(&fb.author),
                shown(&crop(first, 120))
            );
        }
        for i in &t.ignored {
            let _ = writeln!(s, "    ignored   {}", i.line());
        }
        if !t.ignored.is_empty() {
            let _ = writeln!(s, "              {UNTRUSTED_NOTE}");
        }
        if t.nothing {
            let _ = writeln!(
                s,
                "    done      nothing to tend from trusted authors; the PR is untouched"
            );
            continue;
        }
        match (&t.old_head, &t.new_head) {
            (Some(old), Some(new))
                if old != new && t.outcome == Some(crate::outcome::Outcome::PrUpdated) =>
            {
                let _ = writeln!(s, "    done      pushed {} → {}", short(old), short(new));
            }
            _ => {
                let _ = writeln!(s, "    done      nothing pushed; the PR is untouched");
            }
        }
        if let Some(r) = &t.reason {
            let _ = writeln!(s, "    why       {}", shown(r));
        }
    }
    s
}
