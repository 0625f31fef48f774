//! The process runner against real processes (sh, sleep, setsid, head, seq):
//! exit codes, tails, stdin, the cleared environment, redaction, timeouts,
//! cancellation, escaped descendants, spawn errors, large outputs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nightshift::process::{self, Command, Outcome, ProcessError, child_env, run};
use nightshift::secret::{Redactor, scrub_own_env};
use tokio_util::sync::CancellationToken;

const SECRET: &str = "ghp_S3cr3tT0kenValue42";

/// The test process's environment minus tokens: PATH and friends.
fn base_env() -> BTreeMap<String, String> {
    child_env(std::env::vars(), &[])
}

async fn run_ok(cmd: Command) -> Outcome {
    run(cmd.env_map(base_env()), &CancellationToken::new())
        .await
        .expect("run")
}

/// Like `run_ok` but keeps an env map already set on the command.
async fn run_with_env(cmd: Command) -> Outcome {
    run(cmd, &CancellationToken::new()).await.expect("run")
}

fn read_pid(path: &Path) -> i32 {
    for _ in 0..100 {
        if let Ok(text) = std::fs::read_to_string(path)
            && let Ok(pid) = text.trim().parse()
        {
            return pid;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("no pid written to {}", path.display());
}

/// The process is gone from /proc: dead and reaped. Allows a moment for a
/// parent other than us to reap it.
/// Whether `pid` stopped running within a second: no longer in `/proc`, or a
/// zombie (state `Z`). A zombie runs nothing; whether one is reaped at once
/// depends on who the orphan's new parent is (under nextest each test is a
/// process of its own and not a subreaper, and this machine's init reaps late).
fn gone(pid: i32) -> bool {
    for _ in 0..50 {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return true,
            // The state follows the command name's closing parenthesis.
            Ok(stat)
                if stat
                    .rsplit_once(") ")
                    .is_some_and(|(_, rest)| rest.starts_with('Z')) =>
            {
                return true;
            }
            Ok(_) => {}
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

fn sh(script: &str) -> Command {
    Command::shell(script)
        .timeout(Duration::from_secs(10))
        .grace(Duration::from_millis(500))
}

#[tokio::test]
async fn exit_code_and_tails_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.log");
    let err = dir.path().join("err.log");
    let outcome = run_ok(
        sh("echo to-out; echo to-err >&2; exit 3")
            .stdout_file(&out)
            .stderr_file(&err),
    )
    .await;
    assert_eq!(outcome.exit_code, Some(3));
    assert_eq!(outcome.signal, None);
    assert!(!outcome.timed_out && !outcome.cancelled && !outcome.success());
    assert_eq!(outcome.stdout_tail, "to-out\n");
    assert_eq!(outcome.stderr_tail, "to-err\n");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "to-out\n");
    assert_eq!(std::fs::read_to_string(&err).unwrap(), "to-err\n");
    assert_eq!((outcome.stdout_bytes, outcome.stderr_bytes), (7, 7));
    assert_eq!(outcome.stdout_path.as_deref(), Some(out.as_path()));

    let ok = run_ok(Command::new("true")).await;
    assert!(ok.success());
    assert_eq!(ok.stdout_path, None);
}

#[tokio::test]
async fn argv_is_passed_verbatim_and_cwd_is_used() {
    let dir = tempfile::tempdir().unwrap();
    let outcome = run_ok(
        Command::new("sh")
            .args([
                "-c",
                "printf '%s|' \"$@\"; pwd",
                "argv0",
                "a b",
                "$HOME",
                "'q'",
            ])
            .cwd(dir.path()),
    )
    .await;
    let cwd = dir.path().canonicalize().unwrap();
    assert_eq!(
        outcome.stdout_tail,
        format!("a b|$HOME|'q'|{}\n", cwd.display())
    );
}

#[tokio::test]
async fn stdin_bytes_reach_the_child_and_default_stdin_is_null() {
    let prompt = "line one\nprompt with ünïcode\n".repeat(20_000); // ~0.5 MB, more than a pipe holds
    let outcome = run_ok(
        Command::new("sh")
            .args(["-c", "wc -c; tail -n 1"])
            .stdin_bytes(prompt.clone()),
    )
    .await;
    // `wc -c` consumes all of stdin, so tail sees nothing more.
    assert_eq!(outcome.stdout_tail.trim(), prompt.len().to_string());

    let outcome = run_ok(Command::new("cat").timeout(Duration::from_secs(5))).await;
    assert!(
        outcome.success(),
        "cat on /dev/null ends at once: {outcome:?}"
    );
    assert_eq!(outcome.stdout_bytes, 0);

    // A child that never reads its stdin does not make the call fail.
    let outcome = run_ok(sh("exit 0").stdin_bytes(vec![b'x'; 1 << 20])).await;
    assert!(outcome.success());
}

#[tokio::test]
async fn env_is_cleared_except_the_map() {
    let parent = vec![
        (
            "PATH".to_owned(),
            std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".to_owned()),
        ),
        ("GITHUB_TOKEN".to_owned(), SECRET.to_owned()),
        ("GH_TOKEN".to_owned(), SECRET.to_owned()),
        (
            "NIGHTSHIFT_DATABASE_URL".to_owned(),
            "postgres://u:pw@h/db".to_owned(),
        ),
        ("KEEP_ME".to_owned(), "kept".to_owned()),
    ];
    let env = child_env(parent, &["NIGHTSHIFT_DATABASE_URL".to_owned()]);
    let outcome = run_with_env(Command::new("env").env_map(env).env("TZ", "Asia/Taipei")).await;
    let mut names: Vec<&str> = outcome
        .stdout_tail
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, _)| k)
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "GIT_TERMINAL_PROMPT",
            "KEEP_ME",
            "LANG",
            "NIGHTSHIFT_CALL_ID",
            "PATH",
            "TZ"
        ],
        "full env: {}",
        outcome.stdout_tail
    );
    assert!(outcome.stdout_tail.contains("GIT_TERMINAL_PROMPT=0\n"));
    assert!(outcome.stdout_tail.contains("LANG=C.UTF-8\n"));
    assert!(!outcome.stdout_tail.contains(SECRET));

    // A LANG in the map is kept as it is.
    let outcome = run_with_env(Command::new("env").env("LANG", "de_DE.UTF-8")).await;
    assert!(outcome.stdout_tail.contains("LANG=de_DE.UTF-8\n"));
    assert!(!outcome.stdout_tail.contains("C.UTF-8"));
}

