//! Operational failures during a night, through the real binary (docs/limits.md, docs/ledger.md):
//! the ledger dying and coming back, the disk and the data directory failing,
//! the user's checkout and the remote changing under a run, agents and gates
//! misbehaving at the process level, two drains sharing one data directory,
//! odd deadlines, and the terminal's signals.
//!
//! Slow phases are reached with stall files (see `night.rs`), never with a
//! test-only switch in the binary.

use crate::common;
use common::Table;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::bg::{
    Bg, approve, outcomes, process_gone, read_pid, release, stall_snippet, stalled_shell,
    wait_until,
};
use common::github::FakeGitHub;
use common::night::WORD_WRITER;
use common::{Fixture, assert_ok, git, reason, text};
use serde_json::Value;

/// Two items (`Add sub`, `Add pow`) with command agents whose writer and
/// reviewer stall when `writer.stall` / `reviewer.stall` exist, and whose
/// writer of `Add pow` stalls when `writer2.stall` exists.
pub(crate) fn two_items(f: &Fixture) {
    let w = f.agent("writer.sh", &format!("#!/bin/sh\n{}if grep -q 'Add pow' \"$NIGHTSHIFT_CONTRACT_FILE\"; then\n{}fi\n{WORD_WRITER}", stall_snippet(&f.agents, "writer"), stall_snippet(&f.agents, "writer2")));
    let r = f.agent(
        "reviewer.sh",
        &format!(
            "#!/bin/sh\n{}echo '{{\"verdict\":\"approve\",\"findings\":[]}}'\n",
            stall_snippet(&f.agents, "reviewer")
        ),
    );
    f.config_with(&w, &r, "");
    f.write("NEXT.md", "- [ ] Add sub\n- [ ] Add pow\n");
}

pub(crate) fn stall(f: &Fixture, name: &str) {
    std::fs::write(f.agents.join(format!("{name}.stall")), "").unwrap();
}

pub(crate) fn wait_ready(f: &Fixture, name: &str) {
    wait_until(Duration::from_secs(30), &format!("{name} to stall"), || {
        f.agents.join(format!("{name}.ready")).exists()
    });
}

// ---------------------------------------------------------------------------------------------
// Signals of a closed terminal and of Ctrl-\
// ---------------------------------------------------------------------------------------------

/// SIGHUP (the terminal closed) and SIGQUIT stop a run as SIGTERM does:
/// the agent is killed rather than left editing the checkout, the item is
/// `interrupted`, the checkout cleaned, the run `stopped_signal`.
#[test]
fn sighup_and_sigquit_stop_the_run_cleanly() {
    for sig in [
        nix::sys::signal::Signal::SIGHUP,
        nix::sys::signal::Signal::SIGQUIT,
    ] {
        let f = Fixture::new();
        two_items(&f);
        stall(&f, "writer");
        approve(&f);
        let mut bg = Bg::start(&f, &["drain", "--deadline", &common::far_deadline()]);
        wait_ready(&f, "writer");
        let agent = stalled_shell(&f.agents, "writer");
        bg.signal(sig);
        let status = bg.wait(Duration::from_secs(15));
        assert_eq!(
            status.code(),
            Some(1),
            "{sig:?}: {status:?}\n{}",
            bg.output()
        );
        assert!(
            bg.output().contains(&format!("{sig:?} received")),
            "{}",
            bg.output()
        );
        wait_until(Duration::from_secs(5), "the agent to be killed", || {
            process_gone(agent)
        });
        let rep = f.report();
        assert_eq!(rep["status"], "stopped_signal", "{sig:?}: {rep:#}");
        assert_eq!(outcomes(&rep), ["interrupted"], "{sig:?}");
        assert!(f.remote_branches().is_empty());
    }
}

