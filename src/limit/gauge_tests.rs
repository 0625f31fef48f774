use super::*;
use serde_json::json;

/// A line the real Claude Code 2.1.328 printed against a fake API sending
/// `-5h-utilization: 0.1` and `-7d-utilization: 0.5` (subscription login).
const CLAUDE_LINE: &str = r#"{"type":"rate_limit_event","rate_limit_info":{"status":"allowed","resetsAt":1796436925,"rateLimitType":"five_hour","overageStatus":"rejected","overageDisabledReason":"org_level_disabled","isUsingOverage":false,"unifiedWindows":{"five_hour":{"utilization":0.1,"resetsAt":1796436925,"status":"allowed"},"seven_day":{"utilization":0.5,"resetsAt":1796692525,"status":"allowed"}}},"uuid":"92533ff8-22a7-4577-9ce4-dab06ebbfb3f","session_id":"397df2dc-3b70-4536-bc7f-7d3d411eed76"}"#;

/// The `token_count` line the real Codex 0.169.0 wrote to its session file
/// for `x-codex-primary-used-percent: 42.5` and `-secondary-…: 71`.
const CODEX_LINE: &str = r#"{"timestamp":"2026-12-05T01:16:25.288Z","ordinal":16,"type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"input_tokens":10,"cached_input_tokens":0,"cache_write_input_tokens":0,"output_tokens":5,"reasoning_output_tokens":0,"total_tokens":15},"last_usage_includes_reasoning":true,"model_context_window":258400},"rate_limits":{"limit_id":"codex","limit_name":null,"primary":{"used_percent":42.5,"window_minutes":300,"resets_at":1796436385},"secondary":{"used_percent":71.0,"window_minutes":10080,"resets_at":1796606185},"credits":{"has_credits":false,"unlimited":false,"balance":null},"individual_limit":null,"spend_control_reached":null,"plan_type":null,"rate_limit_reached_type":null}}}"#;

fn at(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(secs, 0).unwrap()
}

#[test]
fn claude_event_gives_every_window_in_percent() {
    let v: Value = serde_json::from_str(CLAUDE_LINE).unwrap();
    let g = claude_gauges(&v);
    assert_eq!(g.len(), 2, "{g:#?}");
    assert_eq!(g[0].window, "five_hour");
    assert_eq!(g[0].percent, Some(10.0));
    assert_eq!(g[0].raw_utilization.as_deref(), Some("0.1"));
    assert_eq!(g[0].window_minutes, Some(300));
    assert!(g[0].is_session() && !g[0].is_long());
    assert_eq!(g[1].window, "seven_day");
    assert_eq!(g[1].percent, Some(50.0));
    assert_eq!(g[1].resets_at, Some(at(1796692525)));
    assert_eq!(g[1].status.as_deref(), Some("allowed"));
    assert!(g[1].is_long());
    assert_eq!(g[1].overage_in_use, Some(false));
    assert_eq!(g[1].overage_status.as_deref(), Some("rejected"));
    assert!(!g[1].says_overage());
}

