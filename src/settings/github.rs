//! GitHub and the remote as a run sees them (docs/github.md#token): the
//! remote's URL, the token, the client, the checks that the remote and its
//! base branch exist, and the tend cards of nightshift's open PRs as GitHub
//! shows them now. Not the client itself ([`crate::forge`]) nor what the
//! run does on GitHub ([`crate::run`]).

use std::path::Path;

use crate::error::{Error, Result};
use crate::forge;
use crate::secret::Secret;

use super::{Request, Snapshot, Startup};

/// GitHub and the remote as this run sees them (docs/github.md#token).
pub struct GitHub {
    /// The configured remote's URL; `None` when there is no such remote.
    pub remote_url: Option<String>,
    /// The token, from the variables `main` removed, else from `gh`.
    pub token: Option<Secret>,
    /// The client, when a token and a GitHub repository are known.
    pub forge: Option<forge::Forge>,
    /// Why there is no client (shown in the report).
    pub forge_missing: Option<String>,
}

impl GitHub {
    /// Reads the remote's URL, finds the token and builds the client (its
    /// calls end by the deadline). Nothing here fails the run: without
    /// GitHub it pushes branches only.
    pub fn resolve(req: &Request, startup: &Startup) -> GitHub {
        let remote_url = crate::git::remote_url(&req.repo, &req.config.remote).ok();
        let token = forge::resolve_token(&startup.removed).map(|(t, _)| t);
        let (forge, forge_missing) = match &token {
            Some(t) => match github_client(&req.repo, &req.config, t, Some(req.deadline)) {
                Ok(f) => (Some(f), None),
                Err(why) => (None, Some(why)),
            },
            None => (
                None,
                Some(no_token(&req.config, remote_url.as_deref()).to_string()),
            ),
        };
        GitHub {
            remote_url,
            token,
            forge,
            forge_missing,
        }
    }

    /// The token's text, for git's askpass helper.
    pub fn token_text(&self) -> Option<&str> {
        self.token.as_ref().map(Secret::expose)
    }
}

/// Warns of a password in the remote's URL, refuses a missing remote, reads
/// its (fetch, push) URLs once — like the backlog, the whole run fetches and
/// pushes there — and checks the base branch is on it.
///
/// # Errors
/// Exit 2 when the remote or its base branch does not exist.
pub fn check_remote(req: &Request, github: &GitHub) -> Result<(String, String)> {
    let config = &req.config;
    // nightshift keeps such a password out of argv, the checkouts and its
    // records, but the user's own .git/config holds it, and agents running
    // as this user can read that file (the checkout's alternates name it).
    if github
        .remote_url
        .as_deref()
        .and_then(crate::secret::url_password)
        .is_some()
    {
        eprintln!(
            "warning: the URL of the remote {:?} carries a password or token; agents running as you can read it in {}/.git/config. Give git the token through a credential helper or GITHUB_TOKEN instead",
            config.remote,
            req.repo.display()
        );
    }
    let Some(url) = github.remote_url.as_deref() else {
        return Err(Error::config(format!(
            "{}: the remote {:?} does not exist; add it (`git remote add {} URL`) or set `remote` in the config",
            req.repo.display(),
            config.remote,
            config.remote
        )));
    };
    let remote_urls = crate::git::remote_urls(&req.repo, &config.remote)
        .map_err(|e| Error::config(format!("{}: {e}", req.repo.display())))?;
    check_base_branch(req, github, url)?;
    Ok(remote_urls)
}

/// Every item starts from `<remote>/<base>`: a missing base would fail each
/// item in turn. Checked before the approval is consumed; a remote that
/// cannot be reached now is left to the items (it may come back).
///
/// # Errors
/// Exit 2 when the remote at `url` answers without the base branch.
fn check_base_branch(req: &Request, github: &GitHub, url: &str) -> Result<()> {
    let config = &req.config;
    match crate::run::remote_has_branch(&req.repo, github.token_text(), url, &config.base) {
        Ok(false) => {
            return Err(Error::config(format!(
                "the base branch {:?} does not exist on the remote {:?}; push it or set `base` in the config",
                config.base, config.remote
            )));
        }
        Ok(true) => {}
        Err(e) => eprintln!(
            "warning: cannot reach the remote to check the base branch: {}",
            crate::secret::redact_known(&e.to_string())
        ),
    }
    Ok(())
}

