//! The embedded default ledger: a private PostgreSQL cluster run with the system's
//! own `initdb`/`pg_ctl` when neither `NIGHTSHIFT_DATABASE_URL` nor `DATABASE_URL` is set
//! (docs/ledger.md), and the facts behind `nightshift db start|stop|status`.
//!
//! The cluster lives in a 0700 data directory, listens on a unix socket only (no TCP
//! port, so no port race and nothing reachable from the network), is reused across runs
//! and survives a killed server (stale `postmaster.pid`). Start-up is serialised between
//! nightshift processes by an flock. Run as root, the server runs as an unprivileged
//! account (`postgres`, else `nobody`), because `initdb` and `postgres` refuse root.
//!
//! This module does not download PostgreSQL, does not manage a system-wide server, and
//! does not run migrations (that is [`crate::ledger::Ledger::connect`]).

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::fcntl::{Flock, FlockArg};
use nix::unistd::{Gid, Uid, User};
use sha2::{Digest, Sha256};
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgSslMode};
use tokio_util::sync::CancellationToken;

use crate::process;

/// Name of the database nightshift uses inside the private cluster.
pub const DB_NAME: &str = "nightshift";
/// Superuser role created by `initdb` (fixed, so it does not depend on which OS account
/// ran `initdb`).
pub const SUPERUSER: &str = "nightshift";
/// Port number; only used to name the socket file `.s.PGSQL.5432` (no TCP listener).
pub const PORT: u16 = 5432;
/// Longest unix socket path the kernel accepts (`sun_path` is 108 bytes with its NUL).
pub const SOCKET_PATH_MAX: usize = 107;
/// Environment variable naming the nightshift data directory (the cluster is its `pg/`).
pub const DATA_DIR_VAR: &str = "NIGHTSHIFT_DATA_DIR";
/// Environment variable naming the directory holding `initdb` and `pg_ctl`; when set,
/// no other place is searched.
pub const BINDIR_VAR: &str = "NIGHTSHIFT_PG_BINDIR";
/// Data directory used when running as root without `NIGHTSHIFT_DATA_DIR`: outside
/// `/root`, so the unprivileged server account can reach it.
pub const ROOT_DATA_DIR: &str = "/var/lib/nightshift";

/// Seconds `pg_ctl` waits for the server (`-w -t 30`).
const PG_CTL_WAIT_SECS: u64 = 30;
/// Backstop around every child process, above `PG_CTL_WAIT_SECS` so that pg_ctl's own
/// timeout, with its clearer message, normally fires first.
const CHILD_TIMEOUT: Duration = Duration::from_secs(PG_CTL_WAIT_SECS + 30);
/// How long a second nightshift waits for another one's start-up (initdb + start).
const LOCK_WAIT: Duration = Duration::from_secs(180);
/// Start attempts while a killed server's children still hold its shared memory.
const START_ATTEMPTS: u32 = 10;
/// Log file of the server, inside the data directory (writable by the server account).
const LOG_FILE: &str = "nightshift-server.log";
/// Settings nightshift owns, included from postgresql.conf and rewritten at each start.
const CONF_FILE: &str = "nightshift.conf";

