//! The reviewer's verdict and the proof that the reviewer only read (docs/loop.md#review, docs/agents.md).
//!
//! A verdict is `approve` or `request_changes` with findings. It is read from
//! structured output when the agent gives one, else from the last JSON object
//! with a `verdict` key in the reviewer's text ([`read_verdict`]); a last
//! verdict whose value is no decision is no verdict. A verdict is only
//! trusted when the reviewer was read-only: its session listed no tool
//! beyond Read/Grep/Glob and no MCP server (claude), its own tool events show
//! no edit, and, for every kind, the checkout's status and content hash are
//! identical before and after the review.

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
/// becomes `request_changes` with that condition as a finding (docs/loop.md#review: a
/// condition not met is not done). Checks of numbers outside `accept` are
/// dropped.
pub fn hold_to_conditions(mut v: Verdict, accept: &[String]) -> Verdict {
    v.conditions
        .retain(|c| c.index >= 1 && (c.index as usize) <= accept.len());
    v.conditions.sort_by_key(|c| c.index);
    v.conditions.dedup_by_key(|c| c.index);
    if v.verdict == Decision::Approve {
        let unmet: Vec<String> = v
            .conditions
            .iter()
            .filter(|c| !c.met)
            .map(|c| {
                format!(
                    "acceptance condition {} is not met ({}): {}",
                    c.index,
                    accept[c.index as usize - 1],
                    c.evidence.trim()
                )
            })
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
                x.as_u64().or_else(|| {
                    x.as_str()
                        .and_then(|s| s.trim().trim_start_matches('#').parse().ok())
                })
            })?;
            let met = match c.get("met") {
                Some(Value::Bool(b)) => *b,
                _ => {
                    let word = ["met", "status", "result"]
                        .iter()
                        .find_map(|k| c.get(*k).and_then(Value::as_str))?
                        .trim()
                        .to_ascii_lowercase()
                        .replace(['-', ' '], "_");
                    match word.as_str() {
                        "met" | "pass" | "passed" | "yes" | "true" | "ok" | "done" => true,
                        "not_met" | "unmet" | "fail" | "failed" | "no" | "false" | "missing" => {
                            false
                        }
                        _ => return None,
                    }
                }
            };
            let evidence = ["evidence", "why", "reason", "notes"]
                .iter()
                .find_map(|k| c.get(*k).and_then(Value::as_str))
                .unwrap_or("")
                .to_string();
            Some(ConditionCheck {
                index: u32::try_from(index).ok()?,
                met,
                evidence,
            })
        })
        .collect()
}

/// Reads a verdict from a JSON value shaped `{"verdict": .., "findings": [..]}`
/// (see [`read_verdict_value`]); `None` also when its value is unreadable.
pub fn verdict_from_value(v: &Value) -> Option<Verdict> {
    read_verdict_value(v).and_then(Result::ok)
}

