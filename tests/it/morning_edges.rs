//! The morning's rough edges (issue 27, point 4), each through the real
//! binary with the exact output or JSON it produces now: a worker without
//! the approval key, a worker's own outcomes and exit code, `status` during
//! `--jobs`, the end-of-run notification's facts, the history without
//! GitHub, repeated reasons and `--show-body`, `plan` refusing a missing
//! agent as docs/commands.md says, and `init`'s pytest guess.

use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common;
use crate::common::night::APPROVE;

use common::{Fixture, assert_ok, git, text};

/// A writer for items titled `Add <word> …`: it sleeps the seconds in
/// `slow` beside it, then appends `<word>` to calc.txt (whose test accepts
/// only add/sub/mul/div/pow, so `Add bogus …` fails the gate).
const WRITER: &str = r#"#!/bin/sh
set -eu
here=$(dirname "$0")
word=$(grep -o '"title":"Add [a-z0-9]*' "$NIGHTSHIFT_CONTRACT_FILE" | head -1 | sed 's/.*Add //')
sleep "$(cat "$here/slow" 2>/dev/null || echo 0)"
echo "$word" >> calc.txt
echo "added $word"
"#;

/// No GitHub (branches are pushed to the local remote), command agents,
/// one round per item, the writer sleeping `slow` seconds, `titles` as the
/// backlog's items.
fn world(titles: &[&str], slow: u32, extra: &str) -> Fixture {
    let f = Fixture::new();
    let w = f.agent("writer.sh", WRITER);
    let r = f.agent("reviewer.sh", APPROVE);
    std::fs::write(f.agents.join("slow"), slow.to_string()).unwrap();
    f.config_with(&w, &r, &format!("{extra}\n[limits]\nrounds = 1\n"));
    let backlog: String = titles.iter().map(|t| format!("- [ ] {t}\n")).collect();
    f.write("NEXT.md", &format!("# words\n\n{backlog}"));
    f
}

/// Another host: a clone of the remote with the same `.nightshift/`, and
/// its own (empty) data directory.
fn other_host(f: &Fixture) -> (PathBuf, PathBuf) {
    let (clone, data) = (f.dir.path().join("hostB"), f.dir.path().join("dataB"));
    std::fs::create_dir_all(&data).unwrap();
    git(
        f.dir.path(),
        &[
            "clone",
            "-q",
            f.remote.to_str().unwrap(),
            clone.to_str().unwrap(),
        ],
    );
    let copy = |name: &str| {
        let to = clone.join(".nightshift").join(name);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(f.repo.join(".nightshift").join(name), to).unwrap();
    };
    copy("config.toml");
    copy(".gitignore");
    (clone, data)
}

/// `nightshift worker` on the other host, to its end.
fn worker(f: &Fixture, clone: &Path, data: &Path) -> Output {
    f.cmd()
        .current_dir(clone)
        .env("NIGHTSHIFT_DATA_DIR", data)
        .arg("worker")
        .output()
        .expect("worker runs")
}

/// plan, approve, then `drain EXTRA` in the background.
fn start_drain(f: &Fixture, extra: &[&str]) -> Child {
    let sha = f.plan_sha();
    assert_ok(&f.run(&["approve", &sha]), "approve");
    let deadline = common::far_deadline();
    f.cmd()
        .args(["drain", "--deadline", &deadline])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("drain starts")
}

