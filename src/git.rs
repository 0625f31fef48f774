//! The one way nightshift runs `git`: a builder for every `git` subprocess, with
//! pinned settings, a timeout and errors that carry the command and its stderr,
//! plus a few local reads done in-process with git2.
//!
//! Network and checkout management (clone, fetch, push, reset, clean, commit)
//! go through the `git` CLI so that users' credential helpers, `insteadOf`
//! rewrites and ssh setup keep working (docs/loop.md#checkout; git2 is built without network features). Local reads
//! (HEAD, symbolic branch, remote URLs) use git2, which never runs hooks,
//! filters or fsmonitor. This module is not about slots or proofs: it knows
//! nothing of items, branches naming or scope (see `slot` and `proof`).
//!
//! Every call is blocking; async callers wrap it in `tokio::task::block_in_place`.
//! The child itself is run by the one process runner
//! ([`crate::process::run_blocking`]): own process group, streamed output,
//! timeout, kill on drop; this module adds git's pinned settings on top.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crate::process::{self, ProcessError};
use crate::remote::RemoteUrl;

/// Default timeout of one `git` subprocess: 120 seconds.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// How many bytes of stderr an error keeps (the tail; the head of a git
/// failure is progress noise, the reason comes last).
const STDERR_TAIL_BYTES: usize = 4096;

/// How many bytes of stderr a call keeps in [`GitOutput::stderr`].
const STDERR_KEPT_BYTES: usize = 64 * 1024;

/// Time between SIGTERM and SIGKILL when a git call times out or is
/// stopped: git removes its lock files on SIGTERM.
const GRACE: Duration = Duration::from_secs(2);

/// Environment variable the askpass helper reads the token from. It is set
/// only on the one git child that needs the token (docs/agents.md#environment: the token stays in
/// memory, never in argv, a URL or a file).
pub const ASKPASS_TOKEN_VAR: &str = "NIGHTSHIFT_ASKPASS_TOKEN";

/// Username the askpass helper answers for https: GitHub accepts any
/// non-empty user with a token as the password; this is the documented one.
const ASKPASS_USERNAME: &str = "x-access-token";

/// Settings passed as `-c` on every git command line, each with its reason.
const PINNED_CONFIG: &[&str] = &[
    // Nothing an agent plants in a checkout's .git may run under our identity:
    // a hook (pre-commit, pre-push, post-checkout, reference-transaction...)
    // would run with the runner's environment, token included.
    "core.hooksPath=/dev/null",
    // An fsmonitor command in .git/config is an arbitrary program git starts
    // on status/add/commit; same reason as the hooks.
    "core.fsmonitor=false",
    // A cron job has no gpg-agent or pinentry: signing would hang or fail.
    "commit.gpgsign=false",
    // A command with a 120 s budget must not turn into a repack of the slot.
    "gc.auto=0",
    "maintenance.auto=false",
];

/// Environment variables removed from every git child: when nightshift itself
/// runs under git (from a hook, or a test harness) these would redirect our
/// commands to another repository, index or object store.
const REMOVED_ENV: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
];

/// A failed git operation, with what a person needs to understand it later.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// `git` could not be started (not installed, not on PATH, bad cwd).
    #[error("could not start `{argv}` in {}: {source}", cwd.display())]
    Spawn {
        argv: String,
        cwd: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// git ran and exited unsuccessfully.
    #[error("`{argv}` in {} failed ({status}): {stderr_tail}", cwd.display())]
    Failed {
        argv: String,
        cwd: PathBuf,
        /// e.g. "exit status 128" or "signal 9".
        status: String,
        stderr_tail: String,
    },
    /// git did not finish in time; its process group was killed.
    #[error("`{argv}` in {} timed out after {seconds} s and was killed: {stderr_tail}", cwd.display())]
    TimedOut {
        argv: String,
        cwd: PathBuf,
        seconds: u64,
        stderr_tail: String,
    },
    /// A stop was requested (SIGINT/SIGTERM); its process group was killed.
    #[error("`{argv}` in {} was stopped by a signal and killed", cwd.display())]
    Stopped { argv: String, cwd: PathBuf },
    /// Reading or writing a file around a git call (askpass helper, outputs).
    #[error("{context} ({}): {source}", path.display())]
    Io {
        context: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A local read through git2 failed.
    #[error("{context} in {}: {source}", path.display())]
    Repo {
        context: &'static str,
        path: PathBuf,
        #[source]
        source: git2::Error,
    },
}

/// What a successful git call printed.
#[derive(Debug, Clone)]
pub struct GitOutput {
    /// Standard output, raw bytes.
    pub stdout: Vec<u8>,
    /// Standard error, lossily decoded (progress and warnings).
    pub stderr: String,
    /// Wall time of the call.
    pub duration: Duration,
}

impl GitOutput {
    /// Standard output decoded lossily and trimmed of surrounding whitespace.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).trim().to_string()
    }
}

