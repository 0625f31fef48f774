//! The `command` agent kind: any argv speaking nightshift's protocol (docs/agents.md#command-protocol).
//!
//! The child gets `NIGHTSHIFT_ROLE`, `NIGHTSHIFT_PROMPT_FILE`,
//! `NIGHTSHIFT_CONTRACT_FILE`, `NIGHTSHIFT_FEEDBACK_FILE` and
//! `NIGHTSHIFT_ROUND`, and the prompt on stdin. A reviewer prints its verdict
//! as the last JSON object line of stdout. A usage limit is read from its
//! error channel only: stderr, of a call that exited non-zero (or was killed
//! at its timeout). stdout is its answer and is never read for limits (its
//! prose may quote limit messages freely). Used by tests and custom agents.
//!
//! Usage (optional; docs/agents.md#command-protocol, docs/loop.md#budgets: usage is what the
//! agent itself reports): a command agent may report what a call used, either
//! by writing the file named by `NIGHTSHIFT_USAGE_FILE` or by printing a line
//! on stdout, in both cases a JSON object of this shape (every field
//! optional; tokens are counts, cost is US dollars):
//!
//! ```text
//! {"usage":{"input_tokens":1200,"output_tokens":300,"cost_usd":0.042}}
//! ```
//!
//! The file wins over stdout; of several stdout lines the last one counts.
//! A bare object without the `usage` wrapper is accepted in the file. An agent
//! that reports nothing has unknown usage: the token cap counts it as 0 and
//! the cost caps are not enforced for it (the card says so).

use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use super::base::{base_command, write_call_files};
use super::blocks::parse_blocks;
use super::model::{AgentError, Call, Report, Role, Usage};
use super::stream::limit_in_text;
use crate::config::AgentConfig;
use crate::limit::LimitReading;
use crate::review;

/// Bytes of stdout kept in memory for the final text (the rest is on disk).
const KEEP_TEXT_BYTES: usize = 256 * 1024;

/// Runs a `command` agent.
///
/// # Errors
/// [`AgentError`] when it cannot be started.
pub async fn run(
    agent: &AgentConfig,
    call: &Call,
    cancel: &CancellationToken,
) -> Result<Report, AgentError> {
    let (prompt, contract, feedback) = write_call_files(call)?;
    let usage_file = call
        .log_dir
        .join(format!("{}.usage.json", call.role.as_str()));
    // A stale file from an earlier attempt must not be counted twice. The
    // call directory is the agent's own (chowned by `write_call_files` under
    // `agent_user`), so it can create the file.
    let _ = std::fs::remove_file(&usage_file);
    let env = [
        ("NIGHTSHIFT_ROLE", call.role.as_str().to_string()),
        ("NIGHTSHIFT_PROMPT_FILE", prompt.display().to_string()),
        ("NIGHTSHIFT_CONTRACT_FILE", contract.display().to_string()),
        ("NIGHTSHIFT_FEEDBACK_FILE", feedback.display().to_string()),
        ("NIGHTSHIFT_ROUND", call.round.to_string()),
        ("NIGHTSHIFT_USAGE_FILE", usage_file.display().to_string()),
    ];
    let text = Arc::new(Mutex::new(String::new()));
    let cmd = base_command(&agent.command, call, &env)
        .stdin_bytes(call.prompt.clone().into_bytes())
        .on_stdout_line(keep_tail(text.clone()));
    let outcome = crate::process::run(cmd, cancel)
        .await
        .map_err(|source| AgentError::Spawn {
            role: call.role.as_str(),
            kind: agent.kind,
            source,
        })?;
    let text = text.lock().expect("text buffer").clone();
    let limit = read_limit(&outcome, call.tz);
    let verdict = match call.role {
        Role::Reviewer => review::last_json_verdict(&text),
        Role::Writer => None,
    };
    let failure = failure_of(&outcome, call, &text);
    let claimed_files = parse_blocks(&text).files;
    // The agent writes this file: a FIFO or a link to a device there must
    // not block the runner.
    let usage = crate::file::read_regular_text(&usage_file, crate::file::MAX_TEXT_BYTES)
        .ok()
        .and_then(|t| parse_usage(&t, true))
        .or_else(|| text.lines().rev().find_map(|l| parse_usage(l, false)))
        .unwrap_or_default();
    Ok(Report {
        argv: agent.command.clone(),
        outcome,
        text,
        verdict,
        usage,
        limit,
        failure,
        tools: None,
        mcp_servers: None,
        claimed_files,
        edited_files: Vec::new(),
        notes: Vec::new(),
        gauges: Vec::new(),
    })
}

