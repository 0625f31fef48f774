//! The sandbox around every gate, setup and `command` agent call
//! (docs/security.md#the-sandbox), attacked through the real binary: a
//! writer and a gate try to read and write outside the slot, reach the
//! network, signal or trace nightshift, gain privileges, make namespaces
//! and leave a process behind; each attempt is refused, and a normal item
//! of the same run still ships.

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::{self, Fixture, assert_ok, far_deadline, outcomes, text};
use common::bg::{Bg, approve};

/// `ptrace(2)`'s number on this architecture.
#[cfg(target_arch = "x86_64")]
const SYS_PTRACE: u32 = 101;
#[cfg(target_arch = "aarch64")]
const SYS_PTRACE: u32 = 117;

/// What the attack needs to know about the world outside its sandbox.
struct Target<'a> {
    repo: &'a Path,
    data: &'a Path,
    /// A file holding nightshift's pid.
    pid_file: &'a Path,
    /// A path in the host's `/tmp`.
    host_tmp: &'a Path,
    /// A listener on 127.0.0.1 nobody allowed.
    port: u16,
    /// A listener on 127.0.0.1 `allow_hosts` names.
    allowed: u16,
    /// The argument of the `sleep` left behind.
    sleeper: &'a str,
}

/// The attack script: one `WHO:NAME=0|1` line per attempt (0: it worked).
/// A write to the repository's, the data directory's or the host's `/tmp`
/// path lands in the sandbox's private `/tmp` (the slot, and the
/// repository's objects the slot borrows, lie under all three here), so
/// those are judged on the host.
fn attack(t: &Target<'_>) -> String {
    let (repo, data, pid, tmp) = (
        t.repo.display(),
        t.data.display(),
        t.pid_file.display(),
        t.host_tmp.display(),
    );
    let (port, sleeper, allowed, proxy) = (
        t.port,
        t.sleeper,
        t.allowed,
        nightshift::sandbox::PROXY_PORT,
    );
    format!(
        r#"#!/bin/sh
who=$1
try() {{ name=$1; shift; if ( "$@" ) >/dev/null 2>&1; then echo "$who:$name=0"; else echo "$who:$name=1"; fi; }}
pid=$(cat {pid} 2>/dev/null || echo 999999)
try read_repo cat {repo}/calc.txt
try read_git cat {repo}/.git/config
try read_data sh -c 'cat {data}/logs/*.jsonl | grep -q .'
try read_key cat {data}/approval.key
try read_root_ssh ls -a /root/.ssh
try read_shadow cat /etc/shadow
try read_environ cat /proc/$pid/environ
try write_repo sh -c 'echo x > {repo}/pwned-$0' $who
try write_data sh -c 'echo x > {data}/pwned-$0' $who
try write_host_tmp sh -c 'echo x > {tmp}-$0' $who
try connect_listener timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}'
try connect_ledger timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/5432'
try resolve timeout 5 getent hosts registry.npmjs.org
via() {{ timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/{proxy} && printf "CONNECT %s HTTP/1.1\r\n\r\n" "$0" >&3 && head -c 12 <&3 | grep -q " 200"' "$1"; }}
try proxy_listener via 127.0.0.1:{port}
try proxy_ledger via 127.0.0.1:5432
try proxy_name via registry.npmjs.org:443
try proxy_allowed via 127.0.0.1:{allowed}
try signal_nightshift kill -0 $pid
try ptrace perl -e 'exit(syscall({SYS_PTRACE}, 16, $ARGV[0], 0, 0) == 0 ? 0 : 1)' $pid
try setuid_su su -s /bin/sh -c true nobody
try unshare unshare -U true
try mount mount -t tmpfs none /mnt
try chmod_system chmod 777 /etc/passwd
echo "$who:no_new_privs=$(awk '/^NoNewPrivs/{{print $2}}' /proc/self/status)"
echo "$who:cap_eff=$(awk '/^CapEff/{{print $2}}' /proc/self/status)"
try write_private_tmp sh -c 'echo x > /tmp/mine && cat /tmp/mine'
try fill_tmp sh -c 'head -c 70000000 /dev/zero > /tmp/fill'
try fill_home sh -c 'head -c 70000000 /dev/zero > "$HOME/fill"'
rm -f /tmp/fill "$HOME/fill"
try read_system cat /etc/passwd
setsid sleep {sleeper} >/dev/null 2>&1 </dev/null &
exit 0
"#
    )
}

/// The writer: the attack on the item titled "attack", then a change for
/// every item.
const WRITER: &str = r#"#!/bin/sh
case "$(cat "$NIGHTSHIFT_PROMPT_FILE")" in
  *attack*) sh "$(dirname "$0")/attack.sh" writer; echo sub >> calc.txt ;;
  *) echo mul >> calc.txt ;;
