//! One nested line of an item read as a detail: the keywords (`accept:`,
//! `verify:`, `scope:`, `allow:`, `question:`, `rounds:`, `timeout:`, the
//! change-size limits) in their accepted spellings, their values checked,
//! anything else a note.
//!
//! Not for the policy's caps on these values: the contract module judges them.

use super::lines::{strip_bullet, strip_indent};
use super::model::{DetailKind, DetailLine, Details, Problem};
use std::path::Path;
use std::time::Duration;

/// Classifies one non-blank nested line into `details`, recording problems.
pub(super) fn read_detail(
    path: &Path,
    line: usize,
    verbatim: &str,
    indent: usize,
    opaque: bool,
    details: &mut Details,
    problems: &mut Vec<Problem>,
) {
    let mut problem = |message: String| {
        problems.push(Problem {
            path: path.to_path_buf(),
            line,
            message,
        });
    };
    // `-    rounds: 2` is a valid list item too (up to 4 spaces after the marker).
    let (body, _) = strip_bullet(verbatim);
    let keyword = if opaque {
        None
    } else {
        keyword(body.trim_end())
    };
    let kind = match keyword {
        None => {
            if !opaque && let Some(message) = note_problem(body.trim_end()) {
                problem(message);
            }
            details
                .notes
                .push(strip_indent(verbatim, indent).trim_end().to_string());
            DetailKind::Note
        }
        Some((kind, value)) => {
            read_keyword(kind, value, line, details, &mut problem);
            kind
        }
    };
    details.lines.push(DetailLine {
        line,
        text: verbatim.to_string(),
        relative: strip_indent(verbatim, indent).to_string(),
        kind,
    });
}

/// Why a line read as a note (`body`, its bullet stripped) is likely a
/// mistake: `round: 2` or `acceptance: …` would silently become a note, and
/// the limit or condition it meant would not hold; so would a keyword
/// inside markup (`` `verify: make` ``, `**accept: x`).
fn note_problem(body: &str) -> Option<String> {
    if let Some((typed, meant)) = near_keyword(body) {
        return Some(format!(
            "`{typed}:` is not a detail keyword — did you mean `{meant}:`? (to keep it as a note, drop the colon)"
        ));
    }
    unread_keyword(body).map(|word| {
        format!(
            "`{word}:` is written inside markup nightshift does not read ({body:?}) — write it plain at the start of the line, e.g. `{word}: …` (to keep it as a note, drop the colon)"
        )
    })
}

/// Records the value of one keyword line (`kind`, its trimmed `value`, at
/// `line`) in `details`; a malformed value goes to `problem` instead.
fn read_keyword(
    kind: DetailKind,
    value: &str,
    line: usize,
    details: &mut Details,
    problem: &mut dyn FnMut(String),
) {
    match kind {
        DetailKind::Accept if value.is_empty() => {
            problem("empty `accept:` — write the condition after the colon".to_string())
        }
        DetailKind::Accept => details.accept.push(value.to_string()),
        DetailKind::Question if value.is_empty() => problem(
            "empty `question:` — write the question after the colon, or delete the line"
                .to_string(),
        ),
        DetailKind::Question => details.questions.push(value.to_string()),
        DetailKind::Verify => match verify_command(value) {
            Ok(cmd) => details.verify.push(cmd),
            Err(message) => problem(message),
        },
        DetailKind::Scope => read_globs("scope", value, &mut details.scope, problem),
        DetailKind::Allow => read_globs("allow", value, &mut details.allow, problem),
        DetailKind::Rounds => match item_rounds(value) {
            Ok(n) => {
                if let Some((_, first)) = details.rounds {
                    problem(format!(
                        "`rounds:` given again (first on line {first}) — keep one"
                    ));
                }
                details.rounds = Some((n, line));
            }
            Err(message) => problem(message),
        },
        DetailKind::Timeout => match item_timeout(value) {
            Ok(d) => {
                if let Some((_, first)) = details.timeout {
                    problem(format!(
                        "`timeout:` given again (first on line {first}) — keep one"
                    ));
                }
                details.timeout = Some((d, line));
            }
            Err(message) => problem(message),
        },
        DetailKind::MaxChangedFiles | DetailKind::MaxDiffLines => {
            let word = kind_word(kind);
            let slot = if kind == DetailKind::MaxChangedFiles {
                &mut details.max_changed_files
            } else {
                &mut details.max_diff_lines
            };
            match item_count(word, value) {
                Ok(n) => {
                    if let Some((_, first)) = *slot {
                        problem(format!(
                            "`{word}:` given again (first on line {first}) — keep one"
                        ));
                    }
                    *slot = Some((n, line));
                }
                Err(message) => problem(message),
            }
        }
        // keyword() yields only the keywords of KEYWORDS.
        DetailKind::Note => {}
    }
}

