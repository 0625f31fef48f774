//! The one child-process runner: every agent, setup and gate command goes
//! through [`run`] (docs/loop.md#gate, docs/agents.md).
//!
//! A [`Command`] is spawned with a cleared environment plus an explicit map,
//! in its own process group, stdin null (or the prompt bytes, then closed),
//! stdout and stderr drained from the start into files through a
//! [`StreamRedactor`] (never held whole in memory; a redacted tail of each is
//! kept). On timeout or cancellation the group gets SIGTERM, a grace period,
//! then SIGKILL; the same when its output passes [`Command::max_output`].
//! After the child is gone its leftovers are swept too (see
//! [`run`]), and the reader tasks get a bounded time to finish, so a
//! grandchild holding a pipe cannot hang a night.
//!
//! It is not an agent adapter (no output parsing beyond splitting stdout into
//! lines for a callback) and it does not decide which variables are secret:
//! callers pass the environment map and the [`Redactor`].

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, BufWriter};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::secret::{Redactor, StreamRedactor, token_vars};

/// Default time between SIGTERM and SIGKILL (docs/agents.md: the timeout kills the
/// whole process group).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);

/// Default timeout of a call when the caller sets none: 60 minutes, the
/// default `agent_timeout` (docs/config.md). Every external call has one.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60 * 60);

/// Default size in bytes of the stdout and stderr tails kept in [`Outcome`].
pub const DEFAULT_TAIL_BYTES: usize = 16 * 1024;

/// Default longest stdout line, in bytes, handed whole to the line callback;
/// longer lines are cut to this length (the file still has them whole).
pub const DEFAULT_LINE_MAX: usize = 4 * 1024 * 1024;

/// How long the reader tasks may go on after the child is gone and its
/// group killed: a descendant that escaped the sweep and still holds a pipe
/// is abandoned after this.
pub const READER_LINGER: Duration = Duration::from_secs(2);

/// The variable that tags every descendant of one call (its value is unique
/// per call), so that descendants which left the process group with
/// `setsid` are still found in `/proc/PID/environ` and swept.
pub const CALL_MARKER_VAR: &str = "NIGHTSHIFT_CALL_ID";

/// Size of one read from a child's pipe, in bytes.
const READ_CHUNK: usize = 64 * 1024;

/// Failure to run a child at all. A child that ran and failed is not an
/// error: it is an [`Outcome`] with a non-zero exit code.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The program could not be started: not found, not executable, bad
    /// working directory, or the switch to `agent_user` was refused.
    #[error("cannot start `{program}` in {}: {source}\n  hint: {hint}", cwd.display())]
    Spawn {
        /// `argv[0]` as given.
        program: String,
        /// The working directory the child was to start in.
        cwd: PathBuf,
        /// What to do about it.
        hint: String,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// A stdout or stderr file could not be created.
    #[error("cannot create the output file {} for `{program}`: {source}", path.display())]
    OutputFile {
        /// `argv[0]` of the command whose output it was for.
        program: String,
        /// The file that could not be created.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// Waiting for the child failed (the operating system lost track of it).
    #[error("waiting for `{program}` (pid {pid}) failed: {source}")]
    Wait {
        /// `argv[0]`.
        program: String,
        /// The child's process id.
        pid: u32,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
}

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

/// What to run and how: a builder consumed by [`run`].
///
/// The environment always starts empty: set it with [`Command::env_map`]
/// (usually from [`child_env`]) and [`Command::env`]. `GIT_TERMINAL_PROMPT=0`
/// is always set, `LANG=C.UTF-8` when the map has no `LANG`.
pub struct Command {
    program: String,
    args: Vec<String>,
    cwd: Option<PathBuf>,
    env: BTreeMap<String, String>,
    stdin: Option<Vec<u8>>,
    timeout: Duration,
    grace: Duration,
    stdout_path: Option<PathBuf>,
    stderr_path: Option<PathBuf>,
    tail_bytes: usize,
    max_output: Option<u64>,
    line_max: usize,
    json_lines: bool,
    on_stdout_line: Option<LineCallback>,
    run_as: Option<RunAs>,
    redactor: Redactor,
    sweep_escaped: bool,
    capture_stdout: bool,
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

    /// How many trailing bytes of each stream [`Outcome`] keeps (default
    /// [`DEFAULT_TAIL_BYTES`], 16 KiB).
    pub fn tail_bytes(mut self, bytes: usize) -> Command {
        self.tail_bytes = bytes;
        self
    }

    /// Most bytes stdout and stderr together may carry (default: no cap;
    /// config `max_agent_output` for agents, docs/config.md): past it the
    /// child's group is stopped as on a timeout, nothing more reaches the
    /// files or the line callback, the tails keep the last bytes read, and
    /// [`Outcome::output_capped`] is set.
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

    /// Whether descendants that left the process group (found by
    /// [`CALL_MARKER_VAR`]) are killed after the child exits (default true).
    /// Turn it off only for a command whose job is to start a daemon that
    /// must outlive it, such as `pg_ctl start`.
    pub fn sweep_escaped(mut self, sweep: bool) -> Command {
        self.sweep_escaped = sweep;
        self
    }

    /// Keeps the whole of stdout, raw (before redaction), in
    /// [`Outcome::stdout`] (default false). For short-lived tools whose
    /// output is data nightshift reads (`git`, `gh auth token`,
    /// `pg_config`), never for agents, whose output may be large.
    pub fn capture_stdout(mut self, capture: bool) -> Command {
        self.capture_stdout = capture;
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

/// How one call ended. A non-zero exit is an outcome, not an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Exit code when the child exited normally.
    pub exit_code: Option<i32>,
    /// Signal number when the child was killed by a signal (ours on timeout
    /// or cancellation: 15 or 9).
    pub signal: Option<i32>,
    /// The timeout elapsed and the child was killed.
    pub timed_out: bool,
    /// The cancellation token fired and the child was killed.
    pub cancelled: bool,
    /// Its output passed [`Command::max_output`] and the child was killed.
    pub output_capped: bool,
    /// Wall-clock time from spawn to the child's exit.
    pub duration: Duration,
    /// The last bytes (at most the tail size) of stdout, redacted, lossy UTF-8.
    pub stdout_tail: String,
    /// The last bytes (at most the tail size) of stderr, redacted, lossy UTF-8.
    pub stderr_tail: String,
    /// The file holding all of stdout (redacted), if one was asked for.
    pub stdout_path: Option<PathBuf>,
    /// The file holding all of stderr (redacted), if one was asked for.
    pub stderr_path: Option<PathBuf>,
    /// Bytes the child wrote to stdout (before redaction).
    pub stdout_bytes: u64,
    /// Bytes the child wrote to stderr (before redaction).
    pub stderr_bytes: u64,
    /// All of stdout, raw, when [`Command::capture_stdout`] asked for it;
    /// empty otherwise.
    pub stdout: Vec<u8>,
}

impl Outcome {
    /// An outcome as a call that ran for a second would have it, for the
    /// adapters' unit tests.
    #[cfg(test)]
    pub(crate) fn fake(exit_code: Option<i32>, signal: Option<i32>, stderr: &str) -> Outcome {
        Outcome {
            exit_code,
            signal,
            timed_out: false,
            cancelled: false,
            output_capped: false,
            duration: Duration::from_secs(1),
            stdout_tail: String::new(),
            stderr_tail: stderr.to_string(),
            stdout_path: None,
            stderr_path: None,
            stdout_bytes: 0,
            stderr_bytes: 0,
            stdout: Vec::new(),
        }
    }

    /// Exited by itself with code 0.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out && !self.cancelled && !self.output_capped
    }
}

/// The environment for a child: `parent` (usually `std::env::vars()`) minus
/// the token variables ([`token_vars`]), minus every variable that can lead
/// to the ledger ([`is_ledger_var`]: both URL variables and libpq's `PG*`),
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
                && !remove.iter().any(|r| r == key)
                && key != CALL_MARKER_VAR
        })
        .collect()
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

