//! JSON objects in an agent's output: which reader takes one (claude's, codex's, or the text
//! patterns for a raw API error body), and the field helpers they share (compact text, content text).

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde_json::Value;

use super::text::scan_message;
use super::{LimitKind, LimitReading, read_claude_event, read_codex_event};

/// Parses a line as a JSON object, if it is one.
pub(super) fn json_object(line: &str) -> Option<Value> {
    let t = line.trim();
    if !(t.starts_with('{') && t.ends_with('}')) {
        return None;
    }
    serde_json::from_str::<Value>(t)
        .ok()
        .filter(Value::is_object)
}

/// Dispatches a JSON object to the claude or codex reader; an object of neither shape (a raw
/// API error body) is read as text.
pub(super) fn read_json(v: &Value, now: DateTime<Utc>, tz: Tz) -> Option<LimitReading> {
    let ty = v.get("type").and_then(Value::as_str);
    match ty {
        Some("rate_limit_event" | "result" | "assistant" | "system" | "user") => {
            read_claude_event(v, now, tz)
        }
        Some("error") if v.get("message").is_some_and(Value::is_string) => {
            read_codex_event(v, now, tz)
        }
        Some(t)
            if t == "turn.failed"
                || t.starts_with("item.")
                || t.starts_with("thread.")
                || t.starts_with("turn.") =>
        {
            read_codex_event(v, now, tz)
        }
        None if v.get("is_error").is_some() => read_claude_event(v, now, tz),
        _ => {
            let reading = scan_message(&compact(v), now, tz, "json");
            (reading.kind != LimitKind::None).then_some(reading)
        }
    }
}

pub(super) fn compact(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// Concatenated `text` of a claude message content array (or a plain string).
pub(super) fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}
