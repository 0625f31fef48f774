//! Ledger tests against real PostgreSQL: the machine's server (DATABASE_URL, else
//! postgres://postgres@127.0.0.1:5432/postgres) with one fresh database per test (a clone of the migrated template, or an empty one
//! for the migrations' own test: tests/it/common/db.rs), and
//! private clusters started with the system's initdb/pg_ctl in temp directories.

use std::ffi::OsString;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nightshift::ledger::embedded::{self, Cluster, EmbeddedError};
use nightshift::ledger::{DbSource, DbUrl, HolderInfo, Ledger, LedgerError, RepoLockAttempt};

use crate::common::db::Db;

// ---------- the machine's server, one database per test ----------

async fn insert_plan(ledger: &Ledger, sha: &str) {
    sqlx::query("INSERT INTO plans (sha, repo, backlog_path, backlog_sha, json) VALUES ($1, 'o/r', 'NEXT.md', 'b', '{}')")
        .bind(sha)
        .execute(&ledger.pool)
        .await
        .unwrap();
}

async fn insert_approval(ledger: &Ledger, plan_sha: &str) -> uuid::Uuid {
    let id = uuid::Uuid::new_v4();
    sqlx::query(
        "INSERT INTO approvals (id, plan_sha, repo, approved_by, expires_at) \
         VALUES ($1, $2, 'o/r', 'me', now() + interval '24 hours')",
    )
    .bind(id)
    .bind(plan_sha)
    .execute(&ledger.pool)
    .await
    .unwrap();
    id
}

async fn insert_run(ledger: &Ledger, plan_sha: &str, approval: Option<uuid::Uuid>) -> uuid::Uuid {
    let id = uuid::Uuid::new_v4();
    sqlx::query(
        "INSERT INTO runs (id, repo, kind, plan_sha, approval_id, status, timezone, host, pid) \
         VALUES ($1, 'o/r', 'drain', $2, $3, 'running', 'Asia/Taipei', 'h', 1)",
    )
    .bind(id)
    .bind(plan_sha)
    .bind(approval)
    .execute(&ledger.pool)
    .await
    .unwrap();
    id
}

fn db_error_message(err: sqlx::Error) -> (String, String) {
    match err {
        sqlx::Error::Database(e) => (
            e.code().unwrap_or_default().into_owned(),
            e.message().to_string(),
        ),
        other => panic!("expected a database error, got {other:?}"),
    }
}

#[tokio::test]
async fn migrations_apply_once_even_with_concurrent_first_connects() {
    let db = Db::empty();
    let src = db.source();
    // Four first runs at once: sqlx serialises them on its advisory lock.
    let results = connect_concurrently(&src, 4).await;
    for r in &results {
        assert!(r.is_ok(), "{:?}", r.as_ref().err());
    }
    // And again, against an already-migrated database.
    let ledger = Ledger::connect(&src).await.unwrap();
    assert_each_migration_once(
        &ledger,
        "SELECT count(*) FROM _sqlx_migrations WHERE success",
    )
    .await;
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1",
    )
    .fetch_all(&ledger.pool)
    .await
    .unwrap();
    for want in [
        "agent_calls",
        "approval_uses",
        "approvals",
        "contracts",
        "events",
        "findings",
        "gate_runs",
        "limit_sleeps",
        "plan_contracts",
        "plans",
        "proofs",
        "pull_requests",
        "repo_locks",
        "reviews",
        "rounds",
        "run_items",
        "runs",
    ] {
        assert!(
            tables.iter().any(|t| t == want),
            "missing table {want} in {tables:?}"
        );
    }
}

/// Connects `n` times concurrently, as `n` nightshift processes starting together.
async fn connect_concurrently(src: &DbSource, n: usize) -> Vec<Result<Ledger, LedgerError>> {
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let src = src.clone();
            tokio::spawn(async move { Ledger::connect(&src).await })
        })
        .collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.expect("connect task panicked"));
    }
    out
}

#[tokio::test]
async fn approvals_reject_update_delete_truncate_and_need_exactly_one_target() {
    let db = Db::create();
    let ledger = Ledger::connect(&db.source()).await.unwrap();
    insert_plan(&ledger, "p1").await;
    let id = insert_approval(&ledger, "p1").await;

    let update =
        sqlx::query("UPDATE approvals SET expires_at = now() + interval '10 years' WHERE id = $1")
            .bind(id)
            .execute(&ledger.pool)
            .await;
    let (code, msg) = db_error_message(update.unwrap_err());
    assert_eq!(code, "23000");
    assert!(msg.contains("UPDATE on approvals rejected"), "{msg}");

    let delete = sqlx::query("DELETE FROM approvals WHERE id = $1")
        .bind(id)
        .execute(&ledger.pool)
        .await;
    let (_, msg) = db_error_message(delete.unwrap_err());
    assert!(msg.contains("DELETE on approvals rejected"), "{msg}");

    let truncate = sqlx::query("TRUNCATE approvals CASCADE")
        .execute(&ledger.pool)
        .await;
    let (_, msg) = db_error_message(truncate.unwrap_err());
    assert!(msg.contains("TRUNCATE on approvals rejected"), "{msg}");

    let still: i64 = sqlx::query_scalar("SELECT count(*) FROM approvals")
        .fetch_one(&ledger.pool)
        .await
        .unwrap();
    assert_eq!(still, 1);

    for (plan, contract) in [(None::<&str>, None::<&str>), (Some("p1"), Some("c1"))] {
        if contract.is_some() {
            sqlx::query("INSERT INTO contracts (sha, item_key, title, json) VALUES ('c1', 'k', 't', '{}') ON CONFLICT DO NOTHING")
                .execute(&ledger.pool)
                .await
                .unwrap();
        }
        let bad = sqlx::query(
            "INSERT INTO approvals (id, plan_sha, contract_sha, repo, approved_by, expires_at) \
             VALUES ($1, $2, $3, 'o/r', 'me', now() + interval '1 day')",
        )
        .bind(uuid::Uuid::new_v4())
        .bind(plan)
        .bind(contract)
        .execute(&ledger.pool)
        .await;
        let (code, msg) = db_error_message(bad.unwrap_err());
        assert_eq!(code, "23514", "check violation expected: {msg}");
        assert!(msg.contains("approvals_exactly_one_target"), "{msg}");
    }
}

