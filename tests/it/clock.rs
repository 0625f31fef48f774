//! One truth for every host (docs/workers.md#what-clocks-must-agree,
//! docs/ledger.md#locking): a worker whose clock is hours off decides the
//! deadline by the ledger server's clock and is told of its skew; the
//! clock-faking and preloading variables never reach an agent; a database
//! restart does not let a second drain take a live run over; a drain and a
//! worker both come back from an outage; loose ends of a crash and of a
//! notification. Real PostgreSQL (a private cluster for the restart), the
//! real binary, clocks faked with Debian's `faketime`.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common;
use crate::ops::{db_down, db_up, one_pr_per_item, stall, two_items, wait_ready, with_github};
use crate::workers::{claims_per_item, finish, second_host, share_key, spawn_drain, words};

use common::bg::{Bg, approve, kill_stalled, outcomes, release, stall_snippet, wait_until};
use common::{Fixture, assert_ok, text};

/// Waits (at most `secs`) until the ledger query `q` answers something
/// other than empty, `0` or `f`.
fn wait_for(f: &Fixture, q: &str, secs: u64) {
    wait_until(Duration::from_secs(secs), q, || {
        let v = f.db.sql(q);
        !v.is_empty() && v != "0" && v != "f"
    });
}

/// The nightshift binary under `faketime -f OFFSET`: its host clock
/// `offset` off the server's, with the environment the fixture gives the
/// binary (which then carries `FAKETIME` and `LD_PRELOAD` too). The
/// caller adds nightshift's arguments.
fn faked(f: &Fixture, offset: &str) -> Command {
    let base = f.cmd();
    let mut c = Command::new("faketime");
    c.env_clear();
    for (k, v) in base.get_envs() {
        if let Some(v) = v {
            c.env(k, v);
        }
    }
    c.current_dir(&f.repo)
        .args(["-f", offset, base.get_program().to_str().unwrap()]);
    c
}

/// `nightshift worker` on the second host (`clone`, `data`), its clock
/// `offset` off the server's ([`faked`]).
fn faked_worker(f: &Fixture, offset: &str, clone: &Path, data: &Path) -> Child {
    share_key(f, data);
    faked(f, offset)
        .env("NIGHTSHIFT_DATA_DIR", data)
        .current_dir(clone)
        .arg("worker")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("faketime starts (apt-get install faketime)")
}

/// Puts `before` in front of the world's writer: `writer.sh` runs it, then
/// the original writer (kept as `writer-inner.sh`).
fn wrap_writer(f: &Fixture, before: &str) {
    let inner = f.agents.join("writer-inner.sh");
    std::fs::rename(f.agents.join("writer.sh"), &inner).unwrap();
    f.agent(
        "writer.sh",
        &format!("#!/bin/sh\n{before}exec {} \"$@\"\n", inner.display()),
    );
}

/// Stalls the writer, approves and starts a drain in the background;
/// returns once the writer runs (and hangs).
fn drain_until_the_writer_stalls(f: &Fixture) -> Bg {
    stall(f, "writer");
    approve(f);
    let bg = Bg::start(f, &["drain", "--deadline", &common::far_deadline()]);
    wait_ready(f, "writer");
    bg
}

