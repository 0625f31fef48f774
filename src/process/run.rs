//! The runners: [`run`] (async) and [`run_blocking`] spawn a [`Command`]
//! under its own supervisor (`supervisor.rs`), wait with a timeout and
//! cancellation, and ask the supervisor to stop the call (SIGTERM, grace,
//! SIGKILL to everything the call started).
//!
//! Not for reading the output (`stream`), how the supervisor is started
//! and handed its plan (`entry`) or what it does then (`supervisor`).

use super::command::{CALL_MARKER_VAR, Command};
use super::entry;
use super::error::ProcessError;
use super::guard::KillGuard;
use super::outcome::Outcome;
use super::stream::{OutputBudget, Streams};
use super::supervisor::{BACKSTOP_SLACK, KILL_NOW, Plan, STOP};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

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

/// Runs `cmd` to completion, timeout or cancellation and reports how it
/// ended (docs/agents.md).
///
/// - Spawned under a supervisor of its own (docs/security.md#processes):
///   the supervisor is the child nightshift waits for, the program runs
///   below it in a process group of its own, with a cleared environment
///   plus the map, `GIT_TERMINAL_PROMPT=0`, `LANG=C.UTF-8` if unset, and a
///   unique [`CALL_MARKER_VAR`]; stdin null unless bytes were given.
/// - stdout and stderr are read from the start (a full pipe would block the
///   child) and streamed through the redactor into the files.
/// - On timeout, cancellation or the output cap: the supervisor is asked to
///   stop the call (SIGTERM to its processes, the grace, SIGKILL).
/// - When the program exits, the supervisor ends what it left (its group
///   and, with [`Command::sweep_escaped`], every descendant that left the
///   group: as a child subreaper the supervisor inherits them) the same
///   way, then exits with the program's status.
/// - If nightshift dies (even by SIGKILL), or the future is dropped before
///   the end, the supervisor kills every process of the call at once. A
///   descendant that escapes the supervisor's subtree (started by another
///   service) has its pipes abandoned after [`super::READER_LINGER`].
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