/// Builder for one or more `git` subprocesses in a directory.
///
/// Every command gets `-c core.hooksPath=/dev/null -c core.fsmonitor=false
/// -c commit.gpgsign=false` (docs/loop.md#checkout), `GIT_TERMINAL_PROMPT=0`, `LC_ALL=C`,
/// a null stdin unless input is given, its own process group, and a timeout
/// (default [`DEFAULT_TIMEOUT`]) after which the whole group is killed.
///
/// Global and system config are kept on purpose: users' credential helpers,
/// `url.*.insteadOf` and ssh settings must keep working for fetch and push.
/// With a token ([`Git::token`]) the credential helpers are switched off for
/// that one command and the token is answered by an askpass helper instead,
/// so that no helper stores it on disk.
#[derive(Clone)]
pub struct Git {
    dir: PathBuf,
    timeout: Duration,
    token: Option<String>,
    env: Vec<(OsString, OsString)>,
    stop: Option<Arc<AtomicBool>>,
}

impl std::fmt::Debug for Git {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Git")
            .field("dir", &self.dir)
            .field("timeout", &self.timeout)
            .field("token", &self.token.as_ref().map(|_| "****"))
            .finish()
    }
}

impl Git {
    /// A builder running git with `dir` as its working directory.
    pub fn new(dir: impl Into<PathBuf>) -> Git {
        Git {
            dir: dir.into(),
            timeout: DEFAULT_TIMEOUT,
            token: None,
            env: Vec::new(),
            stop: None,
        }
    }

    /// The working directory of the commands.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Sets the timeout of each command (wall time).
    pub fn timeout(mut self, timeout: Duration) -> Git {
        self.timeout = timeout;
        self
    }

    /// Sets (or clears) the token answered to git's username/password prompts
    /// over https (user `x-access-token`, password the token). The token goes
    /// to the child only in the environment of an askpass helper; it is never
    /// in argv or in a URL (docs/agents.md).
    pub fn token(mut self, token: Option<&str>) -> Git {
        self.token = token.map(str::to_string);
        self
    }

    /// Kills the command's process group as soon as `stop` becomes true
    /// (checked while waiting, every 50 ms at most): a signal must not wait
    /// for a slow push (docs/limits.md).
    pub fn stop_on(mut self, stop: Arc<AtomicBool>) -> Git {
        self.stop = Some(stop);
        self
    }