/// An RFC 3339 deadline `secs` from now (whole seconds).
fn deadline_in(secs: i64) -> String {
    (chrono::Utc::now() + chrono::Duration::seconds(secs))
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// A worker whose clock runs 2 hours ahead of the server's (here: past the
/// run's deadline, an hour away) ends no item `deadline`: it runs the items
/// it claims, is told its skew, and neither `FAKETIME` nor `LD_PRELOAD`
/// reach its agents.
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_two_hours_ahead_ends_no_item_deadline_early() {
    let (f, gh) = words(4, 2, "").start().await.split();
    // A file per call: in its sandbox every call's `$$` is the same.
    wrap_writer(&f, "env > \"$(mktemp \"$(dirname \"$0\")/env.XXXXXX\")\"\n");
    let (clone, data) = second_host(&f);
    let deadline = deadline_in(3600);
    let drain = spawn_drain(&f, &["--deadline", &deadline]);
    wait_for(&f, "SELECT count(*) FROM claims", 30);
    let worker = faked_worker(&f, "+2h", &clone, &data);
    let w = finish(worker, "worker (+2h)");
    let d = finish(drain, "drain");
    assert_eq!(d.status.code(), Some(0), "{}", text(&d));
    assert_eq!(w.status.code(), Some(0), "{}", text(&w));
    assert!(
        text(&w).contains("ahead of the ledger server's"),
        "the worker is told its skew: {}",
        text(&w)
    );
    assert_eq!(
        f.db.sql("SELECT count(*) FROM run_items WHERE outcome = 'deadline'"),
        "0"
    );
    assert_eq!(
        f.db.sql("SELECT count(DISTINCT split_part(worker, ':', 2)) FROM run_items"),
        "2",
        "the skewed worker ran items"
    );
    assert_eq!(f.report()["status"], "completed");
    assert_eq!(gh.prs().len(), 4, "one PR per item");
    assert!(claims_per_item(&f).iter().all(|(_, n)| *n == 1));
    let envs: Vec<String> = std::fs::read_dir(&f.agents)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("env."))
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .collect();
    assert_eq!(envs.len(), 4, "every writer call left its environment");
    for env in &envs {
        for var in ["FAKETIME", "LD_PRELOAD"] {
            assert!(
                !env.lines().any(|l| l.starts_with(var)),
                "{var} reached an agent:\n{env}"
            );
        }
    }
}

/// A worker whose clock runs 2 hours behind the server's joins after the
/// run's true deadline: it starts nothing (its items end `deadline`, no
/// writer runs after the deadline) and is told its skew.
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_two_hours_behind_starts_nothing_after_the_true_deadline() {
    let (f, _gh) = words(3, 0, "").start().await.split();
    // The drain's own writer (its checkouts are under `data/`) holds its
    // first item until the test lets it go.
    wrap_writer(
        &f,
        &format!(
            "case \"$PWD\" in */data/*) {};; esac\n",
            stall_snippet(&f.agents, "drainw").trim_end()
        ),
    );
    stall(&f, "drainw");
    let (clone, data) = second_host(&f);
    let deadline = deadline_in(20);
    let drain = spawn_drain(&f, &["--deadline", &deadline]);
    wait_ready(&f, "drainw");
    let passed = format!("SELECT now() > '{deadline}'::timestamptz + interval '1 second'");
    wait_for(&f, &passed, 60);
    let worker = faked_worker(&f, "-2h", &clone, &data);
    wait_for(
        &f,
        "SELECT count(*) = 2 FROM run_items WHERE outcome = 'deadline'",
        60,
    );
    release(&f.agents, "drainw");
    let w = finish(worker, "worker (-2h)");
    let d = finish(drain, "drain");
    assert!(
        text(&w).contains("behind the ledger server's"),
        "the worker is told its skew: {}",
        text(&w)
    );
    assert_eq!(
        f.db.sql(&format!(
            "SELECT count(*) FROM agent_calls WHERE role = 'writer' AND started_at >= '{deadline}'"
        )),
        "0",
        "no writer started after the deadline"
    );
    assert_eq!(
        f.db.sql("SELECT count(*) FROM agent_calls WHERE role = 'writer'"),
        "1",
        "only the drain's item, begun before the deadline, ran"
    );
    assert_eq!(f.report()["status"], "stopped_deadline", "{}", text(&d));
}