esac
"#;

const REVIEWER: &str = "#!/bin/sh\necho '{\"verdict\":\"approve\",\"findings\":[]}'\n";

/// The `WHO:NAME=VALUE` lines of every file under `dir` named `name`.
fn results(dir: &Path, name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|n| n == name) {
                let t = std::fs::read_to_string(&p).unwrap_or_default();
                out.extend(t.lines().filter(|l| l.contains('=')).map(str::to_string));
            }
        }
    }
    out
}

/// Whether a process runs with `arg` in its command line.
fn running(arg: &str) -> bool {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(arg))
        })
}

#[tokio::test(flavor = "multi_thread")]
async fn an_attacking_writer_and_gate_are_refused_and_a_normal_item_still_ships() {
    let f = Fixture::new();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let allowed = TcpListener::bind("127.0.0.1:0").unwrap();
    let allowed_port = allowed.local_addr().unwrap().port();
    let pid_file = f.agents.join("nightshift.pid");
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let host_tmp = PathBuf::from(format!("/tmp/nightshift-sandbox-{tag}"));
    let sleeper = format!("{}.{}", 900_000 + (std::process::id() % 1000), &tag[..6]);
    let target = Target {
        repo: &f.repo,
        data: &f.data,
        pid_file: &pid_file,
        host_tmp: &host_tmp,
        port: listener.local_addr().unwrap().port(),
        allowed: allowed_port,
        sleeper: &sleeper,
    };
    f.agent("attack.sh", &attack(&target));
    let w = f.agent("writer.sh", WRITER);
    let r = f.agent("reviewer.sh", REVIEWER);
    let agents = f.agents.display();
    f.write(
        "NEXT.md",
        "# calc\n\n- [ ] Add sub, the attack\n- [ ] Add mul\n",
    );
    f.config(&format!(
        "verify = [\"sh {agents}/attack.sh gate; sh test.sh\"]\n[writer]\nkind = \"command\"\ncommand = [\"{w}\"]\n[reviewer]\nkind = \"command\"\ncommand = [\"{r}\"]\n[sandbox]\nmode = \"required\"\nread = [\"{agents}\"]\nallow_hosts = [\"127.0.0.1:{allowed_port}\"]\ntmp_size = \"64MiB\"\n"
    ));
    git_commit(&f);
    approve(&f);
    let mut bg = Bg::start(&f, &["drain", "--deadline", &far_deadline()]);
    std::fs::write(&pid_file, bg.pid().to_string()).unwrap();
    let status = bg.wait(Duration::from_secs(300));
    let out = bg.output();
    assert_eq!(status.code(), Some(0), "{out}");
    let report = f.report();
    assert_eq!(
        outcomes(&report),
        ["branch_pushed", "branch_pushed"],
        "{report:#}\n{out}"
    );

    let mut got = results(&f.data, "writer.stdout");
    got.extend(results(&f.data, "gate-0.stdout"));
    let want_refused = [
        "read_repo",
        "read_git",
        "read_data",
        "read_key",
        "read_root_ssh",
        "read_shadow",
        "read_environ",
        "connect_listener",
        "connect_ledger",
        "resolve",
        "proxy_listener",
        "proxy_ledger",
        "proxy_name",
        "signal_nightshift",
        "ptrace",
        "setuid_su",
        "unshare",
        "mount",
        "chmod_system",
        "fill_tmp",
        "fill_home",
    ];
    for who in ["writer", "gate"] {
        for name in want_refused {
            let line = format!("{who}:{name}=1");
            assert!(
                got.contains(&line),
                "{who} was not refused {name}: {got:?}\n{out}"
            );
        }
        for fact in [
            "no_new_privs=1",
            "cap_eff=0000000000000000",
            "write_private_tmp=0",
            "read_system=0",
            "proxy_allowed=0",
        ] {
            let line = format!("{who}:{fact}");
            assert!(got.contains(&line), "{who}: expected {fact}: {got:?}");
        }
        assert!(
            !f.repo.join(format!("pwned-{who}")).exists(),
            "{who} wrote the repository"
        );
        assert!(
            !f.data.join(format!("pwned-{who}")).exists(),
            "{who} wrote the data dir"
        );
        let tmp = PathBuf::from(format!("{}-{who}", host_tmp.display()));
        assert!(!tmp.exists(), "{who} wrote the host's /tmp");
    }
    // Each refusal of the proxy is in the report, with its host.
    let refused: Vec<String> = report["sandbox_refused"]
        .as_array()
        .unwrap_or_else(|| panic!("{report:#}"))
        .iter()
        .map(|h| h.as_str().unwrap().to_string())
        .collect();
    let port = target.port;
    for host in [
        format!("127.0.0.1:{port}"),
        "127.0.0.1:5432".into(),
        "registry.npmjs.org:443".into(),
    ] {
        let n = refused.iter().filter(|h| **h == host).count();
        // The writer once, the gate at each item's round.
        assert!(n >= 2, "{host} refused {n} times: {refused:?}");
    }
    let shown = text(&f.run(&["report"]));
    assert!(
        shown.contains(&format!(
            "sandbox refused {} connections: 127.0.0.1:{port}, 127.0.0.1:5432, registry.npmjs.org:443",
            refused.len()
        )),
        "{shown}"
    );
    let mut buf = [0u8; 1];
    match listener.accept() {
        Ok((mut s, _)) => panic!("the listener was reached: {:?}", s.read(&mut buf)),
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock),
    }
    assert!(
        !running(&sleeper),
        "a process of the attack outlived its call"
    );
}

