//! The ledger: nightshift's PostgreSQL database, the single source of truth for runs,
//! plans, contracts, approvals, items, rounds, agent calls, gates, reviews, proofs,
//! limit sleeps, PRs, findings and the append-only event log (docs/ledger.md).
//!
//! This module chooses the server (`NIGHTSHIFT_DATABASE_URL`, else `DATABASE_URL`, else
//! the embedded private cluster of [`embedded`]), connects with a bounded timeout,
//! applies the migrations under `migrations/` and holds the one-drain-per-repo advisory
//! lock. It does not know what the rows mean: typed reads and writes live in one module
//! per table family ([`plans`], [`approvals`], [`runs`], [`items`], [`rounds`], [`prs`],
//! [`tend`], [`limits`], [`events`], [`claims`], [`workers`]) and in the reads of
//! [`history`] and [`timeline`].

pub mod approvals;
pub mod board;
pub mod ci;
pub mod claims;
pub mod embedded;
pub mod events;
pub mod history;
pub mod items;
pub mod limits;
pub mod plans;
pub mod prs;
pub mod quota;
pub mod rounds;
pub mod runs;
pub mod tend;
mod text;
pub mod timeline;
pub mod workers;

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};

use embedded::{Cluster, EmbeddedError, EnvLookup};

/// Variable consulted first for the ledger's URL.
pub const NIGHTSHIFT_DATABASE_URL: &str = "NIGHTSHIFT_DATABASE_URL";
/// Variable consulted second for the ledger's URL.
pub const DATABASE_URL: &str = "DATABASE_URL";
/// How long connecting may take before it is an error (a dead server never hangs a run).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// What each connection of this process tells the server its
/// `application_name` is: `nightshift <host>:<pid>` (PostgreSQL keeps 63
/// bytes), so `pg_stat_activity` counts a process's connections and
/// `status` the connections in use per host
/// ([`workers::connections_by_host`]).
pub fn application_name() -> String {
    let me = HolderInfo::current();
    format!("{APPLICATION} {}:{}", me.host, me.pid)
}

/// The first word of every nightshift connection's `application_name`.
pub const APPLICATION: &str = "nightshift";

/// Connections a process's pool opens at most, whatever its `--jobs`
/// (docs/workers.md#connections): every ledger statement of a worker is
/// short (no transaction stays open across an agent call, a gate or a
/// push), so twenty workers share four connections, and 200 workers on ten
/// hosts stay within PostgreSQL's default `max_connections` (100). The
/// one-drain-per-repository lock holds one more connection of its own.
pub const POOL_SIZE: u32 = 4;
/// First key of the two-key advisory locks nightshift takes for repos ("nsrp"). The
/// two-int form lives in a key space apart from sqlx's one-bigint migration lock.
const REPO_LOCK_CLASS: i32 = 0x6e73_7270;
/// How long a refused lock attempt waits for the holder to have written its row.
const HOLDER_ROW_WAIT: Duration = Duration::from_secs(2);

/// A database URL, which may carry a password: `Debug` and `Display` print `****`.
/// (Stands in for `crate::secret::Secret` until that lands.)
#[derive(Clone, PartialEq, Eq)]
pub struct DbUrl(String);

impl DbUrl {
    /// Wraps a URL.
    pub fn new(url: impl Into<String>) -> DbUrl {
        DbUrl(url.into())
    }

    /// The URL itself, for the driver only; never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for DbUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("****")
    }
}

impl fmt::Display for DbUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("****")
    }
}

/// Where the ledger lives (docs/ledger.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DbSource {
    /// A server named by an environment variable.
    Url {
        /// The URL (secret: may hold a password).
        url: DbUrl,
        /// The variable it came from, [`NIGHTSHIFT_DATABASE_URL`] or [`DATABASE_URL`]; the
        /// process runner removes it from agents' environments (docs/agents.md#environment).
        var: &'static str,
    },
    /// The embedded private cluster with this data directory (PGDATA).
    Embedded {
        /// The cluster's data directory, e.g. `~/.local/share/nightshift/pg`.
        data_dir: PathBuf,
    },
}