#[tokio::test]
async fn an_approval_is_consumed_once() {
    let db = Db::create();
    let ledger = Ledger::connect(&db.source()).await.unwrap();
    insert_plan(&ledger, "p1").await;
    let approval = insert_approval(&ledger, "p1").await;
    let first_run = insert_run(&ledger, "p1", Some(approval)).await;
    let second_run = insert_run(&ledger, "p1", Some(approval)).await;
    let use_it = |run| {
        sqlx::query("INSERT INTO approval_uses (approval_id, run_id) VALUES ($1, $2)")
            .bind(approval)
            .bind(run)
            .execute(&ledger.pool)
    };
    use_it(first_run)
        .await
        .expect("first use consumes the approval");
    let (code, _) = db_error_message(use_it(second_run).await.unwrap_err());
    assert_eq!(code, "23505", "second use must be a unique violation");
}

#[tokio::test]
async fn events_are_append_only_with_server_sequence() {
    let db = Db::create();
    let ledger = Ledger::connect(&db.source()).await.unwrap();
    let mut seqs = Vec::new();
    for kind in ["run_started", "item_started"] {
        let seq: i64 = sqlx::query_scalar(
            "INSERT INTO events (kind, data) VALUES ($1, '{\"x\":1}') RETURNING seq",
        )
        .bind(kind)
        .fetch_one(&ledger.pool)
        .await
        .unwrap();
        seqs.push(seq);
    }
    assert!(seqs[1] > seqs[0], "{seqs:?}");
    let update = sqlx::query("UPDATE events SET kind = 'forged'")
        .execute(&ledger.pool)
        .await;
    let (_, msg) = db_error_message(update.unwrap_err());
    assert!(msg.contains("UPDATE on events rejected"), "{msg}");
    let delete = sqlx::query("DELETE FROM events")
        .execute(&ledger.pool)
        .await;
    let (_, msg) = db_error_message(delete.unwrap_err());
    assert!(msg.contains("DELETE on events rejected"), "{msg}");
    let truncate = sqlx::query("TRUNCATE events").execute(&ledger.pool).await;
    assert!(truncate.is_err());
    let kinds: Vec<String> = sqlx::query_scalar("SELECT kind FROM events ORDER BY seq")
        .fetch_all(&ledger.pool)
        .await
        .unwrap();
    assert_eq!(kinds, ["run_started", "item_started"]);
}

#[tokio::test]
async fn repo_lock_refuses_a_second_holder_and_names_the_first() {
    let db = Db::create();
    // Two ledgers stand for two nightshift processes.
    let first = Ledger::connect(&db.source()).await.unwrap();
    let second = Ledger::connect(&db.source()).await.unwrap();
    let holder = HolderInfo {
        host: "night-box".into(),
        pid: 4242,
        started_at: chrono::Utc::now(),
    };
    let other = HolderInfo {
        host: "other-box".into(),
        pid: 7,
        started_at: chrono::Utc::now(),
    };

    let RepoLockAttempt::Acquired(mut guard) = first
        .try_lock_repo("github.com/o/r", &holder)
        .await
        .unwrap()
    else {
        panic!("first attempt must acquire");
    };
    assert!(guard.still_held().await.unwrap());
    assert_eq!(guard.repo(), "github.com/o/r");

    // The lock is per connection: the same process's pool cannot take it either.
    for ledger in [&second, &first] {
        match ledger
            .try_lock_repo("github.com/o/r", &other)
            .await
            .unwrap()
        {
            RepoLockAttempt::Held { holder: Some(h) } => {
                assert_eq!(h.host, "night-box");
                assert_eq!(h.pid, 4242);
                assert_eq!(
                    h.started_at.timestamp_micros(),
                    holder.started_at.timestamp_micros()
                );
            }
            other => panic!("expected Held with holder info, got {other:?}"),
        }
    }
    // Another repo is independent.
    let RepoLockAttempt::Acquired(other_repo) = second
        .try_lock_repo("github.com/o/other", &other)
        .await
        .unwrap()
    else {
        panic!("a different repo must not be blocked");
    };

    drop(guard);
    // The server releases the lock once it sees the dropped connection close.
    let deadline = Instant::now() + Duration::from_secs(5);
    let again = loop {
        match second
            .try_lock_repo("github.com/o/r", &other)
            .await
            .unwrap()
        {
            RepoLockAttempt::Acquired(g) => break g,
            RepoLockAttempt::Held { .. } if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            RepoLockAttempt::Held { holder } => {
                panic!("lock not freed after drop; holder {holder:?}")
            }
        }
    };
    // Now the recorded holder is the new one.
    match first
        .try_lock_repo("github.com/o/r", &holder)
        .await
        .unwrap()
    {
        RepoLockAttempt::Held { holder: Some(h) } => {
            assert_eq!((h.host.as_str(), h.pid), ("other-box", 7))
        }
        other => panic!("expected Held by other-box, got {other:?}"),
    }
    // An explicit release frees it at once.
    again.release().await.unwrap();
    let RepoLockAttempt::Acquired(last) = first
        .try_lock_repo("github.com/o/r", &holder)
        .await
        .unwrap()
    else {
        panic!("release must free the lock immediately");
    };
    last.release().await.unwrap();
    other_repo.release().await.unwrap();
}