/// Waits (at most 60 s) until `q` answers at least `n`.
fn wait_until(f: &Fixture, q: &str, n: i64) {
    let until = Instant::now() + Duration::from_secs(60);
    while f.db.sql(q).parse::<i64>().unwrap_or(0) < n {
        assert!(Instant::now() < until, "waited 60 s for {n}: {q}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A worker host without the approval key says which file to copy from
/// which host (the path the approving drain recorded, whatever its data
/// directory), not that the approval is forged.
#[test]
fn a_worker_without_the_key_names_the_file_to_copy_and_from_where() {
    let f = world(&["Add sub", "Add mul"], 4, "");
    let (clone, data) = other_host(&f);
    let drain = start_drain(&f, &[]);
    wait_until(&f, "SELECT count(*) FROM claims", 1);
    let out = worker(&f, &clone, &data);
    let host = f.db.sql("SELECT host FROM runs");
    let run = f.db.sql("SELECT id FROM runs");
    let there = f.data.join("approval.key");
    let expected = format!(
        "error: run {run}: no approval.key in {}: copy it from the approving host ({host}:{}), e.g. `scp {host}:{} {}` (mode 0600); nothing was run",
        data.display(),
        there.display(),
        there.display(),
        data.join("approval.key").display()
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .any(|l| l == expected),
        "expected {expected:?} in:\n{}",
        text(&out)
    );
    assert!(!text(&out).contains("forged"), "{}", text(&out));
    assert_ok(&drain.wait_with_output().unwrap(), "drain");
}

/// `worker` prints each of its items' outcomes and exits as `drain` would:
/// 1 when one of them failed.
#[test]
fn a_worker_lists_its_items_and_exits_1_when_one_failed() {
    let f = world(&["Add sub", "Add bogus"], 4, "");
    let (clone, data) = other_host(&f);
    let drain = start_drain(&f, &[]);
    // The drain holds `Add sub`; the worker gets `Add bogus`, which fails.
    wait_until(&f, "SELECT count(*) FROM claims", 1);
    let key = data.join("approval.key");
    std::fs::copy(f.data.join("approval.key"), &key).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = worker(&f, &clone, &data);
    let drained = drain.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let run = f.db.sql("SELECT id FROM runs");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[0],
        format!("worker: ended 1 item(s) of run {run}"),
        "{stdout}"
    );
    assert!(
        lines[1].starts_with("  2 \"Add bogus\" · tests_failed · "),
        "{stdout}"
    );
    assert_eq!(
        lines[2],
        "worker: 1 of its item(s) failed (exit 1; `nightshift report` has the run)"
    );
    // The drain's own items all went well, the run had a failure: exit 1.
    assert_eq!(drained.status.code(), Some(1), "{}", text(&drained));
}

/// `status` during `drain --jobs 2`: a headline for the run, then one line
/// per worker with the item it holds.
#[test]
fn status_during_jobs_has_a_headline_for_the_run_then_a_line_per_worker() {
    let f = world(&["Add sub", "Add mul"], 6, "");
    let drain = start_drain(&f, &["--jobs", "2"]);
    wait_until(&f, "SELECT count(*) FROM workers WHERE phase = 'writer'", 2);
    let out = f.run(&["status"]);
    assert_ok(&out, "status");
    let run = f.db.sql("SELECT id FROM runs");
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    let lines: Vec<&str> = said.lines().collect();
    // The drain's connections on its host: its pool's in use and the lock's.
    let host = f.db.sql("SELECT host FROM runs");
    let head = format!("run {run} · 2 workers · 0 item(s) ended, 2 to go · connections: {host} ");
    assert!(lines[0].starts_with(&head), "{said}");
    let n: i64 = lines[0][head.len()..].parse().expect("a count");
    assert!((1..=5).contains(&n), "{said}");
    assert_eq!(lines.len(), 3, "{said}");
    let mut items: Vec<String> = lines[1..]
        .iter()
        .map(|l| {
            assert!(l.starts_with("  worker "), "{said}");
            let at = l.find(" · item ").expect("names the item");
            let rest = &l[at + " · item ".len()..];
            rest[..rest.find(" (").unwrap()].to_string()
        })
        .collect();
    items.sort();
    assert_eq!(items, ["1 \"Add sub\"", "2 \"Add mul\""], "{said}");
    assert!(
        lines[1..]
            .iter()
            .all(|l| l.contains(" · round 1 · writer · host ")),
        "{said}"
    );
    assert_ok(&drain.wait_with_output().unwrap(), "drain");
}

/// A webhook (wiremock) that answers 200 to every `POST /hook`.
async fn hook() -> (String, wiremock::MockServer) {
    use wiremock::{Mock, ResponseTemplate, matchers};
    let server = wiremock::MockServer::start().await;
    Mock::given(matchers::method("POST"))
        .and(matchers::path("/hook"))
        .respond_with(ResponseTemplate::new(200))
        .mount(&server)
        .await;
    (format!("{}/hook", server.uri()), server)
}

/// The JSON bodies the webhook was sent, oldest first.
async fn bodies(server: &wiremock::MockServer) -> Vec<serde_json::Value> {
    server
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .map(|r| serde_json::from_slice(&r.body).expect("a JSON body"))
        .collect()
}

/// Waits short: a notification to a dead port fails at once, three times.
fn short_waits(f: &mut Fixture) {
    f.extra_env
        .push(("NIGHTSHIFT_NOTIFY_BACKOFF_MS".into(), "10".into()));
    f.extra_env
        .push(("NIGHTSHIFT_NOTIFY_TIMEOUT_MS".into(), "3000".into()));
}

/// Without GitHub the run's message lists the pushed branch (not an empty
/// `prs` alone), a cost no agent reported as `null` (never `-0.0`), the
/// remote that exists, and is not marked a test; `notify --test` is, in its
/// JSON and its text; a send that fails names its target and the cause.
#[tokio::test(flavor = "multi_thread")]
async fn the_run_message_says_what_was_pushed_and_the_test_one_says_it_is_a_test() {
    let (url, server) = hook().await;
    let mut f = world(&["Add sub"], 0, &format!("[notify]\nwebhook = \"{url}\"\n"));
    short_waits(&mut f);
    let out = f.approve_and_drain(&[]);
    assert_ok(&out, "drain");
    let sent = bodies(&server).await;
    assert_eq!(sent.len(), 1, "{}", text(&out));
    let v = &sent[0];
    let branch = f.remote_branches().pop().expect("a branch was pushed");
    assert_eq!(v["prs"], serde_json::json!([]));
    assert_eq!(v["branches_pushed"][0]["branch"], branch);
    assert_eq!(v["branches_pushed"][0]["outcome"], "branch_pushed");
    assert!(v["cost_usd"].is_null(), "{v:#}");
    assert_eq!(v["repo"], f.remote.display().to_string());
    assert!(Path::new(v["repo"].as_str().unwrap()).exists());
    assert_eq!(v["checkout"], f.repo.display().to_string());
    assert_eq!(v["test"], false);

    let out = f.run(&["notify", "--test"]);
    assert_ok(&out, "notify --test");
    let port = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_string();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "sending a test message (marked \"test\": true, headline \"[test] nightshift run 00000000 completed: 1 PR(s), 1 branch(es) pushed without a PR, 1 failed\"):\nwebhook: sent to {port}\n"
        )
    );
    assert_eq!(bodies(&server).await[1]["test"], true);

    f.config_with(
        &f.agents.join("writer.sh").display().to_string(),
        &f.agents.join("reviewer.sh").display().to_string(),
        "[notify]\nwebhook = \"http://127.0.0.1:9/hook\"\n",
    );
    let out = f.run(&["notify", "--test"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let line = String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)
        .unwrap_or_default()
        .to_string();
    assert!(
        line.starts_with("webhook: not sent after 3 attempt(s): client error (Connect): ")
            && line.contains("Connection refused")
            && line.ends_with(" (to 127.0.0.1:9)"),
        "{}",
        text(&out)
    );
}

/// The history without GitHub counts the pushed branch, says `not
/// reported` for a cost no agent gave (never `$0.00`, `$-0.00` when empty),
/// and `--since 14` asks for its unit.
#[test]
fn the_history_without_github_counts_pushed_branches_and_unreported_cost() {
    let f = world(&["Add sub"], 0, "");
    let empty = f.run(&["report", "--history"]);
    assert_ok(&empty, "report --history");
    let said = String::from_utf8_lossy(&empty.stdout).to_string();
    assert!(
        !said.contains("$-0.00") && !said.contains("$0.00"),
        "{said}"
    );
    assert!(
        said.contains("merge rate -; cost not reported, not reported per merged PR"),
        "{said}"
    );

    assert_ok(&f.approve_and_drain(&[]), "drain");
    let out = f.run(&["report", "--history", "--since", "14d"]);
    assert_ok(&out, "report --history --since 14d");
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(
        lines[0],
        "night             items  PRs pushed merged closed open failed     tokens         cost   slept"
    );
    let cells: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        cells[2..],
        [
            "1", "0", "1", "0", "0", "0", "0", "0", "not", "reported", "0m"
        ],
        "{said}"
    );
    assert!(
        said.contains("1 night(s): 0 PR(s) opened, 1 branch(es) pushed whose PR was not opened (no GitHub access), 0 merged"),
        "{said}"
    );
    let json = f.run(&["report", "--history", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["totals"]["branches_pushed"], 1);
    assert!(v["totals"]["cost_usd"].is_null(), "{v:#}");

    let bare = f.run(&["report", "--history", "--since", "14"]);
    assert_eq!(bare.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&bare.stderr).trim(),
        "error: --since \"14\" has no unit: write --since 14d for 14 days (or 14h for hours, 14w for weeks)"
    );
}

