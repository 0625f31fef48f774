//! The quota gauges of a codex call from the session file the CLI writes
//! (docs/limits.md#gauges).
//!
//! `codex exec --json` prints no rate-limit event on stdout (its events are
//! `thread.*`, `turn.*`, `item.*` and `error`), but the CLI reads the
//! `x-codex-primary-*` / `x-codex-secondary-*` response headers into a
//! `rate_limits` snapshot and writes it, with each `token_count` event, to
//! `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<thread id>.jsonl`
//! (`CODEX_HOME` defaults to `~/.codex`). The thread id is the one
//! `thread.started` printed. Reading is best effort: no file, an unreadable
//! one or one without a snapshot gives no gauge (the gauge is unknown).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};

use crate::limit::{self, Gauge};

/// Bytes of a session file read at most: a long session's file is large,
/// and only its `token_count` lines matter.
const MAX_SESSION_BYTES: u64 = 256 * 1024 * 1024;

/// The codex home of the call's environment: `CODEX_HOME`, else
/// `$HOME/.codex`.
fn codex_home(env: &BTreeMap<String, String>) -> Option<PathBuf> {
    if let Some(h) = env.get("CODEX_HOME").filter(|h| !h.is_empty()) {
        return Some(PathBuf::from(h));
    }
    env.get("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| Path::new(h).join(".codex"))
}

/// The session file of thread `id` under `sessions/` (three levels of
/// dated folders, newest first).
fn session_file(sessions: &Path, id: &str) -> Option<PathBuf> {
    let suffix = format!("-{id}.jsonl");
    let sorted = |dir: &Path| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
            .map(|r| r.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        v.sort_unstable_by(|a, b| b.cmp(a));
        v
    };
    for year in sorted(sessions).iter().filter(|p| p.is_dir()) {
        for month in sorted(year).iter().filter(|p| p.is_dir()) {
            for day in sorted(month).iter().filter(|p| p.is_dir()) {
                let found = sorted(day).into_iter().find(|f| {
                    f.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("rollout-") && n.ends_with(&suffix))
                });
                if found.is_some() {
                    return found;
                }
            }
        }
    }
    None
}

/// The latest gauge of each window in the session file of thread `id`
/// (see the module docs); `now` measures `resets_in_seconds`.
pub(super) fn gauges(env: &BTreeMap<String, String>, id: &str, now: DateTime<Utc>) -> Vec<Gauge> {
    // A thread id is a UUID: anything else is not looked for on disk.
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
        return Vec::new();
    }
    let Some(file) = codex_home(env).and_then(|h| session_file(&h.join("sessions"), id)) else {
        return Vec::new();
    };
    let Ok((f, _)) = crate::file::open_regular(&file) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for line in BufReader::new(f.take(MAX_SESSION_BYTES))
        .lines()
        .map_while(Result::ok)
    {
        if !line.contains("\"rate_limits\"") {
            continue;
        }
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) {
            found.extend(limit::gauge::codex_gauges(&v, now));
        }
    }
    limit::gauge::latest_per_window(&found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_s_session_file_gives_its_latest_snapshot() {
        let home = tempfile::tempdir().unwrap();
        let day = home.path().join("sessions/2026/12/05");
        std::fs::create_dir_all(&day).unwrap();
        let id = "01a243c6-166b-7883-bf73-5264528f37aa";
        let line = |p: f64| {
            format!(
                r#"{{"type":"event_msg","payload":{{"type":"token_count","rate_limits":{{"primary":{{"used_percent":{p},"window_minutes":300,"resets_at":1796436385}},"secondary":null}}}}}}"#
            )
        };
        std::fs::write(
            day.join(format!("rollout-2026-12-05T01-16-25-{id}.jsonl")),
            format!(
                "{{\"type\":\"session_meta\"}}\n{}\nnot json\n{}\n",
                line(10.0),
                line(30.0)
            ),
        )
        .unwrap();
        std::fs::write(
            day.join("rollout-2026-12-05T01-00-00-other.jsonl"),
            line(99.0),
        )
        .unwrap();
        let mut env = BTreeMap::new();
        env.insert("CODEX_HOME".to_string(), home.path().display().to_string());
        let g = gauges(&env, id, Utc::now());
        assert_eq!(g.len(), 1);
        assert_eq!(
            (g[0].window.as_str(), g[0].percent),
            ("primary", Some(30.0))
        );
        assert!(gauges(&env, "../../etc", Utc::now()).is_empty());
        assert!(gauges(&env, "0000", Utc::now()).is_empty());
        env.remove("CODEX_HOME");
        assert!(gauges(&env, id, Utc::now()).is_empty(), "no HOME either");
    }
}