#[tokio::test]
async fn a_dead_server_is_a_prompt_error_naming_the_source() {
    let src = DbSource::Url {
        url: DbUrl::new("postgres://postgres:hunter2@127.0.0.1:1/ledger"),
        var: "NIGHTSHIFT_DATABASE_URL",
    };
    let started = Instant::now();
    let err = Ledger::connect_with_timeout(&src, Duration::from_secs(2))
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    assert!(matches!(err, LedgerError::Connect { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("127.0.0.1:1/ledger (from NIGHTSHIFT_DATABASE_URL)"),
        "{msg}"
    );
    assert!(!msg.contains("hunter2"), "{msg}");

    let bad = DbSource::Url {
        url: DbUrl::new("not a url"),
        var: "DATABASE_URL",
    };
    let err = Ledger::connect(&bad).await.unwrap_err();
    assert!(!format!("{err:?}").contains("not a url"), "{err:?}");
    assert!(
        matches!(
            err,
            LedgerError::BadUrl {
                var: "DATABASE_URL",
                ..
            }
        ),
        "{err:?}"
    );
}

// ---------- the embedded private cluster ----------

/// A temp directory the server account can enter (as root the server runs as another
/// account; the mode is set explicitly rather than left to the umask).
fn enterable_tempdir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("ns-ledger-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// Stops a cluster's server however the test ended (fast shutdown by signal, as
/// `pg_ctl stop -m fast` does), and removes its short socket directory.
struct StopOnDrop {
    data_dir: PathBuf,
    socket_dir: PathBuf,
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Some(pid) = postmaster_pid(&self.data_dir) {
            let pid = nix::unistd::Pid::from_raw(pid as i32);
            if nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).is_ok() {
                let deadline = Instant::now() + Duration::from_secs(15);
                while Instant::now() < deadline && process_alive(pid.as_raw() as u32) {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
        if self.socket_dir != self.data_dir {
            let _ = std::fs::remove_dir_all(&self.socket_dir);
        }
    }
}

fn postmaster_pid(data_dir: &Path) -> Option<u32> {
    std::fs::read_to_string(data_dir.join("postmaster.pid"))
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}

/// Alive and not a zombie.
fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

async fn cluster_in(data_dir: &Path) -> (Cluster, StopOnDrop) {
    let cluster = Cluster::resolve(data_dir, &embedded::process_env)
        .await
        .expect("resolve cluster");
    let guard = StopOnDrop {
        data_dir: cluster.data_dir.clone(),
        socket_dir: cluster.socket_dir.clone(),
    };
    (cluster, guard)
}

async fn whoami(ledger: &Ledger) -> (String, String) {
    sqlx::query_as("SELECT current_user::text, current_database()::text")
        .fetch_one(&ledger.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn embedded_starts_from_nothing_and_is_reused() {
    let root = enterable_tempdir();
    let data_dir = root.path().join("nightshift").join("pg");
    let (cluster, _stop) = cluster_in(&data_dir).await;
    let before = cluster.status().await.unwrap();
    assert!(
        !before.initialized && !before.running && before.pid.is_none(),
        "{before:?}"
    );

    // Two processes starting at once from nothing: the flock serialises them.
    let src = DbSource::Embedded {
        data_dir: data_dir.clone(),
    };
    let both = connect_concurrently(&src, 2).await;
    let mut ledgers = Vec::new();
    for r in both {
        ledgers.push(r.unwrap_or_else(|e| panic!("embedded connect failed: {e}")));
    }
    let status = cluster.status().await.unwrap();
    assert!(status.initialized && status.running, "{status:?}");
    let pid = status.pid.unwrap();
    assert_eq!(
        status.socket_dir, data_dir,
        "a short data dir holds its own socket"
    );
    assert_eq!(
        whoami(&ledgers[0]).await,
        ("nightshift".to_string(), "nightshift".to_string())
    );

    let meta = std::fs::metadata(&data_dir).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o700, "data dir must be private");
    if embedded::running_as_root() {
        // PostgreSQL refuses root: the cluster and its server belong to an unprivileged account.
        let account = cluster
            .account
            .clone()
            .expect("an account is chosen when root");
        assert_ne!(account.uid, 0);
        assert_eq!(status.account.as_deref(), Some(account.name.as_str()));
        assert_eq!(meta.uid(), account.uid);
        let proc_status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let uid_line = proc_status.lines().find(|l| l.starts_with("Uid:")).unwrap();
        assert!(
            uid_line
                .split_whitespace()
                .skip(1)
                .all(|u| u == account.uid.to_string()),
            "{uid_line}"
        );
    }
    // The long-lived server does not inherit our environment (tokens would leak there).
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    assert!(
        !String::from_utf8_lossy(&environ).contains("CARGO"),
        "server inherited the environment"
    );
    // It listens on the socket only.
    let listen: String = sqlx::query_scalar("SHOW listen_addresses")
        .fetch_one(&ledgers[0].pool)
        .await
        .unwrap();
    assert_eq!(listen, "");

    // A later run reuses the same server.
    drop(ledgers);
    let again = Ledger::connect(&src).await.unwrap();
    assert_eq!(cluster.status().await.unwrap().pid, Some(pid));
    assert_each_migration_once(&again, "SELECT count(*) FROM _sqlx_migrations").await;
    again.pool.close().await;

    let stopped = cluster.stop().await.unwrap();
    assert!(
        !stopped.running && stopped.pid.is_none() && stopped.initialized,
        "{stopped:?}"
    );
    // pg_ctl returns when the pid file is gone, a moment before the process exits.
    let deadline = Instant::now() + Duration::from_secs(5);
    while process_alive(pid) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !process_alive(pid),
        "postmaster {pid} still alive after stop"
    );
    // Stopping a stopped cluster is fine.
    assert!(!cluster.stop().await.unwrap().running);
}

#[tokio::test]
async fn embedded_recovers_from_a_sigkilled_postmaster() {
    let root = enterable_tempdir();
    let data_dir = root.path().join("pg");
    let (cluster, _stop) = cluster_in(&data_dir).await;
    let first = cluster.start().await.unwrap();
    let pid = first.pid.unwrap();
    let src = DbSource::Embedded {
        data_dir: data_dir.clone(),
    };
    let ledger = Ledger::connect(&src).await.unwrap();
    sqlx::query("INSERT INTO events (kind) VALUES ('before_crash')")
        .execute(&ledger.pool)
        .await
        .unwrap();
    ledger.pool.close().await;

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while process_alive(pid) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!process_alive(pid));
    // Nothing removed: the stale pid file is still there.
    assert_eq!(
        postmaster_pid(&data_dir),
        Some(pid),
        "postmaster.pid must be stale, not gone"
    );
    assert!(!cluster.status().await.unwrap().running);

    let ledger = Ledger::connect(&src)
        .await
        .unwrap_or_else(|e| panic!("reconnect after SIGKILL failed: {e}"));
    let kinds: Vec<String> = sqlx::query_scalar("SELECT kind FROM events")
        .fetch_all(&ledger.pool)
        .await
        .unwrap();
    assert_eq!(
        kinds,
        ["before_crash"],
        "committed data survives crash recovery"
    );
    let after = cluster.status().await.unwrap();
    assert!(after.running && after.pid != Some(pid), "{after:?}");
    ledger.pool.close().await;
    assert!(!cluster.stop().await.unwrap().running);
}

#[tokio::test]
async fn embedded_deep_data_dir_uses_a_short_private_socket_dir() {
    let root = enterable_tempdir();
    let data_dir = root
        .path()
        .join("a".repeat(60))
        .join("b".repeat(60))
        .join("pg");
    let (cluster, _stop) = cluster_in(&data_dir).await;
    let socket = cluster.socket_path();
    assert!(
        socket.as_os_str().len() <= embedded::SOCKET_PATH_MAX,
        "{}",
        socket.display()
    );
    assert!(
        cluster.socket_dir.starts_with("/tmp"),
        "{}",
        cluster.socket_dir.display()
    );
    assert!(
        cluster
            .socket_dir
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(&format!("nightshift-{}-", nix::unistd::geteuid())),
        "{}",
        cluster.socket_dir.display()
    );

    let status = cluster.start().await.unwrap();
    assert!(status.running);
    let meta = std::fs::metadata(&cluster.socket_dir).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o700, "socket dir must be private");
    if let Some(account) = &cluster.account {
        assert_eq!(
            meta.uid(),
            account.uid,
            "socket dir belongs to the server account"
        );
    }
    let ledger = Ledger::connect(&DbSource::Embedded {
        data_dir: data_dir.clone(),
    })
    .await
    .unwrap();
    assert_eq!(whoami(&ledger).await.1, "nightshift");
    ledger.pool.close().await;

    let stopped = cluster.stop().await.unwrap();
    assert!(!stopped.running);
    assert!(
        !cluster.socket_dir.exists(),
        "empty short socket dir is removed on stop"
    );
}

#[tokio::test]
async fn embedded_missing_binaries_say_what_to_install() {
    let empty = tempfile::tempdir().unwrap();
    let bindir = empty.path().as_os_str().to_owned();
    let env = move |name: &str| -> Option<OsString> {
        (name == embedded::BINDIR_VAR).then(|| bindir.clone())
    };
    let err = Cluster::resolve(&empty.path().join("pg"), &env)
        .await
        .unwrap_err();
    assert!(
        matches!(err, EmbeddedError::BinariesMissing { .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    for part in [
        "PostgreSQL server binaries (initdb, pg_ctl) not found",
        "sudo apt-get install postgresql  (Debian/Ubuntu)",
        "or set NIGHTSHIFT_DATABASE_URL",
        &empty.path().display().to_string(),
    ] {
        assert!(msg.contains(part), "missing {part:?} in: {msg}");
    }
    // Without the override the machine's binaries are found.
    let found = embedded::find_bindir(&embedded::process_env).await.unwrap();
    assert!(found.join("initdb").is_file() && found.join("pg_ctl").is_file());
}

#[tokio::test]
async fn embedded_as_root_refuses_a_data_dir_the_server_account_cannot_enter() {
    if !embedded::running_as_root() {
        return;
    }
    let private = tempfile::tempdir().unwrap();
    std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let (cluster, _stop) = cluster_in(&private.path().join("nightshift").join("pg")).await;
    let err = cluster.start().await.unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, EmbeddedError::Unreachable { .. }), "{err:?}");
    assert!(
        msg.contains(&private.path().display().to_string()) && msg.contains("NIGHTSHIFT_DATA_DIR"),
        "{msg}"
    );
}

/// Asserts the ledger's migration log (`count`: a query counting its rows)
/// holds each migration file exactly once.
async fn assert_each_migration_once(ledger: &Ledger, count: &'static str) {
    let applied: i64 = sqlx::query_scalar(count)
        .fetch_one(&ledger.pool)
        .await
        .unwrap();
    assert_eq!(
        applied,
        migration_files(),
        "each migration applied exactly once"
    );
}

/// Number of migration files shipped in `migrations/`.
fn migration_files() -> i64 {
    std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "sql")
        })
        .count() as i64
}

