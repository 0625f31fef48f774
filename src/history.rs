//! What the nights are worth: `report --history` (docs/commands.md#report-history).
//!
//! Night by night — items run, PRs opened, what became of them (merged,
//! closed unmerged, still open), failures by outcome, tokens, cost, time
//! slept at usage limits — and over the window: the merge rate, the cost per
//! merged PR (everything the nights cost, failures included, divided by the
//! PRs a person merged), the median time from PR to merge, by recipe.
//!
//! What became of a PR is asked from GitHub (`report --history` refreshes it) and remembered in
//! the ledger, so a history taken without GitHub access still knows what was
//! learnt before and says what it could not know. This module reads; it never
//! changes a PR.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

use crate::ledger::history::HistoryRow;
use crate::ledger::{history, prs};
use crate::outcome::{Outcome, PrRecord};

/// What became of a PR, as GitHub last said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PrFate {
    /// Still open.
    Open,
    /// Merged, at this instant (UTC).
    Merged(DateTime<Utc>),
    /// Closed without a merge, at this instant (UTC) when known.
    Closed(Option<DateTime<Utc>>),
}

/// One night of the history.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Night {
    /// The run.
    pub run_id: Uuid,
    /// When it started (UTC).
    pub started_at: Option<DateTime<Utc>>,
    /// Items that ran at least one round.
    pub items_run: usize,
    /// PRs it opened.
    pub prs_opened: usize,
    /// Branches it pushed whose PR it could not open (`branch_pushed`: no
    /// GitHub access); each is work on the remote, to be opened.
    pub branches_pushed: usize,
    /// Of those, merged since.
    pub merged: usize,
    /// Closed without a merge.
    pub closed: usize,
    /// Still open (or not known: see [`History::unknown`]).
    pub open: usize,
    /// Failed items per outcome word.
    pub failures: BTreeMap<String, usize>,
    /// Tokens of its agent calls.
    pub tokens: i64,
    /// Its cost in US dollars; `None` when no agent reported one.
    pub cost_usd: Option<f64>,
    /// Seconds slept at usage limits.
    pub slept_seconds: i64,
}

/// Totals of one recipe (title prefix) over the window.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RecipeTotals {
    /// The recipe's prefix; `""` for items of no recipe.
    pub recipe: String,
    /// PRs opened.
    pub prs_opened: usize,
    /// PRs merged.
    pub merged: usize,
    /// Cost of the recipe's items in US dollars; `None` when unreported.
    pub cost_usd: Option<f64>,
    /// Cost per merged PR in US dollars; `None` when none merged.
    pub cost_per_merged_pr: Option<f64>,
}

/// The window's totals.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    /// Nights in the window.
    pub nights: usize,
    /// PRs opened.
    pub prs_opened: usize,
    /// Branches pushed whose PR could not be opened (no GitHub access).
    pub branches_pushed: usize,
    /// Merged since.
    pub merged: usize,
    /// Closed without a merge.
    pub closed: usize,
    /// Still open.
    pub open: usize,
    /// merged / opened; `None` when nothing was opened.
    pub merge_rate: Option<f64>,
    /// Tokens.
    pub tokens: i64,
    /// Cost in US dollars; `None` when no agent reported one.
    pub cost_usd: Option<f64>,
    /// All the nights' cost divided by the merged PRs; `None` when none
    /// merged or no cost was reported.
    pub cost_per_merged_pr: Option<f64>,
    /// Median hours from a PR's opening to its merge; `None` when none merged.
    pub median_hours_to_merge: Option<f64>,
    /// Seconds slept at usage limits.
    pub slept_seconds: i64,
    /// Per recipe, in the config's order, then items of no recipe.
    pub by_recipe: Vec<RecipeTotals>,
    /// Per CI state of the PRs opened (docs/github.md#ci); PRs whose CI
    /// was not watched are not in it.
    pub by_ci: Vec<CiTotals>,
}

/// The PRs opened whose CI ended in one state, over the window.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CiTotals {
    /// `ci_green`, `ci_failed`, `ci_pending` or `ci_none`.
    pub state: String,
    /// PRs opened.
    pub prs_opened: usize,
    /// Of those, merged since.
    pub merged: usize,
    /// merged / opened.
    pub merge_rate: Option<f64>,
}