/// Errors of the embedded cluster; each names the path or command involved.
#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    /// `initdb`/`pg_ctl` were not found in any searched place.
    #[error(
        "PostgreSQL server binaries (initdb, pg_ctl) not found (looked in: {searched}); install them: \
         sudo apt-get install postgresql  (Debian/Ubuntu), sudo dnf install postgresql-server  \
         (Fedora/RHEL), brew install postgresql  (macOS), or set NIGHTSHIFT_DATABASE_URL to use an \
         existing PostgreSQL server"
    )]
    BinariesMissing {
        /// Places searched, in order, joined with ", ".
        searched: String,
    },
    /// Running as root, but no unprivileged account exists to run the server.
    #[error(
        "running as root, but neither the `postgres` nor the `nobody` account exists to run the \
         private PostgreSQL server (PostgreSQL refuses to run as root); create one, or set \
         NIGHTSHIFT_DATABASE_URL"
    )]
    NoAccount,
    /// A filesystem operation failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done, e.g. "creating directory".
        action: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// An ancestor of the data directory cannot be entered by the server account.
    #[error(
        "the server account `{account}` cannot enter {ancestor} (mode {mode:o}, owner uid {owner}), \
         so it cannot reach the data directory {data_dir}; set {DATA_DIR_VAR} to a directory outside \
         /root and private home directories (default for root: {ROOT_DATA_DIR})"
    )]
    Unreachable {
        /// The account the server runs as.
        account: String,
        /// The directory it cannot enter.
        ancestor: PathBuf,
        /// That directory's permission bits.
        mode: u32,
        /// That directory's owner.
        owner: u32,
        /// The cluster's data directory.
        data_dir: PathBuf,
    },
    /// The data directory exists, is not empty and is not a PostgreSQL cluster.
    #[error(
        "{path} exists and is not empty but holds no PostgreSQL cluster (no PG_VERSION); move it away"
    )]
    NotACluster {
        /// The data directory.
        path: PathBuf,
    },
    /// The socket directory exists but is not private to the server account.
    #[error(
        "socket directory {path} is not a private directory of uid {expected_uid} (owner uid {owner}, \
         mode {mode:o}); remove it and retry"
    )]
    SocketDirInsecure {
        /// The socket directory.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// Its permission bits.
        mode: u32,
        /// The uid that should own it.
        expected_uid: u32,
    },
    /// Even the short fallback socket path is too long.
    #[error(
        "socket path {path} is {len} bytes, above the {SOCKET_PATH_MAX}-byte limit of unix sockets"
    )]
    SocketPathTooLong {
        /// The socket file path.
        path: PathBuf,
        /// Its length in bytes.
        len: usize,
    },
    /// A child process (initdb, pg_ctl, pg_config) could not be started.
    #[error("cannot run {command}: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// The OS error.
        source: io::Error,
    },
    /// A child process failed.
    #[error("{command} failed ({status}): {stderr}{log}")]
    Command {
        /// The command line.
        command: String,
        /// Exit status as text, e.g. "exit status: 1".
        status: String,
        /// The tail of its stdout and stderr.
        stderr: String,
        /// The tail of the server log, prefixed with a newline, or empty.
        log: String,
    },
    /// A child process outlived its timeout and was killed.
    #[error("{command} did not finish within {seconds} s and was killed")]
    Timeout {
        /// The command line.
        command: String,
        /// The timeout in seconds.
        seconds: u64,
    },
    /// Another nightshift process held the start-up lock for too long.
    #[error("waited {seconds} s for the start-up lock {path} held by another nightshift process")]
    LockTimeout {
        /// The lock file.
        path: PathBuf,
        /// Seconds waited.
        seconds: u64,
    },
    /// The server runs but the `nightshift` database could not be checked or created.
    #[error(
        "cannot create the database `{DB_NAME}` in the private cluster (socket {socket}): {source}"
    )]
    Database {
        /// The socket file.
        socket: PathBuf,
        /// The driver error.
        source: sqlx::Error,
    },
}

fn io_err<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> EmbeddedError + 'a {
    move |source| EmbeddedError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// The unprivileged OS account the server runs as when nightshift runs as root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    /// Login name, e.g. `postgres`.
    pub name: String,
    /// Numeric user id.
    pub uid: u32,
    /// Numeric primary group id.
    pub gid: u32,
}

/// A private cluster, resolved: where it lives, where its socket is, which binaries and
/// which account run it. Building one does no I/O beyond lookups; [`Cluster::start`]
/// creates things.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// The cluster's data directory (PGDATA), absolute; mode 0700.
    pub data_dir: PathBuf,
    /// Directory of the unix socket: the data directory itself when the socket path fits
    /// in [`SOCKET_PATH_MAX`] bytes, else `/tmp/nightshift-<euid>-<hash8>` (mode 0700).
    pub socket_dir: PathBuf,
    /// Directory holding `initdb`, `pg_ctl` and `postgres`.
    pub bindir: PathBuf,
    /// `Some` when running as root: the server and its tools run as this account.
    pub account: Option<Account>,
}

/// Facts about a private cluster, as `nightshift db status` prints them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterStatus {
    /// The data directory.
    pub data_dir: PathBuf,
    /// The socket directory.
    pub socket_dir: PathBuf,
    /// The socket file (`<socket_dir>/.s.PGSQL.5432`).
    pub socket_path: PathBuf,
    /// The server's log file.
    pub log_file: PathBuf,
    /// Whether `initdb` has run (`PG_VERSION` exists).
    pub initialized: bool,
    /// Whether a server for this data directory is running.
    pub running: bool,
    /// The postmaster's pid when running.
    pub pid: Option<u32>,
    /// The account the server runs as, when not the current user.
    pub account: Option<String>,
}

impl fmt::Display for ClusterStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.running, self.pid) {
            (true, Some(pid)) => writeln!(f, "running: yes (pid {pid})")?,
            _ if !self.initialized => writeln!(f, "running: no (not initialised)")?,
            _ => writeln!(f, "running: no")?,
        }
        writeln!(f, "data dir: {}", self.data_dir.display())?;
        writeln!(f, "socket: {}", self.socket_path.display())?;
        writeln!(f, "log: {}", self.log_file.display())?;
        if let Some(account) = &self.account {
            writeln!(f, "account: {account}")?;
        }
        Ok(())
    }
}

/// Reads an environment variable, treating an empty value as unset.
pub type EnvLookup<'a> = &'a (dyn Fn(&str) -> Option<OsString> + Sync);

/// The process environment as an [`EnvLookup`].
pub fn process_env(name: &str) -> Option<OsString> {
    std::env::var_os(name).filter(|v| !v.is_empty())
}