#[test]
fn claude_overage_in_use_is_read_from_either_flag() {
    let v = json!({"type":"rate_limit_event","rate_limit_info":{"status":"allowed","rateLimitType":"five_hour","isUsingOverage":false,"overageInUse":true,
        "unifiedWindows":{"five_hour":{"utilization":0.1,"resetsAt":1796436932,"status":"allowed"}}}});
    let g = claude_gauges(&v);
    assert_eq!(g.len(), 1);
    assert_eq!(g[0].overage_in_use, Some(true));
    assert!(g[0].says_overage());
    // Plan window refused while overage is allowed: paid overage in play.
    let v = json!({"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1796436932,"rateLimitType":"seven_day","overageStatus":"allowed","isUsingOverage":true}});
    let g = claude_gauges(&v);
    assert_eq!(g.len(), 1);
    assert_eq!(
        (g[0].window.as_str(), g[0].status.as_deref(), g[0].percent),
        ("seven_day", Some("rejected"), None)
    );
    assert!(g[0].says_overage());
    let v = json!({"type":"rate_limit_event","rate_limit_info":{"status":"allowed_warning","rateLimitType":"overage","utilization":0.8}});
    let g = claude_gauges(&v);
    assert!(g[0].says_overage() && g[0].percent == Some(80.0), "{g:?}");
}

#[test]
fn claude_representative_window_without_unified_windows() {
    // The shape an older CLI prints: the warning window at the top only.
    let v = json!({"type":"rate_limit_event","rate_limit_info":{"status":"allowed_warning","resetsAt":1796692525,"rateLimitType":"seven_day_opus","utilization":0.76,"surpassedThreshold":0.75,"isUsingOverage":false,"futureField":{"x":1}}});
    let g = claude_gauges(&v);
    assert_eq!(g.len(), 1);
    assert_eq!(g[0].window, "seven_day_opus");
    assert!(g[0].is_long());
    assert_eq!(g[0].percent, Some(76.0));
    assert_eq!(g[0].raw["futureField"]["x"], 1, "unknown fields kept");
    assert_eq!(g[0].raw["surpassedThreshold"], 0.75);
}

#[test]
fn claude_rejected_representative_marks_its_window() {
    let v = json!({"type":"rate_limit_event","rate_limit_info":{"status":"rejected","rateLimitType":"five_hour",
        "unifiedWindows":{"five_hour":{"utilization":1.0,"resetsAt":1796436925,"status":"allowed"}}}});
    let g = claude_gauges(&v);
    assert_eq!(g.len(), 1);
    assert_eq!(
        (g[0].status.as_deref(), g[0].percent),
        (Some("rejected"), Some(100.0))
    );
}

#[test]
fn bad_claude_values_are_kept_as_read_and_never_panic() {
    let v = json!({"type":"rate_limit_event","rate_limit_info":{"status":"allowed","rateLimitType":"five_hour",
        "unifiedWindows":{
            "five_hour":{"utilization":"abc","resetsAt":"soon"},
            "seven_day":{"utilization":-0.2,"resetsAt":1},
            "seven_day_opus":{"utilization":150},
            "seven_day_sonnet":{"utilization":"0.9","resetsAt":"2026-12-06T00:00:00Z"},
            "weird":7,
            "other":{}}}});
    let g = claude_gauges(&v);
    let by = |w: &str| g.iter().find(|x| x.window == w).unwrap();
    assert_eq!(by("five_hour").percent, None);
    assert_eq!(by("five_hour").raw_utilization.as_deref(), Some("abc"));
    assert_eq!(by("five_hour").resets_at, None);
    assert_eq!(by("seven_day").percent, Some(-20.0));
    assert_eq!(
        by("seven_day").usable_percent(),
        None,
        "negative: not acted on"
    );
    assert_eq!(
        by("seven_day").resets_at,
        Some(at(1)),
        "a past reset, as read"
    );
    assert_eq!(
        by("seven_day_opus").percent,
        Some(150.0),
        "a percentage over 100"
    );
    assert_eq!(by("seven_day_opus").usable_percent(), Some(100.0));
    assert_eq!(by("seven_day_sonnet").percent, Some(90.0));
    assert_eq!(
        by("seven_day_sonnet").resets_at,
        Some(
            DateTime::parse_from_rfc3339("2026-12-06T00:00:00Z")
                .unwrap()
                .to_utc()
        )
    );
    assert_eq!(by("other").percent, None);
    assert!(
        g.iter().all(|x| x.window != "weird"),
        "not an object: no gauge"
    );
    // No info at all, or garbage: no gauge, no panic.
    assert!(claude_gauges(&json!({"type":"rate_limit_event"})).is_empty());
    assert!(claude_gauges(&json!({"type":"rate_limit_event","rate_limit_info":"x"})).is_empty());
    assert!(claude_gauges(&json!([1, 2])).is_empty());
}

#[test]
fn codex_session_line_gives_primary_and_secondary_in_percent() {
    let v: Value = serde_json::from_str(CODEX_LINE).unwrap();
    let g = codex_gauges(&v, at(1796400000));
    assert_eq!(g.len(), 2);
    assert_eq!(
        (g[0].window.as_str(), g[0].percent, g[0].window_minutes),
        ("primary", Some(42.5), Some(300))
    );
    assert!(g[0].is_session());
    assert_eq!(g[0].resets_at, Some(at(1796436385)));
    assert_eq!(
        (g[1].window.as_str(), g[1].percent, g[1].window_minutes),
        ("secondary", Some(71.0), Some(10080))
    );
    assert!(g[1].is_long());
    assert_eq!(g[1].raw["snapshot"]["credits"]["has_credits"], false);
    assert_eq!(g[1].raw["snapshot"]["limit_id"], "codex");
}

#[test]
fn codex_older_shapes_and_bad_values() {
    let now = at(1_800_000_000);
    // Legacy stdout `token_count` with `resets_in_seconds`; no secondary.
    let v = json!({"id":"0","msg":{"type":"token_count","rate_limits":{"primary":{"used_percent":"12","window_minutes":300,"resets_in_seconds":600},"secondary":null}}});
    let g = codex_gauges(&v, now);
    assert_eq!(g.len(), 1);
    assert_eq!(g[0].percent, Some(12.0));
    assert_eq!(g[0].resets_at, Some(at(1_800_000_600)));
    let v = json!({"rate_limits":{"primary":{"used_percent":true,"resets_at":1.8e12}}});
    let g = codex_gauges(&v, now);
    assert_eq!(g[0].percent, None);
    assert_eq!(g[0].raw_utilization.as_deref(), Some("true"));
    assert_eq!(g[0].resets_at, Some(at(1_800_000_000)), "milliseconds");
    assert!(!g[0].is_long() && !g[0].is_session(), "length unknown");
    assert!(codex_gauges(&json!({"type":"turn.completed"}), now).is_empty());
}

#[test]
fn latest_per_window_keeps_the_last_reading_of_each() {
    let v: Value = serde_json::from_str(CLAUDE_LINE).unwrap();
    let mut all = claude_gauges(&v);
    let mut later = all[1].clone();
    later.percent = Some(70.0);
    all.push(later);
    let last = latest_per_window(&all);
    assert_eq!(last.len(), 2);
    assert_eq!(last[1].percent, Some(70.0));
}

#[test]
fn describe_says_age_reset_and_staleness() {
    let now = at(1_800_000_000);
    let tz: chrono_tz::Tz = "UTC".parse().unwrap();
    let fresh = describe(
        "seven_day",
        Some(72.4),
        Some("0.724"),
        Some(false),
        Some(now + chrono::Duration::hours(30)),
        now - chrono::Duration::minutes(5),
        now,
        tz,
    );
    assert_eq!(
        fresh,
        "seven_day 72% · read 5m ago · resets 2027-01-16 14:00 UTC"
    );
    let stale = describe(
        "five_hour",
        Some(99.0),
        None,
        Some(true),
        Some(now - chrono::Duration::minutes(1)),
        now - chrono::Duration::hours(2),
        now,
        tz,
    );
    assert_eq!(
        stale,
        "five_hour 99% · overage in use · read 2h 0m ago · stale: the window reset at 2027-01-15 07:59 UTC"
    );
    let bad = describe("primary", None, Some("abc"), None, None, now, now, tz);
    assert_eq!(bad, "primary unreadable utilization \"abc\" · read 0s ago");
    assert!(is_stale(Some(now), now) && !is_stale(None, now));
}

#[test]
fn claude_fractions_over_one_are_over_100_percent() {
    let v = json!({"type":"rate_limit_event","rate_limit_info":{"status":"allowed","rateLimitType":"seven_day",
        "unifiedWindows":{"seven_day":{"utilization":1.2},"five_hour":{"utilization":70}}}});
    let g = claude_gauges(&v);
    let by = |w: &str| g.iter().find(|x| x.window == w).unwrap().percent;
    assert_eq!(by("seven_day"), Some(120.0));
    assert_eq!(by("five_hour"), Some(70.0), "a percentage as printed");
}
