//! Plans (docs/contract.md): the ordered list of contracts of every open item, sealed by one SHA
//! over all of them in order (the second night's sealed PR cards first), as `plan` prints it,
//! as `plan --json` and the ledger keep it, and as a worker reads it back from the ledger.
//!
//! This module builds and presents a plan; it is not where a contract is sealed or its card
//! written (see [`crate::contract`]), nor where a plan is approved (see [`crate::approval`]).
//! It does no I/O except reading the config file (for the keys it sets) and, through
//! [`crate::contract`], recipe templates.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::backlog::{Backlog, Problem};
use crate::config;
use crate::contract::{Contract, PlanEntry, Resolved, Source, seal, sha256_hex, write_card};

/// The plan: every open item's contract in backlog order.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The backlog file.
    pub backlog_path: PathBuf,
    /// SHA-256 of the backlog bytes at snapshot time.
    pub backlog_sha: String,
    /// Open items in order.
    pub entries: Vec<PlanEntry>,
    /// SHA-256 over the contract SHAs in order.
    pub sha: String,
    /// The whole run's cost cap in USD (`max_cost_usd_per_run`) and its
    /// source; shown with the plan, not sealed in a contract (it is not an
    /// item's).
    pub run_cost_cap: Resolved<f64>,
    /// The open PRs looked at for the second night, listed before the items
    /// (docs/github.md "The second night"); empty when GitHub was not
    /// asked. The sealed ones are covered by `sha`.
    pub tend: Vec<crate::tend::TendCard>,
}

impl Plan {
    /// The plan SHA of an ordered list of contract SHAs: SHA-256 of each
    /// SHA followed by a newline.
    pub fn sha_of<'a>(contract_shas: impl IntoIterator<Item = &'a str>) -> String {
        let mut buf = String::new();
        for s in contract_shas {
            buf.push_str(s);
            buf.push('\n');
        }
        sha256_hex(buf.as_bytes())
    }

    /// Adds the tend cards and seals them into the plan SHA: the sealed
    /// cards' SHAs first, in PR order, then the items' (with no sealed card
    /// the SHA is unchanged).
    pub fn with_tend(mut self, cards: Vec<crate::tend::TendCard>) -> Plan {
        let tend = cards
            .iter()
            .filter_map(|c| c.sealed.as_ref().map(|s| s.sha.as_str()));
        let items = self.entries.iter().map(|e| e.contract_sha.as_str());
        self.sha = Plan::sha_of(tend.chain(items));
        self.tend = cards;
        self
    }

    /// The plan as `plan --json` prints it (docs/commands.md#json-output); the tend cards are a
    /// `"tend"` array beside `"items"`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self.json_view()).expect("a plan always serialises")
    }

    /// [`Plan::to_json`] as compact text, written in one pass (what the
    /// ledger stores: 5 MB for 20,000 items), keys sorted as in the value.
    pub fn to_json_string(&self) -> String {
        serde_json::to_string(&self.json_view()).expect("a plan always serialises")
    }

    fn json_view(&self) -> PlanJson<'_> {
        PlanJson {
            backlog: self.backlog_path.display().to_string(),
            items: self
                .entries
                .iter()
                .map(|e| ItemJson {
                    blocked: e.blocked.as_deref(),
                    contract_sha: &e.contract_sha,
                    index: e.index,
                    key: &e.item.key,
                    line: e.item.line,
                    title: &e.item.title,
                })
                .collect(),
            plan_sha: &self.sha,
            tend: self
                .tend
                .iter()
                .map(crate::tend::TendCard::to_json)
                .collect(),
        }
    }
}

/// The JSON of a plan; fields in byte order of their names, so that the
/// text written directly has its keys sorted as a `serde_json::Value` has.
#[derive(Serialize)]
struct PlanJson<'a> {
    backlog: String,
    items: Vec<ItemJson<'a>>,
    plan_sha: &'a str,
    tend: Vec<serde_json::Value>,
}

/// One item of [`PlanJson`]; fields in byte order of their names.
#[derive(Serialize)]
struct ItemJson<'a> {
    blocked: Option<&'a str>,
    contract_sha: &'a str,
    index: usize,
    key: &'a str,
    line: usize,
    title: &'a str,
}

