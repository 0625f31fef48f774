//! `doctor`'s `ci` line (docs/github.md#ci): whether the PRs' own CI can
//! run and decide anything. It warns when nightshift runs inside GitHub
//! Actions with the Actions `GITHUB_TOKEN` (GitHub starts no workflow for
//! a push made with that token, so no PR would get a check), and when the
//! base branch requires no check (every reported check then counts, and a
//! PR without any ends `ci_none`, never green). Warnings only: the night
//! runs either way.

use crate::forge::Forge;

use super::Check;

/// The `ci` line for base branch `base` read through `f`; `actions_token`
/// says the token is GitHub Actions' own (see [`is_actions_token`]).
pub(super) async fn ci_check(f: &Forge, base: &str, actions_token: bool) -> Check {
    let mut warned = Vec::new();
    let mut fixes = Vec::new();
    if actions_token {
        warned.push(
            "running in GitHub Actions with its GITHUB_TOKEN: pushes made with it start no workflow, so the PRs' CI never runs (each ends ci_none or ci_pending)".to_string(),
        );
        fixes.push("give nightshift a personal access token or a GitHub App token (GH_TOKEN) instead of the Actions token");
    }
    let passed = match f.required_checks(base).await {
        Ok(r) if r.names.is_empty() => {
            warned.push(format!(
                "{base} requires no check (branch protection and rulesets): every reported check counts as required, and a PR without any ends ci_none"
            ));
            fixes.push(
                "require the CI's checks on the base branch (branch protection or a ruleset)",
            );
            None
        }
        Ok(r) => Some(format!(
            "{base} requires {} check(s): {}",
            r.names.len(),
            r.names.iter().cloned().collect::<Vec<_>>().join(", ")
        )),
        Err(e) => {
            warned.push(format!("cannot read the checks {base} requires: {e}"));
            fixes.push("check the token's access to the repository");
            None
        }
    };
    match (warned.is_empty(), passed) {
        (true, Some(p)) => Check::pass("ci", p),
        (_, p) => {
            let mut detail = warned.join("; ");
            if let Some(p) = p {
                detail = format!("{p}; {detail}");
            }
            Check::warn("ci", detail, fixes.join("; "))
        }
    }
}

/// Whether the token is the one GitHub Actions hands a workflow: inside a
/// workflow (`GITHUB_ACTIONS=true`, read from `actions_env`), taken from
/// `GITHUB_TOKEN` (`source`) or shaped as an installation token (`ghs_`).
pub(super) fn is_actions_token(actions_env: Option<&str>, source: &str, token: &str) -> bool {
    actions_env == Some("true") && (source == "GITHUB_TOKEN" || token.starts_with("ghs_"))
}

#[cfg(test)]
mod tests {
    use super::is_actions_token;

    #[test]
    fn the_actions_token_is_told_by_its_environment_and_source() {
        assert!(is_actions_token(Some("true"), "GITHUB_TOKEN", "ghp_x"));
        assert!(is_actions_token(Some("true"), "GH_TOKEN", "ghs_abc"));
        assert!(!is_actions_token(Some("true"), "GH_TOKEN", "ghp_x"));
        assert!(!is_actions_token(None, "GITHUB_TOKEN", "ghs_abc"));
    }
}