/// A stdout callback that appends each line to `sink`, keeping the tail
/// (at least [`KEEP_TEXT_BYTES`]) when it grows past twice that: blocks and
/// verdicts come at the end.
fn keep_tail(sink: Arc<Mutex<String>>) -> impl FnMut(&str) + Send + 'static {
    move |line: &str| {
        let mut t = sink.lock().expect("text buffer");
        t.push_str(line);
        t.push('\n');
        if t.len() > KEEP_TEXT_BYTES * 2 {
            let cut = t.len() - KEEP_TEXT_BYTES;
            let cut = (cut..t.len())
                .find(|i| t.is_char_boundary(*i))
                .unwrap_or(t.len());
            t.drain(..cut);
        }
    }
}

/// Why the call failed, if it did: output over its cap, the timeout, a
/// cancel, or a non-zero exit with the last line it printed (stderr first,
/// then the kept stdout `text`).
fn failure_of(outcome: &crate::process::Outcome, call: &Call, text: &str) -> Option<String> {
    if outcome.output_capped {
        Some(super::base::over_output_cap(call))
    } else if outcome.timed_out {
        Some(format!("timed out after {}s", call.timeout.as_secs()))
    } else if outcome.cancelled {
        Some(crate::agent::base::CANCELLED.to_string())
    } else if outcome.exit_code != Some(0) {
        Some(
            match last_line(&outcome.stderr_tail).or_else(|| last_line(text)) {
                Some(said) if !said.trim().is_empty() => {
                    format!("exited with {}: {said}", exit_text(outcome))
                }
                _ => format!("exited with {} and printed nothing", exit_text(outcome)),
            },
        )
    } else {
        None
    }
}

/// Reads a usage report: `{"usage":{"input_tokens":N,"output_tokens":N,
/// "cost_usd":X}}`, or (when `bare` is allowed, for the usage file) the inner
/// object alone. Read as agents write it: a byte-order mark, `\r` and
/// surrounding blanks are ignored, other fields too. `total_cost_usd` is
/// taken for `cost_usd`, also beside the `usage` object (a wrapper that
/// passes on claude's own `result` event), and claude's
/// `cache_read_input_tokens` / `cache_creation_input_tokens` count as input
/// as the claude kind counts them. A count may be a whole number written as
/// a float (`1200.0`) or a string (`"1200"`); negative, fractional or
/// non-numeric values are ignored, and an object with none of the fields is
/// no report.
pub fn parse_usage(text: &str, bare: bool) -> Option<Usage> {
    use serde_json::Value;
    let t = text.trim_matches(|c: char| c.is_whitespace() || c == '\u{feff}');
    if !t.starts_with('{') {
        return None;
    }
    let v: Value = serde_json::from_str(t).ok()?;
    let u = match v.get("usage") {
        Some(u) if u.is_object() => u,
        _ if bare => &v,
        _ => return None,
    };
    let number = |x: &Value| -> Option<f64> {
        match x {
            Value::Number(n) => n.as_f64(),
            Value::String(s) => s.trim().parse::<f64>().ok(),
            _ => None,
        }
    };
    let count = |k: &str| {
        u.get(k)
            .and_then(number)
            .filter(|n| n.is_finite() && *n >= 0.0 && n.fract() == 0.0 && *n < 1e18)
            .map(|n| n as u64)
    };
    let tokens_in = Usage::input_of(
        count("input_tokens"),
        count("cache_read_input_tokens"),
        count("cache_creation_input_tokens"),
    );
    let cost = [
        u.get("cost_usd"),
        u.get("total_cost_usd"),
        v.get("total_cost_usd"),
        v.get("cost_usd"),
    ]
    .into_iter()
    .flatten()
    .find_map(|c| number(c).filter(|c| c.is_finite() && *c >= 0.0));
    let usage = Usage {
        tokens_in,
        tokens_out: count("output_tokens"),
        cost_usd: cost,
    };
    (usage != Usage::default()).then_some(usage)
}

/// "code 3" or "signal 9".
pub(crate) fn exit_text(o: &crate::process::Outcome) -> String {
    match (o.exit_code, o.signal) {
        (Some(c), _) => format!("code {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => "no status".into(),
    }
}

fn last_line(s: &str) -> Option<String> {
    s.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| l.trim().to_string())
}

