//! Nights driven from outside, shared by the `night` and `ops` tests: a
//! nightshift process in the background, slow phases made reachable with
//! stall files, and waiting on processes and on the ledger.

use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Fixture, assert_ok};

/// Shell lines that, when `DIR/NAME.stall` exists, remove it, start a
/// `sleep` tagged `NIGHTSHIFT_STALL=DIR/NAME` in its environment, write
/// `NAME.ready` and wait for the `sleep`; killing it (see [`release`]) lets
/// the script go on. `NAME.ready` appears whole (written aside, then
/// renamed). The pids the files hold are the script's own view: inside the
/// sandbox's PID namespace they are not the host's, so a test finds the
/// processes with [`stalled_shell`] and [`stalled_child`] (by the tag, on
/// the host's `/proc`). `DIR` must be writable by the call: a sandboxed
/// call gets it through [`stall_sandbox`].
pub fn stall_snippet(dir: &Path, name: &str) -> String {
    let d = dir.display();
    format!(
        "if [ -e {d}/{name}.stall ]; then rm -f {d}/{name}.stall; NIGHTSHIFT_STALL={d}/{name} sleep 60 & echo $! > {d}/{name}.child; echo $$ > {d}/{name}.ready.tmp; mv {d}/{name}.ready.tmp {d}/{name}.ready; wait; fi\n"
    )
}

/// The config lines that let a sandboxed call write the stall files of
/// [`stall_snippet`] in `dir` (docs/config.md#sandbox): a `[sandbox]`
/// table, to go where a table may start.
pub fn stall_sandbox(dir: &Path) -> String {
    format!("[sandbox]\nwrite = [\"{}\"]\n", dir.display())
}

/// The host's pid of the `sleep` a stalled script waits for (`NAME` in
/// `dir`), found by its `NIGHTSHIFT_STALL` tag; `None` when it is gone.
pub fn stalled_child(dir: &Path, name: &str) -> Option<i32> {
    let tag = format!("NIGHTSHIFT_STALL={}/{name}", dir.display());
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let env = std::fs::read(e.path().join("environ")).ok()?;
        env.split(|b| *b == 0)
            .any(|v| v == tag.as_bytes())
            .then_some(pid)
    })
}

/// The host's pid of a stalled script (`NAME` in `dir`): the parent of its
/// `sleep` ([`stalled_child`]); panics when it is not stalled.
pub fn stalled_shell(dir: &Path, name: &str) -> i32 {
    let child = stalled_child(dir, name).unwrap_or_else(|| panic!("{name} is not stalled"));
    parent_of(child).unwrap_or_else(|| panic!("{name}'s sleep ({child}) has no parent"))
}

/// The parent's pid of process `pid`, from `/proc/<pid>/stat`.
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Lets a stalled script go on: kills its `sleep`.
pub fn release(dir: &Path, name: &str) {
    let pid = stalled_child(dir, name).unwrap_or_else(|| panic!("{name} is not stalled"));
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
}

/// Kills a stalled helper (after a SIGKILLed drain, nobody else will).
pub fn kill_stalled(dir: &Path, name: &str) {
    let Some(child) = stalled_child(dir, name) else {
        return;
    };
    // The shell first: killing its `sleep` first would let it return from
    // `wait` and exit 0 (a hook that then lets the push through) before the
    // second kill lands.
    for pid in parent_of(child).into_iter().chain([child]) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// The pid written in file `p`.
pub fn read_pid(p: &Path) -> i32 {
    std::fs::read_to_string(p).unwrap().trim().parse().unwrap()
}

/// True when process `pid` is gone (or a zombie nobody has reaped yet).
pub fn process_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// Waits until `cond` holds, polling every 50 ms; panics with `what` after `limit`.
pub fn wait_until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The outcomes of a `report --json`, in item order.
pub fn outcomes(report: &Value) -> Vec<String> {
    report["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["outcome"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// The reason of item `i` of a `report --json` (`""` when it has none).
pub fn reason(report: &Value, i: usize) -> String {
    report["items"][i]["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// `plan`, then `approve` of its SHA; returns the SHA.
pub fn approve(f: &Fixture) -> String {
    let sha = f.plan_sha();
    assert_ok(&f.run(&["approve", &sha]), "approve");
    sha
}

/// The line `nightshift status` prints.
pub fn status_text(f: &Fixture) -> String {
    let out = f.run(&["status"]);
    assert_ok(&out, "status");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A nightshift process started in the background, its output in files;
/// killed when dropped if it still runs.
pub struct Bg {
    pub child: Child,
    out: PathBuf,
    err: PathBuf,
}

impl Bg {
    /// `nightshift ARGS` with the fixture's environment.
    pub fn start(f: &Fixture, args: &[&str]) -> Bg {
        Bg::start_cmd(f, f.cmd(), args)
    }

    /// `cmd ARGS` (a fixture command with changes of its own).
    pub fn start_cmd(f: &Fixture, mut cmd: std::process::Command, args: &[&str]) -> Bg {
        let n = uuid::Uuid::new_v4().simple().to_string();
        let out = f.dir.path().join(format!("bg-{n}.out"));
        let err = f.dir.path().join(format!("bg-{n}.err"));
        let child = cmd
            .args(args)
            .stdout(Stdio::from(std::fs::File::create(&out).unwrap()))
            .stderr(Stdio::from(std::fs::File::create(&err).unwrap()))
            .spawn()
            .expect("nightshift starts");
        Bg { child, out, err }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), sig).unwrap();
    }

    /// Waits for the exit; panics after `limit`.
    pub fn wait(&mut self, limit: Duration) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            if start.elapsed() > limit {
                let _ = self.child.kill();
                panic!(
                    "nightshift did not exit within {limit:?}:\n{}",
                    self.output()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Its stdout, then its stderr, so far.
    pub fn output(&self) -> String {
        format!(
            "{}{}",
            std::fs::read_to_string(&self.out).unwrap_or_default(),
            std::fs::read_to_string(&self.err).unwrap_or_default()
        )
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
