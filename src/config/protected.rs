//! The paths no writer may change unless its item says `allow:`
//! (docs/config.md#protected, docs/security.md "CI and automation
//! configuration"): nightshift's defaults, and the effective list a
//! contract seals (the defaults, then the config's own `protected`).

/// Globs protected in every repository, whatever the config says (issue 21,
/// point 3: a writer's change to `.github/workflows/tests.yaml` got its PR).
///
/// Where the rule comes from: a forge runs the CI and automation
/// configuration *of the pushed branch* — with the repository's secrets and
/// tokens — as soon as nightshift pushes it, before any person has read the
/// change. So a writer must not change the files that decide what CI runs or
/// who must approve a change:
/// - GitHub Actions workflows and local actions, Dependabot's config;
/// - Gitea and Forgejo Actions (the same workflow format);
/// - GitLab CI and its includes (`.gitlab/`, which also holds GitLab's
///   `CODEOWNERS`);
/// - CircleCI, Buildkite, Jenkins, Azure Pipelines, Travis CI, Bitbucket
///   Pipelines, Drone, Woodpecker, AppVeyor;
/// - `CODEOWNERS` (at the root, in `.github/` or `docs/`): not run, but it
///   decides whose review a PR needs once merged; an agent must not choose
///   its own reviewers;
/// - nightshift's own `.nightshift/` (config, recipes): the rules the next
///   night runs under.
///
/// Matched as `scope:` globs are ([`crate::proof::Scope`]): a glob without
/// `/` (`Jenkinsfile`, `.travis.yml`) matches at any depth, one with `/` from
/// the root, and a directory covers everything under it.
pub const DEFAULT_PROTECTED: &[&str] = &[
    ".github/workflows/**",
    ".github/actions/**",
    ".github/dependabot.yml",
    ".github/dependabot.yaml",
    ".gitea/workflows/**",
    ".forgejo/workflows/**",
    ".gitlab-ci.yml",
    ".gitlab/**",
    ".circleci/**",
    ".buildkite/**",
    "Jenkinsfile",
    "azure-pipelines.yml",
    "azure-pipelines.yaml",
    ".azure-pipelines/**",
    ".travis.yml",
    "bitbucket-pipelines.yml",
    ".drone.yml",
    ".woodpecker/**",
    ".woodpecker.yml",
    ".woodpecker.yaml",
    "appveyor.yml",
    ".appveyor.yml",
    "CODEOWNERS",
    ".nightshift/**",
];

/// The effective protected globs: [`DEFAULT_PROTECTED`], then each of
/// `extra` (the config's `protected`, or a sealed list) not already there,
/// in order. A user's list adds to the defaults; it never replaces them.
pub fn protected_paths(extra: &[String]) -> Vec<String> {
    let mut all: Vec<String> = DEFAULT_PROTECTED.iter().map(|g| g.to_string()).collect();
    for glob in extra {
        if !all.contains(glob) {
            all.push(glob.clone());
        }
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proof::Scope;

    fn defaults() -> Scope {
        Scope::new(&protected_paths(&[])).expect("the defaults compile")
    }

    #[test]
    fn the_defaults_cover_the_ci_configuration_of_the_common_forges() {
        let s = defaults();
        for path in [
            ".github/workflows/ci.yml",
            ".github/workflows/x.yaml",
            ".github/workflows/nested/deep.yml",
            ".github/actions/setup/action.yml",
            ".github/dependabot.yml",
            ".github/CODEOWNERS",
            "CODEOWNERS",
            "docs/CODEOWNERS",
            ".gitea/workflows/build.yaml",
            ".forgejo/workflows/build.yaml",
            ".gitlab-ci.yml",
            ".gitlab/ci/test.yml",
            ".gitlab/CODEOWNERS",
            ".circleci/config.yml",
            ".circleci/orbs/nested/config.yml",
            ".buildkite/pipeline.yml",
            "Jenkinsfile",
            "ci/Jenkinsfile",
            "azure-pipelines.yml",
            ".azure-pipelines/templates/build.yml",
            ".travis.yml",
            "bitbucket-pipelines.yml",
            ".drone.yml",
            ".woodpecker/test.yml",
            ".woodpecker.yml",
            "appveyor.yml",
            ".nightshift/config.toml",
            ".nightshift/recipes/fix.md",
        ] {
            assert!(s.matches(path), "{path} is not protected");
        }
        for path in [
            "src/main.rs",
            ".github/ISSUE_TEMPLATE/bug.md",
            ".github/pull_request_template.md",
            "docs/ci.md",
            "workflows/ci.yml",
            "src/.github_workflows.rs",
            "Jenkinsfile.md",
            "nightshift/config.toml",
            "README.md",
        ] {
            assert!(!s.matches(path), "{path} is protected");
        }
    }

    #[test]
    fn a_user_list_adds_to_the_defaults_never_replaces_them() {
        let all = protected_paths(&["migrations/**".into(), ".gitlab-ci.yml".into()]);
        assert_eq!(all.len(), DEFAULT_PROTECTED.len() + 1, "{all:?}");
        assert_eq!(&all[..DEFAULT_PROTECTED.len()], DEFAULT_PROTECTED);
        assert_eq!(all.last().unwrap(), "migrations/**");
        let s = Scope::new(&all).unwrap();
        assert!(s.matches("migrations/0001.sql"));
        assert!(s.matches(".github/workflows/ci.yml"));
    }
}