/// Makes this process not dumpable (`PR_SET_DUMPABLE` 0), as `ssh-agent`
/// does: the kernel then hands `/proc/<pid>/environ`, `mem`, `maps` and `fd`
/// to root and refuses `ptrace` by anyone without `CAP_SYS_PTRACE`. An agent
/// running as the same user can then read neither nightshift's environment
/// nor its memory, where the token and the ledger's URL live (docs/agents.md#environment). Its
/// children are not affected (exec makes them dumpable again); the cost is
/// that nightshift leaves no core dump. Call once at start-up.
///
/// # Errors
/// The `prctl` error (none is expected on Linux).
pub fn become_undumpable() -> io::Result<()> {
    nix::sys::prctl::set_dumpable(false).map_err(io::Error::from)
}

/// Makes this process a child subreaper (`PR_SET_CHILD_SUBREAPER`), so that
/// descendants orphaned by their parent (a daemonising `setsid … &`) are
/// reparented to nightshift instead of init, where [`run`] can find and reap
/// them. Call once at start-up; calling again is harmless.
///
/// # Errors
/// The `prctl` error (only on kernels older than 3.4).
pub fn become_subreaper() -> io::Result<()> {
    nix::sys::prctl::set_child_subreaper(true).map_err(io::Error::from)
}

/// Runs `cmd` to completion, timeout or cancellation and reports how it
/// ended (docs/agents.md).
///
/// - Spawned with `process_group(0)`, a cleared environment plus the map,
///   `GIT_TERMINAL_PROMPT=0`, `LANG=C.UTF-8` if unset, and a unique
///   [`CALL_MARKER_VAR`]; stdin null unless bytes were given.
/// - stdout and stderr are read from the start (a full pipe would block the
///   child) and streamed through the redactor into the files.
/// - On timeout or cancellation: SIGTERM to the group, the grace period,
///   SIGKILL to the group, reap.
/// - After the child is gone, in every case, its leftovers are swept: the
///   process group, every process whose `/proc/PID/environ` carries this
///   call's marker (descendants that left the group with `setsid`), and
///   every child reparented to us (see [`become_subreaper`]) since the call
///   began from another session (a `setsid` daemon that cleared its
///   environment), get SIGTERM, the grace period, SIGKILL. Zombies
///   reparented to us are reaped. A descendant that left the group but not
///   our session and cleared or overwrote its environment still escapes the
///   sweep; its pipes are then abandoned after [`READER_LINGER`].
/// - If the future is dropped before the end, the group and the marked
///   processes get SIGKILL.
///
/// # Errors
/// [`ProcessError::OutputFile`] when an output file cannot be created,
/// [`ProcessError::Spawn`] when the program cannot be started (with a hint),
/// [`ProcessError::Wait`] when waiting for it fails.
pub async fn run(cmd: Command, cancel: &CancellationToken) -> Result<Outcome, ProcessError> {
    let span = tracing::info_span!(
        "process",
        program = %cmd.program,
        cwd = %cmd.cwd.as_deref().unwrap_or(Path::new(".")).display(),
        timeout_s = cmd.timeout.as_secs_f64(),
    );
    run_in_span(cmd, cancel).instrument(span).await
}

/// [`run`] for a caller that is not async (`git`, `gh auth token`): the
/// same runner, driven to the end on a thread of its own with a
/// single-threaded runtime, so that it works from plain threads, from
/// `block_in_place` and from inside a runtime alike. The child is stopped
/// (TERM, grace, KILL) as on cancellation as soon as `stop` turns true,
/// which is looked at every [`STOP_POLL`].
///
/// # Errors
/// As [`run`]; a runtime that cannot be built (no file descriptors left) is
/// [`ProcessError::Wait`].
pub fn run_blocking(cmd: Command, stop: Option<Arc<AtomicBool>>) -> Result<Outcome, ProcessError> {
    let program = cmd.program.clone();
    let runtime_error = |source: io::Error| ProcessError::Wait {
        program: program.clone(),
        pid: 0,
        source,
    };
    let driver = move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(runtime.block_on(async move {
            let cancel = CancellationToken::new();
            let outcome = run(cmd, &cancel);
            tokio::pin!(outcome);
            loop {
                tokio::select! {
                    ended = &mut outcome => return ended,
                    () = tokio::time::sleep(STOP_POLL) => {
                        if stop.as_ref().is_some_and(|s| s.load(Ordering::SeqCst)) {
                            cancel.cancel();
                        }
                    }
                }
            }
        }))
    };
    let thread = std::thread::Builder::new()
        .name("process".into())
        .spawn(driver)
        .map_err(runtime_error)?;
    match thread.join() {
        Ok(result) => result.map_err(runtime_error)?,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// How often [`run_blocking`] looks at its stop flag.
pub const STOP_POLL: Duration = Duration::from_millis(50);

/// How a wait for the child ended other than by its exit.
enum Ended {
    TimedOut,
    Cancelled,
    OverCap,
}

/// The output both streams of one child may still carry
/// ([`Command::max_output`]), shared by their readers.
struct OutputBudget {
    left: std::sync::atomic::AtomicU64,
    /// Fired once the budget is spent: the child is stopped.
    spent: CancellationToken,
}

impl OutputBudget {
    /// Takes `n` bytes; false (and `spent` fired) when they do not fit.
    fn take(&self, n: u64) -> bool {
        use std::sync::atomic::Ordering;
        let fits = self
            .left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                left.checked_sub(n)
            })
            .is_ok();
        if !fits {
            self.left.store(0, Ordering::SeqCst);
            self.spent.cancel();
        }
        fits
    }
}

