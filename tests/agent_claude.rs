//! The `claude` agent kind against the real Claude Code CLI (the pinned npm
//! package, run offline against the fake Messages API of
//! `tests/fakes/anthropic.rs`), and the run loop against replaying fake
//! `claude` executables (SPEC §6, issue 3).

mod common;
mod fakes;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use fakes::anthropic::{FakeAnthropic, Reply, Turn, tool};
use nightshift::agent::{self, Call, Role};
use nightshift::config::{AgentConfig, AgentKind};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// The pinned CLI version (tests/run.sh installs the same).
const CLAUDE_VERSION: &str = include_str!("fakes/claude-code.version");

/// The real `claude` executable: installed by tests/run.sh under
/// `target/agent-clis/`, else installed here under a file lock.
fn real_claude() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("target/agent-clis");
    let bin = dir.join("node_modules/.bin/claude");
    let version = CLAUDE_VERSION.trim();
    let pkg = dir.join("node_modules/@anthropic-ai/claude-code/package.json");
    let installed = std::fs::read_to_string(&pkg).map(|t| t.contains(&format!("\"version\": \"{version}\""))).unwrap_or(false);
    if bin.exists() && installed {
        return bin;
    }
    let cmd = format!("flock {d}.lock npm install --no-audit --no-fund --prefix {d} @anthropic-ai/claude-code@{version}", d = dir.display());
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new("sh").args(["-c", &cmd]).output();
    match out {
        Ok(o) if o.status.success() && bin.exists() => bin,
        Ok(o) => panic!("the real claude CLI is missing and installing it failed; run tests/run.sh or:\n  {cmd}\n{}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => panic!("the real claude CLI is missing and cannot be installed ({e}); run tests/run.sh or:\n  {cmd}"),
    }
}

/// The environment the real CLI runs with: a private HOME, the fake API, a
/// fake key, and no update checks or telemetry.
fn cli_env(home: &Path, api: &str, oauth: bool) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    env.insert("PATH".into(), std::env::var("PATH").unwrap_or_default());
    env.insert("HOME".into(), home.display().to_string());
    env.insert("ANTHROPIC_BASE_URL".into(), api.to_string());
    if oauth {
        env.insert("CLAUDE_CODE_OAUTH_TOKEN".into(), "sk-ant-oat01-fake-test-token".into());
    } else {
        env.insert("ANTHROPIC_API_KEY".into(), "sk-ant-api03-fake-test-key".into());
    }
    for (k, v) in [("DISABLE_AUTOUPDATER", "1"), ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"), ("DISABLE_TELEMETRY", "1"), ("DISABLE_ERROR_REPORTING", "1")] {
        env.insert(k.into(), v.into());
    }
    env
}

/// A git checkout with one file, plus a HOME and a log dir beside it.
struct World {
    dir: tempfile::TempDir,
    repo: PathBuf,
    home: PathBuf,
}

fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(repo.join("calc.txt"), "add\n").unwrap();
    common::git(&repo, &["init", "-q", "-b", "main"]);
    common::git(&repo, &["add", "-A"]);
    common::git(&repo, &["commit", "-q", "-m", "init"]);
    World { dir, repo, home }
}

fn call(w: &World, role: Role, prompt: &str, env: BTreeMap<String, String>) -> Call {
    Call {
        role,
        round: 1,
        prompt: prompt.to_string(),
        contract_json: "{}".into(),
        feedback: String::new(),
        cwd: w.repo.clone(),
        timeout: Duration::from_secs(60),
        env,
        tz: "UTC".parse().unwrap(),
        log_dir: w.dir.path().join("logs"),
        secrets: vec![],
        run_as: None,
    }
}

fn claude_agent(bin: &Path) -> AgentConfig {
    AgentConfig { kind: AgentKind::Claude, command: vec![bin.display().to_string()], permission_flags: None, model: None }
}

fn stdout_of(r: &agent::Report) -> String {
    r.outcome.stdout_path.as_ref().map(|p| std::fs::read_to_string(p).unwrap_or_default()).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn real_writer_edits_through_its_own_tools() {
    let bin = real_claude();
    let api = FakeAnthropic::start().await;
    let w = world();
    let calc = w.repo.join("calc.txt").display().to_string();
    api.writer([
        Reply::Tools(Some("Reading calc.txt first.".into()), vec![tool("Read", json!({"file_path": calc}))]),
        Reply::Tools(None, vec![tool("Edit", json!({"file_path": calc, "old_string": "add\n", "new_string": "add\nsub\n"}))]),
        Reply::Tools(None, vec![tool("Write", json!({"file_path": w.repo.join("notes.md").display().to_string(), "content": "sub added\n"}))]),
        Reply::Text("Added sub to calc.txt.\n\nFINDINGS:\n- docs are stale\n".into()),
    ]);
    let c = call(&w, Role::Writer, "Add sub to calc.txt", cli_env(&w.home, &api.uri(), false));
    let r = agent::call(&claude_agent(&bin), &c, &CancellationToken::new()).await.unwrap();
    let out = stdout_of(&r);
    assert!(r.failure.is_none(), "{:?}\n{out}\n{}", r.failure, r.outcome.stderr_tail);
    assert_eq!(std::fs::read_to_string(w.repo.join("calc.txt")).unwrap(), "add\nsub\n", "{out}");
    assert_eq!(std::fs::read_to_string(w.repo.join("notes.md")).unwrap(), "sub added\n", "{out}");
    println!("{out}");
    println!("{:?}", r.usage);
}
