//! [`enter`]: the child's side of the sandbox, between fork and exec.
//!
//! Three processes: the call's own process (the *outer*, the one its
//! supervisor knows) makes the namespaces and waits; its child is PID 1 of
//! the new PID namespace (the *init*), builds the new root and reaps; the
//! init's child is the program (PID 2), which drops every capability, sets
//! `no_new_privs`, Landlock and seccomp, and returns to be exec'd. When the
//! program ends the init exits as it did and the kernel kills whatever is
//! left in the namespace; the outer exits as the program did.
//!
//! Everything here is async-signal-safe: raw system calls on data built
//! before the fork ([`Prepared`]); no allocation, no lock, no panic.

use std::ffi::CStr;
use std::io;

use super::prepare::{Op, Prepared};
use super::{filter, landlock};

/// `MOUNT_ATTR_RDONLY`, `MOUNT_ATTR_NOSUID`, `MOUNT_ATTR_NODEV` (`mount_setattr(2)`).
const ATTR_RDONLY: u64 = 1;
const ATTR_NOSUID: u64 = 2;
const ATTR_NODEV: u64 = 4;

/// Enters the sandbox: in the process that returns `Ok`, exec the program.
/// The two processes it makes on the way never return: they exit as the
/// program did.
///
/// # Errors
/// The first refused step (namespaces, id maps, a mount, Landlock,
/// seccomp): the spawn then fails with its error number.
pub fn enter(p: &Prepared) -> io::Result<()> {
    let flags = libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWNET;
    // SAFETY: raw system calls on this process only.
    unsafe {
        check(libc::unshare(flags))?;
        // After `agent_user`'s switch (and nightshift's own choice) this
        // process is not dumpable, so its /proc files are root's and the
        // account could not write its maps: dumpable only while it does.
        libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0);
        let maps = write_file(c"/proc/self/setgroups", b"deny")
            .and_then(|()| write_file(c"/proc/self/uid_map", p.uid_map.as_bytes()))
            .and_then(|()| write_file(c"/proc/self/gid_map", p.gid_map.as_bytes()));
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        maps?;
        if p.proxy {
            proxy_port(p.proxy_socket)?;
        }
        let mut fds = [0; 2];
        check(libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC))?;
        match libc::fork() {
            -1 => Err(io::Error::last_os_error()),
            0 => {
                libc::close(fds[0]);
                init(p, fds[1])
            }
            child => {
                libc::close(fds[1]);
                outer(child, fds[0])
            }
        }
    }
}

/// Inside the new network namespace: brings its loopback up, listens on
/// `127.0.0.1:`[`PROXY_PORT`](super::PROXY_PORT) and sends the listening
/// socket over `to` (`SCM_RIGHTS`) to nightshift, which accepts on it and
/// connects out on the host's network ([`super::Proxy`]). Both
/// descriptors are closed here: the sandbox keeps none.
fn proxy_port(to: libc::c_int) -> io::Result<()> {
    // SAFETY: raw system calls on local structures and our own descriptors.
    unsafe {
        let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if s < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut ifr: libc::ifreq = std::mem::zeroed();
        for (d, b) in ifr.ifr_name.iter_mut().zip(b"lo") {
            *d = *b as libc::c_char;
        }
        let up = if libc::ioctl(s, libc::SIOCGIFFLAGS, &mut ifr) == 0 {
            ifr.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            libc::ioctl(s, libc::SIOCSIFFLAGS, &ifr)
        } else {
            -1
        };
        libc::close(s);
        check(up)?;
        let l = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if l < 0 {
            return Err(io::Error::last_os_error());
        }
        let sent = listen_and_send(l, to);
        libc::close(l);
        libc::close(to);
        sent
    }
}