#[tokio::test]
async fn secret_never_appears_in_files_tails_or_lines() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.log");
    let err = dir.path().join("err.log");
    let half = SECRET.len() / 2;
    let (first, second) = SECRET.split_at(half);
    // Whole; split across two writes with a sleep between; straddling the
    // 8 KiB and the 64 KiB read boundaries within one write.
    let script = format!(
        "echo \"token: {SECRET}\"; \
         printf '%s' '{first}'; sleep 0.2; printf '%s\\n' '{second}'; \
         printf '%s' '{first}' >&2; sleep 0.2; printf '%s\\n' '{second}' >&2; \
         pad=$(head -c {p8} /dev/zero | tr '\\0' a); printf '%s%s\\n' \"$pad\" '{SECRET}'; \
         pad=$(head -c {p64} /dev/zero | tr '\\0' b); printf '%s%s\\n' \"$pad\" '{SECRET}'; \
         echo end",
        p8 = 8192 - half,
        p64 = 65536 - half,
    );
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = Arc::clone(&lines);
    let outcome = run_ok(
        sh(&script)
            .stdout_file(&out)
            .stderr_file(&err)
            .tail_bytes(100_000)
            .redactor(Redactor::new([SECRET]))
            .on_stdout_line(move |line| sink.lock().unwrap().push(line.to_owned())),
    )
    .await;
    assert!(outcome.success(), "{outcome:?}");
    let stdout = std::fs::read_to_string(&out).unwrap();
    let stderr = std::fs::read_to_string(&err).unwrap();
    for (what, text) in [
        ("stdout file", &stdout),
        ("stderr file", &stderr),
        ("stdout tail", &outcome.stdout_tail),
        ("stderr tail", &outcome.stderr_tail),
    ] {
        assert!(!text.contains(SECRET), "{what} leaks the secret");
        assert!(
            !text.contains(first) || !text.contains(&format!("{first}{second}")),
            "{what}"
        );
    }
    assert_eq!(
        stdout.matches("****").count(),
        4,
        "each of the four occurrences is masked"
    );
    assert_eq!(stderr, "****\n");
    let lines = lines.lock().unwrap();
    assert_eq!(lines.len(), 5);
    assert_eq!(lines[0], "token: ****");
    assert_eq!(lines[1], "****");
    assert!(lines[2].ends_with("aaa****") && lines[3].ends_with("bbb****"));
    assert_eq!(lines[4], "end");
    assert!(lines.iter().all(|line| !line.contains(SECRET)));
    // The counts are of what the child wrote, before masking.
    assert_eq!(
        outcome.stdout_bytes as usize,
        stdout.len() + 4 * (SECRET.len() - 4)
    );
}

