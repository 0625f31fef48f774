//! The gate: the project's own verify commands, run by nightshift itself
//! (docs/loop.md#gate).
//!
//! Each command runs with `sh -c` in the checkout, with the agents'
//! environment plus the config's `gate_env`, under a timeout, through the one
//! process runner. The gate keeps exit code, duration and the redacted tail
//! of the output. It never trusts an agent's claim that tests passed.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::process::{self, RunAs};

/// Bytes of output tail kept per command (for feedback and the PR body).
pub const TAIL_BYTES: usize = 16 * 1024;

/// One gate command's result.
#[derive(Debug, Clone, Serialize)]
pub struct GateRun {
    /// The command as written.
    pub command: String,
    /// Exit code (None when killed by a signal or the timeout).
    pub exit_code: Option<i32>,
    /// Killed at the timeout.
    pub timed_out: bool,
    /// Wall time in milliseconds.
    pub duration_ms: u64,
    /// Redacted tail of stdout and stderr.
    pub output_tail: String,
    /// Connections the sandbox's proxy refused (`host:port`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<String>,
}

impl GateRun {
    /// Passed: exit code 0 within the timeout.
    pub fn passed(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out
    }
    /// The failure signature used for no-progress detection: command and
    /// exit code (docs/loop.md#ship-or-retry).
    pub fn signature(&self) -> String {
        format!(
            "gate:{}:{}",
            self.command,
            self.exit_code
                .map(|c| c.to_string())
                .unwrap_or_else(|| "timeout".into())
        )
    }
}

/// How to run gate commands.
#[derive(Debug, Clone)]
pub struct GateSpec {
    /// Working directory (the checkout).
    pub cwd: PathBuf,
    /// Complete environment.
    pub env: BTreeMap<String, String>,
    /// Per-command timeout.
    pub timeout: Duration,
    /// Where output logs go.
    pub log_dir: PathBuf,
    /// Secret values to redact.
    pub secrets: Vec<String>,
    /// Run as this user (config `agent_user`).
    pub run_as: Option<RunAs>,
    /// The sandbox each command runs in (docs/security.md#the-sandbox).
    pub sandbox: Option<crate::sandbox::Policy>,
}

/// Runs `commands` in order and stops at the first failure (later commands
/// would only repeat the news). `label` names the log files (`setup`, `gate`).
///
/// # Errors
/// [`process::ProcessError`] when `sh` itself cannot be started.
pub async fn run_all(
    label: &str,
    commands: &[String],
    spec: &GateSpec,
    cancel: &CancellationToken,
) -> Result<Vec<GateRun>, process::ProcessError> {
    let mut out = Vec::new();
    for (i, c) in commands.iter().enumerate() {
        let r = run_one(label, i, c, spec, cancel).await?;
        let stop = !r.passed();
        out.push(r);
        if stop || cancel.is_cancelled() {
            break;
        }
    }
    Ok(out)
}

async fn run_one(
    label: &str,
    i: usize,
    command: &str,
    spec: &GateSpec,
    cancel: &CancellationToken,
) -> Result<GateRun, process::ProcessError> {
    let _ = std::fs::create_dir_all(&spec.log_dir);
    let log = |ext: &str| spec.log_dir.join(format!("{label}-{i}.{ext}"));
    let mut cmd = process::Command::shell(command)
        .cwd(&spec.cwd)
        .env_map(spec.env.clone())
        .timeout(spec.timeout)
        .stdout_file(log("stdout"))
        .stderr_file(log("stderr"))
        .redactor(crate::secret::Redactor::with_known(&spec.secrets));
    if let Some(u) = &spec.run_as {
        cmd = cmd.run_as(u.clone());
    }
    if let Some(policy) = &spec.sandbox {
        cmd = cmd.sandbox(policy.clone());
    }
    let o = process::run(cmd, cancel).await?;
    let mut tail = String::new();
    if !o.stdout_tail.is_empty() {
        tail.push_str(&o.stdout_tail);
    }
    if !o.stderr_tail.is_empty() {
        if !tail.is_empty() && !tail.ends_with('\n') {
            tail.push('\n');
        }
        tail.push_str(&o.stderr_tail);
    }
    if o.timed_out {
        tail.push_str(&format!(
            "\n[nightshift: killed after the gate timeout of {}s]\n",
            spec.timeout.as_secs()
        ));
    }
    Ok(GateRun {
        command: command.to_string(),
        exit_code: o.exit_code,
        timed_out: o.timed_out,
        duration_ms: o.duration.as_millis() as u64,
        output_tail: tail_of(&tail, TAIL_BYTES),
        refused: o.refused.clone(),
    })
}

