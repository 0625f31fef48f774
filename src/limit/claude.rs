//! claude's stream-json / json events: `rate_limit_event`, a failed `result`, and the
//! synthetic `assistant` message with `error: "rate_limit"`. Not claude's plain text (see
//! [`super::text`]), and never the model's own prose.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde_json::Value;

use super::event::{compact, content_text};
use super::reset::{epoch_instant, epoch_of};
use super::text::scan_message;
use super::{FUTURE_HORIZON, LimitKind, LimitReading, PAST_GRACE, accept_reset};

/// Reads one claude stream-json / json event.
///
/// Returns `Some` only when the event reports a limit:
/// - `rate_limit_event` with `rate_limit_info.status == "rejected"`: a usage limit, reset from
///   `resetsAt` (epoch seconds), or `overageResetsAt` when that is earlier; `allowed` /
///   `allowed_warning` is not a limit, nor is `rejected` while extra usage carries the call
///   (`overageStatus` `allowed` / `allowed_warning`, or `isUsingOverage: true`);
/// - `result` with `is_error: true`: its `result` (or `error`) text is read; with
///   `api_error_status: 429` an unreadable text is still transient throttling;
/// - `assistant` with `error: "rate_limit"` (claude's synthetic limit message): its text is read,
///   transient if unreadable.
///
/// `subtype` is never used (claude says `subtype: "success"` on failures); model text in an
/// ordinary `assistant` event is never read. docs/agents.md, docs/limits.md.
pub fn read_claude_event(ev: &Value, now: DateTime<Utc>, tz: Tz) -> Option<LimitReading> {
    match ev.get("type").and_then(Value::as_str) {
        Some("rate_limit_event") => rate_limit_event(ev, now),
        Some("assistant") => assistant_error(ev, now, tz),
        Some("result") | None => failed_result(ev, now, tz),
        _ => None,
    }
}

/// A `rate_limit_event`: a usage limit when `status` is `rejected` and extra usage does not
/// carry the call; its reset is the earlier believable one of `resetsAt` / `overageResetsAt`.
fn rate_limit_event(ev: &Value, now: DateTime<Utc>) -> Option<LimitReading> {
    let info = ev.get("rate_limit_info")?;
    let field = |k: &str| info.get(k).and_then(Value::as_str);
    if field("status") != Some("rejected") {
        return None;
    }
    // claude's own rule (`isUsingOverage`): the plan's limit is hit but extra usage
    // is allowed, so the call goes on, paid from extra usage. Not a limit.
    let using_overage = match field("overageStatus") {
        Some("allowed" | "allowed_warning") => true,
        Some(_) => false,
        None => info.get("isUsingOverage").and_then(Value::as_bool) == Some(true),
    };
    if using_overage {
        return None;
    }
    let which = field("rateLimitType").unwrap_or("unspecified");
    let mut reading = LimitReading {
        kind: LimitKind::UsageLimit,
        resets_at: None,
        retry_after: None,
        source: format!("claude rate_limit_event (status rejected, {which})"),
        message: compact(ev),
    };
    // With extra usage rejected too, whichever resets first frees the account (claude
    // prints that one); a reset outside the believable window is not taken.
    let resets: Vec<(&str, i64)> = ["resetsAt", "overageResetsAt"]
        .into_iter()
        .filter_map(|k| Some((k, info.get(k).and_then(epoch_of)?)))
        .collect();
    let believable = |t: &DateTime<Utc>| *t >= now - PAST_GRACE && *t <= now + FUTURE_HORIZON;
    let chosen = resets
        .iter()
        .filter(|(_, e)| epoch_instant(*e).is_some_and(|t| believable(&t)))
        .min_by_key(|(_, e)| *e)
        .or(resets.first());
    if let Some((name, epoch)) = chosen {
        let label = format!("{}: {name} {epoch}", reading.source);
        accept_reset(&mut reading, epoch_instant(*epoch), now, &label);
    }
    Some(reading)
}

/// claude's synthetic `assistant` message with `error: "rate_limit"`: its text is read,
/// transient throttling when the text is not a usage limit.
fn assistant_error(ev: &Value, now: DateTime<Utc>, tz: Tz) -> Option<LimitReading> {
    let error = ev
        .get("error")
        .or_else(|| ev.pointer("/message/error"))
        .and_then(Value::as_str)?;
    if error != "rate_limit" {
        return None;
    }
    let text = content_text(ev.pointer("/message/content"));
    let inner = scan_message(&text, now, tz, "claude assistant error rate_limit");
    Some(if inner.kind == LimitKind::None {
        LimitReading {
            kind: LimitKind::Transient,
            resets_at: None,
            retry_after: None,
            source: "claude assistant error rate_limit (text not a usage limit)".into(),
            message: text.trim().to_string(),
        }
    } else {
        inner
    })
}

/// A `result` with `is_error: true`: its `result` (or `error`) text is read; with
/// `api_error_status: 429` a text that is no limit is still transient throttling.
fn failed_result(ev: &Value, now: DateTime<Utc>, tz: Tz) -> Option<LimitReading> {
    if ev.get("is_error").and_then(Value::as_bool) != Some(true) {
        return None;
    }
    let text = ev
        .get("result")
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .or_else(|| ev.get("error").and_then(Value::as_str))
        .or_else(|| ev.pointer("/error/message").and_then(Value::as_str))
        .unwrap_or("");
    let status = ev.get("api_error_status").and_then(Value::as_u64);
    let origin = match status {
        Some(code) => format!("claude result (api_error_status {code})"),
        None => "claude result".to_string(),
    };
    let inner = scan_message(text, now, tz, &origin);
    if inner.kind != LimitKind::None {
        return Some(inner);
    }
    (status == Some(429)).then(|| LimitReading {
        kind: LimitKind::Transient,
        resets_at: None,
        retry_after: None,
        source: format!("{origin}: 429 without a usage-limit message"),
        message: text.trim().to_string(),
    })
}