/// A limit in a command agent's error channel (docs/limits.md#channels,
/// docs/agents.md#command-protocol): the stderr of a call that failed (a
/// non-zero exit, or killed at its timeout). stdout is the agent's answer and
/// tool output, never read for limits: a writer working on rate limiting
/// prints limit banners there as a matter of course. A call that exited 0
/// succeeded, whatever its stderr says (a limit the agent got past), and a
/// cancelled call is the signal's.
fn read_limit(outcome: &crate::process::Outcome, tz: chrono_tz::Tz) -> Option<LimitReading> {
    let failed = outcome.exit_code != Some(0) || outcome.timed_out;
    if !failed || outcome.cancelled {
        return None;
    }
    limit_in_text(&outcome.stderr_tail, tz)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::LimitKind;

    const TZ: chrono_tz::Tz = chrono_tz::UTC;

    fn ended(code: Option<i32>, stderr: &str) -> crate::process::Outcome {
        crate::process::Outcome {
            exit_code: code,
            signal: None,
            timed_out: false,
            cancelled: false,
            output_capped: false,
            duration: std::time::Duration::ZERO,
            stdout_tail: "You've hit your limit · resets 3am (UTC)".into(),
            stderr_tail: stderr.to_string(),
            stdout_path: None,
            stderr_path: None,
            stdout_bytes: 0,
            stderr_bytes: 0,
            stdout: Vec::new(),
            refused: Vec::new(),
        }
    }

    #[test]
    fn stderr_of_a_failed_call_is_the_error_channel() {
        let r = read_limit(
            &ended(
                Some(1),
                "warning: something\nYou've hit your limit · resets 3am (UTC)\n",
            ),
            TZ,
        )
        .expect("a usage limit");
        assert_eq!(r.kind, LimitKind::UsageLimit);
        assert!(r.resets_at.is_some());
    }

    #[test]
    fn a_call_that_exited_zero_has_no_limit_whatever_stderr_says() {
        assert_eq!(
            read_limit(
                &ended(Some(0), "You've hit your limit · resets 3am (UTC)"),
                TZ
            ),
            None
        );
    }

    #[test]
    fn a_failed_call_with_nothing_on_stderr_has_no_limit() {
        assert_eq!(read_limit(&ended(Some(1), ""), TZ), None);
    }
}

#[cfg(test)]
mod usage_tests {
    use super::*;

