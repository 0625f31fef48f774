//! A reader of git's index file (`.git/index`, the format of git's
//! `Documentation/gitformat-index.txt`), without git: the stat cache and
//! object id of each stage-0 entry, a digest of what git would commit, and
//! the submodule paths. The walk ([`super::Snapshot`]) holds its metadata
//! against it.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use sha2::{Digest, Sha256};

use super::{Kind, MAX_INDEX_BYTES, Meta};

/// One stage-0 entry of `.git/index`: the stat cache and the object id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct IndexEntry {
    /// ctime and mtime (seconds, nanoseconds), dev, ino, size, as git
    /// stores them (truncated to 32 bits).
    pub(super) stat: [u32; 8],
    pub(super) mode: u32,
    /// The blob's id, raw bytes: the first `oid_len` of them.
    pub(super) oid: [u8; 32],
    pub(super) oid_len: u8,
}

impl IndexEntry {
    pub(super) fn oid(&self) -> &[u8] {
        &self.oid[..usize::from(self.oid_len)]
    }
}

/// What `.git/index` holds, read without git.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct IndexView {
    /// SHA-256 of every entry without its stat fields and of every
    /// extension but the caches of untracked files and fsmonitor.
    pub(super) digest: [u8; 32],
    /// Stage-0 entries in path order (the index's own order).
    pub(super) entries: Vec<(Box<[u8]>, IndexEntry)>,
    /// The index file's modification time (seconds, nanoseconds): entries
    /// of files modified at or after it are not trusted (racy git).
    pub(super) mtime: (i64, i64),
    /// Every entry is an ordinary stage-0 one (no conflict, no
    /// assume-unchanged, skip-worktree or intent-to-add flag) and the index
    /// is whole (not split, not sparse): its stat cache can stand for
    /// `git add -A`'s look at the working tree.
    pub(super) plain: bool,
}

/// The bytes of `.git/index` and its modification time; parsing 50,000
/// entries costs more than the walk, so it waits until a change needs it.
#[derive(Debug, Clone)]
pub(super) struct RawIndex {
    pub(super) bytes: std::sync::Arc<Vec<u8>>,
    pub(super) mtime: (i64, i64),
    pub(super) parsed: std::sync::OnceLock<Option<IndexView>>,
}

impl RawIndex {
    pub(super) fn view(&self) -> Option<&IndexView> {
        self.parsed
            .get_or_init(|| {
                parse_index(&self.bytes).map(|(digest, entries, plain)| IndexView {
                    digest,
                    entries,
                    mtime: self.mtime,
                    plain,
                })
            })
            .as_ref()
    }
}

impl IndexView {
    /// The index file at `path` (a regular file of at most
    /// [`MAX_INDEX_BYTES`]), parsed; `None` when it cannot be read or
    /// parsed.
    pub(super) fn read(path: &Path) -> Option<IndexView> {
        let (mut f, size) = crate::file::open_regular(path).ok()?;
        if size > MAX_INDEX_BYTES {
            return None;
        }
        let m = f.metadata().ok()?;
        let mut bytes = Vec::with_capacity(size as usize);
        f.read_to_end(&mut bytes).ok()?;
        let (digest, entries, plain) = parse_index(&bytes)?;
        Some(IndexView {
            digest,
            entries,
            mtime: (m.mtime(), m.mtime_nsec()),
            plain,
        })
    }

    /// The stage-0 entry at `p`.
    pub(super) fn get(&self, p: &[u8]) -> Option<&IndexEntry> {
        self.entries
            .binary_search_by(|(q, _)| (**q).cmp(p))
            .ok()
            .map(|i| &self.entries[i].1)
    }

    /// The blob id of entry `e` when the file's metadata `m` matches its
    /// stat cache, as git decides a file is clean (see
    /// `Snapshot::clean_blob`).
    pub(super) fn clean_blob<'e>(&self, e: &'e IndexEntry, m: &Meta) -> Option<&'e [u8]> {
        let t = |x: i64| x as u32;
        let stat = [
            t(m.ctime.0),
            t(m.ctime.1),
            t(m.mtime.0),
            t(m.mtime.1),
            m.dev as u32,
            m.ino as u32,
            m.size as u32,
            0,
        ];
        let git_mode = match m.kind {
            Kind::Link => 0o120000,
            _ if m.mode & 0o111 != 0 => 0o100755,
            _ => 0o100644,
        };
        // A file modified at or after the index was written may have
        // changed again within the same timestamp: git does not trust it.
        let racy = m.mtime >= self.mtime;
        (stat == e.stat && e.mode == git_mode && !racy).then_some(e.oid())
    }
}

/// An index file's content digest, its stage-0 entries by path, and
/// whether it is plain ([`IndexView::plain`]).
pub(super) type ParsedIndex = ([u8; 32], Vec<(Box<[u8]>, IndexEntry)>, bool);

/// The digest and stage-0 entries of an index file's bytes (the format of
/// git's `Documentation/gitformat-index.txt`); `None` if malformed.
pub(super) fn parse_index(data: &[u8]) -> Option<ParsedIndex> {
    // The ids are SHA-1 (20 bytes) or SHA-256 (32): only the right length
    // makes the entries and extensions end exactly at the checksum, which
    // is cheaper to find out than hashing the whole file.
    parse_index_with(data, 20).or_else(|| parse_index_with(data, 32))
}