#[tokio::test]
async fn timeout_kills_the_process_group_within_timeout_and_grace() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let started = Instant::now();
    let outcome = run_ok(
        Command::shell(format!(
            "sleep 1000 & echo $! > {}; wait",
            pidfile.display()
        ))
        .timeout(Duration::from_millis(500))
        .grace(Duration::from_millis(500)),
    )
    .await;
    let elapsed = started.elapsed();
    assert!(outcome.timed_out && !outcome.cancelled);
    assert_eq!(outcome.exit_code, None);
    assert_eq!(outcome.signal, Some(libc::SIGTERM));
    assert!(elapsed < Duration::from_millis(1500), "took {elapsed:?}");
    assert!(gone(read_pid(&pidfile)), "the backgrounded sleep survived");
}

#[tokio::test]
async fn a_child_ignoring_sigterm_gets_sigkill_after_grace() {
    let started = Instant::now();
    let outcome = run_ok(
        // `trap '' TERM` is inherited by sleep as an ignored signal.
        Command::shell("trap '' TERM; sleep 1000")
            .timeout(Duration::from_millis(300))
            .grace(Duration::from_millis(400)),
    )
    .await;
    let elapsed = started.elapsed();
    assert!(outcome.timed_out);
    assert_eq!(outcome.signal, Some(libc::SIGKILL));
    assert!(
        elapsed >= Duration::from_millis(700) && elapsed < Duration::from_millis(1700),
        "took {elapsed:?}"
    );
}

#[tokio::test]
async fn a_hanging_agent_whose_grandchild_holds_stdout_is_killed() {
    for script in [
        "sleep 1000 & echo hi; wait",
        "(sleep 1000 &) ; echo hi; exec sleep 1000",
    ] {
        let started = Instant::now();
        let outcome = run_ok(
            Command::shell(script)
                .timeout(Duration::from_millis(800))
                .grace(Duration::from_millis(500)),
        )
        .await;
        let elapsed = started.elapsed();
        assert!(outcome.timed_out, "{script}: {outcome:?}");
        assert_eq!(outcome.stdout_tail, "hi\n", "{script}");
        assert!(
            elapsed < Duration::from_millis(1800),
            "{script}: took {elapsed:?}"
        );
    }
}

#[tokio::test]
async fn a_background_grandchild_outliving_a_finished_child_is_swept() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let started = Instant::now();
    let outcome = run_ok(sh(&format!(
        "sleep 1000 & echo $! > {}; echo done",
        pidfile.display()
    )))
    .await;
    assert!(outcome.success());
    assert_eq!(outcome.stdout_tail, "done\n");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
    assert!(gone(read_pid(&pidfile)));
}

#[tokio::test]
async fn a_descendant_that_called_setsid_is_swept() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let started = Instant::now();
    let outcome = run_ok(sh(&format!(
        "setsid sh -c 'echo $$ > {p}.tmp; mv {p}.tmp {p}; exec sleep 1000' & \
         while [ ! -s {p} ]; do sleep 0.01; done; echo left",
        p = pidfile.display()
    )))
    .await;
    let elapsed = started.elapsed();
    assert!(outcome.success(), "{outcome:?}");
    assert_eq!(outcome.stdout_tail, "left\n");
    let pid = read_pid(&pidfile);
    assert!(gone(pid), "the setsid'd sleep {pid} is still in /proc");
    assert!(elapsed < Duration::from_secs(2), "took {elapsed:?}");
}

/// `setsid` and `env -i`: no group and no marker lead to it, but it was
/// reparented to us (a subreaper) from another session: swept all the same.
#[tokio::test]
async fn a_descendant_that_left_the_session_and_cleared_its_environment_is_swept() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let started = Instant::now();
    let outcome = run_ok(sh(&format!(
        "setsid env -i sh -c 'echo $$ > {p}.tmp; mv {p}.tmp {p}; exec sleep 1000' >/dev/null 2>&1 & \
         while [ ! -s {p} ]; do sleep 0.01; done",
        p = pidfile.display()
    )))
    .await;
    assert!(outcome.success(), "{outcome:?}");
    let pid = read_pid(&pidfile);
    assert!(
        gone(pid),
        "the setsid'd, unmarked sleep {pid} is still in /proc"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
}

/// With several workers, calls run side by side in one process: a daemon a
/// `sweep_escaped(false)` call started (the embedded database's `pg_ctl
/// start`) while another call ran is not that other call's to sweep when it
/// ends.
#[tokio::test(flavor = "multi_thread")]
async fn a_concurrent_calls_sweep_spares_another_calls_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let other = run_ok(sh("sleep 1.5"));
    let starter = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        run_ok(
            sh(&format!(
                "setsid sh -c 'echo $$ > {p}.tmp; mv {p}.tmp {p}; exec sleep 1000' >/dev/null 2>&1 & \
                 while [ ! -s {p} ]; do sleep 0.01; done",
                p = pidfile.display()
            ))
            .sweep_escaped(false),
        )
        .await
    };
    let (o, s) = tokio::join!(other, starter);
    assert!(o.success() && s.success());
    let pid = read_pid(&pidfile);
    let alive = Path::new(&format!("/proc/{pid}")).exists();
    // SAFETY: kill(2) on the daemon this test started; clean it up ourselves.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    assert!(
        alive,
        "the other call's sweep killed a daemon it did not start"
    );
}

