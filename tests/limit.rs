//! Usage-limit reading (SPEC §7) against the real messages in tests/data/limit-messages.txt,
//! the real transcripts in tests/data/transcripts/, and properties over any time and zone.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use chrono_tz::Tz;
use nightshift::limit::{
    LimitKind, LimitReading, SleepPolicy, explain, explain_text, read_claude_event,
    read_codex_event, read_output, read_stream_line, read_text, sleep_for,
};
use proptest::prelude::*;

const MESSAGES: &str = include_str!("data/limit-messages.txt");
const EXPECTED: &str = include_str!("data/limit-expected.tsv");

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn taipei() -> Tz {
    chrono_tz::Asia::Taipei
}

fn kind_name(k: LimitKind) -> &'static str {
    k.as_str()
}

/// line number (1-based) → message text (before the TAB and its source note).
fn messages() -> BTreeMap<usize, &'static str> {
    MESSAGES
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.starts_with('#') && !l.trim().is_empty())
        .map(|(i, l)| (i + 1, l.split('\t').next().unwrap()))
        .collect()
}

struct Row {
    line: usize,
    now: DateTime<Utc>,
    tz: Tz,
    kind: String,
    resets_at: Option<DateTime<Utc>>,
    retry_ms: Option<u128>,
    stream: String,
}

fn expected_rows() -> Vec<Row> {
    EXPECTED
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let c: Vec<&str> = l.split('\t').collect();
            assert_eq!(c.len(), 7, "bad row {l:?}");
            Row {
                line: c[0].parse().unwrap(),
                now: at(c[1]),
                tz: Tz::from_str(c[2]).unwrap(),
                kind: c[3].to_string(),
                resets_at: (c[4] != "-").then(|| at(c[4])),
                retry_ms: (c[5] != "-").then(|| c[5].parse().unwrap()),
                stream: c[6].to_string(),
            }
        })
        .collect()
}

#[test]
fn every_message_line_has_an_expected_reading() {
    let rows = expected_rows();
    for line in messages().keys() {
        assert!(
            rows.iter().any(|r| r.line == *line),
            "limit-messages.txt line {line} has no row in limit-expected.tsv"
        );
    }
}