/// The last `max` bytes of `s`, cut at a char boundary.
pub fn tail_of(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut cut = s.len() - max;
    while !s.is_char_boundary(cut) {
        cut += 1;
    }
    s[cut..].to_string()
}

/// Builds the failure feedback for the writer's next round: per failed
/// command, how it failed and the last 4,000 characters of its output (or
/// that it printed nothing).
pub fn feedback(runs: &[GateRun]) -> String {
    let mut s = String::new();
    for r in runs.iter().filter(|r| !r.passed()) {
        let how = if r.timed_out {
            "timed out".to_string()
        } else {
            format!(
                "exit code {}",
                r.exit_code.map(|c| c.to_string()).unwrap_or("none".into())
            )
        };
        if r.output_tail.trim().is_empty() {
            // An empty code block reads as if the output were lost.
            s.push_str(&format!(
                "The gate command `{}` failed ({how}) and printed nothing.\n",
                r.command
            ));
            continue;
        }
        s.push_str(&format!(
            "The gate command `{}` failed ({how}). The last lines of its output:\n```\n{}\n```\n",
            r.command,
            tail_of(&r.output_tail, 4000).trim_end()
        ));
    }
    s
}

/// The program one simple command of a gate runs, as `sh -c` reads its
/// first word (docs/config.md `verify`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Program {
    /// A shell builtin or keyword (`cd`, `test`, `[`, `if`…): always there.
    Builtin(String),
    /// A word with a `/` (`./test.sh`, `scripts/ci`, `/usr/bin/make`):
    /// relative ones are the checkout's, i.e. the repository's, files.
    Path(String),
    /// A name looked up on PATH (`cargo`, `npm`).
    Name(String),
    /// An expansion (`$CMD`, `` `x` ``, a glob): only the shell knows.
    Unknown(String),
}

/// Builtins and keywords of a POSIX `sh` (dash's set): never looked up on PATH.
const SH_BUILTINS: &[&str] = &[
    ".", ":", "[", "alias", "bg", "break", "case", "cd", "command", "continue", "do", "done",
    "echo", "elif", "else", "esac", "eval", "exec", "exit", "export", "false", "fc", "fg", "fi",
    "for", "getopts", "hash", "if", "jobs", "kill", "local", "printf", "pwd", "read", "readonly",
    "return", "set", "shift", "source", "test", "then", "times", "trap", "true", "type", "ulimit",
    "umask", "unalias", "unset", "until", "wait", "while", "{", "}", "!",
];

/// The programs `command` starts, one per simple command (split at `&&`,
/// `||`, `;`, `|`, `&` and newlines outside quotes), each after its leading
/// `NAME=value` assignments and an `env [-i] [-u NAME] [NAME=value…]` prefix.
/// An approximation of `sh`'s grammar, good for a check: a word it cannot
/// judge is [`Program::Unknown`], never a false "missing".
pub fn programs(command: &str) -> Vec<Program> {
    split_simple_commands(command)
        .iter()
        .filter_map(|words| first_program(words))
        .collect()
}

/// Simple commands as word lists: quotes removed, operators as separators.
fn split_simple_commands(command: &str) -> Vec<Vec<String>> {
    let mut out = vec![Vec::new()];
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut in_word = false;
    let mut chars = command.chars().peekable();
    let end_word = |word: &mut String, in_word: &mut bool, out: &mut Vec<Vec<String>>| {
        if *in_word {
            out.last_mut().expect("one list").push(std::mem::take(word));
            *in_word = false;
        }
    };
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, '\\') => {
                if let Some(n) = chars.next() {
                    word.push(n);
                    in_word = true;
                }
            }
            (None, ';' | '|' | '&' | '\n' | '(' | ')') => {
                end_word(&mut word, &mut in_word, &mut out);
                if !out.last().is_some_and(Vec::is_empty) {
                    out.push(Vec::new());
                }
            }
            (None, c) if c.is_whitespace() => end_word(&mut word, &mut in_word, &mut out),
            (None, c) => {
                word.push(c);
                in_word = true;
            }
        }
    }
    end_word(&mut word, &mut in_word, &mut out);
    out.retain(|w| !w.is_empty());
    out
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