impl DbSource {
    /// The environment variable the URL was taken from, if any.
    pub fn env_var(&self) -> Option<&'static str> {
        match self {
            DbSource::Url { var, .. } => Some(var),
            DbSource::Embedded { .. } => None,
        }
    }

    /// A description for messages, without the password:
    /// `postgres://user@host:5432/db (from DATABASE_URL)` or
    /// `the private cluster in /path (embedded default)`.
    pub fn describe(&self) -> String {
        match self {
            DbSource::Url { url, var } => match url.expose().parse::<PgConnectOptions>() {
                Ok(o) => {
                    let host = match o.get_socket() {
                        Some(socket) => socket.display().to_string(),
                        None => format!("{}:{}", o.get_host(), o.get_port()),
                    };
                    let db = o.get_database().unwrap_or(o.get_username());
                    format!("postgres://{}@{host}/{db} (from {var})", o.get_username())
                }
                Err(_) => format!("the URL in {var} (unparsable)"),
            },
            DbSource::Embedded { data_dir } => {
                format!(
                    "the private cluster in {} (embedded default)",
                    data_dir.display()
                )
            }
        }
    }
}

/// What the first start of the embedded database says (docs/ledger.md): where
/// the private PostgreSQL was created, that it keeps running, and how to stop
/// it.
pub fn created_note(data_dir: &std::path::Path) -> String {
    format!(
        "note: created a private PostgreSQL for nightshift's ledger at {} and left it running (unix socket only, no TCP port); stop it with `nightshift db stop` (any nightshift command starts it again), or set NIGHTSHIFT_DATABASE_URL to use your own server",
        data_dir.display()
    )
}

/// The ledger's source from the process environment: `NIGHTSHIFT_DATABASE_URL`, else
/// `DATABASE_URL` (empty values count as unset), else the embedded default (docs/ledger.md#embedded-default).
pub fn db_source_from_env() -> DbSource {
    let lookup = |name: &str| {
        KEPT.get()
            .and_then(|kept| kept.iter().find(|(k, _)| k == name))
            .map(|(_, v)| OsString::from(v))
            .filter(|v| !v.is_empty())
            .or_else(|| embedded::process_env(name))
    };
    db_source_from(&lookup, embedded::running_as_root())
}

/// A variable `main` removed from the environment and kept (see
/// [`keep_removed_vars`]), when it is set and not empty.
fn kept_var(name: &str) -> Option<String> {
    KEPT.get()
        .and_then(|kept| kept.iter().find(|(k, _)| k == name))
        .map(|(_, v)| v.clone())
        .filter(|v| !v.is_empty())
}

/// The ledger URL variables as they were at start-up, held in memory only.
static KEPT: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();

/// Keeps the ledger URL variables `main` removed from the environment (so
/// that no child — agent, gate, `gh`, `git`, `pg_config` — inherits them and
/// `/proc/<pid>/environ` no longer shows them) for [`db_source_from_env`].
/// The first call wins.
pub fn keep_removed_vars(vars: Vec<(String, String)>) {
    let _ = KEPT.set(vars);
}

/// As [`db_source_from_env`], from any environment lookup; `is_root` chooses the
/// embedded cluster's default place (see [`embedded::nightshift_data_dir`]).
pub fn db_source_from(env: EnvLookup<'_>, is_root: bool) -> DbSource {
    for var in [NIGHTSHIFT_DATABASE_URL, DATABASE_URL] {
        if let Some(url) = env(var).filter(|v| !v.is_empty()) {
            return DbSource::Url {
                url: DbUrl(os_to_string(url)),
                var,
            };
        }
    }
    DbSource::Embedded {
        data_dir: embedded::cluster_dir(env, is_root),
    }
}