    #[test]
    fn usage_reports_are_read_in_both_shapes() {
        let u = parse_usage(
            r#"{"usage":{"input_tokens":10,"output_tokens":5,"cost_usd":0.25}}"#,
            false,
        )
        .unwrap();
        assert_eq!(
            u,
            Usage {
                tokens_in: Some(10),
                tokens_out: Some(5),
                cost_usd: Some(0.25)
            }
        );
        assert_eq!(
            parse_usage(r#"{"input_tokens":7}"#, true)
                .unwrap()
                .tokens_in,
            Some(7)
        );
        assert_eq!(
            parse_usage(r#"{"input_tokens":7}"#, false),
            None,
            "stdout needs the wrapper"
        );
        assert_eq!(
            parse_usage(r#"{"verdict":"approve","findings":[]}"#, false),
            None
        );
        assert_eq!(parse_usage(r#"{"usage":{"cost_usd":-1}}"#, false), None);
        assert_eq!(parse_usage("not json {", true), None);
    }

    #[test]
    fn usage_reports_are_read_as_agents_print_and_write_them() {
        let want = Usage {
            tokens_in: Some(1200),
            tokens_out: Some(300),
            cost_usd: Some(0.042),
        };
        let line = r#"{"usage":{"input_tokens":1200,"output_tokens":300,"cost_usd":0.042}}"#;
        // A byte-order mark, CRLF, indentation; extra fields.
        assert_eq!(
            parse_usage(&format!("\u{feff}{line}\r"), false),
            Some(want.clone())
        );
        assert_eq!(
            parse_usage(&format!("   {line}\r\n"), false),
            Some(want.clone())
        );
        assert_eq!(
            parse_usage(
                r#"{"model":"m","usage":{"input_tokens":1200,"output_tokens":300,"cost_usd":0.042,"requests":3,"by_model":{"m":{}}},"ok":true}"#,
                false
            ),
            Some(want.clone())
        );
        // A usage file written pretty, with a BOM and CRLF, the bare shape.
        assert_eq!(
            parse_usage(
                "\u{feff}{\r\n  \"input_tokens\": 1200,\r\n  \"output_tokens\": 300,\r\n  \"cost_usd\": 0.042,\r\n  \"note\": \"x\"\r\n}\r\n",
                true
            ),
            Some(want.clone())
        );
        // Counts written as floats or strings; `total_cost_usd`; claude's cache counts are input.
        assert_eq!(
            parse_usage(
                r#"{"usage":{"input_tokens":1200.0,"output_tokens":"300","total_cost_usd":"0.042"}}"#,
                false
            ),
            Some(want.clone())
        );
        assert_eq!(
            parse_usage(r#"{"usage":{"input_tokens":1.5}}"#, false),
            None,
            "no fractional token counts"
        );
        assert_eq!(
            parse_usage(
                r#"{"type":"result","subtype":"success","total_cost_usd":0.042,"usage":{"input_tokens":200,"cache_read_input_tokens":900,"cache_creation_input_tokens":100,"output_tokens":300}}"#,
                false
            ),
            Some(want.clone()),
            "a wrapper passing on claude's result event"
        );
        // On stdout: the last report line counts, wherever the prose around it is.
        let stdout = format!("Working…\n```json\n{line}\n```\n\nDone.\n\n\n");
        assert_eq!(
            stdout.lines().rev().find_map(|l| parse_usage(l, false)),
            Some(want)
        );
    }

    #[test]
    fn verdict_lines_are_read_as_agents_print_them() {
        let v = |t: &str| review::last_json_verdict(t).map(|v| (v.verdict, v.findings));
        let approve = Some((review::Decision::Approve, vec![]));
        let line = r#"{"verdict":"approve","findings":[]}"#;
        for out in [
            format!("{line}\n"),
            format!("All good.\r\n{line}\r\n"),
            format!("\u{feff}{line}"),
            format!("Review done.\n```json\n{line}\n```\n"),
            format!("{line}\n\n\nDone.\n"),
            format!("{line}\n{{\"usage\":{{\"input_tokens\":5}}}}\n"),
            "```json\n{\n  \"verdict\": \"approve\",\n  \"findings\": []\n}\n```\n".to_string(),
            format!("\u{1b}[32m{line}\u{1b}[0m\n"),
        ] {
            assert_eq!(v(&out), approve, "{out:?}");
        }
        assert_eq!(v("Looks fine to me.\nDone.\n"), None);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn huge_stdout_keeps_its_last_words() {
        let dir = tempfile::tempdir().unwrap();
        let call = super::super::Call {
            role: Role::Reviewer,
            round: 1,
            prompt: "review".into(),
            contract_json: "{}".into(),
            feedback: String::new(),
            cwd: dir.path().to_path_buf(),
            timeout: std::time::Duration::from_secs(60),
            env: [(
                "PATH".to_string(),
                std::env::var("PATH").unwrap_or_default(),
            )]
            .into(),
            tz: chrono_tz::UTC,
            log_dir: dir.path().join("logs"),
            secrets: vec![],
            run_as: None,
            max_output: crate::config::DEFAULT_MAX_AGENT_OUTPUT,
            sandbox: None,
        };
        std::fs::create_dir_all(&call.log_dir).unwrap();
        // 8 MiB of log lines, one 5 MiB line, then the verdict and a usage report
        // ending in CRLF, then a blank line and "Done.".
        let script = r#"i=0; while [ $i -lt 8192 ]; do printf '%01023d\n' $i; i=$((i+1)); done; head -c 5242880 /dev/zero | tr '\0' x; printf '\n{"verdict":"request_changes","findings":["add mul"]}\r\n{"usage":{"input_tokens":7,"output_tokens":2}}\r\n\nDone.\n'"#;
        let agent = AgentConfig {
            kind: crate::config::AgentKind::Command,
            command: vec!["sh".into(), "-c".into(), script.into()],
            permission_flags: None,
            model: None,
            account: None,
            fallback: None,
            allow_hosts: vec![],
        };
        let r = run(&agent, &call, &CancellationToken::new()).await.unwrap();
        assert_eq!(r.failure, None);
        assert!(
            r.outcome.stdout_bytes > 13 << 20,
            "{}",
            r.outcome.stdout_bytes
        );
        assert!(r.text.len() <= 2 * KEEP_TEXT_BYTES, "{}", r.text.len());
        assert_eq!(
            r.verdict.map(|v| v.findings),
            Some(vec!["add mul".to_string()])
        );
        assert_eq!(
            r.usage,
            Usage {
                tokens_in: Some(7),
                tokens_out: Some(2),
                cost_usd: None
            }
        );
    }
}