/// A real hang-up: the drain runs on a pseudo-terminal (`script`), which is
/// then closed. The run stops as on SIGTERM — agent killed, item
/// `interrupted`, run `stopped_signal` — though its terminal is gone.
#[test]
fn closing_the_terminal_stops_the_run_cleanly() {
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: `script` (util-linux) is not installed");
        return;
    }
    let f = Fixture::new();
    two_items(&f);
    stall(&f, "writer");
    approve(&f);
    let c = f.cmd();
    let quote = |s: &str| format!("'{}'", s.replace('\'', "'\\''"));
    let envs: Vec<String> = c
        .get_envs()
        .filter_map(|(k, v)| {
            v.map(|v| quote(&format!("{}={}", k.to_string_lossy(), v.to_string_lossy())))
        })
        .collect();
    let line = format!(
        "cd {} && exec env -i {} {} drain --deadline {}",
        quote(&f.repo.display().to_string()),
        envs.join(" "),
        env!("CARGO_BIN_EXE_nightshift"),
        common::far_deadline()
    );
    let mut terminal = std::process::Command::new("script")
        .args(["-qfec", &line, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_ready(&f, "writer");
    let agent = stalled_shell(&f.agents, "writer");
    let drain = f.db.runs()[0].pid;
    terminal.kill().unwrap();
    let _ = terminal.wait();
    wait_until(Duration::from_secs(15), "nightshift to exit", || {
        process_gone(drain)
    });
    assert!(process_gone(agent), "the agent outlived the run");
    let runs: Vec<_> =
        f.db.runs()
            .into_iter()
            .map(|r| (r.status, r.exit_code))
            .collect();
    assert_eq!(runs, [("stopped_signal".to_string(), Some(1))]);
    assert_eq!(f.db.outcomes(), ["interrupted"]);
    assert!(f.remote_branches().is_empty());
}

/// Takes the test's database away: no new connections, every session ended.
pub(crate) fn db_down(f: &Fixture) {
    common::db::admin_sql(&format!(
        "ALTER DATABASE {0} ALLOW_CONNECTIONS false; \
         SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = '{0}'",
        f.db.name
    ));
}

/// Brings it back.
pub(crate) fn db_up(f: &Fixture) {
    common::db::admin_sql(&format!(
        "ALTER DATABASE {} ALLOW_CONNECTIONS true",
        f.db.name
    ));
}

/// Exactly one PR per item on GitHub, each from its own branch, and those
/// branches on the remote with one commit each.
pub(crate) fn one_pr_per_item(f: &Fixture, gh: &FakeGitHub, items: usize) {
    let mut heads: Vec<String> = gh
        .prs()
        .iter()
        .map(|p| p["head"]["ref"].as_str().unwrap().to_string())
        .collect();
    heads.sort();
    assert_eq!(heads.len(), items, "{heads:?}");
    heads.dedup();
    assert_eq!(heads.len(), items, "a duplicate PR: {heads:?}");
    let mut branches = f.remote_branches();
    branches.sort();
    assert_eq!(branches, heads);
    for b in &branches {
        assert_eq!(
            git(&f.remote, &["rev-list", "--count", &format!("main..{b}")]),
            "1",
            "{b} has one commit"
        );
    }
}

pub(crate) async fn with_github() -> (Fixture, FakeGitHub) {
    let gh = FakeGitHub::start().await;
    let mut f = Fixture::new();
    f.use_github(&gh);
    f.token = Some("ghp_ops_token_0123456789abcdef".into());
    two_items(&f);
    (f, gh)
}

// ---------------------------------------------------------------------------------------------
// The ledger goes away and comes back
// ---------------------------------------------------------------------------------------------

/// PostgreSQL goes away while the writer works (its sessions ended, new ones
/// refused — a restart, a failover) and comes back: the run waits, takes its
/// lock again and goes on; nothing is redone, lost or opened twice.
#[tokio::test(flavor = "multi_thread")]
async fn a_ledger_outage_during_an_item_is_waited_out() {
    let (f, gh) = with_github().await;
    stall(&f, "writer");
    stall(&f, "writer2");
    approve(&f);
    let mut bg = Bg::start(&f, &["drain", "--deadline", &common::far_deadline()]);
    wait_ready(&f, "writer");
    db_down(&f);
    release(&f.agents, "writer");
    wait_until(
        Duration::from_secs(20),
        "the run to say it waits for the ledger",
        || bg.output().contains("stopped answering"),
    );
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        bg.child.try_wait().unwrap().is_none(),
        "the run gave up at once:\n{}",
        bg.output()
    );
    db_up(&f);
    // The outage ended the session holding the repository's lock; the run
    // took it again, so another drain (with checkouts elsewhere, so that only
    // the ledger's lock stands between them) is refused.
    wait_ready(&f, "writer2");
    let other_data = f.dir.path().join("other-data");
    let mut second = f.cmd();
    second.env("NIGHTSHIFT_DATA_DIR", &other_data).args([
        "drain",
        "--deadline",
        &common::far_deadline(),
    ]);
    let out = second.output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        text(&out).contains("another nightshift run holds the lock"),
        "{}",
        text(&out)
    );
    release(&f.agents, "writer2");
    let status = bg.wait(Duration::from_secs(60));
    assert_eq!(status.code(), Some(0), "{}", bg.output());
    assert!(
        bg.output().contains("the ledger answers again"),
        "{}",
        bg.output()
    );
    let rep = f.report();
    assert_eq!(rep["status"], "completed", "{rep:#}");
    assert_eq!(outcomes(&rep), ["pr_opened", "pr_opened"]);
    assert_eq!(f.db.count(Table::Runs), 1);
    assert_eq!(
        f.db.calls_of("writer"),
        2,
        "the writer's work was kept, not redone"
    );
    one_pr_per_item(&f, &gh, 2);
}