fn os_to_string(s: OsString) -> String {
    s.into_string()
        .unwrap_or_else(|s| s.to_string_lossy().into_owned())
}

/// Errors of the ledger; each names the source (without its password).
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The URL in the variable is not a PostgreSQL URL.
    #[error("{var} is not a valid PostgreSQL URL: {source}")]
    BadUrl {
        /// The variable.
        var: &'static str,
        /// The parse error.
        source: sqlx::Error,
    },
    /// The server could not be reached in time or refused the connection.
    #[error(
        "cannot connect to the ledger at {source_desc} within {seconds} s: {source}{}",
        connect_hint(source_desc)
    )]
    Connect {
        /// [`DbSource::describe`].
        source_desc: String,
        /// The timeout in seconds.
        seconds: u64,
        /// The driver error.
        source: sqlx::Error,
    },
    /// Applying the migrations failed.
    #[error("applying the ledger migrations at {source_desc} failed: {source}")]
    Migrate {
        /// [`DbSource::describe`].
        source_desc: String,
        /// The migrator error.
        source: sqlx::migrate::MigrateError,
    },
    /// The embedded cluster could not be started.
    #[error("the embedded ledger: {0}")]
    Embedded(#[from] EmbeddedError),
    /// A query failed.
    #[error("ledger query failed ({what}): {source}")]
    Query {
        /// What was being done.
        what: &'static str,
        /// The driver error.
        source: sqlx::Error,
    },
}

/// A connected ledger: a pool to a migrated database.
#[derive(Clone)]
pub struct Ledger {
    /// The pool; typed queries live in the table families' modules ([`runs`], …).
    pub pool: PgPool,
    /// Options for dedicated (unpooled) connections such as the repo lock's.
    options: PgConnectOptions,
    source_desc: String,
}

/// Written by hand: the connect options' own `Debug` prints the password.
impl fmt::Debug for Ledger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ledger")
            .field("source", &self.source_desc)
            .finish_non_exhaustive()
    }
}

/// The connect options of a ledger URL read from `var`: PostgreSQL URLs
/// only, with a `PGPASSWORD` that `main` kept when the URL has no password.
///
/// # Errors
/// [`LedgerError::BadUrl`] for another scheme or a malformed URL.
fn url_options(url: &DbUrl, var: &'static str) -> Result<PgConnectOptions, LedgerError> {
    // sqlx parses other schemes too; a mysql:// URL must not
    // send its password to whatever listens there.
    let u = url.expose();
    if !(u.starts_with("postgres://") || u.starts_with("postgresql://")) {
        let scheme = u
            .split("://")
            .next()
            .filter(|s| s.len() < u.len())
            .unwrap_or("none");
        return Err(LedgerError::BadUrl {
            var,
            source: sqlx::Error::Configuration(
                format!("the scheme is {scheme:?}; write postgres://USER@HOST:PORT/DB").into(),
            ),
        });
    }
    let options = u
        .parse::<PgConnectOptions>()
        .map_err(|source| LedgerError::BadUrl { var, source })?;
    // `main` took PGPASSWORD out of the environment (agents could
    // read it there); it still answers for a URL without a
    // password, as libpq's precedence has it.
    Ok(
        match kept_var("PGPASSWORD").filter(|_| crate::secret::url_password(u).is_none()) {
            Some(password) => options.password(&password),
            None => options,
        },
    )
}

impl Ledger {
    /// Connects to `src` within [`CONNECT_TIMEOUT`], starting the embedded cluster if
    /// needed, and applies the migrations (idempotent; concurrent first runs serialise
    /// on sqlx's advisory lock).
    ///
    /// # Errors
    /// [`LedgerError::BadUrl`], [`LedgerError::Connect`] (naming the source),
    /// [`LedgerError::Embedded`], [`LedgerError::Migrate`].
    pub async fn connect(src: &DbSource) -> Result<Ledger, LedgerError> {
        Ledger::connect_with_timeout(src, CONNECT_TIMEOUT).await
    }