/// [`parse_index`] for ids of `oid_len` bytes; `None` if the bytes do not
/// parse to the end with that length.
fn parse_index_with(data: &[u8], oid_len: usize) -> Option<ParsedIndex> {
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_be_bytes(data.get(at..at + 4)?.try_into().ok()?))
    };
    if data.get(..4)? != b"DIRC" {
        return None;
    }
    let version = u32_at(4)?;
    let count = u32_at(8)? as usize;
    if !(2..=4).contains(&version) || data.len() < 12 + oid_len {
        return None;
    }
    let end = data.len() - oid_len;
    let mut h = Sha256::new();
    let mut entries = Vec::with_capacity(count);
    let mut at = 12;
    let mut name: Vec<u8> = Vec::new();
    let mut plain = true;
    for _ in 0..count {
        let fixed = 40 + oid_len + 2;
        let head = data.get(at..at + fixed)?;
        let flags = u16::from_be_bytes([head[fixed - 2], head[fixed - 1]]);
        let mut p = at + fixed;
        let ext_flags = if flags & 0x4000 != 0 {
            let x = data.get(p..p + 2)?;
            p += 2;
            u16::from_be_bytes([x[0], x[1]])
        } else {
            0
        };
        let p = read_name(data, (at, p, end), version, &mut name)?;
        let mode = u32_at(at + 24)?;
        let oid = &head[40..40 + oid_len];
        // The entry without its stat fields: mode, flags, id, name.
        h.update(mode.to_be_bytes());
        h.update(flags.to_be_bytes());
        h.update(ext_flags.to_be_bytes());
        h.update(oid);
        h.update(&name);
        h.update(b"\0");
        // Stage bits, assume-unchanged, or extended flags
        // (skip-worktree, intent-to-add).
        plain &= flags & 0x3000 == 0 && flags & 0x8000 == 0 && ext_flags == 0;
        if flags & 0x3000 == 0 {
            let mut stat = [0u32; 8];
            for (i, o) in [0, 4, 8, 12, 16, 20, 36].into_iter().enumerate() {
                stat[i] = u32_at(at + o)?;
            }
            let mut id = [0u8; 32];
            id[..oid_len].copy_from_slice(oid);
            let e = IndexEntry {
                stat,
                mode,
                oid: id,
                oid_len: oid_len as u8,
            };
            entries.push((name.as_slice().into(), e));
        }
        at = p;
    }
    let at = read_extensions(data, (at, end), &mut h, &mut plain)?;
    (at == end).then(|| (h.finalize().into(), entries, plain))
}

/// Reads the path of the index entry that starts at `at` and whose name
/// starts at `p` (`end`: where entries must stop) into `name`; returns where
/// the next entry starts. Version 4 names are prefix-compressed against the
/// previous one (still in `name`); earlier versions are padded with 1 to 8
/// NULs to a multiple of 8 bytes from `at`.
fn read_name(
    data: &[u8],
    (at, p, end): (usize, usize, usize),
    version: u32,
    name: &mut Vec<u8>,
) -> Option<usize> {
    if version == 4 {
        let (strip, used) = varint(data.get(p..end)?)?;
        let p = p + used;
        name.truncate(name.len().checked_sub(strip)?);
        let nul = data.get(p..end)?.iter().position(|&b| b == 0)?;
        name.extend_from_slice(&data[p..p + nul]);
        Some(p + nul + 1)
    } else {
        let nul = data.get(p..end)?.iter().position(|&b| b == 0)?;
        name.clear();
        name.extend_from_slice(&data[p..p + nul]);
        Some(at + (p + nul - at + 8) / 8 * 8)
    }
}

/// Reads the extensions from `at` to `end` (each a 4-byte signature, a
/// 4-byte length, the data) into the digest `h`, and clears `plain` for a
/// split or sparse index; returns where they stopped. The caches of
/// untracked files and of fsmonitor are rewritten by `git status` and only
/// ever hide or show untracked files, which the walk sees itself: they are
/// left out of the digest.
fn read_extensions(
    data: &[u8],
    (mut at, end): (usize, usize),
    h: &mut Sha256,
    plain: &mut bool,
) -> Option<usize> {
    while at + 8 <= end {
        let sig = &data[at..at + 4];
        let len = u32::from_be_bytes(data.get(at + 4..at + 8)?.try_into().ok()?) as usize;
        let body = data.get(at + 8..at + 8 + len)?;
        // A split index keeps entries elsewhere; a sparse one folds
        // directories into one entry.
        *plain &= sig != b"link" && sig != b"sdir";
        if sig != b"UNTR" && sig != b"FSMN" {
            h.update(sig);
            h.update((len as u64).to_be_bytes());
            h.update(body);
        }
        at += 8 + len;
    }
    Some(at)
}

/// The submodule paths (gitlinks, relative `/`-separated bytes) of the
/// index at `path`, read without git; `None` when it is missing, larger
/// than 1 GiB or not an index.
pub fn index_gitlinks(path: &Path) -> Option<Vec<Vec<u8>>> {
    gitlinks_of(&crate::file::read_regular(path, MAX_INDEX_BYTES).ok()?)
}

/// The submodule paths of an index file's bytes; `None` if it is not an
/// index.
pub fn gitlinks_of(bytes: &[u8]) -> Option<Vec<Vec<u8>>> {
    let (_, entries, _) = parse_index(bytes)?;
    Some(
        entries
            .into_iter()
            .filter(|(_, e)| e.mode == 0o160000)
            .map(|(p, _)| p.into_vec())
            .collect(),
    )
}

/// Git's offset varint (`decode_varint`): the value and the bytes used.
fn varint(data: &[u8]) -> Option<(usize, usize)> {
    let mut used = 0;
    let mut c = *data.first()?;
    used += 1;
    let mut val = usize::from(c & 0x7f);
    while c & 0x80 != 0 {
        c = *data.get(used)?;
        used += 1;
        val = val.checked_add(1)?.checked_shl(7)? | usize::from(c & 0x7f);
    }
    Some((val, used))
}
