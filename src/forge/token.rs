//! Which API base and token to use: `GITHUB_API_URL`, `GITHUB_TOKEN`,
//! `GH_TOKEN`, else `gh auth token`.

use std::path::Path;
use std::time::Duration;

use super::DEFAULT_API_BASE;
use crate::process;
use crate::secret::Secret;

/// How long `gh auth token` may take before it is killed and ignored.
pub const GH_TOKEN_TIMEOUT: Duration = Duration::from_secs(10);

/// The API base: `GITHUB_API_URL` if set and non-empty, else
/// `https://api.github.com`; without a trailing slash (docs/github.md).
pub fn api_base() -> String {
    match std::env::var("GITHUB_API_URL") {
        Ok(url) if !url.trim().is_empty() => url.trim().trim_end_matches('/').to_string(),
        _ => DEFAULT_API_BASE.to_string(),
    }
}

/// The GitHub token and where it came from: `GITHUB_TOKEN`, else `GH_TOKEN`
/// (values the caller took out of the environment at start-up, docs/agents.md#environment),
/// else the output of `gh auth token` (killed after 10 s; a missing `gh`
/// means no token). Empty values count as unset. Source is one of
/// `"GITHUB_TOKEN"`, `"GH_TOKEN"`, `"gh auth token"` (docs/github.md#token).
pub fn resolve_token(env_removed: &[(String, Secret)]) -> Option<(Secret, &'static str)> {
    resolve_token_using(env_removed, Path::new("gh"), GH_TOKEN_TIMEOUT)
}

/// [`resolve_token`] with the `gh` executable and its timeout given, for
/// tests and for `doctor`.
pub fn resolve_token_using(
    env_removed: &[(String, Secret)],
    gh: &Path,
    timeout: Duration,
) -> Option<(Secret, &'static str)> {
    for var in ["GITHUB_TOKEN", "GH_TOKEN"] {
        let found = env_removed
            .iter()
            .find(|(name, value)| name == var && !value.expose().trim().is_empty());
        if let Some((_, value)) = found {
            return Some((Secret::new(value.expose().trim()), var));
        }
    }
    token_from_gh(gh, timeout).map(|token| (token, "gh auth token"))
}

/// Runs `gh auth token` through the process runner (own process group,
/// killed with its group after `timeout`, one second of grace), with
/// nightshift's environment as agents get it ([`process::child_env`]). Any
/// failure means "no token from gh".
fn token_from_gh(gh: &Path, timeout: Duration) -> Option<Secret> {
    let cmd = process::Command::new(gh.display().to_string())
        .args(["auth", "token"])
        .env_map(process::child_env(
            std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
            &[],
        ))
        .timeout(timeout)
        .grace(Duration::from_secs(1))
        .capture_stdout(true);
    let outcome = process::run_blocking(cmd, None).ok()?;
    if outcome.timed_out {
        tracing::warn!(gh = %gh.display(), timeout_s = timeout.as_secs_f64(), "`gh auth token` timed out; no token from gh");
        return None;
    }
    if !outcome.success() {
        return None;
    }
    let out = String::from_utf8(outcome.stdout).ok()?;
    let token = out.trim();
    (!token.is_empty()).then(|| Secret::new(token))
}
