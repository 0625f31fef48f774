//! Unit tests of the codex backend: real and crafted event streams replayed
//! through [`StreamState`], and the command line.

use std::path::Path;

use super::stream::*;
use super::*;
use crate::agent::model::Role;
use crate::config::AgentConfig;
use crate::limit::LimitKind;

use crate::config::AgentKind;

fn utc() -> chrono_tz::Tz {
    "UTC".parse().unwrap()
}

fn feed_all(lines: &str) -> StreamState {
    let mut st = StreamState::default();
    for l in lines.lines() {
        st.feed(l, utc());
    }
    st
}

fn agent(command: &[&str], model: Option<&str>) -> AgentConfig {
    AgentConfig {
        kind: AgentKind::Codex,
        command: command.iter().map(|s| s.to_string()).collect(),
        permission_flags: None,
        model: model.map(String::from),
        account: None,
        fallback: None,
        allow_hosts: vec![],
    }
}

#[test]
fn argv_keeps_global_options_before_exec() {
    let a = agent(&["codex", "-c", "model_provider=fake"], Some("o4"));
    assert_eq!(
        argv(&a, Role::Writer, None, false),
        [
            "codex",
            "-c",
            "model_provider=fake",
            "exec",
            "--json",
            "--sandbox",
            "workspace-write",
            "--skip-git-repo-check",
            "--model",
            "o4",
            "-"
        ]
    );
    let r = argv(&a, Role::Reviewer, Some(Path::new("/l/v.json")), false);
    assert_eq!(
        &r[3..],
        [
            "exec",
            "--json",
            "--sandbox",
            "read-only",
            "--skip-git-repo-check",
            "--model",
            "o4",
            "--output-schema",
            "/l/v.json",
            "-"
        ]
    );
}

#[test]
fn argv_does_not_repeat_a_configured_exec() {
    let a = agent(&["npx", "codex", "exec", "-c", "x=1"], None);
    assert_eq!(
        argv(&a, Role::Writer, None, false),
        [
            "npx",
            "codex",
            "exec",
            "-c",
            "x=1",
            "--json",
            "--sandbox",
            "workspace-write",
            "--skip-git-repo-check",
            "-"
        ]
    );
    // `exec` as an option's value is not the subcommand.
    let a = agent(&["codex", "-p", "exec"], None);
    assert_eq!(argv(&a, Role::Writer, None, false)[3], "exec");
}

