//! The before/after check of the user's repository around each agent call
//! (docs/security.md "What is protected"): an agent can reach it through
//! its checkout's alternates file, which holds the repository's path.
//!
//! A [`RepoState`] holds what an agent could change there, cheaply: the
//! `.git` parts that make git run a program ([`slot::git_dir_fingerprint`]),
//! every ref, HEAD, the index file, and the working tree's status (each
//! changed or untracked path with its size and modification time). No tree
//! is walked and nothing is written: status runs with `--no-optional-locks`,
//! so git does not refresh the user's index.
//!
//! [`snapshot`] reads all of it; a [`Watch`] reads it again only after
//! something there changed (inotify), so that a run pays for it only then.

use std::collections::BTreeMap;
use std::path::Path;

pub mod foreign;
mod watch;
use watch::Pruned;
pub use watch::Watch;

use sha2::{Digest, Sha256};

use crate::git::Git;
use crate::slot;

/// One observed part of the user's repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Part {
    /// A file of `.git` that can make git run a program, or a hook.
    GitDir,
    /// A ref (branch, tag, remote-tracking branch, stash, notes…).
    Ref,
    /// What HEAD points at.
    Head,
    /// The index file (`.git/index`).
    Index,
    /// A path that `git status` lists (changed, staged or untracked).
    Worktree,
}

/// What an agent could change in the user's repository at one instant:
/// (kind, name) → value (a digest, a commit id, or a status line).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RepoState {
    parts: BTreeMap<(Part, String), String>,
}

/// Reads the state of the repository whose working tree is `repo`. Never
/// fails: a part that cannot be read is recorded as such (so its coming or
/// going is a change). Runs `git for-each-ref` and `git status` through the
/// git runner (its default timeout, 120 s each); blocking.
pub fn snapshot(repo: &Path) -> RepoState {
    read(repo, None)
}

/// [`snapshot`]; with `pruned`, `git status` also lists what it does not
/// descend into, and that goes to `pruned` instead of the state.
fn read(repo: &Path, pruned: Option<&mut Pruned>) -> RepoState {
    let mut parts = BTreeMap::new();
    for line in slot::git_dir_fingerprint(repo).lines() {
        if let Some((name, digest)) = line.rsplit_once(' ') {
            parts.insert((Part::GitDir, name.to_string()), digest.to_string());
        }
    }
    let git = Git::new(repo);
    match git.text(&["for-each-ref", "--format=%(objectname) %(refname)"]) {
        Ok(out) => {
            for (oid, name) in out.lines().filter_map(|l| l.split_once(' ')) {
                parts.insert((Part::Ref, name.to_string()), oid.to_string());
            }
        }
        Err(e) => {
            parts.insert((Part::Ref, "(refs)".into()), format!("unreadable: {e}"));
        }
    }
    let head = match (crate::git::head_branch(repo), crate::git::head_commit(repo)) {
        (Ok(Some(branch)), Ok(c)) => format!("{branch} at {}", short(&c)),
        (Ok(Some(branch)), Err(_)) => format!("{branch} (unborn)"),
        (Ok(None), Ok(c)) => format!("detached at {}", short(&c)),
        _ => "unreadable".into(),
    };
    parts.insert((Part::Head, "HEAD".into()), head);
    parts.insert((Part::Index, ".git/index".into()), index_digest(repo));
    status_parts(&git, repo, &mut parts, pruned);
    RepoState { parts }
}

impl RepoState {
    /// Whether every part could be read: a state with an unreadable part
    /// (git timed out, the index could not be opened) is not kept, since
    /// the same failure after an agent's call would hide what it changed.
    fn settled(&self) -> bool {
        !self.parts.values().any(|v| v.starts_with("unreadable"))
    }
}

/// Each change from `before` to `after`, named for the report: a `.git`
/// part, a ref created, moved or deleted (with its commits), HEAD, the
/// index, a working-tree path. In kind then name order; empty when equal.
pub fn changes(before: &RepoState, after: &RepoState) -> Vec<String> {
    let keys: std::collections::BTreeSet<&(Part, String)> =
        before.parts.keys().chain(after.parts.keys()).collect();
    keys.into_iter()
        .filter_map(|key| {
            let (b, a) = (before.parts.get(key), after.parts.get(key));
            (b != a).then(|| describe(key, b, a))
        })
        .collect()
}

fn describe(key: &(Part, String), before: Option<&String>, after: Option<&String>) -> String {
    let (part, name) = key;
    match (part, before, after) {
        (Part::GitDir, _, _) => name.clone(),
        (Part::Ref, None, Some(a)) => format!("new ref {name} at {}", short(a)),
        (Part::Ref, Some(b), None) => format!("deleted ref {name} (was {})", short(b)),
        (Part::Ref, Some(b), Some(a)) => {
            format!("ref {name} moved from {} to {}", short(b), short(a))
        }
        (Part::Head, b, a) => format!(
            "HEAD (was {}, now {})",
            b.map_or("-", String::as_str),
            a.map_or("-", String::as_str)
        ),
        (Part::Index, _, _) => "the index (.git/index)".into(),
        (Part::Worktree, None, Some(a)) => {
            format!("working tree: {name} ({})", status_words(a))
        }
        (Part::Worktree, Some(_), None) => {
            format!("working tree: {name} (no longer changed: restored or committed)")
        }
        (Part::Worktree, Some(_), Some(a)) => {
            format!("working tree: {name} (changed again; {})", status_words(a))
        }
        (_, None, None) => name.clone(),
    }
}

