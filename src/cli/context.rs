//! What every command needs before it does its own work: the repository
//! (`--repo`), its config (`--config`), its identity in the ledger, the
//! ledger's pool and the data directory, resolved by [`crate::settings`]
//! from the global flags. Not for any one command's business.

use std::path::{Path, PathBuf};

use crate::config::Loaded;
use crate::error::Result;

use super::Cli;

pub use crate::settings::{
    NoToken, Startup, data_dir, github_client, ledger, ledger_serial, no_token, repo_id,
};
pub(crate) use crate::settings::{agents_environment, install_approval_key, no_token_in};

/// `--repo` and `--config` as given.
pub(crate) fn location(cli: &Cli) -> crate::settings::Location {
    crate::settings::Location {
        repo: cli.repo.clone(),
        config: cli.config.clone(),
    }
}

/// The user's repository root: `--repo` or the current directory's repo
/// ([`crate::settings::repo_root`]).
///
/// # Errors
/// Exit 2 when it is not inside a git repository.
pub fn repo_root(cli: &Cli) -> Result<PathBuf> {
    crate::settings::repo_root(cli.repo.as_deref())
}

/// Loads the config of `repo` (or `--config`; [`crate::settings::load_config`]).
///
/// # Errors
/// Exit 2 with file:line for a bad config.
pub fn load_config(cli: &Cli, repo: &Path) -> Result<Loaded> {
    crate::settings::load_config(cli.config.as_deref(), repo)
}

/// [`repo_id`] with the remote named by the config (read leniently: a
/// command that only reads the ledger should not fail on a config typo).
pub fn repo_identity(cli: &Cli, repo: &Path) -> String {
    let remote = load_config(cli, repo)
        .map(|l| l.config.remote)
        .unwrap_or_else(|_| "origin".into());
    repo_id(repo, &remote)
}
