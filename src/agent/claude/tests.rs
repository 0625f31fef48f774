//! Unit tests of the claude backend: real and crafted streams replayed through
//! [`StreamState`], and the command line.

use chrono::Utc;
use serde_json::Value;

use super::stream::*;
use super::*;
use crate::agent::model::{Role, Usage};
use crate::agent::stream::limit_in_text;
use crate::config::AgentConfig;
use crate::{limit, review};

#[test]
fn empty_result_falls_back_to_assistant_text() {
    let mut st = StreamState::default();
    let tz: chrono_tz::Tz = "UTC".parse().unwrap();
    for l in [
        r#"{"type":"system","subtype":"init","tools":["Read","Grep","Glob"],"mcp_servers":[],"permissionMode":"plan","model":"m","claude_code_version":"2.1.328"}"#,
        r#"{"type":"assistant","message":{"content":[{"type":"text","text":"Hello."}]}}"#,
        r#"{"type":"result","subtype":"success","is_error":false,"result":"","total_cost_usd":0.024,"usage":{"input_tokens":3,"output_tokens":6}}"#,
    ] {
        st.feed(l, tz);
    }
    assert_eq!(st.final_text(), "Hello.");
    assert!(!st.is_error());
    assert_eq!(
        st.tools.as_deref(),
        Some(&["Read".to_string(), "Grep".into(), "Glob".into()][..])
    );
    assert_eq!(
        st.usage(),
        Usage {
            tokens_in: Some(3),
            tokens_out: Some(6),
            cost_usd: Some(0.024)
        }
    );
}