// ---------- the work queue: claims, leases, fencing, account pauses ----------

use nightshift::queue::{self, ClaimEnd, FenceError, QueuedItem, WorkerId};

/// A running run (plan `pq`) with `n` items `key00`, `key01`, … queued.
pub(crate) async fn queued_run(ledger: &Ledger, n: i32) -> uuid::Uuid {
    insert_plan(ledger, "pq").await;
    let run = insert_run(ledger, "pq", None).await;
    let items: Vec<QueuedItem> = (0..n)
        .map(|i| QueuedItem {
            position: i,
            item_key: format!("key{i:02}"),
            contract_sha: format!("c{i}"),
        })
        .collect();
    queue::enqueue(&ledger.pool, run, &items).await.unwrap();
    // Enqueuing again (a resumed drain) changes nothing.
    queue::enqueue(&ledger.pool, run, &items).await.unwrap();
    run
}

/// Worker `n` claims the next item of `run` with a lease of `lease_s`
/// seconds (`None`: no item is free).
async fn claim(pool: &sqlx::PgPool, run: uuid::Uuid, n: u32, lease_s: u64) -> Option<queue::Claim> {
    let lease = Duration::from_secs(lease_s);
    queue::claim(pool, run, &worker(n), lease).await.unwrap()
}

fn worker(n: u32) -> WorkerId {
    WorkerId {
        host: "host-a".into(),
        pid: 100,
        n,
    }
}