    /// Adds an environment variable for the children (e.g. author identity).
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Git {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Runs `git <args>` and returns its output if it exits 0.
    ///
    /// # Errors
    /// [`GitError::Spawn`] if git cannot start, [`GitError::Failed`] on a
    /// non-zero exit, [`GitError::TimedOut`] after the timeout; each carries
    /// the argv, the directory and the stderr tail.
    pub fn run(&self, args: &[&str]) -> Result<GitOutput, GitError> {
        self.run_with_input(args, None)
    }

    /// Runs `git <args>` and returns its stdout decoded and trimmed.
    ///
    /// # Errors
    /// As [`Git::run`].
    pub fn text(&self, args: &[&str]) -> Result<String, GitError> {
        Ok(self.run(args)?.text())
    }

    /// Runs `git <args>` with `input` on its stdin.
    ///
    /// # Errors
    /// As [`Git::run`].
    pub fn run_with_input(
        &self,
        args: &[&str],
        input: Option<&[u8]>,
    ) -> Result<GitOutput, GitError> {
        // A URL that carries a password (`https://user:TOKEN@host/…`, the
        // user's remote as configured) is given to git without it, and the
        // password is answered through the askpass helper instead: argv is
        // readable by every local user in /proc/PID/cmdline, git repeats it in
        // errors, and a URL set as a slot's remote would hand it to agents.
        let mut url_password: Option<String> = None;
        let args: Vec<String> = args
            .iter()
            .map(|a| match split_url_password(a) {
                Some((bare, password)) => {
                    url_password.get_or_insert(password);
                    bare
                }
                None => (*a).to_string(),
            })
            .collect();
        let token = url_password.as_deref().or(self.token.as_deref());
        // The askpass helper lives until the child is gone.
        let askpass = token.map(|_| AskpassHelper::create()).transpose()?;
        let mut cmd = self.command(&args, token.zip(askpass.as_ref()));
        if let Some(bytes) = input {
            cmd = cmd.stdin_bytes(bytes);
        }
        let argv = display_argv(&args);
        let outcome = process::run_blocking(cmd, self.stop.clone())
            .map_err(|e| self.not_run(argv.clone(), e))?;
        drop(askpass);
        self.judge(argv, outcome)
    }

    /// The process runner's command for `git <args>`: the pinned `-c`
    /// settings, the pinned environment over nightshift's own (minus the
    /// variables that would redirect git, plus [`Git::env`]), and, with a
    /// token, its askpass helper instead of the credential helpers.
    fn command(
        &self,
        args: &[String],
        askpass: Option<(&str, &AskpassHelper)>,
    ) -> process::Command {
        let mut env: BTreeMap<String, String> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        let mut cmd = process::Command::new("git");
        for pin in PINNED_CONFIG {
            cmd = cmd.arg("-c").arg(*pin);
        }
        if let Some((token, helper)) = askpass {
            // An empty value resets the list of credential helpers: the
            // token must not be stored by a `store`/keychain helper, and a
            // stale stored credential must not win over it.
            cmd = cmd.arg("-c").arg("credential.helper=");
            env.insert("GIT_ASKPASS".into(), helper.script().display().to_string());
            env.insert(ASKPASS_TOKEN_VAR.into(), token.to_string());
        }
        env.insert("GIT_TERMINAL_PROMPT".into(), "0".into());
        env.insert("LC_ALL".into(), "C".into());
        // A command that wants an editor (it should never) must not wait.
        env.insert("GIT_EDITOR".into(), "true".into());
        for var in REMOVED_ENV {
            env.remove(*var);
        }
        for (k, v) in &self.env {
            env.insert(
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            );
        }
        cmd.args(args)
            .cwd(&self.dir)
            .env_map(env)
            .timeout(self.timeout)
            .grace(GRACE)
            .capture_stdout(true)
            .tail_bytes(STDERR_KEPT_BYTES)
            // git prints URLs, and a remote or a credential helper may echo
            // a secret: nothing that leaves here carries one.
            .redactor(crate::secret::known())
            // Helpers git starts may outlive it by design (an ssh
            // ControlPersist master, a credential cache daemon that left the
            // group): those are not swept; its own group is, when it exits.
            .sweep_escaped(false)
    }

    /// The error for a git that could not be started or waited for.
    fn not_run(&self, argv: String, error: ProcessError) -> GitError {
        match error {
            ProcessError::Spawn { source, .. } => GitError::Spawn {
                argv,
                cwd: self.dir.clone(),
                source,
            },
            ProcessError::Wait { source, .. } | ProcessError::OutputFile { source, .. } => {
                GitError::Io {
                    context: "waiting for git",
                    path: self.dir.clone(),
                    source,
                }
            }
        }
    }

    /// What a finished git call comes to: its output when it exited 0.
    fn judge(&self, argv: String, outcome: process::Outcome) -> Result<GitOutput, GitError> {
        let stderr = crate::secret::redact_known(&outcome.stderr_tail);
        if outcome.cancelled {
            return Err(GitError::Stopped {
                argv,
                cwd: self.dir.clone(),
            });
        }
        if outcome.timed_out {
            return Err(GitError::TimedOut {
                argv,
                cwd: self.dir.clone(),
                seconds: self.timeout.as_secs(),
                stderr_tail: tail(&stderr),
            });
        }
        if !outcome.success() {
            return Err(GitError::Failed {
                argv,
                cwd: self.dir.clone(),
                status: describe_status(&outcome),
                stderr_tail: tail(&stderr),
            });
        }
        Ok(GitOutput {
            stdout: outcome.stdout,
            stderr,
            duration: outcome.duration,
        })
    }

    /// Fetches `refspec` from `remote` (a remote name or a URL), e.g.
    /// `fetch("https://github.com/o/r.git", "+refs/heads/main:refs/remotes/origin/main")`.
    /// Uses the token if one was set (docs/loop.md#checkout).
    ///
    /// # Errors
    /// As [`Git::run`].
    pub fn fetch(&self, remote: &str, refspec: &str) -> Result<(), GitError> {
        self.run(&[
            "fetch",
            "--no-tags",
            "--no-write-fetch-head",
            "--quiet",
            remote,
            refspec,
        ])
        .map(|_| ())
    }

    /// The refs of remote `url` that `wanted` names, as `ref → object id`
    /// (an annotated tag also as `<tag>^{}`), what `git ls-remote` prints.
    /// A remote that is a local repository (a path, relative to this
    /// command's directory as git takes it, or `file://`) is read in-process
    /// ([`local_remote_refs`]): `git ls-remote` of a path starts three
    /// processes, and the run reads the remote's refs around every agent
    /// call. Any other remote, or one libgit2 cannot open (git also finds
    /// `<path>.git`), is asked with `git ls-remote`, the token through
    /// askpass when one was set.
    ///
    /// # Errors
    /// As [`Git::run`].
    pub fn remote_refs(
        &self,
        url: &str,
        wanted: RefsWanted<'_>,
    ) -> Result<BTreeMap<String, String>, GitError> {
        if let RemoteUrl::Local(path) = RemoteUrl::parse(url)
            && let Ok(refs) = local_remote_refs(&self.dir.join(path))
        {
            return Ok(refs.into_iter().filter(|(n, _)| wanted.takes(n)).collect());
        }
        let pattern;
        let args: Vec<&str> = match wanted {
            RefsWanted::HeadsAndTags => vec!["ls-remote", "--heads", "--tags", "--", url],
            RefsWanted::Branch(name) => vec!["ls-remote", "--heads", "--", url, name],
            RefsWanted::BranchesUnder(prefix) => {
                pattern = format!("{prefix}*");
                vec!["ls-remote", "--heads", "--", url, &pattern]
            }
        };
        Ok(self
            .text(&args)?
            .lines()
            .filter_map(|l| l.split_once('\t'))
            .map(|(id, name)| (name.trim().to_string(), id.trim().to_string()))
            .filter(|(n, _)| wanted.takes(n))
            .collect())
    }

    /// The commit id (40 hex) `rev` resolves to, through `git rev-parse`.
    ///
    /// # Errors
    /// As [`Git::run`]; an unknown revision is [`GitError::Failed`].
    pub fn rev_parse(&self, rev: &str) -> Result<String, GitError> {
        let spec = format!("{rev}^{{commit}}");
        self.text(&["rev-parse", "--verify", "--quiet", &spec])
    }

    /// Pushes local `branch` to the branch of the same name on `remote`
    /// only while that branch is still at `expected` (40 hex, the head
    /// nightshift last pushed): `--force-with-lease=refs/heads/B:EXPECTED`.
    /// A person's push since then makes git refuse, and nothing is
    /// overwritten (docs/github.md "The second night"). Uses the token if
    /// one was set.
    ///
    /// # Errors
    /// As [`Git::run`]; a refused lease is [`GitError::Failed`] whose stderr
    /// tail says `stale info`.
    pub fn push_with_lease(
        &self,
        remote: &str,
        branch: &str,
        expected: &str,
    ) -> Result<(), GitError> {
        let lease = format!("--force-with-lease=refs/heads/{branch}:{expected}");
        let refspec = format!("refs/heads/{branch}:refs/heads/{branch}");
        self.run(&[
            "push",
            "--no-verify",
            "--quiet",
            &lease,
            "--",
            remote,
            &refspec,
        ])
        .map(|_| ())
    }

    /// Rebases the checked-out branch onto `upstream` (a commit or ref),
    /// for a PR whose base moved. The caller sets the committer
    /// (`GIT_COMMITTER_NAME`/`_EMAIL` through [`Git::env`]).
    ///
    /// # Errors
    /// As [`Git::run`] for failures other than a conflict; a conflict is
    /// `Ok(`[`Rebase::Conflict`]`)` with the rebase left in progress for
    /// the writer ([`Git::rebase_continue`] or [`Git::rebase_abort`]).
    pub fn rebase_onto(&self, upstream: &str) -> Result<Rebase, GitError> {
        let run = self.run(&[
            "-c",
            "rebase.autoStash=false",
            "rebase",
            "--no-autosquash",
            "--quiet",
            upstream,
        ]);
        self.rebase_state(run)
    }

    /// Goes on with a rebase stopped at a conflict, after the conflicted
    /// files were resolved and staged (`git add`); the commit message is
    /// kept (no editor is started).
    ///
    /// # Errors
    /// As [`Git::rebase_onto`].
    pub fn rebase_continue(&self) -> Result<Rebase, GitError> {
        let run = self
            .clone()
            .env("GIT_EDITOR", "true")
            .run(&["rebase", "--continue"]);
        self.rebase_state(run)
    }

    /// Abandons a rebase in progress: the branch is back where it was.
    ///
    /// # Errors
    /// As [`Git::run`].
    pub fn rebase_abort(&self) -> Result<(), GitError> {
        self.run(&["rebase", "--abort"]).map(|_| ())
    }

    /// The outcome of a `rebase` call: clean, stopped at a conflict (the
    /// rebase is in progress: `REBASE_HEAD` exists), or failed otherwise.
    fn rebase_state(&self, run: Result<GitOutput, GitError>) -> Result<Rebase, GitError> {
        match run {
            Ok(_) => Ok(Rebase::Clean {
                head: self.rev_parse("HEAD")?,
            }),
            Err(e @ GitError::Failed { .. }) => {
                let Ok(applying) = self.rev_parse("REBASE_HEAD") else {
                    return Err(e);
                };
                let files = self.text(&["diff", "--name-only", "--diff-filter=U", "-z"]);
                let files = files?
                    .split('\0')
                    .filter(|f| !f.is_empty())
                    .map(str::to_string)
                    .collect();
                Ok(Rebase::Conflict {
                    files,
                    onto: self.rev_parse("HEAD")?,
                    applying,
                })
            }
            Err(e) => Err(e),
        }
    }
}

/// Where a rebase stands ([`Git::rebase_onto`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rebase {
    /// Every commit applied; the branch is now at `head`.
    Clean { head: String },
    /// Stopped: `applying` (a commit of the branch) conflicts with `onto`
    /// (the new base plus the commits already applied) in `files`
    /// (relative paths, with conflict markers in the working tree).
    Conflict {
        files: Vec<String>,
        onto: String,
        applying: String,
    },
}