/// The history of a repository over a window.
#[derive(Debug, Clone, Serialize)]
pub struct History {
    /// Start of the window (UTC).
    pub since: DateTime<Utc>,
    /// Nights, oldest first.
    pub nights: Vec<Night>,
    /// Totals.
    pub totals: Totals,
    /// What could not be known, if anything (no GitHub access: PR states are
    /// as last learnt).
    pub unknown: Option<String>,
}

/// Reads the history of `repo` since `since`. `recipes` are the config's
/// title prefixes.
///
/// # Errors
/// Database errors.
pub async fn load(
    pool: &PgPool,
    repo: &str,
    since: DateTime<Utc>,
    recipes: &[String],
) -> sqlx::Result<History> {
    let rows = history::history_rows(pool, repo, since).await?;
    let slept = history::slept_by_run(pool, repo, since).await?;
    let mut nights: Vec<Night> = Vec::new();
    let mut hours_to_merge = Vec::new();
    let mut by_recipe: BTreeMap<usize, RecipeTotals> = BTreeMap::new();
    let mut by_ci: BTreeMap<String, CiTotals> = BTreeMap::new();
    for row in &rows {
        if nights.last().is_none_or(|n| n.run_id != row.run_id) {
            let slept = slept
                .iter()
                .find(|s| s.0 == row.run_id)
                .map_or(0.0, |s| s.1);
            nights.push(Night {
                run_id: row.run_id,
                started_at: Some(row.started_at),
                slept_seconds: slept.round() as i64,
                ..Night::default()
            });
        }
        let night = nights.last_mut().expect("pushed above");
        let recipe = recipes
            .iter()
            .position(|p| row.title.starts_with(p.as_str()))
            .unwrap_or(recipes.len());
        let r = by_recipe.entry(recipe).or_insert_with(|| RecipeTotals {
            recipe: recipes.get(recipe).cloned().unwrap_or_default(),
            ..RecipeTotals::default()
        });
        night.tokens += row.tokens;
        night.cost_usd = add_cost(night.cost_usd, row.cost_usd);
        r.cost_usd = add_cost(r.cost_usd, row.cost_usd);
        if row.rounds > 0 {
            night.items_run += 1;
        }
        if row.outcome == Some(Outcome::BranchPushed) {
            night.branches_pushed += 1;
        }
        if let Some(o) = row.outcome.filter(|o| o.fails_run()) {
            *night.failures.entry(o.as_str().to_string()).or_insert(0) += 1;
        }
        if count_pr(row, night, r, &mut hours_to_merge)
            && let Some(state) = &row.ci_state
        {
            let c = by_ci.entry(state.clone()).or_insert_with(|| CiTotals {
                state: state.clone(),
                ..CiTotals::default()
            });
            c.prs_opened += 1;
            c.merged += usize::from(row.pr_state == Some(PrRecord::Merged));
        }
    }
    let mut totals = totals(&nights, hours_to_merge, by_recipe.into_values().collect());
    totals.by_ci = (by_ci.into_values())
        .map(|c| CiTotals {
            merge_rate: (c.prs_opened > 0).then(|| c.merged as f64 / c.prs_opened as f64),
            ..c
        })
        .collect();
    Ok(History {
        since,
        nights,
        totals,
        unknown: None,
    })
}

/// Counts `row`'s PR in its `night` and recipe totals `r` when that night
/// opened it (not one carried over from an earlier night), and its hours
/// from opening to merge in `hours_to_merge`. Returns whether it counted.
fn count_pr(
    row: &HistoryRow,
    night: &mut Night,
    r: &mut RecipeTotals,
    hours_to_merge: &mut Vec<f64>,
) -> bool {
    if !(row.outcome == Some(Outcome::PrOpened) && row.pr_number.is_some() && row.rounds > 0) {
        return false;
    }
    night.prs_opened += 1;
    r.prs_opened += 1;
    match row.pr_state {
        Some(PrRecord::Merged) => {
            night.merged += 1;
            r.merged += 1;
            if let (Some(m), Some(c)) = (row.merged_at, row.pr_created_at) {
                hours_to_merge.push((m - c).num_seconds() as f64 / 3600.0);
            }
        }
        Some(PrRecord::Closed) => night.closed += 1,
        _ => night.open += 1,
    }
    true
}

