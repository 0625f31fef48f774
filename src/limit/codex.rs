//! `codex exec --json` events: `error`, `turn.failed` and `item.*` error items. Not codex's
//! stderr (read as text by [`super::read_text`]).

use std::sync::LazyLock;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use regex::Regex;
use serde_json::Value;

use super::text::scan_message;
use super::{LimitKind, LimitReading};

/// Reads one `codex exec --json` event.
///
/// Returns `Some` only for a limit reported by an `error` event (`message`), a `turn.failed`
/// event (`error.message`) or an `item.*` event whose item is of type `error`. codex's own
/// retry notices (`Reconnecting... 2/5 (…)`, `…; retrying 1/5 in 209ms…`) are not final and
/// return `None`; agent messages and reasoning are never read. docs/agents.md, docs/limits.md.
pub fn read_codex_event(ev: &Value, now: DateTime<Utc>, tz: Tz) -> Option<LimitReading> {
    let ty = ev.get("type").and_then(Value::as_str)?;
    let message = match ty {
        "error" => ev.get("message").and_then(Value::as_str)?,
        "turn.failed" => ev
            .pointer("/error/message")
            .and_then(Value::as_str)
            .or_else(|| ev.get("error").and_then(Value::as_str))?,
        t if t.starts_with("item.") => {
            if ev.pointer("/item/type").and_then(Value::as_str) != Some("error") {
                return None;
            }
            ev.pointer("/item/message").and_then(Value::as_str)?
        }
        _ => return None,
    };
    // codex's own retry notices ("Reconnecting... 2/5 (…)", "stream error: …; retrying 1/5
    // in 209ms…") are not final: the turn goes on, and its `turn.failed` decides.
    static RETRY_NOTICE: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"(?i);\s*retrying\s+\d+/\d+\s+in\b").unwrap());
    if message.trim_start().starts_with("Reconnecting") || RETRY_NOTICE.is_match(message) {
        return None;
    }
    let reading = scan_message(message, now, tz, &format!("codex {ty}"));
    (reading.kind != LimitKind::None).then_some(reading)
}
