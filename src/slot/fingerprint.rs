//! The tamper fingerprint: the `.git` files that can make git run a program
//! or read another config, hashed when a slot is handed to the writer and
//! compared before nightshift runs git there again.
//!
//! Not for the working tree: the proof judges the writer's changes.

use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::error::SlotError;
use super::model::Slot;

/// Files of a `.git` directory whose change means the slot was tampered with:
/// each can make git run a program (filters, fsmonitor, ssh command, hooks) or
/// redirect it to another config (`include.path`, `commondir`).
/// `info/exclude` can hide new files from the proof and the commit.
const WATCHED_GIT_FILES: &[&str] = &[
    "config",
    "config.worktree",
    "commondir",
    "info/attributes",
    "info/exclude",
];

/// What `git checkout` removes from `.git` when it switches branches (an
/// operation in progress: `remove_branch_state` in git's `branch.c`).
pub(super) const OPERATION_STATE: &[&str] = &[
    "MERGE_HEAD",
    "MERGE_RR",
    "MERGE_MSG",
    "MERGE_MODE",
    "MERGE_AUTOSTASH",
    "AUTO_MERGE",
    "SQUASH_MSG",
    "CHERRY_PICK_HEAD",
    "REVERT_HEAD",
];

/// A manifest of the parts of `<worktree>/.git` that can make git run a
/// program or read another config: one line `PART SHA256-HEX` for what kind
/// of thing `.git` itself is, each of `WATCHED_GIT_FILES`, and every entry
/// under `hooks/` (names, modes, contents, link targets), in name order. A
/// missing or unreadable part hashes as such, so the function never fails:
/// any change, including `.git` being replaced by a file or a link, changes
/// the text, and [`git_dir_changes`] names the parts that changed.
pub fn git_dir_fingerprint(worktree: &Path) -> String {
    let git_dir = worktree.join(".git");
    let kind = match std::fs::symlink_metadata(&git_dir) {
        Ok(m) if m.is_dir() => "dir",
        Ok(m) if m.file_type().is_symlink() => "symlink",
        Ok(_) => "file",
        Err(_) => "missing",
    };
    let mut lines = vec![format!(
        ".git {}",
        hex::encode(Sha256::digest(kind.as_bytes()))
    )];
    for name in WATCHED_GIT_FILES {
        let mut h = Sha256::new();
        hash_entry(&mut h, &git_dir.join(name));
        lines.push(format!(".git/{name} {}", hex::encode(h.finalize())));
    }
    hook_lines(&mut lines, &git_dir.join("hooks"), ".git/hooks");
    lines.join("\n")
}

/// The parts (e.g. `.git/info/exclude`, `.git/hooks/pre-commit`) whose lines
/// differ between two [`git_dir_fingerprint`] manifests: changed, added or
/// removed, in name order. Empty when they are equal.
pub fn git_dir_changes(before: &str, after: &str) -> Vec<String> {
    let parse = |text: &str| -> std::collections::BTreeMap<String, String> {
        text.lines()
            .filter_map(|l| l.rsplit_once(' '))
            .map(|(part, digest)| (part.to_string(), digest.to_string()))
            .collect()
    };
    let (before, after) = (parse(before), parse(after));
    let mut parts: Vec<String> = before
        .keys()
        .chain(after.keys())
        .filter(|p| before.get(*p) != after.get(*p))
        .cloned()
        .collect();
    parts.sort();
    parts.dedup();
    parts
}

/// One manifest line per entry of the tree at `dir` (itself included), in name order.
fn hook_lines(lines: &mut Vec<String>, dir: &Path, label: &str) {
    let mut h = Sha256::new();
    hash_entry(&mut h, dir);
    lines.push(format!("{label} {}", hex::encode(h.finalize())));
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut names: Vec<_> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .collect();
    names.sort();
    for name in names {
        let path = dir.join(&name);
        let child = format!("{label}/{}", name.to_string_lossy().replace(' ', "_"));
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
            hook_lines(lines, &path, &child);
        } else {
            let mut h = Sha256::new();
            hash_entry(&mut h, &path);
            lines.push(format!("{child} {}", hex::encode(h.finalize())));
        }
    }
}

