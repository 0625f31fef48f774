//! Where a limit message starts on a line: what may precede it (TUI glyphs, tags, timestamps,
//! `Error:` labels, an HTTP status) and whether a text begins with or holds a known message. Not
//! the reading of a message (see [`super::text`]).

use std::sync::LazyLock;

use regex::Regex;

use super::patterns::{NO_CREDIT_TRIGGERS, TRANSIENT_TRIGGERS, USAGE_TRIGGERS};

/// What may precede a message on its own line (see [`super::read_stream_line`]): whitespace, TUI
/// glyphs and emoji (`⎿ ■ ✕ ⚡ 🖐 ⚠️`, and Gemini CLI's `ℹ`, which Unicode files as a letter),
/// `[..]` tags, the bracket Gemini CLI opens its error with (`✕ [You have exhausted your daily
/// quota on this model.]`), timestamps, `ERROR:` / `Error:` / `API Error:` / `SomeError:`
/// labels, codex's `stream disconnected before completion:`.
static MESSAGE_PREFIX: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?ix)^(?:
            \s+
          | [^\p{L}\p{N}\s(\[{"'`]+
          | \x{2139}\x{FE0F}?
          | \[api\ error\b\s*:?
          | \[[^\]]{0,40}\]
          | \[
          | \d{4}[-/]\d{2}[-/]\d{2}(?:[T\ ]\d{2}:\d{2}(?::\d{2})?(?:\.\d+)?Z?)?
          | \d{2}:\d{2}:\d{2}
          | (?P<exc>(?-i:[\w.]*[a-z0-9](?:Error|Exception)))\s*:
          | (?:api\ |stream\ )?error\b\s*:?
          | [\w.]*(?:error|exception)\s*:
          | warn(?:ing)?\s*:
          | stream\ disconnected\ before\ completion\s*:
        )*"#,
    )
    .unwrap()
});

/// An HTTP status that may open an error's text (`429 You exceeded your current quota`).
pub(super) static STATUS_PREFIX: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[45]\d\d\b[\s:\-]*").unwrap());

/// The line without what may precede its message, and whether that included an
/// exception-class label (`openai.RateLimitError:`, `anthropic.api.ApiException:`), after which
/// the rest is an error's text.
pub(super) fn strip_message_prefix(line: &str) -> (&str, bool) {
    match MESSAGE_PREFIX.captures(line) {
        Some(c) => {
            let end = c.get(0).map_or(0, |m| m.end());
            (line[end..].trim_start(), c.name("exc").is_some())
        }
        None => (line.trim_start(), false),
    }
}

/// True when `text` begins with a known limit message.
pub(super) fn begins_with_message(text: &str) -> bool {
    USAGE_TRIGGERS
        .iter()
        .chain(TRANSIENT_TRIGGERS.iter())
        .chain(NO_CREDIT_TRIGGERS.iter())
        .any(|t| t.re.find(text).is_some_and(|m| m.start() == 0))
}

/// True when `text` holds a known limit message anywhere.
pub(super) fn holds_message(text: &str) -> bool {
    USAGE_TRIGGERS
        .iter()
        .chain(TRANSIENT_TRIGGERS.iter())
        .chain(NO_CREDIT_TRIGGERS.iter())
        .any(|t| t.re.is_match(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemini_cli_brackets_and_info_glyph_precede_a_message() {
        for (line, rest) in [
            (
                "✕ [You have exhausted your daily quota on this model.]",
                "You have exhausted your daily quota on this model.]",
            ),
            (
                "ℹ⚡ You have reached your daily gemini-2.5-pro quota limit.",
                "You have reached your daily gemini-2.5-pro quota limit.",
            ),
            (
                "[API Error: Resource has been exhausted (e.g. check quota).]",
                "Resource has been exhausted (e.g. check quota).]",
            ),
        ] {
            assert_eq!(strip_message_prefix(line).0, rest);
            assert!(begins_with_message(rest), "{rest}");
        }
    }
}