/// nightshift's data directory (docs/files.md#data-directory): `NIGHTSHIFT_DATA_DIR`; else, as root,
/// [`ROOT_DATA_DIR`]; else the user's XDG data directory (`~/.local/share/nightshift`).
/// When no home directory can be found at all, [`ROOT_DATA_DIR`] is used and start-up
/// will name it if it cannot be created.
pub fn nightshift_data_dir(env: EnvLookup<'_>, is_root: bool) -> PathBuf {
    if let Some(dir) = env(DATA_DIR_VAR).filter(|v| !v.is_empty()) {
        return PathBuf::from(dir);
    }
    if is_root {
        return PathBuf::from(ROOT_DATA_DIR);
    }
    directories::ProjectDirs::from("", "", "nightshift")
        .map(|dirs| dirs.data_dir().to_path_buf())
        .unwrap_or_else(|| PathBuf::from(ROOT_DATA_DIR))
}

/// The embedded cluster's data directory: `<nightshift data dir>/pg`.
pub fn cluster_dir(env: EnvLookup<'_>, is_root: bool) -> PathBuf {
    nightshift_data_dir(env, is_root).join("pg")
}

/// Whether this process runs with effective uid 0.
pub fn running_as_root() -> bool {
    Uid::effective().is_root()
}

/// Finds the directory holding `initdb` and `pg_ctl`: `NIGHTSHIFT_PG_BINDIR` (exclusively,
/// when set); else `pg_config --bindir`; else the highest version under
/// `/usr/lib/postgresql/*/bin` (Debian keeps them off PATH); else PATH.
///
/// # Errors
/// [`EmbeddedError::BinariesMissing`], naming every place searched and what to install.
pub async fn find_bindir(env: EnvLookup<'_>) -> Result<PathBuf, EmbeddedError> {
    let has_tools = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    let mut searched = Vec::new();
    if let Some(dir) = env(BINDIR_VAR).filter(|v| !v.is_empty()) {
        let dir = PathBuf::from(dir);
        if has_tools(&dir) {
            return Ok(dir);
        }
        return Err(EmbeddedError::BinariesMissing {
            searched: format!("{} (from {BINDIR_VAR})", dir.display()),
        });
    }
    let path_var = env("PATH").unwrap_or_else(|| OsString::from("/usr/local/bin:/usr/bin:/bin"));
    let pg_config = std::env::split_paths(&path_var)
        .map(|d| d.join("pg_config"))
        .find(|p| p.is_file());
    searched.push("pg_config --bindir".to_string());
    if let Some(pg_config) = pg_config {
        let cmd = tool_command(&pg_config).arg("--bindir");
        if let Ok(out) = run_captured(cmd, &format!("{} --bindir", pg_config.display()), None).await
        {
            let dir = PathBuf::from(out.trim());
            if !out.trim().is_empty() {
                if has_tools(&dir) {
                    return Ok(dir);
                }
                searched.push(dir.display().to_string());
            }
        }
    }
    let mut versions: Vec<(Vec<u32>, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let version: Option<Vec<u32>> = name.split('.').map(|p| p.parse().ok()).collect();
            Some((version?, entry.path().join("bin")))
        })
        .collect();
    versions.sort();
    searched.push("/usr/lib/postgresql/*/bin".to_string());
    if let Some((_, dir)) = versions.into_iter().rev().find(|(_, dir)| has_tools(dir)) {
        return Ok(dir);
    }
    searched.push("PATH".to_string());
    if let Some(dir) = std::env::split_paths(&path_var).find(|d| has_tools(d)) {
        return Ok(dir);
    }
    Err(EmbeddedError::BinariesMissing {
        searched: searched.join(", "),
    })
}

/// The account the server runs as when nightshift is root: the owner of an existing
/// cluster (so a cluster made earlier keeps its owner), else `postgres`, else `nobody`.
fn server_account(data_dir: &Path) -> Result<Account, EmbeddedError> {
    let from_user = |u: User| Account {
        name: u.name,
        uid: u.uid.as_raw(),
        gid: u.gid.as_raw(),
    };
    if let Ok(meta) = fs::metadata(data_dir.join("PG_VERSION"))
        && meta.uid() != 0
    {
        if let Ok(Some(user)) = User::from_uid(Uid::from_raw(meta.uid())) {
            return Ok(from_user(user));
        }
        return Ok(Account {
            name: format!("uid {}", meta.uid()),
            uid: meta.uid(),
            gid: meta.gid(),
        });
    }
    for name in ["postgres", "nobody"] {
        if let Ok(Some(user)) = User::from_name(name) {
            return Ok(from_user(user));
        }
    }
    Err(EmbeddedError::NoAccount)
}