#[tokio::test]
async fn sweep_escaped_false_leaves_a_daemon_running() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let outcome = run_ok(
        // Like `pg_ctl start`, the starter waits until the daemon is up
        // (here: has left the group and written its pid) before it exits.
        sh(&format!(
            "setsid sh -c 'echo $$ > {p}.tmp; mv {p}.tmp {p}; exec sleep 1000' >/dev/null 2>&1 & \
             while [ ! -s {p} ]; do sleep 0.01; done",
            p = pidfile.display()
        ))
        .sweep_escaped(false),
    )
    .await;
    assert!(outcome.success());
    let pid = read_pid(&pidfile);
    let alive = Path::new(&format!("/proc/{pid}")).exists();
    // SAFETY: kill(2) on the daemon this test started; clean it up ourselves.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    assert!(
        alive,
        "a daemon started with sweep_escaped(false) must survive"
    );
}

#[tokio::test]
async fn cancellation_kills_within_grace() {
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        trigger.cancel();
    });
    let started = Instant::now();
    let outcome = run(
        Command::shell("sleep 1000")
            .env_map(base_env())
            .timeout(Duration::from_secs(30))
            .grace(Duration::from_millis(500)),
        &cancel,
    )
    .await
    .unwrap();
    let elapsed = started.elapsed();
    assert!(outcome.cancelled && !outcome.timed_out);
    assert_eq!(outcome.signal, Some(libc::SIGTERM));
    assert!(elapsed < Duration::from_millis(1300), "took {elapsed:?}");
}

#[tokio::test]
async fn dropping_the_run_future_kills_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let cancel = CancellationToken::new();
    let cmd = Command::shell(format!(
        "sleep 1000 & echo $! > {}; wait",
        pidfile.display()
    ))
    .env_map(base_env())
    .timeout(Duration::from_secs(30));
    let result = tokio::time::timeout(Duration::from_millis(500), run(cmd, &cancel)).await;
    assert!(result.is_err(), "the call was expected to be cut off");
    assert!(gone(read_pid(&pidfile)));
}

