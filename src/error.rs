//! The one place where failures become exit codes (docs/commands.md).
//!
//! Every command returns `Result<()>`; [`exit_code`] (through
//! [`Error::exit_code`]) is the only function that picks a process exit
//! code: 0 the command did its work (a run completed, or there was nothing
//! to do, or the deadline stopped it cleanly); 1 an item failed, a signal or
//! a systemic error stopped the run, or a check or an outside service failed;
//! 2 usage or configuration error; 3 refused for safety (no valid approval,
//! lock held). Library modules return their own typed errors; the CLI wraps
//! them in the variant that says what happened.

use std::fmt;

use crate::outcome::RunStatus;

/// Process exit codes (docs/commands.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitCode {
    /// 0: completed.
    Ok = 0,
    /// 1: an item failed, a signal, or a systemic error.
    Failure = 1,
    /// 2: usage or configuration error.
    Usage = 2,
    /// 3: refused for safety.
    Refused = 3,
}

/// Why a command did not do (all of) its work. Each variant carries the facts;
/// [`Error::exit_code`] decides the exit code from the variant alone.
#[derive(Debug)]
pub enum Error {
    /// A command-line argument or flag is wrong (`--approve`, `--deadline`,
    /// `ITEM`, `--run`, `--now`, `--tz`, `--repo`, `--config`). `problem`
    /// names the argument and the fix.
    Argument {
        /// What is wrong and how to fix it.
        problem: String,
    },
    /// The setup is wrong: the config file, the backlog, the repository (its
    /// remote or base), the machine (`agent_user`, a token), or the ledger's
    /// URL. `problem` names the file or setting and the fix.
    Config {
        /// What is wrong and how to fix it (may span lines).
        problem: String,
    },
    /// Refused for safety: no usable approval, or another run holds the
    /// repository's lock or checkouts.
    Refused {
        /// Why, and what to do.
        reason: String,
    },
    /// A ledger query failed, or the database stopped answering (`outage`).
    Ledger {
        /// The server's own message (and SQLSTATE), or what the driver saw.
        detail: String,
        /// The server went away (stopped, restarted, network): the next
        /// drain resumes the run.
        outage: bool,
        /// Where the ledger lives (see `ledger::DbSource::describe`), when
        /// the code that failed knows it.
        source: Option<String>,
    },
    /// Something outside the command's input failed: GitHub, git, the file
    /// system, the embedded database.
    Failed {
        /// What failed, with the underlying error.
        problem: String,
    },
    /// A failure outside the items stopped the run (status `crashed`).
    RunStopped {
        /// What stopped it.
        why: String,
        /// How to take the run up again.
        next: String,
    },
    /// The run ended (its report is printed) with failed items, or stopped
    /// on a signal or a crash.
    RunEnded {
        /// How the run ended.
        status: RunStatus,
        /// Items that ended in a failure outcome.
        failed_items: usize,
    },
    /// A worker's claim on an item passed to another worker (its lease ran
    /// out while it was paused or cut off, docs/workers.md#fencing): the
    /// attempt stopped and wrote nothing more.
    ClaimLost {
        /// Which claim, and why it is gone.
        why: String,
    },
    /// `doctor`: some checks failed (each printed on its own line).
    ChecksFailed {
        /// Failed checks.
        failed: usize,
        /// All checks.
        total: usize,
    },
}

impl Error {
    /// A bad argument (exit 2).
    pub fn argument(problem: impl Into<String>) -> Self {
        Error::Argument {
            problem: problem.into(),
        }
    }
    /// A setup or configuration error (exit 2).
    pub fn config(problem: impl Into<String>) -> Self {
        Error::Config {
            problem: problem.into(),
        }
    }
    /// A refusal for safety (exit 3).
    pub fn refused(reason: impl Into<String>) -> Self {
        Error::Refused {
            reason: reason.into(),
        }
    }
    /// An outside failure (exit 1).
    pub fn failed(problem: impl Into<String>) -> Self {
        Error::Failed {
            problem: problem.into(),
        }
    }

    /// How a run that ended with `status` and `failed_items` failed items
    /// ends the command: `Ok` when it completed (or the deadline stopped it)
    /// with no failed item.
    ///
    /// # Errors
    /// [`Error::RunEnded`] otherwise.
    pub fn of_run(status: RunStatus, failed_items: usize) -> Result<()> {
        if status.fails_run() || failed_items > 0 {
            Err(Error::RunEnded {
                status,
                failed_items,
            })
        } else {
            Ok(())
        }
    }

    /// The exit code of this error: the one mapping (docs/commands.md).
    pub fn exit_code(&self) -> ExitCode {
        match self {
            Error::Argument { .. } | Error::Config { .. } => ExitCode::Usage,
            Error::Refused { .. } => ExitCode::Refused,
            Error::Ledger { .. }
            | Error::Failed { .. }
            | Error::RunStopped { .. }
            | Error::RunEnded { .. }
            | Error::ClaimLost { .. }
            | Error::ChecksFailed { .. } => ExitCode::Failure,
        }
    }