/// Opens the repository at `path` (a working tree or a git dir) with git2,
/// without searching parent directories.
///
/// # Errors
/// [`GitError::Repo`] if `path` is not a git repository.
pub fn open(path: &Path) -> Result<git2::Repository, GitError> {
    git2::Repository::open(path).map_err(|source| GitError::Repo {
        context: "opening the repository",
        path: path.to_path_buf(),
        source,
    })
}

/// The object id (40 hex) that `spec` names in the repository at `path`
/// (`HEAD^{commit}`, `<id>^{tree}`, `refs/heads/<b>^{commit}`), read
/// in-process by libgit2's rev-parse: lookups of every item without a git
/// process each (issue 12).
///
/// # Errors
/// [`GitError::Repo`] if `path` is not a repository or `spec` names no
/// object there.
pub fn resolve(path: &Path, spec: &str) -> Result<String, GitError> {
    open(path)?
        .revparse_single(spec)
        .map(|o| o.id().to_string())
        .map_err(|source| GitError::Repo {
            context: "resolving a revision",
            path: path.to_path_buf(),
            source,
        })
}

/// The local branches (`refs/heads/...`, full names) of the repository at
/// `path`, read in-process.
///
/// # Errors
/// [`GitError::Repo`] if `path` is not a repository or its refs cannot be
/// read.
pub fn local_branches(path: &Path) -> Result<Vec<String>, GitError> {
    let err = |source| GitError::Repo {
        context: "listing the branches",
        path: path.to_path_buf(),
        source,
    };
    let repo = open(path)?;
    let mut names = Vec::new();
    for r in repo.references().map_err(err)? {
        let r = r.map_err(err)?;
        let name = String::from_utf8_lossy(r.name_bytes());
        if name.starts_with("refs/heads/") {
            names.push(name.into_owned());
        }
    }
    Ok(names)
}