    /// As [`Ledger::connect`] with an explicit connect timeout. Starting the embedded
    /// cluster has bounds of its own (each pg_ctl call `-t 30`, the start-up lock 180 s).
    ///
    /// # Errors
    /// As [`Ledger::connect`].
    pub async fn connect_with_timeout(
        src: &DbSource,
        timeout: Duration,
    ) -> Result<Ledger, LedgerError> {
        Ledger::connect_sized(src, timeout, POOL_SIZE).await
    }

    /// As [`Ledger::connect`] with a pool of one connection, for a command
    /// whose statements run one after another (`plan`): a bigger pool opens
    /// a second connection (on a TLS server about 0.1 s of handshake) when
    /// a statement follows one whose connection is still on its way back.
    /// A caller must not hold a connection while it asks for another.
    ///
    /// # Errors
    /// As [`Ledger::connect`].
    pub async fn connect_serial(src: &DbSource) -> Result<Ledger, LedgerError> {
        Ledger::connect_sized(src, CONNECT_TIMEOUT, 1).await
    }

    /// As [`Ledger::connect`] with a pool of at most `size` connections:
    /// a board beside a drain (`drain --serve`) keeps its own small pool.
    ///
    /// # Errors
    /// As [`Ledger::connect`].
    pub async fn connect_pool(src: &DbSource, size: u32) -> Result<Ledger, LedgerError> {
        Ledger::connect_sized(src, CONNECT_TIMEOUT, size.max(1)).await
    }

    async fn connect_sized(
        src: &DbSource,
        timeout: Duration,
        size: u32,
    ) -> Result<Ledger, LedgerError> {
        let options = match src {
            DbSource::Url { url, var } => url_options(url, var)?,
            DbSource::Embedded { data_dir } => {
                let cluster = Cluster::resolve(data_dir, &embedded::process_env).await?;
                let fresh = !cluster.data_dir.join("PG_VERSION").is_file();
                let status = cluster.start().await?;
                // Said once, on stderr: a server now runs that nobody started by hand.
                if fresh && status.initialized {
                    eprintln!("{}", created_note(&cluster.data_dir));
                }
                cluster.connect_options()
            }
        };
        let options = options.application_name(&application_name());
        let source_desc = src.describe();
        let connect_err = |source| LedgerError::Connect {
            source_desc: source_desc.clone(),
            seconds: timeout.as_secs(),
            source,
        };
        let pool = PgPoolOptions::new()
            .max_connections(size)
            .acquire_timeout(timeout)
            .connect_with(options.clone());
        // The outer timeout bounds DNS and TLS too, whatever the pool does inside.
        let pool = match tokio::time::timeout(timeout, pool).await {
            Ok(Ok(pool)) => pool,
            // The pool only says it timed out; one direct attempt says why
            // (refused, no such socket, no such host, a password).
            Ok(Err(sqlx::Error::PoolTimedOut)) | Err(_) => {
                let cause = match tokio::time::timeout(
                    Duration::from_secs(3),
                    PgConnection::connect_with(&options),
                )
                .await
                {
                    Ok(Err(e)) => e,
                    _ => sqlx::Error::PoolTimedOut,
                };
                return Err(connect_err(cause));
            }
            Ok(Err(e)) => return Err(connect_err(e)),
        };
        sqlx::migrate!()
            .run(&pool)
            .await
            .map_err(|source| LedgerError::Migrate {
                source_desc: source_desc.clone(),
                source,
            })?;
        Ok(Ledger {
            pool,
            options,
            source_desc,
        })
    }