    /// Whether the command already told the user (the run's report, the
    /// checks' lines): `main` then prints no `error:` line.
    pub fn already_reported(&self) -> bool {
        matches!(self, Error::RunEnded { .. } | Error::ChecksFailed { .. })
    }
}

/// The exit code of a command's result: 0 on success, else
/// [`Error::exit_code`].
pub fn exit_code(r: &Result<()>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::Ok,
        Err(e) => e.exit_code(),
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Argument { problem } | Error::Config { problem } => f.write_str(problem),
            Error::Failed { problem } => f.write_str(problem),
            Error::Refused { reason } => f.write_str(reason),
            Error::Ledger {
                detail,
                outage: false,
                ..
            } => write!(f, "ledger: {detail}"),
            Error::Ledger {
                detail,
                outage: true,
                source,
            } => {
                write!(f, "ledger: the database stopped answering ({detail}); ")?;
                if let Some(s) = source {
                    write!(f, "{s}. ")?;
                }
                f.write_str(
                    "Nothing recorded is lost: once it is back, `nightshift drain` resumes this run",
                )
            }
            Error::ClaimLost { why } => f.write_str(why),
            Error::RunStopped { why, next } => write!(f, "the run stopped: {why}. {next}"),
            Error::RunEnded {
                status,
                failed_items,
            } => write!(
                f,
                "the run ended {status} with {failed_items} failed item(s)"
            ),
            Error::ChecksFailed { failed, total } => {
                write!(f, "{failed} of {total} checks failed")
            }
        }
    }
}

impl std::error::Error for Error {}

impl From<crate::config::ConfigError> for Error {
    fn from(e: crate::config::ConfigError) -> Self {
        Error::config(e.to_string())
    }
}

impl From<crate::approval::Refusal> for Error {
    fn from(e: crate::approval::Refusal) -> Self {
        Error::refused(e.to_string())
    }
}

impl From<sqlx::Error> for Error {
    /// A ledger query failed mid-command. The server's own message and
    /// SQLSTATE, not the driver's decoration (whose "at line N" is a line of
    /// PostgreSQL's source, not of a user's file). Where the ledger lives is
    /// added by the CLI, which knows it ([`Error::with_ledger_source`]).
    fn from(e: sqlx::Error) -> Self {
        let outage = crate::ledger::is_outage(&e) || matches!(e, sqlx::Error::PoolClosed);
        let detail = match &e {
            sqlx::Error::Database(db) if outage => db.message().to_string(),
            sqlx::Error::Database(db) => match db.code() {
                Some(code) => format!("{} (SQLSTATE {code})", db.message()),
                None => db.message().to_string(),
            },
            other => other.to_string(),
        };
        Error::Ledger {
            detail,
            outage,
            source: None,
        }
    }
}

impl Error {
    /// Names where the ledger lives in an outage error that does not say
    /// yet (`describe` is called only then).
    pub fn with_ledger_source(self, describe: impl FnOnce() -> String) -> Self {
        match self {
            Error::Ledger {
                detail,
                outage: true,
                source: None,
            } => Error::Ledger {
                detail,
                outage: true,
                source: Some(describe()),
            },
            e => e,
        }
    }
}

/// Result of a CLI command.
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod ledger_error_tests {
    use super::*;

    #[test]
    fn a_lost_database_says_so_and_how_the_run_resumes() {
        for e in [
            sqlx::Error::PoolTimedOut,
            sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset)),
            sqlx::Error::PoolClosed,
        ] {
            let err = Error::from(e).with_ledger_source(|| "the ledger X".into());
            assert_eq!(err.exit_code(), ExitCode::Failure);
            let message = err.to_string();
            assert!(
                message.starts_with("ledger: the database stopped answering ("),
                "{message}"
            );
            assert!(message.contains("); the ledger X. Nothing"), "{message}");
            assert!(
                message.contains("`nightshift drain` resumes this run"),
                "{message}"
            );
        }
        // Other errors keep their own words.
        let err = Error::from(sqlx::Error::RowNotFound);
        assert!(!err.to_string().contains("stopped answering"), "{err}");
    }

    #[test]
    fn each_variant_has_its_exit_code() {
        assert_eq!(exit_code(&Ok(())), ExitCode::Ok);
        assert_eq!(Error::argument("x").exit_code(), ExitCode::Usage);
        assert_eq!(Error::config("x").exit_code(), ExitCode::Usage);
        assert_eq!(Error::refused("x").exit_code(), ExitCode::Refused);
        assert_eq!(Error::failed("x").exit_code(), ExitCode::Failure);
        assert!(Error::of_run(RunStatus::Completed, 0).is_ok());
        assert!(Error::of_run(RunStatus::StoppedDeadline, 0).is_ok());
        for (status, failed) in [
            (RunStatus::Completed, 1),
            (RunStatus::StoppedSignal, 0),
            (RunStatus::Crashed, 0),
        ] {
            let e = Error::of_run(status, failed).unwrap_err();
            assert_eq!(e.exit_code(), ExitCode::Failure);
            assert!(e.already_reported());
        }
    }
}