#[tokio::test]
async fn a_missing_program_is_a_spawn_error_naming_it() {
    let err = run(
        Command::new("nightshift-no-such-agent").env_map(base_env()),
        &CancellationToken::new(),
    )
    .await
    .unwrap_err();
    let message = err.to_string();
    assert!(
        matches!(&err, ProcessError::Spawn { program, .. } if program == "nightshift-no-such-agent")
    );
    assert!(
        message.contains("`nightshift-no-such-agent`") && message.contains("PATH"),
        "{message}"
    );

    let err = run(
        Command::new("true")
            .env_map(base_env())
            .cwd("/nonexistent/dir"),
        &CancellationToken::new(),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("/nonexistent/dir"), "{err}");
    assert!(err.to_string().contains("does not exist"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("agent.sh");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    let err = run(
        Command::new(script.to_str().unwrap()).env_map(base_env()),
        &CancellationToken::new(),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("chmod +x"), "{err}");
}

#[tokio::test]
async fn an_unwritable_output_file_is_an_error_naming_it() {
    let err = run(
        Command::new("true").stdout_file("/nonexistent/dir/out.log"),
        &CancellationToken::new(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&err, ProcessError::OutputFile { path, .. } if path == &PathBuf::from("/nonexistent/dir/out.log"))
    );
}

#[tokio::test]
async fn ten_megabytes_of_output_keep_a_small_tail_and_exact_counts() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.log");
    let outcome = run_ok(
        sh("head -c 10000000 /dev/zero | tr '\\0' x; echo; echo tail-marker; head -c 3000000 /dev/zero >&2")
            .stdout_file(&out)
            .tail_bytes(1024),
    )
    .await;
    assert!(outcome.success());
    assert_eq!(outcome.stdout_bytes, 10_000_000 + 1 + 12);
    assert_eq!(outcome.stderr_bytes, 3_000_000);
    assert_eq!(std::fs::metadata(&out).unwrap().len(), outcome.stdout_bytes);
    assert_eq!(outcome.stdout_tail.len(), 1024);
    assert!(outcome.stdout_tail.ends_with("xxx\ntail-marker\n"));
    assert_eq!(outcome.stderr_tail.len(), 1024);
}

#[tokio::test]
async fn the_line_callback_sees_every_line() {
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = Arc::clone(&lines);
    let outcome = run_ok(
        sh("seq 1 10000").on_stdout_line(move |line| sink.lock().unwrap().push(line.to_owned())),
    )
    .await;
    assert!(outcome.success());
    let lines = lines.lock().unwrap();
    assert_eq!(lines.len(), 10_000);
    assert!(
        lines
            .iter()
            .enumerate()
            .all(|(i, line)| *line == (i + 1).to_string())
    );
}

/// Runs only inside the process started by
/// `scrub_removes_tokens_from_own_proc_environ`, whose exec-time environment
/// holds the tokens. libtest gives every test its own thread, so the scrub
/// runs in a forked child of it, which has exactly one thread, as `main` has
/// at start-up; the child reports through its exit code only.
#[test]
fn scrub_probe() {
    if std::env::var_os("NIGHTSHIFT_SCRUB_PROBE").is_none() {
        return;
    }
    // SAFETY: the child only runs the scrub and reads /proc, then _exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = std::panic::catch_unwind(scrub_checks).unwrap_or(99);
        // SAFETY: leaves the forked child without running the parent's
        // atexit handlers or destructors.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status), "probe child died: {status}");
    assert_eq!(libc::WEXITSTATUS(status), 0, "failed check number");
    println!("SCRUB-PROBE-OK");
}

/// 0 when every check passes, else the number of the first failed check.
fn scrub_checks() -> i32 {
    let environ_before =
        String::from_utf8_lossy(&std::fs::read("/proc/self/environ").unwrap()).into_owned();
    if !environ_before.contains(SECRET) {
        return 1;
    }
    let removed = scrub_own_env(&["EXTRA_SECRET"]);
    let names: Vec<&str> = removed.iter().map(|(name, _)| name.as_str()).collect();
    if names != ["GITHUB_TOKEN", "GH_TOKEN", "EXTRA_SECRET"] || removed[0].1.expose() != SECRET {
        return 2;
    }
    if std::env::var_os("GITHUB_TOKEN").is_some() || std::env::var_os("EXTRA_SECRET").is_some() {
        return 3;
    }
    if std::env::var("KEEP_ME").as_deref() != Ok("kept") {
        return 4;
    }
    let environ =
        String::from_utf8_lossy(&std::fs::read("/proc/self/environ").unwrap()).into_owned();
    if environ.contains(SECRET)
        || environ.contains("gho_another_token_value")
        || environ.contains("extra-secret-value")
    {
        return 5;
    }
    if !environ.contains("KEEP_ME=kept") {
        return 6;
    }
    0
}

#[test]
fn scrub_removes_tokens_from_own_proc_environ() {
    // The probe's name inside this binary: `process::scrub_probe`.
    let probe = match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::scrub_probe"),
        None => "scrub_probe".to_string(),
    };
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([probe.as_str(), "--exact", "--test-threads=1", "--nocapture"])
        .env("NIGHTSHIFT_SCRUB_PROBE", "1")
        .env("GITHUB_TOKEN", SECRET)
        .env("GH_TOKEN", "gho_another_token_value")
        .env("EXTRA_SECRET", "extra-secret-value")
        .env("KEEP_ME", "kept")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("SCRUB-PROBE-OK"),
        "probe failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test]
async fn run_as_switches_user_and_sets_home_user_logname() {
    let account = process::RunAs::lookup("nobody").expect("the nobody account exists");
    let cmd = Command::new("sh")
        .args(["-c", "id -u; id -g; id -G; echo \"$HOME $USER $LOGNAME\""])
        .env_map(base_env())
        .cwd("/")
        .run_as(account.clone());
    let result = run(cmd, &CancellationToken::new()).await;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let outcome = result.expect("root may switch to nobody");
        let expected = format!(
            "{uid}\n{gid}\n{gid}\n{home} nobody nobody\n",
            uid = account.uid,
            gid = account.gid,
            home = account.home.display()
        );
        assert_eq!(
            outcome.stdout_tail, expected,
            "supplementary groups are dropped too"
        );
    } else {
        let err = result.expect_err("only root may switch users");
        assert!(err.to_string().contains("agent_user"), "{err}");
    }
    let err = process::RunAs::lookup("nightshift-no-such-user").unwrap_err();
    assert!(err.to_string().contains("useradd"), "{err}");
}

#[tokio::test]
async fn a_quick_command_costs_little_beyond_its_own_run() {
    // The sweep reads /proc after every call; 50 calls of `true` must stay
    // well below a second each even on a busy machine.
    let started = Instant::now();
    for _ in 0..50 {
        assert!(run_ok(Command::new("true")).await.success());
    }
    let per_call = started.elapsed() / 50;
    assert!(
        per_call < Duration::from_millis(200),
        "{per_call:?} per call"
    );
    println!("{per_call:?} per call");
}