/// Hashes one filesystem entry without following links: kind, mode, content.
fn hash_entry(h: &mut Sha256, path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        h.update(b"missing\0");
        return;
    };
    if meta.file_type().is_symlink() {
        h.update(b"symlink\0");
        if let Ok(target) = std::fs::read_link(path) {
            h.update(target.as_os_str().as_encoded_bytes());
        }
    } else if meta.is_dir() {
        h.update(b"dir\0");
    } else {
        h.update(format!("file {:o}\0", meta.permissions().mode()).as_bytes());
        // A FIFO or device planted here would block or never end the read.
        match crate::file::open_regular(path) {
            Ok((mut f, _)) => {
                let mut buf = [0u8; 64 * 1024];
                loop {
                    match f.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => h.update(&buf[..n]),
                        Err(_) => {
                            h.update(b"\0unreadable");
                            break;
                        }
                    }
                }
            }
            Err(_) => h.update(b"unreadable\0"),
        }
    }
    h.update(b"\0");
}

/// The refs an agent moved on the remote, from two `ls-remote` listings
/// (ref name → commit id): a ref that now points at an object `ours` says
/// the checkout has (the agent's own commit: a person's push at night
/// brings objects the checkout has never seen), and a `nightshift/` branch
/// deleted. Each named with its old and new commit, in name order.
pub fn remote_moves(
    before: &std::collections::BTreeMap<String, String>,
    after: &std::collections::BTreeMap<String, String>,
    ours: impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut moves: Vec<String> = after
        .iter()
        .filter(|(name, oid)| before.get(*name) != Some(*oid) && ours(oid))
        .map(|(name, oid)| match before.get(name) {
            Some(old) => format!("{name} moved from {old} to {oid}"),
            None => format!("{name} created at {oid}"),
        })
        .collect();
    moves.extend(
        before
            .iter()
            .filter(|(name, _)| {
                name.starts_with("refs/heads/nightshift/") && !after.contains_key(*name)
            })
            .map(|(n, old)| format!("{n} deleted (was {old})")),
    );
    moves
}

/// The file next to a slot that remembers its fingerprint between runs. It is
/// outside the slot, so removing the slot's `.git` cannot also forge it.
pub(super) fn fingerprint_file(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".fingerprint");
    path.with_file_name(name)
}

/// Paths each followed by a NUL: what `git … --stdin -z` reads.
pub(super) fn nul_joined<P: AsRef<[u8]>>(paths: impl IntoIterator<Item = P>) -> Vec<u8> {
    let mut input = Vec::new();
    for p in paths {
        input.extend_from_slice(p.as_ref());
        input.push(0);
    }
    input
}

impl Slot {
    pub(super) fn record_fingerprint(&mut self) -> Result<(), SlotError> {
        self.git_dir_fingerprint = git_dir_fingerprint(&self.path);
        let file = fingerprint_file(&self.path);
        std::fs::write(&file, &self.git_dir_fingerprint).map_err(|source| SlotError::Io {
            context: "recording the slot's fingerprint",
            path: file,
            source,
        })
    }

    /// True when `.git/config` or `.git/hooks` differ from what was recorded
    /// when the slot was prepared.
    pub fn is_tampered(&self) -> bool {
        git_dir_fingerprint(&self.path) != self.git_dir_fingerprint
    }

    pub(super) fn ensure_untampered(&self) -> Result<(), SlotError> {
        let parts = git_dir_changes(&self.git_dir_fingerprint, &git_dir_fingerprint(&self.path));
        if !parts.is_empty() {
            return Err(SlotError::Tampered {
                path: self.path.clone(),
                parts,
            });
        }
        Ok(())
    }
}