/// Which of a remote's refs [`Git::remote_refs`] lists.
#[derive(Debug, Clone, Copy)]
pub enum RefsWanted<'a> {
    /// Every branch and tag (`refs/heads/*`, `refs/tags/*`).
    HeadsAndTags,
    /// The one branch of this full name (`refs/heads/nightshift/x`).
    Branch(&'a str),
    /// The branches whose full names start with this (`refs/heads/nightshift/`).
    BranchesUnder(&'a str),
}

impl RefsWanted<'_> {
    fn takes(&self, name: &str) -> bool {
        match self {
            RefsWanted::HeadsAndTags => {
                name.starts_with("refs/heads/") || name.starts_with("refs/tags/")
            }
            RefsWanted::Branch(full) => name == *full,
            RefsWanted::BranchesUnder(prefix) => {
                name.starts_with("refs/heads/") && name.starts_with(prefix)
            }
        }
    }
}

/// The branches and tags of the repository at `path` (a local remote, bare
/// or not) as `ref → object id`, what `git ls-remote --heads --tags` prints
/// for it: an annotated tag also as `<tag>^{}` → the object it peels to.
/// Read in-process (see [`Git::remote_refs`]).
///
/// # Errors
/// [`GitError::Repo`] if `path` is not a repository or its refs cannot be
/// read (the caller may ask git then: git also finds `<path>.git`).
pub fn local_remote_refs(path: &Path) -> Result<BTreeMap<String, String>, GitError> {
    let err = |source| GitError::Repo {
        context: "listing a local remote's refs",
        path: path.to_path_buf(),
        source,
    };
    let repo = open(path)?;
    let mut refs = BTreeMap::new();
    for r in repo.references().map_err(err)? {
        let r = r.map_err(err)?;
        let name = String::from_utf8_lossy(r.name_bytes()).into_owned();
        let tag = name.starts_with("refs/tags/");
        if !tag && !name.starts_with("refs/heads/") {
            continue;
        }
        let r = r.resolve().map_err(err)?;
        let Some(id) = r.target() else { continue };
        if tag {
            let peeled = r.peel(git2::ObjectType::Any).map_err(err)?.id();
            if peeled != id {
                refs.insert(format!("{name}^{{}}"), peeled.to_string());
            }
        }
        refs.insert(name, id.to_string());
    }
    Ok(refs)
}