/// Commits the fixture's backlog and config.
fn git_commit(f: &Fixture) {
    common::git(&f.repo, &["add", "-A"]);
    common::git(&f.repo, &["commit", "-qm", "backlog"]);
    common::git(&f.repo, &["push", "-q", "origin", "main"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_sandbox_settings_are_refused_at_plan_with_the_fix() {
    let f = Fixture::new();
    f.write("NEXT.md", "# calc\n\n- [ ] Add sub\n");
    let w = f.agent("w.sh", "#!/bin/sh\necho sub >> calc.txt\n");
    let base = format!(
        "verify = [\"sh test.sh\"]\n[writer]\nkind = \"command\"\ncommand = [\"{w}\"]\n[reviewer]\nkind = \"command\"\ncommand = [\"{w}\"]\n[sandbox]\n"
    );
    for (line, says) in [
        ("allow_hosts = [\"https://x.org/\"]", "is not a host"),
        (
            "gate_allow_hosts = [\"a b\"]",
            "`a b` in [sandbox] is not a host",
        ),
        ("read = [\"/no/such/toolchain\"]", "does not exist"),
        ("write = [\"relative/cache\"]", "is not an absolute path"),
        ("mode = \"sometimes\"", "mode"),
        ("tmp_size = \"lots\"", "is not a size"),
        ("tmp_size = \"64KiB\"", "must be at least 1048576 bytes"),
    ] {
        f.config(&format!("{base}{line}\n"));
        let out = f.run(&["plan"]);
        assert_eq!(out.status.code(), Some(2), "{line}: {}", text(&out));
        assert!(text(&out).contains(says), "{line}: {}", text(&out));
    }
    // An agent's own list is checked as `[sandbox] allow_hosts` is.
    f.config(&format!(
        "verify = [\"sh test.sh\"]\n[writer]\nkind = \"command\"\ncommand = [\"{w}\"]\nallow_hosts = [\"x y\"]\n[reviewer]\nkind = \"command\"\ncommand = [\"{w}\"]\n"
    ));
    let out = f.run(&["plan"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("`x y` in [writer] is not a host"),
        "{}",
        text(&out)
    );
    f.config(&format!(
        "{base}mode = \"required\"\nallow_hosts = [\"registry.npmjs.org:443\"]\ntmp_size = \"2GiB\"\n"
    ));
    let out = f.run(&["plan"]);
    assert_ok(&out, "plan");
    let card = text(&out);
    assert!(
        card.contains("sandbox   required · every agent, gate and setup · allowed hosts registry.npmjs.org:443 (through the filtering proxy)"),
        "{card}"
    );
    assert!(
        card.contains(" · /tmp and home at most 2.0 GiB each"),
        "the cap is sealed and shown: {card}"
    );
}

/// A sandboxed `sh -c script` in `slot`, with no network and nothing but
/// the slot writable.
fn boxed(script: &str, slot: &Path) -> nightshift::process::Command {
    nightshift::process::Command::shell(script)
        .cwd(slot)
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", "/home/sandbox")
        .sandbox(policy_of(slot))
}

/// The policy of [`boxed`]: the slot writable, nothing else, no network.
fn policy_of(slot: &Path) -> nightshift::sandbox::Policy {
    nightshift::sandbox::Policy {
        write: vec![slot.to_path_buf()],
        read: vec![],
        home: PathBuf::from("/home/sandbox"),
        home_files: vec![],
        home_dirs: vec![],
        network: nightshift::sandbox::Network::None,
        tmp_size: None,
    }
}

/// Exit codes, signals, timeouts and leftovers read as they do without the
/// sandbox: the program's status passes through its PID 1 and the call's
/// process; a `setsid` daemon dies with the call.
#[tokio::test(flavor = "multi_thread")]
async fn a_sandboxed_call_exits_times_out_and_ends_as_an_unsandboxed_one() {
    use nightshift::process::run;
    use tokio_util::sync::CancellationToken;
    if let Err(missing) = nightshift::sandbox::probe() {
        panic!("this suite needs a kernel the sandbox can be built on: {missing}");
    }
    let slot = tempfile::tempdir().unwrap();
    let cancel = CancellationToken::new();
    let o = run(
        boxed("echo out; echo err >&2; exit 7", slot.path()),
        &cancel,
    )
    .await
    .unwrap();
    assert_eq!((o.exit_code, o.signal), (Some(7), None), "{o:?}");
    assert_eq!(
        (o.stdout_tail.as_str(), o.stderr_tail.as_str()),
        ("out\n", "err\n")
    );
    let o = run(boxed("kill -TERM $$", slot.path()), &cancel)
        .await
        .unwrap();
    assert_eq!(o.signal, Some(libc::SIGTERM), "{o:?}");
    let started = std::time::Instant::now();
    let cmd = boxed("sleep 1000", slot.path())
        .timeout(Duration::from_millis(500))
        .grace(Duration::from_secs(30));
    let o = run(cmd, &cancel).await.unwrap();
    assert!(o.timed_out, "{o:?}");
    // SIGTERM reached the program itself (no grace was needed).
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    let tag = format!("7{}", std::process::id());
    let o = run(
        boxed(
            &format!("setsid sleep {tag} >/dev/null 2>&1 & echo $$"),
            slot.path(),
        ),
        &cancel,
    )
    .await
    .unwrap();
    assert_eq!(
        o.stdout_tail, "2\n",
        "the program is PID 2 of its own namespace"
    );
    assert!(
        !running(&format!("sleep {tag}")),
        "the daemon outlived its call"
    );
    let o = run(boxed("echo kept > kept.txt", slot.path()), &cancel)
        .await
        .unwrap();
    assert_eq!(o.exit_code, Some(0));
    assert_eq!(
        std::fs::read_to_string(slot.path().join("kept.txt")).unwrap(),
        "kept\n"
    );
}

/// What others may not read under `/etc` (`mode & 0o004 == 0`) is hidden
/// from a call even when it runs as the files' owner (this suite runs as
/// root, uid 0 inside too): `/etc/shadow` cannot be opened, `/etc/ssl/private`
/// is empty; `/etc/passwd`, readable by all, still reads.
#[tokio::test(flavor = "multi_thread")]
async fn what_others_may_not_read_under_etc_is_hidden_from_its_owner() {
    use std::os::unix::fs::PermissionsExt;
    let shadow = std::fs::metadata("/etc/shadow").expect("this test needs /etc/shadow");
    assert_eq!(
        shadow.permissions().mode() & 0o004,
        0,
        "/etc/shadow is readable by all here"
    );
    let slot = tempfile::tempdir().unwrap();
    let script = "cat /etc/shadow >/dev/null 2>&1 && echo shadow=read || echo shadow=hidden
cat /etc/passwd >/dev/null && echo passwd=read
if [ -d /etc/ssl/private ]; then echo \"private=[$(ls -A /etc/ssl/private)]\"; fi";
    let o = nightshift::process::run(
        boxed(script, slot.path()),
        &tokio_util::sync::CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(o.exit_code, Some(0), "{o:?}");
    let mut want = "shadow=hidden\npasswd=read\n".to_string();
    if Path::new("/etc/ssl/private").is_dir() {
        want.push_str("private=[]\n");
    }
    // As root (this suite) the same read works outside: the sandbox hid it.
    let outside = std::fs::read("/etc/shadow").is_ok();
    assert_eq!(
        o.stdout_tail, want,
        "read outside: {outside}; {}",
        o.stderr_tail
    );
}

/// `tmp_size` caps the private `/tmp` and home: a write past the cap fails
/// with `ENOSPC` ("No space left on device"), a write within it works.
#[tokio::test(flavor = "multi_thread")]
async fn a_write_past_the_private_tmpfs_cap_fails_with_enospc() {
    let slot = tempfile::tempdir().unwrap();
    let cancel = tokio_util::sync::CancellationToken::new();
    for dir in ["/tmp", "$HOME"] {
        let script = format!(
            "head -c 524288 /dev/zero > {dir}/half && echo half=ok; head -c 2097152 /dev/zero > {dir}/more"
        );
        let mut cmd = boxed(&script, slot.path());
        cmd = cmd.sandbox(nightshift::sandbox::Policy {
            tmp_size: Some(1 << 20),
            ..policy_of(slot.path())
        });
        let o = nightshift::process::run(cmd, &cancel).await.unwrap();
        assert_eq!(o.stdout_tail, "half=ok\n", "{dir}: {o:?}");
        assert_ne!(o.exit_code, Some(0), "{dir}: {o:?}");
        assert!(
            o.stderr_tail.contains("No space left on device"),
            "{dir}: {}",
            o.stderr_tail
        );
    }
}

/// A path the sandbox is told to show but which does not exist fails the
/// spawn with a message naming it, never a sandbox without it.
#[tokio::test(flavor = "multi_thread")]
async fn a_missing_sandbox_path_fails_the_spawn_naming_it() {
    let slot = tempfile::tempdir().unwrap();
    let mut cmd = boxed("true", slot.path());
    cmd = cmd.sandbox(nightshift::sandbox::Policy {
        write: vec![slot.path().to_path_buf()],
        read: vec![PathBuf::from("/no/such/toolchain")],
        home: PathBuf::from("/home/sandbox"),
        home_files: vec![],
        home_dirs: vec![],
        network: nightshift::sandbox::Network::None,
        tmp_size: None,
    });
    let e = nightshift::process::run(cmd, &tokio_util::sync::CancellationToken::new())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("/no/such/toolchain") && e.contains("[sandbox] read"),
        "{e}"
    );
}

/// A run whose calls get no sandbox says so in its report, text and JSON
/// (docs/security.md#modes); one that gets it says nothing.
#[test]
fn a_run_without_the_sandbox_says_so_in_its_report() {
    for (mode, says) in [
        (
            "off",
            Some("the sandbox is off (`[sandbox] mode = \"off\"`)"),
        ),
        ("auto", None),
    ] {
        let f = Fixture::new();
        f.write("NEXT.md", "# calc\n\n- [ ] Add sub\n");
        let w = f.agent("w.sh", "#!/bin/sh\necho sub >> calc.txt\n");
        let r = f.agent("r.sh", REVIEWER);
        f.config_with(&w, &r, &format!("[sandbox]\nmode = \"{mode}\"\n"));
        let out = f.approve_and_drain(&[]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        let report = f.report();
        assert_eq!(report["sandbox_unavailable"].as_str(), says, "{report:#}");
        let shown = text(&f.run(&["report"]));
        match says {
            Some(s) => assert!(
                shown.contains(&format!("{s}: agents, gates and setup ran without it")),
                "{shown}"
            ),
            None => assert!(!shown.contains("ran without it"), "{shown}"),
        }
    }
}

/// A gate program the sandbox would not show (found on PATH in a home-like
/// directory, as rustup's `cargo` is) is a failed `toolchain` line of
/// `doctor` naming it and the fix; shown through `[sandbox] read`, or with
/// the sandbox off, the line is gone.
#[test]
fn doctor_names_a_gate_program_the_sandbox_would_hide() {
    let mut f = Fixture::new();
    let tools = f.dir.path().join("toolchain/bin");
    std::fs::create_dir_all(&tools).unwrap();
    let tool = tools.join("mytool");
    std::fs::write(&tool, "#!/bin/sh\nexit 0\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    common::prepend_path(&mut f, &tools);
    let w = f.agent("writer.sh", "#!/bin/sh\necho hi\n");
    let r = f.agent("reviewer.sh", common::night::APPROVE);
    let config = |sandbox: &str| {
        format!(
            "verify = [\"mytool --check\"]\n\n[writer]\nkind = \"command\"\ncommand = [\"{w}\"]\n\n[reviewer]\nkind = \"command\"\ncommand = [\"{r}\"]\n\n[sandbox]\n{sandbox}\n"
        )
    };
    f.config(&config(""));
    let out = f.run(&["doctor"]);
    let said = text(&out);
    let line = common::doctor_line(&out, "toolchain");
    assert!(
        line.starts_with("FAIL") && line.contains(&format!("mytool is {}", tool.display())),
        "{said}"
    );
    assert!(said.contains("`[sandbox] read`"), "{said}");
    let dir = f.dir.path().join("toolchain").display().to_string();
    for shown in [format!("read = [\"{dir}\"]"), "mode = \"off\"".to_string()] {
        f.config(&config(&shown));
        let out = f.run(&["doctor"]);
        assert_eq!(
            common::doctor_line(&out, "toolchain"),
            "",
            "{shown}: {}",
            text(&out)
        );
    }
}

/// An executable `name` in `dir` (made) running `script`; its path.
fn tool(dir: &Path, name: &str, script: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, script).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// A gate program found on PATH where the sandbox shows nothing (as
/// rustup's `cargo` is) makes `plan` refuse (exit 2, no SHA), naming the
/// program, where it was found and the `[sandbox] read` line to write;
/// with that line the plan is offered.
#[test]
fn plan_refuses_a_gate_program_the_sandbox_would_hide_and_names_the_read_line() {
    let mut f = Fixture::new();
    let root = f.dir.path().join("toolchain");
    let mytool = tool(&root.join("bin"), "mytool", "#!/bin/sh\nexit 0\n");
    common::prepend_path(&mut f, &root.join("bin"));
    f.write("NEXT.md", "# calc\n\n- [ ] Add sub\n");
    let w = f.agent("writer.sh", "#!/bin/sh\necho sub >> calc.txt\n");
    let r = f.agent("reviewer.sh", REVIEWER);
    let config = |sandbox: &str| {
        format!(
            "verify = [\"mytool --check && sh test.sh\"]\n[writer]\nkind = \"command\"\ncommand = [\"{w}\"]\n[reviewer]\nkind = \"command\"\ncommand = [\"{r}\"]\n[sandbox]\n{sandbox}\n"
        )
    };
    f.config(&config(""));
    let out = f.run(&["plan"]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("no SHA to approve"), "{said}");
    assert!(
        said.contains(&format!(
            "verify `mytool --check && sh test.sh`: mytool is {}, which the sandbox does not show",
            mytool.display()
        )),
        "{said}"
    );
    let line = format!("read = [\"{}\"]", root.display());
    assert!(
        said.contains(&format!("write `{line}` under `[sandbox]`")),
        "{said}"
    );
    f.config(&config(&line));
    assert_ok(&f.run(&["plan"]), "plan with the read line");
}

/// `init` in a Rust project whose `cargo` lies where the sandbox shows
/// nothing (rustup's `~/.cargo/bin` here stands in a temporary
/// `toolchain/bin`): the config it writes already shows that toolchain
/// (`[sandbox] read`), it says so, and the first `plan` offers a SHA
/// instead of refusing (docs/security.md#toolchains).
#[test]
fn init_shows_the_toolchain_of_the_gate_it_guessed() {
    let mut f = Fixture::new();
    let root = f.dir.path().join("toolchain");
    tool(
        &root.join("bin"),
        "cargo",
        "#!/bin/sh
exit 0
",
    );
    common::prepend_path(&mut f, &root.join("bin"));
    f.write(
        "Cargo.toml",
        "[package]\nname = \"calc\"\nversion = \"0.1.0\"\n",
    );
    let out = f.run(&["init"]);
    let said = text(&out);
    assert_ok(&out, "init");
    let line = format!("read = [\"{}\"]", root.display());
    assert!(
        said.contains(&format!("wrote `{line}` under [sandbox]")),
        "{said}"
    );
    let cfg = std::fs::read_to_string(f.repo.join(".nightshift/config.toml")).unwrap();
    assert!(cfg.contains("[sandbox]") && cfg.contains(&line), "{cfg}");
    // The agents: command scripts of the fixture (claude is not installed here).
    let w = f.agent("writer.sh", "#!/bin/sh\necho sub >> calc.txt\n");
    let r = f.agent("reviewer.sh", REVIEWER);
    let cfg = cfg
        .replace(
            "kind = \"claude\"                # claude | codex | command\ncommand = [\"claude\"]",
            &format!("kind = \"command\"\ncommand = [\"{w}\"]"),
        )
        .replace(
            "[reviewer]\nkind = \"claude\"\ncommand = [\"claude\"]",
            &format!("[reviewer]\nkind = \"command\"\ncommand = [\"{r}\"]"),
        );
    std::fs::write(
        f.repo.join(".nightshift/config.toml"),
        format!("agents_as_root = true\n{cfg}"),
    )
    .unwrap();
    assert_ok(&f.run(&["plan"]), "plan over init's config");
}

/// An agent whose script's interpreter lies where the sandbox shows
/// nothing (`#!/usr/bin/env node` with nvm's `node`) makes `plan` refuse
/// and `doctor` fail its `toolchain` line, both naming the interpreter and
/// the directory to show; shown, both pass. The agent's own file needs no
/// line: the sandbox shows a call's program.
#[test]
fn plan_and_doctor_refuse_an_agent_whose_interpreter_the_sandbox_would_hide() {
    let mut f = Fixture::new();
    let nvm = f.dir.path().join("nvm/versions/node/v20");
    let node = tool(&nvm.join("bin"), "mynode", "#!/bin/sh\nexec sh \"$@\"\n");
    common::prepend_path(&mut f, &nvm.join("bin"));
    let agent = tool(
        &f.dir.path().join("hidden"),
        "my-agent",
        "#!/usr/bin/env mynode\necho sub >> calc.txt\n",
    );
    f.write("NEXT.md", "# calc\n\n- [ ] Add sub\n");
    let r = f.agent("reviewer.sh", REVIEWER);
    let config = |sandbox: &str| {
        format!(
            "verify = [\"sh test.sh\"]\n[writer]\nkind = \"command\"\ncommand = [\"{}\"]\n[reviewer]\nkind = \"command\"\ncommand = [\"{r}\"]\n[sandbox]\n{sandbox}\n",
            agent.display()
        )
    };
    f.config(&config(""));
    let out = f.run(&["plan"]);
    let said = text(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains(&format!(
            "the writer's program ([writer] command), the interpreter of {}: mynode is {}",
            agent.display(),
            node.display()
        )),
        "{said}"
    );
    let line = format!("read = [\"{}\"]", nvm.display());
    assert!(said.contains(&line), "{said}");
    let out = f.run(&["doctor"]);
    let doctor = common::doctor_line(&out, "toolchain");
    assert!(
        doctor.starts_with("FAIL") && doctor.contains("mynode is") && doctor.contains(&line),
        "{}",
        text(&out)
    );
    f.config(&config(&line));
    assert_ok(&f.run(&["plan"]), "plan with the read line");
    let out = f.run(&["doctor"]);
    assert_eq!(common::doctor_line(&out, "toolchain"), "", "{}", text(&out));
}

/// Claude Code's user settings (`~/.claude/settings.json`) may name its
/// API host in their `env` table: with no `ANTHROPIC_BASE_URL` in the
/// environment, the sandbox allows that host and shows the settings
/// read-only in the private home, and the real CLI completes an item
/// inside it against the fake API the settings name.
#[tokio::test(flavor = "multi_thread")]
async fn the_real_claude_reaches_the_api_host_its_user_settings_name() {
    use crate::fakes::anthropic::{FakeAnthropic, Reply, tool};
    use serde_json::json;
    let bin = crate::agent_claude::real_claude().display().to_string();
    let api = FakeAnthropic::start().await;
    let mut f = Fixture::new();
    for (k, v) in crate::agent_claude::cli_env(&f.home, &api.uri(), false) {
        if !["PATH", "HOME", "ANTHROPIC_BASE_URL"].contains(&k.as_str()) {
            f.extra_env.push((k, v));
        }
    }
    let settings = json!({"env": {"ANTHROPIC_BASE_URL": api.uri()}});
    std::fs::create_dir_all(f.home.join(".claude")).unwrap();
    std::fs::write(f.home.join(".claude/settings.json"), settings.to_string()).unwrap();
    f.config(&format!(
        "verify = [\"sh test.sh\"]\n[limits]\nrounds = 1\n[writer]\nkind = \"claude\"\ncommand = [\"{bin}\"]\n[reviewer]\nkind = \"claude\"\ncommand = [\"{bin}\"]\n[sandbox]\nmode = \"required\"\n"
    ));
    f.write("NEXT.md", "# calc\n\n- [ ] Add sub\n  - scope: calc.txt\n");
    api.writer([
        Reply::Tools(
            None,
            vec![tool(
                "Edit",
                json!({"file_path": "calc.txt", "old_string": "add\n", "new_string": "add\nsub\n"}),
            )],
        ),
        Reply::Text("Added sub.".into()),
    ]);
    api.reviewer([Reply::Tools(
        None,
        vec![tool(
            "StructuredOutput",
            json!({"verdict": "approve", "findings": []}),
        )],
    )]);
    let out = f.approve_and_drain(&[]);
    assert_ok(&out, "drain");
    let report = f.report();
    assert_eq!(outcomes(&report), ["branch_pushed"], "{report:#}");
    assert_eq!(api.left(), (0, 0), "every turn went to the settings' host");
}

/// `[writer] allow_hosts` lets only the writer's calls through to its
/// hosts, `[sandbox] gate_allow_hosts` only the gate's and setup's: each
/// reaches its own listener on 127.0.0.1 through the proxy and is refused
/// the other's; the card shows whose hosts they are.
#[tokio::test(flavor = "multi_thread")]
async fn a_host_allowed_for_the_gate_only_or_the_writer_only_is_theirs_alone() {
    let f = Fixture::new();
    let gate_l = TcpListener::bind("127.0.0.1:0").unwrap();
    let writer_l = TcpListener::bind("127.0.0.1:0").unwrap();
    let (g, w) = (
        gate_l.local_addr().unwrap().port(),
        writer_l.local_addr().unwrap().port(),
    );
    let proxy = nightshift::sandbox::PROXY_PORT;
    f.agent(
        "probe.sh",
        &format!(
            r#"#!/bin/sh
via() {{ timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/{proxy} && printf "CONNECT %s HTTP/1.1\r\n\r\n" "$0" >&3 && head -c 12 <&3 | grep -q " 200"' "$1"; }}
for h in gate:{g} writer:{w}; do
  if via 127.0.0.1:${{h#*:}}; then echo "$1:${{h%%:*}}_host=0"; else echo "$1:${{h%%:*}}_host=1"; fi
done
"#
        ),
    );
    let wr = f.agent(
        "writer.sh",
        "#!/bin/sh\nsh \"$(dirname \"$0\")/probe.sh\" writer\necho sub >> calc.txt\n",
    );
    let r = f.agent("reviewer.sh", REVIEWER);
    let agents = f.agents.display();
    f.write("NEXT.md", "# calc\n\n- [ ] Add sub\n");
    f.config(&format!(
        "verify = [\"sh {agents}/probe.sh gate; sh test.sh\"]\n[writer]\nkind = \"command\"\ncommand = [\"{wr}\"]\nallow_hosts = [\"127.0.0.1:{w}\"]\n[reviewer]\nkind = \"command\"\ncommand = [\"{r}\"]\n[sandbox]\nmode = \"required\"\nread = [\"{agents}\"]\ngate_allow_hosts = [\"127.0.0.1:{g}\"]\n"
    ));
    let card = text(&f.run(&["plan"]));
    assert!(
        card.contains(&format!(
            " · writer only: 127.0.0.1:{w} · gate and setup only: 127.0.0.1:{g}"
        )),
        "{card}"
    );
    let out = f.approve_and_drain(&[]);
    assert_ok(&out, "drain");
    let report = f.report();
    assert_eq!(outcomes(&report), ["branch_pushed"], "{report:#}");
    let mut got = results(&f.data, "writer.stdout");
    got.extend(results(&f.data, "gate-0.stdout"));
    for line in [
        "writer:writer_host=0",
        "writer:gate_host=1",
        "gate:gate_host=0",
        "gate:writer_host=1",
    ] {
        assert!(got.contains(&line.to_string()), "{line}: {got:?}");
    }
    let refused = report["sandbox_refused"].to_string();
    for host in [format!("127.0.0.1:{g}"), format!("127.0.0.1:{w}")] {
        assert!(refused.contains(&host), "{host}: {refused}");
    }
    // The end of the drain shows the refusals as `report` does.
    let shown = text(&f.run(&["report"]));
    let line = (shown.lines())
        .find(|l| l.starts_with("sandbox refused "))
        .unwrap_or_else(|| panic!("no refusals in the report: {shown}"));
    let drained = String::from_utf8_lossy(&out.stdout);
    assert!(
        drained.lines().any(|l| l == line),
        "drain's end lacks `{line}`:\n{drained}"
    );
}

/// A rustup proxy (`cargo` linked to `rustup`) runs the toolchain in
/// `RUSTUP_HOME`: `plan` names both its `CARGO_HOME` and `RUSTUP_HOME`,
/// and showing `CARGO_HOME` alone is still refused, naming `RUSTUP_HOME`.
#[test]
fn plan_names_rustup_home_for_a_rustup_proxy() {
    let mut f = Fixture::new();
    let cargo_home = f.dir.path().join("cargo");
    let rustup_home = f.dir.path().join("rustup");
    std::fs::create_dir_all(rustup_home.join("toolchains")).unwrap();
    tool(&cargo_home.join("bin"), "rustup", "#!/bin/sh\nexit 0\n");
    std::os::unix::fs::symlink("rustup", cargo_home.join("bin/cargo")).unwrap();
    common::prepend_path(&mut f, &cargo_home.join("bin"));
    f.extra_env
        .push(("RUSTUP_HOME".into(), rustup_home.display().to_string()));
    f.write("NEXT.md", "# calc\n\n- [ ] Add sub\n");
    let w = f.agent("writer.sh", "#!/bin/sh\necho sub >> calc.txt\n");
    let r = f.agent("reviewer.sh", REVIEWER);
    let config = |sandbox: &str| {
        format!(
            "verify = [\"cargo test\"]\n[writer]\nkind = \"command\"\ncommand = [\"{w}\"]\n[reviewer]\nkind = \"command\"\ncommand = [\"{r}\"]\n[sandbox]\n{sandbox}\n"
        )
    };
    let (ch, rh) = (cargo_home.display(), rustup_home.display());
    for (shown, want) in [
        (String::new(), format!("read = [\"{ch}\", \"{rh}\"]")),
        (
            format!("read = [\"{ch}\"]"),
            format!("read = [\"{ch}\", \"{rh}\"]"),
        ),
    ] {
        f.config(&config(&shown));
        let out = f.run(&["plan"]);
        let said = text(&out);
        assert_eq!(out.status.code(), Some(2), "{shown}: {said}");
        assert!(said.contains(&format!("cargo is {ch}/bin/cargo")), "{said}");
        assert!(said.contains(&format!("write `{want}`")), "{shown}: {said}");
    }
    f.config(&config(&format!("read = [\"{ch}\", \"{rh}\"]")));
    assert_ok(&f.run(&["plan"]), "plan with both homes shown");
}