/// Runs `cmd` inside its `tracing` span: spawns it in its own process
/// group, streams its output, waits for its exit, the timeout, `cancel` or
/// the output cap (stopping the group when it did not exit), sweeps escaped
/// descendants and gathers the [`Outcome`].
async fn run_in_span(
    mut cmd: Command,
    cancel: &CancellationToken,
) -> Result<Outcome, ProcessError> {
    let marker = uuid::Uuid::new_v4().simple().to_string();
    let stdout_file = open_output(&cmd.program, cmd.stdout_path.as_deref()).await?;
    let stderr_file = open_output(&cmd.program, cmd.stderr_path.as_deref()).await?;

    let mut command = build_command(&cmd, &marker);
    let started = Instant::now();
    let (mut child, pid, mut guard) = spawn_guarded(&mut command, &cmd, &marker)?;
    tracing::debug!(pid, "spawned");

    let budget = cmd.max_output.map(|max| {
        std::sync::Arc::new(OutputBudget {
            left: max.into(),
            spent: CancellationToken::new(),
        })
    });
    let over_cap = budget
        .as_ref()
        .map_or_else(CancellationToken::new, |b| b.spent.clone());
    let stop_readers = CancellationToken::new();
    // If this future is dropped, the readers stop too instead of waiting for
    // a pipe an escaped descendant may hold.
    let _stop_readers_on_drop = stop_readers.clone().drop_guard();
    let streams = Streams::start(
        &mut child,
        &mut cmd,
        (stdout_file, stderr_file),
        budget,
        &stop_readers,
    );
    // Fields, not the whole `cmd`: a borrow of it held across the wait
    // would make this future not `Send` (its line callback is not `Sync`).
    let ended = Waited {
        cancel,
        over_cap: &over_cap,
        guard: &guard,
        pid,
        program: &cmd.program,
        timeout: cmd.timeout,
        grace: cmd.grace,
    };
    let (status, timed_out, cancelled) = ended.wait(&mut child).await?;
    let duration = started.elapsed();

    guard.sweep(cmd.grace).await;
    drop(guard);
    let (stdout, stderr) = streams.finish(&stop_readers).await;

    let outcome = Outcome {
        exit_code: status.and_then(|s| s.code()),
        signal: status.and_then(|s| s.signal()),
        timed_out,
        cancelled,
        output_capped: over_cap.is_cancelled(),
        duration,
        stdout_tail: stdout.tail,
        stderr_tail: stderr.tail,
        stdout_path: cmd.stdout_path,
        stderr_path: cmd.stderr_path,
        stdout_bytes: stdout.bytes,
        stderr_bytes: stderr.bytes,
        stdout: stdout.whole,
    };
    tracing::info!(
        exit_code = ?outcome.exit_code,
        signal = ?outcome.signal,
        timed_out,
        cancelled,
        duration_s = duration.as_secs_f64(),
        stdout_bytes = outcome.stdout_bytes,
        stderr_bytes = outcome.stderr_bytes,
        "finished"
    );
    Ok(outcome)
}

/// Spawns `command` (built from `cmd` with this call's `marker`) and the
/// guard that kills its process group, and with [`Command::sweep_escaped`]
/// its escaped descendants, when it is dropped. Returns the child, its pid
/// and the guard.
///
/// # Errors
/// [`ProcessError`] when it cannot be started or was reaped at once.
fn spawn_guarded(
    command: &mut tokio::process::Command,
    cmd: &Command,
    marker: &str,
) -> Result<(tokio::process::Child, u32, KillGuard), ProcessError> {
    // Our children now: a child of ours that is new after the call and left
    // our session is one of its descendants, reparented to us (see
    // `KillGuard::marked`).
    let children_before = Some(procfs::own_children(std::process::id() as i32));
    let child = command.spawn().map_err(|source| spawn_error(cmd, source))?;
    let Some(pid) = child.id() else {
        return Err(ProcessError::Wait {
            program: cmd.program.clone(),
            pid: 0,
            source: io::Error::other("the child was reaped before its pid could be read"),
        });
    };
    let guard = KillGuard {
        pgid: pid as i32,
        marker: cmd.sweep_escaped.then(|| marker.to_string()),
        children_before: if cmd.sweep_escaped {
            children_before
        } else {
            None
        },
        swept: false,
    };
    Ok((child, pid, guard))
}

/// The tasks that read a child's stdout and stderr and write its stdin.
struct Streams {
    stdout: Option<JoinHandle<StreamResult>>,
    stderr: Option<JoinHandle<StreamResult>>,
    stdin: Option<JoinHandle<()>>,
}

impl Streams {
    /// Starts them: each stream redacted into its file (`files`: stdout's,
    /// stderr's), its tail and the shared output `budget`; stdout also to
    /// the line callback and, when asked, kept whole; stdin given its bytes.
    /// They stop when `stop` fires.
    fn start(
        child: &mut tokio::process::Child,
        cmd: &mut Command,
        files: (Option<tokio::fs::File>, Option<tokio::fs::File>),
        budget: Option<Arc<OutputBudget>>,
        stop: &CancellationToken,
    ) -> Streams {
        let (stdout_file, stderr_file) = files;
        let stdout = child.stdout.take().map(|pipe| {
            tokio::spawn(read_stream(
                pipe,
                StreamSink {
                    redactor: cmd.redactor.stream(),
                    file: stdout_file,
                    tail: Tail::new(cmd.tail_bytes),
                    lines: cmd.on_stdout_line.take().map(|callback| {
                        LineSplitter::new(callback, cmd.line_max).json(cmd.json_lines)
                    }),
                    bytes: 0,
                    whole: cmd.capture_stdout.then(Vec::new),
                    budget: budget.clone(),
                },
                stop.clone(),
            ))
        });
        let stderr = child.stderr.take().map(|pipe| {
            tokio::spawn(read_stream(
                pipe,
                StreamSink {
                    redactor: cmd.redactor.stream(),
                    file: stderr_file,
                    tail: Tail::new(cmd.tail_bytes),
                    lines: None,
                    bytes: 0,
                    whole: None,
                    budget: budget.clone(),
                },
                stop.clone(),
            ))
        });
        let stdin = match (child.stdin.take(), cmd.stdin.take()) {
            (Some(mut pipe), Some(bytes)) => Some(tokio::spawn(async move {
                // A child that exits without reading its stdin gives EPIPE: not
                // an error of the call.
                if let Err(error) = pipe.write_all(&bytes).await {
                    tracing::debug!(%error, "stdin not fully written");
                }
                drop(pipe);
            })),
            _ => None,
        };
        Streams {
            stdout,
            stderr,
            stdin,
        }
    }

    /// After the child's end: stops writing stdin and gives the readers
    /// [`READER_LINGER`] to drain what is left (then `stop` ends them).
    /// Returns (stdout, stderr).
    async fn finish(self, stop: &CancellationToken) -> (StreamResult, StreamResult) {
        if let Some(writer) = self.stdin {
            writer.abort();
        }
        let linger_until = tokio::time::Instant::now() + READER_LINGER;
        let stdout = finish_reader(self.stdout, stop, linger_until).await;
        let stderr = finish_reader(self.stderr, stop, linger_until).await;
        (stdout, stderr)
    }
}

/// What ends the wait for a child besides its exit, and how to stop it.
struct Waited<'a> {
    /// The caller's cancel.
    cancel: &'a CancellationToken,
    /// Fired when the output budget is spent.
    over_cap: &'a CancellationToken,
    /// The child's process group.
    guard: &'a KillGuard,
    /// The child's pid (for errors).
    pid: u32,
    /// The program (for errors).
    program: &'a str,
    /// [`Command::timeout`].
    timeout: Duration,
    /// [`Command::grace`].
    grace: Duration,
}

impl Waited<'_> {
    /// Waits for the child's exit, [`Command::timeout`], the cancel or the
    /// output cap; a child that did not exit is stopped (its group sent
    /// SIGTERM, SIGKILL after [`Command::grace`]). Returns (exit status,
    /// timed out, cancelled).
    ///
    /// # Errors
    /// [`ProcessError::Wait`] when waiting for the child fails.
    async fn wait(
        &self,
        child: &mut tokio::process::Child,
    ) -> Result<(Option<ExitStatus>, bool, bool), ProcessError> {
        let wait_error = |source| ProcessError::Wait {
            program: self.program.to_string(),
            pid: self.pid,
            source,
        };
        let stopped = tokio::select! {
            status = child.wait() => return Ok((Some(status.map_err(wait_error)?), false, false)),
            () = tokio::time::sleep(self.timeout) => Ended::TimedOut,
            () = self.cancel.cancelled() => Ended::Cancelled,
            () = self.over_cap.cancelled() => Ended::OverCap,
        };
        let reason = match stopped {
            Ended::TimedOut => "timeout",
            Ended::OverCap => "output over its cap",
            _ => "cancelled",
        };
        tracing::info!(
            reason,
            grace_s = self.grace.as_secs_f64(),
            "stopping the process group"
        );
        let status = stop_child(child, self.guard, self.grace)
            .await
            .map_err(wait_error)?;
        Ok((
            status,
            matches!(stopped, Ended::TimedOut),
            matches!(stopped, Ended::Cancelled),
        ))
    }
}

