//! The reviewer's verdict and the proof that the reviewer only read (SPEC §5.5, §6).
//!
//! A verdict is `approve` or `request_changes` with findings. It is read from
//! structured output when the agent gives one, else from the last JSON object
//! in the reviewer's text. A verdict is only trusted when the reviewer was
//! read-only: its session listed no tool beyond Read/Grep/Glob and no MCP
//! server (claude), and, for every kind, the checkout's status and content
//! hash are identical before and after the review.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `approve` or `request_changes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// The change may be proposed as a PR.
    Approve,
    /// The findings must be addressed in another round.
    RequestChanges,
}

impl Decision {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Approve => "approve",
            Decision::RequestChanges => "request_changes",
        }
    }
}

/// A reviewer's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// The decision.
    pub verdict: Decision,
    /// What must change (may be empty on approve).
    #[serde(default)]
    pub findings: Vec<String>,
    /// The acceptance conditions as the reviewer judged them, each with its
    /// evidence (empty when the reviewer gave none).
    #[serde(default)]
    pub conditions: Vec<ConditionCheck>,
}

/// One acceptance condition as the reviewer judged it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConditionCheck {
    /// The condition's number as the reviewer's prompt numbered them (from 1).
    pub index: u32,
    /// Whether the change meets it.
    pub met: bool,
    /// Where that shows: a test, a file and line, a command's output.
    pub evidence: String,
}

/// The JSON Schema of a verdict, given to agents that take one (claude
/// `--json-schema`, codex `--output-schema`). Every property is required and
/// none other allowed, as OpenAI's strict structured outputs demand; a
/// reviewer with no condition to judge answers `"conditions": []`.
pub const VERDICT_SCHEMA: &str = r#"{"type":"object","properties":{"verdict":{"type":"string","enum":["approve","request_changes"]},"findings":{"type":"array","items":{"type":"string"}},"conditions":{"type":"array","items":{"type":"object","properties":{"index":{"type":"integer"},"met":{"type":"boolean"},"evidence":{"type":"string"}},"required":["index","met","evidence"],"additionalProperties":false}}},"required":["verdict","findings","conditions"],"additionalProperties":false}"#;

/// Holds an approval to its own judgement of the acceptance conditions: an
/// `approve` that says condition N (of `accept`, numbered from 1) is not met
/// becomes `request_changes` with that condition as a finding (SPEC §5.5: a
/// condition not met is not done). Checks of numbers outside `accept` are
/// dropped.
pub fn hold_to_conditions(mut v: Verdict, accept: &[String]) -> Verdict {
    v.conditions.retain(|c| c.index >= 1 && (c.index as usize) <= accept.len());
    v.conditions.sort_by_key(|c| c.index);
    v.conditions.dedup_by_key(|c| c.index);
    if v.verdict == Decision::Approve {
        let unmet: Vec<String> = v
            .conditions
            .iter()
            .filter(|c| !c.met)
            .map(|c| format!("acceptance condition {} is not met ({}): {}", c.index, accept[c.index as usize - 1], c.evidence.trim()))
            .collect();
        if !unmet.is_empty() {
            v.verdict = Decision::RequestChanges;
            v.findings.extend(unmet);
        }
    }
    v
}

/// Reads the `conditions` of a verdict object: objects with a number
/// (`index`, `condition` or `n`), a judgement (`met` as a boolean, or
/// `status`/`result` as `met`/`pass`/`yes`/`true` or their opposites) and
/// `evidence` (or `why`/`reason`/`notes`). Entries without a number or a
/// judgement are skipped.
fn conditions_from_value(v: &Value) -> Vec<ConditionCheck> {
    let Some(list) = v.get("conditions").and_then(Value::as_array) else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|c| {
            let index = ["index", "condition", "n"].iter().find_map(|k| {
                let x = c.get(*k)?;
                x.as_u64().or_else(|| x.as_str().and_then(|s| s.trim().trim_start_matches('#').parse().ok()))
            })?;
            let met = match c.get("met") {
                Some(Value::Bool(b)) => *b,
                _ => {
                    let word = ["met", "status", "result"].iter().find_map(|k| c.get(*k).and_then(Value::as_str))?.trim().to_ascii_lowercase().replace(['-', ' '], "_");
                    match word.as_str() {
                        "met" | "pass" | "passed" | "yes" | "true" | "ok" | "done" => true,
                        "not_met" | "unmet" | "fail" | "failed" | "no" | "false" | "missing" => false,
                        _ => return None,
                    }
                }
            };
            let evidence = ["evidence", "why", "reason", "notes"].iter().find_map(|k| c.get(*k).and_then(Value::as_str)).unwrap_or("").to_string();
            Some(ConditionCheck { index: u32::try_from(index).ok()?, met, evidence })
        })
        .collect()
}

