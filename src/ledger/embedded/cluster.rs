//! What the embedded cluster does (see [`super`]): resolve, create, start, stop and
//! report a private PostgreSQL cluster, and make its database. Not the tools' runs
//! and the pid file's reading (see [`super::server`]), nor which cluster to use.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::fcntl::{Flock, FlockArg};
use nix::unistd::{Gid, Uid, User};
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgSslMode};

use crate::process;

use super::server::{PidState, live_postmaster, pid_state, read_pid, run_captured, tool_command};
use super::*;

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
