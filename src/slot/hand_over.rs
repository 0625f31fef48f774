//! [`hand_over`]: gives a checkout to the account an agent runs as (`chown`
//! without following symlinks an agent may have planted).
//!
//! Not for choosing the account: `run` does, with `process::RunAs`.

use std::path::Path;

/// The file work of `run`'s `grant_checkout`. The walk goes through directory
/// descriptors opened with `O_NOFOLLOW` and changes owners with
/// `fchownat(AT_SYMLINK_NOFOLLOW)`, so a symlink an agent planted (or swapped
/// in for a directory mid-walk) can never make root chown a file outside the
/// checkout.
pub fn hand_over(top: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let md = std::fs::symlink_metadata(top)?;
    if md.gid() != gid {
        std::os::unix::fs::lchown(top, None, Some(gid))?;
    }
    // Group-writable so the agent can create files at the top; sticky so it
    // cannot rename or replace what it does not own there (`.git`).
    if md.mode() & 0o1070 != 0o1070 {
        std::fs::set_permissions(
            top,
            std::fs::Permissions::from_mode((md.mode() & 0o7777) | 0o1070),
        )?;
    }
    let flags = nix::fcntl::OFlag::O_RDONLY
        | nix::fcntl::OFlag::O_DIRECTORY
        | nix::fcntl::OFlag::O_NOFOLLOW
        | nix::fcntl::OFlag::O_CLOEXEC;
    let dir = nix::fcntl::open(top, flags, nix::sys::stat::Mode::empty())?;
    hand_over_dir(&dir, uid, gid, true)
}

/// Recursion of [`hand_over`] below one open directory; holds one
/// descriptor per level of depth.
fn hand_over_dir(dir: &std::os::fd::OwnedFd, uid: u32, gid: u32, top: bool) -> std::io::Result<()> {
    use nix::fcntl::{AtFlags, OFlag};
    use std::os::fd::AsRawFd;
    // Listing through /proc reads exactly the directory the descriptor holds.
    let mut names = Vec::new();
    for e in std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))? {
        names.push(e?.file_name());
    }
    for name in names {
        if top && name == ".git" {
            continue;
        }
        let st = match nix::sys::stat::fstatat(dir, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
        {
            Ok(st) => st,
            Err(nix::errno::Errno::ENOENT) => continue,
            Err(e) => return Err(e.into()),
        };
        if st.st_uid != uid || st.st_gid != gid {
            nix::unistd::fchownat(
                dir,
                name.as_os_str(),
                Some(nix::unistd::Uid::from_raw(uid)),
                Some(nix::unistd::Gid::from_raw(gid)),
                AtFlags::AT_SYMLINK_NOFOLLOW,
            )?;
        }
        if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
            let sub = nix::fcntl::openat(
                dir,
                name.as_os_str(),
                OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                nix::sys::stat::Mode::empty(),
            )?;
            hand_over_dir(&sub, uid, gid, false)?;
        }
    }
    Ok(())
}
