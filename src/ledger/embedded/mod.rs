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

use std::ffi::OsString;
use std::fmt;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::unistd::{Uid, User};
use sha2::{Digest, Sha256};

mod cluster;
mod server;

use server::{run_captured, tool_command};

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

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::server::{PidState, pid_state, tail};
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
