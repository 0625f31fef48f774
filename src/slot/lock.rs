//! [`SlotsLock`]: one run per repository holds the slots, by a file lock under
//! the data directory, after checking there is disk space for a checkout.
//!
//! Not for the slots' contents: only who may use them.

use std::path::{Path, PathBuf};

use super::model::slot_path;

/// An exclusive hold on a repository's slots: a `flock` on `slots.lock`
/// beside them, released when dropped (or when the process dies). The
/// ledger's advisory lock already keeps two drains of one repository apart,
/// but only within one database; two drains with different databases (a
/// shell with a URL, a cron job on the embedded cluster) would share these
/// checkouts and kill each other's agents.
#[derive(Debug)]
pub struct SlotsLock {
    _lock: nix::fcntl::Flock<std::fs::File>,
    /// The lock file, and the device and inode it had when locked.
    path: PathBuf,
    id: (u64, u64),
    /// The data directory it lives under (for messages).
    data_dir: PathBuf,
}

/// Least free space, in bytes, the data directory must have for a run to
/// start another item: a checkout, git's work in it and the agents' logs
/// need room, and a disk that fills up mid-item fails it in git's words.
pub const MIN_FREE_BYTES: u64 = 16 * 1024 * 1024;

impl SlotsLock {
    /// Whether the run can still work under the data directory: the lock
    /// file is still the one locked (the directory was not removed or
    /// replaced — a cleaner of `/tmp`, a person's `rm -rf`), its file system
    /// is not read-only, has [`MIN_FREE_BYTES`] free, and takes a small
    /// written and synced file.
    ///
    /// # Errors
    /// A sentence naming the directory, what is wrong and what to do.
    pub fn check(&self) -> Result<(), String> {
        use std::io::Write;
        use std::os::unix::fs::MetadataExt;
        let data = self.data_dir.display();
        match std::fs::metadata(&self.path) {
            Ok(m) if (m.dev(), m.ino()) == self.id => {}
            _ => {
                return Err(format!(
                    "the data directory {data} was removed or replaced during the run ({} is gone); keep it where nothing cleans it up (not under /tmp), or set NIGHTSHIFT_DATA_DIR",
                    self.path.display()
                ));
            }
        }
        let dir = self.path.parent().unwrap_or(&self.data_dir);
        if let Ok(st) = nix::sys::statvfs::statvfs(dir) {
            if st.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY) {
                return Err(format!(
                    "the data directory {data} is on a read-only file system; remount it read-write or set NIGHTSHIFT_DATA_DIR to a writable directory"
                ));
            }
            // The field types differ between platforms (u32 on some).
            #[allow(clippy::unnecessary_cast)]
            let free = (st.blocks_available() as u64).saturating_mul(st.fragment_size() as u64);
            if free < MIN_FREE_BYTES {
                return Err(format!(
                    "the disk holding the data directory {data} is full ({} KiB free; a run needs at least {} MiB for a checkout and its logs); free some space",
                    free / 1024,
                    MIN_FREE_BYTES >> 20
                ));
            }
        }
        let probe = dir.join(format!(".write-probe-{}", std::process::id()));
        let written = std::fs::File::create(&probe).and_then(|mut f| {
            f.write_all(&[0u8; 64 * 1024])?;
            f.sync_all()
        });
        let _ = std::fs::remove_file(&probe);
        written.map_err(|e| format!("cannot write in the data directory {data} ({}): {e}; free some space or fix its permissions", dir.display()))
    }
}

/// Takes [`SlotsLock`] for `user_repo`'s slots under `data_dir`, writing
/// this process id into the file. `Ok(Err(pid))` when another process holds
/// it (its pid as that process wrote it, or 0 when unreadable).
///
/// # Errors
/// The lock file cannot be created or opened.
pub fn lock_slots(data_dir: &Path, user_repo: &Path) -> std::io::Result<Result<SlotsLock, u32>> {
    use std::io::Write;
    let dir = slot_path(data_dir, user_repo, 0)
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| data_dir.join("slots"));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("slots.lock");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)?;
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(mut lock) => {
            use std::os::unix::fs::MetadataExt;
            lock.set_len(0)?;
            write!(lock, "{}", std::process::id())?;
            let m = lock.metadata()?;
            Ok(Ok(SlotsLock {
                id: (m.dev(), m.ino()),
                _lock: lock,
                path,
                data_dir: data_dir.to_path_buf(),
            }))
        }
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
            let pid = std::fs::read_to_string(&path)
                .ok()
                .and_then(|t| t.trim().parse().ok())
                .unwrap_or(0);
            Ok(Err(pid))
        }
        Err((_, e)) => Err(std::io::Error::from(e)),
    }
}