/// PostgreSQL restarted (a private cluster, stopped and started) while the
/// drain's writer works: the drain takes its lock back, a second host's
/// `drain` is refused meanwhile, and each item runs once.
#[tokio::test(flavor = "multi_thread")]
async fn a_database_restart_during_the_writer_lets_no_second_drain_in() {
    use nightshift::ledger::embedded::{self, Cluster};
    let (mut f, gh) = with_github().await;
    let pg = tempfile::Builder::new()
        .prefix("ns-clock-")
        .tempdir()
        .unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(pg.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let cluster = Cluster::resolve(&pg.path().join("pg"), &embedded::process_env)
        .await
        .expect("the PostgreSQL server binaries");
    cluster.start().await.expect("the private cluster starts");
    let url = format!(
        "postgres://{}@localhost/{}?host={}&port={}",
        embedded::SUPERUSER,
        embedded::DB_NAME,
        cluster.socket_dir.display(),
        embedded::PORT
    );
    f.extra_env
        .push(("NIGHTSHIFT_DATABASE_URL".into(), url.clone()));
    let mut bg = drain_until_the_writer_stalls(&f);
    cluster.stop().await.expect("the cluster stops");
    cluster.start().await.expect("the cluster starts again");
    let other_data = f.dir.path().join("other-data");
    let out = f
        .cmd()
        .env("NIGHTSHIFT_DATA_DIR", &other_data)
        .args(["drain", "--deadline", &common::far_deadline()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        text(&out).contains("another nightshift run holds the lock"),
        "{}",
        text(&out)
    );
    release(&f.agents, "writer");
    let status = bg.wait(Duration::from_secs(90));
    assert_eq!(status.code(), Some(0), "{}", bg.output());
    let rep = f.report();
    assert_eq!(rep["status"], "completed", "{rep:#}");
    assert_eq!(outcomes(&rep), ["pr_opened", "pr_opened"]);
    let calls = sql_on(
        &cluster,
        "SELECT count(*) FROM agent_calls WHERE role = 'writer'",
    )
    .await;
    assert_eq!(calls, 2, "each item's writer ran once");
    assert_eq!(sql_on(&cluster, "SELECT count(*) FROM runs").await, 1);
    one_pr_per_item(&f, &gh, 2);
    let _ = cluster.stop().await;
}

/// A count from the private cluster's ledger.
async fn sql_on(cluster: &nightshift::ledger::embedded::Cluster, q: &str) -> i64 {
    use sqlx::Connection as _;
    let mut c = sqlx::postgres::PgConnection::connect_with(&cluster.connect_options())
        .await
        .unwrap();
    sqlx::query_scalar(sqlx::AssertSqlSafe(q.to_string()))
        .fetch_one(&mut c)
        .await
        .unwrap()
}

/// The ledger goes away for 30 s (issue 22) with a drain and a `worker` both
/// mid-item: both wait for it and go on (neither reaches for the
/// repository lock it does not hold), and the run ends `completed` with
/// one PR per item.
#[tokio::test(flavor = "multi_thread")]
async fn a_drain_and_a_worker_both_go_on_after_an_outage() {
    let (f, gh) = words(4, 3, "").start().await.split();
    let (clone, data) = second_host(&f);
    let drain = spawn_drain(&f, &[]);
    wait_for(&f, "SELECT count(*) FROM claims", 30);
    share_key(&f, &data);
    let worker = f
        .cmd()
        .current_dir(&clone)
        .env("NIGHTSHIFT_DATA_DIR", &data)
        .arg("worker")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(
        &f,
        "SELECT count(DISTINCT split_part(worker, ':', 2)) = 2 FROM claims WHERE ended_at IS NULL",
        30,
    );
    db_down(&f);
    std::thread::sleep(Duration::from_secs(30));
    db_up(&f);
    let w = finish(worker, "worker");
    let d = finish(drain, "drain");
    assert_eq!(d.status.code(), Some(0), "{}", text(&d));
    assert_eq!(w.status.code(), Some(0), "{}", text(&w));
    assert!(
        text(&w).contains("the ledger answers again"),
        "{}",
        text(&w)
    );
    assert_eq!(f.report()["status"], "completed");
    assert_eq!(gh.prs().len(), 4, "one PR per item");
    assert!(claims_per_item(&f).iter().all(|(_, n)| *n == 1));
}

/// A drain killed mid-item leaves its claim open; the next drain, which
/// finds the run dead and resumes it, closes that claim.
#[test]
fn the_crashed_run_s_open_claim_is_closed_on_resume() {
    let f = Fixture::new();
    two_items(&f);
    let mut bg = drain_until_the_writer_stalls(&f);
    bg.signal(nix::sys::signal::Signal::SIGKILL);
    let _ = bg.wait(Duration::from_secs(15));
    kill_stalled(&f.agents, "writer");
    let old = f.db.sql("SELECT id FROM runs");
    assert_eq!(
        f.db.sql("SELECT count(*) FROM claims WHERE ended_at IS NULL"),
        "1"
    );
    let out = f.run(&["drain"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(
        f.db.sql(&format!(
            "SELECT count(*) FROM claims WHERE run_id = '{old}' AND ended_at IS NULL"
        )),
        "0",
        "the crashed run's claim was closed"
    );
    assert_eq!(
        f.db.sql(&format!(
            "SELECT end_reason FROM claims WHERE run_id = '{old}'"
        )),
        "lost"
    );
}

/// A notification `command` that timed out may have delivered its message:
/// it is not run again, the failure says so, and the daemon it started is
/// gone once it ended.
#[test]
fn a_notify_command_that_timed_out_is_not_run_again() {
    let mut f = Fixture::new();
    let marker = f.agents.join("notified");
    let daemon = f.agents.join("daemon.pid");
    let cmd = f.agent(
        "notify.sh",
        &format!(
            "#!/bin/sh\necho run >> {m}\nsleep 300 &\necho $! > {d}\nsleep 300\n",
            m = marker.display(),
            d = daemon.display()
        ),
    );
    two_items(&f);
    let config = std::fs::read_to_string(f.repo.join(".nightshift/config.toml")).unwrap();
    f.config(&format!("{config}\n[notify]\ncommand = [\"{cmd}\"]\n"));
    f.extra_env
        .push(("NIGHTSHIFT_NOTIFY_TIMEOUT_MS".into(), "1500".into()));
    f.extra_env
        .push(("NIGHTSHIFT_NOTIFY_BACKOFF_MS".into(), "10".into()));
    let out = f.run(&["notify", "--test"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("may have delivered the message, so it was not run again"),
        "{}",
        text(&out)
    );
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap().lines().count(),
        1,
        "run once"
    );
    let pid = common::bg::read_pid(&daemon);
    assert!(
        common::bg::process_gone(pid),
        "the daemon it started outlived it"
    );
}

/// `doctor` compares this host's clock with the ledger server's: agreed
/// here, and a warning naming both times and the offset under a clock two
/// hours ahead.
#[test]
fn doctor_names_a_host_clock_that_is_off_the_servers() {
    let f = Fixture::new();
    two_items(&f);
    let line = |out: &std::process::Output| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find(|l| l.contains(" clock "))
            .unwrap_or_default()
            .to_string()
    };
    let ok = line(&f.run(&["doctor"]));
    assert!(ok.starts_with("ok   clock"), "{ok}");
    let off = line(&faked(&f, "+2h").arg("doctor").output().unwrap());
    assert!(
        off.starts_with("warn clock") && off.contains("2h 0m ahead of the ledger server's"),
        "{off}"
    );
}

/// An approval's 24 hours are the ledger server's (issue 22, one clock):
/// `approve` on a host whose clock is two hours behind records its
/// creation and expiry by the server's clock, and `status` judges a
/// crashed run's resume by the server's clock too (its `now`).
#[test]
fn an_approval_given_on_a_host_two_hours_behind_keeps_the_servers_time() {
    let f = Fixture::new();
    two_items(&f);
    let sha = f.plan_sha();
    let out = faked(&f, "-2h").args(["approve", &sha]).output().unwrap();
    assert_ok(&out, "approve under a clock two hours behind");
    let off = f.db.sql(
        "SELECT round(extract(epoch FROM now() - created_at)) || ' ' || \
                round(extract(epoch FROM expires_at - created_at) / 3600) FROM approvals",
    );
    let (age, hours) = off.split_once(' ').unwrap();
    let age: f64 = age.parse().unwrap();
    assert!(
        (0.0..60.0).contains(&age),
        "the approval was created {age} s before the server's now (host clock: -2h)"
    );
    assert_eq!(hours, "24");
    let status = faked(&f, "-2h")
        .args(["status", "--json"])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let now: chrono::DateTime<chrono::Utc> = json["now"].as_str().unwrap().parse().unwrap();
    let drift = (chrono::Utc::now() - now).num_seconds().abs();
    assert!(
        drift < 60,
        "status's now is {drift} s off the server's: {json}"
    );
}