/// The globs of a `scope:` or `allow:` value (`word`) into `into`, each
/// checked to compile.
fn read_globs(word: &str, value: &str, into: &mut Vec<String>, problem: &mut dyn FnMut(String)) {
    match path_globs(word, value) {
        Err(message) => problem(message),
        Ok(globs) if globs.is_empty() => problem(if word == "scope" {
            "empty `scope:` — write the paths the writer may change, e.g. `scope: src/**`"
                .to_string()
        } else {
            "empty `allow:` — write the protected paths this item may change, e.g. `allow: .github/workflows/ci.yml`, or delete the line"
                .to_string()
        }),
        Ok(globs) => {
            for glob in globs {
                match globset::Glob::new(&glob) {
                    Ok(_) => into.push(glob),
                    Err(err) => problem(format!(
                        "bad glob `{glob}` in `{word}:`: {} — fix the pattern",
                        err.kind()
                    )),
                }
            }
        }
    }
}

/// The nine detail keywords of docs/backlog.md#details and their kinds.
const KEYWORDS: [(&str, DetailKind); 9] = [
    ("accept", DetailKind::Accept),
    ("verify", DetailKind::Verify),
    ("scope", DetailKind::Scope),
    ("allow", DetailKind::Allow),
    ("question", DetailKind::Question),
    ("rounds", DetailKind::Rounds),
    ("timeout", DetailKind::Timeout),
    ("max_changed_files", DetailKind::MaxChangedFiles),
    ("max_diff_lines", DetailKind::MaxDiffLines),
];

/// Splits `keyword: value` for the detail keywords (ASCII case-insensitive,
/// `:` or full-width `：`, optionally wrapped in emphasis: `**accept:** x`,
/// `**accept**: x`, `_accept_: x`, or the whole line `**accept: x**`).
/// Returns the kind and the trimmed value.
pub(super) fn keyword(body: &str) -> Option<(DetailKind, &str)> {
    labelled_keyword(body).or_else(|| {
        // The whole line in emphasis: the label rule does not see the close.
        ["**", "__", "*", "_"].iter().find_map(|&delim| {
            let inner = body.strip_prefix(delim)?.strip_suffix(delim)?;
            if inner.starts_with(['*', '_']) || inner.ends_with(['*', '_']) {
                return None;
            }
            labelled_keyword(inner).filter(|(_, value)| !value.is_empty())
        })
    })
}

/// A keyword line whose keyword is ordinary text or a label in emphasis.
fn labelled_keyword(body: &str) -> Option<(DetailKind, &str)> {
    let colon = |s: &str| -> Option<usize> {
        s.strip_prefix(':')
            .or_else(|| s.strip_prefix('：'))
            .map(|rest| s.len() - rest.len())
    };
    // Longest delimiter first: `**` before `*`.
    ["**", "__", "*", "_", ""].iter().find_map(|&delim| {
        let inner = body.strip_prefix(delim)?;
        KEYWORDS.iter().find_map(|&(word, kind)| {
            let head = inner.get(..word.len())?;
            if !head.eq_ignore_ascii_case(word) {
                return None;
            }
            let rest = inner[word.len()..].trim_start_matches([' ', '\t']);
            let value = if delim.is_empty() {
                &rest[colon(rest)?..]
            } else if let Some(after) = rest.strip_prefix(delim) {
                // **accept**: value
                let after = after.trim_start_matches([' ', '\t']);
                &after[colon(after)?..]
            } else {
                // **accept:** value
                rest[colon(rest)?..].strip_prefix(delim)?
            };
            Some((kind, value.trim()))
        })
    })
}

