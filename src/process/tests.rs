//! Unit tests of the process runner: the line splitter and JSON shortener, the
//! environment rules and the guard, called directly.

use super::command::*;
use super::stream::*;
use std::sync::{Arc, Mutex};

#[test]
fn child_env_drops_tokens_removed_and_marker() {
    let parent = [
        ("PATH", "/usr/bin"),
        ("GITHUB_TOKEN", "ghp_x"),
        ("GH_TOKEN", "gho_y"),
        ("NIGHTSHIFT_DATABASE_URL", "postgres://u:p@h/db"),
        (CALL_MARKER_VAR, "abc"),
        ("HOME", "/home/me"),
    ]
    .map(|(k, v)| (k.to_owned(), v.to_owned()));
    let env = child_env(parent, &["MY_SECRET".to_owned()]);
    assert_eq!(env.keys().collect::<Vec<_>>(), ["HOME", "PATH"]);
    // Every way to the ledger goes: both URL variables and libpq's PG*.
    let parent = [
        ("DATABASE_URL", "postgres://a@b/c"),
        ("PGPASSWORD", "pw"),
        ("PGHOST", "db"),
        ("PGSERVICEFILE", "/x"),
        ("MY_SECRET", "s"),
        ("PAGER", "less"),
        ("PG", "keep"),
        ("PGtool", "keep"),
    ]
    .map(|(k, v)| (k.to_owned(), v.to_owned()));
    let env = child_env(parent, &["MY_SECRET".to_owned()]);
    assert_eq!(env.keys().collect::<Vec<_>>(), ["PAGER", "PG", "PGtool"]);
}

#[test]
fn tail_keeps_the_last_bytes_and_skips_a_cut_character() {
    let mut tail = Tail::new(5);
    tail.push(b"abc");
    tail.push("xyé12".as_bytes());
    // The last 5 of "abcxyé12" are y, 0xC3, 0xA9, 1, 2.
    assert_eq!(tail.into_string(), "yé12");
    let mut tail = Tail::new(3);
    tail.push("aé".as_bytes());
    tail.push("é".as_bytes());
    assert_eq!(
        tail.into_string(),
        "é",
        "the dangling continuation byte is dropped"
    );
}

#[test]
fn line_splitter_handles_crlf_partial_and_overlong_lines() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    let mut lines = LineSplitter::new(
        Box::new(move |line| sink.lock().unwrap().push(line.to_owned())),
        8,
    );
    lines.push(b"one\r\ntw");
    lines.push(b"o\n0123456789abcdef");
    lines.push(b"ghij\nlast");
    lines.finish();
    assert_eq!(*seen.lock().unwrap(), ["one", "two", "01234567", "last"]);
}

#[test]
fn overlong_json_lines_arrive_with_their_long_strings_shortened() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    let max = 1024;
    let mut lines = LineSplitter::new(
        Box::new(move |line| sink.lock().unwrap().push(line.to_owned())),
        max,
    )
    .json(true);
    // A tool output of 100 KiB with escapes, a surrogate pair and
    // multi-byte characters everywhere, then the fields after it; fed in
    // odd-sized chunks so every unit is split across pushes somewhere.
    let body: String = (0..4000)
        .map(|i| format!("l{i}\t\"é\"\u{1F600}\\\n"))
        .collect();
    let event = serde_json::json!({"type":"item.completed","item":{"type":"command_execution","aggregated_output":body,"exit_code":3,"status":"failed"}});
    let text = format!("{event}\r\n{{\"type\":\"turn.completed\"}}\n");
    for chunk in text.as_bytes().chunks(7) {
        lines.push(chunk);
    }
    // The same with JSON's own escapes of the pair and of quotes.
    let escaped = format!(
        "{{\"result\":\"{}\",\"usage\":{{\"input_tokens\":5}}}}",
        "\\ud83d\\ude00\\\"x".repeat(400)
    );
    lines.push(escaped.as_bytes());
    lines.push(b"\n");
    // Not JSON: cut as ever.
    lines.push("z".repeat(3000).as_bytes());
    lines.finish();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 4, "{seen:?}");
    let v: serde_json::Value =
        serde_json::from_str(&seen[0]).unwrap_or_else(|e| panic!("{e}: {}", seen[0]));
    assert!(seen[0].len() <= max);
    assert_eq!(
        (
            v["item"]["exit_code"].as_i64(),
            v["item"]["status"].as_str()
        ),
        (Some(3), Some("failed"))
    );
    let out = v["item"]["aggregated_output"].as_str().unwrap();
    assert!(
        out.starts_with("l0\t\"é\"\u{1F600}\\\nl1") && out.ends_with("l3999\t\"é\"\u{1F600}\\\n"),
        "{out}"
    );
    assert!(out.contains(" bytes cut]…"));
    assert_eq!(seen[1], r#"{"type":"turn.completed"}"#);
    let v: serde_json::Value =
        serde_json::from_str(&seen[2]).unwrap_or_else(|e| panic!("{e}: {}", seen[2]));
    assert_eq!(v["usage"]["input_tokens"], 5);
    assert!(v["result"].as_str().unwrap().ends_with("\u{1F600}\"x"));
    assert_eq!(seen[3], "z".repeat(max));
}

/// ASCII-only JSON, as some writers print it: every non-ASCII character as
/// `\u` escapes (surrogate pairs included).
fn ascii_escaped(line: &str) -> String {
    line.chars()
        .map(|c| {
            if c.is_ascii() {
                c.to_string()
            } else {
                c.encode_utf16(&mut [0; 2])
                    .iter()
                    .map(|u| format!("\\u{u:04x}"))
                    .collect()
            }
        })
        .collect()
}