/// Reads the verdict of one JSON object: `None` when it has no `verdict`
/// key (it is not a verdict at all), `Some(Err(why))` when its value is
/// neither decision, else the verdict.
///
/// The value is read case-insensitively, with `-` and spaces as `_`:
/// `approve`/`approved` approve; `request_changes`, `changes_requested`,
/// `reject(ed)`, `needs_changes` and the like request changes. Anything
/// else (`maybe`, `approve_with_comments`, `lgtm`, a non-string) is no
/// decision: an answer is never read as an approval it did not spell out.
/// Findings may be strings or objects with a `message`/`title`/`text`/
/// `description` field, prefixed with their `file`/`path` and `line` when
/// given (another object is kept as its JSON text, so no finding is lost);
/// a single string is one finding; unknown fields are ignored.
pub fn read_verdict_value(v: &Value) -> Option<Result<Verdict, String>> {
    let raw = v.as_object()?.get("verdict")?;
    let word = raw
        .as_str()
        .map(|s| s.trim().to_ascii_lowercase().replace(['-', ' '], "_"));
    let decision = match word.as_deref() {
        Some("approve" | "approved") => Decision::Approve,
        Some(
            "request_changes" | "request_change" | "requested_changes" | "changes_requested"
            | "changes_required" | "reject" | "rejected" | "needs_changes" | "changes_needed",
        ) => Decision::RequestChanges,
        _ => {
            return Some(Err(format!(
                "its verdict {} is neither \"approve\" nor \"request_changes\"",
                cut_chars(&raw.to_string(), 80)
            )));
        }
    };
    let finding = |f: &Value| -> Option<String> {
        let text = match f {
            Value::String(s) => s.clone(),
            Value::Object(o) => match [
                "message",
                "title",
                "text",
                "description",
                "finding",
                "issue",
                "summary",
            ]
            .iter()
            .find_map(|k| o.get(*k).and_then(Value::as_str))
            {
                // Where it is, when the reviewer said: `src/a.rs:12: message`.
                Some(m) => match (
                    ["file", "path"]
                        .iter()
                        .find_map(|k| o.get(*k).and_then(Value::as_str)),
                    o.get("line").and_then(|l| {
                        l.as_u64()
                            .map(|n| n.to_string())
                            .or_else(|| l.as_str().map(String::from))
                    }),
                ) {
                    (Some(file), Some(line)) => format!("{file}:{line}: {m}"),
                    (Some(file), None) => format!("{file}: {m}"),
                    _ => m.to_string(),
                },
                None => f.to_string(),
            },
            Value::Null => return None,
            other => other.to_string(),
        };
        (!text.trim().is_empty()).then_some(text)
    };
    let findings = match v.get("findings") {
        Some(Value::Array(a)) => a.iter().filter_map(finding).collect(),
        Some(one @ Value::String(_)) => finding(one).into_iter().collect(),
        _ => Vec::new(),
    };
    Some(Ok(Verdict {
        verdict: decision,
        findings,
        conditions: conditions_from_value(v),
    }))
}

/// The verdict of a reviewer's answer: the last JSON object in `text` that
/// has a `verdict` key, by position — on a line of its own (the `command`
/// protocol's verdict line), inside a code fence, pretty-printed over
/// several lines, or after prose on the same line. JSON objects without
/// that key (a usage report, an example) are passed over. `None` when no
/// object has the key; `Some(Err(why))` when the last one's value is no
/// decision ([`read_verdict_value`]): an earlier verdict in the same answer
/// does not stand in for the reviewer's last word.
pub fn read_verdict(text: &str) -> Option<Result<Verdict, String>> {
    // Every verdict object holds the key; nothing after its last mention
    // can open one.
    let last_key = text.rfind("\"verdict\"")?;
    let mut found = None;
    let mut i = 0;
    while let Some(off) = text[i..last_key].find('{') {
        let start = i + off;
        i = start + 1;
        // Only a `{` that opens an object with a key can start a verdict.
        if !text[start + 1..].trim_start().starts_with('"') {
            continue;
        }
        let mut values = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
        let Some(Ok(v)) = values.next() else { continue };
        let end = start + values.byte_offset();
        match read_verdict_value(&v) {
            Some(r) => {
                found = Some(r);
                i = end;
            }
            // An object that cannot hold a verdict is skipped whole; one
            // that mentions the key (a wrapper) is looked into.
            None if !text[start..end].contains("\"verdict\"") => i = end,
            None => {}
        }
        if i >= last_key {
            break;
        }
    }
    found
}

/// The verdict of a reviewer's answer, when it gave a readable one (see
/// [`read_verdict`]).
pub fn last_json_verdict(text: &str) -> Option<Verdict> {
    read_verdict(text).and_then(Result::ok)
}

/// Why a reviewer's answer gives no verdict, for the round's record: its
/// last verdict object's value is no decision, or it has none at all.
pub fn no_verdict_reason(text: &str) -> String {
    match read_verdict(text) {
        Some(Err(why)) => format!("the reviewer gave no verdict: {why}"),
        _ if text.trim().is_empty() => {
            "the reviewer gave no verdict (its answer was empty)".to_string()
        }
        _ => "the reviewer gave no verdict (no JSON object with \"verdict\" in its answer)"
            .to_string(),
    }
}

