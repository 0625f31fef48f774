//! `nightshift db start|stop|status` (docs/ledger.md#embedded-default): the embedded private cluster.

use crate::cli::DbCommand;
use crate::error::{Error, Result};
use crate::ledger::embedded::Cluster;

/// Runs a `db` subcommand.
pub(crate) async fn run(what: &DbCommand) -> Result<()> {
    if let Some(var) = crate::ledger::db_source_from_env().env_var() {
        eprintln!("note: {var} is set, so nightshift uses that server, not the embedded cluster");
    }
    let cluster = Cluster::from_env()
        .await
        .map_err(|e| Error::failed(e.to_string()))?;
    let status = match what {
        DbCommand::Start => cluster.start().await,
        DbCommand::Stop => cluster.stop().await,
        DbCommand::Status => cluster.status().await,
    }
    .map_err(|e| Error::failed(e.to_string()))?;
    // Say what was done first; the status block follows.
    match (what, status.running) {
        (DbCommand::Start, true) => println!("the embedded database is running"),
        (DbCommand::Stop, false) => {
            println!("the embedded database is stopped (any nightshift command starts it again)")
        }
        (DbCommand::Status, _) => {}
        (_, running) => println!(
            "the embedded database is {}",
            if running {
                "still running"
            } else {
                "not running"
            }
        ),
    }
    print!("{status}");
    Ok(())
}
