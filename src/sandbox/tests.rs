//! The sandbox's pure parts: the Landlock rights per ABI and the order of
//! the new root's steps. Building one is tested through the real binary
//! (tests/it/sandbox.rs).

use std::path::{Path, PathBuf};

use super::landlock::Access;
use super::prepare::{Op, Prepared, unreadable_by_others};
use super::{Network, Policy};

#[test]
fn each_landlock_abi_handles_what_it_knows_and_grants_within_it() {
    let v1 = Access::handled(1);
    assert_eq!(
        (v1.fs, v1.net, v1.scoped, v1.attr_size),
        ((1 << 13) - 1, 0, 0, 8)
    );
    let v4 = Access::handled(4);
    assert_eq!(
        (v4.net, v4.attr_size),
        (0b11, 16),
        "TCP bind and connect from ABI 4"
    );
    let v6 = Access::handled(6);
    assert_eq!(
        (v6.scoped, v6.attr_size),
        (0b11, 24),
        "signals and abstract sockets from ABI 6"
    );
    for a in [v1, v4, v6, Access::handled(7)] {
        for granted in [
            a.read_file,
            a.read_dir,
            a.write_file,
            a.write_dir,
            a.dev,
            a.list,
        ] {
            assert_eq!(granted & !a.fs, 0, "a rule grants only handled rights");
        }
        assert_eq!(a.write_dir & a.dev, 0, "device ioctl only under /dev");
    }
}

/// The paths the steps of `p` mount onto, in order (under `/newroot`).
fn targets(p: &Prepared) -> Vec<String> {
    p.ops
        .iter()
        .filter_map(|op| match op {
            Op::Bind(_, dst, _) | Op::Tmpfs(dst) => Some(dst.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect()
}

#[test]
fn parents_are_mounted_before_what_lies_inside_them_and_a_write_wins_over_a_read() {
    if super::landlock::abi().is_none() {
        eprintln!("SKIPPED: no Landlock on this kernel");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let outer = dir.path().join("cache");
    let slot = outer.join("slot");
    std::fs::create_dir_all(&slot).unwrap();
    std::fs::write(dir.path().join("tool"), "#!/bin/sh\n").unwrap();
    let policy = Policy {
        write: vec![slot.clone()],
        read: vec![outer.clone(), slot.clone(), dir.path().join("tool")],
        home: PathBuf::from("/home/sandbox"),
        home_files: vec![],
        home_dirs: vec![],
        network: Network::None,
        tmp_size: None,
    };
    let p = Prepared::new(&policy, (0, 0), &slot).unwrap();
    let real = |p: &Path| format!("/newroot{}", std::fs::canonicalize(p).unwrap().display());
    let t = targets(&p);
    let at = |path: &str| {
        t.iter()
            .position(|x| x == path)
            .unwrap_or_else(|| panic!("{path} in {t:?}"))
    };
    assert!(at("/newroot/tmp") < at(&real(&outer)), "{t:?}");
    assert!(at(&real(&outer)) < at(&real(&slot)), "{t:?}");
    assert_eq!(t.iter().filter(|x| **x == real(&slot)).count(), 1, "{t:?}");
    let slot_bind = p.ops.iter().find_map(|op| match op {
        Op::Bind(_, dst, ro) if dst.to_string_lossy() == real(&slot) => Some(*ro),
        _ => None,
    });
    assert_eq!(slot_bind, Some(false), "the slot is written, so read-write");
    assert!(
        p.ops.iter().any(
            |op| matches!(op, Op::Touch(f) if f.to_string_lossy() == real(&dir.path().join("tool")))
        ),
        "a file is bound onto a file"
    );
    assert!(!p.proxy, "no proxy without allowed hosts");
}

/// What others may not read is found, a hidden directory whole (what lies
/// in it is not listed), links not followed.
#[test]
fn what_others_may_not_read_is_found_and_a_hidden_directory_is_hidden_whole() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let at = |p: &str| dir.path().join(p);
    let mode = |p: &str, m: u32| {
        std::fs::set_permissions(at(p), std::fs::Permissions::from_mode(m)).unwrap();
    };
    for d in ["private", "public"] {
        std::fs::create_dir(at(d)).unwrap();
    }
    for f in [
        "open.txt",
        "shadow",
        "private/key",
        "public/inner",
        "public/seen",
    ] {
        std::fs::write(at(f), "x").unwrap();
    }
    mode("open.txt", 0o644);
    mode("shadow", 0o640);
    mode("private/key", 0o600);
    mode("private", 0o700);
    mode("public", 0o755);
    mode("public/inner", 0o600);
    mode("public/seen", 0o444);
    std::os::unix::fs::symlink(at("shadow"), at("link")).unwrap();
    assert_eq!(
        unreadable_by_others(dir.path()),
        [
            (at("private"), true),
            (at("public/inner"), false),
            (at("shadow"), false),
        ]
    );
}
