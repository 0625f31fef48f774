//! Which repository to talk to: `GH_REPO`, config `github_repo`, else the
//! remote's URL.

use std::fmt;

use super::error::ForgeError;
use crate::remote::RemoteUrl;

/// A GitHub repository, `owner/name`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RepoId {
    pub owner: String,
    pub name: String,
}

impl RepoId {
    /// Builds a repository id from its two parts.
    pub fn new(owner: impl Into<String>, name: impl Into<String>) -> RepoId {
        RepoId {
            owner: owner.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for RepoId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.owner, self.name)
    }
}

/// The repository to use: `GH_REPO` (gh's `[HOST/]OWNER/REPO`) if set, else
/// config `github_repo`, else parsed from the remote's URL (docs/github.md#repository). Empty
/// strings count as unset. An invalid `GH_REPO` or `github_repo` is an error,
/// not a silent fall-through.
///
/// # Errors
/// [`ForgeError::BadRepo`] for a malformed `GH_REPO` / `github_repo`;
/// [`ForgeError::NoRepo`] when nothing names a GitHub repository.
pub fn resolve_repo(
    gh_repo_env: Option<&str>,
    config: Option<&str>,
    remote_url: Option<&str>,
) -> Result<RepoId, ForgeError> {
    if let Some(value) = given(gh_repo_env) {
        return parse_repo_spec(value).ok_or(ForgeError::BadRepo {
            source_name: "GH_REPO",
            value: value.to_string(),
        });
    }
    if let Some(value) = given(config) {
        return parse_repo_spec(value).ok_or(ForgeError::BadRepo {
            source_name: "config github_repo",
            value: value.to_string(),
        });
    }
    match given(remote_url) {
        Some(url) => repo_from_remote_url(url).ok_or_else(|| ForgeError::NoRepo {
            reason: format!(
                "the remote URL {:?} is not a GitHub repository URL",
                crate::remote::without_userinfo(url)
            ),
        }),
        None => Err(ForgeError::NoRepo {
            reason: "no GH_REPO, no github_repo and no remote URL".to_string(),
        }),
    }
}

/// A trimmed value, `None` when absent or empty.
pub(super) fn given(value: Option<&str>) -> Option<&str> {
    value.map(str::trim).filter(|v| !v.is_empty())
}

/// `OWNER/REPO`, `HOST/OWNER/REPO`, or a URL.
pub(super) fn parse_repo_spec(value: &str) -> Option<RepoId> {
    if value.contains("://") || value.contains('@') {
        return repo_from_remote_url(value);
    }
    let parts: Vec<&str> = value.trim_matches('/').split('/').collect();
    match parts.as_slice() {
        [owner, name] | [_, owner, name] => {
            repo_id(owner, name.strip_suffix(".git").unwrap_or(name))
        }
        _ => None,
    }
}

pub(super) fn repo_id(owner: &str, name: &str) -> Option<RepoId> {
    let valid = |s: &str| {
        !s.is_empty()
            && s != "."
            && s != ".."
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    (valid(owner) && valid(name)).then(|| RepoId::new(owner, name))
}

/// Parses a git remote URL into `owner/name` (see [`RemoteUrl`]):
/// `https://[user[:pw]@]HOST/o/r[.git][/]`, `http://…`, scp-like
/// `[user@]HOST:o/r[.git]`, `ssh://[user@]HOST[:port]/o/r[.git]`, `git://…`,
/// on github.com or any GitHub Enterprise host. Returns `None` for local
/// paths, `file://` URLs, remote helpers' URLs and paths that are not
/// exactly `owner/repo`.
pub fn repo_from_remote_url(url: &str) -> Option<RepoId> {
    let remote = RemoteUrl::parse(url);
    let (owner, name) = remote
        .network()
        .filter(|n| n.speaks_git())?
        .owner_and_name()?;
    repo_id(owner, name)
}
