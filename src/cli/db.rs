//! `nightshift db start|stop|status` (SPEC §9): the embedded private cluster.

use crate::cli::DbCommand;
use crate::error::{Error, ExitCode, Result};
use crate::ledger::embedded::Cluster;

/// Runs a `db` subcommand.
pub(crate) async fn run(what: &DbCommand) -> Result<ExitCode> {
    if let Some(var) = crate::ledger::db_source_from_env().env_var() {
        eprintln!("note: {var} is set, so nightshift uses that server, not the embedded cluster");
    }
    let cluster = Cluster::from_env().await.map_err(|e| Error::failure(e.to_string()))?;
    let status = match what {
        DbCommand::Start => cluster.start().await,
        DbCommand::Stop => cluster.stop().await,
        DbCommand::Status => cluster.status().await,
    }
    .map_err(|e| Error::failure(e.to_string()))?;
    print!("{status}");
    Ok(ExitCode::Ok)
}