/// The tokio command for `cmd`: cleared environment plus the map and the
/// pins, own process group, piped output.
fn build_command(cmd: &Command, marker: &str) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(&cmd.program);
    command
        .args(&cmd.args)
        .env_clear()
        .envs(&cmd.env)
        // A git asking for a password on a terminal would hang until the
        // timeout; nightshift hands credentials through helpers only.
        .env("GIT_TERMINAL_PROMPT", "0")
        .env(CALL_MARKER_VAR, marker)
        .stdin(if cmd.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group, so a timeout kills the agent and everything it
        // started with one signal.
        .process_group(0)
        .kill_on_drop(true);
    if !cmd.env.contains_key("LANG") {
        // Agents read and write UTF-8; C.UTF-8 is built into musl and glibc >= 2.35.
        command.env("LANG", "C.UTF-8");
    }
    if let Some(dir) = &cmd.cwd {
        command.current_dir(dir);
    }
    if let Some(account) = &cmd.run_as {
        command
            .uid(account.uid)
            .gid(account.gid)
            .env("HOME", &account.home)
            .env("USER", &account.user)
            .env("LOGNAME", &account.user);
    }

    command
}

/// SIGTERM to the group and marked descendants, `grace`, SIGKILL, reap.
/// `None` when the child survived SIGKILL for 10 s (uninterruptible sleep);
/// tokio reaps it later.
async fn stop_child(
    child: &mut tokio::process::Child,
    guard: &KillGuard,
    grace: Duration,
) -> io::Result<Option<ExitStatus>> {
    guard.signal_all(libc::SIGTERM);
    if let Ok(status) = tokio::time::timeout(grace, child.wait()).await {
        return status.map(Some);
    }
    guard.signal_all(libc::SIGKILL);
    match tokio::time::timeout(Duration::from_secs(10), child.wait()).await {
        Ok(status) => status.map(Some),
        Err(_) => {
            tracing::warn!(
                pgid = guard.pgid,
                "child did not die within 10 s of SIGKILL"
            );
            Ok(None)
        }
    }
}

async fn open_output(
    program: &str,
    path: Option<&Path>,
) -> Result<Option<tokio::fs::File>, ProcessError> {
    let Some(path) = path else { return Ok(None) };
    tokio::fs::File::create(path)
        .await
        .map(Some)
        .map_err(|source| ProcessError::OutputFile {
            program: program.to_owned(),
            path: path.to_owned(),
            source,
        })
}

fn spawn_error(cmd: &Command, source: io::Error) -> ProcessError {
    let cwd = match &cmd.cwd {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
    };
    let program = &cmd.program;
    let hint = if !cwd.is_dir() {
        format!(
            "the working directory {} does not exist or is not a directory",
            cwd.display()
        )
    } else if source.kind() == io::ErrorKind::NotFound {
        if program.contains('/') {
            format!("there is no file `{program}`; check the path in the config")
        } else {
            let path = cmd
                .env
                .get("PATH")
                .map_or("(PATH is not set for the child)", String::as_str);
            format!(
                "`{program}` is not on the child's PATH ({path}); install it or give its full path"
            )
        }
    } else if source.kind() == io::ErrorKind::PermissionDenied {
        format!(
            "`{program}` is not executable by this user: `chmod +x` it, or check that its filesystem is not mounted noexec"
        )
    } else if cmd.run_as.is_some() && source.raw_os_error() == Some(libc::EPERM) {
        "running agents as `agent_user` needs nightshift to run as root".to_owned()
    } else {
        format!("try running `{program}` by hand in {}", cwd.display())
    };
    ProcessError::Spawn {
        program: program.clone(),
        cwd,
        hint,
        source,
    }
}

/// Where one output stream goes.
struct StreamSink {
    redactor: StreamRedactor,
    file: Option<tokio::fs::File>,
    tail: Tail,
    lines: Option<LineSplitter>,
    bytes: u64,
    /// Every raw byte, when the whole stream is kept.
    whole: Option<Vec<u8>>,
    budget: Option<std::sync::Arc<OutputBudget>>,
}

/// What a reader hands back.
#[derive(Default)]
struct StreamResult {
    tail: String,
    bytes: u64,
    whole: Vec<u8>,
}

/// Reads `pipe` until EOF, an error or `stop`, then flushes everything.
async fn read_stream<R>(mut pipe: R, sink: StreamSink, stop: CancellationToken) -> StreamResult
where
    R: AsyncRead + Unpin,
{
    let StreamSink {
        mut redactor,
        file,
        mut tail,
        mut lines,
        mut bytes,
        mut whole,
        budget,
    } = sink;
    let mut file = file.map(|file| BufWriter::with_capacity(READ_CHUNK, file));
    let mut file_failed = false;
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        let read = tokio::select! {
            // Reading from a pipe is cancel-safe: a cancelled read loses nothing.
            read = pipe.read(&mut buf) => read,
            () = stop.cancelled() => {
                tracing::warn!("abandoning a pipe still held open by a descendant");
                break;
            }
        };
        let n = match read {
            Ok(0) => break,
            Ok(n) => n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => {
                tracing::warn!(%error, "reading child output failed");
                break;
            }
        };
        bytes += n as u64;
        if let Some(whole) = whole.as_mut() {
            whole.extend_from_slice(&buf[..n]);
        }
        let clean = redactor.push(&buf[..n]);
        if budget.as_ref().is_some_and(|b| !b.take(n as u64)) {
            // Over the cap: only the tail still moves (the child is being
            // stopped), so the files and memory stop growing.
            tail.push(&clean);
            continue;
        }
        deliver(&clean, &mut file, &mut file_failed, &mut tail, &mut lines).await;
    }
    let clean = redactor.finish();
    deliver(&clean, &mut file, &mut file_failed, &mut tail, &mut lines).await;
    if let Some(lines) = lines.as_mut() {
        lines.finish();
    }
    if let Some(file) = file.as_mut()
        && !file_failed
        && let Err(error) = file.flush().await
    {
        tracing::warn!(%error, "flushing child output file failed");
    }
    StreamResult {
        tail: tail.into_string(),
        bytes,
        whole: whole.unwrap_or_default(),
    }
}

async fn deliver(
    clean: &[u8],
    file: &mut Option<BufWriter<tokio::fs::File>>,
    file_failed: &mut bool,
    tail: &mut Tail,
    lines: &mut Option<LineSplitter>,
) {
    if clean.is_empty() {
        return;
    }
    if let Some(file) = file.as_mut()
        && !*file_failed
        && let Err(error) = file.write_all(clean).await
    {
        // A full disk must not stop the child or the run: keep reading (or
        // the child blocks) and keep the tail.
        tracing::warn!(%error, "writing child output file failed; keeping only the tail");
        *file_failed = true;
    }
    tail.push(clean);
    if let Some(lines) = lines.as_mut() {
        lines.push(clean);
    }
}