/// The GitHub client for `repo` (docs/github.md#repository): owner/repo from `GH_REPO`, else
/// config `github_repo`, else the remote's URL; API base from
/// `GITHUB_API_URL`; the retry policy from the environment. `deadline`
/// bounds the waits of its retries.
///
/// # Errors
/// A sentence saying why there is no client (no GitHub repository, a bad
/// API base) and how to fix it.
pub fn github_client(
    repo: &Path,
    config: &crate::config::Config,
    token: &Secret,
    deadline: Option<chrono::DateTime<chrono::Utc>>,
) -> std::result::Result<crate::forge::Forge, String> {
    use crate::forge;
    let remote_url = crate::git::remote_url(repo, &config.remote).ok();
    let id = forge::resolve_repo(
        std::env::var("GH_REPO").ok().as_deref(),
        config.github_repo.as_deref(),
        remote_url.as_deref(),
    )
    .map_err(|e| e.to_string())?;
    let f = forge::Forge::new(&forge::api_base(), token.clone(), id, deadline)
        .map_err(|e| e.to_string())?;
    Ok(f.with_retry_policy(forge::RetryPolicy::from_env()))
}

/// Why nightshift opens no PR without a GitHub token, and what to do: the
/// one text `doctor`'s token line and the report's rows say
/// (docs/github.md). Display: `WHAT; FIX`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoToken {
    /// What is missing, e.g. `no GitHub token for owner/repo`.
    pub what: String,
    /// What happens meanwhile and how to give nightshift a token.
    pub fix: &'static str,
    /// Whether the repository is on GitHub (then PRs are wanted: doctor fails).
    pub on_github: bool,
}

impl std::fmt::Display for NoToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}; {}", self.what, self.fix)
    }
}

/// [`NoToken`] for a repository whose remote URL is `remote_url`: on GitHub
/// when `GH_REPO`, `github_repo` or the URL names a GitHub repository.
pub fn no_token(config: &crate::config::Config, remote_url: Option<&str>) -> NoToken {
    match crate::forge::resolve_repo(
        std::env::var("GH_REPO").ok().as_deref(),
        config.github_repo.as_deref(),
        remote_url,
    ) {
        Ok(id) => NoToken {
            what: format!("no GitHub token for {id}"),
            fix: "set GITHUB_TOKEN or GH_TOKEN, or log in with `gh auth login`; without one, branches are pushed but no PR is opened",
            on_github: true,
        },
        Err(_) => NoToken {
            what: "no GitHub token, and the remote is not a GitHub repository".into(),
            fix: "branches are pushed and `nightshift report --show-body` shows each PR that would have been opened; to open them, set GITHUB_TOKEN (or GH_TOKEN, or `gh auth login`) and GH_REPO=OWNER/REPO",
            on_github: false,
        },
    }
}

/// [`no_token`] for the repository at `repo`, its remote's URL read
/// in-process ([`crate::git::remote_url`]; none when that fails).
pub fn no_token_in(repo: &Path, config: &crate::config::Config) -> NoToken {
    let url = crate::git::remote_url(repo, &config.remote).ok();
    no_token(config, url.as_deref())
}

/// The retry policy of `plan`'s look at open PRs: a person waits at the
/// terminal, so a GitHub that does not answer is given up on within about
/// half a minute rather than the night's 15 minutes.
fn plan_retry_policy() -> crate::forge::RetryPolicy {
    crate::forge::RetryPolicy {
        max_attempts: 3,
        max_total_wait: std::time::Duration::from_secs(20),
        request_timeout: std::time::Duration::from_secs(15),
        ..crate::forge::RetryPolicy::from_env()
    }
}

/// The tend cards of nightshift's open PRs (docs/github.md "The second
/// night"), or none with a warning on stderr when GitHub cannot be asked:
/// no token, no GitHub repository, GitHub refusing or unreachable. The plan
/// goes on with its new items either way.
///
/// # Errors
/// Database errors only.
pub async fn tend_cards(
    snap: &Snapshot,
    pool: &sqlx::PgPool,
    repo_id: &str,
    startup: &Startup,
) -> Result<Vec<crate::tend::TendCard>> {
    let open = crate::ledger::prs::open_prs(pool, repo_id).await?;
    if open.is_empty() {
        return Ok(vec![]);
    }
    let cannot = |why: String| {
        eprintln!(
            "warning: could not look at nightshift's {} open PR(s): {why}; the plan lists new items only",
            open.len()
        );
        Ok(vec![])
    };
    let Some((token, _)) = crate::forge::resolve_token(&startup.removed) else {
        return cannot(no_token_in(&snap.repo, &snap.loaded.config).to_string());
    };
    let forge = match github_client(&snap.repo, &snap.loaded.config, &token, None) {
        Ok(f) => f.with_retry_policy(plan_retry_policy()),
        Err(e) => return cannot(e),
    };
    match crate::tend::survey(
        pool,
        repo_id,
        &forge,
        &snap.plan.entries,
        snap.loaded.config.limits.max_tend_rounds,
    )
    .await
    {
        Ok(cards) => Ok(cards),
        Err(crate::tend::SurveyError::Ledger(e)) => Err(e.into()),
        Err(e) => cannot(e.to_string()),
    }
}