/// `git status --porcelain` codes in words, for the report.
fn status_words(value: &str) -> String {
    let code = value.split(' ').next().unwrap_or_default();
    match code {
        "??" => "new, untracked".into(),
        c if c.starts_with('A') => "new, staged".into(),
        c if c.contains('D') => "deleted".into(),
        c if c.contains('R') => "renamed".into(),
        _ => "modified".into(),
    }
}

/// The first 12 hex digits of a commit id (whole when shorter).
fn short(oid: &str) -> &str {
    oid.get(..12).unwrap_or(oid)
}

/// SHA-256 of the index file (its kind when it is not a regular file).
fn index_digest(repo: &Path) -> String {
    let path = repo.join(".git").join("index");
    match crate::file::read_regular(&path, 1 << 30) {
        Ok(bytes) => hex::encode(Sha256::digest(&bytes)),
        Err(e) if e.is_not_found() => "missing".into(),
        Err(e) => format!("unreadable: {e}"),
    }
}

/// One part per path `git status` lists: its two-letter code, and the
/// file's size and modification time (so a further edit of a file that was
/// already changed shows too). Renames and copies carry their source.
/// With `pruned`, status also lists ignored paths (`--ignored=matching`):
/// the directories among them, and the untracked nested repositories, go
/// to `pruned`; other ignored files are left out, as without it.
fn status_parts(
    git: &Git,
    repo: &Path,
    parts: &mut BTreeMap<(Part, String), String>,
    mut pruned: Option<&mut Pruned>,
) {
    let mut args = vec![
        "--no-optional-locks",
        "status",
        "--porcelain=v1",
        "-z",
        "--untracked-files=all",
        "--ignore-submodules=none",
    ];
    if pruned.is_some() {
        args.push("--ignored=matching");
    }
    let out = match git.run(&args) {
        Ok(o) => o.stdout,
        Err(e) => {
            parts.insert(
                (Part::Worktree, "(status)".into()),
                format!("unreadable: {e}"),
            );
            return;
        }
    };
    let mut fields = out.split(|b| *b == 0).filter(|f| !f.is_empty());
    while let Some(entry) = fields.next() {
        if entry.len() < 4 {
            continue;
        }
        let code = String::from_utf8_lossy(&entry[..2]).into_owned();
        let path = String::from_utf8_lossy(&entry[3..]).into_owned();
        if code.contains('R') || code.contains('C') {
            fields.next();
        }
        if let Some(p) = pruned.as_deref_mut()
            && p.note(&code, &path)
        {
            continue;
        }
        let stamp = match std::fs::symlink_metadata(repo.join(&path)) {
            Ok(m) => {
                use std::os::unix::fs::MetadataExt;
                format!("{} {}.{}", m.len(), m.mtime(), m.mtime_nsec())
            }
            Err(_) => "absent".into(),
        };
        parts.insert((Part::Worktree, path), format!("{code} {stamp}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(items: &[(Part, &str, &str)]) -> RepoState {
        RepoState {
            parts: items
                .iter()
                .map(|(p, n, v)| ((*p, n.to_string()), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn each_change_is_named_with_its_commits() {
        let a = "a".repeat(40);
        let b = "b".repeat(40);
        let before = state(&[
            (Part::Ref, "refs/heads/main", &a),
            (Part::Ref, "refs/tags/gone", &a),
            (Part::Head, "HEAD", "refs/heads/main at aaaaaaaaaaaa"),
        ]);
        let after = state(&[
            (Part::Ref, "refs/heads/main", &b),
            (Part::Ref, "refs/heads/evil", &b),
            (Part::Head, "HEAD", "refs/heads/evil at bbbbbbbbbbbb"),
            (Part::Worktree, "calc.txt", " M 4 1.0"),
        ]);
        assert_eq!(
            changes(&before, &after),
            vec![
                "new ref refs/heads/evil at bbbbbbbbbbbb".to_string(),
                "ref refs/heads/main moved from aaaaaaaaaaaa to bbbbbbbbbbbb".into(),
                "deleted ref refs/tags/gone (was aaaaaaaaaaaa)".into(),
                "HEAD (was refs/heads/main at aaaaaaaaaaaa, now refs/heads/evil at bbbbbbbbbbbb)"
                    .into(),
                "working tree: calc.txt (modified)".into(),
            ]
        );
        assert!(changes(&after, &after).is_empty());
    }
}
