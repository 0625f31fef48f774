//! The tests' databases on the test server (`DATABASE_URL`, else the
//! machine's local one): one migrated template per set of migrations,
//! cloned per test with `CREATE DATABASE … TEMPLATE`, through sqlx.
//!
//! The template is named after a hash of the migrations the library embeds
//! (`nightshift_tpl_<hash>`), so a changed or added migration makes a new
//! one and an old one is never used for the new schema. It is built once,
//! by whichever test process comes first, under a PostgreSQL advisory lock
//! so that concurrent processes (nextest runs each test in its own) and
//! other checkouts on the same server never race; it is built under a
//! temporary name and renamed when complete, so a build killed halfway is
//! never cloned. It takes no connections afterwards (a template with a
//! session on it cannot be cloned). Templates of older migrations are left
//! on the server: another checkout may still be cloning them.
//!
//! Not here: tests of the migrations themselves take [`Db::empty`] and let
//! the ledger migrate it.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, OnceLock};

use nightshift::ledger::{DbSource, DbUrl, Ledger};
use sqlx::Connection;
use sqlx::postgres::PgConnection;

/// The server tests use: `DATABASE_URL` if set, else the machine's local one.
/// On a loopback address with no `sslmode` given, TLS is turned off
/// (`sslmode=disable`): the ledger's traffic in a test never leaves the
/// machine, and the handshakes and the encryption in unoptimized code were
/// a tenth of a test night's CPU (sqlx's default `prefer` takes TLS
/// whenever the server offers it, as Debian's does).
pub fn admin_url() -> String {
    let url = std::env::var("DATABASE_URL")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/postgres".to_string());
    let loopback = ["@127.0.0.1", "@localhost", "@[::1]"]
        .iter()
        .any(|h| url.contains(h));
    if !loopback || url.contains("sslmode=") {
        return url;
    }
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}sslmode=disable")
}

/// `url` with its database replaced by `db`.
pub fn with_database(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (url, String::new()),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let root = match base[scheme_end..].find('/') {
        Some(i) => &base[..scheme_end + i],
        None => base,
    };
    format!("{root}/{db}{query}")
}

/// Runs `fut` to its end on a runtime of its own, in a thread of its own: the
/// callers are synchronous code inside a test's runtime, where blocking on
/// that runtime would panic.
pub fn block_on<F>(fut: F) -> F::Output
where
    F: Future + Send,
    F::Output: Send,
{
    std::thread::scope(|s| {
        s.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the test database")
                .block_on(fut)
        })
        .join()
        .expect("the test database's thread")
    })
}

/// One statement on the server's admin database.
pub fn admin_sql(q: &str) {
    block_on(async {
        let mut admin = admin().await;
        sqlx::raw_sql(sqlx::AssertSqlSafe(q.to_string()))
            .execute(&mut admin)
            .await
            .unwrap_or_else(|e| panic!("{q}: {e}"));
        let _ = admin.close().await;
    });
}

async fn admin() -> PgConnection {
    let url = admin_url();
    PgConnection::connect(&url)
        .await
        .unwrap_or_else(|e| panic!("connect to the test server {url}: {e}"))
}

async fn exists(admin: &mut PgConnection, name: &str) -> bool {
    sqlx::query_scalar::<_, bool>("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
        .bind(name)
        .fetch_one(admin)
        .await
        .expect("read pg_database")
}

async fn execute(admin: &mut PgConnection, q: String) {
    sqlx::query(sqlx::AssertSqlSafe(q.clone()))
        .execute(admin)
        .await
        .unwrap_or_else(|e| panic!("{q}: {e}"));
}

/// The advisory-lock key the template is built under (on the admin database).
const TEMPLATE_LOCK: i64 = 0x6e73_7470_6c00_0001;

/// The migrated template's name, building it first if no process has yet.
fn template() -> &'static str {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| block_on(ensure_template()))
}

async fn ensure_template() -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for m in sqlx::migrate!().iter() {
        h.update(m.version.to_le_bytes());
        h.update(&m.checksum);
    }
    let name = format!("nightshift_tpl_{}", &hex::encode(h.finalize())[..16]);
    let mut admin = admin().await;
    if !exists(&mut admin, &name).await {
        sqlx::query("SELECT pg_advisory_lock($1)")
            .bind(TEMPLATE_LOCK)
            .execute(&mut admin)
            .await
            .expect("take the template lock");
        if !exists(&mut admin, &name).await {
            let building = format!("{name}_building");
            // What a build killed halfway left behind.
            execute(
                &mut admin,
                format!("DROP DATABASE IF EXISTS {building} WITH (FORCE)"),
            )
            .await;
            execute(&mut admin, format!("CREATE DATABASE {building}")).await;
            let ledger = Ledger::connect(&DbSource::Url {
                url: DbUrl::new(with_database(&admin_url(), &building)),
                var: "DATABASE_URL",
            })
            .await
            .unwrap_or_else(|e| panic!("migrate the template database {building}: {e}"));
            ledger.pool.close().await;
            execute(
                &mut admin,
                format!("ALTER DATABASE {building} RENAME TO {name}"),
            )
            .await;
            // Nobody connects to it again: a session on a template stops its cloning.
            execute(
                &mut admin,
                format!("ALTER DATABASE {name} WITH ALLOW_CONNECTIONS false"),
            )
            .await;
        }
        sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(TEMPLATE_LOCK)
            .execute(&mut admin)
            .await
            .expect("release the template lock");
    }
    let _ = admin.close().await;
    name
}

/// A database of its own on the test server, dropped (forcibly) when this
/// value drops, also when the test panicked.
pub struct Db {
    pub name: String,
    pub url: String,
    /// The test's one session on it ([`Db::on_session`]), opened at the
    /// first read.
    session: Mutex<Option<Session>>,
}

