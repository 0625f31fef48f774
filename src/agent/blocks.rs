//! The blocks of an agent's final text nightshift reads: fenced sections
//! and lists (files, questions) found by [`parse_blocks`], and the text with
//! them taken out ([`strip_blocks`]).
//!
//! Not for the verdict's JSON: `review` judges it.

/// Blocks a writer's final message may carry (docs/loop.md#findings-and-questions).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Blocks {
    /// `FINDINGS:` entries (proposals, filed as issues).
    pub findings: Vec<String>,
    /// `QUESTION:` text (blocks the item).
    pub question: Option<String>,
    /// `FILES:` entries (the writer's claim of what it changed).
    pub files: Vec<String>,
}

/// The kinds of block a writer's answer may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlockKind {
    Findings,
    Question,
    Files,
}

/// The block `line` opens, and the text after its head on the same line.
/// The head is `FINDINGS:`, `QUESTION:` or `FILES:` at the start of the
/// line, also as models decorate it in markdown: a heading (`## QUESTION:`)
/// or bold (`**QUESTION:**`, `**FILES**:`, `__FINDINGS:__`).
fn block_head(line: &str) -> Option<(BlockKind, &str)> {
    let t = line.trim();
    let t = t.trim_start_matches('#').trim_start();
    let bare = t.trim_start_matches(['*', '_']);
    let decorated = bare.len() != t.len();
    for (name, kind) in [
        ("FINDINGS", BlockKind::Findings),
        ("QUESTION", BlockKind::Question),
        ("FILES", BlockKind::Files),
    ] {
        let Some(rest) = bare.strip_prefix(name) else {
            continue;
        };
        let Some(rest) = rest.trim_start_matches(['*', '_']).strip_prefix(':') else {
            continue;
        };
        let mut rest = rest.trim_start_matches(['*', '_']).trim();
        if decorated {
            // `**QUESTION: Should X?**`: the closing marks are no text.
            rest = rest.trim_end_matches(['*', '_']).trim_end();
        }
        return Some((kind, rest));
    }
    None
}

/// The text of a list item line (`- x`, `* x`, `+ x`, `• x`, `1. x`,
/// `1) x`), or `None` for a line that is not one.
fn list_item(t: &str) -> Option<&str> {
    for marker in ["- ", "* ", "+ ", "• "] {
        if let Some(rest) = t.strip_prefix(marker) {
            return Some(rest.trim());
        }
    }
    let digits = t.len() - t.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    if digits > 0 && digits <= 3 {
        let rest = &t[digits..];
        if let Some(rest) = rest.strip_prefix(". ").or_else(|| rest.strip_prefix(") ")) {
            return Some(rest.trim());
        }
    }
    None
}

/// A `FILES:` entry as models write it, reduced to the path: `` `src/a.rs` ``,
/// `**src/a.rs**`, `src/a.rs (new)`, `src/a.rs — added sub`, `src/a.rs: x`;
/// `none` is no entry.
fn file_entry(entry: &str) -> Option<String> {
    // Bold marks only: `_` begins real names (`__init__.py`).
    let e = entry.trim().trim_start_matches('*').trim();
    let path = if let Some(inner) = e.strip_prefix('`') {
        inner.split('`').next().unwrap_or("")
    } else {
        let mut p = e;
        for sep in [" (", " — ", " – ", " - ", ": ", "\t"] {
            if let Some(i) = p.find(sep) {
                p = &p[..i];
            }
        }
        p.trim_end_matches([':', ',', ';', '*'])
    };
    let path = path.trim().trim_matches(['"', '\'']);
    // `FILES: none`: a claim of nothing.
    let nothing = ["none", "(none)", "n/a", "nothing", "-"]
        .iter()
        .any(|n| path.eq_ignore_ascii_case(n));
    (!path.is_empty() && !nothing).then(|| path.to_string())
}

/// A code fence line (```` ``` ```` or `~~~`, with or without a language).
fn is_fence(t: &str) -> bool {
    t.starts_with("```") || t.starts_with("~~~")
}

/// Parses `FINDINGS:`, `QUESTION:` and `FILES:` blocks (docs/loop.md#findings-and-questions): a line
/// that is the block's head followed by list items (`- ` as docs/loop.md#findings-and-questions
/// shows them; `*`, `+` and numbered items are read too; an indented line
/// continues a wrapped finding), until a blank line, a fence or a line that
/// is no item. A head may carry its first entry
/// on the same line and may be decorated in markdown (see `block_head`).
/// A `QUESTION:` takes every following line until a blank line or a JSON
/// line (the usage report a `command` agent prints after it). `FILES:`
/// entries are reduced to their paths (see `file_entry`).
pub fn parse_blocks(text: &str) -> Blocks {
    let mut b = Blocks::default();
    let mut current: Option<BlockKind> = None;
    let mut question: Vec<String> = Vec::new();
    for raw in text.lines() {
        let t = raw.trim();
        if t.is_empty() || is_fence(t) {
            current = None;
            continue;
        }
        if let Some((kind, rest)) = block_head(t) {
            current = Some(kind);
            match kind {
                BlockKind::Findings if !rest.is_empty() => {
                    b.findings.push(list_item(rest).unwrap_or(rest).to_string())
                }
                BlockKind::Question => {
                    question.clear();
                    if !rest.is_empty() {
                        question.push(rest.to_string());
                    }
                }
                BlockKind::Files if !rest.is_empty() => b
                    .files
                    .extend(rest.split_whitespace().filter_map(file_entry)),
                _ => {}
            }
            continue;
        }
        match current {
            Some(BlockKind::Findings) => match list_item(t) {
                Some(f) if !f.is_empty() => b.findings.push(f.to_string()),
                // An indented line that is no item continues the entry
                // above it (a long finding wrapped).
                None if raw.starts_with([' ', '\t']) && !b.findings.is_empty() => {
                    let last = b.findings.last_mut().expect("a finding");
                    last.push(' ');
                    last.push_str(t);
                }
                _ => current = None,
            },
            Some(BlockKind::Files) => match list_item(t) {
                Some(f) => b.files.extend(file_entry(f)),
                None => current = None,
            },
            // A JSON line (a usage report, a verdict) is machine talk, not
            // the question's text: it ends the block.
            Some(BlockKind::Question)
                if t.starts_with('{') && serde_json::from_str::<serde_json::Value>(t).is_ok() =>
            {
                current = None
            }
            // A question's lines are its text (numbered options included).
            Some(BlockKind::Question) => question.push(t.trim_start_matches("- ").to_string()),
            None => {}
        }
    }
    if !question.is_empty() {
        b.question = Some(question.join("\n"));
    }
    for f in std::mem::take(&mut b.files) {
        if !b.files.contains(&f) {
            b.files.push(f);
        }
    }
    b
}

/// An agent's final message without the machine-read parts: the
/// `FINDINGS:`/`QUESTION:`/`FILES:` blocks and JSON lines (usage reports,
/// verdicts). What remains is its own account, shown to a person as such.
pub fn strip_blocks(text: &str) -> String {
    let mut out = Vec::new();
    let mut in_block = false;
    for line in text.lines() {
        let t = line.trim();
        if block_head(t).is_some() {
            in_block = true;
            continue;
        }
        if in_block {
            if t.is_empty() || is_fence(t) {
                in_block = false;
            }
            continue;
        }
        if t.starts_with('{') && serde_json::from_str::<serde_json::Value>(t).is_ok() {
            continue;
        }
        out.push(line);
    }
    out.join("\n").trim().to_string()
}
