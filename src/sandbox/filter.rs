//! The sandbox's seccomp filters, compiled by the runner with
//! `seccompiler` and installed in the child by [`install`]: what a sandboxed
//! call may never do, whatever its capabilities inside its namespaces.
//!
//! Refused with `EPERM`: tracing or reading another process (`ptrace`,
//! `process_vm_readv`/`writev`), every mount call (old and new API),
//! `pivot_root`, `chroot`, new namespaces (`unshare`, `setns`, `clone` with a
//! namespace flag), the kernel keyring (`keyctl`, `add_key`,
//! `request_key`), `bpf`, `perf_event_open`, `userfaultfd`, `io_uring`,
//! modules, `kexec`, `reboot`, swap, `acct`, `quotactl`, and
//! `open_by_handle_at`. `clone3` answers `ENOSYS` (its flags sit in memory a
//! filter cannot read), so the C library falls back to `clone`, whose flags
//! the filter checks.
//!
//! Not for the file system or the network (Landlock and the namespaces).

use std::collections::BTreeMap;
use std::io;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// The system calls refused outright.
const REFUSED: &[libc::c_long] = &[
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_mount_setattr,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_io_uring_setup,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_open_by_handle_at,
];

/// The `clone` flags that make a namespace.
const NAMESPACE_FLAGS: &[libc::c_int] = &[
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWNS,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWCGROUP,
];

/// The two compiled programs: the `EPERM` list, then `clone3` → `ENOSYS`.
///
/// # Errors
/// An architecture seccompiler does not know, or a rule it refuses.
pub(super) fn programs() -> io::Result<Vec<BpfProgram>> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(io::Error::other)?;
    let mut refused: BTreeMap<i64, Vec<SeccompRule>> =
        REFUSED.iter().map(|nr| (*nr, Vec::new())).collect();
    let mut clone_rules = Vec::new();
    for flag in NAMESPACE_FLAGS {
        let flag = u64::try_from(*flag).map_err(io::Error::other)?;
        let cond = SeccompCondition::new(
            0,
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(flag),
            flag,
        )
        .map_err(io::Error::other)?;
        clone_rules.push(SeccompRule::new(vec![cond]).map_err(io::Error::other)?);
    }
    refused.insert(libc::SYS_clone, clone_rules);
    let eperm = u32::try_from(libc::EPERM).unwrap_or(1);
    let enosys = u32::try_from(libc::ENOSYS).unwrap_or(38);
    let first = SeccompFilter::new(
        refused,
        SeccompAction::Allow,
        SeccompAction::Errno(eperm),
        arch,
    )
    .map_err(io::Error::other)?;
    let clone3 = BTreeMap::from([(libc::SYS_clone3, Vec::new())]);
    let second = SeccompFilter::new(
        clone3,
        SeccompAction::Allow,
        SeccompAction::Errno(enosys),
        arch,
    )
    .map_err(io::Error::other)?;
    Ok(vec![
        first.try_into().map_err(io::Error::other)?,
        second.try_into().map_err(io::Error::other)?,
    ])
}

/// Installs the programs on this thread (after `no_new_privs`).
/// Async-signal-safe: `seccompiler::apply_filter` only calls `prctl` and
/// `seccomp` on the given slice.
pub(super) fn install(programs: &[BpfProgram]) -> io::Result<()> {
    for p in programs {
        seccompiler::apply_filter(p).map_err(|_| io::Error::from_raw_os_error(libc::EPERM))?;
    }
    Ok(())
}
