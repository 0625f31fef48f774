//! Operational failures during a night, through the real binary (SPEC §7, §9):
//! the ledger dying and coming back, the disk and the data directory failing,
//! the user's checkout and the remote changing under a run, agents and gates
//! misbehaving at the process level, two drains sharing one data directory,
//! odd deadlines, and the terminal's signals.
//!
//! Slow phases are reached with stall files (see tests/night.rs), never with a
//! test-only switch in the binary.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::{Fixture, assert_ok};
use serde_json::Value;

/// A writer that appends the item's word (`sub`, `pow`, `mul`) to calc.txt.
const WORD_WRITER: &str = r#"title=$(grep -o '"title":"[^"]*"' "$NIGHTSHIFT_CONTRACT_FILE" | head -1)
case "$title" in
  *sub*) echo sub >> calc.txt ;;
  *pow*) echo pow >> calc.txt ;;
  *mul*) echo mul >> calc.txt ;;
esac
echo "edited calc.txt"
"#;

/// Shell lines that, when `DIR/NAME.stall` exists, remove it, write this
/// shell's pid to `NAME.ready` and wait for a `sleep` whose pid is in
/// `NAME.child`; killing that child (see [`release`]) lets the script go on.
fn stall_snippet(dir: &Path, name: &str) -> String {
    let d = dir.display();
    format!("if [ -e {d}/{name}.stall ]; then rm -f {d}/{name}.stall; sleep 60 & echo $! > {d}/{name}.child; echo $$ > {d}/{name}.ready; wait; fi\n")
}

fn read_pid(p: &Path) -> i32 {
    std::fs::read_to_string(p).unwrap().trim().parse().unwrap()
}

fn wait_until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "timed out after {limit:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A nightshift process in the background, its output in files.
struct Bg {
    child: Child,
    out: PathBuf,
    err: PathBuf,
}

impl Bg {
    fn start(f: &Fixture, args: &[&str]) -> Bg {
        Bg::start_cmd(f, f.cmd(), args)
    }

    fn start_cmd(f: &Fixture, mut cmd: std::process::Command, args: &[&str]) -> Bg {
        let n = uuid::Uuid::new_v4().simple().to_string();
        let out = f.dir.path().join(format!("bg-{n}.out"));
        let err = f.dir.path().join(format!("bg-{n}.err"));
        let child = cmd.args(args).stdout(Stdio::from(std::fs::File::create(&out).unwrap())).stderr(Stdio::from(std::fs::File::create(&err).unwrap())).spawn().expect("nightshift starts");
        Bg { child, out, err }
    }

    fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), sig).unwrap();
    }

    fn wait(&mut self, limit: Duration) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            if start.elapsed() > limit {
                let _ = self.child.kill();
                panic!("nightshift did not exit within {limit:?}:\n{}", self.output());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn output(&self) -> String {
        format!("{}{}", std::fs::read_to_string(&self.out).unwrap_or_default(), std::fs::read_to_string(&self.err).unwrap_or_default())
    }
}

impl Drop for Bg {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn outcomes(report: &Value) -> Vec<String> {
    report["items"].as_array().unwrap().iter().map(|i| i["outcome"].as_str().unwrap_or("?").to_string()).collect()
}

fn approve(f: &Fixture) -> String {
    let sha = f.plan_sha();
    assert_ok(&f.run(&["approve", &sha]), "approve");
    sha
}

fn process_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// Two items (`Add sub`, `Add pow`) with command agents whose writer and
/// reviewer stall when `writer.stall` / `reviewer.stall` exist, and whose
/// writer of `Add pow` stalls when `writer2.stall` exists.
fn two_items(f: &Fixture) {
    let w = f.agent("writer.sh", &format!("#!/bin/sh\n{}if grep -q 'Add pow' \"$NIGHTSHIFT_CONTRACT_FILE\"; then\n{}fi\n{WORD_WRITER}", stall_snippet(&f.agents, "writer"), stall_snippet(&f.agents, "writer2")));
    let r = f.agent("reviewer.sh", &format!("#!/bin/sh\n{}echo '{{\"verdict\":\"approve\",\"findings\":[]}}'\n", stall_snippet(&f.agents, "reviewer")));
    f.config_with(&w, &r, "");
    f.write("NEXT.md", "- [ ] Add sub\n- [ ] Add pow\n");
}

fn stall(f: &Fixture, name: &str) {
    std::fs::write(f.agents.join(format!("{name}.stall")), "").unwrap();
}

fn wait_ready(f: &Fixture, name: &str) {
    wait_until(Duration::from_secs(30), &format!("{name} to stall"), || f.agents.join(format!("{name}.ready")).exists());
}

// ---------------------------------------------------------------------------------------------
// Signals of a closed terminal and of Ctrl-\
// ---------------------------------------------------------------------------------------------

/// SIGHUP (the terminal closed) and SIGQUIT stop a run as SIGTERM does:
/// the agent is killed rather than left editing the checkout, the item is
/// `interrupted`, the checkout cleaned, the run `stopped_signal`.
#[test]
fn sighup_and_sigquit_stop_the_run_cleanly() {
    for sig in [nix::sys::signal::Signal::SIGHUP, nix::sys::signal::Signal::SIGQUIT] {
        let f = Fixture::new();
        two_items(&f);
        stall(&f, "writer");
        approve(&f);
        let mut bg = Bg::start(&f, &["drain", "--deadline", &common::far_deadline()]);
        wait_ready(&f, "writer");
        let agent = read_pid(&f.agents.join("writer.ready"));
        bg.signal(sig);
        let status = bg.wait(Duration::from_secs(15));
        assert_eq!(status.code(), Some(1), "{sig:?}: {status:?}\n{}", bg.output());
        assert!(bg.output().contains(&format!("{sig:?} received")), "{}", bg.output());
        wait_until(Duration::from_secs(5), "the agent to be killed", || process_gone(agent));
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
    if std::process::Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: `script` (util-linux) is not installed");
        return;
    }
    let f = Fixture::new();
    two_items(&f);
    stall(&f, "writer");
    approve(&f);
    let c = f.cmd();
    let quote = |s: &str| format!("'{}'", s.replace('\'', "'\\''"));
    let envs: Vec<String> = c.get_envs().filter_map(|(k, v)| v.map(|v| quote(&format!("{}={}", k.to_string_lossy(), v.to_string_lossy())))).collect();
    let line = format!("cd {} && exec env -i {} {} drain --deadline {}", quote(&f.repo.display().to_string()), envs.join(" "), env!("CARGO_BIN_EXE_nightshift"), common::far_deadline());
    let mut terminal = std::process::Command::new("script").args(["-qfec", &line, "/dev/null"]).stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    wait_ready(&f, "writer");
    let agent = read_pid(&f.agents.join("writer.ready"));
    let drain: i32 = f.db.sql("SELECT pid FROM runs").parse().unwrap();
    terminal.kill().unwrap();
    let _ = terminal.wait();
    wait_until(Duration::from_secs(15), "nightshift to exit", || process_gone(drain));
    assert!(process_gone(agent), "the agent outlived the run");
    assert_eq!(f.db.sql("SELECT status || ' ' || exit_code FROM runs"), "stopped_signal 1");
    assert_eq!(f.db.sql("SELECT outcome FROM run_items"), "interrupted");
    assert!(f.remote_branches().is_empty());
}