fn first_program(words: &[String]) -> Option<Program> {
    let mut rest = words.iter().skip_while(|w| is_assignment(w)).peekable();
    let mut word = rest.next()?;
    if word == "env" {
        // env's own options, then its assignments, then the program.
        loop {
            match rest.next() {
                Some(w) if w == "-u" || w == "-C" || w == "--unset" || w == "--chdir" => {
                    rest.next();
                }
                Some(w) if w.starts_with('-') || is_assignment(w) => {}
                Some(w) => {
                    word = w;
                    break;
                }
                None => return Some(Program::Name("env".into())),
            }
        }
    }
    let w = word.as_str();
    Some(if w.contains(['$', '`', '*', '?', '[']) && w != "[" {
        Program::Unknown(w.to_string())
    } else if SH_BUILTINS.contains(&w) {
        Program::Builtin(w.to_string())
    } else if w.contains('/') {
        Program::Path(w.to_string())
    } else {
        Program::Name(w.to_string())
    })
}

/// The files that show a project is of the kind a test tool serves: a gate
/// that runs `cargo test` where there is no `Cargo.toml` fails every item.
/// `None` for a tool that needs none.
pub fn project_files(program: &str) -> Option<&'static [&'static str]> {
    Some(match program {
        "cargo" => &["Cargo.toml"],
        "npm" | "npx" | "yarn" | "pnpm" => &["package.json"],
        "go" => &["go.mod"],
        "pytest" | "tox" => &[
            "pyproject.toml",
            "pytest.ini",
            "setup.cfg",
            "tox.ini",
            "setup.py",
        ],
        "make" => &["Makefile", "makefile", "GNUmakefile"],
        _ => return None,
    })
}

/// A gate command guessed from a repository's files, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guess {
    /// The command, e.g. `cargo test`.
    pub command: &'static str,
    /// What showed it, e.g. `Cargo.toml`.
    pub because: String,
}

/// Guesses the gate from the files at the repository root, in this order:
/// `Cargo.toml` → `cargo test`; a `package.json` with a `test` script →
/// `npm test`; `pyproject.toml` / `pytest.ini` / `setup.cfg` / `tox.ini`
/// naming pytest (or `pytest.ini` itself) → `pytest`; a Python project
/// with a `tests/` folder of `test_*.py` → `python3 -m pytest`; `go.mod` →
/// `go test ./...`; a Makefile with a `test:` target → `make test`. `None`
/// when nothing shows one (docs/config.md `verify`). Reads at most 1 MiB of
/// each file, regular files only.
pub fn guess(repo: &std::path::Path) -> Option<Guess> {
    let read = |name: &str| -> Option<String> {
        let p = repo.join(name);
        let m = std::fs::metadata(&p).ok()?;
        if !m.is_file() || m.len() > 1 << 20 {
            return None;
        }
        std::fs::read_to_string(p).ok()
    };
    let guess = |command, because: &str| {
        Some(Guess {
            command,
            because: because.to_string(),
        })
    };
    if read("Cargo.toml").is_some() {
        return guess("cargo test", "Cargo.toml");
    }
    if let Some(pkg) = read("package.json") {
        let has_test = serde_json::from_str::<serde_json::Value>(&pkg)
            .ok()
            .and_then(|v| v.get("scripts")?.get("test")?.as_str().map(str::to_string))
            .is_some_and(|t| !t.contains("no test specified"));
        if has_test {
            return guess("npm test", "package.json has a `test` script");
        }
    }
    if read("pytest.ini").is_some() {
        return guess("pytest", "pytest.ini");
    }
    for name in ["pyproject.toml", "setup.cfg", "tox.ini"] {
        if read(name).is_some_and(|t| t.contains("pytest")) {
            return guess("pytest", &format!("{name} mentions pytest"));
        }
    }
    if let Some(because) = pytest_layout(repo) {
        return guess("python3 -m pytest", &because);
    }
    if read("go.mod").is_some() {
        return guess("go test ./...", "go.mod");
    }
    for name in ["Makefile", "makefile", "GNUmakefile"] {
        if read(name).is_some_and(|t| {
            t.lines()
                .any(|l| l.starts_with("test:") || l.starts_with("test :"))
        }) {
            return guess("make test", &format!("{name} has a `test:` target"));
        }
    }
    None
}