/// The lines a JSON line splitter capped at `max` gives for `line` pushed
/// in random chunks of 1 to 300 bytes, then a newline.
fn split_json_in_chunks(
    line: &str,
    max: usize,
    rnd: &mut impl FnMut(usize) -> usize,
) -> Vec<String> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&seen);
    let mut lines = LineSplitter::new(
        Box::new(move |l| sink.lock().unwrap().push(l.to_owned())),
        max,
    )
    .json(true);
    let bytes = line.as_bytes();
    let mut at = 0;
    while at < bytes.len() {
        let n = (1 + rnd(300)).min(bytes.len() - at);
        lines.push(&bytes[at..at + n]);
        at += n;
    }
    lines.push(b"\n");
    drop(lines);
    seen.lock().unwrap().clone()
}

#[test]
fn shortened_json_lines_stay_json_whatever_their_strings_hold() {
    // Many random lines: strings of quotes, backslashes, control
    // characters, multi-byte characters and \u escapes (surrogate pairs
    // included, as ASCII-only writers print them), in random chunks.
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rnd = move |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let palette = [
        'a',
        ' ',
        '"',
        '\\',
        '\n',
        '\u{1}',
        'é',
        '中',
        '\u{1F600}',
        '\u{2028}',
        '/',
    ];
    let mut shortened = 0;
    for round in 0..300 {
        let max = 64 + rnd(2000);
        let strings: Vec<String> = (0..1 + rnd(4))
            .map(|_| {
                (0..rnd(6000))
                    .map(|_| palette[rnd(palette.len())])
                    .collect()
            })
            .collect();
        let value = serde_json::json!({"type":"x","n":round,"s":strings,"end":{"exit_code":round}});
        let mut line = value.to_string();
        if round % 2 == 1 {
            line = ascii_escaped(&line);
        }
        let seen = split_json_in_chunks(&line, max, &mut rnd);
        assert_eq!(seen.len(), 1);
        match serde_json::from_str::<serde_json::Value>(&seen[0]) {
            Ok(v) => {
                assert_eq!(
                    (v["n"].clone(), v["end"].clone()),
                    (value["n"].clone(), value["end"].clone()),
                    "round {round}"
                );
                shortened += usize::from(line.len() > max);
            }
            // Too many strings to shorten under the cap: cut as ever.
            Err(_) => assert!(
                line.len() > max && seen[0].len() >= max - 3,
                "round {round}, max {max}: {} -> {}",
                line,
                seen[0]
            ),
        }
    }
    assert!(shortened > 100, "{shortened} of 300 lines were shortened");
}

mod supervisor_phases {
    //! The supervisor's decisions, without processes: what each tick's cues
    //! move it to.
    use super::super::supervisor::{Cues, Phase, Plan, next_phase};
    use std::time::Duration;

    const SEC: u64 = 1_000_000_000;

    fn plan() -> Plan {
        Plan {
            runner: 1,
            timeout: Duration::from_secs(60),
            grace: Duration::from_secs(2),
            sweep_escaped: true,
            run_as: None,
            cwd: None,
            program: c"true".into(),
            argv: vec![c"true".into()],
            stdin: false,
            sandbox: None,
        }
    }

    #[test]
    fn a_running_call_with_nothing_new_keeps_running() {
        let cues = Cues::default();
        assert_eq!(
            next_phase(Phase::Running, 10 * SEC, &plan(), cues),
            Phase::Running
        );
        // Ended with nothing left: the loop exits; no phase change needed.
        let ended = Cues {
            ended: true,
            ..Cues::default()
        };
        assert_eq!(
            next_phase(Phase::Running, 10 * SEC, &plan(), ended),
            Phase::Running
        );
    }

    #[test]
    fn the_runners_death_kills_at_once_from_any_phase() {
        let orphaned = Cues {
            orphaned: true,
            ..Cues::default()
        };
        for phase in [Phase::Running, Phase::Terminating(20 * SEC)] {
            assert_eq!(
                next_phase(phase, 10 * SEC, &plan(), orphaned),
                Phase::Killing(15 * SEC),
                "{phase:?}"
            );
        }
        // Already killing: its give-up instant does not move.
        assert_eq!(
            next_phase(Phase::Killing(12 * SEC), 11 * SEC, &plan(), orphaned),
            Phase::Killing(12 * SEC)
        );
        let kill_now = Cues {
            signal: libc::SIGUSR1,
            ..Cues::default()
        };
        assert_eq!(
            next_phase(Phase::Running, 10 * SEC, &plan(), kill_now),
            Phase::Killing(15 * SEC)
        );
    }

    #[test]
    fn a_stop_the_backstop_or_leftovers_terminate_then_kill_after_the_grace() {
        for cues in [
            Cues {
                signal: libc::SIGTERM,
                ..Cues::default()
            },
            Cues {
                late: true,
                ..Cues::default()
            },
            Cues {
                ended: true,
                left: true,
                ..Cues::default()
            },
        ] {
            let term = next_phase(Phase::Running, 10 * SEC, &plan(), cues);
            assert_eq!(term, Phase::Terminating(12 * SEC), "{cues:?}");
            assert_eq!(next_phase(term, 11 * SEC, &plan(), Cues::default()), term);
            assert_eq!(
                next_phase(term, 12 * SEC, &plan(), Cues::default()),
                Phase::Killing(17 * SEC)
            );
        }
    }

    #[test]
    fn the_parent_death_signal_alone_decides_nothing() {
        // SIGHUP is what PR_SET_PDEATHSIG sends, also when only the thread
        // that spawned the call ended: only `orphaned` (getppid) counts.
        let hup = Cues {
            signal: libc::SIGHUP,
            ..Cues::default()
        };
        assert_eq!(
            next_phase(Phase::Running, SEC, &plan(), hup),
            Phase::Running
        );
    }
}