/// A signal while the run waits for the ledger stops it at once; the next
/// drain, with the ledger back, resumes it without duplicates.
#[tokio::test(flavor = "multi_thread")]
async fn a_signal_while_waiting_for_the_ledger_stops_and_the_next_drain_resumes() {
    let (f, gh) = with_github().await;
    stall(&f, "writer");
    approve(&f);
    let mut bg = Bg::start(&f, &["drain", "--deadline", &common::far_deadline()]);
    wait_ready(&f, "writer");
    db_down(&f);
    release(&f.agents, "writer");
    wait_until(
        Duration::from_secs(20),
        "the run to wait for the ledger",
        || bg.output().contains("stopped answering"),
    );
    let sent = Instant::now();
    bg.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(
        bg.wait(Duration::from_secs(15)).code(),
        Some(1),
        "{}",
        bg.output()
    );
    assert!(
        sent.elapsed() < Duration::from_secs(5),
        "a signal does not wait for the ledger: {:?}",
        sent.elapsed()
    );
    let out = bg.output();
    assert!(
        out.contains("a signal came while the run waited")
            && out.contains("`nightshift drain` resumes this run"),
        "{out}"
    );
    assert!(
        out.contains(&format!("/{} (from NIGHTSHIFT_DATABASE_URL)", f.db.name)),
        "names the ledger: {out}"
    );
    db_up(&f);
    let out = f.run(&["drain"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("resuming crashed run"),
        "{}",
        text(&out)
    );
    assert_eq!(outcomes(&f.report()), ["pr_opened", "pr_opened"]);
    one_pr_per_item(&f, &gh, 2);
}

/// The embedded cluster is nightshift's own: when it dies mid-run (here an
/// immediate shutdown, as after a crash), the run starts it again and goes on.
#[test]
fn an_embedded_ledger_that_dies_mid_run_is_started_again() {
    let f = Fixture::new();
    two_items(&f);
    stall(&f, "writer");
    let embedded = || {
        let mut c = f.cmd();
        c.env_remove("NIGHTSHIFT_DATABASE_URL");
        c
    };
    let out = embedded().args(["plan", "--json"]).output().unwrap();
    assert_ok(&out, "plan");
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_ok(
        &embedded()
            .args(["approve", plan["plan_sha"].as_str().unwrap()])
            .output()
            .unwrap(),
        "approve",
    );
    let mut bg = Bg::start_cmd(
        &f,
        embedded(),
        &["drain", "--deadline", &common::far_deadline()],
    );
    wait_ready(&f, "writer");
    let pid_file = f.data.join("pg/postmaster.pid");
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SIGQUIT is PostgreSQL's immediate shutdown: no checkpoint, as in a crash.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGQUIT,
    )
    .unwrap();
    wait_until(Duration::from_secs(10), "the postmaster to be gone", || {
        process_gone(pid)
    });
    release(&f.agents, "writer");
    let status = bg.wait(Duration::from_secs(90));
    assert_eq!(status.code(), Some(0), "{}", bg.output());
    let out = embedded().args(["report", "--json"]).output().unwrap();
    let rep: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rep["status"], "completed", "{rep:#}");
    assert_eq!(outcomes(&rep), ["branch_pushed", "branch_pushed"]);
    assert_eq!(f.remote_branches().len(), 2);
    let _ = embedded().args(["db", "stop"]).output();
}

