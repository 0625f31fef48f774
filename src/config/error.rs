//! A config that cannot be used, and the wording of why: [`ConfigError`] with the file, the
//! line and the key, serde's messages with the nearest known key and the line to write instead
//! (from [`super::TEMPLATE`]). Not the checks themselves (see `validate`).

use std::path::{Path, PathBuf};

use super::template::TEMPLATE;
use super::types::Config;

/// A config that could not be used. Display gives `file:line: message`.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file exists but could not be read: not a regular file, too
    /// large, or an I/O error (the message names the file).
    #[error("cannot read the config: {0}")]
    Read(crate::file::FileError),
    /// TOML syntax, an unknown key or a bad value.
    #[error("{path}:{line}: {message}")]
    Invalid {
        path: PathBuf,
        line: usize,
        key: Option<String>,
        message: String,
    },
}

/// A TOML error of the config text `text` (at `path`) as the person reads it: the line, the key
/// it names or stands at, and what to write instead ([`with_hint`], [`with_fix`]).
pub(super) fn read_error(path: &Path, text: &str, e: &toml::de::Error) -> ConfigError {
    let line = e.span().map(|s| line_of(text, s.start)).unwrap_or(1);
    let message = e.message().trim().to_string();
    let key = key_in_message(&message).or_else(|| e.span().and_then(|s| key_at(text, s.start)));
    let line_text = text.lines().nth(line - 1).unwrap_or("");
    let message = with_fix(key.as_deref(), &with_hint(&message), line_text);
    let message = match &key {
        Some(k) if !message.contains(&format!("`{k}`")) => format!("`{k}`: {message}"),
        _ => message,
    };
    ConfigError::Invalid {
        path: path.to_path_buf(),
        line,
        key,
        message,
    }
}

/// A value `validate` refuses, at the line of `key`, with what to write:
/// the message's own fix, else the key's line in [`TEMPLATE`]. `text` is
/// the file's text (`path`'s), read for the key's line.
pub fn refusal(path: &Path, text: &str, key: &str, message: String) -> ConfigError {
    let says_fix = [
        "e.g.", "write", "remove", "lower", "list the", "use ", "create",
    ]
    .iter()
    .any(|w| message.contains(w));
    let message = match example_line(key) {
        Some(l) if !says_fix => format!("{message}; write e.g. `{l}`"),
        _ => message,
    };
    ConfigError::Invalid {
        path: path.to_path_buf(),
        line: line_of_key(text, key),
        key: Some(key.to_string()),
        message: format!("`{key}`: {message}"),
    }
}

/// serde's "unknown field `x`, expected one of `a`, `b`" with the nearest
/// known key as a suggestion, and where the keys are documented.
fn with_hint(message: &str) -> String {
    let Some(rest) = message.strip_prefix("unknown field `") else {
        return message.to_string();
    };
    let given = rest.split('`').next().unwrap_or("");
    let known: Vec<&str> = message
        .split("expected ")
        .nth(1)
        .map(|l| l.split('`').skip(1).step_by(2).collect())
        .unwrap_or_default();
    let nearest = known
        .iter()
        .map(|k| (strsim::damerau_levenshtein(given, k), *k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 3))
        .min();
    if let Some((_, k)) = nearest {
        return format!(
            "{message}; did you mean `{k}`? (the README's Configuration section lists every key)"
        );
    }
    // A key of another table, most often one appended at the end of the file,
    // where it lands in the last `[table]` above it.
    for (table, keys) in [
        ("the top level", keys_of("")),
        ("[limits]", keys_of("[limits]")),
    ] {
        if keys.iter().map(String::as_str).eq(known.iter().copied()) {
            continue;
        }
        if let Some((_, k)) = keys
            .iter()
            .map(|k| (strsim::damerau_levenshtein(given, k), k))
            .filter(|(d, k)| *d <= 2.max(k.len() / 3))
            .min()
        {
            let place = if table == "the top level" {
                "above the first `[table]` line"
            } else {
                "under the `[limits]` line"
            };
            return format!(
                "{message}; `{k}` is a key of {table}: move it {place} (a key belongs to the last `[table]` header above it)"
            );
        }
    }
    format!(
        "{message}; remove the key or fix its spelling (the README's Configuration section lists every key)"
    )
}

