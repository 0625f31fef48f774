//! `nightshift doctor` (docs/commands.md): runs [`crate::doctor`]'s checks
//! and prints one line per check with its fix, then the count; exit 1 if
//! any fails.

use crate::cli::{Cli, Startup, location};
use crate::error::{Error, Result};

/// `nightshift doctor`.
pub(crate) async fn doctor(cli: &Cli, startup: &Startup) -> Result<()> {
    let checks = crate::doctor::run_checks(&location(cli), startup).await;
    for c in &checks {
        // A check may quote a URL, an error or a reply: no secret in it.
        println!("{}", crate::secret::redact_known(&c.line()));
    }
    let failed = checks.iter().filter(|c| !c.ok).count();
    let warned = checks.iter().filter(|c| c.warn).count();
    if failed == 0 {
        if warned > 0 {
            println!(
                "all {} checks passed ({warned} with a warning)",
                checks.len()
            );
        } else {
            println!("all {} checks passed", checks.len());
        }
        Ok(())
    } else {
        println!("{failed} of {} checks failed", checks.len());
        Err(Error::ChecksFailed {
            failed,
            total: checks.len(),
        })
    }
}
