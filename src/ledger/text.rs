//! How the ledger keeps text (docs/ledger.md): agent, gate, git and GitHub
//! output with every known secret masked and NUL bytes replaced, the user's
//! own plan and contracts verbatim but for NUL bytes; and the `Result` of a
//! ledger call. It is for the other ledger modules only: it reads and writes
//! no table.

use serde_json::Value;

/// Result of a ledger call.
pub type Result<T> = std::result::Result<T, sqlx::Error>;

/// Text as the ledger keeps it: every secret nightshift holds is masked
/// ([`crate::secret::redact_known`], also base64-, hex- or percent-encoded,
/// cut by line breaks, or the password of a URL), so no table holds one
/// whatever an agent, a gate, git or GitHub printed (docs/agents.md, docs/ledger.md); and a
/// NUL byte (which `text` and `jsonb` reject) becomes U+FFFD, since agent
/// and gate output is arbitrary bytes and one NUL must not stop the night.
pub(super) fn pg(s: &str) -> String {
    crate::secret::redact_known(&verbatim(s))
}

/// [`pg`] for every string inside a JSON value.
pub(super) fn pgj(v: Value) -> Value {
    match v {
        Value::String(s) => Value::String(pg(&s)),
        Value::Array(a) => Value::Array(a.into_iter().map(pgj).collect()),
        Value::Object(o) => Value::Object(o.into_iter().map(|(k, v)| (pg(&k), pgj(v))).collect()),
        other => other,
    }
}

pub(super) fn pgo(s: &Option<String>) -> Option<String> {
    s.as_deref().map(pg)
}

/// Text kept as given, but for NUL bytes: the plan and its contracts, which
/// come from the user's own backlog and config and must hash to their SHA.
pub(super) fn verbatim(s: &str) -> String {
    s.replace('\0', "\u{FFFD}")
}

/// [`verbatim`] for every string inside a JSON value.
pub(super) fn verbatim_json(v: Value) -> Value {
    match v {
        Value::String(s) => Value::String(verbatim(&s)),
        Value::Array(a) => Value::Array(a.into_iter().map(verbatim_json).collect()),
        Value::Object(o) => Value::Object(
            o.into_iter()
                .map(|(k, v)| (verbatim(&k), verbatim_json(v)))
                .collect(),
        ),
        other => other,
    }
}

/// [`verbatim_json`] for JSON text. A NUL can only be in it as the escape
/// `\u0000`: without one, the text is kept as it is, not parsed and printed
/// again.
pub(super) fn verbatim_json_text(json: String) -> String {
    if !json.contains("\\u0000") {
        return json;
    }
    let v: Value = serde_json::from_str(&json).expect("JSON text parses");
    verbatim_json(v).to_string()
}
