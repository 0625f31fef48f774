//! Unit tests of the agent module's shared pieces: blocks, prompts, stream lines
//! and the end watch.

use std::time::Duration;

use super::blocks::*;
use super::stream::*;
use tokio_util::sync::CancellationToken;

#[test]
fn the_account_without_blocks_and_json() {
    let t = "Added sub.\n\nFINDINGS:\n- stale docs\n\nAll tests pass.\n{\"usage\":{\"input_tokens\":1}}\n";
    assert_eq!(strip_blocks(t), "Added sub.\n\nAll tests pass.");
}

#[test]
fn json_lines_are_read_as_real_output_comes() {
    let obj = |l: &str| {
        json_line(l)
            .objects
            .iter()
            .map(|o| o["type"].as_str().unwrap_or("?").to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(obj(r#"{"type":"a"}"#), ["a"]);
    assert_eq!(obj("\u{feff}{\"type\":\"a\"}\r"), ["a"]);
    assert_eq!(
        obj("\u{1b}[2K\u{1b}[1G{\"type\":\"a\"}"),
        ["a"],
        "an ANSI prefix"
    );
    assert_eq!(
        obj(r#"{"type":"a"}{"type":"b"} {"type":"c"}"#),
        ["a", "b", "c"],
        "glued events"
    );
    assert_eq!(
        obj(r#"[{"type":"a"},{"type":"b"},3]"#),
        ["a", "b"],
        "a JSON array of events"
    );
    assert_eq!(obj(r#"{"type":"a"} trailing words"#), ["a"]);
    for noise in [
        "",
        "   ",
        "(node:123) Warning: something",
        "[DEBUG] {matcher} loaded",
        "function f() {",
        "[1, 2]",
        "42",
        "\"s\"",
        "{not json}",
    ] {
        let r = json_line(noise);
        assert!(r.objects.is_empty() && !r.cut, "{noise:?}: {r:?}");
    }
    // A line cut inside an event, with or without a prefix.
    assert!(json_line(r#"{"type":"result","result":"all do"#).cut);
    assert!(json_line(r#"> {"type":"result","result":"all do"#).cut);
    let r = json_line(r#"{"type":"a"}{"type":"b","x":"#);
    assert_eq!((r.objects.len(), r.cut), (1, true));
    // Braces deep inside a long line of prose are not looked for.
    let long = format!("{}{}", "x".repeat(JSON_PREFIX_SCAN + 10), r#"{"type":"a"}"#);
    assert!(json_line(&long).objects.is_empty());
}

#[test]
fn the_telling_line_of_stderr() {
    assert_eq!(
        telling_stderr_line("warning: x\nError: boom\n  at y\n").as_deref(),
        Some("Error: boom")
    );
    assert_eq!(
        telling_stderr_line("a\n\nlast words\n\n").as_deref(),
        Some("last words")
    );
    assert_eq!(telling_stderr_line("node:internal/process/promises:391\n    triggerUncaughtException(err, true /* fromPromise */);\n").as_deref(), Some("triggerUncaughtException(err, true /* fromPromise */);"));
    assert_eq!(telling_stderr_line("2026-03-04T17:48:31Z  WARN codex_core: slow\n2026-03-04T17:48:31Z ERROR codex_api::endpoint::responses: error=http 500\n2026-03-04T17:48:32Z  INFO done\n").as_deref(), Some("2026-03-04T17:48:31Z ERROR codex_api::endpoint::responses: error=http 500"));
    assert_eq!(telling_stderr_line("killed by the OOM killer\n(node:42) Warning: something\n(Use `node --trace-warnings ...` to show where the warning was created)\n").as_deref(), Some("killed by the OOM killer"));
    assert_eq!(telling_stderr_line(" \n"), None);
    // A crash wins over error lines logged before it (openai/codex#7990:
    // a tokio worker's panic, its message on the next line).
    let rust = "2026-04-25T10:00:00Z ERROR codex_core::session: failed to record rollout items: thread x not found\nthread 'tokio-runtime-worker' panicked at core/src/util.rs:21:9:\nFunction call output is missing for call id: call_M\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
    assert_eq!(
        telling_stderr_line(rust).as_deref(),
        Some(
            "thread 'tokio-runtime-worker' panicked at core/src/util.rs:21:9: Function call output is missing for call id: call_M"
        )
    );
    assert_eq!(telling_stderr_line("thread 'main' panicked at 'index out of bounds', src/a.rs:1:2\nnote: run with `RUST_BACKTRACE=1`\n").as_deref(), Some("thread 'main' panicked at 'index out of bounds', src/a.rs:1:2"));
    // Bun's crash report (the claude binary; oven-sh/bun#24828).
    let bun = "============================================================\nBun v1.3.2 (b131639c) Linux x64 (baseline)\nArgs: \"claude\" \"-p\" \"fix the uncaught error\"\nElapsed: 1207ms | User: 359ms\n\npanic(main thread): Segmentation fault at address 0x113\noh no: Bun has crashed. This indicates a bug in Bun, not your code.\n\n https://bun.report/1.3.2/xyz\n";
    assert_eq!(
        telling_stderr_line(bun).as_deref(),
        Some("panic(main thread): Segmentation fault at address 0x113")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_end_watch_ends_only_a_silent_agent_after_its_final_event() {
    let grace = Duration::from_millis(300);
    // Ended, then silent: the watch fires.
    let parent = CancellationToken::new();
    let w = EndWatch::start(&parent, grace);
    w.signal().ended();
    tokio::time::timeout(Duration::from_secs(5), w.token().cancelled())
        .await
        .expect("the watch ends a silent agent");
    assert!(w.finish(&parent));
    // Output after the final event restarts the wait; no final event, no end.
    let w = EndWatch::start(&parent, grace);
    w.signal().ended();
    tokio::time::sleep(grace / 2).await;
    w.signal().activity();
    tokio::time::sleep(grace * 2).await;
    assert!(!w.token().is_cancelled());
    assert!(!w.finish(&parent));
    // A cancellation from outside passes through and is not the watch's.
    let w = EndWatch::start(&parent, grace);
    parent.cancel();
    assert!(w.token().is_cancelled());
    assert!(!w.finish(&parent));
}

#[test]
fn blocks_are_parsed() {
    let text = "did it\n\nFINDINGS:\n- the README is stale\n- a flaky test\n\nQUESTION: should X be Y?\n\nFILES:\n- src/a.rs\n";
    let b = parse_blocks(text);
    assert_eq!(b.findings, vec!["the README is stale", "a flaky test"]);
    assert_eq!(b.question.as_deref(), Some("should X be Y?"));
    assert_eq!(b.files, vec!["src/a.rs"]);
    assert_eq!(parse_blocks("no blocks here"), Blocks::default());
}

#[test]
fn blocks_are_read_as_models_decorate_them() {
    // Markdown heads (bold, heading), `*` and numbered items, CRLF.
    let text = "Done.\r\n\r\n**FINDINGS:**\r\n* the README is stale\r\n2. a flaky test\r\n\r\n## QUESTION:\r\nShould X be Y?\r\n1. keep X\r\n2. use Y\r\n\r\n**FILES**:\r\n- `src/a.rs`\r\n- src/b.rs (new)\r\n- `src/c.rs` — added sub\r\n- **src/d.rs**: tests\r\n- src/a.rs\r\n- __init__.py\r\n";
    let b = parse_blocks(text);
    assert_eq!(b.findings, ["the README is stale", "a flaky test"]);
    assert_eq!(
        b.question.as_deref(),
        Some("Should X be Y?\n1. keep X\n2. use Y")
    );
    assert_eq!(
        b.files,
        [
            "src/a.rs",
            "src/b.rs",
            "src/c.rs",
            "src/d.rs",
            "__init__.py"
        ]
    );
    assert_eq!(
        parse_blocks("**QUESTION: Which base should sub use?**\n")
            .question
            .as_deref(),
        Some("Which base should sub use?")
    );
    // The usage line a command agent prints next is not part of the question.
    let b = parse_blocks(
        "QUESTION: which colour?\n{\"usage\":{\"input_tokens\":10,\"output_tokens\":5,\"cost_usd\":0.01}}\n",
    );
    assert_eq!(b.question.as_deref(), Some("which colour?"));
    assert_eq!(
        parse_blocks("QUESTION: keep {a} or\n{b}?\n")
            .question
            .as_deref(),
        Some("keep {a} or\n{b}?"),
        "braces that are no JSON stay"
    );
    assert_eq!(
        parse_blocks("FILES: `a.rs`, `b.rs`\n").files,
        ["a.rs", "b.rs"]
    );
    assert_eq!(parse_blocks("FILES: none\n").files, Vec::<String>::new());
    // A finding wrapped over an indented line is one finding; an
    // unindented line after the block is not part of it.
    let b = parse_blocks(
        "FINDINGS:\n- the README mentions mul but the\n  code has no mul\n- flaky test\nDone.\n",
    );
    assert_eq!(
        b.findings,
        [
            "the README mentions mul but the code has no mul",
            "flaky test"
        ]
    );
    // A fence ends a block; words that merely begin with a head are none.
    let b = parse_blocks(
        "```\nFINDINGS:\n- in a fence\n```\nnot a finding\nFILESYSTEM: ok\nQUESTIONS: none\n",
    );
    assert_eq!(
        (b.findings, b.question, b.files),
        (vec!["in a fence".to_string()], None, vec![])
    );
    assert_eq!(
        strip_blocks("Added sub.\n\n**FINDINGS:**\n- x\n\nAll green."),
        "Added sub.\n\nAll green."
    );
}

/// The PATH lookup is `which`'s: an executable file on the agent's PATH is
/// found, a file without execute bits is not, and an empty PATH entry is not
/// nightshift's own directory (it is skipped, as before).
#[test]
fn preflight_finds_executables_on_the_agents_path_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, mode: u32| {
        let p = dir.path().join(name);
        std::fs::write(&p, "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
    };
    write("fake-agent", 0o755);
    write("plain-file", 0o644);
    let agent = |program: &str| crate::config::AgentConfig {
        kind: crate::config::AgentKind::Command,
        command: vec![program.to_string()],
        ..Default::default()
    };
    let on_path = format!("::{}:", dir.path().display());
    let check = |program: &str, path: Option<&str>| {
        super::preflight(super::Role::Writer, &agent(program), path).is_ok()
    };
    assert!(check("fake-agent", Some(&on_path)));
    assert!(!check("plain-file", Some(&on_path)));
    assert!(!check("fake-agent", Some("::")));
    assert!(!check("fake-agent", None));
    assert!(check(
        &dir.path().join("fake-agent").display().to_string(),
        None
    ));
}
