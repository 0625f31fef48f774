//! The PRs' CI in the morning report (docs/github.md#ci): each watched
//! PR's state, why, and the checks of its head, for `report --json` and
//! the text report. GitHub's texts (check names, URLs, reasons) are shown
//! with their control characters escaped, and URLs only as plain web links.

use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::ledger::ci::{CheckRow, FixRow, WatchRow, WatchView};
use crate::outcome::CiState;

use super::{escape_controls, one_line, web_link};

/// A watch's state as the morning reads it: its own once ended; while
/// its run goes on, `watching`; a watch its run left open (the run ended or
/// died first) is `ci_pending`.
pub fn state_text(w: &WatchRow, run_ended: bool) -> &'static str {
    match w.ci_state {
        Some(s) => s.as_str(),
        None if run_ended => CiState::Pending.as_str(),
        None => "watching",
    }
}

/// The reason shown for watch `w` (see [`state_text`]).
fn reason(w: &WatchRow, run_ended: bool) -> Option<String> {
    match (&w.reason, w.ci_state) {
        (Some(r), _) => Some(r.clone()),
        (None, None) if run_ended => Some("the run ended before CI was conclusive".into()),
        _ => None,
    }
}

/// `report --json`'s `ci` of one item: `state`, `reason`, `all_reported`
/// (no required check was known; every reported one counted), `fix_rounds`
/// (how many ran) and `fixes` (each: `n`, `checks`, `from`, `to` — `null`
/// when it pushed nothing —, `result`, `worker`), `head_sha`, `pr_number`
/// and the head's `checks` (`name`, `required`, `conclusion`, `url`).
pub fn to_json(w: &WatchRow, checks: &[CheckRow], fixes: &[FixRow], run_ended: bool) -> Value {
    json!({
        "fixes": fixes.iter().map(|f| json!({
            "n": f.n,
            "checks": f.checks,
            "from": f.from_head,
            "to": f.to_head,
            "result": f.result,
            "worker": f.worker,
        })).collect::<Vec<_>>(),
        "state": state_text(w, run_ended),
        "reason": reason(w, run_ended),
        "all_reported": w.all_reported,
        "fix_rounds": w.fix_rounds,
        "head_sha": w.head_sha,
        "pr_number": w.pr_number,
        "wait_until": w.wait_until,
        "checks": checks.iter().map(|c| json!({
            "name": c.name,
            "required": c.required,
            "conclusion": c.conclusion,
            "url": c.url,
        })).collect::<Vec<_>>(),
    })
}

/// Sets each item of `report --json` (`v["items"]`) its `ci` ([`to_json`]
/// of its watch; `null` for an item whose PR was not watched).
pub fn attach(v: &mut Value, watches: &[WatchView], run_ended: bool) {
    for item in v["items"].as_array_mut().into_iter().flatten() {
        let watch = watches
            .iter()
            .find(|w| item["key"] == w.watch.item_key.as_str());
        item["ci"] = watch.map_or(Value::Null, |w| {
            to_json(&w.watch, &w.checks, &w.fixes, run_ended)
        });
    }
}

/// The text report's CI section: one line per watched PR (its state and
/// why), then its head's checks, required ones first; empty without watches.
pub fn section(watches: &[WatchView], run_ended: bool) -> String {
    if watches.is_empty() {
        return String::new();
    }
    let mut s = String::from("CI of the PRs (the repository's own checks on GitHub):\n");
    for WatchView {
        watch: w,
        checks,
        fixes,
    } in watches
    {
        let why = reason(w, run_ended)
            .map(|r| format!(" — {}", one_line(&escape_controls(&r, false), 300)))
            .unwrap_or_default();
        let rounds = match w.fix_rounds {
            0 => String::new(),
            n => format!(", {n} fix round(s)"),
        };
        let _ = writeln!(
            s,
            "  #{} {}{rounds}{why}",
            w.pr_number,
            state_text(w, run_ended)
        );
        let mut sorted: Vec<&CheckRow> = checks.iter().collect();
        sorted.sort_by_key(|c| (!c.required, c.name.clone()));
        for c in sorted {
            let mark = if c.required { "required" } else { "optional" };
            let url = c
                .url
                .as_deref()
                .and_then(web_link)
                .map(|u| format!(" {u}"))
                .unwrap_or_default();
            let _ = writeln!(
                s,
                "      {} ({mark}): {}{url}",
                one_line(&escape_controls(&c.name, false), 120),
                escape_controls(&c.conclusion, false)
            );
        }
        for f in fixes {
            let _ = writeln!(
                s,
                "      fix round {} for {}: {}",
                f.n,
                one_line(&escape_controls(&f.checks, false), 200),
                one_line(&escape_controls(&f.result, false), 300)
            );
        }
    }
    if watches.iter().any(|w| w.watch.all_reported) {
        s.push_str("  (no required check is configured for the base branch: every reported check counted as required)\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch(state: Option<CiState>) -> WatchRow {
        WatchRow {
            id: 1,
            run_id: uuid::Uuid::nil(),
            item_key: "k".into(),
            pr_number: 7,
            head_sha: "abc".into(),
            base_sha: None,
            ci_state: state,
            reason: Some("required check `t\u{1b}[31m` failed".into()),
            all_reported: false,
            fix_rounds: 0,
            started_at: chrono::Utc::now(),
            wait_until: chrono::Utc::now(),
            ended_at: None,
            fixing: false,
            fix_note: None,
        }
    }

    #[test]
    fn an_open_watch_of_an_ended_run_is_pending_and_text_is_escaped() {
        let mut w = watch(None);
        w.reason = None;
        assert_eq!(state_text(&w, false), "watching");
        assert_eq!(to_json(&w, &[], &[], true)["state"], "ci_pending");
        let check = CheckRow {
            head_sha: "abc".into(),
            name: "<b>lint</b>\u{7}".into(),
            required: false,
            conclusion: "failure".into(),
            url: Some("javascript:alert(1)".into()),
        };
        let view = WatchView {
            watch: watch(Some(CiState::Failed)),
            checks: vec![check],
            fixes: vec![],
        };
        let text = section(&[view], true);
        assert!(
            text.contains("#7 ci_failed — required check `t\\u{1b}[31m` failed"),
            "{text}"
        );
        assert!(
            text.contains("<b>lint</b>\\u{7} (optional): failure\n"),
            "{text}"
        );
        assert!(!text.contains("javascript"), "{text}");
    }
}
