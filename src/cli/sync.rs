//! `nightshift sync` (docs/backlog.md#ticks-and-sync): resolves the
//! repository and its config, runs [`crate::sync::sync`] and prints what it
//! did.

use crate::cli::{Cli, Startup, load_config, repo_root};
use crate::error::Result;

/// `nightshift sync`.
///
/// # Errors
/// What [`crate::sync::sync`] returns; a bad repository or config (exit 2).
pub(crate) async fn sync(cli: &Cli, startup: &Startup) -> Result<()> {
    let repo = repo_root(cli)?;
    let config = load_config(cli, &repo)?.config;
    let said = crate::sync::sync(&repo, &config, startup).await?;
    println!("{said}");
    Ok(())
}