/// A Python project laid out for pytest without saying so: a
/// `pyproject.toml`, `setup.py` or `setup.cfg` at the root and a `tests/`
/// (or `test/`) folder holding `test_*.py` or `*_test.py` files, pytest's
/// default names. `python3 -m pytest` runs them without a `pytest` script
/// on `PATH`. Says what showed it.
fn pytest_layout(repo: &std::path::Path) -> Option<String> {
    let project = ["pyproject.toml", "setup.py", "setup.cfg"]
        .into_iter()
        .find(|f| repo.join(f).is_file())?;
    ["tests", "test"].into_iter().find_map(|dir| {
        let found = std::fs::read_dir(repo.join(dir))
            .ok()?
            .filter_map(|e| e.ok())
            .take(10_000)
            .any(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.ends_with(".py")
                    && (name.starts_with("test_") || name.ends_with("_test.py"))
                    && e.file_type().is_ok_and(|t| t.is_file())
            });
        found.then(|| format!("{project} and {dir}/test_*.py, pytest's layout"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(command: &str, exit_code: Option<i32>, timed_out: bool, output: &str) -> GateRun {
        GateRun {
            command: command.into(),
            exit_code,
            timed_out,
            duration_ms: 10,
            output_tail: output.into(),
            refused: vec![],
        }
    }

    #[test]
    fn feedback_names_each_failed_command_and_what_it_printed() {
        let fb = feedback(&[
            run("cargo fmt --check", Some(0), false, ""),
            run("sh test.sh", Some(1), false, "ok 1\nunknown word: bogus\n"),
        ]);
        assert!(
            !fb.contains("cargo fmt"),
            "a passing command is not feedback: {fb}"
        );
        assert!(
            fb.contains("`sh test.sh` failed (exit code 1)")
                && fb.contains("```\nok 1\nunknown word: bogus\n```"),
            "{fb}"
        );
        // Silence is said in words, not as an empty code block.
        let fb = feedback(&[run("./check", Some(2), false, " \n")]);
        assert_eq!(
            fb,
            "The gate command `./check` failed (exit code 2) and printed nothing.\n"
        );
        assert!(
            feedback(&[run("slow", None, true, "")]).contains("(timed out) and printed nothing")
        );
    }

    #[test]
    fn the_programs_a_gate_command_starts() {
        use Program::*;
        let p = |c: &str| programs(c);
        assert_eq!(p("cargo test"), [Name("cargo".into())]);
        assert_eq!(
            p("env RUST_LOG=1 FOO='a b' cargo test"),
            [Name("cargo".into())]
        );
        assert_eq!(p("CI=1 npm test"), [Name("npm".into())]);
        assert_eq!(
            p("./scripts/test.sh --fast"),
            [Path("./scripts/test.sh".into())]
        );
        assert_eq!(
            p("cd sub && make test || echo failed; \"my tool\" x | tee log"),
            [
                Builtin("cd".into()),
                Name("make".into()),
                Builtin("echo".into()),
                Name("my tool".into()),
                Name("tee".into())
            ]
        );
        assert_eq!(p("$TEST_CMD"), [Unknown("$TEST_CMD".into())]);
        assert_eq!(
            p("[ -f x ] && test -d y"),
            [Builtin("[".into()), Builtin("test".into())]
        );
        assert_eq!(p("env -u HOME -i sh test.sh"), [Name("sh".into())]);
    }
}