/// Seals one contract per open item of `backlog`.
///
/// `repo` is the repository root (recipe templates are read from it).
///
/// # Errors
/// Every problem found — the backlog's own (malformed detail lines) plus
/// limits above the policy caps and unreadable recipe templates — each with
/// file:line. No plan is produced when there is any (docs/backlog.md).
pub fn build_plan(
    repo: &Path,
    backlog: &Backlog,
    loaded: &config::Loaded,
) -> Result<Plan, Vec<Problem>> {
    let mut problems: Vec<Problem> = backlog.problems.clone();
    let mut entries = Vec::new();
    let policy_keys = policy_keys(loaded);
    for item in backlog.items.iter().filter(|i| !i.done) {
        match seal(repo, &backlog.path, item, &loaded.config, &policy_keys) {
            Ok(contract) => {
                let blocked = contract.questions.first().map(|q| format!("question: {q}"));
                let contract_sha = contract.sha();
                entries.push(PlanEntry {
                    index: entries.len() + 1,
                    item: item.clone(),
                    contract,
                    contract_sha,
                    blocked,
                });
            }
            Err(mut p) => problems.append(&mut p),
        }
    }
    if !problems.is_empty() {
        problems.sort_by_key(|p| p.line);
        return Err(problems);
    }
    let sha = Plan::sha_of(entries.iter().map(|e| e.contract_sha.as_str()));
    let run_cost_cap = Resolved {
        value: loaded.config.limits.max_cost_usd_per_run,
        source: if policy_keys.iter().any(|k| k == "max_cost_usd_per_run") {
            Source::Policy
        } else {
            Source::Default
        },
    };
    Ok(Plan {
        backlog_path: backlog.path.clone(),
        backlog_sha: backlog.sha256.clone(),
        entries,
        sha,
        run_cost_cap,
        tend: vec![],
    })
}

/// Keys of `[limits]` the config file sets explicitly (for provenance).
fn policy_keys(loaded: &config::Loaded) -> Vec<String> {
    if !loaded.exists {
        return vec![];
    }
    let Ok(text) = crate::file::read_regular_text(&loaded.path, crate::file::MAX_TEXT_BYTES) else {
        return vec![];
    };
    let Ok(table) = text.parse::<toml::Table>() else {
        return vec![];
    };
    table
        .get("limits")
        .and_then(|l| l.as_table())
        .map(|t| t.keys().cloned().collect())
        .unwrap_or_default()
}

/// Renders every card and the plan SHA, as `plan` prints them.
pub fn render_plan(plan: &Plan) -> String {
    let mut s = String::new();
    for c in &plan.tend {
        s.push_str(&crate::tend::card(c));
        s.push('\n');
    }
    if plan.entries.is_empty() {
        let _ = writeln!(
            s,
            "{}: no open items — nothing to do.",
            plan.backlog_path.display()
        );
    }
    for e in &plan.entries {
        write_card(&mut s, e);
        s.push('\n');
    }
    let cap = &plan.run_cost_cap;
    let _ = writeln!(
        s,
        "run budget ${:.2} ({}) for the whole run, over the costs the agents report",
        cap.value,
        format!("{:?}", cap.source).to_lowercase()
    );
    let runnable = plan.entries.iter().filter(|e| e.blocked.is_none()).count();
    let tend = plan.tend.iter().filter(|c| c.sealed.is_some()).count();
    let tend_note = if tend > 0 {
        format!(", {tend} PR(s) to tend first")
    } else {
        String::new()
    };
    let _ = writeln!(
        s,
        "plan sha256 {}  ({} item(s), {} to run{tend_note})",
        plan.sha,
        plan.entries.len(),
        runnable
    );
    s
}

/// The plan of a run as the ledger holds it, for `nightshift worker` on a
/// host that did not seal it (docs/workers.md#nightshift-worker): the
/// contracts `shas` (in plan order, with their stored JSON) become entries
/// again, each checked to hash to its SHA, and the SHAs to `plan_sha`.
/// Stored cards that are not item contracts (the second night's PR cards)
/// are covered by the SHA but are not entries.
///
/// # Errors
/// A sentence naming the contract whose JSON is missing or does not hash
/// to its SHA, or a plan SHA that does not match: the ledger was changed.
pub fn plan_from_ledger(
    plan_sha: &str,
    stored: &[(String, Option<serde_json::Value>)],
) -> Result<Plan, String> {
    let shas = stored.iter().map(|(s, _)| s.as_str());
    if Plan::sha_of(shas) != plan_sha {
        return Err(format!(
            "the ledger's contracts of plan {plan_sha} do not hash to it: the ledger was changed; approve the plan again on the host that sealed it"
        ));
    }
    let mut entries = Vec::new();
    for (sha, json) in stored {
        let json = json
            .as_ref()
            .ok_or_else(|| format!("the ledger holds no contract {sha} of plan {plan_sha}"))?;
        let Ok(contract) = serde_json::from_value::<Contract>(json.clone()) else {
            continue;
        };
        if contract.sha() != *sha {
            return Err(format!(
                "contract {sha} in the ledger does not hash to its SHA: the ledger was changed"
            ));
        }
        let blocked = contract.questions.first().map(|q| format!("question: {q}"));
        let item = crate::backlog::Item {
            line: 0,
            marker_offset: 0,
            done: false,
            title: contract.title.clone(),
            section: contract.section.clone(),
            context: contract.context.clone(),
            details: Default::default(),
            key: contract.key.clone(),
        };
        entries.push(PlanEntry {
            index: entries.len() + 1,
            item,
            contract,
            contract_sha: sha.clone(),
            blocked,
        });
    }
    Ok(Plan {
        backlog_path: PathBuf::new(),
        backlog_sha: String::new(),
        entries,
        sha: plan_sha.to_string(),
        run_cost_cap: Resolved {
            value: 0.0,
            source: Source::Default,
        },
        tend: Vec::new(),
    })
}
