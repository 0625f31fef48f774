//! Reading a file someone else controls (the config, the backlog, recipe
//! templates, files an agent leaves behind) without hanging or filling
//! memory: one check, used by every such reader (docs/security.md).
//!
//! A FIFO blocks a read until a writer comes, `/dev/zero` never ends, and a
//! huge file (or a link to one) fills memory. [`read_regular`] opens without
//! blocking, checks the opened file (not the name, which could be swapped in
//! between) is a regular file no larger than the limit, and reads at most
//! that many bytes.

use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The largest config, backlog or template nightshift reads, in bytes
/// (16 MiB): far above any hand-written file, far below a memory problem.
pub const MAX_TEXT_BYTES: u64 = 16 * 1024 * 1024;

/// Why a file was not read. Display names the file and, for the kinds a
/// person can fix, what to make of it.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// No file at the path (or a link to nothing).
    #[error("{}: not found", path.display())]
    NotFound {
        /// The path given.
        path: PathBuf,
    },
    /// A FIFO, device, socket or directory (also through a link).
    #[error("{}: not a regular file but {kind}; nightshift reads only regular files (replace it with one)", path.display())]
    NotRegular {
        /// The path given.
        path: PathBuf,
        /// What it is, for the message ("a FIFO", "a character device", …).
        kind: &'static str,
    },
    /// Larger than the limit.
    #[error("{}: {bytes} bytes or more, over the limit of {max} bytes for this file; make it smaller", path.display())]
    TooLarge {
        /// The path given.
        path: PathBuf,
        /// Its size in bytes (at least this; it may still grow).
        bytes: u64,
        /// The limit in bytes.
        max: u64,
    },
    /// Any other I/O error (permissions, a broken disk).
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        /// The path given.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

impl FileError {
    /// Whether the file is simply not there (a missing config means the
    /// defaults, a missing usage file means no usage).
    pub fn is_not_found(&self) -> bool {
        matches!(self, FileError::NotFound { .. })
    }
}

/// The bytes of `path`, which must be a regular file (a link to one is
/// followed) of at most `max` bytes.
///
/// # Errors
/// [`FileError::NotFound`], [`FileError::NotRegular`] (a FIFO is opened
/// without blocking and refused), [`FileError::TooLarge`] (also when the
/// file grows past `max` while it is read), [`FileError::Io`].
pub fn read_regular(path: &Path, max: u64) -> Result<Vec<u8>, FileError> {
    let (file, len) = open_regular(path)?;
    let too_large = |bytes| FileError::TooLarge {
        path: path.to_path_buf(),
        bytes,
        max,
    };
    if len > max {
        return Err(too_large(len));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| FileError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    if bytes.len() as u64 > max {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// `path` opened for reading, and its size in bytes, when it is a regular
/// file (a link to one is followed), for a reader that streams it (a hash
/// of a checkout's files). A FIFO is opened without blocking and refused.
///
/// # Errors
/// [`FileError::NotFound`], [`FileError::NotRegular`], [`FileError::Io`].
pub fn open_regular(path: &Path) -> Result<(std::fs::File, u64), FileError> {
    let io = |source: std::io::Error| match source.kind() {
        std::io::ErrorKind::NotFound => FileError::NotFound {
            path: path.to_path_buf(),
        },
        _ => FileError::Io {
            path: path.to_path_buf(),
            source,
        },
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    let kind = meta.file_type();
    let not_regular = |kind| FileError::NotRegular {
        path: path.to_path_buf(),
        kind,
    };
    if kind.is_fifo() {
        return Err(not_regular("a FIFO"));
    } else if kind.is_char_device() {
        return Err(not_regular("a character device"));
    } else if kind.is_block_device() {
        return Err(not_regular("a block device"));
    } else if kind.is_socket() {
        return Err(not_regular("a socket"));
    } else if kind.is_dir() {
        return Err(not_regular("a directory"));
    } else if !kind.is_file() {
        return Err(not_regular("not a file"));
    }
    Ok((file, meta.len()))
}

/// [`read_regular`] as UTF-8 text.
///
/// # Errors
/// Those of [`read_regular`], and [`FileError::Io`] with kind
/// `InvalidData` when the bytes are not UTF-8.
pub fn read_regular_text(path: &Path, max: u64) -> Result<String, FileError> {
    let bytes = read_regular(path, max)?;
    String::from_utf8(bytes).map_err(|e| FileError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, e.utf8_error()),
    })
}

/// The words a full disk shows up with, in an `io::Error`'s text, a
/// child's stderr (git, an agent) or a Node.js error: ENOSPC and EDQUOT.
const DISK_FULL_SIGNS: &[&str] = &[
    "No space left on device",
    "no space left on device",
    "ENOSPC",
    "os error 28",
    "Disk quota exceeded",
    "EDQUOT",
    "os error 122",
];

/// When `detail` (an error's text) says a disk is full or over its quota,
/// the sentence a person acts on: the full disk (the one holding `path`),
/// the error as it came, and the fix — not the blame of a command or a
/// reader that merely hit it. `None` for any other error.
pub fn disk_full(detail: &str, path: &Path) -> Option<String> {
    DISK_FULL_SIGNS.iter().any(|s| detail.contains(s)).then(|| {
        format!(
            "the disk holding {} is full ({}); free some space on it, then `nightshift drain` resumes the run",
            path.display(),
            detail.trim()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_files_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let link = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        for (path, kind) in [
            (fifo.as_path(), "a FIFO"),
            (Path::new("/dev/zero"), "a character device"),
            (link.as_path(), "a character device"),
            (dir.path(), "a directory"),
        ] {
            let e = read_regular(path, MAX_TEXT_BYTES).unwrap_err();
            assert!(
                matches!(e, FileError::NotRegular { kind: k, .. } if k == kind),
                "{e}"
            );
            assert!(e.to_string().contains(&path.display().to_string()), "{e}");
        }
        assert!(
            read_regular(&dir.path().join("none"), 10)
                .unwrap_err()
                .is_not_found()
        );
    }

    #[test]
    fn a_file_over_the_limit_is_refused_and_one_at_it_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"0123456789").unwrap();
        assert_eq!(read_regular(&p, 10).unwrap(), b"0123456789");
        assert!(matches!(
            read_regular(&p, 9),
            Err(FileError::TooLarge {
                bytes: 10,
                max: 9,
                ..
            })
        ));
    }

    #[test]
    fn a_full_disk_is_named_with_its_path_not_blamed_on_a_command() {
        let dir = Path::new("/var/lib/nightshift");
        for detail in [
            "No space left on device (os error 28)",
            "fatal: unable to write new index file: No space left on device",
            "Error: ENOSPC: no space left on device, write",
            "Disk quota exceeded (os error 122)",
        ] {
            let why = disk_full(detail, dir).expect(detail);
            assert!(
                why.starts_with("the disk holding /var/lib/nightshift is full ("),
                "{why}"
            );
            assert!(
                why.contains(detail) && why.contains("free some space"),
                "{why}"
            );
            assert!(
                !why.contains("command") && !why.contains("proof of work"),
                "{why}"
            );
        }
        let e = std::io::Error::from_raw_os_error(28);
        assert!(disk_full(&e.to_string(), dir).is_some(), "{e}");
        assert_eq!(disk_full("permission denied (os error 13)", dir), None);
    }
}