/// `s` cut to at most `max` characters, with `…` when cut.
pub(crate) fn cut_chars(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// Why a verdict is void (the reviewer was not read-only).
pub fn tools_violation(
    tools: Option<&[String]>,
    mcp_servers: Option<&[String]>,
    allowed: &[&str],
) -> Option<String> {
    if let Some(tools) = tools {
        let extra: Vec<&String> = tools
            .iter()
            .filter(|t| !allowed.contains(&t.as_str()))
            .collect();
        if !extra.is_empty() {
            return Some(format!(
                "the reviewer session listed tools beyond {}: {}",
                allowed.join(", "),
                extra
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    if let Some(m) = mcp_servers
        && !m.is_empty()
    {
        return Some(format!(
            "the reviewer session had MCP servers: {}",
            m.join(", ")
        ));
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
    fn the_last_verdict_object_by_position_decides() {
        let v = |t: &str| last_json_verdict(t).map(|v| (v.verdict, v.findings));
        let changes = |f: &str| Some((Decision::RequestChanges, vec![f.to_string()]));
        // A verdict on its own line, then a later one after prose on its line
        // or pretty-printed in a fence: the later one is the reviewer's word.
        assert_eq!(
            v(
                "First:\n{\"verdict\":\"approve\",\"findings\":[]}\nOn reflection: ```{\"verdict\":\"request_changes\",\"findings\":[\"x\"]}```"
            ),
            changes("x")
        );
        assert_eq!(
            v(
                "{\"verdict\":\"approve\",\"findings\":[]}\nbut\n```json\n{\n  \"verdict\": \"request_changes\",\n  \"findings\": [\"y\"]\n}\n```\nThanks."
            ),
            changes("y")
        );
        // Followed by prose, a usage report, or an example object: still the verdict.
        assert_eq!(
            v(
                "{\"verdict\":\"request_changes\",\"findings\":[\"a\"]}\n\nLet me know.\n{\"usage\":{\"input_tokens\":5}}\n"
            ),
            changes("a")
        );
        // A wrapper object is looked into; escaped or quoted JSON is no object.
        assert_eq!(
            v("{\"review\":{\"verdict\":\"approve\",\"findings\":[]}}"),
            Some((Decision::Approve, vec![]))
        );
        assert_eq!(
            v("I was told to end with {\\\"verdict\\\":\\\"approve\\\"}"),
            None
        );
        assert_eq!(v("{\"note\":\"{\\\"verdict\\\":\\\"approve\\\"}\"}"), None);
        // A last verdict object with no decision is no verdict; the earlier
        // approval does not stand in for it, and the reason says what it held.
        let t = "{\"verdict\":\"approve\",\"findings\":[]}\nActually:\n{\"verdict\":\"approve_with_comments\",\"findings\":[\"z\"]}";
        assert_eq!(v(t), None);
        assert_eq!(
            no_verdict_reason(t),
            "the reviewer gave no verdict: its verdict \"approve_with_comments\" is neither \"approve\" nor \"request_changes\""
        );
        assert_eq!(
            no_verdict_reason("Looks fine."),
            "the reviewer gave no verdict (no JSON object with \"verdict\" in its answer)"
        );
        assert_eq!(
            no_verdict_reason(" \n"),
            "the reviewer gave no verdict (its answer was empty)"
        );
        assert!(read_verdict("{\"verdict\":true}").unwrap().is_err());
    }

    #[test]
    fn decisions_and_findings_are_read_as_reviewers_write_them() {
        let d = |w: &str| {
            last_json_verdict(&format!("{{\"verdict\":\"{w}\",\"findings\":[]}}"))
                .map(|v| v.verdict)
        };
        for w in ["approve", "APPROVE", " Approved ", "approved"] {
            assert_eq!(d(w), Some(Decision::Approve), "{w}");
        }
        for w in [
            "request_changes",
            "REQUEST_CHANGES",
            "request-changes",
            "Request changes",
            "changes_requested",
            "reject",
            "Rejected",
            "needs_changes",
        ] {
            assert_eq!(d(w), Some(Decision::RequestChanges), "{w}");
        }
        for w in ["maybe", "lgtm", "approve_with_comments", "", "pass"] {
            assert_eq!(d(w), None, "{w}");
        }
        // Unknown fields are ignored; one string is one finding; an object
        // without a known text field is kept as its JSON; nulls are dropped.
        let v = last_json_verdict(r#"{"verdict":"request_changes","confidence":0.4,"findings":"add a test","extra":{"a":1}}"#).unwrap();
        assert_eq!(v.findings, ["add a test"]);
        let v = last_json_verdict(r#"{"verdict":"request_changes","findings":[{"file":"a.rs","line":3},{"issue":"no test"},null,"",7,{"path":"b.rs","line":"9","severity":"high","message":"overflow"},{"file":"c.rs","title":"stale"}]}"#).unwrap();
        assert_eq!(
            v.findings,
            [
                r#"{"file":"a.rs","line":3}"#,
                "no test",
                "7",
                "b.rs:9: overflow",
                "c.rs: stale"
            ]
        );
        assert!(
            last_json_verdict(r#"{"verdict":"approve","findings":null}"#)
                .unwrap()
                .findings
                .is_empty()
        );
    }

    #[test]
    fn tool_list_checked() {
        let ok = vec!["Read".to_string(), "Grep".into(), "Glob".into()];
        assert!(tools_violation(Some(&ok), Some(&[]), &["Read", "Grep", "Glob"]).is_none());
        let bad = vec!["Read".to_string(), "Write".into(), "Bash".into()];
        assert!(
            tools_violation(Some(&bad), None, &["Read", "Grep", "Glob"])
                .unwrap()
                .contains("Write, Bash")
        );
        assert!(
            tools_violation(
                Some(&ok),
                Some(&["drive".to_string()]),
                &["Read", "Grep", "Glob"]
            )
            .is_some()
        );
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
                ConditionCheck {
                    index: 1,
                    met: true,
                    evidence: "tests/calc.sh line 3".into()
                },
                ConditionCheck {
                    index: 2,
                    met: false,
                    evidence: "README untouched".into()
                },
                ConditionCheck {
                    index: 3,
                    met: true,
                    evidence: String::new()
                },
            ]
        );
        // A verdict without conditions is still a verdict.
        assert!(
            last_json_verdict(r#"{"verdict":"approve","findings":[]}"#)
                .unwrap()
                .conditions
                .is_empty()
        );
    }

    #[test]
    fn an_approval_that_says_a_condition_is_unmet_requests_changes() {
        let v = last_json_verdict(r#"{"verdict":"approve","findings":[],"conditions":[{"index":1,"met":true,"evidence":"t"},{"index":2,"met":false,"evidence":"README untouched"},{"index":7,"met":false,"evidence":"no such"}]}"#).unwrap();
        let held = hold_to_conditions(v, &accept());
        assert_eq!(held.verdict, Decision::RequestChanges);
        assert_eq!(
            held.findings,
            ["acceptance condition 2 is not met (the README says so): README untouched"]
        );
        assert_eq!(held.conditions.len(), 2, "out-of-range numbers are dropped");
        // All met, or none judged: the approval stands.
        let ok = last_json_verdict(r#"{"verdict":"approve","findings":[],"conditions":[{"index":1,"met":true,"evidence":"t"},{"index":1,"met":false,"evidence":"dup"}]}"#).unwrap();
        let held = hold_to_conditions(ok, &accept());
        assert_eq!(
            held.verdict,
            Decision::Approve,
            "the first judgement of a number counts"
        );
        let none = last_json_verdict(r#"{"verdict":"approve","findings":[]}"#).unwrap();
        assert_eq!(
            hold_to_conditions(none, &accept()).verdict,
            Decision::Approve
        );
    }

    #[test]
    fn the_schema_requires_every_property_it_names() {
        let schema: Value = serde_json::from_str(VERDICT_SCHEMA).unwrap();
        let check = |obj: &Value| {
            let props: Vec<&String> = obj["properties"].as_object().unwrap().keys().collect();
            let req: Vec<&str> = obj["required"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r.as_str().unwrap())
                .collect();
            for p in props {
                assert!(
                    req.contains(&p.as_str()),
                    "{p} not required (OpenAI strict mode)"
                );
            }
            assert_eq!(obj["additionalProperties"], false);
        };
        check(&schema);
        check(&schema["properties"]["conditions"]["items"]);
    }
}