/// Binds `l` to the proxy's port on the loopback, listens and sends it.
unsafe fn listen_and_send(l: libc::c_int, to: libc::c_int) -> io::Result<()> {
    // SAFETY: local structures of the sizes given; our own descriptors.
    unsafe {
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_port = super::PROXY_PORT.to_be();
        addr.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
        check(libc::bind(
            l,
            (&addr as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        ))?;
        check(libc::listen(l, 128))?;
        // One byte of data (a message must carry some) and the descriptor.
        let mut byte = [0u8; 1];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        // Room for one descriptor, aligned as `cmsghdr` wants.
        let mut space = [0u64; 4];
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = space.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(4) as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(4) as _;
        std::ptr::copy_nonoverlapping(
            (&l as *const libc::c_int).cast::<u8>(),
            libc::CMSG_DATA(cmsg),
            4,
        );
        if libc::sendmsg(to, &msg, libc::MSG_NOSIGNAL) != 1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// PID 1: builds the root, forks the program, reaps until it ends.
fn init(p: &Prepared, status: libc::c_int) -> io::Result<()> {
    // SAFETY: raw system calls on this process only.
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        );
        build_root(p)?;
        match libc::fork() {
            -1 => Err(io::Error::last_os_error()),
            0 => {
                libc::close(status);
                program(p)
            }
            child => reap_as_init(child, status),
        }
    }
}

/// The program's last steps before exec: no capabilities, `no_new_privs`,
/// Landlock, seccomp.
fn program(p: &Prepared) -> io::Result<()> {
    // SAFETY: raw system calls on this process only.
    unsafe {
        drop_capabilities();
        check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
    }
    let ruleset = landlock::create(&p.handled)?;
    for r in &p.rules {
        landlock::allow(ruleset, &r.path, r.access)?;
    }
    if p.proxy {
        landlock::allow_connect(ruleset, &p.handled, super::PROXY_PORT)?;
    }
    landlock::restrict(ruleset)?;
    filter::install(&p.filters)
}

/// The new root: the host's root moved aside, each step of `p.ops` under
/// `/newroot`, then `/newroot` made the root and the host's root detached.
unsafe fn build_root(p: &Prepared) -> io::Result<()> {
    // SAFETY: raw system calls on NUL-terminated paths.
    unsafe {
        let none = std::ptr::null::<libc::c_char>();
        let private = libc::MS_REC | libc::MS_PRIVATE;
        check(libc::mount(
            none,
            c"/".as_ptr(),
            none,
            private,
            std::ptr::null(),
        ))?;
        tmpfs(c"/tmp", 0, c"mode=0755")?;
        check(libc::chdir(c"/tmp".as_ptr()))?;
        libc::mkdir(c"newroot".as_ptr(), 0o755);
        libc::mkdir(c"oldroot".as_ptr(), 0o755);
        tmpfs(c"newroot", 0, c"mode=0755")?;
        pivot(c".", c"oldroot")?;
        check(libc::chdir(c"/".as_ptr()))?;
        for op in &p.ops {
            apply(op, &p.tmpfs_options)?;
        }
        check(libc::umount2(c"/oldroot".as_ptr(), libc::MNT_DETACH))?;
        check(libc::chdir(c"/newroot".as_ptr()))?;
        pivot(c".", c".")?;
        check(libc::umount2(c".".as_ptr(), libc::MNT_DETACH))?;
        if libc::chdir(p.cwd.as_ptr()) != 0 {
            check(libc::chdir(c"/".as_ptr()))?;
        }
    }
    Ok(())
}

/// One step of the new root; a private tmpfs is mounted with `options`
/// (its mode and size cap).
unsafe fn apply(op: &Op, options: &CStr) -> io::Result<()> {
    // SAFETY: raw system calls on NUL-terminated paths.
    unsafe {
        match op {
            Op::Mkdir(d) => {
                if libc::mkdir(d.as_ptr(), 0o755) != 0 && errno() != libc::EEXIST {
                    return Err(io::Error::last_os_error());
                }
            }
            Op::Touch(f) => {
                let fd = libc::open(
                    f.as_ptr(),
                    // Read-only: an existing file in a read-only mount is fine.
                    libc::O_CREAT | libc::O_RDONLY | libc::O_CLOEXEC,
                    0o644,
                );
                if fd < 0 && errno() != libc::EISDIR {
                    return Err(io::Error::last_os_error());
                }
                libc::close(fd);
            }
            Op::Bind(src, dst, ro) => {
                let none = std::ptr::null::<libc::c_char>();
                let flags = libc::MS_BIND | libc::MS_REC;
                check(libc::mount(
                    src.as_ptr(),
                    dst.as_ptr(),
                    none,
                    flags,
                    std::ptr::null(),
                ))?;
                let mut set = ATTR_NOSUID | ATTR_NODEV;
                if *ro {
                    set |= ATTR_RDONLY;
                }
                set_attr(dst, set)?;
            }
            Op::BindDev(src, dst) => {
                let none = std::ptr::null::<libc::c_char>();
                check(libc::mount(
                    src.as_ptr(),
                    dst.as_ptr(),
                    none,
                    libc::MS_BIND,
                    std::ptr::null(),
                ))?;
            }
            Op::Tmpfs(d) => tmpfs(d, 0, options)?,
            Op::Hide(d) => tmpfs(d, libc::MS_RDONLY | libc::MS_NOEXEC, c"mode=0755")?,
            Op::Proc(d) => {
                let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
                check(libc::mount(
                    c"proc".as_ptr(),
                    d.as_ptr(),
                    c"proc".as_ptr(),
                    flags,
                    std::ptr::null(),
                ))?;
            }
            Op::Symlink(target, link) => {
                if libc::symlink(target.as_ptr(), link.as_ptr()) != 0 && errno() != libc::EEXIST {
                    return Err(io::Error::last_os_error());
                }
            }
        }
    }
    Ok(())
}

/// `struct mount_attr` of `mount_setattr(2)`.
#[repr(C)]
struct MountAttr {
    set: u64,
    clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Sets `set` on the mount at `dst` and every mount beneath it (a bind
/// keeps the host's flags, which a plain remount in a user namespace may
/// not drop; `mount_setattr` only adds).
unsafe fn set_attr(dst: &CStr, set: u64) -> io::Result<()> {
    let attr = MountAttr {
        set,
        clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: a NUL-terminated path and a local attribute of its size.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            dst.as_ptr(),
            libc::AT_RECURSIVE as libc::c_uint,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A private tmpfs on `dir`, `nosuid`, `nodev` and `flags`, with the
/// mount options `options` (`mode=…`, `size=…`).
unsafe fn tmpfs(dir: &CStr, flags: libc::c_ulong, options: &CStr) -> io::Result<()> {
    let flags = libc::MS_NOSUID | libc::MS_NODEV | flags;
    // SAFETY: NUL-terminated strings.
    check(unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            dir.as_ptr(),
            c"tmpfs".as_ptr(),
            flags,
            options.as_ptr().cast(),
        )
    })
}

/// `pivot_root(2)`, which the C library does not wrap.
unsafe fn pivot(new_root: &CStr, put_old: &CStr) -> io::Result<()> {
    // SAFETY: NUL-terminated paths.
    let r = unsafe { libc::syscall(libc::SYS_pivot_root, new_root.as_ptr(), put_old.as_ptr()) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// No capability in any set, none to regain at an exec as uid 0 inside.
unsafe fn drop_capabilities() {
    /// `SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
    /// SECBIT_NO_SETUID_FIXUP_LOCKED`.
    const SECURE: libc::c_ulong = 0x0f;
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    // SAFETY: prctl and capset on this process with local structures.
    unsafe {
        libc::prctl(libc::PR_SET_SECUREBITS, SECURE, 0, 0, 0);
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        );
        for cap in 0..64 {
            libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0);
        }
        let header = Header {
            version: 0x2008_0522,
            pid: 0,
        };
        let data = [Data {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        libc::syscall(libc::SYS_capset, &header as *const Header, data.as_ptr());
    }
}

/// The init's loop: reaps every child; when the program ends, hands its
/// wait status to the outer and exits (the kernel then kills the rest).
fn reap_as_init(program: libc::pid_t, status: libc::c_int) -> ! {
    // SAFETY: raw system calls on this process only.
    unsafe {
        quiet(status);
        block_all();
        // For `ps`: a fork of nightshift keeps the name of its thread.
        libc::prctl(libc::PR_SET_NAME, c"nightshift-init".as_ptr());
        loop {
            let mut raw = 0;
            let pid = libc::waitpid(-1, &mut raw, 0);
            if pid == program || (pid < 0 && errno() == libc::ECHILD) {
                libc::write(status, (&raw as *const libc::c_int).cast(), 4);
                let code = if libc::WIFEXITED(raw) {
                    libc::WEXITSTATUS(raw)
                } else {
                    128 + libc::WTERMSIG(raw)
                };
                libc::_exit(code);
            }
        }
    }
}

/// The outer's wait: exits as the program did (its status read from the
/// init), or as the init did.
fn outer(init: libc::pid_t, status: libc::c_int) -> ! {
    // SAFETY: raw system calls on this process only.
    unsafe {
        quiet(status);
        block_all();
        libc::prctl(libc::PR_SET_NAME, c"nightshift-box".as_ptr());
        let mut raw = 0;
        loop {
            let pid = libc::waitpid(init, &mut raw, 0);
            if pid == init || (pid < 0 && errno() != libc::EINTR) {
                break;
            }
        }
        let mut program = 0;
        let n = libc::read(status, (&mut program as *mut libc::c_int).cast(), 4);
        exit_as(if n == 4 { program } else { raw })
    }
}

/// Closes every descriptor from 3 on but `keep` (the spawn's error pipe
/// among them: only the program may report to it).
unsafe fn quiet(keep: libc::c_int) {
    // SAFETY: raw system calls on our own descriptors.
    unsafe {
        let keep = libc::c_uint::try_from(keep).unwrap_or(3);
        if keep > 3 {
            libc::syscall(libc::SYS_close_range, 3u32, keep - 1, 0u32);
        }
        libc::syscall(libc::SYS_close_range, keep + 1, u32::MAX, 0u32);
    }
}

/// Blocks every signal that can be blocked.
unsafe fn block_all() {
    // SAFETY: a local signal set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    }
}

/// Exits with the exit code of `raw`, or dies of its signal.
fn exit_as(raw: libc::c_int) -> ! {
    // SAFETY: exit and self-signal system calls.
    unsafe {
        if libc::WIFSIGNALED(raw) {
            let sig = libc::WTERMSIG(raw);
            libc::signal(sig, libc::SIG_DFL);
            let mut one: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut one);
            libc::sigaddset(&mut one, sig);
            libc::sigprocmask(libc::SIG_UNBLOCK, &one, std::ptr::null_mut());
            libc::kill(libc::getpid(), sig);
            libc::_exit(128 + sig)
        }
        libc::_exit(libc::WEXITSTATUS(raw))
    }
}

/// Writes `bytes` to the file at `path` (the id maps).
unsafe fn write_file(path: &CStr, bytes: &[u8]) -> io::Result<()> {
    // SAFETY: a NUL-terminated path; a local buffer; our own descriptor.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        libc::close(fd);
        if usize::try_from(n).ok() != Some(bytes.len()) {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// `Ok` for 0, the last error otherwise.
fn check(r: libc::c_int) -> io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// This thread's `errno`.
fn errno() -> libc::c_int {
    // SAFETY: the C library's thread-local errno.
    unsafe { *libc::__errno_location() }
}
