//! What a person reads of a running call's output (docs/serve.md#live-output):
//! the agent CLIs print JSON events (Claude Code's `stream-json`, Codex's
//! `exec --json`), one a line; the board shows their words and tool uses,
//! not the JSON. A line that is not JSON (a `command` agent, a gate) is
//! shown as it is.
//!
//! Not for parsing a call's result (`claude::stream`, `codex`): this reads
//! any line leniently and never fails.

use serde_json::Value;

/// The most characters of one shown line; longer ones end in `…`.
pub const LINE_CHARS: usize = 200;

/// The readable lines of one output line: an assistant's text, `→ TOOL
/// input` for a tool use, `$ COMMAND` for a Codex command, the final
/// result; nothing for events a person does not need (session starts,
/// token counts, tool results). Each at most [`LINE_CHARS`] characters.
pub fn readable(line: &str) -> Vec<String> {
    let line = line.trim_end();
    if line.is_empty() {
        return vec![];
    }
    let Ok(v) = serde_json::from_str::<Value>(line) else {
        return vec![short(line)];
    };
    let mut out = Vec::new();
    if let Some(blocks) = v.pointer("/message/content").and_then(Value::as_array) {
        // Claude Code: an assistant message's text and tool uses.
        for b in blocks {
            match b["type"].as_str() {
                Some("text") => out.extend(b["text"].as_str().map(text_lines).unwrap_or_default()),
                Some("tool_use") => out.push(short(&format!(
                    "→ {} {}",
                    b["name"].as_str().unwrap_or("tool"),
                    b["input"]
                ))),
                _ => {}
            }
        }
    } else if let Some(r) = v["result"].as_str() {
        out.extend(text_lines(r));
    } else if let Some(item) = v.get("item").filter(|i| i.is_object()) {
        // Codex: a finished item (a message, a command it ran).
        if let Some(c) = item["command"].as_str() {
            out.push(short(&format!("$ {c}")));
        } else if let Some(t) = item["text"].as_str() {
            out.extend(text_lines(t));
        }
    } else if v.is_object() {
        // Other JSON events say nothing a person needs.
    } else {
        out.push(short(line));
    }
    out
}

/// A text's non-empty lines, each shortened.
fn text_lines(t: &str) -> Vec<String> {
    t.lines()
        .filter(|l| !l.trim().is_empty())
        .map(short)
        .collect()
}

/// `s` cut to [`LINE_CHARS`] characters.
fn short(s: &str) -> String {
    match s.char_indices().nth(LINE_CHARS) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_events_read_as_words_and_tool_uses_and_other_lines_as_they_are() {
        let claude = r#"{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"Adding sub.\nThen a test."},{"type":"tool_use","name":"Edit","input":{"file_path":"calc.txt"}}]}}"#;
        assert_eq!(
            readable(claude),
            [
                "Adding sub.",
                "Then a test.",
                r#"→ Edit {"file_path":"calc.txt"}"#
            ]
        );
        let codex = r#"{"type":"item.completed","item":{"id":"i1","type":"command_execution","command":"cargo test","exit_code":0}}"#;
        assert_eq!(readable(codex), ["$ cargo test"]);
        assert!(readable(r#"{"type":"system","subtype":"init"}"#).is_empty());
        assert_eq!(readable("plain <b>text</b>\n"), ["plain <b>text</b>"]);
        let long = "x".repeat(500);
        assert_eq!(readable(&long)[0].chars().count(), LINE_CHARS + 1);
        assert!(readable("").is_empty());
    }
}