/// Runs `cmd` inside its `tracing` span: spawns it under its supervisor,
/// streams its output, waits for its exit (the supervisor's, which ends
/// what the call left first), the timeout, `cancel` or the output cap
/// (asking the supervisor to stop the call when it did not exit) and
/// gathers the [`Outcome`].
async fn run_in_span(
    mut cmd: Command,
    cancel: &CancellationToken,
) -> Result<Outcome, ProcessError> {
    let marker = uuid::Uuid::new_v4().simple().to_string();
    let stdout_file = open_output(&cmd.program, cmd.stdout_path.as_deref()).await?;
    let stderr_file = open_output(&cmd.program, cmd.stderr_path.as_deref()).await?;

    let launch = Launch::new(&cmd, &marker)?;
    let started = Instant::now();
    let Started {
        mut child,
        pid,
        mut guard,
        stdin,
        proxy,
    } = spawn_guarded(launch, Site::of(&cmd)).await?;
    tracing::debug!(pid, "spawned");

    let (budget, over_cap) = output_budget(cmd.max_output);
    let stop_readers = CancellationToken::new();
    // Dropped, this future stops the readers (an escaped descendant may hold a pipe).
    let _stop_readers_on_drop = stop_readers.clone().drop_guard();
    let streams = Streams::start(
        &mut child,
        stdin,
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

    guard.reaped = status.is_some();
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
        refused: proxy.map(crate::sandbox::Proxy::finish).unwrap_or_default(),
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

/// The output both streams may carry ([`Command::max_output`]), shared by
/// their readers, and the token fired when it is spent (never, without a cap).
fn output_budget(max: Option<u64>) -> (Option<Arc<OutputBudget>>, CancellationToken) {
    let budget = max.map(|max| {
        Arc::new(OutputBudget {
            left: max.into(),
            spent: CancellationToken::new(),
        })
    });
    let over_cap = (budget.as_ref()).map_or_else(CancellationToken::new, |b| b.spent.clone());
    (budget, over_cap)
}

/// A started call.
struct Started {
    /// Its supervisor, the child nightshift waits for.
    child: tokio::process::Child,
    /// The supervisor's pid.
    pid: u32,
    /// Tells the supervisor to kill the call when dropped.
    guard: KillGuard,
    /// The writer of the call's stdin, when it was given bytes.
    stdin: Option<tokio::net::unix::pipe::Sender>,
    /// The sandbox's proxy, served.
    proxy: Option<crate::sandbox::Proxy>,
}

/// Starts `launch` (for the command `site` names): the supervisor spawned, the guard
/// made, the plan handed over, the call's program exec'd.
///
/// # Errors
/// [`ProcessError`] when the supervisor or the call cannot be started.
async fn spawn_guarded(mut launch: Launch, site: Site) -> Result<Started, ProcessError> {
    let child = (launch.command.spawn()).map_err(|source| ProcessError::Spawn {
        program: site.program.clone(),
        cwd: site.cwd.clone().unwrap_or_default(),
        hint: "nightshift could not start the call's supervisor (itself, as /proc/self/exe): is /proc mounted?".into(),
        source,
    })?;
    // The command keeps what it was given: the supervisor's end of the
    // control socket is let go here, or a supervisor dead before its
    // answer would leave the wait for it open until `START_WITHIN`.
    launch.command.stdin(Stdio::null());
    let Some(pid) = child.id() else {
        return Err(ProcessError::Wait {
            program: site.program,
            pid: 0,
            source: io::Error::other("the child was reaped before its pid could be read"),
        });
    };
    let guard = KillGuard {
        supervisor: pid as i32,
        reaped: false,
    };
    let (stdin, proxy) = (launch.hand_over().await).map_err(|source| site.error(source))?;
    // The proxy's end in the sandbox is the supervisor's now.
    Ok(Started {
        child,
        pid,
        guard,
        stdin,
        proxy: proxy.map(ProxyEnds::serve),
    })
}

/// What ends the wait for a child besides its exit, and how to stop it.
struct Waited<'a> {
    /// The caller's cancel.
    cancel: &'a CancellationToken,
    /// Fired when the output budget is spent.
    over_cap: &'a CancellationToken,
    /// The call's supervisor.
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
    /// output cap; a child that did not exit is stopped (its supervisor
    /// asked to: SIGTERM, SIGKILL after [`Command::grace`]). Returns (exit status,
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
            "stopping the call"
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

/// The two ends of the socket pair over which a sandbox sends its proxy's
/// listener, and what the proxy allows.
struct ProxyEnds {
    ours: UnixStream,
    theirs: UnixStream,
    allow: crate::sandbox::Allow,
}

impl ProxyEnds {
    /// Closes the sandbox's end (the supervisor holds its copy) and
    /// serves the proxy on what arrives on ours.
    fn serve(self) -> crate::sandbox::Proxy {
        drop(self.theirs);
        crate::sandbox::Proxy::serve(self.ours, self.allow)
    }
}

/// How long a supervisor may take to start its call (the sandbox's
/// mounts, the exec) before the start counts as failed.
const START_WITHIN: Duration = Duration::from_secs(60);

/// One call's supervisor, ready to be started (`entry.rs`): its command
/// (this program, with the call's environment and output pipes), the plan
/// it is sent, and the runner's ends of what goes with it.
struct Launch {
    command: tokio::process::Command,
    plan: Plan,
    /// The runner's end of the control socket.
    ctl: UnixStream,
    /// The call's stdin as (the end sent with the plan, the runner's end).
    stdin: Option<(OwnedFd, OwnedFd)>,
    /// The sandbox's proxy, when it may reach hosts.
    proxy: Option<ProxyEnds>,
}

impl Launch {
    /// The supervisor's command and plan for `cmd`: cleared environment plus
    /// the map and the pins, piped output, its own process group; the plan
    /// holds the program, its arguments and directory, `run_as` and the
    /// sandbox, with the ends of the sandbox's proxy when it has one.
    ///
    /// # Errors
    /// [`ProcessError::Spawn`] when the sandbox's policy cannot be prepared (a
    /// path it names does not exist), an argument holds a NUL byte, or no
    /// socket or pipe is left.
    fn new(cmd: &Command, marker: &str) -> Result<Launch, ProcessError> {
        let failed = |source| spawn_error(cmd, source);
        let sandboxed = prepare_sandbox(cmd)?;
        let (ctl, theirs) = UnixStream::pair().map_err(failed)?;
        let mut command = entry::command(theirs.into());
        command
            .env_clear()
            .envs(&cmd.env)
            // A git asking for a password on a terminal would hang until the
            // timeout; nightshift hands credentials through helpers only.
            .env("GIT_TERMINAL_PROMPT", "0")
            .env(CALL_MARKER_VAR, marker)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // The supervisor leads a group of its own, out of reach of signals
            // sent to nightshift's; on drop the guard tells it to kill the call.
            .process_group(0);
        if !cmd.env.contains_key("LANG") {
            // Agents read and write UTF-8; C.UTF-8 is built into musl and glibc >= 2.35.
            command.env("LANG", "C.UTF-8");
        }
        if let Some(account) = &cmd.run_as {
            command
                .env("HOME", &account.home)
                .env("USER", &account.user)
                .env("LOGNAME", &account.user);
        }
        let stdin = match &cmd.stdin {
            Some(_) => {
                let (theirs, ours) = io::pipe().map_err(failed)?;
                Some((theirs.into(), ours.into()))
            }
            None => None,
        };
        let (sandbox, proxy, exec) = match sandboxed {
            Some(s) => (Some(s.prepared), s.proxy, s.exec),
            None => (None, None, None),
        };
        let c_string = |bytes: &[u8]| {
            CString::new(bytes).map_err(|_| {
                failed(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "an argument or path holds a NUL byte",
                ))
            })
        };
        // Exec'd by its real path, so that a script finds its own files (a
        // Node CLI its package) where the sandbox shows them; argv[0] stays
        // as given.
        let program = match &exec {
            Some(real) => c_string(real.as_os_str().as_encoded_bytes())?,
            None => c_string(cmd.program.as_bytes())?,
        };
        let argv = (std::iter::once(&cmd.program).chain(&cmd.args))
            .map(|a| c_string(a.as_bytes()))
            .collect::<Result<_, _>>()?;
        let cwd = match &cmd.cwd {
            Some(dir) => Some(c_string(dir.as_os_str().as_encoded_bytes())?),
            None => None,
        };
        let plan = Plan {
            runner: std::process::id() as i32,
            timeout: cmd.timeout,
            grace: cmd.grace,
            sweep_escaped: cmd.sweep_escaped,
            run_as: cmd.run_as.as_ref().map(|a| (a.uid, a.gid)),
            cwd,
            program,
            argv,
            stdin: stdin.is_some(),
            sandbox,
        };
        Ok(Launch {
            command,
            plan,
            ctl,
            stdin,
            proxy,
        })
    }

    /// Sends the started supervisor its plan and descriptors, lets go of
    /// the call's ends and waits for the call's program to be exec'd.
    /// Returns the writer of the call's stdin and the proxy's ends.
    ///
    /// # Errors
    /// The error of the step that failed (`become_call`, the sandbox, the
    /// exec), or the supervisor gone or silent for [`START_WITHIN`].
    async fn hand_over(
        self,
    ) -> io::Result<(Option<tokio::net::unix::pipe::Sender>, Option<ProxyEnds>)> {
        let mut fds = Vec::new();
        fds.extend(self.stdin.as_ref().map(|(theirs, _)| theirs.as_raw_fd()));
        fds.extend(self.proxy.as_ref().map(|p| p.theirs.as_raw_fd()));
        entry::send(&self.ctl, &self.plan, &fds)?;
        let stdin = match self.stdin {
            Some((theirs, ours)) => {
                drop(theirs);
                Some(tokio::net::unix::pipe::Sender::from_owned_fd(ours)?)
            }
            None => None,
        };
        entry::started(self.ctl, START_WITHIN).await?;
        Ok((stdin, self.proxy))
    }
}

/// The call's sandbox, prepared by the runner (`sandbox::Prepared`), as
/// the account the call runs as, in its working directory; with its
/// proxy's socket pair when it may reach hosts.
///
/// # Errors
/// [`ProcessError::Spawn`] naming the path or the feature that failed.
fn prepare_sandbox(cmd: &Command) -> Result<Option<Sandboxed>, ProcessError> {
    let Some(policy) = &cmd.sandbox else {
        return Ok(None);
    };
    // SAFETY: geteuid and getegid cannot fail.
    let ids = cmd.run_as.as_ref().map_or_else(
        || unsafe { (libc::geteuid(), libc::getegid()) },
        |a| (a.uid, a.gid),
    );
    let cwd = match &cmd.cwd {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
    };
    let mut policy = policy.clone();
    let mut exec = None;
    if let Some((given, real)) = program_file(cmd) {
        if given != real {
            exec = Some(real.clone());
        }
        policy.read.push(real);
    }
    // As `agent_user` the child's `HOME` is the account's (`Launch::new`).
    if let Some(account) = &cmd.run_as {
        policy.home.clone_from(&account.home);
    }
    if !policy.home.is_absolute() || policy.home == Path::new("/") {
        policy.home = PathBuf::from("/home/sandbox");
    }
    let failed = |source| {
        ProcessError::Spawn {
        program: cmd.program.clone(),
        cwd: cwd.clone(),
        hint: "the sandbox could not be prepared: check `[sandbox] read` and `write` (docs/security.md#the-sandbox)".into(),
        source,
    }
    };
    let prepared = crate::sandbox::Prepared::new(&policy, ids, &cwd).map_err(failed)?;
    let proxy = match &policy.network {
        crate::sandbox::Network::Proxy(allow) => {
            let (ours, theirs) = UnixStream::pair().map_err(failed)?;
            Some(ProxyEnds {
                ours,
                theirs,
                allow: allow.clone(),
            })
        }
        crate::sandbox::Network::None => None,
    };
    Ok(Some(Sandboxed {
        prepared,
        proxy,
        exec,
    }))
}

/// A call's sandbox as prepared by the runner.
struct Sandboxed {
    prepared: crate::sandbox::Prepared,
    /// The proxy's socket pair, with `Network::Proxy`.
    proxy: Option<ProxyEnds>,
    /// The program's real path when it was given through links: exec'd by
    /// it (the sandbox shows the real file only).
    exec: Option<PathBuf>,
}

/// The program's own file when it lies outside the system directories, so
/// that the sandbox shows it (read-only): given with a `/`, or found on the
/// child's `PATH`. Returns (the absolute path it is exec'd by, its real
/// path).
fn program_file(cmd: &Command) -> Option<(PathBuf, PathBuf)> {
    let found = if cmd.program.contains('/') {
        let p = PathBuf::from(&cmd.program);
        match &cmd.cwd {
            Some(dir) if p.is_relative() => dir.join(p),
            _ => p,
        }
    } else {
        let path = cmd.env.get("PATH")?;
        std::env::split_paths(path)
            .map(|d| d.join(&cmd.program))
            .find(|p| p.is_file())?
    };
    let real = std::fs::canonicalize(&found).ok()?;
    let system = crate::sandbox::SYSTEM_DIRS
        .iter()
        .any(|d| std::fs::canonicalize(d).is_ok_and(|d| real.starts_with(d)));
    (!system && real.is_file() && found.is_absolute()).then_some((found, real))
}

/// Asks the supervisor to stop the call (SIGTERM, `grace`, SIGKILL) and
/// waits for it to exit; after `grace` and [`BACKSTOP_SLACK`] asks it to
/// kill now. `None` when it had not exited 10 s later (a process in
/// uninterruptible sleep); tokio reaps it later.
async fn stop_child(
    child: &mut tokio::process::Child,
    guard: &KillGuard,
    grace: Duration,
) -> io::Result<Option<ExitStatus>> {
    guard.tell(STOP);
    if let Ok(status) = tokio::time::timeout(grace + BACKSTOP_SLACK, child.wait()).await {
        return status.map(Some);
    }
    guard.tell(KILL_NOW);
    match tokio::time::timeout(Duration::from_secs(10), child.wait()).await {
        Ok(status) => status.map(Some),
        Err(_) => {
            tracing::warn!(
                supervisor = guard.supervisor,
                "the call did not end within 10 s of SIGKILL"
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
    Site::of(cmd).error(source)
}

/// What a spawn error names of its command, owned: held across the wait
/// for the call's start (a borrow of the `Command` would make that future
/// not `Send`).
struct Site {
    program: String,
    cwd: Option<PathBuf>,
    /// The child's `PATH`.
    path: Option<String>,
    run_as: bool,
}

impl Site {
    fn of(cmd: &Command) -> Site {
        Site {
            program: cmd.program.clone(),
            cwd: cmd.cwd.clone(),
            path: cmd.env.get("PATH").cloned(),
            run_as: cmd.run_as.is_some(),
        }
    }

    /// [`ProcessError::Spawn`] for `source`, with a hint at the fix.
    fn error(self, source: io::Error) -> ProcessError {
        let cwd = match self.cwd {
            Some(dir) => dir,
            None => std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
        };
        let program = self.program;
        let hint = if !cwd.is_dir() {
            format!(
                "the working directory {} does not exist or is not a directory",
                cwd.display()
            )
        } else if source.kind() == io::ErrorKind::NotFound {
            if program.contains('/') {
                format!("there is no file `{program}`; check the path in the config")
            } else {
                let path = (self.path.as_deref()).unwrap_or("(PATH is not set for the child)");
                format!(
                    "`{program}` is not on the child's PATH ({path}); install it or give its full path"
                )
            }
        } else if source.kind() == io::ErrorKind::PermissionDenied {
            format!(
                "`{program}` is not executable by this user: `chmod +x` it, or check that its filesystem is not mounted noexec"
            )
        } else if self.run_as && source.raw_os_error() == Some(libc::EPERM) {
            "running agents as `agent_user` needs nightshift to run as root".to_owned()
        } else {
            format!("try running `{program}` by hand in {}", cwd.display())
        };
        ProcessError::Spawn {
            program,
            cwd,
            hint,
            source,
        }
    }
}