/// The top of the working tree that `start` is in, as `git rev-parse
/// --show-toplevel` prints it (links resolved), read in-process: every
/// command of the CLI asks it first. `None` outside a working tree (no
/// repository up to the filesystem's boundary, a bare repository, or one
/// owned by another user, which git refuses too).
pub fn top_level(start: &Path) -> Option<PathBuf> {
    let repo = git2::Repository::discover(start).ok()?;
    std::fs::canonicalize(repo.workdir()?).ok()
}

/// The commit id (40 hex) of HEAD in the repository at `path`.
///
/// # Errors
/// [`GitError::Repo`] if it is not a repository or HEAD is unborn.
pub fn head_commit(path: &Path) -> Result<String, GitError> {
    let repo = open(path)?;
    let repo_err = |source| GitError::Repo {
        context: "reading HEAD",
        path: path.to_path_buf(),
        source,
    };
    let commit = repo
        .head()
        .and_then(|h| h.peel_to_commit())
        .map_err(repo_err)?;
    Ok(commit.id().to_string())
}

/// The full ref name HEAD points at (e.g. `refs/heads/main`), or `None` when
/// HEAD is detached.
///
/// # Errors
/// [`GitError::Repo`] if it is not a repository or HEAD cannot be read.
pub fn head_branch(path: &Path) -> Result<Option<String>, GitError> {
    let repo = open(path)?;
    let head = repo
        .find_reference("HEAD")
        .map_err(|source| GitError::Repo {
            context: "reading HEAD",
            path: path.to_path_buf(),
            source,
        })?;
    Ok(head
        .symbolic_target_bytes()
        .map(|b| String::from_utf8_lossy(b).into_owned()))
}

/// The fetch URL and the push URL (`pushurl`, else the URL) of remote `name`
/// as the repository at `path` sees it: its own, global and system config,
/// with `url.*.insteadOf` applied. A relative local path is resolved against
/// the repository's working directory, where git itself would resolve it.
///
/// # Errors
/// [`GitError::Repo`] if it is not a repository or has no such remote.
pub fn remote_urls(path: &Path, name: &str) -> Result<(String, String), GitError> {
    let repo = open(path)?;
    let repo_err = |source| GitError::Repo {
        context: "reading the remote's URL (is the remote configured?)",
        path: path.to_path_buf(),
        source,
    };
    let remote = repo.find_remote(name).map_err(repo_err)?;
    let url = remote.url().map_err(repo_err)?.to_string();
    if url.is_empty() {
        return Err(repo_err(git2::Error::from_str(&format!(
            "remote `{name}` has no URL"
        ))));
    }
    let push_url = remote
        .pushurl()
        .map_err(repo_err)?
        .map_or_else(|| url.clone(), str::to_string);
    let base = repo.workdir().unwrap_or_else(|| repo.path()).to_path_buf();
    Ok((
        absolute_local_url(&base, &url),
        absolute_local_url(&base, &push_url),
    ))
}

/// The fetch URL of remote `name` of the repository at `path`, read
/// in-process as [`remote_urls`] reads it (what `git remote get-url` prints,
/// a relative local path made absolute).
///
/// # Errors
/// As [`remote_urls`].
pub fn remote_url(path: &Path, name: &str) -> Result<String, GitError> {
    remote_urls(path, name).map(|(fetch, _)| fetch)
}