/// The sum of the costs some agents reported: `None` when none did, and
/// never `-0.0` (an empty `f64` sum is `-0.0`, which JSON keeps).
pub fn cost_sum(costs: impl IntoIterator<Item = Option<f64>>) -> Option<f64> {
    costs
        .into_iter()
        .flatten()
        .fold(None, |sum: Option<f64>, c| Some(sum.unwrap_or(0.0) + c))
        .map(|c| c + 0.0)
}

/// `sum` with `cost` added: unknown until some agent reported a cost, and
/// never `-0.0` ([`cost_sum`]).
fn add_cost(sum: Option<f64>, cost: Option<f64>) -> Option<f64> {
    cost_sum([sum, cost])
}

fn totals(nights: &[Night], mut hours: Vec<f64>, mut by_recipe: Vec<RecipeTotals>) -> Totals {
    let sum = |f: fn(&Night) -> usize| nights.iter().map(f).sum::<usize>();
    let (opened, merged) = (sum(|n| n.prs_opened), sum(|n| n.merged));
    let cost = cost_sum(nights.iter().map(|n| n.cost_usd));
    let per_merged =
        |cost: Option<f64>, merged: usize| cost.filter(|_| merged > 0).map(|c| c / merged as f64);
    for r in &mut by_recipe {
        r.cost_per_merged_pr = per_merged(r.cost_usd, r.merged);
    }
    hours.sort_by(f64::total_cmp);
    let median = match hours.len() {
        0 => None,
        n if n % 2 == 1 => Some(hours[n / 2]),
        n => Some((hours[n / 2 - 1] + hours[n / 2]) / 2.0),
    };
    Totals {
        nights: nights.len(),
        prs_opened: opened,
        branches_pushed: sum(|n| n.branches_pushed),
        merged,
        closed: sum(|n| n.closed),
        open: sum(|n| n.open),
        merge_rate: (opened > 0).then(|| merged as f64 / opened as f64),
        tokens: nights.iter().map(|n| n.tokens).sum(),
        cost_usd: cost,
        cost_per_merged_pr: per_merged(cost, merged),
        median_hours_to_merge: median,
        slept_seconds: nights.iter().map(|n| n.slept_seconds).sum(),
        by_recipe,
        by_ci: Vec::new(),
    }
}

/// The PRs of `repo` whose fate is not settled (open, or never checked), as
/// (item key, branch, number).
///
/// # Errors
/// Database errors.
pub async fn unsettled(pool: &PgPool, repo: &str) -> sqlx::Result<Vec<(String, String, i64)>> {
    prs::unsettled_prs(pool, repo).await
}

/// Remembers what GitHub said of a PR.
///
/// # Errors
/// Database errors.
pub async fn remember(
    pool: &PgPool,
    repo: &str,
    item_key: &str,
    branch: &str,
    fate: PrFate,
) -> sqlx::Result<()> {
    let (state, merged_at, closed_at) = match fate {
        PrFate::Open => (PrRecord::Open, None, None),
        PrFate::Merged(at) => (PrRecord::Merged, Some(at), Some(at)),
        PrFate::Closed(at) => (PrRecord::Closed, None, at),
    };
    prs::set_pr_fate(pool, repo, item_key, branch, state, merged_at, closed_at).await
}

/// A cost as the history prints it: `$1.37`, or `not reported` when no
/// agent reported one (a `$0.00` there would claim the night was free).
fn usd(cost: Option<f64>) -> String {
    cost.map_or_else(|| NOT_REPORTED.to_string(), |c| format!("${c:.2}"))
}

/// What the history prints for a cost no agent reported.
pub const NOT_REPORTED: &str = "not reported";