/// Waits for a reader until `linger_until`, then tells it to stop and takes
/// what it has.
async fn finish_reader(
    reader: Option<JoinHandle<StreamResult>>,
    stop: &CancellationToken,
    linger_until: tokio::time::Instant,
) -> StreamResult {
    let Some(mut reader) = reader else {
        return StreamResult::default();
    };
    let joined = match tokio::time::timeout_at(linger_until, &mut reader).await {
        Ok(joined) => joined,
        Err(_) => {
            stop.cancel();
            reader.await
        }
    };
    joined.unwrap_or_else(|error| {
        tracing::warn!(%error, "output reader task failed");
        StreamResult::default()
    })
}

/// The last `cap` bytes of a stream.
struct Tail {
    cap: usize,
    buf: VecDeque<u8>,
}

impl Tail {
    fn new(cap: usize) -> Tail {
        Tail {
            cap,
            buf: VecDeque::with_capacity(cap.min(READ_CHUNK)),
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        if self.cap == 0 {
            return;
        }
        let bytes = &bytes[bytes.len().saturating_sub(self.cap)..];
        let overflow = (self.buf.len() + bytes.len()).saturating_sub(self.cap);
        self.buf.drain(..overflow);
        self.buf.extend(bytes);
    }

    /// Lossy UTF-8, without a character cut in half at the start.
    fn into_string(self) -> String {
        let bytes: Vec<u8> = self.buf.into();
        let start = bytes
            .iter()
            .take(3)
            .take_while(|b| (**b & 0xC0) == 0x80)
            .count();
        String::from_utf8_lossy(&bytes[start..]).into_owned()
    }
}

/// Splits a byte stream into lines for the callback.
struct LineSplitter {
    callback: LineCallback,
    partial: Vec<u8>,
    max: usize,
    /// The current line was longer than `max` and has been delivered cut.
    overflowed: bool,
    /// Lines are JSON: an overlong one is shortened, not cut.
    json: bool,
    /// The overlong JSON line being shortened.
    shortening: Option<JsonShortener>,
}

impl LineSplitter {
    fn new(callback: LineCallback, max: usize) -> LineSplitter {
        LineSplitter {
            callback,
            partial: Vec::new(),
            max,
            overflowed: false,
            json: false,
            shortening: None,
        }
    }

    fn json(mut self, json: bool) -> LineSplitter {
        self.json = json;
        self
    }

    fn push(&mut self, mut bytes: &[u8]) {
        while let Some(newline) = memchr::memchr(b'\n', bytes) {
            if let Some(mut sh) = self.shortening.take() {
                sh.push(&bytes[..newline]);
                self.end_shortening(sh);
            } else if !self.overflowed {
                self.append(&bytes[..newline]);
                self.emit();
            }
            self.partial.clear();
            self.overflowed = false;
            bytes = &bytes[newline + 1..];
        }
        if let Some(sh) = self.shortening.as_mut() {
            sh.push(bytes);
            return;
        }
        if !self.overflowed {
            let room = self.max.saturating_sub(self.partial.len());
            self.append(bytes);
            if self.partial.len() >= self.max {
                if self.json {
                    // Everything of the line so far goes through the
                    // shortener; the rest of it follows as it comes.
                    let mut sh = JsonShortener::new(self.max);
                    sh.push(&self.partial);
                    sh.push(&bytes[bytes.len().min(room)..]);
                    self.partial.clear();
                    self.shortening = Some(sh);
                    return;
                }
                self.emit();
                self.partial.clear();
                self.overflowed = true;
            }
        }
    }

    fn append(&mut self, bytes: &[u8]) {
        let room = self.max.saturating_sub(self.partial.len());
        self.partial
            .extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    fn emit(&mut self) {
        let line = self.partial.strip_suffix(b"\r").unwrap_or(&self.partial);
        (self.callback)(&String::from_utf8_lossy(line));
    }

    /// Hands over a shortened line, or its first `max` bytes when it could
    /// not be shortened enough.
    fn end_shortening(&mut self, sh: JsonShortener) {
        let out = sh.finish();
        let line = out.strip_suffix(b"\r").unwrap_or(&out);
        let line = &line[..line.len().min(self.max)];
        (self.callback)(&String::from_utf8_lossy(line));
    }

    fn finish(&mut self) {
        if let Some(sh) = self.shortening.take() {
            self.end_shortening(sh);
        } else if !self.overflowed && !self.partial.is_empty() {
            self.emit();
        }
        self.partial.clear();
    }
}

/// Shortens the long string values of one JSON text as it streams by: each
/// string keeps its first and last `keep` bytes (a sixteenth of the line
/// cap) around a `…[N bytes cut]…` note, never splitting an escape sequence
/// (a surrogate pair included) or a UTF-8 character, so the result is the
/// same JSON with less text: an event's small fields (type, usage, exit
/// code) survive a 50 MiB tool output, and a final message keeps its last
/// words (where verdicts and blocks are). Bytes outside strings are kept;
/// once the output exceeds the cap it stops growing and the caller cuts it.
struct JsonShortener {
    out: Vec<u8>,
    max: usize,
    keep: usize,
    in_string: bool,
    /// A pending escape sequence (`\n`, `\u00e9`, `\ud83d\ude00`): its
    /// bytes and how many.
    escape: [u8; 12],
    escape_len: usize,
    /// Content bytes of the current string written to `out`.
    head: usize,
    /// The head is closed: later bytes of the string go to `tail`.
    head_closed: bool,
    /// The last bytes of the current string after its head, from
    /// `tail_start` on; always starts at a whole escape sequence or
    /// character.
    tail: Vec<u8>,
    /// Where the tail begins in `tail` (dropped bytes before it are removed
    /// in bulk now and then).
    tail_start: usize,
    /// Bytes of the current string dropped between head and tail.
    dropped: usize,
}

impl JsonShortener {
    fn new(max: usize) -> JsonShortener {
        JsonShortener {
            out: Vec::new(),
            max,
            keep: (max / 16).max(16),
            in_string: false,
            escape: [0; 12],
            escape_len: 0,
            head: 0,
            head_closed: false,
            tail: Vec::new(),
            tail_start: 0,
            dropped: 0,
        }
    }

    fn push(&mut self, mut bytes: &[u8]) {
        // Runs without a quote or backslash are handled whole: a 50 MiB
        // string is a few slice copies, not 50 million steps.
        while let Some(&first) = bytes.first() {
            // A plain loop: the runs are short, and a memchr call costs more
            // than it saves on them.
            let n = if !self.in_string {
                bytes.iter().position(|&c| c == b'"').unwrap_or(bytes.len())
            } else if self.escape_len == 0 {
                bytes
                    .iter()
                    .position(|&c| c == b'"' || c == b'\\')
                    .unwrap_or(bytes.len())
            } else {
                0
            };
            if n == 0 {
                self.byte(first);
                bytes = &bytes[1..];
            } else {
                if self.in_string {
                    self.run(&bytes[..n]);
                } else {
                    self.write(&bytes[..n]);
                }
                bytes = &bytes[n..];
            }
        }
    }

    /// A run of plain string content (no quote, no backslash): any
    /// character boundary in it is a unit boundary.
    fn run(&mut self, mut run: &[u8]) {
        if !self.head_closed {
            let mut take = self.keep.saturating_sub(self.head).min(run.len());
            while take < run.len() && run[take] & 0xC0 == 0x80 {
                take += 1;
            }
            self.head += take;
            self.write(&run[..take]);
            run = &run[take..];
            if run.is_empty() {
                return;
            }
            self.head_closed = true;
        }
        if run.len() >= self.keep {
            // All the tail so far goes; the run's last bytes are the tail.
            let mut start = run.len() - self.keep;
            while start < run.len() && run[start] & 0xC0 == 0x80 {
                start += 1;
            }
            self.dropped += self.tail_len() + start;
            self.tail.clear();
            self.tail_start = 0;
            self.tail.extend_from_slice(&run[start..]);
        } else {
            self.tail.extend_from_slice(run);
            self.trim_tail();
        }
    }

