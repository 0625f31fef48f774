//! The [`Command`] builder: program, arguments, the explicit environment,
//! working directory, stdin bytes, output files, limits and the line callback;
//! [`RunAs`] for a child under another account, and the defaults of every call.
//!
//! Not for running it: that is [`run`](super::run()) in `run.rs`.

use crate::secret::{Redactor, token_vars};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use std::{fmt, io};

/// Default time between SIGTERM and SIGKILL (docs/agents.md: the timeout kills the
/// whole process group).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);

/// Default timeout of a call when the caller sets none: 60 minutes, the
/// default `agent_timeout` (docs/config.md). Every external call has one.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60 * 60);

/// Default size in bytes of the stdout and stderr tails kept in [`super::Outcome`].
pub const DEFAULT_TAIL_BYTES: usize = 16 * 1024;

/// Default longest stdout line, in bytes, handed whole to the line callback;
/// longer lines are cut to this length (the file still has them whole).
pub const DEFAULT_LINE_MAX: usize = 4 * 1024 * 1024;

/// The variable that tags every process of one call (its value is unique
/// per call), so that a person or a test can tell a call's processes in
/// `/proc/PID/environ`. Ending them is the call's supervisor's work
/// (docs/security.md#processes), which needs no tag.
pub const CALL_MARKER_VAR: &str = "NIGHTSHIFT_CALL_ID";

/// An unprivileged account to run the child as (config `agent_user`,
/// docs/agents.md#running-as-root). Requires nightshift to run as root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    /// Numeric user id.
    pub uid: u32,
    /// Numeric primary group id; supplementary groups are dropped.
    pub gid: u32,
    /// The account's home directory, given to the child as `HOME`.
    pub home: PathBuf,
    /// The account's name, given to the child as `USER` and `LOGNAME`.
    pub user: String,
}

impl RunAs {
    /// Looks up an account by name in the user database.
    ///
    /// # Errors
    /// `NotFound` when there is no such account, or the lookup's own error.
    pub fn lookup(name: &str) -> io::Result<RunAs> {
        match nix::unistd::User::from_name(name) {
            Ok(Some(user)) => Ok(RunAs {
                uid: user.uid.as_raw(),
                gid: user.gid.as_raw(),
                home: user.dir,
                user: user.name,
            }),
            Ok(None) => Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no user account named `{name}` (create it, e.g. `useradd -m {name}`)"),
            )),
            Err(errno) => Err(io::Error::from(errno)),
        }
    }
}

/// A callback that receives each complete stdout line, redacted, without its
/// line ending.
pub type LineCallback = Box<dyn FnMut(&str) + Send>;

/// What to run and how: a builder consumed by [`super::run()`].
///
/// The environment always starts empty: set it with [`Command::env_map`]
/// (usually from [`child_env`]) and [`Command::env`]. `GIT_TERMINAL_PROMPT=0`
/// is always set, `LANG=C.UTF-8` when the map has no `LANG`.
pub struct Command {
    pub(super) program: String,
    pub(super) args: Vec<String>,
    pub(super) cwd: Option<PathBuf>,
    pub(super) env: BTreeMap<String, String>,
    pub(super) stdin: Option<Vec<u8>>,
    pub(super) timeout: Duration,
    pub(super) grace: Duration,
    pub(super) stdout_path: Option<PathBuf>,
    pub(super) stderr_path: Option<PathBuf>,
    pub(super) tail_bytes: usize,
    pub(super) max_output: Option<u64>,
    pub(super) line_max: usize,
    pub(super) json_lines: bool,
    pub(super) on_stdout_line: Option<LineCallback>,
    pub(super) run_as: Option<RunAs>,
    pub(super) redactor: Redactor,
    pub(super) sweep_escaped: bool,
    pub(super) capture_stdout: bool,
    pub(super) sandbox: Option<crate::sandbox::Policy>,
}

impl fmt::Debug for Command {
    /// Shows the variable names only: values may be secret.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Command")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("cwd", &self.cwd)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("stdin_bytes", &self.stdin.as_ref().map(Vec::len))
            .field("timeout", &self.timeout)
            .field("grace", &self.grace)
            .field("stdout_path", &self.stdout_path)
            .field("stderr_path", &self.stderr_path)
            .field("run_as", &self.run_as)
            .field("sandbox", &self.sandbox)
            .finish_non_exhaustive()
    }
}