/// A `word:` line whose word is a near miss of a detail keyword (one edit
/// away, or two for the long ones, same first letter; or the keyword with a
/// suffix such as `acceptance`, `verification`, `questions`): the word as
/// typed and the keyword meant. Prose (several words before the colon) and
/// real keywords are `None`.
fn near_keyword(body: &str) -> Option<(String, &'static str)> {
    let body = body.trim_start_matches(['*', '_']);
    let colon = body.find([':', '：'])?;
    let typed = body[..colon].trim_end_matches(['*', '_', ' ', '\t']);
    if typed.is_empty()
        || typed.len() > 20
        || !typed
            .chars()
            .all(|c| c.is_ascii_alphabetic() || c == '_' || c == '-')
    {
        return None;
    }
    let lower = typed.to_ascii_lowercase();
    if KEYWORDS.iter().any(|(w, _)| *w == lower) {
        return None;
    }
    // Whole words people write for these keywords.
    const ALIASES: [(&str, &str); 10] = [
        ("acceptance", "accept"),
        ("accepts", "accept"),
        ("verification", "verify"),
        ("verifies", "verify"),
        ("questions", "question"),
        ("round", "rounds"),
        ("time-out", "timeout"),
        ("time_out", "timeout"),
        ("max_files", "max_changed_files"),
        ("max_lines", "max_diff_lines"),
    ];
    if let Some((_, meant)) = ALIASES.iter().find(|(a, _)| *a == lower) {
        return Some((typed.to_string(), meant));
    }
    KEYWORDS
        .iter()
        .map(|(w, _)| w)
        .filter(|w| w.as_bytes()[0] == lower.as_bytes()[0])
        .map(|w| (strsim::damerau_levenshtein(&lower, w), *w))
        .filter(|(d, w)| *d >= 1 && *d <= if w.len() >= 7 { 2 } else { 1 })
        .min()
        .map(|(_, w)| (typed.to_string(), w))
}

/// The keyword of a line that starts with one and its colon behind markup
/// [`keyword`] does not read: a code span (`` `verify: make` ``,
/// `` `scope:` src/** ``) or unbalanced emphasis (`**accept: x`).
fn unread_keyword(body: &str) -> Option<&'static str> {
    let inner = body.trim_start_matches(['*', '_', '`']);
    if inner.len() == body.len() {
        return None;
    }
    let (word, _) = KEYWORDS.iter().find(|(word, _)| {
        inner
            .get(..word.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(word))
    })?;
    let rest = inner[word.len()..].trim_start_matches(['*', '_', '`', ' ', '\t']);
    (rest.starts_with(':') || rest.starts_with('：')).then_some(*word)
}

/// The command of a `verify:` value: the inside of a code span if it starts
/// with backticks, else the whole value.
pub(super) fn verify_command(value: &str) -> Result<String, String> {
    let ticks = value.len() - value.trim_start_matches('`').len();
    if ticks == 0 {
        if value.is_empty() {
            return Err(
                "empty `verify:` — write the command after the colon, e.g. verify: `cargo test`"
                    .to_string(),
            );
        }
        if let Some(bare) = value.strip_prefix("$ ") {
            return Err(format!(
                "shell prompt `$ ` before the command in `verify:` — write verify: `{}`",
                bare.trim_start()
            ));
        }
        if value.contains('`') {
            // `run `make check` first` would reach `sh -c` as a command substitution.
            return Err(format!(
                "prose around the command in `verify:` ({value:?}) — write the command alone, in backticks: verify: `CMD`"
            ));
        }
        return Ok(value.to_string());
    }
    let fence = &value[..ticks];
    let inner_and_rest = &value[ticks..];
    let Some(close) = inner_and_rest.find(fence) else {
        return Err(format!(
            "unclosed {fence} in `verify:` — write verify: `CMD`"
        ));
    };
    let command = inner_and_rest[..close].trim();
    let after = inner_and_rest[close + ticks..].trim();
    if command.is_empty() {
        return Err("empty `verify:` — write the command between the backticks".to_string());
    }
    if let Some(bare) = command.strip_prefix("$ ") {
        // Copied from a terminal or a README: `sh -c` would run `$`.
        return Err(format!(
            "shell prompt `$ ` before the command in `verify:` — write verify: `{}`",
            bare.trim_start()
        ));
    }
    if !after.is_empty() {
        return Err(format!(
            "text after the command in `verify:` ({after:?}) — one command per `verify:` line, in backticks"
        ));
    }
    Ok(command.to_string())
}