    fn tail_len(&self) -> usize {
        self.tail.len() - self.tail_start
    }

    /// Drops the tail's first `n` bytes.
    fn drop_tail(&mut self, n: usize) {
        self.tail_start += n;
        self.dropped += n;
        if self.tail_start > self.keep {
            self.tail.drain(..self.tail_start);
            self.tail_start = 0;
        }
    }

    /// Lets the tail grow to twice `keep` before trimming it back (a
    /// trim scans what it drops), so each byte is looked at about once.
    fn trim_tail(&mut self) {
        if self.tail_len() > 2 * self.keep {
            self.cut_tail();
        }
    }

    /// Drops whole units from the tail's front until it holds at most
    /// `keep` bytes.
    fn cut_tail(&mut self) {
        let t = &self.tail[self.tail_start..];
        if t.len() <= self.keep {
            return;
        }
        let excess = t.len() - self.keep;
        let mut i = 0;
        while i < excess {
            // Plain ASCII, the common case, in a tight loop.
            while i < excess && t[i] < 0x80 && t[i] != b'\\' {
                i += 1;
            }
            if i < excess {
                i += unit_len(&t[i..]);
            }
        }
        self.drop_tail(i.min(t.len()));
    }

    /// One byte of structure, of an escape sequence, or a quote.
    fn byte(&mut self, b: u8) {
        if !self.in_string {
            self.write(&[b]);
            if b == b'"' {
                self.in_string = true;
                self.head = 0;
                self.head_closed = false;
                self.tail.clear();
                self.tail_start = 0;
                self.dropped = 0;
            }
            return;
        }
        if self.escape_len > 0 {
            self.escape[self.escape_len] = b;
            self.escape_len += 1;
            let e = &self.escape[..self.escape_len];
            let high = |h: &[u8]| {
                matches!(
                    std::str::from_utf8(h)
                        .ok()
                        .and_then(|h| u16::from_str_radix(h, 16).ok()),
                    Some(0xD800..=0xDBFF)
                )
            };
            let done = match e.len() {
                2 => e[1] != b'u',
                6 => !high(&e[2..6]),
                // A high surrogate is one unit with the low one after it.
                7 if b != b'\\' => true,
                8 if b != b'u' => true,
                12 => true,
                _ => false,
            };
            if done {
                let (unit, n) = (self.escape, self.escape_len);
                self.escape_len = 0;
                if n == 7 || n == 8 {
                    // Not a pair after all: the surrogate stands alone and
                    // the bytes after it are read again.
                    self.content(&unit[..6]);
                    for &c in &unit[6..n] {
                        self.byte(c);
                    }
                } else {
                    self.content(&unit[..n]);
                }
            }
            return;
        }
        match b {
            b'\\' => {
                self.escape[0] = b;
                self.escape_len = 1;
            }
            b'"' => {
                self.end_string();
                self.write(b"\"");
                self.in_string = false;
            }
            _ => self.content(&[b]),
        }
    }

    /// One whole unit of string content: an escape sequence or one byte.
    fn content(&mut self, unit: &[u8]) {
        // A UTF-8 continuation byte stays with the character it continues.
        let continues = unit.len() == 1 && unit[0] & 0xC0 == 0x80;
        if !self.head_closed && (self.head < self.keep || continues) {
            self.head += unit.len();
            self.write(unit);
            return;
        }
        self.head_closed = true;
        self.tail.extend_from_slice(unit);
        self.trim_tail();
    }

    fn write(&mut self, bytes: &[u8]) {
        if self.out.len() <= self.max {
            self.out.extend_from_slice(bytes);
        }
    }

    /// The shortened text; a string the text ends in stays unfinished, as
    /// it came.
    fn finish(mut self) -> Vec<u8> {
        if self.in_string {
            self.end_string();
        }
        self.out
    }

    /// Writes what the current string kept of its end, after a note of the
    /// bytes cut from its middle (if any).
    fn end_string(&mut self) {
        self.cut_tail();
        if self.dropped > 0 {
            let note = format!("…[{} bytes cut]…", self.dropped);
            self.write(note.as_bytes());
        }
        let tail = std::mem::take(&mut self.tail);
        self.write(&tail[self.tail_start..]);
    }
}

/// The length of the string unit `t` begins with: an escape sequence (a
/// surrogate pair is one), or a UTF-8 character with its continuation bytes.
fn unit_len(t: &[u8]) -> usize {
    let n = match t.first() {
        Some(b'\\') => {
            let is_u = t.get(1) == Some(&b'u');
            let high = is_u
                && matches!(t.get(2), Some(b'd' | b'D'))
                && matches!(t.get(3), Some(b'8' | b'9' | b'a' | b'b' | b'A' | b'B'));
            if high && t.get(6) == Some(&b'\\') && t.get(7) == Some(&b'u') {
                12
            } else if is_u {
                6
            } else {
                2
            }
        }
        Some(_) => 1 + t.iter().skip(1).take_while(|c| **c & 0xC0 == 0x80).count(),
        None => 0,
    };
    n.clamp(1, t.len().max(1))
}

/// Signals one call's process group and its marked descendants; on drop
/// (the `run` future dropped mid-call) sends them SIGKILL.
struct KillGuard {
    pgid: i32,
    /// This call's marker value, or `None` when escaped descendants are
    /// left alone ([`Command::sweep_escaped`]).
    marker: Option<String>,
    /// Our children when the call started (`None`: escaped descendants are
    /// left alone).
    children_before: Option<Vec<i32>>,
    /// The sweep saw nothing left: signalling the group id again could hit
    /// an unrelated group that reused the number.
    swept: bool,
}

impl KillGuard {
    /// Sends `signal` to the group and to every marked process; returns how
    /// many targets (the group counts as one) still existed.
    fn signal_all(&self, signal: i32) -> usize {
        let mut targets = 0;
        // SAFETY: kill(2) with a negative pid signals a process group; it
        // touches no memory.
        if unsafe { libc::kill(-self.pgid, signal) } == 0 {
            targets += 1;
        }
        for pid in self.marked() {
            // SAFETY: as above, for one process.
            if unsafe { libc::kill(pid, signal) } == 0 {
                targets += 1;
            }
        }
        targets
    }

    /// Live processes of this call outside its group: those carrying its
    /// marker, and those reparented to us (we are a subreaper) since it
    /// started after leaving our session — a daemon that ran `setsid` and
    /// cleared its environment carries no marker, and may wait for the
    /// token in the environment of the next `git` (docs/agents.md#environment).
    fn marked(&self) -> Vec<i32> {
        let mut pids = match &self.marker {
            Some(marker) => procfs::with_env_var(CALL_MARKER_VAR, marker),
            None => Vec::new(),
        };
        if let Some(before) = &self.children_before {
            // An orphan carrying another call's marker is that call's (with
            // several workers, calls run side by side: a daemon one started,
            // such as the embedded database, is not another's to sweep).
            let theirs = |p: &i32| {
                procfs::env_var(*p, CALL_MARKER_VAR)
                    .is_some_and(|m| self.marker.as_deref() != Some(m.as_str()))
            };
            pids.extend(
                procfs::escaped_orphans(before)
                    .into_iter()
                    .filter(|p| !pids.contains(p) && !theirs(p))
                    .collect::<Vec<_>>(),
            );
        }
        pids
    }