#[tokio::test]
async fn eight_workers_claim_twenty_items_each_exactly_once_in_backlog_order() {
    let db = Db::create();
    let ledger = Ledger::connect(&db.source()).await.unwrap();
    let run = queued_run(&ledger, 20).await;
    let tasks: Vec<_> = (1..=8)
        .map(|n| {
            let pool = ledger.pool.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                while let Some(c) = queue::claim(&pool, run, &worker(n), Duration::from_secs(60))
                    .await
                    .unwrap()
                {
                    got.push(c.position);
                    c.end(&pool, ClaimEnd::Finished).await.unwrap();
                }
                got
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        let got = t.await.unwrap();
        // Each worker sees its items in backlog order.
        assert!(got.windows(2).all(|w| w[0] < w[1]), "{got:?}");
        all.extend(got);
    }
    all.sort();
    assert_eq!(all, (0..20).collect::<Vec<_>>(), "each item exactly once");
    assert_eq!(queue::pending(&ledger.pool, run).await.unwrap(), 0);
}

/// Sixteen workers claiming at once, none ending its claim: each takes a
/// different item (a claim whose snapshot missed another's committed claim
/// of the same item races, and tries again), and a seventeenth finds
/// nothing. Five rounds, each in a fresh ledger.
#[tokio::test]
async fn sixteen_simultaneous_claims_take_sixteen_different_items() {
    for _ in 0..5 {
        let db = Db::create();
        let ledger = Ledger::connect(&db.source()).await.unwrap();
        // A connection for each worker, opened before they start.
        let pool = sqlx::postgres::PgPoolOptions::new()
            .min_connections(16)
            .max_connections(16)
            .connect(&db.url)
            .await
            .unwrap();
        let run = queued_run(&ledger, 16).await;
        let start = std::sync::Arc::new(tokio::sync::Barrier::new(16));
        let tasks: Vec<_> = (1..=16)
            .map(|n| {
                let (pool, start) = (pool.clone(), start.clone());
                tokio::spawn(async move {
                    let line = queue::ClaimLine::default();
                    start.wait().await;
                    line.claim(&pool, run, &worker(n), Duration::from_secs(60))
                        .await
                        .unwrap()
                        .0
                        .map(|c| c.position)
                })
            })
            .collect();
        let mut got = Vec::new();
        for t in tasks {
            got.push(t.await.unwrap().expect("an item for every worker"));
        }
        got.sort();
        assert_eq!(got, (0..16).collect::<Vec<_>>(), "each item once");
        assert!(claim(&ledger.pool, run, 17, 60).await.is_none());
    }
}

#[tokio::test]
async fn the_workers_of_a_process_asking_at_once_are_answered_by_few_statements() {
    // Four processes (a claim line each) of eight workers, all asking at
    // once: every worker gets an item, each item once, and a statement
    // answers the workers then waiting on its line (issue 27: twenty
    // workers starting together waited for twenty round trips).
    let db = Db::create();
    let ledger = Ledger::connect(&db.source()).await.unwrap();
    let run = queued_run(&ledger, 32).await;
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(32));
    let lines: Vec<_> = (0..4)
        .map(|_| std::sync::Arc::new(queue::ClaimLine::default()))
        .collect();
    let tasks: Vec<_> = (0..32u32)
        .map(|i| {
            let (pool, start) = (ledger.pool.clone(), start.clone());
            let line = lines[(i / 8) as usize].clone();
            let mut who = worker(i % 8 + 1);
            who.pid = 100 + i / 8;
            tokio::spawn(async move {
                start.wait().await;
                let (claim, _) = line
                    .claim(&pool, run, &who, Duration::from_secs(60))
                    .await
                    .unwrap();
                let claim = claim.expect("an item for every worker");
                assert_eq!(claim.worker, who.to_string());
                claim.position
            })
        })
        .collect();
    let mut got = Vec::new();
    for t in tasks {
        got.push(t.await.unwrap());
    }
    got.sort();
    assert_eq!(got, (0..32).collect::<Vec<_>>(), "each item once");
    // Each line keeps a pooled connection: give them back.
    drop(lines);
    // Claims written by one statement share its transaction id. Fewer
    // statements than workers: one per worker is what the lines replaced.
    // How many fewer depends on the machine: two lines' statements that
    // overlap take rows from each other, and the workers left out ask
    // again (2 a line when they do not overlap; 20 seen on a loaded CI).
    let statements = db.sql("SELECT count(DISTINCT xmin::text) FROM claims");
    let statements: u32 = statements.parse().unwrap();
    assert!(
        (4..32).contains(&statements),
        "{statements} claim statements for 32 workers on 4 lines"
    );
    assert!(claim(&ledger.pool, run, 9, 60).await.is_none());
}