/// A long reason shared by several items is given once ("… and 2 more");
/// `--show-body` shows each body without its contract JSON, which
/// `--json` keeps; the root warning is said once per report.
#[test]
fn a_report_gives_a_repeated_reason_once_and_bodies_without_contract_json() {
    let f = world(
        &[
            "Add bogus one",
            "Add bogus two",
            "Add bogus three",
            "Add sub",
        ],
        0,
        "",
    );
    let out = f.approve_and_drain(&[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    // The drain said it when it started; its report does not say it again.
    assert_eq!(
        text(&out).matches("agents run as root").count(),
        1,
        "{}",
        text(&out)
    );
    let report = String::from_utf8_lossy(&f.run(&["report"]).stdout).to_string();
    let row = |n: &str| {
        report
            .lines()
            .find(|l| l.trim_start().starts_with(n) && l.contains("tests_failed"))
            .unwrap_or_else(|| panic!("no row {n}: {report}"))
            .to_string()
    };
    assert!(row("1 ").ends_with(" … and 2 more"), "{report}");
    assert!(row("2 ").ends_with("  same as item 1"), "{report}");
    assert!(row("3 ").ends_with("  same as item 1"), "{report}");
    assert_eq!(report.matches("agents run as root").count(), 1, "{report}");

    let shown = String::from_utf8_lossy(&f.run(&["report", "--show-body"]).stdout).to_string();
    assert!(
        shown.contains("──── item 4 · PR that would have been opened"),
        "{shown}"
    );
    assert!(!shown.contains("<summary>Contract"), "{shown}");
    assert!(!shown.contains("\"acceptance\""), "{shown}");
    let sha = f.report()["items"][3]["contract_sha"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        shown.contains(&format!(
            "Contract (sha256 {}): its JSON is in the PR and in `nightshift report --json` (`pr_body`)",
            &sha[..12]
        )),
        "{shown}"
    );
    let body = f.report()["items"][3]["pr_body"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(body.contains("<summary>Contract (sha256 "), "{body}");
}

/// docs/commands.md and `plan` agree: a missing writer program is refused
/// at `plan` (exit 2, no SHA), with the fix.
#[test]
fn plan_refuses_a_missing_writer_as_the_docs_say() {
    let f = Fixture::new();
    let r = f.agent("reviewer.sh", APPROVE);
    f.config_with("/nonexistent/writer", &r, "");
    f.write("NEXT.md", "- [ ] Add sub\n");
    let out = f.run(&["plan"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("this plan cannot run, so it has no SHA to approve"),
        "{}",
        text(&out)
    );
    let docs =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/commands.md")).unwrap();
    let plan_section = &docs[docs.find("## plan").unwrap()..docs.find("## approve").unwrap()];
    assert!(
        plan_section.contains("A writer or reviewer program that cannot be found is refused"),
        "{plan_section}"
    );
    assert!(!plan_section.contains("executables and a missing remote are\nwarnings"));
    for listed in ["  notify --test", "report --html", "report --history"] {
        assert!(
            docs[..docs.find("## Global options").unwrap()].contains(listed),
            "{listed}"
        );
    }
}

/// `init` on a Python project with `pyproject.toml` and `tests/test_*.py`
/// (no pytest section) guesses `python3 -m pytest`.
#[test]
fn init_guesses_pytest_for_a_python_project_with_a_tests_folder() {
    let f = Fixture::new();
    f.write(
        "pyproject.toml",
        "[project]\nname = \"calc\"\nversion = \"0.1.0\"\n",
    );
    f.write(
        "tests/test_calc.py",
        "def test_add():\n    assert 1 + 1 == 2\n",
    );
    let out = f.run(&["init"]);
    assert_ok(&out, "init");
    let cfg = f.repo.join(".nightshift/config.toml");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!(
            "gate:   verify = [\"python3 -m pytest\"] (guessed: pyproject.toml and tests/test_*.py, pytest's layout); change it in {} if your tests run otherwise",
            cfg.display()
        )),
        "{}",
        text(&out)
    );
    let config = std::fs::read_to_string(&cfg).unwrap();
    assert!(
        config.contains("verify = [\"python3 -m pytest\"]"),
        "{config}"
    );
}

/// The connection budget (issue 27, point 1): one process draining with
/// `--jobs 20` holds at most 5 server connections (its pool of 4 and the
/// repository lock's own), counted from `pg_stat_activity` through the
/// whole drain, while its workers still share the items.
#[test]
fn a_drain_with_20_jobs_holds_at_most_5_server_connections() {
    let titles: Vec<String> = (1..=20).map(|_| "Add sub".to_string()).collect();
    let titles: Vec<String> = titles
        .iter()
        .enumerate()
        .map(|(n, t)| format!("{t} number {n}"))
        .collect();
    let refs: Vec<&str> = titles.iter().map(String::as_str).collect();
    let f = world(&refs, 1, "");
    let mut drain = start_drain(&f, &["--jobs", "20"]);
    let count = "SELECT count(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND application_name LIKE 'nightshift%'";
    let (mut most, mut samples) = (0, 0);
    while drain.try_wait().unwrap().is_none() {
        most = most.max(f.db.sql(count).parse::<i64>().unwrap());
        samples += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = drain.wait_with_output().unwrap();
    assert_ok(&out, "drain --jobs 20");
    assert!(
        samples > 10 && most >= 2,
        "{samples} samples, at most {most}"
    );
    assert!(most <= 5, "the drain held {most} connections at once");
    let workers = f.db.sql("SELECT count(DISTINCT worker) FROM run_items");
    assert!(
        workers.parse::<i64>().unwrap() >= 4,
        "{workers} worker(s) ended items"
    );
    assert_eq!(
        f.db.sql("SELECT count(*) FROM run_items WHERE outcome = 'branch_pushed'"),
        "20"
    );
}

/// Heartbeats of one process go in one statement (issue 27, point 1): while
/// three workers of one `drain --jobs 3` run their items, every live worker
/// row and every open claim carries the same lease end — one `now()`, so one
/// statement renewed them all (docs/workers.md#heartbeats). Per-worker or
/// per-claim heartbeats would leave as many different ends as beats.
#[test]
fn one_process_renews_all_its_workers_and_claims_in_one_statement() {
    let f = world(&["Add sub", "Add mul", "Add div"], 8, "lease = \"6s\"");
    let drain = start_drain(&f, &["--jobs", "3"]);
    wait_until(&f, "SELECT count(*) FROM claims WHERE ended_at IS NULL", 3);
    // Two beats (every 2 s at a 6 s lease) after the last claim.
    std::thread::sleep(Duration::from_millis(4500));
    let ends = f.db.sql(
        "SELECT count(DISTINCT lease_until) || ' ' || count(*) FROM \
         (SELECT lease_until FROM claims WHERE ended_at IS NULL \
          UNION ALL SELECT lease_until FROM workers WHERE stopped_at IS NULL) x",
    );
    // One heartbeat event per beat of the process, naming its 3 workers
    // (not one row per worker: the board's log would grow with --jobs).
    let beats = f.db.sql(
        "SELECT count(*) || ' ' || min(jsonb_array_length(data->'workers')) FROM events \
         WHERE kind = 'worker_beat' AND at > now() - interval '3 seconds'",
    );
    let out = drain.wait_with_output().unwrap();
    assert_ok(&out, "drain --jobs 3");
    assert_eq!(
        ends, "1 6",
        "distinct lease ends, then rows (3 workers, 3 claims)"
    );
    let (n, named) = beats.split_once(' ').unwrap();
    assert!(
        (1..=2).contains(&n.parse::<u32>().unwrap()) && named == "3",
        "beat events in the last 3 s, and workers each names: {beats}"
    );
}