/// Separators between globs on one `scope:` or `allow:` line.
fn is_scope_separator(c: char) -> bool {
    matches!(c, ',' | '，' | '、' | ';' | '；') || c.is_whitespace()
}

/// Globs of a `scope:` value ([`path_globs`]).
#[cfg(test)]
pub(super) fn scope_globs(value: &str) -> Result<Vec<String>, String> {
    path_globs("scope", value)
}

/// Globs of a `scope:` or `allow:` (`word`) value, split on separators.
/// When the line holds backticks, each code span is one or more globs, and
/// a word outside them must look like a path (hold `/`, `.`, `*`, `?`, `[`
/// or `{`): there the writer is clearly quoting paths, so
/// `scope: \`src/**\` only the parser` is prose that would turn into globs
/// no change could satisfy.
fn path_globs(word: &str, value: &str) -> Result<Vec<String>, String> {
    let globs = glob_words(word, value)?;
    // These globs match paths inside the checkout: an absolute or `..` glob
    // matches nothing, and reads as a promise nightshift cannot keep.
    if let Some(g) = globs
        .iter()
        .find(|g| g.starts_with('/') || g.split('/').any(|part| part == ".."))
    {
        let example = if word == "scope" {
            "src/**"
        } else {
            ".github/workflows/ci.yml"
        };
        return Err(format!(
            "{word} {g:?} leaves the repository — {word} globs are paths inside it, e.g. `{example}`"
        ));
    }
    Ok(globs)
}

fn glob_words(word: &str, value: &str) -> Result<Vec<String>, String> {
    let words = |s: &str| -> Vec<String> {
        s.split(is_scope_separator)
            .filter(|g| !g.is_empty())
            .map(str::to_string)
            .collect()
    };
    if !value.contains('`') {
        return Ok(words(value));
    }
    let mut globs = Vec::new();
    let mut rest = value;
    loop {
        let open = rest.find('`').unwrap_or(rest.len());
        let prose: Vec<String> = words(&rest[..open])
            .into_iter()
            .filter(|w| !w.contains(['/', '.', '*', '?', '[', '{']))
            .collect();
        if !prose.is_empty() {
            return Err(format!(
                "prose in `{word}:` ({:?}) — list only paths: each in backticks, separated by commas or spaces",
                prose.join(" ")
            ));
        }
        globs.extend(words(&rest[..open]));
        if open == rest.len() {
            return Ok(globs);
        }
        let after = &rest[open..];
        let ticks = after.len() - after.trim_start_matches('`').len();
        let fence = &after[..ticks];
        let inner = &after[ticks..];
        let Some(close) = inner.find(fence) else {
            return Err(format!(
                "unclosed {fence} in `{word}:` — write {word}: `GLOB`, `GLOB`"
            ));
        };
        globs.extend(words(&inner[..close]));
        rest = &inner[close + ticks..];
    }
}

/// Full-width ASCII variants (`３`, `ｍ`, IME full-width mode) and the
/// ideographic space to their ASCII forms.
pub(super) fn narrow(value: &str) -> String {
    value
        .chars()
        .map(|c| match c {
            '\u{FF01}'..='\u{FF5E}' => char::from_u32(c as u32 - 0xFEE0).unwrap_or(c),
            '\u{3000}' => ' ',
            c => c,
        })
        .collect()
}