#[tokio::test]
async fn one_claim_statement_gives_each_worker_the_next_item_in_backlog_order() {
    let db = Db::create();
    let ledger = Ledger::connect(&db.source()).await.unwrap();
    let run = queued_run(&ledger, 3).await;
    let mut conn = ledger.pool.acquire().await.unwrap();
    let names = ["h:1:1", "h:1:2", "h:1:3", "h:1:4"];
    let who: Vec<_> = names
        .iter()
        .map(|name| nightshift::ledger::workers::WorkerName {
            name,
            host: "h",
            pid: 1,
        })
        .collect();
    let tries =
        nightshift::ledger::claims::claim_next(&mut conn, run, &who, Duration::from_secs(60))
            .await
            .unwrap();
    let got: Vec<String> = tries
        .iter()
        .map(|t| match t {
            nightshift::ledger::claims::ClaimTry::Claimed(c) => {
                format!("{} {} {}", c.worker, c.position, c.attempt)
            }
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(got, ["h:1:1 0 1", "h:1:2 1 1", "h:1:3 2 1", "Nothing"]);
    assert_eq!(db.sql("SELECT count(DISTINCT xmin::text) FROM claims"), "1");
}

#[tokio::test]
async fn an_expired_lease_is_taken_over_and_the_old_holder_is_fenced_out() {
    let db = Db::create();
    let ledger = Ledger::connect(&db.source()).await.unwrap();
    let pool = &ledger.pool;
    let run = queued_run(&ledger, 2).await;
    let first = claim(pool, run, 1, 1).await.unwrap();
    assert_eq!((first.position, first.attempt), (0, 1));
    // While the lease lives, the next worker gets the next item, not this one.
    let second = claim(pool, run, 2, 60).await.unwrap();
    assert_eq!(second.position, 1);
    // The first holder stops renewing (paused, partitioned) past its lease.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let taken = claim(pool, run, 3, 60).await.unwrap();
    assert_eq!((taken.position, taken.attempt), (0, 2), "a new attempt");
    assert!(taken.id > first.id, "the fencing token grows");
    // The old holder wakes: it can neither renew, nor write, nor finish.
    let renewed = queue::beat_process(pool, &[], &[first.id], Duration::from_secs(60))
        .await
        .unwrap();
    assert!(
        renewed.is_empty(),
        "a lost claim is not revived: {renewed:?}"
    );
    assert!(matches!(first.begin(pool).await, Err(FenceError::Lost(_))));
    assert!(!first.is_live(pool).await.unwrap());
    assert!(matches!(
        first.end(pool, ClaimEnd::Finished).await,
        Err(FenceError::Lost(_))
    ));
    assert_eq!(
        queue::pending(pool, run).await.unwrap(),
        2,
        "nothing was marked done by the loser"
    );
    // The new holder's fenced write commits.
    let mut tx = taken.begin(pool).await.unwrap();
    sqlx::query("INSERT INTO events (run_id, kind) VALUES ($1, 'fenced-write')")
        .bind(run)
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    taken.end(pool, ClaimEnd::Finished).await.unwrap();
    let attempts = queue::attempts(pool, run, "key00").await.unwrap();
    assert_eq!(
        attempts,
        vec![
            (1, "host-a:100:1".to_string(), Some("lost".to_string())),
            (2, "host-a:100:3".to_string(), Some("finished".to_string())),
        ]
    );
}

#[tokio::test]
async fn a_renewed_lease_keeps_the_item_and_a_released_item_goes_back_on_the_queue() {
    let db = Db::create();
    let ledger = Ledger::connect(&db.source()).await.unwrap();
    let pool = &ledger.pool;
    let run = queued_run(&ledger, 1).await;
    let c = claim(pool, run, 1, 1).await.unwrap();
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let renewed = queue::beat_process(pool, &[], &[c.id], Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(renewed, vec![c.id]);
    }
    assert!(
        claim(pool, run, 2, 1).await.is_none(),
        "a renewed claim is not taken over"
    );
    c.end(pool, ClaimEnd::Released).await.unwrap();
    let again = claim(pool, run, 2, 1).await.unwrap();
    assert_eq!((again.position, again.attempt), (0, 2));
}

#[tokio::test]
async fn a_fenced_write_blocks_a_takeover_until_it_commits() {
    let db = Db::create();
    let ledger = Ledger::connect(&db.source()).await.unwrap();
    let pool = &ledger.pool;
    let run = queued_run(&ledger, 1).await;
    let c = claim(pool, run, 1, 1).await.unwrap();
    let tx = c.begin(pool).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    // The lease passed while the write was in flight: the takeover waits for
    // the row, then takes the item over once the write committed.
    let p2 = pool.clone();
    let takeover =
        tokio::spawn(
            async move { queue::claim(&p2, run, &worker(2), Duration::from_secs(60)).await },
        );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !takeover.is_finished(),
        "the takeover waits for the fenced write"
    );
    tx.commit().await.unwrap();
    let taken = takeover.await.unwrap().unwrap().unwrap();
    assert_eq!(taken.attempt, 2);
}

#[tokio::test]
async fn an_account_pause_is_seen_by_every_worker_until_it_passes() {
    let db = Db::create();
    let ledger = Ledger::connect(&db.source()).await.unwrap();
    let pool = &ledger.pool;
    assert_eq!(
        queue::account_paused_until(pool, "claude").await.unwrap(),
        None
    );
    let until = chrono::Utc::now() + chrono::Duration::seconds(2);
    queue::pause_account(
        pool,
        "claude",
        until,
        None,
        &worker(1).to_string(),
        "You've hit your limit",
    )
    .await
    .unwrap();
    let seen = queue::account_paused_until(pool, "claude")
        .await
        .unwrap()
        .unwrap();
    assert!((seen - until).num_milliseconds().abs() < 5);
    assert_eq!(
        queue::account_paused_until(pool, "codex").await.unwrap(),
        None,
        "per account"
    );
    tokio::time::sleep(Duration::from_millis(2100)).await;
    assert_eq!(
        queue::account_paused_until(pool, "claude").await.unwrap(),
        None
    );
}

#[tokio::test]
async fn status_lists_live_workers_only() {
    let db = Db::create();
    let ledger = Ledger::connect(&db.source()).await.unwrap();
    let pool = &ledger.pool;
    let run = queued_run(&ledger, 1).await;
    queue::join(pool, run, &worker(1), Duration::from_secs(60))
        .await
        .unwrap();
    queue::join(pool, run, &worker(2), Duration::from_secs(60))
        .await
        .unwrap();
    let mut c = pool.acquire().await.unwrap();
    queue::doing(
        &mut c,
        "host-a:100:1",
        Some("key00"),
        Some(2),
        Some(nightshift::outcome::Phase::Gate),
    )
    .await
    .unwrap();
    drop(c);
    queue::leave(pool, &worker(2)).await.unwrap();
    let live = queue::live_workers(pool, run).await.unwrap();
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].id, "host-a:100:1");
    assert_eq!(live[0].phase.as_deref(), Some("gate"));
    assert_eq!(live[0].round, Some(2));
}
/// Migration 0006: the tend outcomes are allowed and others still refused;
/// `set_pr_head` records the pushed head that `open_prs` gives back; a
/// plan's tend card must name its PR.
#[tokio::test]
async fn tend_outcomes_heads_and_cards_are_kept() {
    use nightshift::ledger::prs;
    let db = Db::create();
    let ledger = Ledger::connect(&db.source()).await.unwrap();
    insert_plan(&ledger, "p").await;
    let run = insert_run(&ledger, "p", None).await;
    let item = |key: &str, outcome: &str| {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO run_items (run_id, item_key, contract_sha, item_index, title, outcome) VALUES ('{run}', '{key}', 'c', 1, 't', '{outcome}')"
        )))
        .execute(&ledger.pool)
    };
    item("a", "pr_updated").await.unwrap();
    item("b", "pr_left_alone").await.unwrap();
    item("c", "pr_opened").await.unwrap();
    let (code, _) = db_error_message(item("d", "tended").await.unwrap_err());
    assert_eq!(code, "23514", "check_violation");

    prs::upsert_pr(
        &ledger.pool,
        &prs::PrUpsert {
            repo: "o/r",
            key: "k",
            contract_sha: "c",
            run,
            branch: "nightshift/x-1",
            number: Some(7),
            url: Some("u"),
            state: nightshift::outcome::PrRecord::Open,
            body: "body",
        },
    )
    .await
    .unwrap();
    let rows = prs::open_prs(&ledger.pool, "o/r").await.unwrap();
    assert_eq!((rows.len(), rows[0].head_sha.clone()), (1, None));
    let sha = "0123456789abcdef0123456789abcdef01234567";
    prs::set_pr_head(&ledger.pool, "o/r", "k", "nightshift/x-1", sha)
        .await
        .unwrap();
    let rows = prs::open_prs(&ledger.pool, "o/r").await.unwrap();
    assert_eq!(rows[0].head_sha.as_deref(), Some(sha));
    assert!(rows[0].head_pushed_at.is_some());
    assert_eq!(rows[0].number, 7);

    sqlx::query(
        "INSERT INTO contracts (sha, item_key, title, json) VALUES ('t', 'k', 'tend', '{}')",
    )
    .execute(&ledger.pool)
    .await
    .unwrap();
    let err = sqlx::query("INSERT INTO plan_contracts (plan_sha, position, contract_sha, item_index, kind) VALUES ('p', 0, 't', 0, 'tend')")
        .execute(&ledger.pool)
        .await
        .unwrap_err();
    assert_eq!(db_error_message(err).0, "23514", "a tend card names its PR");
}

