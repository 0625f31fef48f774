//! Where the tests find the real Codex CLI and the replaying fake.
//!
//! The real CLI is npm `@openai/codex` at [`PINNED`], installed into
//! `target/agent-clis-codex/` by `tests/run.sh`. A test run without it
//! (plain `cargo test`) installs it there itself, under a file lock so
//! parallel tests install once; without npm or the registry it fails with
//! the exact command to run. Never a silent pass.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The pinned CLI version (the one docs/agents.md names).
pub const PINNED: &str = "0.169.0";

/// The install prefix: `<crate>/target/agent-clis-codex`.
pub fn prefix() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target")
        .join("agent-clis-codex")
}

fn installed_version(prefix: &Path) -> Option<String> {
    let pkg =
        std::fs::read_to_string(prefix.join("node_modules/@openai/codex/package.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&pkg).ok()?;
    v["version"].as_str().map(String::from)
}

/// The exact install command (what `tests/run.sh` runs).
pub fn install_command() -> String {
    format!(
        "npm install --prefix {} --no-audit --no-fund --loglevel=error @openai/codex@{PINNED}",
        prefix().display()
    )
}

/// Gives fixture `f` a Codex home of its own (`CODEX_HOME`, empty) and the
/// API key the local fake Responses server expects (`FAKE_KEY`, named by
/// its provider arguments).
pub fn use_codex_home(f: &mut crate::common::Fixture) {
    let home = f.dir.path().join("codex-home");
    std::fs::create_dir_all(&home).unwrap();
    f.extra_env
        .push(("CODEX_HOME".into(), home.display().to_string()));
    f.extra_env
        .push(("FAKE_KEY".into(), "fake-key-for-the-local-server".into()));
}

/// Path of the real `codex` launcher at the pinned version, installing it
/// first if needed.
///
/// # Panics
/// When it is not installed and cannot be (the message names the command).
pub fn real_codex() -> PathBuf {
    let prefix = prefix();
    let bin = prefix.join("node_modules/.bin/codex");
    if installed_version(&prefix).as_deref() == Some(PINNED) && bin.exists() {
        return bin;
    }
    std::fs::create_dir_all(&prefix).expect("create target/agent-clis-codex");
    let lock =
        std::fs::File::create(prefix.with_extension("lock")).expect("create the install lock file");
    lock.lock().expect("lock the install lock file");
    if installed_version(&prefix).as_deref() != Some(PINNED) || !bin.exists() {
        let cmd = install_command();
        let mut child = Command::new("sh")
            .args(["-c", &cmd])
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run `{cmd}`: {e}"));
        let deadline = Instant::now() + Duration::from_secs(600);
        let status = loop {
            if let Some(s) = child.try_wait().expect("wait for npm") {
                break Some(s);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                break None;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        assert!(
            status.is_some_and(|s| s.success())
                && installed_version(&prefix).as_deref() == Some(PINNED),
            "the real Codex CLI is needed and could not be installed ({status:?}); run:\n  {cmd}\n(or `bash tests/run.sh`, which installs it)"
        );
    }
    bin
}

/// The replaying fake `codex` (tests/fakes_codex/codex).
pub fn fake_codex() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fakes_codex/codex")
}

/// A recorded transcript under tests/data/codex/.
pub fn transcript(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/codex")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}