/// Whether `c` shows nothing on its own: white space, a Unicode format
/// character (category Cf: zero-width space and joiners, bidi marks, the BOM,
/// soft hyphen, tags), a variation selector or combining grapheme joiner, or a
/// blank filler (Hangul fillers, braille blank). Such a title is no title.
pub(super) fn is_invisible(c: char) -> bool {
    c.is_whitespace()
        || matches!(c,
            '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{115F}' | '\u{1160}' | '\u{17B4}' | '\u{17B5}'
            | '\u{180B}'..='\u{180F}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}' | '\u{2800}' | '\u{3164}' | '\u{FE00}'..='\u{FE0F}'
            | '\u{FEFF}' | '\u{FFA0}' | '\u{FFF9}'..='\u{FFFB}' | '\u{1BCA0}'..='\u{1BCA3}'
            | '\u{1D173}'..='\u{1D17A}' | '\u{E0000}'..='\u{E0FFF}')
}

/// The value of `rounds:`: a whole number of at least 1.
pub(super) fn item_rounds(value: &str) -> Result<u32, String> {
    let narrowed = narrow(value);
    let digits = narrowed.trim();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "`rounds: {value}` is not a whole number — write e.g. `rounds: 2`"
        ));
    }
    match digits.parse::<u32>() {
        Ok(0) => Err(format!(
            "`rounds: {value}`: an item needs at least 1 round — write e.g. `rounds: 2`, or delete the line to use the policy's limit"
        )),
        Ok(n) => Ok(n),
        Err(_) => Err(format!(
            "`rounds: {value}` is far above any policy cap — write e.g. `rounds: 2`"
        )),
    }
}

/// The value of `max_changed_files:` or `max_diff_lines:` (`word`): a whole
/// number of at least 1 (full-width digits accepted).
pub(super) fn item_count(word: &str, value: &str) -> Result<u64, String> {
    let narrowed = narrow(value);
    let digits = narrowed.trim();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "`{word}: {value}` is not a whole number — write e.g. `{word}: 20`"
        ));
    }
    match digits.parse::<u64>() {
        Ok(0) => Err(format!(
            "`{word}: {value}`: a change touches at least 1 — write e.g. `{word}: 20`, or delete the line to use the policy's limit"
        )),
        Ok(n) => Ok(n),
        Err(_) => Err(format!(
            "`{word}: {value}` is far above any policy cap — write e.g. `{word}: 20`"
        )),
    }
}

/// The value of `timeout:`: the one duration grammar of [`crate::duration`]
/// (see [`Details::timeout`]).
pub(super) fn item_timeout(value: &str) -> Result<Duration, String> {
    use crate::duration::DurationError as E;
    let example = "write e.g. `timeout: 45m`, `2h`, `90s` or `1h30m`";
    crate::duration::parse(value).map_err(|e| match e {
        E::Empty => format!("empty `timeout:` — {example}"),
        E::NoUnit { number, .. } => format!(
            "`timeout: {value}` has no unit — write `timeout: {number}m` for minutes, `{number}s` for seconds"
        ),
        E::Zero { .. } => format!(
            "`timeout: {value}` must be longer than zero — {example}, or delete the line to use the policy's limit"
        ),
        E::TooLong { .. } => {
            format!("`timeout: {value}` is longer than a year — {example}")
        }
        E::Malformed { .. } | E::Fractional { .. } => {
            format!("`timeout: {value}` is not a duration — {example}")
        }
    })
}

/// The keyword as written in the backlog.
pub(super) fn kind_word(kind: DetailKind) -> &'static str {
    match kind {
        DetailKind::Accept => "accept",
        DetailKind::Verify => "verify",
        DetailKind::Scope => "scope",
        DetailKind::Allow => "allow",
        DetailKind::Question => "question",
        DetailKind::Rounds => "rounds",
        DetailKind::Timeout => "timeout",
        DetailKind::MaxChangedFiles => "max_changed_files",
        DetailKind::MaxDiffLines => "max_diff_lines",
        DetailKind::Note => "note",
    }
}
