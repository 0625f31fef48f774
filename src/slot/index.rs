//! The slot's own index files: a seed copied from the prepared checkout,
//! and private indexes that build trees without touching the writer's index.
//!
//! Not for what goes into a tree (`tree`) or the fingerprint of `.git` (`fingerprint`).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use super::error::SlotError;
use super::model::Slot;
use crate::git::Git;

/// The copy of the slot's index as git wrote it when the slot was last
/// reset (next to the slot, like `fingerprint_file`): agents can rewrite
/// the slot's own `.git/index`, and a stat cache they forged would make git
/// trust a file's old object id for new content — a tree that differs from
/// the working tree the reviewer read. Trees and restores start from this
/// copy instead, so only git's own stat records stand for "unchanged".
pub(super) fn seed_index_file(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".index");
    path.with_file_name(name)
}

/// Copies the file `from` to `to` with its modification time: git's
/// racy-entry rule compares the files of an index against the index
/// file's own time.
pub(super) fn copy_keeping_mtime(from: &Path, to: &Path) -> std::io::Result<Vec<u8>> {
    let (mut f, _) = crate::file::open_regular(from).map_err(std::io::Error::other)?;
    let modified = f.metadata()?.modified()?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes)?;
    // Written beside `to` and renamed over it: a link, a hard link or a
    // FIFO an agent put at `to` (`.git/index`) is replaced, never written
    // through or waited on.
    let mut tmp = to.as_os_str().to_owned();
    tmp.push(".nightshift-new");
    let tmp = PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .and_then(|mut out| {
            out.write_all(&bytes)?;
            out.set_modified(modified)
        })
        .and_then(|()| std::fs::rename(&tmp, to));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map(|()| bytes)
}

impl Slot {
    /// Copies the index git just wrote to [`seed_index_file`], with its
    /// modification time (git's racy-entry rule compares files against it),
    /// and keeps its submodule paths. Best effort: without a copy, trees
    /// are read from scratch and submodules from the index again.
    pub(super) fn record_index(&mut self) {
        let from = self.path.join(".git").join("index");
        let to = seed_index_file(&self.path);
        self.gitlinks = None;
        match copy_keeping_mtime(&from, &to) {
            Ok(bytes) => self.gitlinks = crate::snapshot::gitlinks_of(&bytes),
            Err(e) => {
                tracing::warn!(slot = %self.path.display(), "cannot keep a copy of the slot's index: {e}");
                let _ = std::fs::remove_file(&to);
            }
        }
    }

    /// A private index (removed by the caller) holding what git last wrote
    /// for this slot ([`seed_index_file`]), or, without that copy, `tip`'s
    /// tree with no stat cache (every file is then read again).
    ///
    /// # Errors
    /// [`SlotError::Git`] when `read-tree` fails.
    pub(super) fn seeded_index(&self, what: &str) -> Result<PathBuf, SlotError> {
        let index = self.private_index(what);
        if std::fs::copy(seed_index_file(&self.path), &index).is_err() {
            let _ = std::fs::remove_file(&index);
            let git = self.on_index(&index);
            git.run(&["read-tree", self.tip()])?;
        }
        Ok(index)
    }

    /// git on the private `index` ([`Slot::private_index`]). Such an index
    /// is written once and read by the next command only, so git skips its
    /// trailing SHA-1 (`index.skipHash`): on 50,000 files each hash of the
    /// 5 MB file costs about 8 ms, and a tree takes four.
    pub(super) fn on_index(&self, index: &Path) -> Git {
        self.git()
            .env("GIT_INDEX_FILE", index)
            .env("GIT_CONFIG_COUNT", "1")
            .env("GIT_CONFIG_KEY_0", "index.skipHash")
            .env("GIT_CONFIG_VALUE_0", "true")
    }

    fn private_index(&self, what: &str) -> PathBuf {
        self.path
            .join(".git")
            .join(format!("nightshift-{what}-{}.index", std::process::id()))
    }
}