/// Chooses the socket directory: the data directory when its socket path fits, else a
/// short directory under /tmp named after the euid and a hash of the data directory.
pub fn socket_dir_for(data_dir: &Path) -> PathBuf {
    if socket_path_in(data_dir).as_os_str().len() <= SOCKET_PATH_MAX {
        return data_dir.to_path_buf();
    }
    let hash = Sha256::digest(data_dir.as_os_str().as_encoded_bytes());
    let hash8 = &hex::encode(hash)[..8];
    PathBuf::from(format!(
        "/tmp/nightshift-{}-{hash8}",
        Uid::effective().as_raw()
    ))
}

fn socket_path_in(dir: &Path) -> PathBuf {
    dir.join(format!(".s.PGSQL.{PORT}"))
}

impl Cluster {
    /// Resolves the cluster of `data_dir` (made absolute): binaries from `env` (see
    /// [`find_bindir`]), the server account when running as root, the socket directory.
    ///
    /// # Errors
    /// Missing binaries, no unprivileged account as root, an unusable current directory.
    pub async fn resolve(data_dir: &Path, env: EnvLookup<'_>) -> Result<Cluster, EmbeddedError> {
        let data_dir = std::path::absolute(data_dir).map_err(io_err("resolving", data_dir))?;
        let bindir = find_bindir(env).await?;
        let account = if running_as_root() {
            Some(server_account(&data_dir)?)
        } else {
            None
        };
        let socket_dir = socket_dir_for(&data_dir);
        Ok(Cluster {
            data_dir,
            socket_dir,
            bindir,
            account,
        })
    }

    /// The cluster nightshift uses by default, from the process environment.
    ///
    /// # Errors
    /// As [`Cluster::resolve`].
    pub async fn from_env() -> Result<Cluster, EmbeddedError> {
        let dir = cluster_dir(&process_env, running_as_root());
        Cluster::resolve(&dir, &process_env).await
    }

    /// The socket file, `<socket_dir>/.s.PGSQL.5432`.
    pub fn socket_path(&self) -> PathBuf {
        socket_path_in(&self.socket_dir)
    }

    /// The server's log file.
    pub fn log_file(&self) -> PathBuf {
        self.data_dir.join(LOG_FILE)
    }

    /// Connection options for the `nightshift` database over the unix socket. Every
    /// field is set explicitly so that PG* variables of the environment cannot redirect it.
    pub fn connect_options(&self) -> PgConnectOptions {
        self.connect_options_for(DB_NAME)
    }

    fn connect_options_for(&self, database: &str) -> PgConnectOptions {
        PgConnectOptions::new_without_pgpass()
            .socket(&self.socket_dir)
            .port(PORT)
            .username(SUPERUSER)
            .database(database)
            .ssl_mode(PgSslMode::Disable)
            .application_name("nightshift")
    }

    fn uid(&self) -> u32 {
        self.account
            .as_ref()
            .map_or_else(|| Uid::effective().as_raw(), |a| a.uid)
    }

    /// Facts about the cluster; changes nothing.
    ///
    /// Running means: `postmaster.pid` names a live process whose working directory is
    /// this data directory (the postmaster chdirs there). This is stricter than
    /// `pg_ctl status`, which believes any live process with that pid (after a reboot
    /// the pid is often reused).
    ///
    /// # Errors
    /// None in practice; kept fallible for the CLI's uniform handling.
    pub async fn status(&self) -> Result<ClusterStatus, EmbeddedError> {
        let pid = live_postmaster(&self.data_dir);
        Ok(ClusterStatus {
            data_dir: self.data_dir.clone(),
            socket_dir: self.socket_dir.clone(),
            socket_path: self.socket_path(),
            log_file: self.log_file(),
            initialized: self.data_dir.join("PG_VERSION").is_file(),
            running: pid.is_some(),
            pid,
            account: self.account.as_ref().map(|a| a.name.clone()),
        })
    }

    /// Starts the cluster if it is not running: creates and initialises it the first
    /// time, recovers from a stale `postmaster.pid`, creates the `nightshift` database.
    /// Idempotent; serialised with other nightshift processes by an flock on
    /// `<data_dir>.lock`.
    ///
    /// # Errors
    /// Filesystem, permission, initdb/pg_ctl failures (with the server log's tail),
    /// timeouts, and failure to create the database.
    pub async fn start(&self) -> Result<ClusterStatus, EmbeddedError> {
        self.prepare_parent()?;
        let _lock = self.lock().await?;
        if !self.data_dir.join("PG_VERSION").is_file() {
            self.initdb().await?;
        }
        self.prepare_socket_dir()?;
        self.write_conf()?;
        if live_postmaster(&self.data_dir).is_none() {
            self.start_server().await?;
        }
        self.ensure_database().await?;
        self.status().await
    }