#[test]
fn commands_that_fight_the_sandbox_are_config_errors() {
    let c = |v: &[&str]| conflicting_argument(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    assert_eq!(
        c(&["codex", "-c", "model_provider=fake", "--model", "o4"]),
        None
    );
    assert_eq!(
        c(&["codex", "--sandbox", "danger-full-access"]).as_deref(),
        Some("--sandbox")
    );
    assert_eq!(
        c(&["codex", "--sandbox=read-only"]).as_deref(),
        Some("--sandbox=read-only")
    );
    assert_eq!(
        c(&["codex", "-sdanger-full-access"]).as_deref(),
        Some("-sdanger-full-access")
    );
    assert_eq!(
        c(&[
            "codex",
            "exec",
            "--dangerously-bypass-approvals-and-sandbox"
        ])
        .as_deref(),
        Some("--dangerously-bypass-approvals-and-sandbox")
    );
    assert_eq!(
        c(&["codex", "-c", "sandbox_mode=\"danger-full-access\""]).as_deref(),
        Some("sandbox_mode=\"danger-full-access\"")
    );
    assert_eq!(c(&["codex", "--json"]).as_deref(), Some("--json"));
    // Applied when the config is loaded: `crate::settings`'s test.
}

#[test]
fn sample_transcript() {
    let st = feed_all(include_str!(
        "../../../tests/data/transcripts/codex-exec-json-sample.jsonl"
    ));
    assert_eq!(
        st.thread_id.as_deref(),
        Some("0199a213-81c0-7800-8aa1-bbab2a035a53")
    );
    assert_eq!(
        st.last_message,
        "Yep — there’s a `README.md` in the repository root."
    );
    assert_eq!((st.turns_started, st.turns_completed), (1, 1));
    assert_eq!(st.usage.tokens_in, Some(24763));
    assert_eq!(st.cached_input_tokens, Some(24448));
    assert_eq!(st.usage.tokens_out, Some(122));
    assert_eq!(st.commands, vec![("bash -lc ls".to_string(), Some(0))]);
    assert_eq!(st.failure(), None);
    assert!(st.limit.is_none());
}

#[test]
fn recorded_failures_of_the_real_cli() {
    // A 500 from the provider: five retry notices, then the failed turn.
    let st = feed_all(include_str!(
        "../../../tests/data/codex/real-turn-failed-500.jsonl"
    ));
    assert_eq!(st.reconnects, 5);
    assert_eq!(
        st.failure().as_deref(),
        Some(
            "codex turn failed: We’re currently experiencing high demand, which may cause temporary errors."
        )
    );
    // Offline: retry notices and nothing else (codex waits; the timeout ends it).
    let st = feed_all(include_str!(
        "../../../tests/data/codex/real-offline-reconnecting.jsonl"
    ));
    assert_eq!(
        (st.reconnects, st.turns_started, st.turn_failed.clone()),
        (3, 1, None)
    );
    assert!(st.limit.is_none());
    // The usage limit: error + turn.failed with the CLI's own text.
    let st = feed_all(include_str!(
        "../../../tests/data/codex/real-usage-limit.jsonl"
    ));
    assert!(
        st.turn_failed
            .as_deref()
            .unwrap()
            .starts_with("You’ve hit your usage limit.")
    );
    assert_eq!(st.limit.map(|l| l.kind), Some(LimitKind::UsageLimit));
    // A writer's real apply_patch edit.
    let st = feed_all(include_str!(
        "../../../tests/data/codex/real-writer-patch.jsonl"
    ));
    assert_eq!(st.changed_files, vec!["@CWD@/calc.txt"]);
    assert_eq!(
        (
            st.usage.tokens_in,
            st.usage.tokens_out,
            st.cached_input_tokens
        ),
        (Some(200), Some(14), Some(80))
    );
}

#[test]
fn turn_failed_is_a_failure_with_its_message() {
    let st = feed_all(
        "{\"type\":\"turn.started\"}\n{\"type\":\"turn.failed\",\"error\":{\"message\":\"boom\"}}\n",
    );
    assert_eq!(st.failure().as_deref(), Some("codex turn failed: boom"));
    let st = feed_all("{\"type\":\"turn.failed\",\"error\":\"old shape\"}");
    assert_eq!(st.turn_failed.as_deref(), Some("old shape"));
}

#[test]
fn reconnect_notices_are_a_failed_call_not_a_limit() {
    for m in [
        "Reconnecting... waiting for network (Connection failed: error sending request)",
        "Reconnecting... 2/5 (stream disconnected before completion: error sending request)",
    ] {
        let st = feed_all(&format!(
            "{{\"type\":\"turn.started\"}}\n{{\"type\":\"error\",\"message\":\"{m}\"}}\n{{\"type\":\"error\",\"message\":\"{m}\"}}"
        ));
        assert_eq!(st.reconnects, 2);
        assert!(st.limit.is_none());
        assert!(
            st.failure()
                .unwrap()
                .contains("could not reach its model provider (2 reconnect"),
            "{:?}",
            st.failure()
        );
    }
}

#[test]
fn error_items_are_warnings_and_usage_is_the_threads_running_total() {
    // `turn.completed.usage` is codex's total for the thread so far
    // (codex-rs/exec/src/event_processor_with_jsonl_output.rs:
    // `usage_from_last_total`; fullsend-ai/fullsend#6924 saw the same on
    // 0.152.1): the last one counts, summing would count turn 1 twice.
    let st = feed_all(concat!(
        "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_0\",\"type\":\"error\",\"message\":\"Model metadata for `m` not found.\"}}\n",
        "{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":100,\"cached_input_tokens\":40,\"output_tokens\":7,\"reasoning_output_tokens\":2}}\n",
        "{\"type\":\"turn.started\"}\n",
        "{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":105,\"cached_input_tokens\":60,\"output_tokens\":8,\"reasoning_output_tokens\":2}}\n",
    ));
    assert_eq!(st.warnings, vec!["Model metadata for `m` not found."]);
    assert_eq!(st.failure(), None);
    assert_eq!(
        (
            st.usage.tokens_in,
            st.usage.tokens_out,
            st.cached_input_tokens,
            st.reasoning_output_tokens
        ),
        (Some(105), Some(8), Some(60), Some(2))
    );
    assert_eq!(
        st.notes(None),
        vec!["codex warned: Model metadata for `m` not found."]
    );
}

#[test]
fn file_changes_are_collected_once_and_failed_patches_ignored() {
    let st = feed_all(concat!(
        "{\"type\":\"item.completed\",\"item\":{\"id\":\"a\",\"type\":\"file_change\",\"changes\":[{\"path\":\"/w/a.txt\",\"kind\":\"update\"}],\"status\":\"completed\"}}\n",
        "{\"type\":\"item.completed\",\"item\":{\"id\":\"b\",\"type\":\"file_change\",\"changes\":[{\"path\":\"/w/a.txt\",\"kind\":\"update\"},{\"path\":\"/w/b.txt\",\"kind\":\"add\"}],\"status\":\"completed\"}}\n",
        "{\"type\":\"item.completed\",\"item\":{\"id\":\"c\",\"type\":\"file_change\",\"changes\":[{\"path\":\"/w/c.txt\",\"kind\":\"add\"}],\"status\":\"failed\"}}\n",
    ));
    assert_eq!(st.changed_files, vec!["/w/a.txt", "/w/b.txt"]);
    assert_eq!(relative_to("/w/a.txt", Path::new("/w")), "a.txt");
    assert_eq!(relative_to("/elsewhere/x", Path::new("/w")), "/elsewhere/x");
}

#[test]
fn usage_limit_event_is_read_in_the_agent_zone() {
    let st = feed_all(
        "{\"type\":\"error\",\"message\":\"You’ve hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro), visit https://chatgpt.com/settings/usage to purchase more credits or try again at 11:59 PM.\"}",
    );
    let l = st.limit.clone().expect("a usage limit");
    assert_eq!(l.kind, LimitKind::UsageLimit);
    assert!(l.resets_at.is_some());
    assert!(st.failure().is_some());
}

#[test]
fn the_error_line_of_a_usage_error_is_kept() {
    let clap = "WARNING: proceeding, even though we could not create PATH aliases\nerror: unexpected argument '--bogus' found\n\n  tip: to pass '--bogus' as a value, use '-- --bogus'\n\nUsage: codex exec [OPTIONS] [PROMPT]\n";
    assert_eq!(
        first_error_line(clap),
        "error: unexpected argument '--bogus' found"
    );
    assert_eq!(
        first_error_line("a\nNo prompt provided via stdin.\n"),
        "No prompt provided via stdin."
    );
    assert_eq!(first_error_line(""), "(nothing on stderr)");
}

fn outcome(exit_code: Option<i32>, signal: Option<i32>, stderr: &str) -> crate::process::Outcome {
    crate::process::Outcome::fake(exit_code, signal, stderr)
}

const MINUTE: std::time::Duration = std::time::Duration::from_secs(60);

#[test]
fn the_legacy_msg_stream_is_read_like_the_current_one() {
    // codex before 0.44 (openai/codex#4525 removed it): a config summary
    // object, the prompt, then one `{"id":…,"msg":{…}}` per core event.
    let st = feed_all(concat!(
        "{\"model\":\"gpt-5-codex\",\"workdir\":\"/w\",\"provider\":\"openai\",\"approval\":\"never\",\"sandbox\":\"workspace-write\",\"reasoning effort\":\"medium\"}\n",
        "{\"prompt\":\"Add sub\"}\n",
        "{\"id\":\"0\",\"msg\":{\"type\":\"session_configured\",\"session_id\":\"0199-legacy\",\"model\":\"gpt-5-codex\",\"history_log_id\":1,\"history_entry_count\":0}}\n",
        "{\"id\":\"0\",\"msg\":{\"type\":\"task_started\",\"model_context_window\":272000}}\n",
        "{\"id\":\"0\",\"msg\":{\"type\":\"agent_reasoning\",\"text\":\"**Adding sub**\"}}\n",
        "{\"id\":\"0\",\"msg\":{\"type\":\"exec_command_begin\",\"call_id\":\"c1\",\"command\":[\"bash\",\"-lc\",\"cat calc.txt\"],\"cwd\":\"/w\"}}\n",
        "{\"id\":\"0\",\"msg\":{\"type\":\"exec_command_end\",\"call_id\":\"c1\",\"stdout\":\"add\\n\",\"stderr\":\"\",\"exit_code\":0,\"duration\":{\"secs\":0,\"nanos\":1}}}\n",
        "{\"id\":\"0\",\"msg\":{\"type\":\"patch_apply_begin\",\"call_id\":\"c2\",\"auto_approved\":true,\"changes\":{\"/w/calc.txt\":{\"update\":{\"unified_diff\":\"@@\\n add\\n+sub\\n\",\"move_path\":null}}}}}\n",
        "{\"id\":\"0\",\"msg\":{\"type\":\"patch_apply_end\",\"call_id\":\"c2\",\"stdout\":\"Success.\",\"stderr\":\"\",\"success\":true}}\n",
        "{\"id\":\"0\",\"msg\":{\"type\":\"patch_apply_begin\",\"call_id\":\"c3\",\"auto_approved\":true,\"changes\":{\"/w/other.txt\":{\"add\":{\"content\":\"x\"}}}}}\n",
        "{\"id\":\"0\",\"msg\":{\"type\":\"patch_apply_end\",\"call_id\":\"c3\",\"stdout\":\"\",\"stderr\":\"rejected\",\"success\":false}}\n",
        "{\"id\":\"0\",\"msg\":{\"type\":\"token_count\",\"info\":{\"total_token_usage\":{\"input_tokens\":3000,\"cached_input_tokens\":1000,\"output_tokens\":200,\"reasoning_output_tokens\":64,\"total_tokens\":3200},\"last_token_usage\":{\"input_tokens\":1600,\"cached_input_tokens\":1000,\"output_tokens\":90,\"reasoning_output_tokens\":0,\"total_tokens\":1690},\"model_context_window\":272000}}}\n",
        "{\"id\":\"0\",\"msg\":{\"type\":\"agent_message\",\"message\":\"Added sub.\\n\\nFILES:\\n- calc.txt\"}}\n",
        "{\"id\":\"0\",\"msg\":{\"type\":\"task_complete\",\"last_agent_message\":\"Added sub.\\n\\nFILES:\\n- calc.txt\"}}\n",
    ));
    assert_eq!(st.thread_id.as_deref(), Some("0199-legacy"));
    assert_eq!(st.final_text(), "Added sub.\n\nFILES:\n- calc.txt");
    assert_eq!(st.failure(), None);
    assert_eq!(st.changed_files, ["/w/calc.txt"]);
    assert_eq!(
        st.commands,
        [("bash -lc cat calc.txt".to_string(), Some(0))]
    );
    assert_eq!(
        (
            st.usage.tokens_in,
            st.usage.tokens_out,
            st.cached_input_tokens,
            st.reasoning_output_tokens
        ),
        (Some(3000), Some(200), Some(1000), Some(64))
    );
    // Earlier legacy builds counted each request at the top of the event.
    let st = feed_all(concat!(
        "{\"id\":\"0\",\"msg\":{\"type\":\"token_count\",\"input_tokens\":100,\"cached_input_tokens\":0,\"output_tokens\":10,\"total_tokens\":110}}\n",
        "{\"id\":\"0\",\"msg\":{\"type\":\"token_count\",\"input_tokens\":150,\"cached_input_tokens\":100,\"output_tokens\":20,\"total_tokens\":170}}\n",
    ));
    assert_eq!(
        (st.usage.tokens_in, st.usage.tokens_out),
        (Some(250), Some(30))
    );
    // A legacy error ends the call, and a limit in it is read.
    let st = feed_all(concat!(
        "{\"id\":\"0\",\"msg\":{\"type\":\"task_started\"}}\n",
        "{\"id\":\"0\",\"msg\":{\"type\":\"stream_error\",\"message\":\"stream error: unexpected status 503; retrying 1/5 in 209ms…\"}}\n",
        "{\"id\":\"0\",\"msg\":{\"type\":\"error\",\"message\":\"You've hit your usage limit. Upgrade to Pro (https://openai.com/chatgpt/pricing) or try again in 2 days 17 hours 14 minutes.\"}}\n",
    ));
    assert_eq!(
        st.limit.as_ref().map(|l| (l.kind, l.resets_at.is_some())),
        Some((LimitKind::UsageLimit, true))
    );
    assert!(
        st.failure()
            .unwrap()
            .contains("You've hit your usage limit."),
        "{:?}",
        st.failure()
    );
    // An aborted legacy turn is a failure.
    let st = feed_all(
        "{\"id\":\"0\",\"msg\":{\"type\":\"task_started\"}}\n{\"id\":\"0\",\"msg\":{\"type\":\"turn_aborted\",\"reason\":\"interrupted\"}}\n",
    );
    assert_eq!(
        st.failure().as_deref(),
        Some("codex turn failed: the turn was aborted (interrupted)")
    );
}

#[test]
fn the_experimental_item_type_shape_is_read() {
    // openai/codex#4250 and #4525 (late September 2025): `session.created`,
    // the item's kind in `item_type`, `assistant_message`.
    let st = feed_all(concat!(
        "{\"type\":\"session.created\",\"session_id\":\"019982d1-75f0-7920-b051-e0d3731a5ed8\"}\n",
        "{\"type\":\"turn.started\"}\n",
        "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_0\",\"item_type\":\"reasoning\",\"text\":\"**Planning**\"}}\n",
        "{\"type\":\"item.started\",\"item\":{\"id\":\"item_1\",\"item_type\":\"mcp_tool_call\",\"server\":\"github\",\"tool\":\"search_issues\",\"status\":\"in_progress\"}}\n",
        "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_1\",\"item_type\":\"mcp_tool_call\",\"server\":\"github\",\"tool\":\"search_issues\",\"status\":\"completed\"}}\n",
        "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_2\",\"item_type\":\"command_execution\",\"command\":\"bash -lc 'echo hello'\",\"aggregated_output\":\"hello\\n\",\"exit_code\":0,\"status\":\"completed\"}}\n",
        "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_3\",\"item_type\":\"file_change\",\"changes\":[{\"path\":\"/w/a.txt\",\"kind\":\"add\"}],\"status\":\"completed\"}}\n",
        "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_4\",\"item_type\":\"assistant_message\",\"text\":\"**Assigned Issues**\\n- #1\"}}\n",
        "{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":34038,\"cached_input_tokens\":29696,\"output_tokens\":1013}}\n",
    ));
    assert_eq!(
        st.thread_id.as_deref(),
        Some("019982d1-75f0-7920-b051-e0d3731a5ed8")
    );
    assert_eq!(st.final_text(), "**Assigned Issues**\n- #1");
    assert_eq!(st.changed_files, ["/w/a.txt"]);
    assert_eq!(st.commands.len(), 1);
    assert_eq!((st.usage.tokens_in, st.failure()), (Some(34038), None));
}

#[test]
fn every_item_kind_of_the_current_stream_is_taken_or_ignored() {
    let st = feed_all(concat!(
        "{\"type\":\"thread.started\",\"thread_id\":\"t\"}\n",
        "{\"type\":\"turn.started\"}\n",
        "{\"type\":\"item.started\",\"item\":{\"id\":\"item_0\",\"type\":\"todo_list\",\"items\":[{\"text\":\"read\",\"completed\":false}]}}\n",
        "{\"type\":\"item.updated\",\"item\":{\"id\":\"item_0\",\"type\":\"todo_list\",\"items\":[{\"text\":\"read\",\"completed\":true}]}}\n",
        "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_1\",\"type\":\"web_search\",\"id\":\"ws\",\"query\":\"rust\",\"action\":{\"type\":\"search\"}}}\n",
        "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_2\",\"type\":\"mcp_tool_call\",\"server\":\"s\",\"tool\":\"t\",\"arguments\":{},\"result\":null,\"error\":{\"message\":\"boom\"},\"status\":\"failed\"}}\n",
        "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_3\",\"type\":\"command_execution\",\"command\":\"/bin/bash -lc 'touch /etc/x'\",\"aggregated_output\":\"touch: cannot touch '/etc/x': Read-only file system\\n\",\"exit_code\":1,\"status\":\"failed\"}}\n",
        "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_4\",\"type\":\"command_execution\",\"command\":\"rm -rf /\",\"aggregated_output\":\"\",\"exit_code\":null,\"status\":\"declined\"}}\n",
        "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_5\",\"type\":\"collab_tool_call\",\"tool\":\"spawn_agent\",\"sender_thread_id\":\"t\",\"receiver_thread_ids\":[],\"prompt\":null,\"agents_states\":{},\"status\":\"completed\"}}\n",
        "{\"type\":\"item.plan.delta\",\"item_id\":\"item_6\",\"delta\":\"1. add\"}\n",
        "{\"type\":\"request_user_input\",\"id\":\"turn\",\"call_id\":\"c\",\"questions\":[]}\n",
        "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_6\",\"type\":\"plan\",\"text\":\"1. add sub\\n2. test it\"}}\n",
        "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_7\",\"type\":\"brand_new_kind\",\"whatever\":[1]}}\n",
        "{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":10,\"cached_input_tokens\":0,\"cache_write_input_tokens\":0,\"output_tokens\":2,\"reasoning_output_tokens\":0}}\n",
    ));
    // No agent message: the plan is the final message, as codex itself takes it.
    assert_eq!(st.final_text(), "1. add sub\n2. test it");
    assert_eq!(st.failure(), None);
    assert_eq!(st.failed_commands, 2);
    assert_eq!(st.notes(None), ["2 commands failed or were declined"]);
}

#[test]
fn noise_and_a_cut_last_line_are_read_as_real_output_comes() {
    let st = feed_all(concat!(
        "\u{feff}{\"type\":\"thread.started\",\"thread_id\":\"t\"}\r\n",
        "Reading prompt from stdin...\n",
        "\u{1b}[0m{\"type\":\"turn.started\"}\n",
        "{\"type\":\"item.completed\",\"item\":{\"id\":\"item_0\",\"type\":\"agent_message\",\"text\":\"half\"}}{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}\n",
    ));
    assert_eq!(
        (
            st.thread_id.as_deref(),
            st.turns_started,
            st.turns_completed,
            st.final_text().as_str()
        ),
        (Some("t"), 1, 1, "half")
    );
    assert_eq!(st.noise.other_lines, 1);
    let st = feed_all(
        "{\"type\":\"thread.started\",\"thread_id\":\"t\"}\n{\"type\":\"turn.started\"}\n{\"type\":\"item.completed\",\"item\":{\"id\":\"item_0\",\"type\":\"agent_message\",\"te",
    );
    assert!(st.noise.cut_last_line);
    assert_eq!(
        st.failure().as_deref(),
        Some(
            "codex stopped without completing the turn; its last line was cut off in the middle of an event"
        )
    );
}

#[test]
fn how_the_process_ended_decides_with_the_stream() {
    let done = feed_all(include_str!(
        "../../../tests/data/codex/real-writer-patch.jsonl"
    ));
    assert_eq!(
        done.call_failure(&outcome(Some(0), None, ""), MINUTE, false),
        None
    );
    // A good turn, then a bad exit: something broke; the round is not trusted.
    assert_eq!(
        done.call_failure(
            &outcome(Some(1), None, "Error: failed to write last message file\n"),
            MINUTE,
            false
        )
        .as_deref(),
        Some(
            "codex exited (code 1) after completing the turn: Error: failed to write last message file"
        )
    );
    // Ended by nightshift after a turn it did not exit after: the turn stands.
    let mut ended = outcome(None, Some(15), "");
    ended.cancelled = true;
    assert_eq!(done.call_failure(&ended, MINUTE, true), None);
    assert_eq!(
        done.call_failure(&ended, MINUTE, false).as_deref(),
        Some(crate::agent::base::CANCELLED)
    );
    // Killed mid-turn: the stream says the turn never ended, the exit says how.
    let mid = feed_all(
        "{\"type\":\"thread.started\",\"thread_id\":\"t\"}\n{\"type\":\"turn.started\"}\n",
    );
    assert_eq!(
        mid.call_failure(&outcome(None, Some(9), ""), MINUTE, false)
            .as_deref(),
        Some("codex stopped without completing the turn [exited (signal 9)]")
    );
    // Never started: stderr tells, else stdout's last words.
    let none =
        feed_all("Not inside a trusted directory and --skip-git-repo-check was not specified.\n");
    assert_eq!(
        none.call_failure(&outcome(Some(1), None, ""), MINUTE, false)
            .as_deref(),
        Some(
            "codex exited (code 1) before starting a session: stdout: Not inside a trusted directory and --skip-git-repo-check was not specified."
        )
    );
}

#[test]
fn an_empty_last_message_does_not_erase_the_answer() {
    let st = feed_all(concat!(
        "{\"type\":\"turn.started\"}\n",
        "{\"type\":\"item.completed\",\"item\":{\"id\":\"a\",\"type\":\"agent_message\",\"text\":\"{\\\"verdict\\\":\\\"approve\\\",\\\"findings\\\":[]}\"}}\n",
        "{\"type\":\"item.completed\",\"item\":{\"id\":\"b\",\"type\":\"agent_message\",\"text\":\"\"}}\n",
        "{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":5,\"output_tokens\":null}}\n",
    ));
    assert_eq!(st.final_text(), r#"{"verdict":"approve","findings":[]}"#);
    assert_eq!(
        (st.usage.tokens_in, st.usage.tokens_out),
        (Some(5), None),
        "a null count is unknown"
    );
    let st = feed_all(
        "{\"id\":\"0\",\"msg\":{\"type\":\"agent_message\",\"message\":\"Added sub.\"}}\n{\"id\":\"0\",\"msg\":{\"type\":\"agent_message\",\"message\":\"\"}}\n{\"id\":\"0\",\"msg\":{\"type\":\"task_complete\",\"last_agent_message\":null}}\n",
    );
    assert_eq!(st.final_text(), "Added sub.");
}

#[test]
fn non_json_lines_are_counted_not_parsed() {
    let st = feed_all("hello\n\n{not json\n");
    assert_eq!(st.noise.other_lines, 2);
    assert_eq!(
        st.failure().as_deref(),
        Some("codex printed no turn (no `turn.started` event)")
    );
}

/// Inside nightshift's sandbox codex's own is off for both roles
/// (docs/security.md#the-sandbox), and only there.
#[test]
fn codex_s_own_sandbox_is_off_only_inside_ours() {
    let a = agent(&["codex"], None);
    for role in [Role::Writer, Role::Reviewer] {
        let inside = argv(&a, role, None, true);
        assert!(
            inside
                .windows(2)
                .any(|p| p == ["--sandbox", "danger-full-access"]),
            "{inside:?}"
        );
        let outside = argv(&a, role, None, false);
        assert!(
            !outside.iter().any(|x| x == "danger-full-access"),
            "{outside:?}"
        );
    }
}