/// The supervisor is this program exec'd anew, not a fork of the runner
/// (docs/security.md#processes): a runner holding 256 MB does not lend
/// them to each call's supervisor (a fork's copy counts them in its RSS
/// and pays to copy and tear down their page tables).
#[tokio::test]
async fn the_supervisor_is_a_small_program_of_its_own_not_a_copy_of_the_runner() {
    let held = vec![1u8; 256 << 20];
    let o = run_ok(sh(
        "grep -E '^(Name|VmRSS|Threads):' /proc/$PPID/status; readlink /proc/$PPID/exe",
    ))
    .await;
    assert!(o.success(), "{}", o.stderr_tail);
    let field = |name: &str| {
        (o.stdout_tail.lines())
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .unwrap_or_else(|| panic!("no {name} in {}", o.stdout_tail))
            .to_owned()
    };
    assert_eq!(field("Name:"), "nightshift-call");
    assert_eq!(field("Threads:"), "1");
    let rss_kb: u64 = field("VmRSS:")
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    assert!(rss_kb < 64 << 10, "the supervisor holds {rss_kb} kB");
    let exe = std::fs::canonicalize("/proc/self/exe").unwrap();
    assert!(
        o.stdout_tail.contains(exe.to_str().unwrap()),
        "{}",
        o.stdout_tail
    );
    assert_eq!(held[held.len() - 1], 1);
}

/// A supervisor killed before it answers (here by its own call) ends
/// `run` at once, not after the minute a start may take: the runner
/// holds no copy of the supervisor's end of the control socket.
#[tokio::test(flavor = "multi_thread")]
async fn a_supervisor_killed_before_its_answer_ends_the_run_at_once() {
    let calls: Vec<_> = (0..20)
        .map(|_| {
            tokio::spawn(async {
                let at = Instant::now();
                let cmd = sh("kill -9 $PPID").env_map(base_env());
                let ended = run(cmd, &CancellationToken::new()).await;
                (ended.is_ok(), at.elapsed())
            })
        })
        .collect();
    for call in calls {
        let (_, took) = call.await.unwrap();
        assert!(took < Duration::from_secs(20), "{took:?}");
    }
}

/// The call holds its three standard descriptors and nothing else: not
/// the hand-over's control socket or error pipe, not a copy of its stdin's
/// pipe, and not a descriptor nightshift inherited without close-on-exec
/// (a test harness's, a service manager's) (docs/security.md#processes).
#[tokio::test]
async fn the_call_holds_only_its_stdio() {
    // SAFETY: a pipe without close-on-exec, as a parent may leave one.
    let inherited = unsafe {
        let mut fds = [0; 2];
        assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
        fds
    };
    for stdin in [None, Some(b"prompt".to_vec())] {
        // `ls` holds the directory it lists as descriptor 3.
        let mut cmd = sh("exec ls /proc/self/fd");
        if let Some(bytes) = stdin {
            cmd = cmd.stdin_bytes(bytes);
        }
        let o = run_ok(cmd).await;
        assert!(o.success(), "{}", o.stderr_tail);
        let fds: Vec<&str> = o.stdout_tail.split_whitespace().collect();
        assert_eq!(fds, ["0", "1", "2", "3"], "{inherited:?}");
    }
    // SAFETY: our own descriptors.
    unsafe {
        libc::close(inherited[0]);
        libc::close(inherited[1]);
    }
}

/// A group of its own in our session and `env -i` (no call marker, nothing
/// that points back at the call): still inside the supervisor's subtree,
/// so it is ended with the call, and `run` does not wait for its pipe.
#[tokio::test]
async fn a_descendant_in_a_group_of_its_own_without_the_marker_is_swept() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let outcome = run_ok(sh(&format!(
        "perl -e 'setpgrp(0, 0); exec @ARGV' env -i sh -c 'echo $$ > {p}.tmp; mv {p}.tmp {p}; exec sleep 1000' & \
         while [ ! -s {p} ]; do sleep 0.01; done; echo before-exit",
        p = pidfile.display()
    )))
    .await;
    let pid = read_pid(&pidfile);
    assert!(outcome.success(), "{outcome:?}");
    assert_eq!(outcome.stdout_tail, "before-exit\n");
    assert!(
        gone(pid),
        "the unmarked sleep {pid} in its own group survived"
    );
}