    /// Whether anything of this call is left to wait for: a live member of
    /// the group or a marked process. Zombies do not count.
    fn anything_alive(&self) -> bool {
        procfs::group_has_live_member(self.pgid) || !self.marked().is_empty()
    }

    /// After the child is gone: TERM, grace, KILL for whatever is left, and
    /// reap reparented zombies.
    async fn sweep(&mut self, grace: Duration) {
        self.swept = self.terminate_leftovers(grace).await;
        // A leftover that turned zombie after the last look is reaped here.
        procfs::reap_orphans();
    }

    /// TERM, grace, KILL; true when nothing of the call is left alive.
    async fn terminate_leftovers(&self, grace: Duration) -> bool {
        if self.signal_all(libc::SIGTERM) == 0 || !self.anything_alive() {
            return true;
        }
        tracing::info!(pgid = self.pgid, "terminating leftover descendants");
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(25)).await;
            procfs::reap_orphans();
            if !self.anything_alive() {
                return true;
            }
        }
        tracing::warn!(
            pgid = self.pgid,
            "leftover descendants survived SIGTERM; sending SIGKILL"
        );
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            self.signal_all(libc::SIGKILL);
            tokio::time::sleep(Duration::from_millis(20)).await;
            procfs::reap_orphans();
            if !self.anything_alive() {
                return true;
            }
            if Instant::now() >= deadline {
                tracing::warn!(
                    pgid = self.pgid,
                    "leftover descendants survived SIGKILL for 2 s"
                );
                return false;
            }
        }
    }
}

impl Drop for KillGuard {
    fn drop(&mut self) {
        // When `run` was dropped mid-call this is the only cleanup there is.
        if !self.swept {
            self.signal_all(libc::SIGKILL);
        }
    }
}

/// Reading `/proc` (Linux) for the sweep.
mod procfs {
    use std::fs;

    /// Fields of `/proc/PID/stat` the sweep needs.
    pub(super) struct Stat {
        pub state: u8,
        pub ppid: i32,
        pub pgrp: i32,
        pub session: i32,
    }

    /// Parses `/proc/PID/stat`; the command name may contain spaces and
    /// parentheses, so fields are counted after its last `)`.
    pub(super) fn stat(pid: i32) -> Option<Stat> {
        let text = fs::read(format!("/proc/{pid}/stat")).ok()?;
        let close = text.iter().rposition(|b| *b == b')')?;
        let rest = std::str::from_utf8(&text[close + 1..]).ok()?;
        let mut fields = rest.split_ascii_whitespace();
        let state = fields.next()?.as_bytes().first().copied()?;
        let ppid = fields.next()?.parse().ok()?;
        let pgrp = fields.next()?.parse().ok()?;
        let session = fields.next()?.parse().ok()?;
        Some(Stat {
            state,
            ppid,
            pgrp,
            session,
        })
    }

    fn pids() -> impl Iterator<Item = i32> {
        fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
    }

    /// The value of `key` in process `pid`'s initial environment, if it is
    /// readable and set.
    pub(super) fn env_var(pid: i32, key: &str) -> Option<String> {
        let env = fs::read(format!("/proc/{pid}/environ")).ok()?;
        let prefix = format!("{key}=");
        env.split(|b| *b == 0)
            .find_map(|e| e.strip_prefix(prefix.as_bytes()))
            .map(|v| String::from_utf8_lossy(v).into_owned())
    }