/// Reads a verdict from a JSON value shaped `{"verdict": .., "findings": [..]}`.
/// Findings may be strings or objects with a `message`/`title`/`text` field.
pub fn verdict_from_value(v: &Value) -> Option<Verdict> {
    let decision = match v.get("verdict")?.as_str()?.trim().to_ascii_lowercase().as_str() {
        "approve" | "approved" => Decision::Approve,
        "request_changes" | "request-changes" | "changes_requested" => Decision::RequestChanges,
        _ => return None,
    };
    let findings = v
        .get("findings")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|f| match f {
                    Value::String(s) => Some(s.clone()),
                    Value::Object(o) => ["message", "title", "text", "description"].iter().find_map(|k| o.get(*k).and_then(Value::as_str)).map(String::from),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    Some(Verdict { verdict: decision, findings, conditions: conditions_from_value(v) })
}

/// The last JSON object in `text` that is a verdict: first tried line by
/// line from the end (the `command` protocol's "last JSON object line"), then
/// as the last `{…}` span anywhere (a claude result may wrap it in prose or a
/// code fence).
pub fn last_json_verdict(text: &str) -> Option<Verdict> {
    for line in text.lines().rev() {
        let t = line.trim();
        if t.starts_with('{')
            && let Some(v) = serde_json::from_str::<Value>(t).ok().as_ref().and_then(verdict_from_value) {
                return Some(v);
            }
    }
    // Scan `{` positions from the end; parse the first JSON value at each.
    let bytes = text.as_bytes();
    for (i, _) in text.char_indices().rev().filter(|(_, c)| *c == '{') {
        let mut de = serde_json::Deserializer::from_slice(&bytes[i..]).into_iter::<Value>();
        if let Some(Ok(v)) = de.next()
            && let Some(verdict) = verdict_from_value(&v) {
                return Some(verdict);
            }
    }
    None
}

/// The reviewer's prose: its answer without the verdict's JSON lines.
pub fn prose(text: &str) -> String {
    crate::agent::strip_blocks(text)
}

/// Why a review is void — the reviewer was not read-only (SPEC §6) — or
/// `None`. For every kind, the checkout's fingerprint (status and content
/// hash, [`crate::proof::worktree_fingerprint`]) must be the same before and
/// after; for `claude`, its session must also have listed its tools (the
/// init event) and none beyond the read-only set, and no MCP server.
pub fn void_reason(kind: crate::config::AgentKind, reviewer: &crate::agent::Report, fingerprint_before: &str, fingerprint_after: &str) -> Option<String> {
    if fingerprint_before != fingerprint_after {
        return Some("the checkout changed during the review (status or content hash differ)".to_string());
    }
    if kind != crate::config::AgentKind::Claude {
        return None;
    }
    match (&reviewer.tools, &reviewer.failure) {
        (None, None) => Some("the reviewer session reported no tool list (no init event)".to_string()),
        _ => tools_violation(reviewer.tools.as_deref(), reviewer.mcp_servers.as_deref(), crate::agent::claude::READ_ONLY_TOOLS),
    }
}

/// Why a verdict is void (the reviewer was not read-only).
pub fn tools_violation(tools: Option<&[String]>, mcp_servers: Option<&[String]>, allowed: &[&str]) -> Option<String> {
    if let Some(tools) = tools {
        let extra: Vec<&String> = tools.iter().filter(|t| !allowed.contains(&t.as_str())).collect();
        if !extra.is_empty() {
            return Some(format!("the reviewer session listed tools beyond {}: {}", allowed.join(", "), extra.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")));
        }
    }
    if let Some(m) = mcp_servers
        && !m.is_empty() {
            return Some(format!("the reviewer session had MCP servers: {}", m.join(", ")));
        }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdict_from_last_line() {
        let t = "looked at it\n{\"verdict\":\"request_changes\",\"findings\":[\"x\"]}\nthen\n{\"verdict\":\"approve\",\"findings\":[]}\n";
        assert_eq!(last_json_verdict(t).unwrap().verdict, Decision::Approve);
    }

    #[test]
    fn verdict_inside_prose_and_fence() {
        let t = "Summary.\n```json\n{\"verdict\": \"request_changes\", \"findings\": [{\"message\": \"missing test\"}]}\n```\nThanks";
        let v = last_json_verdict(t).unwrap();
        assert_eq!(v.verdict, Decision::RequestChanges);
        assert_eq!(v.findings, vec!["missing test"]);
        assert!(last_json_verdict("no json {here").is_none());
        assert!(last_json_verdict("{\"verdict\":\"maybe\"}").is_none());
    }

    #[test]
    fn tool_list_checked() {
        let ok = vec!["Read".to_string(), "Grep".into(), "Glob".into()];
        assert!(tools_violation(Some(&ok), Some(&[]), &["Read", "Grep", "Glob"]).is_none());
        let bad = vec!["Read".to_string(), "Write".into(), "Bash".into()];
        assert!(tools_violation(Some(&bad), None, &["Read", "Grep", "Glob"]).unwrap().contains("Write, Bash"));
        assert!(tools_violation(Some(&ok), Some(&["drive".to_string()]), &["Read", "Grep", "Glob"]).is_some());
    }
}

#[cfg(test)]
mod condition_tests {
    use super::*;

    fn accept() -> Vec<String> {
        vec!["calc lists sub".into(), "the README says so".into()]
    }

    #[test]
    fn conditions_are_read_in_the_shapes_reviewers_write() {
        let v = last_json_verdict(r##"{"verdict":"approve","findings":[],"conditions":[{"index":1,"met":true,"evidence":"tests/calc.sh line 3"},{"condition":"#2","status":"Not met","why":"README untouched"},{"n":3,"result":"pass"},{"met":true},{"index":"x","met":false}]}"##).unwrap();
        assert_eq!(
            v.conditions,
            vec![
                ConditionCheck { index: 1, met: true, evidence: "tests/calc.sh line 3".into() },
                ConditionCheck { index: 2, met: false, evidence: "README untouched".into() },
                ConditionCheck { index: 3, met: true, evidence: String::new() },
            ]
        );
        // A verdict without conditions is still a verdict.
        assert!(last_json_verdict(r#"{"verdict":"approve","findings":[]}"#).unwrap().conditions.is_empty());
    }

    #[test]
    fn an_approval_that_says_a_condition_is_unmet_requests_changes() {
        let v = last_json_verdict(r#"{"verdict":"approve","findings":[],"conditions":[{"index":1,"met":true,"evidence":"t"},{"index":2,"met":false,"evidence":"README untouched"},{"index":7,"met":false,"evidence":"no such"}]}"#).unwrap();
        let held = hold_to_conditions(v, &accept());
        assert_eq!(held.verdict, Decision::RequestChanges);
        assert_eq!(held.findings, ["acceptance condition 2 is not met (the README says so): README untouched"]);
        assert_eq!(held.conditions.len(), 2, "out-of-range numbers are dropped");
        // All met, or none judged: the approval stands.
        let ok = last_json_verdict(r#"{"verdict":"approve","findings":[],"conditions":[{"index":1,"met":true,"evidence":"t"},{"index":1,"met":false,"evidence":"dup"}]}"#).unwrap();
        let held = hold_to_conditions(ok, &accept());
        assert_eq!(held.verdict, Decision::Approve, "the first judgement of a number counts");
        let none = last_json_verdict(r#"{"verdict":"approve","findings":[]}"#).unwrap();
        assert_eq!(hold_to_conditions(none, &accept()).verdict, Decision::Approve);
    }

    #[test]
    fn the_schema_requires_every_property_it_names() {
        let schema: Value = serde_json::from_str(VERDICT_SCHEMA).unwrap();
        let check = |obj: &Value| {
            let props: Vec<&String> = obj["properties"].as_object().unwrap().keys().collect();
            let req: Vec<&str> = obj["required"].as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect();
            for p in props {
                assert!(req.contains(&p.as_str()), "{p} not required (OpenAI strict mode)");
            }
            assert_eq!(obj["additionalProperties"], false);
        };
        check(&schema);
        check(&schema["properties"]["conditions"]["items"]);
    }
}