/// `status` and `report` with the ledger down: a prompt error that names
/// the ledger (without its password), says why and what to do.
#[test]
fn status_and_report_with_the_ledger_down_say_why() {
    let mut f = Fixture::new();
    two_items(&f);
    let missing = f.dir.path().join("no-server");
    f.extra_env.push((
        "NIGHTSHIFT_DATABASE_URL".into(),
        format!(
            "postgres://postgres:hunter2secret@localhost/x?host={}",
            missing.display()
        ),
    ));
    for args in [
        &["status"][..],
        &["status", "--json"],
        &["report"],
        &["report", "--json"],
    ] {
        let started = Instant::now();
        let out = f.cmd().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", text(&out));
        assert!(
            started.elapsed() < Duration::from_secs(8),
            "{args:?} took {:?}",
            started.elapsed()
        );
        let t = text(&out);
        assert!(
            t.contains("cannot connect to the ledger at postgres://postgres@")
                && t.contains("(from NIGHTSHIFT_DATABASE_URL)"),
            "{args:?}: {t}"
        );
        assert!(
            t.contains("No such file or directory"),
            "{args:?}: the cause, not a pool timeout: {t}"
        );
        assert!(
            t.contains("start that server or fix the URL"),
            "{args:?}: {t}"
        );
        assert!(!t.contains("hunter2secret"), "{t}");
        assert!(
            out.stdout.is_empty(),
            "{args:?}: no half answer on stdout: {t}"
        );
    }
}

/// A small tmpfs mounted over `dir`, unmounted when dropped; `None` when
/// this process may not mount (not root), and the test says it skipped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).unwrap();
        let out = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "tmpfs",
                dir.to_str().unwrap(),
            ])
            .output()
            .ok()?;
        if !out.status.success() {
            eprintln!(
                "skipped: cannot mount a tmpfs here ({}); run the tests as root to try a full or read-only disk",
                text(&out).trim()
            );
            return None;
        }
        Some(Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .args(["-l", self.0.to_str().unwrap()])
            .output();
    }
}

// ---------------------------------------------------------------------------------------------
// The environment fails under the run: the agent's executable, the data directory's disk
// ---------------------------------------------------------------------------------------------