/// plan_contracts names only stored plans and contracts (checked once per
/// statement since migration 0012, not per row): an insert or update naming
/// a missing one is refused, and a plan or contract still named cannot be
/// deleted, renamed or truncated; one no longer named can be deleted.
#[tokio::test]
async fn plan_contracts_name_only_stored_plans_and_contracts() {
    let db = Db::create();
    let ledger = Ledger::connect(&db.source()).await.unwrap();
    insert_plan(&ledger, "p").await;
    for sha in ["c", "free"] {
        sqlx::query(
            "INSERT INTO contracts (sha, item_key, title, json) VALUES ($1, 'k', 't', '{}')",
        )
        .bind(sha)
        .execute(&ledger.pool)
        .await
        .unwrap();
    }
    let run = |sql: &'static str| sqlx::query(sql).execute(&ledger.pool);
    run("INSERT INTO plan_contracts (plan_sha, position, contract_sha, item_index) VALUES ('p', 0, 'c', 1)")
        .await
        .unwrap();
    for (sql, what) in [
        (
            "INSERT INTO plan_contracts (plan_sha, position, contract_sha, item_index) VALUES ('p', 1, 'missing', 2)",
            "a contract that is not stored",
        ),
        (
            "INSERT INTO plan_contracts (plan_sha, position, contract_sha, item_index) VALUES ('missing', 0, 'c', 1)",
            "a plan that is not stored",
        ),
        (
            "UPDATE plan_contracts SET contract_sha = 'missing'",
            "a contract that is not stored",
        ),
        (
            "DELETE FROM contracts WHERE sha = 'c'",
            "still names the row",
        ),
        ("UPDATE plans SET sha = 'q'", "still names the row"),
        (
            "TRUNCATE contracts CASCADE",
            "plan_contracts names its rows",
        ),
    ] {
        let (code, msg) = db_error_message(run(sql).await.unwrap_err());
        assert_eq!(code, "23503", "{sql}: {msg}");
        assert!(msg.contains(what), "{sql}: {msg}");
    }
    run("DELETE FROM contracts WHERE sha = 'free'")
        .await
        .unwrap();
    let kept: i64 =
        sqlx::query_scalar("SELECT count(*) FROM plan_contracts WHERE contract_sha = 'c'")
            .fetch_one(&ledger.pool)
            .await
            .unwrap();
    assert_eq!(kept, 1);
}

