//! Which API base and token to use: `GITHUB_API_URL`, `GITHUB_TOKEN`,
//! `GH_TOKEN`, else `gh auth token`.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::DEFAULT_API_BASE;
use crate::secret::Secret;

/// How long `gh auth token` may take before it is killed and ignored.
pub const GH_TOKEN_TIMEOUT: Duration = Duration::from_secs(10);

/// The API base: `GITHUB_API_URL` if set and non-empty, else
/// `https://api.github.com`; without a trailing slash (SPEC §8).
pub fn api_base() -> String {
    match std::env::var("GITHUB_API_URL") {
        Ok(url) if !url.trim().is_empty() => url.trim().trim_end_matches('/').to_string(),
        _ => DEFAULT_API_BASE.to_string(),
    }
}

/// The GitHub token and where it came from: `GITHUB_TOKEN`, else `GH_TOKEN`
/// (values the caller took out of the environment at start-up, SPEC §6),
/// else the output of `gh auth token` (killed after 10 s; a missing `gh`
/// means no token). Empty values count as unset. Source is one of
/// `"GITHUB_TOKEN"`, `"GH_TOKEN"`, `"gh auth token"` (SPEC §8).
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

/// Runs `gh auth token` in its own process group, killed (group and all)
/// after `timeout`. Any failure means "no token from gh".
pub(super) fn token_from_gh(gh: &Path, timeout: Duration) -> Option<Secret> {
    use std::os::unix::process::CommandExt;
    let mut child = Command::new(gh)
        .args(["auth", "token"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .ok()?;
    let mut stdout = child.stdout.take()?;
    // Read in a thread so a chatty child cannot block on a full pipe while
    // this thread polls for its exit.
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        stdout.read_to_string(&mut out).ok().map(|_| out)
    });
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < timeout => {
                std::thread::sleep(Duration::from_millis(20))
            }
            _ => {
                if let Ok(pid) = i32::try_from(child.id()) {
                    let _ = nix::sys::signal::killpg(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                let _ = child.kill();
                let _ = child.wait();
                tracing::warn!(gh = %gh.display(), timeout_s = timeout.as_secs_f64(), "`gh auth token` timed out; no token from gh");
                return None;
            }
        }
    };
    if !status.success() {
        return None;
    }
    let out = reader.join().ok()??;
    let token = out.trim();
    (!token.is_empty()).then(|| Secret::new(token))
}