impl History {
    /// The terminal table: a line per night, then the totals.
    pub fn to_text(&self, tz: chrono_tz::Tz) -> String {
        use std::fmt::Write as _;
        let line = |cells: [&str; 11]| {
            format!(
                "{:<17} {:>5} {:>4} {:>6} {:>6} {:>6} {:>4} {:>6} {:>10} {:>12} {:>7}",
                cells[0],
                cells[1],
                cells[2],
                cells[3],
                cells[4],
                cells[5],
                cells[6],
                cells[7],
                cells[8],
                cells[9],
                cells[10]
            )
        };
        let mut s = line([
            "night", "items", "PRs", "pushed", "merged", "closed", "open", "failed", "tokens",
            "cost", "slept",
        ]);
        s.push('\n');
        for n in &self.nights {
            let when = n
                .started_at
                .map(|t| t.with_timezone(&tz).format("%Y-%m-%d %H:%M").to_string())
                .unwrap_or_default();
            let cells = [
                when,
                n.items_run.to_string(),
                n.prs_opened.to_string(),
                n.branches_pushed.to_string(),
                n.merged.to_string(),
                n.closed.to_string(),
                n.open.to_string(),
                n.failures.values().sum::<usize>().to_string(),
                n.tokens.to_string(),
                usd(n.cost_usd),
                format!("{}m", n.slept_seconds / 60),
            ];
            let _ = writeln!(s, "{}", line(cells.each_ref().map(String::as_str)));
        }
        self.totals_text(&mut s);
        s
    }

    /// The window's totals and the lines by recipe, under the table.
    fn totals_text(&self, s: &mut String) {
        use std::fmt::Write as _;
        let t = &self.totals;
        let pct =
            |o: Option<f64>| o.map_or_else(|| "-".to_string(), |r| format!("{:.0}%", r * 100.0));
        let per = |o: Option<f64>, cost: Option<f64>| match (o, cost) {
            (Some(c), _) => format!("${c:.2}"),
            (None, None) => NOT_REPORTED.to_string(),
            (None, Some(_)) => "-".to_string(),
        };
        let pushed = match t.branches_pushed {
            0 => String::new(),
            n => format!(", {n} branch(es) pushed whose PR was not opened (no GitHub access)"),
        };
        let _ = writeln!(
            s,
            "\n{} night(s): {} PR(s) opened{pushed}, {} merged, {} closed unmerged, {} open; merge rate {}; cost {}, {} per merged PR; median time to merge {}",
            t.nights,
            t.prs_opened,
            t.merged,
            t.closed,
            t.open,
            pct(t.merge_rate),
            usd(t.cost_usd),
            per(t.cost_per_merged_pr, t.cost_usd),
            t.median_hours_to_merge
                .map_or_else(|| "-".to_string(), |h| format!("{h:.1} h")),
        );
        for r in t
            .by_recipe
            .iter()
            .filter(|r| r.prs_opened > 0 || r.cost_usd.is_some_and(|c| c > 0.0))
        {
            let name = if r.recipe.is_empty() {
                "(no recipe)"
            } else {
                r.recipe.as_str()
            };
            let _ = writeln!(
                s,
                "  {name}: {} opened, {} merged, {} per merged PR",
                r.prs_opened,
                r.merged,
                per(r.cost_per_merged_pr, r.cost_usd)
            );
        }
        for c in &t.by_ci {
            let _ = writeln!(
                s,
                "  CI {}: {} opened, {} merged, merge rate {}",
                c.state,
                c.prs_opened,
                c.merged,
                pct(c.merge_rate)
            );
        }
        if let Some(u) = &self.unknown {
            let _ = writeln!(s, "not known: {u}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cost_sum_is_null_when_unreported_and_never_negative_zero() {
        assert_eq!(cost_sum([None, None]), None);
        let zero = cost_sum([Some(-0.0)]).unwrap();
        assert!(zero == 0.0 && zero.is_sign_positive(), "{zero}");
        assert_eq!(cost_sum([Some(1.0), None, Some(0.5)]), Some(1.5));
        assert_eq!(
            serde_json::to_string(&cost_sum([Some(-0.0)])).unwrap(),
            "0.0"
        );
    }
}