impl Command {
    /// Runs `program` (looked up on the child's `PATH` unless it contains a
    /// `/`) with the arguments added by [`Command::arg`]/[`Command::args`].
    pub fn new(program: impl Into<String>) -> Command {
        Command {
            program: program.into(),
            args: Vec::new(),
            cwd: None,
            env: BTreeMap::new(),
            stdin: None,
            timeout: DEFAULT_TIMEOUT,
            grace: DEFAULT_GRACE,
            stdout_path: None,
            stderr_path: None,
            tail_bytes: DEFAULT_TAIL_BYTES,
            max_output: None,
            line_max: DEFAULT_LINE_MAX,
            json_lines: false,
            on_stdout_line: None,
            run_as: None,
            redactor: Redactor::default(),
            sweep_escaped: true,
            capture_stdout: false,
            sandbox: None,
        }
    }

    /// Runs `sh -c script` (gate and setup commands, docs/loop.md#gate).
    pub fn shell(script: impl Into<String>) -> Command {
        Command::new("sh").arg("-c").arg(script)
    }

    /// Adds one argument.
    pub fn arg(mut self, arg: impl Into<String>) -> Command {
        self.args.push(arg.into());
        self
    }

    /// Adds arguments.
    pub fn args<I, S>(mut self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// The working directory (default: nightshift's own).
    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> Command {
        self.cwd = Some(dir.into());
        self
    }

    /// Replaces the whole environment map (see [`child_env`]).
    pub fn env_map(mut self, env: BTreeMap<String, String>) -> Command {
        self.env = env;
        self
    }

    /// Sets one more variable (`TZ`, `NIGHTSHIFT_ROLE`, …).
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Command {
        self.env.insert(key.into(), value.into());
        self
    }

    /// Writes these bytes to the child's stdin, then closes it (the prompt,
    /// docs/agents.md). Without it stdin is `/dev/null`.
    pub fn stdin_bytes(mut self, bytes: impl Into<Vec<u8>>) -> Command {
        self.stdin = Some(bytes.into());
        self
    }

    /// Wall-clock limit from spawn to exit (default [`DEFAULT_TIMEOUT`]).
    pub fn timeout(mut self, timeout: Duration) -> Command {
        self.timeout = timeout;
        self
    }

    /// Time between SIGTERM and SIGKILL (default [`DEFAULT_GRACE`], 5 s).
    pub fn grace(mut self, grace: Duration) -> Command {
        self.grace = grace;
        self
    }

    /// Streams the child's stdout, redacted, into this file (created or
    /// truncated).
    pub fn stdout_file(mut self, path: impl Into<PathBuf>) -> Command {
        self.stdout_path = Some(path.into());
        self
    }

    /// Streams the child's stderr, redacted, into this file (created or
    /// truncated).
    pub fn stderr_file(mut self, path: impl Into<PathBuf>) -> Command {
        self.stderr_path = Some(path.into());
        self
    }

    /// How many trailing bytes of each stream [`super::Outcome`] keeps (default
    /// [`DEFAULT_TAIL_BYTES`], 16 KiB).
    pub fn tail_bytes(mut self, bytes: usize) -> Command {
        self.tail_bytes = bytes;
        self
    }

    /// Most bytes stdout and stderr together may carry (default: no cap;
    /// config `max_agent_output` for agents, docs/config.md): past it the
    /// child's group is stopped as on a timeout, nothing more reaches the
    /// files or the line callback, the tails keep the last bytes read, and
    /// [`super::Outcome::output_capped`] is set.
    pub fn max_output(mut self, bytes: u64) -> Command {
        self.max_output = Some(bytes);
        self
    }

    /// Longest line in bytes handed whole to the line callback (default
    /// [`DEFAULT_LINE_MAX`], 4 MiB); longer lines arrive cut to this length.
    pub fn line_max(mut self, bytes: usize) -> Command {
        self.line_max = bytes.max(1);
        self
    }

    /// Stdout is JSON lines (an agent's event stream): a line longer than
    /// the line cap reaches the callback as the same JSON with its long
    /// string values shortened in the middle (each keeps its first and last
    /// sixteenth of the cap around a `…[N bytes cut]…` note) instead of cut,
    /// so a huge tool output or final message does not cost the event
    /// around it. A line that stays too long even so (or is no JSON)
    /// arrives cut as usual.
    pub fn json_lines(mut self, json: bool) -> Command {
        self.json_lines = json;
        self
    }

    /// Calls `callback` with each complete stdout line (redacted, lossy
    /// UTF-8, without `\n` or `\r\n`), in order, from the reader task, so an
    /// adapter can parse stream-json while the agent runs. A last line
    /// without a newline is delivered at end of output. The callback must not
    /// block: it holds up the reading of stdout.
    pub fn on_stdout_line(mut self, callback: impl FnMut(&str) + Send + 'static) -> Command {
        self.on_stdout_line = Some(Box::new(callback));
        self
    }

    /// Runs the child as another account (config `agent_user`, docs/agents.md#running-as-root):
    /// uid and gid are switched before exec and `HOME`, `USER`, `LOGNAME` set.
    pub fn run_as(mut self, account: RunAs) -> Command {
        self.run_as = Some(account);
        self
    }

    /// Masks these secret values in files, tails and lines.
    pub fn redactor(mut self, redactor: Redactor) -> Command {
        self.redactor = redactor;
        self
    }

    /// Whether descendants that left the process group (reparented to the
    /// call's supervisor) are killed after the child exits (default true).
    /// Turn it off only for a command whose job is to start a daemon that
    /// must outlive it, such as `pg_ctl start`. Either way everything of
    /// the call is killed if nightshift dies before the child exits.
    pub fn sweep_escaped(mut self, sweep: bool) -> Command {
        self.sweep_escaped = sweep;
        self
    }

    /// Keeps the whole of stdout, raw (before redaction), in
    /// [`super::Outcome::stdout`] (default false). For short-lived tools whose
    /// output is data nightshift reads (`git`, `gh auth token`,
    /// `pg_config`), never for agents, whose output may be large.
    pub fn capture_stdout(mut self, capture: bool) -> Command {
        self.capture_stdout = capture;
        self
    }

    /// Runs the call inside the sandbox (docs/security.md#the-sandbox): its
    /// own namespaces, a root made of `policy`'s paths and the system
    /// directories, no capabilities, Landlock and seccomp. The program's
    /// own file is shown too when it lies elsewhere. Without it the call
    /// runs as today.
    pub fn sandbox(mut self, policy: crate::sandbox::Policy) -> Command {
        self.sandbox = Some(policy);
        self
    }

    /// `argv[0]` as given.
    pub fn program(&self) -> &str {
        &self.program
    }

    /// The arguments after `argv[0]`.
    pub fn arguments(&self) -> &[String] {
        &self.args
    }
}

/// The environment for a child: `parent` (usually `std::env::vars()`) minus
/// the token variables ([`token_vars`]), minus every variable that can lead
/// to the ledger ([`is_ledger_var`]: both URL variables and libpq's `PG*`),
/// minus the clock-faking and loader variables ([`is_clock_or_loader_var`]),
/// minus every name in `remove` (config `secrets`; docs/agents.md#environment), minus a
/// [`CALL_MARKER_VAR`] inherited from an enclosing call. A gate that needs
/// one of them for the project's own database gets it through `gate_env`.
pub fn child_env(
    parent: impl IntoIterator<Item = (String, String)>,
    remove: &[String],
) -> BTreeMap<String, String> {
    parent
        .into_iter()
        .filter(|(key, _)| {
            !token_vars().contains(&key.as_str())
                && !is_ledger_var(key)
                && !is_clock_or_loader_var(key)
                && !remove.iter().any(|r| r == key)
                && key != CALL_MARKER_VAR
        })
        .collect()
}

/// Whether a variable fakes the clock or loads code into every program
/// started (docs/security.md "Environment"): libfaketime's `FAKETIME` and
/// `FAKETIME_*`, the dynamic loader's `LD_PRELOAD`, `LD_LIBRARY_PATH`,
/// `LD_AUDIT` and the rest of `LD_*`, and macOS's `DYLD_*`. The one list:
/// nothing nightshift starts (agents, gates, setup, git) inherits them.
pub fn is_clock_or_loader_var(name: &str) -> bool {
    name == "FAKETIME"
        || name.starts_with("FAKETIME_")
        || name.starts_with("LD_")
        || name.starts_with("DYLD_")
}

/// Whether a variable may name, or open, the ledger (docs/agents.md, docs/ledger.md):
/// `NIGHTSHIFT_DATABASE_URL`, `DATABASE_URL`, and libpq's `PG*` variables
/// (`PGPASSWORD`, `PGHOST`, `PGUSER`, `PGPASSFILE`, `PGSERVICE`, …), which
/// sqlx reads as defaults for the ledger's connection.
pub fn is_ledger_var(name: &str) -> bool {
    name == "NIGHTSHIFT_DATABASE_URL"
        || name == "DATABASE_URL"
        || (name.starts_with("PG")
            && name.len() > 2
            && name
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_'))
}