#[tokio::test]
async fn a_pipe_held_by_an_unswept_daemon_is_abandoned_after_the_linger() {
    // `sweep_escaped(false)` (git's helpers, `pg_ctl start`): a daemon that
    // left the group is left running, and it keeps stdout open. `run` must
    // still return, READER_LINGER (2 s) after the child is gone, with what
    // was read.
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let started = Instant::now();
    let outcome = run_ok(
        sh(&format!(
            "setsid sh -c 'echo $$ > {p}.tmp; mv {p}.tmp {p}; exec sleep 1000' & \
             while [ ! -s {p} ]; do sleep 0.01; done; echo before-exit",
            p = pidfile.display()
        ))
        .sweep_escaped(false),
    )
    .await;
    let elapsed = started.elapsed();
    let pid = read_pid(&pidfile);
    let survived = Path::new(&format!("/proc/{pid}")).exists();
    // SAFETY: kill(2) on the daemon this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    assert!(outcome.success(), "{outcome:?}");
    assert_eq!(outcome.stdout_tail, "before-exit\n");
    assert!(survived, "expected the daemon to be left running");
    assert!(
        elapsed >= process::READER_LINGER
            && elapsed < process::READER_LINGER + Duration::from_secs(1),
        "took {elapsed:?}"
    );
}

#[test]
fn the_run_future_can_be_spawned() {
    fn assert_send<T: Send + 'static>(_: &T) {}
    let cancel: &'static CancellationToken = Box::leak(Box::new(CancellationToken::new()));
    let future = run(Command::new("true").on_stdout_line(|_| {}), cancel);
    assert_send(&future);
    drop(future); // never polled: nothing is spawned
}

/// The blocking entry (`git`, `gh auth token`) is the same runner: it works
/// from a plain thread and from inside a runtime, keeps stdout whole and raw
/// when asked (the tail stays short and redacted).
#[test]
fn run_blocking_serves_plain_threads_and_keeps_stdout_whole_and_raw() {
    let cmd = |script: &str| {
        Command::shell(script)
            .env_map(base_env())
            .timeout(Duration::from_secs(20))
            .tail_bytes(64)
            .redactor(Redactor::new([SECRET]))
            .capture_stdout(true)
    };
    let want: String = (1..=100_000).map(|n| format!("{n}\n")).collect();
    let out = process::run_blocking(cmd("seq 1 100000"), None).expect("run");
    assert!(out.success(), "{out:?}");
    assert_eq!(out.stdout.len(), want.len());
    assert!(out.stdout == want.as_bytes(), "stdout kept whole");
    assert!(out.stdout_tail.len() <= 64);

    let out = process::run_blocking(cmd(&format!("printf %s {SECRET}")), None).expect("run");
    assert_eq!(out.stdout, SECRET.as_bytes(), "captured raw");
    assert_eq!(out.stdout_tail, "****", "the tail is redacted");

    // Without capture_stdout nothing is kept beyond the tail.
    let out = process::run_blocking(cmd("seq 1 1000").capture_stdout(false), None).unwrap();
    assert!(out.stdout.is_empty());
}

#[tokio::test]
async fn run_blocking_works_inside_a_single_threaded_runtime() {
    let out = process::run_blocking(
        sh("echo inside").env_map(base_env()).capture_stdout(true),
        None,
    )
    .expect("run");
    assert_eq!(out.stdout, b"inside\n");
}

