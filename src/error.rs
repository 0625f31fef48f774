//! The one place where failures become exit codes (SPEC §2).
//!
//! 0: the run completed (or there was nothing to do, or the deadline stopped
//! it cleanly); 1: an item failed, or a signal or a systemic error stopped the
//! run; 2: usage or configuration error; 3: refused for safety (no valid
//! approval, lock held). Library modules return their own typed errors; the
//! CLI wraps them here with the kind that decides the code.

use std::fmt;

/// Process exit codes of SPEC §2.
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

/// A failure that ends the command, with the exit code it maps to.
#[derive(Debug)]
pub struct Error {
    /// The exit code.
    pub code: ExitCode,
    /// What happened and how to fix it (may span lines).
    pub message: String,
}

impl Error {
    /// A usage or configuration error (exit 2).
    pub fn usage(message: impl Into<String>) -> Self {
        Error {
            code: ExitCode::Usage,
            message: message.into(),
        }
    }
    /// A refusal for safety (exit 3).
    pub fn refused(message: impl Into<String>) -> Self {
        Error {
            code: ExitCode::Refused,
            message: message.into(),
        }
    }
    /// A systemic failure (exit 1).
    pub fn failure(message: impl Into<String>) -> Self {
        Error {
            code: ExitCode::Failure,
            message: message.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<crate::config::ConfigError> for Error {
    fn from(e: crate::config::ConfigError) -> Self {
        Error::usage(e.to_string())
    }
}

impl From<crate::approval::Refusal> for Error {
    fn from(e: crate::approval::Refusal) -> Self {
        Error::refused(e.to_string())
    }
}

impl From<sqlx::Error> for Error {
    /// A ledger query failed mid-command: a systemic error (exit 1). The
    /// server's own message and SQLSTATE, not the driver's decoration (whose
    /// "at line N" is a line of PostgreSQL's source, not of a user's file).
    fn from(e: sqlx::Error) -> Self {
        let detail = match &e {
            // The server went away mid-command (stopped, restarted, network):
            // say so, and that the next drain takes the run up again.
            e if crate::ledger::is_outage(e) || matches!(e, sqlx::Error::PoolClosed) => format!(
                "the database stopped answering ({}); {}. Nothing recorded is lost: once it is back, `nightshift drain` resumes this run",
                match e {
                    sqlx::Error::Database(db) => db.message().to_string(),
                    e => e.to_string(),
                },
                crate::ledger::db_source_from_env().describe()
            ),
            sqlx::Error::Database(db) => match db.code() {
                Some(code) => format!("{} (SQLSTATE {code})", db.message()),
                None => db.message().to_string(),
            },
            other => other.to_string(),
        };
        Error::failure(format!("ledger: {detail}"))
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
            let err = Error::from(e);
            assert_eq!(err.code, ExitCode::Failure);
            assert!(
                err.message
                    .starts_with("ledger: the database stopped answering ("),
                "{}",
                err.message
            );
            assert!(
                err.message.contains("`nightshift drain` resumes this run"),
                "{}",
                err.message
            );
        }
        // Other errors keep their own words.
        let err = Error::from(sqlx::Error::RowNotFound);
        assert!(
            !err.message.contains("stopped answering"),
            "{}",
            err.message
        );
    }
}