/// A connection and the runtime it lives on (a connection's socket
/// belongs to the runtime that opened it). `application_name` is `tests`,
/// so that a test counting nightshift's own connections
/// (`application_name LIKE 'nightshift%'`) does not count it.
struct Session {
    rt: tokio::runtime::Runtime,
    conn: PgConnection,
}

/// An operation on the test's session: a query's future on the connection.
pub type OnSession<'f, T> = dyn for<'c> Fn(
        &'c mut PgConnection,
    ) -> Pin<Box<dyn Future<Output = Result<T, sqlx::Error>> + Send + 'c>>
    + Sync
    + 'f;

impl Db {
    /// A migrated database `nightshift_test_<random>`: a clone of the template.
    pub fn create() -> Db {
        Db::make(Some(template()))
    }

    /// An empty database (no migrations applied), for the tests of the
    /// migrations themselves.
    pub fn empty() -> Db {
        Db::make(None)
    }

    fn make(template: Option<&str>) -> Db {
        let name = format!("nightshift_test_{}", uuid::Uuid::new_v4().simple());
        let q = match template {
            Some(t) => format!("CREATE DATABASE {name} TEMPLATE {t}"),
            None => format!("CREATE DATABASE {name}"),
        };
        admin_sql(&q);
        Db {
            url: with_database(&admin_url(), &name),
            name,
            session: Mutex::new(None),
        }
    }

    /// Runs `op` on the test's one session on this database, opened at the
    /// first call and kept: one connection per test instead of a `psql`
    /// process and a server backend per assertion (about 40 ms of CPU each
    /// on the 2-core machine). A session the server cut (a test that takes
    /// the database down and up again) is opened again once, and `op`
    /// retried on it. Callable from sync code inside a test's runtime (the
    /// session's runtime runs on a thread of its own).
    pub fn on_session<T: Send>(&self, op: &OnSession<'_, T>) -> Result<T, sqlx::Error> {
        let mut guard = self.session.lock().unwrap_or_else(|e| e.into_inner());
        let session: &mut Option<Session> = &mut guard;
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    if session.is_none() {
                        *session = Some(Session::open(&self.url)?);
                    }
                    let s = session.as_mut().expect("opened above");
                    match s.rt.block_on(op(&mut s.conn)) {
                        Ok(v) => Ok(v),
                        Err(e) if s.rt.block_on(s.conn.ping()).is_ok() => Err(e),
                        Err(_) => {
                            *session = Some(Session::open(&self.url)?);
                            let s = session.as_mut().expect("opened above");
                            s.rt.block_on(op(&mut s.conn))
                        }
                    }
                })
                .join()
                .expect("the test session's thread")
        })
    }

    /// This database as the ledger's source.
    pub fn source(&self) -> DbSource {
        DbSource::Url {
            url: DbUrl::new(self.url.clone()),
            var: "DATABASE_URL",
        }
    }

    /// Runs `q` (one statement or several, as `psql -c` takes them) and
    /// returns what `psql -qAt` prints: each row of every statement on a
    /// line, its columns as the server writes them in text, `|` between
    /// them, NULL as nothing; trimmed. Panics naming the query on an error.
    pub fn sql(&self, q: &str) -> String {
        let rows = self
            .on_session(&|c| {
                let q = q.to_string();
                Box::pin(async move { sqlx::raw_sql(sqlx::AssertSqlSafe(q)).fetch_all(c).await })
            })
            .unwrap_or_else(|e| panic!("sql {q}: {e}"));
        let line = |r: &sqlx::postgres::PgRow| -> String {
            use sqlx::{Row, ValueRef};
            (0..r.len())
                .map(|i| {
                    let v = r.try_get_raw(i).expect("a column of the row");
                    if v.is_null() {
                        String::new()
                    } else {
                        // The simple query protocol answers in text.
                        v.as_str().expect("a text value").to_string()
                    }
                })
                .collect::<Vec<_>>()
                .join("|")
        };
        rows.iter()
            .map(line)
            .collect::<Vec<_>>()
            .join("\n")
            .trim()
            .to_string()
    }
}

impl Session {
    fn open(url: &str) -> Result<Session, sqlx::Error> {
        use sqlx::ConnectOptions;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime for the test session");
        let options: sqlx::postgres::PgConnectOptions = url.parse()?;
        let conn = rt.block_on(options.application_name("tests").connect())?;
        Ok(Session { rt, conn })
    }
}

impl Drop for Db {
    /// Drops the database without waiting for it: on PostgreSQL 15 and
    /// older a `DROP DATABASE` is an immediate checkpoint of the whole
    /// server (0.2–0.9 s with fsync on, longer while other tests write),
    /// which no test needs to wait for. A `psql` of its own, its output
    /// discarded (so nextest sees no leaked output), drops it after the test
    /// has gone, one drop at a time (`flock` on a file in the temp dir): the
    /// drops waiting their turn hold no connection, so they never crowd the
    /// server's connection limit. Without `flock` or `psql`, it drops the
    /// database itself, waiting.
    fn drop(&mut self) {
        // The session's runtime may not be dropped inside a test's runtime.
        if let Some(session) = self.session.get_mut().ok().and_then(Option::take) {
            std::thread::scope(|s| {
                s.spawn(move || drop(session));
            });
        }
        let q = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        let lock = std::env::temp_dir().join("nightshift-test-db-drop.lock");
        let spawned = std::process::Command::new("flock")
            .arg(&lock)
            .args(["psql", admin_url().as_str(), "-qAt", "-c", &q])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        if spawned.is_err() {
            let _ = std::panic::catch_unwind(|| admin_sql(&q));
        }
    }
}