/// The report's tended PRs: a run item made under a tend card gives back
/// what the card asked, the head before and the head pushed since; a PR
/// left alone (no card) is listed with its reason.
#[tokio::test]
async fn tended_items_read_the_card_and_the_new_head() {
    use nightshift::ledger::prs;
    let db = Db::create();
    let ledger = Ledger::connect(&db.source()).await.unwrap();
    insert_plan(&ledger, "p").await;
    let run = insert_run(&ledger, "p", None).await;
    let old = "1111111111111111111111111111111111111111";
    let new = "2222222222222222222222222222222222222222";
    let card = serde_json::json!({"version": 1, "action": "changes_requested", "pr": 7, "branch": "nightshift/a-1", "head": old, "rounds": 3, "item": {},
        "comments": [{"kind": "line_comment", "author": "ana", "path": "a.rs", "line": 4, "body": "rename it", "at": "2026-12-01T08:00:00Z"}]});
    sqlx::query("INSERT INTO contracts (sha, item_key, title, json) VALUES ('card', 'a', 'tend PR #7: A', $1)")
        .bind(card)
        .execute(&ledger.pool)
        .await
        .unwrap();
    for (key, sha, outcome, pr, branch, reason) in [
        ("a", "card", "pr_updated", 7, "nightshift/a-1", None),
        (
            "b",
            "c",
            "pr_left_alone",
            8,
            "nightshift/b-2",
            Some("someone else pushed to the branch"),
        ),
        ("c", "c", "pr_opened", 9, "nightshift/c-3", None),
    ] {
        sqlx::query("INSERT INTO run_items (run_id, item_key, contract_sha, item_index, title, outcome, pr_number, branch, reason) VALUES ($1, $2, $3, 0, upper($2), $4, $5, $6, $7)")
            .bind(run).bind(key).bind(sha).bind(outcome).bind(pr as i64).bind(branch).bind(reason)
            .execute(&ledger.pool)
            .await
            .unwrap();
    }
    prs::upsert_pr(
        &ledger.pool,
        &prs::PrUpsert {
            repo: "o/r",
            key: "a",
            contract_sha: "c",
            run,
            branch: "nightshift/a-1",
            number: Some(7),
            url: None,
            state: nightshift::outcome::PrRecord::Open,
            body: "b",
        },
    )
    .await
    .unwrap();
    prs::set_pr_head(&ledger.pool, "o/r", "a", "nightshift/a-1", new)
        .await
        .unwrap();
    let t = nightshift::tend::tended_items(&ledger.pool, run)
        .await
        .unwrap();
    assert_eq!(t.len(), 2, "{t:#?}");
    assert_eq!(
        (t[0].pr, t[0].word(), t[0].action.as_deref()),
        (7, "pr_updated", Some("changes_requested"))
    );
    assert_eq!(
        (t[0].old_head.as_deref(), t[0].new_head.as_deref()),
        (Some(old), Some(new))
    );
    assert_eq!(
        (
            t[0].asked[0].path.as_deref(),
            t[0].asked[0].line,
            t[0].asked[0].body.as_str()
        ),
        (Some("a.rs"), Some(4), "rename it")
    );
    assert_eq!(
        (t[1].pr, t[1].word(), t[1].action.as_deref()),
        (8, "pr_left_alone", None)
    );
    assert_eq!(
        t[1].reason.as_deref(),
        Some("someone else pushed to the branch")
    );
    let text = nightshift::tend::report_section(&t);
    assert!(
        text.contains("pushed 111111111111 → 222222222222"),
        "{text}"
    );
}