/// A relative filesystem path as a remote URL is relative to where git runs;
/// our commands run elsewhere (the slot), so make it absolute. Network URLs,
/// `file://` URLs and absolute paths stay (see [`RemoteUrl`]).
fn absolute_local_url(base: &Path, url: &str) -> String {
    let relative = matches!(RemoteUrl::parse(url), RemoteUrl::Local(path)
        if path == url && Path::new(&path).is_relative());
    if !relative {
        return url.to_string();
    }
    let joined = base.join(url);
    joined
        .canonicalize()
        .unwrap_or(joined)
        .to_string_lossy()
        .into_owned()
}

/// `url` without the password in its user information, and that password
/// percent-decoded (as git would send it); `None` when the URL carries none
/// (see [`crate::remote::split_password`]). The user name stays
/// (`https://x-access-token@host/o/r`), so git asks only for the password.
/// The password, as written and decoded, is remembered as a secret
/// ([`crate::secret::remember`]) so that no message shows it.
pub fn split_url_password(url: &str) -> Option<(String, String)> {
    let split = crate::remote::split_password(url)?;
    crate::secret::remember(crate::secret::url_password_forms(url));
    Some(split)
}

/// `url` as [`split_url_password`] gives it to git: without a password.
pub fn without_password(url: &str) -> String {
    split_url_password(url).map_or_else(|| url.to_string(), |(bare, _)| bare)
}

/// A `sh` script in a private (0700) temporary directory that answers git's
/// prompts from the environment; removed on drop.
struct AskpassHelper {
    dir: tempfile::TempDir,
}

impl AskpassHelper {
    fn create() -> Result<AskpassHelper, GitError> {
        let io_err = |context, path: &Path| {
            let path = path.to_path_buf();
            move |source| GitError::Io {
                context,
                path,
                source,
            }
        };
        let tmp = std::env::temp_dir();
        let dir = tempfile::Builder::new()
            .prefix("nightshift-askpass-")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir_in(&tmp)
            .map_err(io_err("creating the askpass directory", &tmp))?;
        let script = dir.path().join("askpass.sh");
        // The script holds no secret: it prints the variable git's child
        // environment carries. git calls it with the prompt as $1.
        let body = format!(
            "#!/bin/sh\ncase \"$1\" in\n  Username*) printf '%s\\n' '{ASKPASS_USERNAME}' ;;\n  *) printf '%s\\n' \"${ASKPASS_TOKEN_VAR}\" ;;\nesac\n"
        );
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o700)
            .open(&script)
            .map_err(io_err("writing the askpass helper", &script))?;
        file.write_all(body.as_bytes())
            .map_err(io_err("writing the askpass helper", &script))?;
        Ok(AskpassHelper { dir })
    }

    fn script(&self) -> PathBuf {
        self.dir.path().join("askpass.sh")
    }
}

/// "exit status N" or "signal N", as a person reads it.
fn describe_status(outcome: &process::Outcome) -> String {
    match (outcome.exit_code, outcome.signal) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(sig)) => format!("signal {sig}"),
        (None, None) => "unknown status".to_string(),
    }
}

/// The last [`STDERR_TAIL_BYTES`] of `s`, cut at a character boundary.
fn tail(s: &str) -> String {
    let s = s.trim_end();
    if s.len() <= STDERR_TAIL_BYTES {
        return s.to_string();
    }
    let mut start = s.len() - STDERR_TAIL_BYTES;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &s[start..])
}