    /// Stops the cluster if it runs (`pg_ctl stop -m fast`, then `-m immediate` if that
    /// fails). Returns the facts afterwards.
    ///
    /// # Errors
    /// pg_ctl failures and timeouts; the lock as in [`Cluster::start`].
    pub async fn stop(&self) -> Result<ClusterStatus, EmbeddedError> {
        if self.data_dir.parent().is_some_and(Path::is_dir) {
            let _lock = self.lock().await?;
            if live_postmaster(&self.data_dir).is_some() {
                let fast = self.pg_ctl(&["stop", "-m", "fast"]).await;
                if fast.is_err() && live_postmaster(&self.data_dir).is_some() {
                    self.pg_ctl(&["stop", "-m", "immediate"]).await?;
                }
            }
            if self.socket_dir != self.data_dir {
                // Only removed when empty; a live server elsewhere would keep its socket.
                let _ = fs::remove_dir(&self.socket_dir);
            }
        }
        self.status().await
    }

    /// Creates the data directory's parent (0755, so the server account can enter it)
    /// and checks, as root, that the server account can reach it.
    fn prepare_parent(&self) -> Result<(), EmbeddedError> {
        let parent = self.data_dir.parent().unwrap_or(Path::new("/"));
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(parent)
            .map_err(io_err("creating directory", parent))?;
        let Some(account) = &self.account else {
            return Ok(());
        };
        for ancestor in parent.ancestors() {
            let meta = fs::metadata(ancestor).map_err(io_err("reading", ancestor))?;
            let mode = meta.mode() & 0o7777;
            let can_enter = if meta.uid() == account.uid {
                mode & 0o100 != 0
            } else if meta.gid() == account.gid {
                mode & 0o010 != 0
            } else {
                mode & 0o001 != 0
            };
            if !can_enter {
                return Err(EmbeddedError::Unreachable {
                    account: account.name.clone(),
                    ancestor: ancestor.to_path_buf(),
                    mode,
                    owner: meta.uid(),
                    data_dir: self.data_dir.clone(),
                });
            }
        }
        Ok(())
    }