    /// Tries to take the one-drain-per-repo lock (docs/ledger.md#locking): a PostgreSQL advisory lock
    /// on a hash of `repo_key`, held by a dedicated connection (an advisory lock belongs
    /// to its connection, so a pooled one would leak it). On success the holder is
    /// recorded in `repo_locks`; when refused, the recorded holder is returned.
    ///
    /// The lock is released when the returned [`RepoLock`] is dropped or released, and
    /// by the server when this process dies (its connection closes).
    ///
    /// # Errors
    /// [`LedgerError::Connect`] for the dedicated connection, [`LedgerError::Query`].
    pub async fn try_lock_repo(
        &self,
        repo_key: &str,
        holder: &HolderInfo,
    ) -> Result<RepoLockAttempt, LedgerError> {
        let connect_err = |source| LedgerError::Connect {
            source_desc: self.source_desc.clone(),
            seconds: CONNECT_TIMEOUT.as_secs(),
            source,
        };
        let mut conn =
            tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(&self.options))
                .await
                .map_err(|_| connect_err(sqlx::Error::PoolTimedOut))?
                .map_err(connect_err)?;
        let key = repo_lock_key(repo_key);
        let query_err = |what| move |source| LedgerError::Query { what, source };
        let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1, $2)")
            .bind(REPO_LOCK_CLASS)
            .bind(key)
            .fetch_one(&mut conn)
            .await
            .map_err(query_err("pg_try_advisory_lock"))?;
        if got {
            sqlx::query(
                "INSERT INTO repo_locks (repo, host, pid, started_at, backend_pid) \
                 VALUES ($1, $2, $3, $4, pg_backend_pid()) \
                 ON CONFLICT (repo) DO UPDATE SET host = EXCLUDED.host, pid = EXCLUDED.pid, \
                 started_at = EXCLUDED.started_at, backend_pid = EXCLUDED.backend_pid",
            )
            .bind(repo_key)
            .bind(&holder.host)
            .bind(i32::try_from(holder.pid).unwrap_or(i32::MAX))
            .bind(holder.started_at)
            .execute(&mut conn)
            .await
            .map_err(query_err("recording the repo lock holder"))?;
            return Ok(RepoLockAttempt::Acquired(RepoLock {
                conn: Some(conn),
                repo: repo_key.to_string(),
                key,
            }));
        }
        let holder = self.lock_holder(&mut conn, repo_key, key).await;
        let _ = conn.close().await;
        Ok(RepoLockAttempt::Held { holder: holder? })
    }

    /// Reads who holds the lock: the `repo_locks` row written by the backend that holds
    /// it per `pg_locks`. Waits briefly, since the holder writes its row just after
    /// taking the lock; `None` if it never appears (or the lock was just released).
    async fn lock_holder(
        &self,
        conn: &mut PgConnection,
        repo: &str,
        key: i32,
    ) -> Result<Option<HolderInfo>, LedgerError> {
        let started = Instant::now();
        loop {
            let row: Option<(String, i32, DateTime<Utc>)> = sqlx::query_as(
                "SELECT r.host, r.pid, r.started_at FROM repo_locks r \
                 JOIN pg_locks l ON l.pid = r.backend_pid \
                 WHERE r.repo = $1 AND l.locktype = 'advisory' AND l.granted \
                   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                   AND l.classid::bigint = $2 AND l.objid::bigint = $3 AND l.objsubid = 2",
            )
            .bind(repo)
            .bind(i64::from(REPO_LOCK_CLASS as u32))
            .bind(i64::from(key as u32))
            .fetch_optional(&mut *conn)
            .await
            .map_err(|source| LedgerError::Query { what: "reading the repo lock holder", source })?;
            if let Some((host, pid, started_at)) = row {
                let pid = u32::try_from(pid).unwrap_or(0);
                return Ok(Some(HolderInfo {
                    host,
                    pid,
                    started_at,
                }));
            }
            if started.elapsed() >= HOLDER_ROW_WAIT {
                return Ok(None);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// What to do about a ledger that cannot be reached, after the error itself.
fn connect_hint(source_desc: &str) -> String {
    if source_desc.contains("(embedded default)") {
        "; check `nightshift db status` and the server log it names".to_string()
    } else {
        "; start that server or fix the URL (without NIGHTSHIFT_DATABASE_URL and DATABASE_URL nightshift uses its own embedded database)".to_string()
    }
}

/// Asks the server for nothing (`SELECT 1`): whether it answers.
///
/// # Errors
/// Database errors (an outage among them, see [`is_outage`]).
pub async fn ping(pool: &PgPool) -> sqlx::Result<()> {
    sqlx::query("SELECT 1").execute(pool).await.map(|_| ())
}

/// How many migrations the database applied successfully (`doctor` compares
/// it with the migrations this build carries).
///
/// # Errors
/// Database errors (e.g. no right to read `_sqlx_migrations`).
pub async fn applied_migrations(pool: &PgPool) -> sqlx::Result<i64> {
    sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations WHERE success")
        .fetch_one(pool)
        .await
}

/// Whether a ledger error means the database went away (stopped,
/// restarting, unreachable, the session ended by the server) rather than
/// that a query was wrong: such an error may pass once the server is back
/// (docs/ledger.md#outage-wait), so a run waits for it instead of failing its item.
pub fn is_outage(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => {
            let code = db.code().unwrap_or_default();
            // 08: connection exception; 57P01-03: the server shut down or is
            // starting; 53300: too many connections (ours just died); 55000
            // with this text: the database is closed to connections for now.
            code.starts_with("08")
                || matches!(code.as_ref(), "57P01" | "57P02" | "57P03" | "53300")
                || (code == "55000" && db.message().contains("not currently accepting connections"))
        }
        _ => false,
    }
}

/// The second key of a repo's advisory lock: the first 4 bytes of SHA-256(repo key).
fn repo_lock_key(repo_key: &str) -> i32 {
    let hash = Sha256::digest(repo_key.as_bytes());
    i32::from_be_bytes([hash[0], hash[1], hash[2], hash[3]])
}

/// Who holds (or wants) a repo's drain lock; shown when a second drain is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolderInfo {
    /// Host name of the holding process.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// When it started (UTC).
    pub started_at: DateTime<Utc>,
}

impl HolderInfo {
    /// This process: its host name, pid, and now as the start.
    pub fn current() -> HolderInfo {
        let host = nix::unistd::gethostname()
            .map(os_to_string)
            .unwrap_or_else(|_| "unknown-host".to_string());
        HolderInfo {
            host,
            pid: std::process::id(),
            started_at: Utc::now(),
        }
    }
}

impl fmt::Display for HolderInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pid {} on {}, since {}",
            self.pid,
            self.host,
            self.started_at.format("%Y-%m-%d %H:%M:%S UTC")
        )
    }
}