/// After the first item, the stop of a `systemic` failure: the item in
/// flight is `interrupted` (not an attempt of its own), the run `crashed`,
/// the message names the cause and the way on, and the next drain resumes
/// the run under its approval once the cause is gone.
fn stops_and_resumes(
    f: &Fixture,
    gh: &FakeGitHub,
    bg: &mut Bg,
    cause: &str,
    key_kept: bool,
    fix: impl FnOnce(),
) {
    let status = bg.wait(Duration::from_secs(60));
    assert_eq!(status.code(), Some(1), "{}", bg.output());
    let out = bg.output();
    assert!(
        out.contains(&format!("error: the run stopped: {cause}"))
            && out.contains("Once that is fixed, `nightshift drain` resumes this run"),
        "{out}"
    );
    let rep = f.report();
    assert_eq!(rep["status"], "crashed", "{rep:#}");
    let last = rep["items"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["outcome"], "interrupted", "{rep:#}");
    assert!(
        last["reason"]
            .as_str()
            .unwrap()
            .starts_with(&format!("stopped: {cause}")),
        "{rep:#}"
    );
    let blamed =
        f.db.outcomes()
            .into_iter()
            .filter(|o| o == "error" || o == "rule_broken")
            .count();
    assert_eq!(blamed, 0, "nothing was blamed on the item");
    let status = text(&f.run(&["status"]));
    let stopped = format!(
        "idle: run {} stopped before its end",
        rep["run_id"].as_str().unwrap()
    );
    if !key_kept {
        // The approval key went with the data directory: the run's approval
        // can no longer be verified, so it takes a new approval, not a resume.
        assert!(
            status.contains(&stopped) && status.contains("can no longer be verified"),
            "{status}"
        );
        fix();
        let out = f.run(&["drain"]);
        assert_eq!(out.status.code(), Some(3), "{}", text(&out));
        approve(f);
        let out = f.run(&["drain"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        assert_eq!(outcomes(&f.report()), ["pr_opened", "pr_opened"]);
        one_pr_per_item(f, gh, 2);
        return;
    }
    assert!(
        status.contains(&stopped) && status.contains("the next `nightshift drain` resumes it"),
        "{status}"
    );
    fix();
    let out = f.run(&["drain"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("resuming crashed run"),
        "{}",
        text(&out)
    );
    assert_eq!(outcomes(&f.report()), ["pr_opened", "pr_opened"]);
    one_pr_per_item(f, gh, 2);
}

/// The writer's executable is gone before the drain starts: a usage error
/// that costs no approval. Gone between two items (an upgrade of the CLI in
/// progress, a `chmod -x`): the run stops instead of failing every item.
#[tokio::test(flavor = "multi_thread")]
async fn an_agent_executable_that_disappears_stops_the_run_to_be_resumed() {
    let (f, gh) = with_github().await;
    let writer = f.agents.join("writer.sh");
    let hidden = f.agents.join("writer.sh.away");
    approve(&f);
    std::fs::rename(&writer, &hidden).unwrap();
    let out = f.run(&["drain"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("the writer `{}`", writer.display())),
        "{}",
        text(&out)
    );
    std::fs::rename(&hidden, &writer).unwrap();
    // The approval was not used up by that refusal. Now the writer loses its
    // execute bit while item 1's reviewer works.
    stall(&f, "reviewer");
    let mut bg = Bg::start(&f, &["drain", "--deadline", &common::far_deadline()]);
    wait_ready(&f, "reviewer");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&writer, std::fs::Permissions::from_mode(0o644)).unwrap();
    release(&f.agents, "reviewer");
    let cause = format!(
        "writer agent (command) could not start: cannot start `{}`",
        writer.display()
    );
    stops_and_resumes(&f, &gh, &mut bg, &cause, true, || {
        std::fs::set_permissions(&writer, std::fs::Permissions::from_mode(0o755)).unwrap()
    });
    assert_eq!(outcomes(&f.report()), ["pr_opened", "pr_opened"]);
    let crashed =
        f.db.runs()
            .into_iter()
            .find(|r| r.status == "crashed")
            .unwrap()
            .id;
    let of_crashed: Vec<String> =
        f.db.items()
            .into_iter()
            .filter(|i| i.run_id == crashed)
            .map(|i| i.outcome.unwrap_or_default())
            .collect();
    assert_eq!(of_crashed, ["pr_opened", "interrupted"]);
}

/// The disk of the data directory fills up while the writer works: the
/// item's git work fails in git's words, but the run says what happened and
/// stops; with space freed, the next drain resumes it.
#[tokio::test(flavor = "multi_thread")]
async fn a_full_data_disk_stops_the_run_to_be_resumed() {
    let (f, gh) = with_github().await;
    let Some(_fs) = Tmpfs::mount(&f.data, "64m") else {
        return;
    };
    stall(&f, "writer");
    approve(&f);
    let mut bg = Bg::start(&f, &["drain", "--deadline", &common::far_deadline()]);
    wait_ready(&f, "writer");
    let filler = f.data.join("filler");
    let _ = std::process::Command::new("dd")
        .args([
            "if=/dev/zero",
            &format!("of={}", filler.display()),
            "bs=1M",
            "count=100",
        ])
        .output();
    release(&f.agents, "writer");
    let cause = format!(
        "the disk holding the data directory {} is full",
        f.data.display()
    );
    stops_and_resumes(&f, &gh, &mut bg, &cause, true, || {
        std::fs::remove_file(&filler).unwrap()
    });
}

/// A data disk already full when the drain starts: refused before the
/// approval is used, which then serves once space is freed.
#[test]
fn a_data_disk_full_before_the_drain_costs_no_approval() {
    let f = Fixture::new();
    let Some(_fs) = Tmpfs::mount(&f.data, "64m") else {
        return;
    };
    two_items(&f);
    approve(&f);
    // Nearly full: small files still fit, a checkout and its logs would not.
    let filler = f.data.join("filler");
    let _ = std::process::Command::new("dd")
        .args([
            "if=/dev/zero",
            &format!("of={}", filler.display()),
            "bs=1M",
            "count=60",
        ])
        .output();
    let out = f.run(&["drain"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains(&format!(
            "the disk holding the data directory {} is full",
            f.data.display()
        )) && text(&out).contains("the approval is still unused"),
        "{}",
        text(&out)
    );
    assert_eq!(f.db.count(Table::Runs), 0);
    std::fs::remove_file(&filler).unwrap();
    let out = f.run(&["drain"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(outcomes(&f.report()), ["branch_pushed", "branch_pushed"]);
}

/// The data directory's file system turns read-only under the run.
#[tokio::test(flavor = "multi_thread")]
async fn a_read_only_data_directory_stops_the_run_to_be_resumed() {
    let (f, gh) = with_github().await;
    let Some(_fs) = Tmpfs::mount(&f.data, "64m") else {
        return;
    };
    stall(&f, "writer");
    approve(&f);
    let mut bg = Bg::start(&f, &["drain", "--deadline", &common::far_deadline()]);
    wait_ready(&f, "writer");
    // The checkouts' directory, bound onto itself read-only (the run's own
    // log file elsewhere in the data directory keeps the tmpfs busy).
    let slots = f.data.join("slots");
    let mount = |args: &[&str]| {
        let out = std::process::Command::new("mount")
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "mount {args:?}: {}", text(&out));
    };
    mount(&["--bind", slots.to_str().unwrap(), slots.to_str().unwrap()]);
    mount(&["-o", "remount,bind,ro", slots.to_str().unwrap()]);
    release(&f.agents, "writer");
    let cause = format!(
        "the data directory {} is on a read-only file system",
        f.data.display()
    );
    stops_and_resumes(&f, &gh, &mut bg, &cause, true, || {
        let _ = std::process::Command::new("umount").arg(&slots).output();
    });
}

/// The data directory is removed while the writer works (a cleaner of /tmp,
/// a person): the writer is not blamed for the vanished checkout, the run
/// stops, and the next drain resumes it in a fresh data directory.
#[tokio::test(flavor = "multi_thread")]
async fn a_data_directory_removed_mid_run_is_not_blamed_on_the_writer() {
    let (f, gh) = with_github().await;
    stall(&f, "writer");
    approve(&f);
    let mut bg = Bg::start(&f, &["drain", "--deadline", &common::far_deadline()]);
    wait_ready(&f, "writer");
    std::fs::remove_dir_all(&f.data).unwrap();
    release(&f.agents, "writer");
    let cause = format!(
        "the data directory {} was removed or replaced during the run",
        f.data.display()
    );
    stops_and_resumes(&f, &gh, &mut bg, &cause, false, || {});
}

// ---------------------------------------------------------------------------------------------
// The user's checkout changes during the night
// ---------------------------------------------------------------------------------------------

/// The user points `origin` elsewhere while the run is in its gate: the run
/// keeps the remote it started with (like the backlog, read once), so no
/// later item — nor the token — goes to the new URL.
#[test]
fn a_remote_url_changed_mid_run_does_not_move_the_run() {
    let f = Fixture::new();
    let gate = f.agent(
        "gate.sh",
        &format!(
            "#!/bin/sh\n{}sh test.sh\n",
            stall_snippet(&f.agents, "gate")
        ),
    );
    let w = f.agent("writer.sh", &format!("#!/bin/sh\n{WORD_WRITER}"));
    let r = f.agent(
        "reviewer.sh",
        "#!/bin/sh\necho '{\"verdict\":\"approve\",\"findings\":[]}'\n",
    );
    f.config(&format!("verify = [\"{gate}\"]\n[writer]\nkind = \"command\"\ncommand = [\"{w}\"]\n[reviewer]\nkind = \"command\"\ncommand = [\"{r}\"]\n"));
    f.write("NEXT.md", "- [ ] Add sub\n- [ ] Add pow\n");
    stall(&f, "gate");
    approve(&f);
    let mut bg = Bg::start(&f, &["drain", "--deadline", &common::far_deadline()]);
    wait_ready(&f, "gate");
    let other = f.dir.path().join("other.git");
    git(
        f.dir.path(),
        &[
            "clone",
            "-q",
            "--bare",
            f.remote.to_str().unwrap(),
            other.to_str().unwrap(),
        ],
    );
    git(
        &f.repo,
        &["remote", "set-url", "origin", other.to_str().unwrap()],
    );
    release(&f.agents, "gate");
    assert_eq!(
        bg.wait(Duration::from_secs(60)).code(),
        Some(0),
        "{}",
        bg.output()
    );
    let mut branches = f.remote_branches();
    branches.sort();
    assert_eq!(
        branches,
        ["nightshift/add-pow-1fd47fc4", "nightshift/add-sub-35f7305b"]
    );
    assert_eq!(
        git(&other, &["branch", "--list", "nightshift/*"]),
        "",
        "nothing went to the new URL"
    );
}

// ---------------------------------------------------------------------------------------------
// Gates that touch git
// ---------------------------------------------------------------------------------------------

/// A gate that commits, or switches branches, in the checkout (a codegen
/// check, a pre-commit runner): what is reviewed, committed and pushed is
/// still the writer's work, on the item's branch, in one commit.
#[test]
fn a_gate_that_commits_or_switches_branches_does_not_change_the_proof() {
    let f = Fixture::new();
    let gate = f.agent(
        "gate.sh",
        "#!/bin/sh\nif grep -q sub calc.txt; then git add -A && git -c user.name=gate -c user.email=g@x commit -qm 'by the gate'; else git checkout -qb elsewhere; fi\necho generated > generated.txt\nsh test.sh\n",
    );
    let w = f.agent("writer.sh", &format!("#!/bin/sh\n{WORD_WRITER}"));
    // The reviewer refuses to approve what it cannot see.
    let r = f.agent("reviewer.sh", "#!/bin/sh\nif git diff HEAD --quiet; then echo '{\"verdict\":\"request_changes\",\"findings\":[\"no change to review\"]}'; else echo '{\"verdict\":\"approve\",\"findings\":[]}'; fi\n");
    f.config(&format!("verify = [\"{gate}\"]\n[limits]\nrounds = 1\n[writer]\nkind = \"command\"\ncommand = [\"{w}\"]\n[reviewer]\nkind = \"command\"\ncommand = [\"{r}\"]\n"));
    f.write("NEXT.md", "- [ ] Add sub\n- [ ] Add pow\n");
    f.drain_exits(0, &[]);
    assert_eq!(outcomes(&f.report()), ["branch_pushed", "branch_pushed"]);
    for (branch, word) in [
        ("nightshift/add-sub-35f7305b", "sub"),
        ("nightshift/add-pow-1fd47fc4", "pow"),
    ] {
        assert_eq!(
            git(
                &f.remote,
                &["log", "--format=%an: %s", &format!("main..{branch}")]
            ),
            "nightshift: nightshift: Add {word}".replace("{word}", word)
        );
        assert_eq!(
            git(&f.remote, &["diff", "--name-only", "main", branch]),
            "calc.txt",
            "{branch}: only the writer's file"
        );
        assert_eq!(
            git(&f.remote, &["show", &format!("{branch}:calc.txt")]),
            format!("add\n{word}")
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Agents and gates that misbehave as processes
// ---------------------------------------------------------------------------------------------

/// An agent that leaves a daemon holding its stdout and a child that ignores
/// SIGTERM, a gate that leaves a background process holding its output pipe,
/// and a gate that never exits: none of them holds the night past its
/// timeouts, and none of them outlives it.
#[test]
fn misbehaving_agents_and_gates_never_hang_the_night() {
    let f = Fixture::new();
    let a = f.agents.display().to_string();
    let w = f.agent(
        "writer.sh",
        &format!("#!/bin/sh\n{WORD_WRITER}if grep -q 'Add sub' \"$NIGHTSHIFT_CONTRACT_FILE\"; then\n  setsid sh -c 'sleep 300' & echo $! > {a}/daemon.pid\n  (trap '' TERM; exec sleep 301) & echo $! > {a}/stubborn.pid\nfi\n"),
    );
    let r = f.agent(
        "reviewer.sh",
        "#!/bin/sh\necho '{\"verdict\":\"approve\",\"findings\":[]}'\n",
    );
    let gate = f.agent("gate.sh", &format!("#!/bin/sh\nif grep -q pow calc.txt; then exec sleep 302; fi\nsleep 303 & echo $! > {a}/holder.pid\nsh test.sh\n"));
    // The supervisor's sweep, outside the sandbox: inside it the pids the
    // scripts write are their PID namespace's, and the namespace's end
    // kills them anyway (tests/it/sandbox.rs).
    f.config(&format!("verify = [\"{gate}\"]\n[sandbox]\nmode = \"off\"\n[limits]\nrounds = 1\ngate_timeout = \"2s\"\n[writer]\nkind = \"command\"\ncommand = [\"{w}\"]\n[reviewer]\nkind = \"command\"\ncommand = [\"{r}\"]\n"));
    f.write("NEXT.md", "- [ ] Add sub\n- [ ] Add pow\n");
    let started = Instant::now();
    let out = f.approve_and_drain(&[]);
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let rep = f.report();
    assert_eq!(outcomes(&rep), ["branch_pushed", "tests_failed"], "{rep:#}");
    assert!(reason(&rep, 1).contains("timed out"), "{rep:#}");
    for p in ["daemon.pid", "stubborn.pid", "holder.pid"] {
        let pid = read_pid(&f.agents.join(p));
        assert!(process_gone(pid), "{p} ({pid}) outlived the night");
    }
}

// ---------------------------------------------------------------------------------------------
// Sharing, clocks
// ---------------------------------------------------------------------------------------------

/// Two drains of two repositories at once, with one data directory and one
/// ledger: each has its own lock and checkouts, and both finish their items.
#[test]
fn two_repositories_drain_at_once_in_one_data_directory() {
    let f = Fixture::new();
    let mut g = Fixture::new();
    g.extra_env
        .push(("NIGHTSHIFT_DATA_DIR".into(), f.data.display().to_string()));
    g.extra_env
        .push(("NIGHTSHIFT_DATABASE_URL".into(), f.db.url.clone()));
    for x in [&f, &g] {
        two_items(x);
        stall(x, "writer");
        approve(x);
    }
    let mut a = Bg::start(&f, &["drain", "--deadline", &common::far_deadline()]);
    let mut b = Bg::start(&g, &["drain", "--deadline", &common::far_deadline()]);
    // Both are inside an item at the same time.
    wait_ready(&f, "writer");
    wait_ready(&g, "writer");
    release(&f.agents, "writer");
    release(&g.agents, "writer");
    assert_eq!(
        a.wait(Duration::from_secs(60)).code(),
        Some(0),
        "{}",
        a.output()
    );
    assert_eq!(
        b.wait(Duration::from_secs(60)).code(),
        Some(0),
        "{}",
        b.output()
    );
    assert_eq!(f.db.statuses(), ["completed", "completed"]);
    let repos: std::collections::BTreeSet<String> =
        f.db.runs().into_iter().map(|r| r.repo).collect();
    assert_eq!(repos.len(), 2, "{repos:?}");
    for x in [&f, &g] {
        assert_eq!(x.remote_branches().len(), 2);
    }
}

/// `--deadline` in RFC 3339 with an offset is that instant; one already past
/// is a usage error that costs no approval.
#[test]
fn an_rfc3339_deadline_with_an_offset_is_that_instant_and_a_past_one_is_refused() {
    let f = Fixture::new();
    two_items(&f);
    approve(&f);
    let taipei = chrono::FixedOffset::east_opt(8 * 3600).unwrap();
    let past = (chrono::Utc::now() - chrono::Duration::minutes(5))
        .with_timezone(&taipei)
        .to_rfc3339();
    let out = f.run(&["drain", "--deadline", &past]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("is in the past"), "{}", text(&out));
    assert_eq!(f.db.count(Table::Runs), 0);
    let new_york = chrono::FixedOffset::west_opt(5 * 3600).unwrap();
    let at = (chrono::Utc::now() + chrono::Duration::hours(3)).with_timezone(&new_york);
    let out = f.run(&["drain", "--deadline", &at.to_rfc3339()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "the approval was still there: {}",
        text(&out)
    );
    let recorded: Vec<i64> =
        f.db.runs()
            .iter()
            .map(|r| r.deadline.unwrap().timestamp())
            .collect();
    assert_eq!(recorded, [at.timestamp()]);
}