/// A stop flag (a signal, for a blocking caller) stops the child as
/// cancellation does: the group is terminated, the outcome says cancelled.
#[test]
fn run_blocking_stops_the_child_when_the_flag_turns() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        flag.store(true, Ordering::SeqCst);
    });
    let started = Instant::now();
    let out = process::run_blocking(
        Command::shell("sleep 30")
            .env_map(base_env())
            .timeout(Duration::from_secs(60))
            .grace(Duration::from_secs(1)),
        Some(stop),
    )
    .expect("run");
    assert!(out.cancelled && !out.timed_out, "{out:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

/// The script of a call that outlives nothing: it writes its own pid, a
/// background child's (same group) and a `setsid` grandchild's (a session
/// of its own, environment cleared) into `$DIR`, then sleeps.
fn sprawling_call(dir: &Path) -> String {
    format!(
        "d={d}; echo $$ > $d/call.tmp; mv $d/call.tmp $d/call; \
         sh -c 'echo $$ > {d}/child.tmp; mv {d}/child.tmp {d}/child; exec sleep 1000' & \
         setsid env -i sh -c 'echo $$ > {d}/daemon.tmp; mv {d}/daemon.tmp {d}/daemon; exec sleep 1000' >/dev/null 2>&1 & \
         exec sleep 1000",
        d = dir.display()
    )
}

/// A runner for the tests below, in a process of its own: runs
/// [`sprawling_call`] in `$NIGHTSHIFT_RUNNER_PROBE` (as `nobody` with
/// `NIGHTSHIFT_RUNNER_AS`) with a timeout of `$NIGHTSHIFT_RUNNER_TIMEOUT`
/// seconds, and is killed or stopped by the test meanwhile.
#[tokio::test]
async fn runner_probe() {
    let Some(dir) = std::env::var_os("NIGHTSHIFT_RUNNER_PROBE") else {
        return;
    };
    let secs: u64 = std::env::var("NIGHTSHIFT_RUNNER_TIMEOUT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    let mut cmd = sh(&sprawling_call(Path::new(&dir)))
        .env_map(base_env())
        .timeout(Duration::from_secs(secs))
        .grace(Duration::from_millis(200));
    if std::env::var_os("NIGHTSHIFT_RUNNER_AS").is_some() {
        cmd = cmd.run_as(process::RunAs::lookup("nobody").expect("nobody exists"));
    }
    let outcome = run(cmd, &CancellationToken::new()).await;
    println!("RUNNER-ENDED {outcome:?}");
}

/// Starts [`runner_probe`] on `dir` and returns it with the pids of the
/// call, its child and its daemon once all three are written.
fn start_runner(dir: &Path, extra: &[(&str, &str)]) -> (std::process::Child, [i32; 3]) {
    let probe = match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::runner_probe"),
        None => "runner_probe".to_string(),
    };
    let mut runner = std::process::Command::new(std::env::current_exe().unwrap());
    runner
        .args([probe.as_str(), "--exact", "--test-threads=1", "--nocapture"])
        .env("NIGHTSHIFT_RUNNER_PROBE", dir)
        .stdout(std::process::Stdio::null());
    for (k, v) in extra {
        runner.env(k, v);
    }
    let runner = runner.spawn().unwrap();
    let pids = ["call", "child", "daemon"].map(|name| {
        let path = dir.join(name);
        for _ in 0..500 {
            if path.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        read_pid(&path)
    });
    (runner, pids)
}

/// Waits up to `secs` for every pid to be gone (or a zombie); the ones left.
fn survivors(pids: &[i32], secs: u64) -> Vec<i32> {
    let until = Instant::now() + Duration::from_secs(secs);
    loop {
        let left: Vec<i32> = pids.iter().copied().filter(|&p| !gone(p)).collect();
        if left.is_empty() || Instant::now() >= until {
            return left;
        }
    }
}

/// Kills what a failed test left behind.
fn kill_all(pids: &[i32]) {
    for &pid in pids {
        // SAFETY: kill(2) on processes this test started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// The runner killed by SIGKILL mid-call (a `nightshift worker` killed
/// with `kill -9`): nothing of the call lives on, neither in its group nor
/// the daemon that left its session and cleared its environment.
#[test]
fn nothing_of_a_call_outlives_its_runner_killed_by_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let (mut runner, pids) = start_runner(dir.path(), &[]);
    runner.kill().unwrap();
    runner.wait().unwrap();
    let left = survivors(&pids, 5);
    kill_all(&pids);
    assert!(
        left.is_empty(),
        "survived their runner: {left:?} of {pids:?}"
    );
}

/// The same for a call run as another account (`agent_user`): its
/// supervisor stays root, out of the agent's reach, and still ends it.
#[test]
fn nothing_of_a_call_as_another_user_outlives_its_runner() {
    // SAFETY: geteuid cannot fail and touches no memory.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: agent_user needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let (mut runner, pids) = start_runner(dir.path(), &[("NIGHTSHIFT_RUNNER_AS", "1")]);
    let uid = std::fs::read_to_string(format!("/proc/{}/status", pids[0]))
        .unwrap()
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .map(str::to_owned)
        .unwrap_or_default();
    runner.kill().unwrap();
    runner.wait().unwrap();
    let left = survivors(&pids, 5);
    kill_all(&pids);
    let nobody = process::RunAs::lookup("nobody").unwrap().uid;
    assert!(
        uid.split_whitespace().nth(1) == Some(nobody.to_string().as_str()),
        "the call did not run as nobody: {uid}"
    );
    assert!(
        left.is_empty(),
        "survived their runner: {left:?} of {pids:?}"
    );
}

/// A runner that is alive but stuck (stopped with SIGSTOP) past the call's
/// timeout: the supervisor's own clock ends the call.
#[test]
fn a_stuck_runners_call_is_ended_by_its_supervisors_own_clock() {
    let dir = tempfile::tempdir().unwrap();
    let (mut runner, pids) = start_runner(dir.path(), &[("NIGHTSHIFT_RUNNER_TIMEOUT", "1")]);
    // SAFETY: kill(2) on the runner this test started.
    unsafe { libc::kill(runner.id() as i32, libc::SIGSTOP) };
    // Timeout 1 s + grace 0.2 s + the backstop's 5 s slack, and a margin.
    let left = survivors(&pids, 12);
    runner.kill().unwrap();
    runner.wait().unwrap();
    kill_all(&pids);
    assert!(
        left.is_empty(),
        "outlived the timeout: {left:?} of {pids:?}"
    );
}