    /// Processes whose initial environment holds `key=value` (other users'
    /// processes are unreadable without root and skipped).
    pub(super) fn with_env_var(key: &str, value: &str) -> Vec<i32> {
        let needle = format!("{key}={value}");
        let own = std::process::id() as i32;
        pids()
            .filter(|pid| *pid != own)
            .filter(|pid| {
                fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
                    env.split(|b| *b == 0)
                        .any(|entry| entry == needle.as_bytes())
                })
            })
            .filter(|pid| stat(*pid).is_some_and(|s| s.state != b'Z'))
            .collect()
    }

    /// Whether a process group has a member that is not a zombie.
    pub(super) fn group_has_live_member(pgid: i32) -> bool {
        // SAFETY: signal 0 only checks for existence and permission.
        if unsafe { libc::kill(-pgid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
        {
            return false;
        }
        pids().any(|pid| stat(pid).is_some_and(|s| s.pgrp == pgid && s.state != b'Z'))
    }

    /// Reaps zombie children of ours that no part of nightshift waits for:
    /// orphans reparented to us as subreaper. Children nightshift spawned
    /// itself are recognisable and left to their owner's `wait`: either they
    /// lead their own group in our session (`process_group(0)`, as [`run`]
    /// does) or they stay in our group (a plain spawn). A reparented orphan
    /// is neither when it left our session (`setsid`) or sits in another
    /// process's group.
    ///
    /// [`run`]: super::run
    pub(super) fn reap_orphans() {
        let own = std::process::id() as i32;
        let Some(me) = stat(own) else { return };
        for pid in own_children(own) {
            let Some(s) = stat(pid) else { continue };
            if s.ppid != own || s.state != b'Z' {
                continue;
            }
            let spawned_by_us = (s.pgrp == pid && s.session == me.session) || s.pgrp == me.pgrp;
            if spawned_by_us {
                continue;
            }
            let mut status = 0;
            // SAFETY: waitpid on one specific zombie child of ours, without
            // blocking; `status` is a valid out pointer.
            unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        }
    }

    /// Live children of ours, not in `before`, that we did not spawn: they
    /// left our session (`setsid`) and were reparented to us as subreaper.
    /// Children nightshift spawns stay in its session (see [`reap_orphans`]).
    pub(super) fn escaped_orphans(before: &[i32]) -> Vec<i32> {
        let own = std::process::id() as i32;
        let Some(me) = stat(own) else {
            return Vec::new();
        };
        own_children(own)
            .into_iter()
            .filter(|pid| !before.contains(pid))
            .filter(|&pid| {
                stat(pid)
                    .is_some_and(|s| s.ppid == own && s.state != b'Z' && s.session != me.session)
            })
            .collect()
    }

    /// Our children: the `children` files of our threads (cheap), or, on a
    /// kernel without them, every process (callers check the parent).
    pub(super) fn own_children(own: i32) -> Vec<i32> {
        let mut children = Vec::new();
        let Ok(tasks) = fs::read_dir(format!("/proc/{own}/task")) else {
            return pids().collect();
        };
        for task in tasks.flatten() {
            match fs::read_to_string(task.path().join("children")) {
                Ok(list) => children.extend(
                    list.split_ascii_whitespace()
                        .filter_map(|pid| pid.parse::<i32>().ok()),
                ),
                // A thread that just ended has no file; a kernel without
                // CONFIG_PROC_CHILDREN has none at all.
                Err(error)
                    if error.kind() == std::io::ErrorKind::NotFound && task.path().exists() =>
                {
                    return pids().collect();
                }
                Err(_) => {}
            }
        }
        children
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn child_env_drops_tokens_removed_and_marker() {
        let parent = [
            ("PATH", "/usr/bin"),
            ("GITHUB_TOKEN", "ghp_x"),
            ("GH_TOKEN", "gho_y"),
            ("NIGHTSHIFT_DATABASE_URL", "postgres://u:p@h/db"),
            (CALL_MARKER_VAR, "abc"),
            ("HOME", "/home/me"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()));
        let env = child_env(parent, &["MY_SECRET".to_owned()]);
        assert_eq!(env.keys().collect::<Vec<_>>(), ["HOME", "PATH"]);
        // Every way to the ledger goes: both URL variables and libpq's PG*.
        let parent = [
            ("DATABASE_URL", "postgres://a@b/c"),
            ("PGPASSWORD", "pw"),
            ("PGHOST", "db"),
            ("PGSERVICEFILE", "/x"),
            ("MY_SECRET", "s"),
            ("PAGER", "less"),
            ("PG", "keep"),
            ("PGtool", "keep"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()));
        let env = child_env(parent, &["MY_SECRET".to_owned()]);
        assert_eq!(env.keys().collect::<Vec<_>>(), ["PAGER", "PG", "PGtool"]);
    }

    #[test]
    fn tail_keeps_the_last_bytes_and_skips_a_cut_character() {
        let mut tail = Tail::new(5);
        tail.push(b"abc");
        tail.push("xyé12".as_bytes());
        // The last 5 of "abcxyé12" are y, 0xC3, 0xA9, 1, 2.
        assert_eq!(tail.into_string(), "yé12");
        let mut tail = Tail::new(3);
        tail.push("aé".as_bytes());
        tail.push("é".as_bytes());
        assert_eq!(
            tail.into_string(),
            "é",
            "the dangling continuation byte is dropped"
        );
    }

    #[test]
    fn line_splitter_handles_crlf_partial_and_overlong_lines() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        let mut lines = LineSplitter::new(
            Box::new(move |line| sink.lock().unwrap().push(line.to_owned())),
            8,
        );
        lines.push(b"one\r\ntw");
        lines.push(b"o\n0123456789abcdef");
        lines.push(b"ghij\nlast");
        lines.finish();
        assert_eq!(*seen.lock().unwrap(), ["one", "two", "01234567", "last"]);
    }

    #[test]
    fn overlong_json_lines_arrive_with_their_long_strings_shortened() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        let max = 1024;
        let mut lines = LineSplitter::new(
            Box::new(move |line| sink.lock().unwrap().push(line.to_owned())),
            max,
        )
        .json(true);
        // A tool output of 100 KiB with escapes, a surrogate pair and
        // multi-byte characters everywhere, then the fields after it; fed in
        // odd-sized chunks so every unit is split across pushes somewhere.
        let body: String = (0..4000)
            .map(|i| format!("l{i}\t\"é\"\u{1F600}\\\n"))
            .collect();
        let event = serde_json::json!({"type":"item.completed","item":{"type":"command_execution","aggregated_output":body,"exit_code":3,"status":"failed"}});
        let text = format!("{event}\r\n{{\"type\":\"turn.completed\"}}\n");
        for chunk in text.as_bytes().chunks(7) {
            lines.push(chunk);
        }
        // The same with JSON's own escapes of the pair and of quotes.
        let escaped = format!(
            "{{\"result\":\"{}\",\"usage\":{{\"input_tokens\":5}}}}",
            "\\ud83d\\ude00\\\"x".repeat(400)
        );
        lines.push(escaped.as_bytes());
        lines.push(b"\n");
        // Not JSON: cut as ever.
        lines.push("z".repeat(3000).as_bytes());
        lines.finish();
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 4, "{seen:?}");
        let v: serde_json::Value =
            serde_json::from_str(&seen[0]).unwrap_or_else(|e| panic!("{e}: {}", seen[0]));
        assert!(seen[0].len() <= max);
        assert_eq!(
            (
                v["item"]["exit_code"].as_i64(),
                v["item"]["status"].as_str()
            ),
            (Some(3), Some("failed"))
        );
        let out = v["item"]["aggregated_output"].as_str().unwrap();
        assert!(
            out.starts_with("l0\t\"é\"\u{1F600}\\\nl1")
                && out.ends_with("l3999\t\"é\"\u{1F600}\\\n"),
            "{out}"
        );
        assert!(out.contains(" bytes cut]…"));
        assert_eq!(seen[1], r#"{"type":"turn.completed"}"#);
        let v: serde_json::Value =
            serde_json::from_str(&seen[2]).unwrap_or_else(|e| panic!("{e}: {}", seen[2]));
        assert_eq!(v["usage"]["input_tokens"], 5);
        assert!(v["result"].as_str().unwrap().ends_with("\u{1F600}\"x"));
        assert_eq!(seen[3], "z".repeat(max));
    }

    #[test]
    fn shortened_json_lines_stay_json_whatever_their_strings_hold() {
        // Many random lines: strings of quotes, backslashes, control
        // characters, multi-byte characters and \u escapes (surrogate pairs
        // included, as ASCII-only writers print them), in random chunks.
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut rnd = move |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        let palette = [
            'a',
            ' ',
            '"',
            '\\',
            '\n',
            '\u{1}',
            'é',
            '中',
            '\u{1F600}',
            '\u{2028}',
            '/',
        ];
        let mut shortened = 0;
        for round in 0..300 {
            let max = 64 + rnd(2000);
            let strings: Vec<String> = (0..1 + rnd(4))
                .map(|_| {
                    (0..rnd(6000))
                        .map(|_| palette[rnd(palette.len())])
                        .collect()
                })
                .collect();
            let value =
                serde_json::json!({"type":"x","n":round,"s":strings,"end":{"exit_code":round}});
            let mut line = value.to_string();
            if round % 2 == 1 {
                // ASCII-only JSON: every non-ASCII character as \u escapes.
                line = line
                    .chars()
                    .map(|c| {
                        if c.is_ascii() {
                            c.to_string()
                        } else {
                            c.encode_utf16(&mut [0; 2])
                                .iter()
                                .map(|u| format!("\\u{u:04x}"))
                                .collect()
                        }
                    })
                    .collect();
            }
            let seen = Arc::new(Mutex::new(Vec::new()));
            let sink = Arc::clone(&seen);
            let mut lines = LineSplitter::new(
                Box::new(move |l| sink.lock().unwrap().push(l.to_owned())),
                max,
            )
            .json(true);
            let bytes = line.as_bytes();
            let mut at = 0;
            while at < bytes.len() {
                let n = (1 + rnd(300)).min(bytes.len() - at);
                lines.push(&bytes[at..at + n]);
                at += n;
            }
            lines.push(b"\n");
            let seen = seen.lock().unwrap();
            assert_eq!(seen.len(), 1);
            match serde_json::from_str::<serde_json::Value>(&seen[0]) {
                Ok(v) => {
                    assert_eq!(
                        (v["n"].clone(), v["end"].clone()),
                        (value["n"].clone(), value["end"].clone()),
                        "round {round}"
                    );
                    shortened += usize::from(line.len() > max);
                }
                // Too many strings to shorten under the cap: cut as ever.
                Err(_) => assert!(
                    line.len() > max && seen[0].len() >= max - 3,
                    "round {round}, max {max}: {} -> {}",
                    line,
                    seen[0]
                ),
            }
        }
        assert!(shortened > 100, "{shortened} of 300 lines were shortened");
    }

    #[test]
    fn stat_reads_own_process_fields() {
        let me = procfs::stat(std::process::id() as i32).expect("own stat");
        assert!(me.state.is_ascii_uppercase());
        assert!(me.ppid > 0 && me.pgrp > 0 && me.session >= 0);
    }
}
