//! GitHub's JSON error body: its message, its `errors` list and codes.

use http::{HeaderMap, StatusCode};
use serde::Deserialize;
use serde_json::Value;

use super::html::{describe_body, quote};

pub(super) fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// GitHub's error body: `{"message": ..., "errors": [...]}`.
#[derive(Debug, Deserialize, Default)]
pub(super) struct ErrorJson {
    #[serde(default)]
    pub(super) message: Option<String>,
    #[serde(default)]
    pub(super) errors: Vec<Value>,
    /// A blocked repository's `{"reason", "created_at", "html_url"}` (451).
    #[serde(default)]
    pub(super) block: Value,
}

pub(super) fn error_json(body: &str) -> ErrorJson {
    serde_json::from_str(body).unwrap_or_default()
}

pub(super) fn is_json(body: &str) -> bool {
    serde_json::from_str::<serde::de::IgnoredAny>(body).is_ok()
}

/// A body that was meant to be JSON but stops short: empty, or starting
/// like JSON (`{`, `[`) without being valid JSON.
pub(super) fn is_cut_short(body: &str) -> bool {
    let t = body.trim_start_matches('\u{feff}').trim();
    t.is_empty() || ((t.starts_with('{') || t.starts_with('[')) && !is_json(t))
}

/// GitHub's message, or a one-line account of a body that is not GitHub's
/// JSON: the status's reason with the page title of an HTML page, an
/// excerpt of plain text, or "empty body".
pub(super) fn error_message(body: &str, status: StatusCode) -> String {
    if let Some(m) = error_json(body).message.filter(|m| !m.trim().is_empty()) {
        return quote(&m);
    }
    let reason = status.canonical_reason().unwrap_or("(no reason)");
    format!("{reason} ({})", describe_body(body))
}

/// The `errors` list rendered one string per entry, e.g.
/// `PullRequest custom: A pull request already exists for o:b.`.
pub(super) fn error_details(body: &str) -> Vec<String> {
    error_json(body)
        .errors
        .iter()
        .map(|e| match e {
            Value::String(s) => quote(s),
            Value::Object(o) => {
                let field = |k: &str| o.get(k).and_then(Value::as_str).unwrap_or("");
                let head = [field("resource"), field("field"), field("code")]
                    .into_iter()
                    .filter(|s| !s.is_empty())
                    .collect::<Vec<_>>()
                    .join(" ");
                match (head.is_empty(), field("message")) {
                    (_, "") => head,
                    (true, m) => quote(m),
                    (false, m) => format!("{head}: {}", quote(m)),
                }
            }
            other => quote(&other.to_string()),
        })
        .collect()
}

pub(super) fn mentions_code(body: &str, code: &str) -> bool {
    error_json(body)
        .errors
        .iter()
        .any(|e| e.get("code").and_then(Value::as_str) == Some(code))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_cut_short_are_told_from_other_text() {
        for cut in [
            "",
            "  \n",
            "[{\"number\": 1, \"html_u",
            "{\"message\": \"x",
            "\u{feff}[",
        ] {
            assert!(is_cut_short(cut), "{cut:?}");
        }
        for whole in ["[]", "{}", " [1] ", "<html></html>", "Sign in", "null"] {
            assert!(!is_cut_short(whole), "{whole:?}");
        }
    }
}