#[test]
fn error_with_success_subtype_is_an_error() {
    let mut st = StreamState::default();
    let tz: chrono_tz::Tz = "UTC".parse().unwrap();
    st.feed(r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":null,"result":"API Error: Connection refused"}"#, tz);
    assert!(st.is_error());
    assert!(st.limit.is_none());
}

fn replay(t: &str, tz: &str) -> StreamState {
    let mut st = StreamState::default();
    for l in t.lines() {
        st.feed(l, tz.parse().unwrap());
    }
    st
}

#[test]
fn real_writer_stream_is_read_whole() {
    let st = replay(
        include_str!("../../../tests/data/transcripts/claude-real-writer-edit.jsonl"),
        "UTC",
    );
    let tools = st.tools.clone().unwrap();
    assert!(
        tools.iter().any(|t| t == "Write") && tools.iter().any(|t| t == "Bash"),
        "{tools:?}"
    );
    assert_eq!(st.mcp_servers.as_deref(), Some(&[][..]));
    assert_eq!(st.permission_mode.as_deref(), Some("acceptEdits"));
    assert_eq!(st.model.as_deref(), Some("claude-opus-5-5"));
    assert_eq!(st.version.as_deref(), Some("2.1.328"));
    assert_eq!(st.assistant_messages, 5);
    assert_eq!(st.edited_files.len(), 2);
    let r = st.result.clone().unwrap();
    assert!(!r.failed());
    assert_eq!(
        (
            r.num_turns,
            r.terminal_reason.as_deref(),
            r.subtype.as_deref()
        ),
        (Some(4), Some("completed"), Some("success"))
    );
    assert_eq!(
        st.usage(),
        Usage {
            tokens_in: Some(4800),
            tokens_out: Some(320),
            cost_usd: Some(0.0256)
        }
    );
    assert!(st.final_text().starts_with("Added sub to calc.txt."));
    assert!(st.limit.is_none() && st.verdict().is_none());
}

#[test]
fn real_usage_limit_stream_gives_the_event_reset() {
    // The recorded reset (1796055300, "12:15am" in Taipei) moved to two hours from now:
    // the stream is read with the real clock, and once the recorded instant is past a
    // reading of it is stale and rightly not believed (this test broke on the day the
    // recording's reset went by).
    let taipei: chrono_tz::Tz = "Asia/Taipei".parse().unwrap();
    let reset_epoch = (Utc::now().timestamp() / 60 + 127) * 60;
    let local = chrono::DateTime::from_timestamp(reset_epoch, 0)
        .unwrap()
        .with_timezone(&taipei)
        .format("%-I:%M%P")
        .to_string();
    let recorded = include_str!("../../../tests/data/transcripts/claude-real-usage-limit.jsonl");
    assert!(
        recorded.contains("\"resetsAt\":1796055300")
            && recorded.contains("resets 12:15am (Asia/Taipei)")
    );
    let shifted = recorded
        .replace("1796055300", &reset_epoch.to_string())
        .replace("resets 12:15am", &format!("resets {local}"));
    let st = replay(&shifted, "Asia/Taipei");
    let l = st.limit("", "Asia/Taipei".parse().unwrap()).unwrap();
    assert_eq!(l.kind, limit::LimitKind::UsageLimit);
    let reset = l.resets_at.unwrap();
    assert!(l.source.contains("rate_limit_event"), "{l:?}");
    let r = st.result.clone().unwrap();
    assert!(r.failed());
    assert_eq!(
        r.describe(),
        "terminal_reason api_error, api_error_status 429, subtype success, 1 turn"
    );
    // The same instant from the CLI's text alone (minutes precision).
    assert_eq!(reset.timestamp(), reset_epoch, "{l:?}");
    let text = limit_in_text(&st.final_text(), taipei).unwrap();
    assert_eq!(
        text.resets_at.map(|t| t.timestamp() / 60),
        Some(reset.timestamp() / 60)
    );
}

#[test]
fn connection_refused_is_a_failure_and_no_limit() {
    let st = replay(
        include_str!("../../../tests/data/transcripts/claude-json-result-connection-refused.json"),
        "UTC",
    );
    assert!(st.is_error());
    assert_eq!(
        st.result.as_ref().unwrap().describe(),
        "terminal_reason api_error, subtype success, 1 turn"
    );
    assert!(st.limit("", chrono_tz::UTC).is_none());
    assert!(st.final_text().starts_with("API Error: Connection refused"));
}

#[test]
fn api_retries_are_counted_and_the_last_kept() {
    let st = replay(
        include_str!("../../../tests/data/transcripts/claude-real-no-server.jsonl"),
        "UTC",
    );
    assert_eq!(st.api_retries, 4);
    assert_eq!(
        st.last_retry.as_deref(),
        Some("attempt 4/10, error unknown, status none")
    );
    assert!(st.is_error(), "no result event is a failure");
}

#[test]
fn a_call_cut_short_while_retrying_a_429_is_throttling() {
    let tz = chrono_tz::UTC;
    let mut st = StreamState::default();
    st.feed(r#"{"type":"system","subtype":"api_retry","attempt":6,"max_retries":10,"retry_delay_ms":17222,"error_status":429,"error":"rate_limit"}"#, tz);
    assert_eq!(
        st.limit("", tz).map(|l| l.kind),
        Some(limit::LimitKind::Transient)
    );
    st.feed(r#"{"type":"system","subtype":"api_retry","attempt":7,"max_retries":10,"retry_delay_ms":17222,"error_status":529,"error":"overloaded"}"#, tz);
    assert_eq!(
        st.limit("", tz).map(|l| l.kind),
        Some(limit::LimitKind::Transient)
    );
    // Retries that ended in a good result are nobody's limit.
    st.feed(
        r#"{"type":"result","subtype":"success","is_error":false,"result":"ok"}"#,
        tz,
    );
    assert!(st.limit("", tz).is_none());
}

#[test]
fn allowed_rate_limit_event_is_no_limit() {
    let st = replay(
        include_str!("../../../tests/data/transcripts/claude-stream-json-overage-rejected.jsonl"),
        "UTC",
    );
    assert!(st.limit.is_none());
    assert!(st.limit("", chrono_tz::UTC).is_none());
    assert_eq!(st.final_text(), "\n\nHello.");
}

#[test]
fn a_rejected_event_then_an_allowed_one_then_a_failure_is_no_limit() {
    // Issue 21: the latest rate_limit_event is the account's state.
    let tz = chrono_tz::UTC;
    let reset = Utc::now().timestamp() + 3600;
    let mut st = StreamState::default();
    st.feed(&format!(r#"{{"type":"rate_limit_event","rate_limit_info":{{"status":"rejected","resetsAt":{reset},"rateLimitType":"five_hour"}}}}"#), tz);
    assert_eq!(
        st.limit.as_ref().map(|l| l.kind),
        Some(limit::LimitKind::UsageLimit)
    );
    st.feed(&format!(r#"{{"type":"rate_limit_event","rate_limit_info":{{"status":"allowed","resetsAt":{reset},"rateLimitType":"five_hour"}}}}"#), tz);
    st.feed(
        r#"{"type":"result","subtype":"success","is_error":true,"result":"API Error: 500 {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"Internal server error\"}}"}"#,
        tz,
    );
    assert!(st.is_error());
    assert!(st.limit("", tz).is_none(), "{:?}", st.limit("", tz));
}

#[test]
fn failure_is_never_read_from_subtype_alone() {
    let tz = chrono_tz::UTC;
    for (line, failed) in [
        (
            r#"{"type":"result","subtype":"success","is_error":false,"result":"ok"}"#,
            false,
        ),
        (
            r#"{"type":"result","subtype":"success","is_error":true,"result":"x"}"#,
            true,
        ),
        (
            r#"{"type":"result","subtype":"success","is_error":false,"api_error_status":529,"result":"x"}"#,
            true,
        ),
        (
            r#"{"type":"result","subtype":"error_max_turns","is_error":false,"num_turns":30}"#,
            true,
        ),
        (
            r#"{"type":"result","subtype":"error_during_execution","is_error":true}"#,
            true,
        ),
    ] {
        let mut st = StreamState::default();
        st.feed(line, tz);
        assert_eq!(st.is_error(), failed, "{line}");
    }
}

#[test]
fn verdict_prefers_structured_output_then_result_then_assistant_text() {
    let tz = chrono_tz::UTC;
    let st = replay(
        include_str!("../../../tests/data/transcripts/claude-real-reviewer-request-changes.jsonl"),
        "UTC",
    );
    assert_eq!(
        st.verdict().unwrap().verdict,
        review::Decision::RequestChanges
    );
    let mut st = StreamState::default();
    st.feed(r#"{"type":"assistant","message":{"content":[{"type":"text","text":"ok\n{\"verdict\":\"approve\",\"findings\":[]}"}]}}"#, tz);
    st.feed(
        r#"{"type":"assistant","message":{"content":[{"type":"text","text":"Done."}]}}"#,
        tz,
    );
    st.feed(
        r#"{"type":"result","subtype":"success","is_error":false,"result":"Done."}"#,
        tz,
    );
    assert_eq!(st.verdict().unwrap().verdict, review::Decision::Approve);
    st.feed(r#"{"type":"result","subtype":"success","is_error":false,"result":"{\"verdict\":\"request_changes\",\"findings\":[\"a\"]}","structured_output":null}"#, tz);
    assert_eq!(
        st.verdict().unwrap().verdict,
        review::Decision::RequestChanges
    );
}

#[test]
fn an_unreadable_last_verdict_is_none_and_an_earlier_one_does_not_stand_in() {
    let tz = chrono_tz::UTC;
    let mut st = StreamState::default();
    st.feed(r#"{"type":"assistant","message":{"id":"a","content":[{"type":"text","text":"{\"verdict\":\"approve\",\"findings\":[]}"}]}}"#, tz);
    st.feed(r#"{"type":"assistant","message":{"id":"b","content":[{"type":"text","text":"On second look:\n{\"verdict\":\"needs discussion\",\"findings\":[\"x\"]}"}]}}"#, tz);
    st.feed(
        r#"{"type":"result","subtype":"success","is_error":false,"result":"Done."}"#,
        tz,
    );
    assert_eq!(st.verdict(), None);
    assert!(
        st.verdict_read()
            .unwrap()
            .unwrap_err()
            .contains("\"needs discussion\"")
    );
    // The result's own verdict object decides over the way there.
    st.feed(r#"{"type":"result","subtype":"success","is_error":false,"result":"```json\n{\n \"verdict\": \"request_changes\",\n \"findings\": [\"y\"]\n}\n```"}"#, tz);
    assert_eq!(
        st.verdict().map(|v| v.findings),
        Some(vec!["y".to_string()])
    );
}

#[test]
fn a_crash_mid_event_names_the_panic_on_stderr() {
    let mut st = StreamState::default();
    st.feed(
        r#"{"type":"system","subtype":"init","tools":["Read"],"mcp_servers":[]}"#,
        chrono_tz::UTC,
    );
    st.feed(
        r#"{"type":"assistant","message":{"id":"m","content":[{"type":"text","text":"Work"#,
        chrono_tz::UTC,
    );
    let stderr = "Bun v1.3.2 (b131639c) Linux x64\n\npanic(main thread): Segmentation fault at address 0x113\noh no: Bun has crashed. This indicates a bug in Bun, not your code.\n";
    assert_eq!(
        st.failure(&outcome(None, Some(6), stderr), MINUTE, false)
            .unwrap(),
        "claude ended (signal 6) without a result event (1 event, the last system/init): its last line was cut off in the middle of an event; stderr: panic(main thread): Segmentation fault at address 0x113"
    );
}

fn outcome(exit_code: Option<i32>, signal: Option<i32>, stderr: &str) -> crate::process::Outcome {
    crate::process::Outcome::fake(exit_code, signal, stderr)
}

const MINUTE: std::time::Duration = std::time::Duration::from_secs(60);

#[test]
fn model_usage_counts_where_usage_is_zero_and_the_reason_is_the_clis_own() {
    // The real CLI's result at --max-budget-usd (2.1.328 here, and the same
    // shape in a public fixture): `usage` all zeros, the tokens only in
    // `modelUsage`. The model's last words ("Reading.") are no reason.
    let st = replay(
        concat!(
            r#"{"type":"assistant","message":{"id":"m1","content":[{"type":"text","text":"Reading."}]},"parent_tool_use_id":null}"#,
            "\n",
            r#"{"type":"result","subtype":"error_max_budget_usd","is_error":true,"terminal_reason":"budget_exhausted","total_cost_usd":0.0779,"errors":["Reached maximum budget ($0.02)"],"usage":{"input_tokens":0,"output_tokens":0,"iterations":[]},"modelUsage":{"claude-opus-5[1m]":{"inputTokens":2,"outputTokens":964,"cacheReadInputTokens":18774,"cacheCreationInputTokens":4380}},"num_turns":1}"#,
        ),
        "UTC",
    );
    assert_eq!(
        st.usage(),
        Usage {
            tokens_in: Some(2 + 18774 + 4380),
            tokens_out: Some(964),
            cost_usd: Some(0.0779)
        }
    );
    let f = st
        .failure(&outcome(Some(1), None, ""), MINUTE, false)
        .unwrap();
    assert_eq!(
        f,
        "claude reported an error (terminal_reason budget_exhausted, subtype error_max_budget_usd, 1 turn): Reached maximum budget ($0.02)"
    );
}

#[test]
fn cache_tokens_are_input_and_cost_falls_back_to_older_fields() {
    // anthropics/claude-code-action#366: a real result of an older CLI,
    // `error_during_execution` with `is_error: false`, cache-heavy usage.
    let st = replay(
        r#"{"type":"result","subtype":"error_during_execution","duration_ms":185041,"duration_api_ms":184154,"is_error":false,"num_turns":0,"session_id":"x","total_cost_usd":0.6571631500000001,"usage":{"input_tokens":112,"cache_creation_input_tokens":58211,"cache_read_input_tokens":1120129,"output_tokens":6814,"server_tool_use":{"web_search_requests":0},"service_tier":"standard"}}"#,
        "UTC",
    );
    assert!(st.is_error());
    assert_eq!(
        st.usage(),
        Usage {
            tokens_in: Some(112 + 58211 + 1120129),
            tokens_out: Some(6814),
            cost_usd: Some(0.6571631500000001)
        }
    );
    assert!(st.failure(&outcome(Some(0), None, ""), MINUTE, false).unwrap().ends_with("(subtype error_during_execution, 0 turns): an error during execution (the CLI gave no detail)"));
    // Older CLIs named the cost `cost_usd`; without either, the models' costs add up.
    let r = |line: &str| replay(line, "UTC").usage();
    assert_eq!(r(r#"{"type":"result","subtype":"success","is_error":false,"cost_usd":0.25,"usage":{"input_tokens":5,"output_tokens":1}}"#).cost_usd, Some(0.25));
    let two = r(
        r#"{"type":"result","subtype":"success","is_error":false,"modelUsage":{"claude-sonnet":{"inputTokens":48000,"outputTokens":1800,"cacheReadInputTokens":2800,"cacheCreationInputTokens":400,"costUSD":0.11},"claude-haiku":{"inputTokens":2000,"outputTokens":200,"costUSD":0.0134}}}"#,
    );
    assert_eq!(
        (two.tokens_in, two.tokens_out),
        (Some(48000 + 2800 + 400 + 2000), Some(2000))
    );
    assert!((two.cost_usd.unwrap() - 0.1234).abs() < 1e-12);
    // A result that reports nothing has unknown usage, not zero cost.
    assert_eq!(
        r(r#"{"type":"result","subtype":"success","is_error":false,"result":"ok"}"#),
        Usage::default()
    );
    // anthropics/claude-agent-sdk-typescript#240 (wifi gone): all zeros, empty errors.
    let st = replay(
        r#"{"type":"result","subtype":"error_during_execution","duration_ms":103509,"is_error":false,"num_turns":1,"stop_reason":null,"total_cost_usd":0,"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0},"modelUsage":{},"permission_denials":[],"errors":[]}"#,
        "UTC",
    );
    assert_eq!(
        st.usage(),
        Usage {
            tokens_in: Some(0),
            tokens_out: Some(0),
            cost_usd: Some(0.0)
        }
    );
    assert!(
        st.failure(&outcome(Some(1), None, ""), MINUTE, false)
            .unwrap()
            .contains("an error during execution")
    );
}

#[test]
fn noise_around_and_between_events_is_not_an_event_and_breaks_nothing() {
    let tz = chrono_tz::UTC;
    let mut st = StreamState::default();
    for l in [
        "(node:4242) Warning: Setting the NODE_TLS_REJECT_UNAUTHORIZED environment variable to '0' makes TLS connections insecure.",
        "(Use `node --trace-warnings ...` to show where the warning was created)",
        "",
        "\u{feff}{\"type\":\"system\",\"subtype\":\"init\",\"tools\":[\"Read\",\"Grep\",\"Glob\"],\"mcp_servers\":[],\"permissionMode\":\"plan\",\"model\":\"m\",\"claude_code_version\":\"2.1.328\",\"brand_new_field\":{\"x\":[1,2]}}\r",
        "[DEBUG] hooks: {matcher} loaded",
        "\u{1b}[2K\u{1b}[1G{\"type\":\"assistant\",\"message\":{\"id\":\"m1\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hmm\",\"signature\":\"s\"}]},\"parent_tool_use_id\":null}",
        "{\"type\":\"assistant\",\"message\":{\"id\":\"m1\",\"content\":[{\"type\":\"text\",\"text\":\"Part one.\"}]}}{\"type\":\"assistant\",\"message\":{\"id\":\"m1\",\"content\":[{\"type\":\"text\",\"text\":\"Part two.\"}]}}",
        "{\"type\":\"stream_event\",\"event\":{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Pa\"}},\"parent_tool_use_id\":null}",
        "{\"type\":\"system\",\"subtype\":\"compact_boundary\",\"compact_metadata\":{\"trigger\":\"auto\",\"pre_tokens\":155000}}",
        "{\"type\":\"system\",\"subtype\":\"hook_response\",\"hook_name\":\"SessionStart:Callback\",\"hook_event\":\"SessionStart\",\"stdout\":\"\",\"stderr\":\"\",\"exit_code\":1}",
        "{\"type\":\"system\",\"subtype\":\"status\",\"status\":\"compacting\"}",
        "{\"type\":\"tool_progress\",\"tool_use_id\":\"t\",\"elapsed_time_seconds\":3}",
        "{\"type\":42}",
        "[1, 2, 3]",
        "{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"num_turns\":1,\"result\":\"\",\"total_cost_usd\":0.5,\"usage\":{\"input_tokens\":10,\"output_tokens\":5},\"something_new\":true}\r",
        "Debugger listening on ws://127.0.0.1:9229/x",
    ] {
        st.feed(l, tz);
    }
    assert_eq!(
        st.tools.as_deref(),
        Some(&["Read".to_string(), "Grep".into(), "Glob".into()][..])
    );
    assert_eq!(st.version.as_deref(), Some("2.1.328"));
    assert!(!st.is_error());
    assert_eq!(
        st.final_text(),
        "Part one.\n\nPart two.",
        "text blocks of one message are one answer; thinking is not text"
    );
    assert_eq!(st.usage().cost_usd, Some(0.5));
    assert_eq!(st.noise.other_lines, 5);
    assert!(!st.noise.cut_last_line);
    assert_eq!(st.failure(&outcome(Some(0), None, ""), MINUTE, false), None);
}

#[test]
fn a_stream_without_its_result_is_a_failure_that_says_why() {
    let tz = chrono_tz::UTC;
    let init =
        r#"{"type":"system","subtype":"init","tools":["Bash"],"mcp_servers":[],"model":"m"}"#;
    let tool = r#"{"type":"assistant","message":{"id":"m1","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"cargo test"}}]},"parent_tool_use_id":null}"#;
    // Killed while writing its result: the last line is cut off.
    let mut st = StreamState::default();
    for l in [
        init,
        tool,
        r#"{"type":"result","subtype":"success","is_error":false,"result":"All done, the tests pa"#,
    ] {
        st.feed(l, tz);
    }
    assert!(st.noise.cut_last_line && st.result.is_none() && st.is_error());
    let f = st
        .failure(&outcome(None, Some(9), ""), MINUTE, false)
        .unwrap();
    assert_eq!(
        f,
        "claude ended (signal 9) without a result event (2 events, the last assistant): its last line was cut off in the middle of an event"
    );
    // Exit 0 and no result: never a success. stderr's error line is the reason.
    let mut st = StreamState::default();
    for l in [init, tool] {
        st.feed(l, tz);
    }
    let stderr = "    at process.processTicksAndRejections (node:internal/process/task_queues:95:5)\nError: ENOSPC: no space left on device, write\n    at writeSync (node:fs:927:3)\n";
    assert_eq!(
        st.failure(&outcome(Some(0), None, stderr), MINUTE, false)
            .unwrap(),
        "claude ended (code 0) without a result event (2 events, the last assistant): Error: ENOSPC: no space left on device, write"
    );
    // Nothing but prose on stdout (a wrapper, a wrong binary).
    let mut st = StreamState::default();
    st.feed("Usage: claude [options] [command] [prompt]", tz);
    assert_eq!(
        st.failure(&outcome(Some(1), None, ""), MINUTE, false)
            .unwrap(),
        "claude ended (code 1) without a result event (no event at all): stdout: Usage: claude [options] [command] [prompt]"
    );
    // The CLI's own error message (a synthetic assistant message) names it.
    let mut st = StreamState::default();
    st.feed(r#"{"type":"assistant","message":{"id":"x","model":"<synthetic>","content":[{"type":"text","text":"Invalid API key · Please run /login"}]},"parent_tool_use_id":null,"error":"authentication_failed"}"#, tz);
    assert!(
        st.failure(&outcome(Some(1), None, ""), MINUTE, false)
            .unwrap()
            .ends_with(": authentication_failed: Invalid API key · Please run /login")
    );
}

#[test]
fn a_good_result_then_a_bad_exit_is_a_failure_unless_nightshift_ended_it() {
    let st = replay(
        r#"{"type":"result","subtype":"success","is_error":false,"result":"Done."}"#,
        "UTC",
    );
    assert_eq!(st.failure(&outcome(Some(0), None, ""), MINUTE, false), None);
    assert_eq!(
        st.failure(
            &outcome(Some(1), None, "Error: MCP server \"x\" failed to close\n"),
            MINUTE,
            false
        )
        .unwrap(),
        "claude exited (code 1) after a good result: Error: MCP server \"x\" failed to close"
    );
    // Ended by the watch after a result it did not exit after: the result stands.
    let mut o = outcome(None, Some(15), "");
    o.cancelled = true;
    assert_eq!(st.failure(&o, MINUTE, true), None);
    assert_eq!(
        st.notes(Some(RESULT_EXIT_GRACE)),
        vec![format!(
            "claude did not exit within {}s of its result and was ended",
            RESULT_EXIT_GRACE.as_secs()
        )]
    );
    // A cancellation from outside is an interruption, result or not.
    assert_eq!(
        st.failure(&o, MINUTE, false).as_deref(),
        Some(crate::agent::base::CANCELLED)
    );
}

#[test]
fn refused_and_failed_edits_are_not_claimed_and_denials_are_told() {
    // Recorded from the real CLI 2.1.328 (`--permission-mode default
    // --allowedTools Read,Edit`): a failed Edit (`<tool_use_error>`), a
    // Bash and a Write the permissions denied, and a good result.
    let st = replay(
        include_str!("../../../tests/fakes/transcripts/claude-real-denied.jsonl"),
        "UTC",
    );
    assert!(!st.is_error());
    assert!(st.edited_files.is_empty(), "{:?}", st.edited_files);
    assert_eq!(st.denied_tools, ["Bash", "Write"]);
    assert_eq!(st.tool_errors, 3);
    assert_eq!(st.failure(&outcome(Some(0), None, ""), MINUTE, false), None);
    assert_eq!(
        st.notes(None),
        [
            "claude's permissions denied Bash, Write (see permission_flags)",
            "3 tool calls returned an error"
        ]
    );
    assert_eq!(
        st.usage(),
        Usage {
            tokens_in: Some(6000),
            tokens_out: Some(400),
            cost_usd: Some(0.032)
        }
    );
    // An edit that stands keeps its file even when another edit of it failed.
    let st = replay(
        concat!(
            r#"{"type":"assistant","message":{"id":"a","content":[{"type":"tool_use","id":"t1","name":"Edit","input":{"file_path":"/w/a.rs","old_string":"x","new_string":"y"}}]}}"#,
            "\n",
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","is_error":true,"content":"<tool_use_error>String to replace not found in file.</tool_use_error>"}]}}"#,
            "\n",
            r#"{"type":"assistant","message":{"id":"b","content":[{"type":"tool_use","id":"t2","name":"Write","input":{"file_path":"/w/a.rs","content":"y"}},{"type":"tool_use","id":"t3","name":"MultiEdit","input":{"file_path":"/w/b.rs","edits":[]}}]}}"#,
            "\n",
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t2","content":"File created successfully at: /w/a.rs"}]}}"#,
        ),
        "UTC",
    );
    assert_eq!(st.edited_files, ["/w/a.rs", "/w/b.rs"]);
}

#[test]
fn the_clis_real_max_turns_stream_with_partial_messages_is_read() {
    // Recorded from the real CLI 2.1.328 with `--max-turns 1
    // --include-partial-messages`: stream_event lines, a system/status
    // event, and an `error_max_turns` result whose `errors` say why.
    let st = replay(
        include_str!("../../../tests/fakes/transcripts/claude-real-max-turns-partial.jsonl"),
        "UTC",
    );
    let r = st.result.clone().unwrap();
    assert!(r.failed());
    assert_eq!(r.errors, ["Reached maximum number of turns (1)"]);
    assert_eq!(
        st.usage(),
        Usage {
            tokens_in: Some(1200),
            tokens_out: Some(80),
            cost_usd: Some(0.0063999999999999994)
        }
    );
    assert_eq!(st.edited_files, Vec::<String>::new());
    assert_eq!(st.noise.other_lines, 0);
    assert_eq!(
        st.failure(&outcome(Some(1), None, ""), MINUTE, false)
            .unwrap(),
        "claude reported an error (terminal_reason max_turns, subtype error_max_turns, 2 turns): Reached maximum number of turns (1)"
    );
}

#[test]
fn subagents_edit_but_do_not_answer_and_every_init_is_checked() {
    let st = replay(
        concat!(
            r#"{"type":"system","subtype":"init","tools":["Read","Grep","Glob"],"mcp_servers":[]}"#,
            "\n",
            r#"{"type":"assistant","message":{"id":"a","content":[{"type":"text","text":"Looks fine.\n{\"verdict\":\"approve\",\"findings\":[]}"}]},"parent_tool_use_id":null}"#,
            "\n",
            r#"{"type":"assistant","message":{"id":"s1","content":[{"type":"text","text":"{\"verdict\":\"request_changes\",\"findings\":[\"sub\"]}"},{"type":"tool_use","id":"t9","name":"Write","input":{"file_path":"/w/x.md","content":"x"}}]},"parent_tool_use_id":"toolu_task1"}"#,
            "\n",
            r#"{"type":"system","subtype":"init","tools":["Read","Write"],"mcp_servers":[{"name":"github","status":"connected"}]}"#,
            "\n",
            r#"{"type":"result","subtype":"success","is_error":false,"result":""}"#,
        ),
        "UTC",
    );
    assert_eq!(
        st.final_text(),
        "Looks fine.\n{\"verdict\":\"approve\",\"findings\":[]}"
    );
    assert_eq!(st.verdict().unwrap().verdict, review::Decision::Approve);
    assert_eq!(st.edited_files, ["/w/x.md"]);
    assert_eq!(
        st.tools.as_deref(),
        Some(
            &[
                "Read".to_string(),
                "Grep".into(),
                "Glob".into(),
                "Write".into()
            ][..]
        )
    );
    assert_eq!(st.mcp_servers.as_deref(), Some(&["github".to_string()][..]));
}

#[test]
fn a_structured_output_call_is_a_verdict_when_the_result_lost_it() {
    let st = replay(
        concat!(
            r#"{"type":"assistant","message":{"id":"a","content":[{"type":"tool_use","id":"t1","name":"StructuredOutput","input":{"verdict":"request_changes","findings":["add mul"],"conditions":[]}}]},"parent_tool_use_id":null}"#,
            "\n",
            r#"{"type":"result","subtype":"success","is_error":false,"result":"Done.","structured_output":null}"#,
        ),
        "UTC",
    );
    let v = st.verdict().unwrap();
    assert_eq!(
        (v.verdict, v.findings),
        (
            review::Decision::RequestChanges,
            vec!["add mul".to_string()]
        )
    );
}

#[test]
fn a_result_with_queued_turns_is_not_the_end() {
    let st = replay(
        r#"{"type":"result","subtype":"success","is_error":false,"result":"first","queued_turn_count":1}"#,
        "UTC",
    );
    assert_eq!(st.result.as_ref().map(|r| r.queued_turns), Some(1));
    let st = replay(
        concat!(
            r#"{"type":"result","subtype":"error_during_execution","is_error":true,"result":""}"#,
            "\n",
            r#"{"type":"result","subtype":"success","is_error":false,"result":"second","total_cost_usd":0.2}"#
        ),
        "UTC",
    );
    assert_eq!(
        (st.results, st.final_text().as_str(), st.is_error()),
        (2, "second", false)
    );
}

#[test]
fn a_spurious_error_result_after_a_good_one_does_not_undo_it() {
    // anthropics/claude-code#16768 (before 2.1.7): after its result, a
    // background task's notification made the CLI print a second result,
    // an error with no turns and zero cost, and exit 1.
    let st = replay(
        concat!(
            r#"{"type":"assistant","message":{"id":"m1","content":[{"type":"text","text":"Added sub."}]},"parent_tool_use_id":null}"#,
            "\n",
            r#"{"type":"result","subtype":"success","is_error":false,"duration_ms":8127,"num_turns":72,"result":"Added sub.","total_cost_usd":2.1,"usage":{"input_tokens":900,"output_tokens":40}}"#,
            "\n",
            r#"{"type":"result","subtype":"error_during_execution","duration_ms":0,"duration_api_ms":0,"is_error":true,"num_turns":0,"total_cost_usd":0,"usage":{"input_tokens":0,"output_tokens":0},"errors":["only prompt commands are supported in streaming mode"]}"#,
        ),
        "UTC",
    );
    assert!(!st.is_error());
    assert_eq!(st.final_text(), "Added sub.");
    assert_eq!(
        st.usage(),
        Usage {
            tokens_in: Some(900),
            tokens_out: Some(40),
            cost_usd: Some(2.1)
        }
    );
    assert_eq!(st.failure(&outcome(Some(1), None, ""), MINUTE, false), None);
    assert_eq!(
        st.notes(None),
        [
            "claude reported an error after its result without doing more work (a CLI bug, ignored): only prompt commands are supported in streaming mode"
        ]
    );
    // An error after more work, or after a failed result, decides.
    let st = replay(
        concat!(
            r#"{"type":"result","subtype":"success","is_error":false,"num_turns":3,"result":"first"}"#,
            "\n",
            r#"{"type":"assistant","message":{"id":"m2","content":[{"type":"text","text":"More."}]},"parent_tool_use_id":null}"#,
            "\n",
            r#"{"type":"result","subtype":"error_during_execution","is_error":true,"num_turns":0,"errors":["boom"]}"#,
        ),
        "UTC",
    );
    assert!(st.is_error());
    assert!(
        st.failure(&outcome(Some(1), None, ""), MINUTE, false)
            .unwrap()
            .ends_with(": boom")
    );
}

#[test]
fn the_prompt_follows_a_double_dash() {
    let agent = AgentConfig::default();
    let w = argv(&agent, Role::Writer, "-rf looks like a flag");
    assert_eq!(
        w[w.len() - 2..],
        ["--".to_string(), "-rf looks like a flag".to_string()]
    );
    let r = argv(&agent, Role::Reviewer, "p");
    let i = r.iter().position(|a| a == "--json-schema").unwrap();
    assert_eq!(r[i + 1], VERDICT_SCHEMA);
    assert!(serde_json::from_str::<Value>(VERDICT_SCHEMA).is_ok());
    assert_eq!(r[r.len() - 2..], ["--".to_string(), "p".to_string()]);
}