#[test]
fn every_message_reads_as_the_table_says() {
    let messages = messages();
    let mut failures = Vec::new();
    for row in expected_rows() {
        let text = messages
            .get(&row.line)
            .unwrap_or_else(|| panic!("no message on line {}", row.line));
        let got = read_text(text, row.now, row.tz);
        let retry_ms = got.retry_after.map(|d| d.as_millis());
        if kind_name(got.kind) != row.kind
            || got.resets_at != row.resets_at
            || retry_ms != row.retry_ms
        {
            failures.push(format!(
                "line {} now {} tz {}: expected {} {:?} retry {:?}, got {} {:?} retry {:?} ({})\n    {text}",
                row.line, row.now, row.tz, row.kind, row.resets_at, row.retry_ms, got.kind, got.resets_at, retry_ms, got.source
            ));
        }
        if row.stream != "." {
            let want = if row.stream == "=" {
                row.kind.as_str()
            } else {
                row.stream.as_str()
            };
            let line = read_stream_line(text, row.now, row.tz);
            if kind_name(line.kind) != want {
                failures.push(format!(
                    "line {} as a stream line: expected {want}, got {} ({})\n    {text}",
                    row.line, line.kind, line.source
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn a_usage_limit_source_names_what_matched() {
    let r = read_text(
        "You've hit your limit · resets 4:50am (Europe/Rome)",
        at("2026-03-04T17:50:00Z"),
        taipei(),
    );
    assert!(
        r.source.contains("resets 4:50am (Europe/Rome)"),
        "{}",
        r.source
    );
    let stale = read_text(
        "Claude AI usage limit reached|1762952400",
        at("2026-03-04T17:50:00Z"),
        taipei(),
    );
    assert!(
        stale.source.contains("ignored: in the past"),
        "{}",
        stale.source
    );
    let invalid = read_text(
        "Claude AI usage limit reached|invalid",
        at("2026-03-04T17:50:00Z"),
        taipei(),
    );
    assert_eq!(
        (invalid.kind, invalid.resets_at),
        (LimitKind::UsageLimit, None)
    );
}

// --- transcripts -----------------------------------------------------------------------------

#[test]
fn claude_overage_transcript_is_not_a_limit() {
    // status "allowed" (only the overage is rejected) and a successful result: no limit.
    let now = at("2026-03-25T10:00:00Z");
    let text = include_str!("data/transcripts/claude-stream-json-overage-rejected.jsonl");
    for line in text.lines() {
        let ev: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(read_claude_event(&ev, now, taipei()), None, "{line}");
    }
    assert_eq!(read_output(text, "", now, taipei()).kind, LimitKind::None);
    assert_eq!(read_text(text, now, taipei()).kind, LimitKind::None);
}

#[test]
fn claude_overage_transcript_with_status_rejected_is_a_usage_limit_until_resets_at() {
    let now = at("2026-03-25T10:00:00Z");
    let text = include_str!("data/transcripts/claude-stream-json-overage-rejected.jsonl")
        .replace(r#""status":"allowed""#, r#""status":"rejected""#);
    let r = read_output(&text, "", now, taipei());
    assert_eq!(r.kind, LimitKind::UsageLimit);
    assert_eq!(r.resets_at, Some(at("2026-03-25T14:00:00Z"))); // resetsAt 1774447200
    assert!(
        r.source.starts_with("claude rate_limit_event"),
        "{}",
        r.source
    );
}

#[test]
fn claude_connection_refused_result_is_not_a_limit() {
    // is_error true with subtype "success" and api_error_status null: a network failure.
    let ev: serde_json::Value = serde_json::from_str(include_str!(
        "data/transcripts/claude-json-result-connection-refused.json"
    ))
    .unwrap();
    let now = at("2026-03-04T17:50:00Z");
    assert_eq!(read_claude_event(&ev, now, taipei()), None);
    assert_eq!(
        read_text(&ev.to_string(), now, taipei()).kind,
        LimitKind::None
    );
}

#[test]
fn codex_sample_transcript_is_not_a_limit() {
    let now = at("2026-03-04T17:50:00Z");
    let text = include_str!("data/transcripts/codex-exec-json-sample.jsonl");
    for line in text.lines() {
        let ev: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(read_codex_event(&ev, now, taipei()), None, "{line}");
    }
    assert_eq!(read_output(text, "", now, taipei()).kind, LimitKind::None);
}

#[test]
fn claude_real_cli_limit_sequence_reads_the_reset() {
    // The shape DEPS.md records from the real CLI 2.1.328 with a subscription login.
    let now = at("2026-03-04T10:00:00Z");
    let stdout = [
        r#"{"type":"system","subtype":"init","tools":["Read"]}"#,
        r#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1772629920,"rateLimitType":"five_hour"}}"#,
        r#"{"type":"assistant","message":{"content":[{"type":"text","text":"You've hit your 5-hour limit · resets 1:12pm (UTC)"}]},"error":"rate_limit"}"#,
        r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":429,"result":"You've hit your 5-hour limit · resets 1:12pm (UTC)"}"#,
    ]
    .join("\n");
    let r = read_output(&stdout, "", now, Tz::UTC);
    assert_eq!(r.kind, LimitKind::UsageLimit);
    assert_eq!(r.resets_at, Some(at("2026-03-04T13:12:00Z")));
    let assistant: serde_json::Value =
        serde_json::from_str(stdout.lines().nth(2).unwrap()).unwrap();
    assert_eq!(
        read_claude_event(&assistant, now, Tz::UTC)
            .unwrap()
            .resets_at,
        Some(at("2026-03-04T13:12:00Z"))
    );
    let result: serde_json::Value = serde_json::from_str(stdout.lines().nth(3).unwrap()).unwrap();
    let r = read_claude_event(&result, now, Tz::UTC).unwrap();
    assert!(r.source.contains("api_error_status 429"), "{}", r.source);
}

#[test]
fn claude_api_key_429_is_transient() {
    let ev = serde_json::json!({"type":"result","subtype":"success","is_error":true,"api_error_status":429,
        "result":"API Error: Request rejected (429) · this may be a temporary capacity issue"});
    let r = read_claude_event(&ev, at("2026-03-04T10:00:00Z"), Tz::UTC).unwrap();
    assert_eq!(r.kind, LimitKind::Transient);
}

#[test]
fn claude_model_text_mentioning_a_limit_is_ignored() {
    let ev = serde_json::json!({"type":"assistant","message":{"content":[{"type":"text",
        "text":"You've hit your limit · resets 7pm — I added a test for this message."}]}});
    assert_eq!(
        read_claude_event(&ev, at("2026-03-04T10:00:00Z"), Tz::UTC),
        None
    );
    let ok = serde_json::json!({"type":"result","is_error":false,"result":"You've hit your limit · resets 7pm"});
    assert_eq!(
        read_claude_event(&ok, at("2026-03-04T10:00:00Z"), Tz::UTC),
        None
    );
}

#[test]
fn codex_real_limit_events_read_the_local_time_of_its_tz() {
    // codex 0.169.0 against a 429 usage_limit_reached body (DEPS.md): curly apostrophe, no zone.
    let now = at("2026-03-04T12:00:00Z"); // 20:00 in Taipei
    let msg = "You’ve hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro) or try again at 10:18 PM.";
    let error = serde_json::json!({"type":"error","message":msg});
    let failed = serde_json::json!({"type":"turn.failed","error":{"message":msg}});
    for ev in [error, failed] {
        let r = read_codex_event(&ev, now, taipei()).unwrap();
        assert_eq!(r.kind, LimitKind::UsageLimit);
        assert_eq!(r.resets_at, Some(at("2026-03-04T14:18:00Z")));
    }
    let reconnecting = serde_json::json!({"type":"error","message":"Reconnecting... 2/5 (stream error: 429 Too Many Requests)"});
    assert_eq!(read_codex_event(&reconnecting, now, taipei()), None);
    let agent = serde_json::json!({"type":"item.completed","item":{"type":"agent_message","text":"You've hit your usage limit."}});
    assert_eq!(read_codex_event(&agent, now, taipei()), None);
}

#[test]
fn codex_stderr_429_body_reads_resets_in_seconds_when_resets_at_is_missing() {
    let now = at("2026-03-04T17:48:31Z");
    let line = r#"ERROR codex_api: error=http 429 Too Many Requests: Some("{\"error\":{\"type\":\"usage_limit_reached\",\"resets_in_seconds\":3600}}")"#;
    let r = read_text(line, now, Tz::UTC);
    assert_eq!(
        (r.kind, r.resets_at),
        (LimitKind::UsageLimit, Some(at("2026-03-04T18:48:31Z")))
    );
}

// --- text forms not in the file ---------------------------------------------------------------

#[test]
fn spec_examples_read() {
    let now = at("2026-03-04T09:00:00Z"); // 17:00 Taipei
    let cases = [
        (
            "Claude AI usage limit reached|1772622000",
            Some("2026-03-04T11:00:00Z"),
        ),
        (
            "You've hit your limit · resets 7pm",
            Some("2026-03-04T11:00:00Z"),
        ),
        (
            "You've hit your limit · resets 7:00pm (Asia/Taipei)",
            Some("2026-03-04T11:00:00Z"),
        ),
        (
            "You've hit your usage limit. Try again in 2h 4m.",
            Some("2026-03-04T11:04:00Z"),
        ),
        (
            "You've hit your 5-hour limit · resets 1:12pm (UTC)",
            Some("2026-03-04T13:12:00Z"),
        ),
        (
            "You've hit your weekly limit · resets Mar 6, 9am",
            Some("2026-03-06T01:00:00Z"),
        ),
        (
            "Claude usage limit reached. Your limit will reset at 7pm (Asia/Taipei).",
            Some("2026-03-04T11:00:00Z"),
        ),
    ];
    for (text, want) in cases {
        let r = read_text(text, now, taipei());
        assert_eq!(r.kind, LimitKind::UsageLimit, "{text}");
        assert_eq!(r.resets_at, want.map(at), "{text}: {}", r.source);
    }
}

#[test]
fn a_yearless_date_takes_the_nearest_year() {
    let r = read_text(
        "You've hit your limit · resets Jan 2, 9am (UTC)",
        at("2025-12-31T20:00:00Z"),
        taipei(),
    );
    assert_eq!(r.resets_at, Some(at("2026-01-02T09:00:00Z")));
    // Ten minutes past across the new year: still believed (within the 15-minute grace).
    let r = read_text(
        "You've hit your limit · resets Dec 31, 11:55pm (UTC)",
        at("2026-01-01T00:05:00Z"),
        taipei(),
    );
    assert_eq!(
        r.resets_at,
        Some(at("2025-12-31T23:55:00Z")),
        "{}",
        r.source
    );
    // An hour past: a stale message, the reset is not believed.
    let r = read_text(
        "You've hit your limit · resets Dec 31, 11pm (UTC)",
        at("2026-01-01T00:05:00Z"),
        taipei(),
    );
    assert_eq!(
        (r.kind, r.resets_at),
        (LimitKind::UsageLimit, None),
        "{}",
        r.source
    );
}

#[test]
fn dst_gap_and_overlap_are_resolved_explicitly() {
    let ny = chrono_tz::America::New_York;
    // 2026-03-08 01:30 EST: 2:15am does not exist → 03:00 EDT.
    let r = read_text(
        "You've hit your limit · resets 2:15am",
        at("2026-03-08T06:30:00Z"),
        ny,
    );
    assert_eq!(r.resets_at, Some(at("2026-03-08T07:00:00Z")));
    // 2026-11-01 00:30 EDT: 1:45am happens twice → the earlier (EDT, 05:45Z).
    let r = read_text(
        "You've hit your limit · resets 1:45am",
        at("2026-11-01T04:30:00Z"),
        ny,
    );
    assert_eq!(r.resets_at, Some(at("2026-11-01T05:45:00Z")));
    // Lord Howe shifts by 30 minutes: 2026-10-04 02:00 → 02:30. 2:10am does not exist.
    let lh = chrono_tz::Australia::Lord_Howe;
    let r = read_text(
        "You've hit your limit · resets 2:10am",
        at("2026-10-03T15:00:00Z"),
        lh,
    ); // 01:30 LHST
    assert_eq!(
        r.resets_at,
        Some(at("2026-10-03T15:30:00Z")),
        "{}",
        r.source
    ); // 02:30 LHDT (+11)
}

#[test]
fn look_alikes_are_not_limits() {
    let now = at("2026-03-04T17:50:00Z");
    for text in [
        "prompt is too long: 210000 tokens > 200000 maximum",
        "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.",
        "input length and `max_tokens` exceed context limit: 190000 + 32000 > 200000",
        "API Error: Connection refused — a firewall or proxy may be blocking it (ConnectionRefused)",
        "getaddrinfo ENOTFOUND api.anthropic.com",
        "Error: authentication failed",
        "Approaching usage limit resets at 2am.",
        "⚠ Claude rate limit reached",
        "Processed 429 files in 21s",
        "test result: ok. 429 passed; 0 failed",
        "429 files changed, 12 insertions(+)",
        "Processed 529 files; the cache is overloaded with entries",
        "error: call of overloaded 'f(int)' is ambiguous",
        "write /tmp/x: Disk quota exceeded (os error 122)",
        "Memory usage limit exceeded: killed worker 3",
        "API Error (Connection error.) · Retrying in 1 seconds… (attempt 1/10)",
        "fetch failed, retrying in 5s",
    ] {
        assert_eq!(
            read_text(text, now, taipei()).kind,
            LimitKind::None,
            "{text}"
        );
    }
}

#[test]
fn stream_lines_that_merely_mention_a_limit_are_not_limits() {
    let now = at("2026-03-04T17:50:00Z");
    for line in [
        "I handled the case where the CLI says You've hit your limit · resets 7pm.",
        "The parser now recognises `Claude AI usage limit reached|1762952400`.",
        "Note: when you see 529 Overloaded · Retrying in 21s, wait.",
        "- Added a retry: Please try again in 20s is transient.",
        "Please try again in 20s.",
    ] {
        assert_eq!(
            read_stream_line(line, now, taipei()).kind,
            LimitKind::None,
            "{line}"
        );
    }
    for line in [
        "You've hit your limit · resets 7pm",
        "  ⎿  You've hit your limit · resets 7pm (Asia/Tokyo)",
        "■ You've hit your usage limit. Try again in 4 days 20 hours 9 minutes.",
        "ERROR: You've hit your usage limit. Try again at 9:20 AM.",
    ] {
        assert_eq!(
            read_stream_line(line, now, taipei()).kind,
            LimitKind::UsageLimit,
            "{line}"
        );
    }
}

#[test]
fn ansi_colours_and_curly_apostrophes_do_not_hide_a_limit() {
    let now = at("2026-03-04T17:50:00Z");
    let r = read_text(
        "\x1b[31mYou’ve hit your limit · resets 9pm\x1b[0m",
        now,
        taipei(),
    );
    assert_eq!(r.resets_at, Some(at("2026-03-05T13:00:00Z")));
}

// --- sleep and explain --------------------------------------------------------------------------

fn usage(resets_at: Option<DateTime<Utc>>) -> LimitReading {
    LimitReading {
        kind: LimitKind::UsageLimit,
        resets_at,
        retry_after: None,
        source: "test".into(),
        message: String::new(),
    }
}

#[test]
fn sleep_is_reset_plus_buffer_clamped() {
    let now = at("2026-03-04T17:50:00Z");
    let p = SleepPolicy::default();
    assert_eq!(
        sleep_for(&usage(Some(now + TimeDelta::minutes(30))), now, &p),
        Duration::from_secs(30 * 60 + 120)
    );
    assert_eq!(
        sleep_for(&usage(Some(now + TimeDelta::hours(30))), now, &p),
        Duration::from_secs(6 * 3600)
    );
    assert_eq!(
        sleep_for(&usage(Some(now - TimeDelta::minutes(10))), now, &p),
        Duration::from_secs(60)
    );
    assert_eq!(
        sleep_for(&usage(Some(now)), now, &p),
        Duration::from_secs(120)
    );
    assert_eq!(sleep_for(&usage(None), now, &p), Duration::from_secs(3600));
    let transient = |ms: Option<u64>| LimitReading {
        kind: LimitKind::Transient,
        retry_after: ms.map(Duration::from_millis),
        ..usage(None)
    };
    assert_eq!(
        sleep_for(&transient(Some(21_000)), now, &p),
        Duration::from_secs(21)
    );
    assert_eq!(
        sleep_for(&transient(Some(174)), now, &p),
        Duration::from_secs(1)
    );
    assert_eq!(
        sleep_for(&transient(Some(2_892_000)), now, &p),
        Duration::from_secs(300)
    );
    assert_eq!(
        sleep_for(&transient(None), now, &p),
        Duration::from_secs(30)
    );
    assert_eq!(sleep_for(&LimitReading::none(), now, &p), Duration::ZERO);
}

#[test]
fn explain_has_the_limit_parse_json_shape() {
    let now = at("2026-03-04T17:50:00Z");
    let r = read_text("5-hour limit reached ∙ resets 12pm", now, taipei());
    let v = explain(&r, now, taipei(), &SleepPolicy::default());
    assert_eq!(v["kind"], "usage_limit");
    assert_eq!(v["resets_at"], "2026-03-05T04:00:00Z");
    assert_eq!(v["sleep_seconds"], 6 * 3600); // 10h10m + 2m, clamped to 6 h
    assert!(v["source"].as_str().unwrap().contains("resets 12pm"));
    assert_eq!(v["resets_at_local"], "2026-03-05T12:00:00+08:00");
    let none = explain(
        &read_text("all good", now, taipei()),
        now,
        taipei(),
        &SleepPolicy::default(),
    );
    assert_eq!(none["kind"], "none");
    assert!(none["resets_at"].is_null() && none["sleep_seconds"].is_null());
    let text = explain_text(&r, now, taipei(), &SleepPolicy::default());
    assert!(
        text.contains("2026-03-05T04:00:00Z = 2026-03-05 12:00 CST (Asia/Taipei)"),
        "{text}"
    );
    assert!(
        text.contains("sleep: 6h 0m until 2026-03-04T23:50:00Z"),
        "{text}"
    );
}

// --- properties ---------------------------------------------------------------------------------

const ZONES: [&str; 8] = [
    "America/New_York",
    "America/Santiago",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
    "Pacific/Chatham",
    "Asia/Taipei",
    "Europe/London",
    "Etc/GMT+5",
];

fn any_now() -> impl Strategy<Value = DateTime<Utc>> {
    // 2000-01-01 .. 2099-12-31, minute resolution plus seconds.
    (946_684_800i64..4_102_444_800i64).prop_map(|s| DateTime::from_timestamp(s, 0).unwrap())
}

fn clock_text() -> impl Strategy<Value = String> {
    (
        1u32..=12,
        prop::option::of(0u32..60),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(h, m, pm, upper)| {
            let ampm = match (pm, upper) {
                (true, true) => " PM",
                (true, false) => "pm",
                (false, true) => " AM",
                (false, false) => "am",
            };
            match m {
                Some(m) => format!("{h}:{m:02}{ampm}"),
                None => format!("{h}{ampm}"),
            }
        })
}

fn message() -> impl Strategy<Value = (String, bool)> {
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let zone = prop::sample::select(ZONES.to_vec());
    prop_oneof![
        (clock_text(), prop::option::of(zone.clone())).prop_map(|(t, z)| {
            let zone = z.map(|z| format!(" ({z})")).unwrap_or_default();
            (format!("You've hit your limit · resets {t}{zone}"), true)
        }),
        clock_text().prop_map(|t| (
            format!("You've hit your usage limit. Try again at {t}."),
            true
        )),
        (
            prop::sample::select(months.to_vec()),
            1u32..=28,
            clock_text(),
            zone
        )
            .prop_map(|(mon, d, t, z)| (
                format!("You've hit your limit · resets {mon} {d}, {t} ({z})"),
                false
            )),
        (0u32..7, 0u32..24, 0u32..60).prop_map(|(d, h, m)| {
            (
                format!(
                    "You've hit your usage limit. Try again in {d} days {h} hours {m} minutes."
                ),
                true,
            )
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn a_read_reset_is_never_stale_nor_far(now in any_now(), zone in prop::sample::select(ZONES.to_vec()), (text, always) in message()) {
        let tz = Tz::from_str(zone).unwrap();
        let r = read_text(&text, now, tz);
        prop_assert_eq!(r.kind, LimitKind::UsageLimit);
        if always {
            prop_assert!(r.resets_at.is_some(), "{} at {} in {}: {}", text, now, zone, r.source);
        }
        if let Some(reset) = r.resets_at {
            prop_assert!(reset >= now - TimeDelta::minutes(15), "{} at {} in {}: {}", text, now, zone, reset);
            prop_assert!(reset <= now + TimeDelta::days(8), "{} at {} in {}: {}", text, now, zone, reset);
        }
    }

    #[test]
    fn sleep_is_always_within_the_policy(now in any_now(), offset_s in -2_000_000i64..2_000_000, known in any::<bool>(),
                                         transient in any::<bool>(), retry_ms in prop::option::of(0u64..10_000_000)) {
        let p = SleepPolicy::default();
        let reading = LimitReading {
            kind: if transient { LimitKind::Transient } else { LimitKind::UsageLimit },
            resets_at: known.then(|| now + TimeDelta::seconds(offset_s)),
            retry_after: retry_ms.map(Duration::from_millis),
            source: String::new(),
            message: String::new(),
        };
        let d = sleep_for(&reading, now, &p);
        if transient {
            prop_assert!(d >= p.transient_min && d <= p.transient_max);
        } else {
            prop_assert!(d >= p.min && d <= p.max);
        }
    }
}