/// The outcome of [`Ledger::try_lock_repo`].
#[derive(Debug)]
pub enum RepoLockAttempt {
    /// The lock is ours while this guard lives.
    Acquired(RepoLock),
    /// Another session holds it; `holder` is who, when it recorded itself in time.
    Held {
        /// The recorded holder.
        holder: Option<HolderInfo>,
    },
}

/// A held repo lock. Dropping it closes its dedicated connection, which makes the
/// server release the lock; [`RepoLock::release`] does the same and waits for it.
#[derive(Debug)]
pub struct RepoLock {
    conn: Option<PgConnection>,
    repo: String,
    key: i32,
}

impl RepoLock {
    /// The repo key this lock is for.
    pub fn repo(&self) -> &str {
        &self.repo
    }

    /// Whether the lock is still held: its connection is alive and the server still
    /// lists the lock (an idle-session timeout or a server restart would lose it).
    ///
    /// # Errors
    /// [`LedgerError::Query`] when the connection is gone.
    pub async fn still_held(&mut self) -> Result<bool, LedgerError> {
        let Some(conn) = self.conn.as_mut() else {
            return Ok(false);
        };
        sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory' \
             AND granted AND classid::bigint = $1 AND objid::bigint = $2 AND objsubid = 2)",
        )
        .bind(i64::from(REPO_LOCK_CLASS as u32))
        .bind(i64::from(self.key as u32))
        .fetch_one(conn)
        .await
        .map_err(|source| LedgerError::Query { what: "checking the repo lock", source })
    }

    /// Releases the lock now and closes its connection.
    ///
    /// # Errors
    /// [`LedgerError::Query`] if the unlock fails (the connection is closed anyway, which
    /// releases the lock on the server).
    pub async fn release(mut self) -> Result<(), LedgerError> {
        let Some(mut conn) = self.conn.take() else {
            return Ok(());
        };
        let unlocked = sqlx::query("SELECT pg_advisory_unlock($1, $2)")
            .bind(REPO_LOCK_CLASS)
            .bind(self.key)
            .execute(&mut conn)
            .await;
        let _ = conn.close().await;
        unlocked.map(drop).map_err(|source| LedgerError::Query {
            what: "pg_advisory_unlock",
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: Env) -> impl Fn(&str) -> Option<OsString> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| OsString::from(v))
        }
    }

    type Env = &'static [(&'static str, &'static str)];

    #[test]
    fn source_precedence() {
        let cases: &[(Env, Option<&str>)] = &[
            (
                &[
                    ("NIGHTSHIFT_DATABASE_URL", "postgres://a/x"),
                    ("DATABASE_URL", "postgres://b/y"),
                ],
                Some("NIGHTSHIFT_DATABASE_URL"),
            ),
            (&[("DATABASE_URL", "postgres://b/y")], Some("DATABASE_URL")),
            (
                &[
                    ("NIGHTSHIFT_DATABASE_URL", ""),
                    ("DATABASE_URL", "postgres://b/y"),
                ],
                Some("DATABASE_URL"),
            ),
            (
                &[("NIGHTSHIFT_DATABASE_URL", ""), ("DATABASE_URL", "")],
                None,
            ),
            (&[], None),
        ];
        for (env, want) in cases {
            let src = db_source_from(&env_of(env), false);
            assert_eq!(src.env_var(), *want, "{env:?}");
        }
        let src = db_source_from(&env_of(&[("NIGHTSHIFT_DATA_DIR", "/d")]), true);
        assert_eq!(
            src,
            DbSource::Embedded {
                data_dir: PathBuf::from("/d/pg")
            }
        );
    }

    #[test]
    fn url_never_printed() {
        let src = DbSource::Url {
            url: DbUrl::new("postgres://u:hunter2@db.example:6543/led"),
            var: DATABASE_URL,
        };
        let debug = format!("{src:?}");
        assert!(
            !debug.contains("hunter2") && debug.contains("****"),
            "{debug}"
        );
        let described = src.describe();
        assert_eq!(
            described,
            "postgres://u@db.example:6543/led (from DATABASE_URL)"
        );
        let bad = DbSource::Url {
            url: DbUrl::new("mysql://u:hunter2@x"),
            var: DATABASE_URL,
        };
        assert!(!bad.describe().contains("hunter2"));
    }

    #[tokio::test]
    async fn ledger_debug_hides_the_password() {
        let options: PgConnectOptions = "postgres://u:hunter2@127.0.0.1:1/x".parse().unwrap();
        let ledger = Ledger {
            pool: PgPoolOptions::new().connect_lazy_with(options.clone()),
            options,
            source_desc: "postgres://u@127.0.0.1:1/x (from DATABASE_URL)".into(),
        };
        let debug = format!("{ledger:?}");
        assert!(
            !debug.contains("hunter2") && debug.contains("127.0.0.1:1"),
            "{debug}"
        );
    }

    #[test]
    fn lock_keys_differ_per_repo_and_are_stable() {
        assert_eq!(
            repo_lock_key("github.com/a/b"),
            repo_lock_key("github.com/a/b")
        );
        assert_ne!(
            repo_lock_key("github.com/a/b"),
            repo_lock_key("github.com/a/c")
        );
    }
}