    /// Takes the start-up flock, polling so that the wait is bounded.
    async fn lock(&self) -> Result<Flock<fs::File>, EmbeddedError> {
        let mut path = self.data_dir.clone().into_os_string();
        path.push(".lock");
        let path = PathBuf::from(path);
        let started = Instant::now();
        loop {
            let file = fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .mode(0o600)
                .open(&path)
                .map_err(io_err("opening lock file", &path))?;
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(lock) => return Ok(lock),
                Err((_, nix::errno::Errno::EWOULDBLOCK)) if started.elapsed() < LOCK_WAIT => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
                    return Err(EmbeddedError::LockTimeout {
                        path,
                        seconds: LOCK_WAIT.as_secs(),
                    });
                }
                Err((_, errno)) => {
                    return Err(EmbeddedError::Io {
                        action: "locking",
                        path,
                        source: io::Error::from(errno),
                    });
                }
            }
        }
    }

    /// Runs initdb into a sibling directory and renames it into place, so that an
    /// interrupted initdb never leaves a half-made cluster at `data_dir`.
    async fn initdb(&self) -> Result<(), EmbeddedError> {
        match fs::read_dir(&self.data_dir) {
            Ok(mut entries) => {
                if entries.next().is_some() {
                    return Err(EmbeddedError::NotACluster {
                        path: self.data_dir.clone(),
                    });
                }
                fs::remove_dir(&self.data_dir).map_err(io_err("removing empty", &self.data_dir))?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err("reading", &self.data_dir)(e)),
        }
        let name = self.data_dir.file_name().unwrap_or(OsStr::new("pg"));
        let mut tmp_name = OsString::from(".");
        tmp_name.push(name);
        tmp_name.push(".initdb");
        let tmp = self.data_dir.with_file_name(tmp_name);
        if tmp.exists() {
            fs::remove_dir_all(&tmp).map_err(io_err("removing leftover", &tmp))?;
        }
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&tmp)
            .map_err(io_err("creating directory", &tmp))?;
        self.own(&tmp)?;
        // --auth=trust is acceptable ONLY because the server listens on a unix socket
        // alone (listen_addresses = '') in a 0700 directory owned by the server account:
        // nobody else on the machine can reach the socket, so trust means "the owner".
        let cmd = self
            .command("initdb")
            .arg("-D")
            .arg(tmp.display().to_string())
            .arg("--auth=trust")
            .arg(format!("--username={SUPERUSER}"))
            .arg("--encoding=UTF8")
            .arg("--locale=C");
        let label = format!(
            "{} -D {}",
            self.bindir.join("initdb").display(),
            tmp.display()
        );
        run_captured(cmd, &label, None).await?;
        let conf = tmp.join("postgresql.conf");
        let mut file = fs::OpenOptions::new()
            .append(true)
            .open(&conf)
            .map_err(io_err("opening", &conf))?;
        writeln!(file, "\n# nightshift: socket-only settings, rewritten at each start\ninclude_if_exists = '{CONF_FILE}'")
            .map_err(io_err("writing", &conf))?;
        fs::rename(&tmp, &self.data_dir)
            .map_err(io_err("renaming initialised cluster to", &self.data_dir))?;
        Ok(())
    }

    /// Creates (or checks) the socket directory when it is not the data directory.
    fn prepare_socket_dir(&self) -> Result<(), EmbeddedError> {
        let len = self.socket_path().as_os_str().len();
        if len > SOCKET_PATH_MAX {
            return Err(EmbeddedError::SocketPathTooLong {
                path: self.socket_path(),
                len,
            });
        }
        if self.socket_dir == self.data_dir {
            return Ok(());
        }
        match fs::DirBuilder::new().mode(0o700).create(&self.socket_dir) {
            Ok(()) => self.own(&self.socket_dir)?,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_err("creating directory", &self.socket_dir)(e)),
        }
        let meta =
            fs::symlink_metadata(&self.socket_dir).map_err(io_err("reading", &self.socket_dir))?;
        let mode = meta.mode() & 0o7777;
        if meta.is_dir()
            && meta.uid() == Uid::effective().as_raw()
            && self.uid() != meta.uid()
            && mode & 0o077 == 0
        {
            // Made by us (root) in an earlier attempt that stopped before the chown.
            self.own(&self.socket_dir)?;
        } else if !meta.is_dir() || meta.uid() != self.uid() || mode & 0o077 != 0 {
            return Err(EmbeddedError::SocketDirInsecure {
                path: self.socket_dir.clone(),
                owner: meta.uid(),
                mode,
                expected_uid: self.uid(),
            });
        }
        Ok(())
    }

    /// Writes the settings nightshift owns; the socket directory may change if the data
    /// directory moved, so they are rewritten at every start rather than at initdb.
    fn write_conf(&self) -> Result<(), EmbeddedError> {
        let path = self.data_dir.join(CONF_FILE);
        let socket_dir = self.socket_dir.to_string_lossy().replace('\'', "''");
        let text = format!(
            "# Written by nightshift at each start; edits are lost.\n\
             listen_addresses = ''\n\
             unix_socket_directories = '{socket_dir}'\n\
             unix_socket_permissions = 0700\n\
             port = {PORT}\n"
        );
        fs::write(&path, text).map_err(io_err("writing", &path))?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600))
            .map_err(io_err("chmod", &path))?;
        self.own(&path)
    }

    /// Starts the server, retrying while a killed server's children still hold its
    /// shared memory or its lock files (they exit once they notice the postmaster died).
    async fn start_server(&self) -> Result<(), EmbeddedError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            self.clear_reused_pid_files();
            let log = self.log_file();
            let log_arg = log.to_string_lossy().into_owned();
            match self.pg_ctl(&["start", "-l", &log_arg]).await {
                Ok(()) => return Ok(()),
                Err(e) if attempt < START_ATTEMPTS && live_postmaster(&self.data_dir).is_none() => {
                    tracing::warn!(attempt, error = %e, "private PostgreSQL did not start; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Removes `postmaster.pid` and the socket's lock file when the pid in them is a
    /// zombie or a live process that is not this cluster's server (pid reuse after a
    /// reboot or in a container): PostgreSQL would refuse to start, believing it still
    /// runs. A vanished pid is left alone: PostgreSQL removes such stale files itself.
    fn clear_reused_pid_files(&self) {
        let socket_lock = {
            let mut p = self.socket_path().into_os_string();
            p.push(".lock");
            PathBuf::from(p)
        };
        for file in [self.data_dir.join("postmaster.pid"), socket_lock] {
            let Some(pid) = read_pid(&file) else { continue };
            let state = pid_state(pid, &self.data_dir);
            if matches!(state, PidState::Zombie | PidState::Other) {
                tracing::warn!(file = %file.display(), pid, ?state, "removing stale lock file PostgreSQL would not remove");
                let _ = fs::remove_file(&file);
            }
        }
    }

    /// Creates the `nightshift` database when missing (tolerating a concurrent creator).
    async fn ensure_database(&self) -> Result<(), EmbeddedError> {
        let db_err = |source| EmbeddedError::Database {
            socket: self.socket_path(),
            source,
        };
        let options = self.connect_options_for("postgres");
        let mut conn = tokio::time::timeout(
            Duration::from_secs(10),
            PgConnection::connect_with(&options),
        )
        .await
        .map_err(|_| db_err(sqlx::Error::PoolTimedOut))?
        .map_err(db_err)?;
        let exists: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
                .bind(DB_NAME)
                .fetch_one(&mut conn)
                .await
                .map_err(db_err)?;
        if !exists {
            let created = sqlx::query("CREATE DATABASE nightshift")
                .execute(&mut conn)
                .await;
            match created {
                Ok(_) => {}
                // 42P04 duplicate_database: another process created it first.
                Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42P04") => {}
                Err(e) => return Err(db_err(e)),
            }
        }
        let _ = conn.close().await;
        Ok(())
    }

    /// Runs `pg_ctl <args> -D <data_dir> -w -t 30 -s`.
    async fn pg_ctl(&self, args: &[&str]) -> Result<(), EmbeddedError> {
        let cmd = self
            .command("pg_ctl")
            .args(args.iter().copied())
            .arg("-D")
            .arg(self.data_dir.display().to_string())
            .arg("-w")
            .arg("-t")
            .arg(PG_CTL_WAIT_SECS.to_string())
            .arg("-s");
        let label = format!(
            "{} {} -D {}",
            self.bindir.join("pg_ctl").display(),
            args.join(" "),
            self.data_dir.display()
        );
        run_captured(cmd, &label, Some(&self.log_file()))
            .await
            .map(drop)
    }

    /// A command for one of the PostgreSQL tools: cleared environment (the long-lived
    /// server must not inherit tokens), cwd `/` (the server account may not enter ours),
    /// and the server account's uid/gid when root (std also drops supplementary groups).
    /// `pg_ctl start` leaves the server running: what it starts is not swept.
    fn command(&self, tool: &str) -> process::Command {
        let mut cmd = tool_command(&self.bindir.join(tool)).sweep_escaped(tool != "pg_ctl");
        if let Some(account) = &self.account {
            let home = User::from_uid(Uid::from_raw(account.uid))
                .ok()
                .flatten()
                .map_or_else(|| PathBuf::from("/"), |u| u.dir);
            cmd = cmd.run_as(process::RunAs {
                uid: account.uid,
                gid: account.gid,
                home,
                user: account.name.clone(),
            });
        }
        cmd
    }

    /// Gives `path` to the server account (no-op when not root).
    fn own(&self, path: &Path) -> Result<(), EmbeddedError> {
        if let Some(account) = &self.account {
            nix::unistd::chown(
                path,
                Some(Uid::from_raw(account.uid)),
                Some(Gid::from_raw(account.gid)),
            )
            .map_err(|e| io_err("chown", path)(io::Error::from(e)))?;
        }
        Ok(())
    }
}

/// A PostgreSQL tool through the process runner: its environment only `PATH`,
/// `LC_ALL` and `LANG`, cwd `/`, [`CHILD_TIMEOUT`], stdout kept whole.
fn tool_command(program: &Path) -> process::Command {
    process::Command::new(program.display().to_string())
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("LC_ALL", "C")
        .env("LANG", "C")
        .cwd("/")
        .timeout(CHILD_TIMEOUT)
        .capture_stdout(true)
}

/// Runs a child with stdin null and output captured, under [`CHILD_TIMEOUT`]; returns
/// its stdout. On failure the error carries the output's tail and, when given, the
/// tail of the server log.
async fn run_captured(
    cmd: process::Command,
    label: &str,
    log: Option<&Path>,
) -> Result<String, EmbeddedError> {
    let out = process::run(cmd, &CancellationToken::new())
        .await
        .map_err(|e| EmbeddedError::Spawn {
            command: label.to_string(),
            source: match e {
                process::ProcessError::Spawn { source, .. }
                | process::ProcessError::Wait { source, .. }
                | process::ProcessError::OutputFile { source, .. } => source,
            },
        })?;
    if out.timed_out {
        return Err(EmbeddedError::Timeout {
            command: label.to_string(),
            seconds: CHILD_TIMEOUT.as_secs(),
        });
    }
    if out.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&out.stderr_tail);
    let log = log
        .and_then(|p| fs::read(p).ok())
        .map(|bytes| {
            format!(
                "\nserver log ({}):\n{}",
                log.map(Path::display)
                    .map(|d| d.to_string())
                    .unwrap_or_default(),
                tail(&String::from_utf8_lossy(&bytes), 2000)
            )
        })
        .unwrap_or_default();
    let status = match (out.exit_code, out.signal) {
        (Some(code), _) => format!("exit status: {code}"),
        (None, Some(signal)) => format!("signal: {signal}"),
        (None, None) => "unknown status".to_string(),
    };
    Err(EmbeddedError::Command {
        command: label.to_string(),
        status,
        stderr: tail(text.trim(), 2000).to_string(),
        log,
    })
}

/// The last `max` bytes of `text`, cut at a character boundary.
fn tail(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// The pid on the first line of a PostgreSQL lock file.
fn read_pid(path: &Path) -> Option<u32> {
    let text = fs::read_to_string(path).ok()?;
    text.lines()
        .next()?
        .trim()
        .parse()
        .ok()
        .filter(|pid| *pid > 0)
}

/// What the pid in a PostgreSQL lock file is now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PidState {
    /// No such process: PostgreSQL removes such a stale file itself.
    Gone,
    /// A dead process nobody reaped (a container whose pid 1 does not reap). It holds
    /// nothing, but PostgreSQL and `pg_ctl` see it as alive and refuse to start.
    Zombie,
    /// A live process whose working directory is this data directory: this cluster's
    /// server (the postmaster and its children chdir to their data directory).
    Ours,
    /// A live process elsewhere: the pid was reused (after a reboot, in a container).
    Other,
    /// Alive, but /proc cannot tell whose (no /proc, or not readable): trusted as ours,
    /// as `pg_ctl` does, so a live server's files are never removed.
    Unknown,
}

fn pid_state(pid: u32, data_dir: &Path) -> PidState {
    let Ok(raw) = i32::try_from(pid) else {
        return PidState::Gone;
    };
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None) {
        Ok(()) | Err(nix::errno::Errno::EPERM) => {}
        Err(_) => return PidState::Gone,
    }
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    if let Ok(stat) = fs::read_to_string(proc_dir.join("stat")) {
        // The state letter follows the parenthesised command name, which may hold spaces.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next());
        if state == Some("Z") {
            return PidState::Zombie;
        }
    }
    match fs::read_link(proc_dir.join("cwd")) {
        Ok(cwd) => {
            let want = fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
            if cwd == want {
                PidState::Ours
            } else {
                PidState::Other
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound && !proc_dir.exists() => PidState::Gone,
        Err(_) => PidState::Unknown,
    }
}

/// The postmaster pid of `data_dir` when a server for it is running.
fn live_postmaster(data_dir: &Path) -> Option<u32> {
    let pid = read_pid(&data_dir.join("postmaster.pid"))?;
    matches!(pid_state(pid, data_dir), PidState::Ours | PidState::Unknown).then_some(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<OsString> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn data_dir_precedence() {
        let set = env_of(&[("NIGHTSHIFT_DATA_DIR", "/srv/ns")]);
        assert_eq!(cluster_dir(&set, true), PathBuf::from("/srv/ns/pg"));
        assert_eq!(cluster_dir(&set, false), PathBuf::from("/srv/ns/pg"));
        let empty = env_of(&[("NIGHTSHIFT_DATA_DIR", "")]);
        assert_eq!(
            cluster_dir(&empty, true),
            PathBuf::from("/var/lib/nightshift/pg")
        );
        let user = cluster_dir(&env_of(&[]), false);
        assert!(user.ends_with("nightshift/pg"), "{}", user.display());
        assert!(
            !user.starts_with("/var/lib/nightshift"),
            "{}",
            user.display()
        );
    }

    #[test]
    fn socket_dir_is_data_dir_when_short_and_tmp_when_long() {
        let short = Path::new("/home/a/.local/share/nightshift/pg");
        assert_eq!(socket_dir_for(short), short);
        let long = PathBuf::from(format!("/tmp/{}/pg", "d".repeat(100)));
        let dir = socket_dir_for(&long);
        assert!(dir.starts_with("/tmp"), "{}", dir.display());
        assert!(socket_path_in(&dir).as_os_str().len() <= SOCKET_PATH_MAX);
        assert_eq!(dir, socket_dir_for(&long), "stable across calls");
        let other = PathBuf::from(format!("/tmp/{}/pg", "e".repeat(100)));
        assert_ne!(dir, socket_dir_for(&other), "distinct per data dir");
    }

    #[test]
    fn pid_states_tell_our_server_from_reused_and_dead_pids() {
        let me = std::process::id();
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(
            pid_state(me, &cwd),
            PidState::Ours,
            "a live process whose cwd is the dir"
        );
        assert_eq!(pid_state(me, Path::new("/nonexistent/pg")), PidState::Other);

        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        // Not reaped yet: a zombie once it has exited.
        let deadline = Instant::now() + Duration::from_secs(5);
        while pid_state(pid, &cwd) != PidState::Zombie && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(pid_state(pid, &cwd), PidState::Zombie);
        child.wait().unwrap();
        assert_eq!(pid_state(pid, &cwd), PidState::Gone);
    }

    #[test]
    fn status_display_names_the_facts() {
        let status = ClusterStatus {
            data_dir: PathBuf::from("/var/lib/nightshift/pg"),
            socket_dir: PathBuf::from("/var/lib/nightshift/pg"),
            socket_path: PathBuf::from("/var/lib/nightshift/pg/.s.PGSQL.5432"),
            log_file: PathBuf::from("/var/lib/nightshift/pg/nightshift-server.log"),
            initialized: true,
            running: true,
            pid: Some(812),
            account: Some("postgres".into()),
        };
        assert_eq!(
            status.to_string(),
            "running: yes (pid 812)\ndata dir: /var/lib/nightshift/pg\n\
             socket: /var/lib/nightshift/pg/.s.PGSQL.5432\n\
             log: /var/lib/nightshift/pg/nightshift-server.log\naccount: postgres\n"
        );
        let fresh = ClusterStatus {
            initialized: false,
            running: false,
            pid: None,
            account: None,
            ..status
        };
        assert!(
            fresh
                .to_string()
                .starts_with("running: no (not initialised)\n")
        );
    }

    #[test]
    fn tail_cuts_at_char_boundary() {
        assert_eq!(tail("abc", 10), "abc");
        assert_eq!(tail("aé", 1), "");
        assert_eq!(tail("xxaé", 3), "aé");
    }
}
