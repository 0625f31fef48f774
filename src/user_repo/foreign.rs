//! Refs nightshift did not push (docs/security.md#processes): the remote's
//! `nightshift/` branches compared with the heads the ledger says
//! nightshift pushed. An agent of a killed runner, or anything else with
//! the remote's credentials, may push during the night; the report and the
//! end-of-run message name what it left, for a person to look at.
//!
//! Not for reading the ledger (the run hands in the heads) nor for judging
//! an item: a foreign ref is a finding, never an item's outcome.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::git::{Git, GitError};

/// Where nightshift's branches live on the remote (docs/loop.md#checkout).
pub const BRANCH_REFS: &str = "refs/heads/nightshift/";

/// How long listing the remote's branches may take.
const LIST_TIMEOUT: Duration = Duration::from_secs(60);

/// A ref on the remote under [`BRANCH_REFS`] whose head nightshift did not
/// push.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignRef {
    /// The full ref name (`refs/heads/nightshift/…`), as the remote gave it.
    pub name: String,
    /// Its head on the remote (40 hex).
    pub head: String,
    /// The head the ledger says nightshift last pushed there; `None` when
    /// nightshift never pushed that branch.
    pub ours: Option<String>,
}

impl ForeignRef {
    /// The event data the run records (`foreign_ref`) and the report's JSON.
    pub fn to_json(&self) -> Value {
        json!({"ref": self.name, "head": self.head, "nightshift_pushed": self.ours})
    }

    /// Back from [`ForeignRef::to_json`]; `None` for data without a ref.
    pub fn from_json(v: &Value) -> Option<ForeignRef> {
        Some(ForeignRef {
            name: v["ref"].as_str()?.to_string(),
            head: v["head"].as_str().unwrap_or_default().to_string(),
            ours: v["nightshift_pushed"].as_str().map(str::to_string),
        })
    }

    /// One line for a person; the ref name is the remote's text, so its
    /// control characters are written out (docs/security.md).
    pub fn line(&self) -> String {
        let name = crate::secret::redact_known(&escape(&self.name));
        let head = short(&self.head);
        match &self.ours {
            None => format!("{name} at {head}: nightshift never pushed this branch"),
            Some(ours) => format!(
                "{name} at {head}: nightshift last pushed {} there",
                short(ours)
            ),
        }
    }
}

/// The remote's branches under [`BRANCH_REFS`] (full ref name → head),
/// read as `git ls-remote` in `repo` would ([`Git::remote_refs`]) (`token` for an https remote).
///
/// # Errors
/// The git error when the remote cannot be read.
pub fn remote_branches(
    repo: &Path,
    token: Option<&str>,
    url: &str,
) -> Result<BTreeMap<String, String>, GitError> {
    (Git::new(repo).token(token).timeout(LIST_TIMEOUT))
        .remote_refs(url, crate::git::RefsWanted::BranchesUnder(BRANCH_REFS))
}

/// The refs of `remote` (from [`remote_branches`]) nightshift did not push,
/// given `pushed`: each branch name (without `refs/heads/`) nightshift
/// pushed with the head it last pushed there (`None`: unrecorded, which
/// trusts any head). In name order.
pub fn foreign(
    remote: &BTreeMap<String, String>,
    pushed: &[(String, Option<String>)],
) -> Vec<ForeignRef> {
    remote
        .iter()
        .filter_map(|(name, head)| {
            let branch = name.strip_prefix("refs/heads/").unwrap_or(name);
            let heads: Vec<&Option<String>> = pushed
                .iter()
                .filter(|(b, _)| b == branch)
                .map(|(_, h)| h)
                .collect();
            let known = heads.iter().any(|h| h.as_deref().is_none_or(|h| h == head));
            (!known).then(|| ForeignRef {
                name: name.clone(),
                head: head.clone(),
                ours: heads.iter().find_map(|h| (*h).clone()),
            })
        })
        .collect()
}

fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}

/// Control characters of a ref name written out as `\u{…}`.
fn escape(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() {
                format!("\\u{{{:x}}}", c as u32)
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remote(refs: &[(&str, &str)]) -> BTreeMap<String, String> {
        refs.iter()
            .map(|(n, h)| (format!("{BRANCH_REFS}{n}"), h.to_string()))
            .collect()
    }

    #[test]
    fn a_branch_nightshift_pushed_at_its_head_is_not_foreign() {
        let pushed = vec![
            ("nightshift/a".to_string(), Some("1".repeat(40))),
            ("nightshift/old".to_string(), None),
        ];
        let r = remote(&[("a", &"1".repeat(40)), ("old", &"9".repeat(40))]);
        assert!(foreign(&r, &pushed).is_empty());
    }

    #[test]
    fn an_unknown_branch_or_another_head_is_foreign() {
        let pushed = vec![("nightshift/a".to_string(), Some("1".repeat(40)))];
        let r = remote(&[("a", &"2".repeat(40)), ("evil", &"3".repeat(40))]);
        let f = foreign(&r, &pushed);
        assert_eq!(
            f,
            vec![
                ForeignRef {
                    name: format!("{BRANCH_REFS}a"),
                    head: "2".repeat(40),
                    ours: Some("1".repeat(40)),
                },
                ForeignRef {
                    name: format!("{BRANCH_REFS}evil"),
                    head: "3".repeat(40),
                    ours: None,
                },
            ]
        );
        assert_eq!(ForeignRef::from_json(&f[0].to_json()), Some(f[0].clone()));
        assert!(f[1].line().contains("never pushed"), "{}", f[1].line());
    }

    #[test]
    fn a_ref_name_cannot_move_the_line() {
        let f = ForeignRef {
            name: "refs/heads/nightshift/x\u{1b}[2J\nfake".into(),
            head: "4".repeat(40),
            ours: None,
        };
        let line = f.line();
        assert!(!line.contains('\n') && !line.contains('\u{1b}'), "{line}");
    }
}