/// `message` with the fix for a config read error that has none yet: the
/// line to write instead, from the key's own value where it can be kept
/// (`verify = "sh test.sh"` → `verify = ["sh test.sh"]`), else the key's line
/// in [`TEMPLATE`] (`rounds = 3`). `line_text` is the offending line.
fn with_fix(key: Option<&str>, message: &str, line_text: &str) -> String {
    // unknown fields and validate's own messages already say what to do.
    if message.contains("; did you mean")
        || message.contains("; remove the key")
        || message.contains("is a key of")
        || message.contains("; write ")
        || message.contains("; use ")
    {
        return message.to_string();
    }
    let value = line_text
        .split_once('=')
        .map(|(_, v)| v.trim())
        .unwrap_or("");
    let fix = match key {
        Some(k) if message.contains("expected a sequence") && !value.is_empty() => {
            if value.starts_with('"') || value.starts_with('\'') {
                format!("write the list in brackets: `{k} = [{value}]`")
            } else {
                format!("write a list of strings: `{k} = [\"{}\"]`", value.trim_matches(['"', '\'']))
            }
        }
        Some(k) if message.contains("expected struct") || message.contains("expected a map") => {
            format!("`{k}` is a table: write `[{k}]` on its own line and its keys below it (see the template `nightshift init` writes)")
        }
        Some(k) if message.starts_with("unknown variant") => {
            let given = message.split('`').nth(1).unwrap_or("");
            let known: Vec<&str> = message
                .split("expected ")
                .nth(1)
                .map(|l| l.split('`').skip(1).step_by(2).collect())
                .unwrap_or_default();
            let nearest = known
                .iter()
                .min_by_key(|v| strsim::damerau_levenshtein(given, v))
                .copied()
                .unwrap_or("");
            format!("write e.g. `{k} = \"{nearest}\"`")
        }
        Some(k) if message.starts_with("missing field") => match example_line(k) {
            Some(line) => format!("add `{line}`"),
            None => format!("add the key `{k}`"),
        },
        Some(k) if message.starts_with("duplicate") => {
            format!("keep one `{k}` line and delete the other")
        }
        Some(k) => match example_line(k) {
            Some(line) => format!("write e.g. `{line}`"),
            None => "see the README's Configuration section for the key's form".to_string(),
        },
        _ if message.contains("expected a sequence")
            && line_text.trim_start().starts_with('[')
            && !line_text.trim_start().starts_with("[[") =>
        {
            format!(
                "write `[{}]` (double brackets: each one adds an entry to the list)",
                line_text.trim()
            )
        }
        None if message.contains("string") || message.contains("quote") => {
            "put text values in double quotes, e.g. `base = \"main\"`, and lists in brackets, e.g. `verify = [\"make test\"]`".to_string()
        }
        None => "each line is `key = value` (text in double quotes, lists in brackets, `[table]` headers on their own line); see the README's Configuration section".to_string(),
    };
    format!("{message}; {fix}")
}

/// The `key = value` line [`TEMPLATE`] shows for `key` (commented-out
/// defaults included, trailing comment dropped), if it shows one.
fn example_line(key: &str) -> Option<String> {
    TEMPLATE.lines().find_map(|l| {
        let l = l.trim_start_matches(['#', ' ']);
        let (k, rest) = l.split_once('=')?;
        if k.trim() != key {
            return None;
        }
        let value = match rest.find(" #") {
            Some(i) => &rest[..i],
            None => rest,
        };
        Some(format!("{key} = {}", value.trim()))
    })
}

/// The keys serde accepts in `table` (`""`: the top level, or a header such
/// as `"[limits]"`), read from its own "unknown field … expected one of"
/// message, so the list never drifts from the structs.
pub(super) fn keys_of(table: &str) -> Vec<String> {
    let probe = format!("{table}\nnightshift_probe_key = 1\n");
    let Err(e) = toml::from_str::<Config>(&probe) else {
        return Vec::new();
    };
    e.message()
        .split("expected ")
        .nth(1)
        .map(|l| {
            l.split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// 1-based line number of byte offset `at`.
pub fn line_of(text: &str, at: usize) -> usize {
    text.as_bytes()[..at.min(text.len())]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}

/// The key serde names in `message`: only in the messages that quote a
/// key (`unknown field`, `missing field`, `duplicate field`); in "invalid
/// type: integer `5`" the quoted text is the value.
fn key_in_message(message: &str) -> Option<String> {
    if !["unknown field", "missing field", "duplicate field"]
        .iter()
        .any(|p| message.starts_with(p))
    {
        return None;
    }
    let start = message.find('`')? + 1;
    let end = start + message[start..].find('`')?;
    Some(message[start..end].to_string())
}

/// The key on the line of byte offset `at` (`key = …`), if that line is no `[table]` header.
fn key_at(text: &str, at: usize) -> Option<String> {
    let line_start = text[..at.min(text.len())]
        .rfind('\n')
        .map(|i| i + 1)
        .unwrap_or(0);
    let line = text[line_start..].lines().next()?;
    let key = line.split('=').next()?.trim();
    (!key.is_empty() && !key.starts_with('[')).then(|| key.to_string())
}

/// 1-based line of the first `key = …` line of `text` (1 when there is none).
pub(super) fn line_of_key(text: &str, key: &str) -> usize {
    text.lines()
        .position(|l| {
            l.trim_start().starts_with(key)
                && l[l.find(key).unwrap_or(0) + key.len()..]
                    .trim_start()
                    .starts_with('=')
        })
        .map(|i| i + 1)
        .unwrap_or(1)
}