/// `git <args>` for messages. argv never holds a secret (tokens travel in the
/// askpass environment, URL passwords are taken out by [`split_url_password`]),
/// so it can be shown as is.
fn display_argv<S: AsRef<str>>(args: &[S]) -> String {
    let mut out = String::from("git");
    for a in args {
        let a = a.as_ref();
        if a.is_empty() || a.contains([' ', '\t', '\n', '"', '\'']) {
            let _ = write!(out, " {a:?}");
        } else {
            let _ = write!(out, " {a}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `top_level` answers what `git rev-parse --show-toplevel` does: the
    /// top from a subdirectory, reached through a link too (resolved);
    /// nothing in a bare repository or outside any.
    #[test]
    fn top_level_is_what_git_prints() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        std::fs::create_dir_all(repo.join("a/b")).unwrap();
        let git = |at: &Path, args: &[&str]| {
            let out = std::process::Command::new("git")
                .arg("-C")
                .arg(at)
                .args(args)
                .output()
                .unwrap();
            (out.status.success(), String::from_utf8(out.stdout).unwrap())
        };
        git(&repo, &["init", "-q"]);
        git(dir.path(), &["init", "-q", "--bare", "bare.git"]);
        std::os::unix::fs::symlink(repo.join("a"), dir.path().join("link")).unwrap();
        for start in [repo.join("a/b"), dir.path().join("link/b"), repo.clone()] {
            let (ok, printed) = git(&start, &["rev-parse", "--show-toplevel"]);
            assert!(ok);
            assert_eq!(top_level(&start), Some(PathBuf::from(printed.trim())));
        }
        assert_eq!(top_level(&dir.path().join("bare.git")), None);
        let outside = tempfile::tempdir().unwrap();
        assert_eq!(top_level(outside.path()), None);
    }

    /// The in-process listing is what `git ls-remote --heads --tags` prints:
    /// branches (nested names too), light and annotated tags (peeled), a
    /// symbolic branch, packed and loose refs; no other refs, no HEAD.
    #[test]
    fn local_remote_refs_are_what_ls_remote_prints() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        let g = |args: &[&str]| {
            let out = std::process::Command::new("git")
                .args(["-c", "user.name=t", "-c", "user.email=t@t", "-C"])
                .arg(p)
                .args(args)
                .output()
                .unwrap();
            assert!(out.status.success(), "{args:?}: {out:?}");
            String::from_utf8(out.stdout).unwrap()
        };
        g(&["init", "-q", "-b", "main"]);
        g(&["commit", "-q", "--allow-empty", "-m", "one"]);
        g(&["branch", "nightshift/a-1"]);
        g(&["tag", "light"]);
        g(&["tag", "-a", "-m", "annotated", "v1"]);
        g(&["tag", "-a", "-m", "on a tag", "v1-again", "v1"]);
        g(&["pack-refs", "--all"]);
        g(&["commit", "-q", "--allow-empty", "-m", "two"]);
        g(&["symbolic-ref", "refs/heads/alias", "refs/heads/main"]);
        g(&["update-ref", "refs/pull/1/head", "HEAD"]);
        let listed: BTreeMap<String, String> = g(&["ls-remote", "--heads", "--tags", "."])
            .lines()
            .filter_map(|l| l.split_once('\t'))
            .map(|(id, name)| (name.to_string(), id.to_string()))
            .collect();
        assert!(listed.contains_key("refs/tags/v1^{}"));
        assert_eq!(local_remote_refs(p).unwrap(), listed);
        assert!(local_remote_refs(&p.join("missing")).is_err());
    }

    #[test]
    fn relative_local_urls_become_absolute_and_others_stay() {
        let base = Path::new("/nonexistent/repo");
        assert_eq!(
            absolute_local_url(base, "../remote.git"),
            "/nonexistent/repo/../remote.git"
        );
        for url in [
            "https://github.com/o/r.git",
            "git@github.com:o/r.git",
            "ssh://git@host/o/r",
            "file:///srv/r.git",
            "/srv/r.git",
        ] {
            assert_eq!(absolute_local_url(base, url), url);
        }
    }

    #[test]
    fn url_passwords_are_taken_out_and_decoded() {
        assert_eq!(
            split_url_password("https://x-access-token:ghs_p%40ss@github.com/o/r.git"),
            Some((
                "https://x-access-token@github.com/o/r.git".into(),
                "ghs_p@ss".into()
            ))
        );
        assert_eq!(
            split_url_password("http://:tok_123456@127.0.0.1:8/r"),
            Some(("http://127.0.0.1:8/r".into(), "tok_123456".into()))
        );
        assert_eq!(split_url_password("https://user@host/a:b@c"), None);
        assert_eq!(split_url_password("git@github.com:o/r.git"), None);
        assert_eq!(without_password("/srv/r.git"), "/srv/r.git");
        // Remembered: no message shows it from now on, either spelling.
        assert_eq!(
            crate::secret::redact_known("x ghs_p@ss ghs_p%40ss y"),
            "x **** **** y"
        );
    }

    #[test]
    fn stderr_tail_keeps_the_end() {
        let long = format!("{}fatal: the reason", "x".repeat(10_000));
        let t = tail(&long);
        assert!(t.ends_with("fatal: the reason"));
        assert!(t.len() <= STDERR_TAIL_BYTES + "…".len());
    }

    #[test]
    fn argv_display_quotes_only_when_needed() {
        assert_eq!(
            display_argv(&["commit", "-m", "two words"]),
            "git commit -m \"two words\""
        );
    }
}
