//! Test harness shared by the integration tests: a real PostgreSQL database
//! per test (a clone of one migrated template, [`db`]), a local bare repository as the remote, a user checkout, the real
//! `nightshift` binary run with a cleared environment, and script agents.
//! A test about a night describes it with the [`Night`] builder and reads
//! the ledger typed ([`rows`]); docs/testing.md shows how.
#![allow(dead_code)]

pub mod bg;
pub mod db;
pub mod github;
pub mod github_ci;
pub mod night;
pub mod rows;

pub use bg::{outcomes, reason};
pub use db::Db;
pub use night::Night;
pub use rows::Table;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tempfile::TempDir;

/// Runs git in `dir` with a fixed identity and no user config.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A deadline (`HH:MM`, UTC like the fixture's `TZ`) about 12 hours from now.
///
/// A fixed one (`23:59`, the default `07:00`) passes or fails by the hour of day
/// the suite runs at: near it, items stop at the deadline; and a 6 h usage-limit
/// sleep crosses 23:59 after 17:59 UTC. Twelve hours is beyond the longest sleep
/// (`limit_sleep_max`, 6 h) and any test's runtime, at every hour.
pub fn far_deadline() -> String {
    (chrono::Utc::now() + chrono::Duration::hours(12))
        .format("%H:%M")
        .to_string()
}

/// A git checkout of one committed file (`calc.txt` = `add`), with a
/// `home`, a `codex-home` and a `logs` dir beside it: where the agent
/// backends' own tests call an agent, without a night (no remote, no
/// database).
pub struct Checkout {
    pub dir: TempDir,
    /// The checkout, `<dir>/<name>`.
    pub repo: PathBuf,
    pub home: PathBuf,
}

impl Checkout {
    /// A checkout named `name` in a new temp dir.
    pub fn new(name: &str) -> Checkout {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = dir.path().join(name);
        let home = dir.path().join("home");
        for d in [
            &repo,
            &home,
            &dir.path().join("codex-home"),
            &dir.path().join("logs"),
        ] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(repo.join("calc.txt"), "add\n").unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", "init"]);
        Checkout { dir, repo, home }
    }
}

/// A temp world: bare remote, user checkout, data dir, agents dir.
pub struct Fixture {
    pub dir: TempDir,
    pub remote: PathBuf,
    pub repo: PathBuf,
    pub data: PathBuf,
    pub home: PathBuf,
    pub agents: PathBuf,
    pub db: Db,
    pub github: Option<String>,
    pub token: Option<String>,
    pub extra_env: Vec<(String, String)>,
}

impl Fixture {
    /// A repository with a tiny shell project whose test is `sh test.sh`,
    /// pushed to a bare remote on `main`.
    pub fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let remote = dir.path().join("remote.git");
        let repo = dir.path().join("repo");
        let data = dir.path().join("data");
        let home = dir.path().join("home");
        let agents = dir.path().join("agents");
        for d in [&repo, &data, &home, &agents] {
            std::fs::create_dir_all(d).unwrap();
        }
        git(
            dir.path(),
            &[
                "init",
                "-q",
                "--bare",
                "-b",
                "main",
                remote.to_str().unwrap(),
            ],
        );
        git(&repo, &["init", "-q", "-b", "main"]);
        std::fs::write(repo.join("calc.txt"), "add\n").unwrap();
        std::fs::write(repo.join("test.sh"), "#!/bin/sh\n# The project's own test: every line of calc.txt is a known word.\nwhile read -r w; do case \"$w\" in add|sub|mul|div|pow) ;; *) echo \"unknown word: $w\"; exit 1;; esac; done < calc.txt\necho ok\n").unwrap();
        std::fs::create_dir_all(repo.join("docs")).unwrap();
        std::fs::write(repo.join("docs/README.md"), "calc\n").unwrap();
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", "init"]);
        git(
            &repo,
            &["remote", "add", "origin", remote.to_str().unwrap()],
        );
        git(&repo, &["push", "-q", "origin", "main"]);
        Fixture {
            dir,
            remote,
            repo,
            data,
            home,
            agents,
            db: Db::create(),
            github: None,
            token: None,
            extra_env: vec![],
        }
    }

    /// Talks to the fake GitHub `gh`, which serves this fixture's bare
    /// remote as GitHub serves the repository's branches: a PR's head and
    /// base commits, and whether it merges cleanly (`mergeable`).
    pub fn use_github(&mut self, gh: &github::FakeGitHub) {
        self.github = Some(gh.uri());
        gh.serve_git(&self.remote);
    }

    /// Writes a file in the user's checkout.
    pub fn write(&self, rel: &str, text: &str) {
        let p = self.repo.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    /// Writes an executable agent script under the agents dir; returns its path.
    pub fn agent(&self, name: &str, script: &str) -> String {
        let p = self.agents.join(name);
        std::fs::write(&p, script).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p.display().to_string()
    }

    /// Writes `.nightshift/config.toml`.
    ///
    /// The suite runs as root (CI) and its script agents need no account of
    /// their own, so a config that names neither `agent_user` nor
    /// `agents_as_root` gets `agents_as_root = true` (without it, root
    /// refuses to run agents), on a line before the first table so the
    /// lines a test's error messages point at stay where they were.
    pub fn config(&self, toml: &str) {
        let toml = if toml.contains("agent_user") || toml.contains("agents_as_root") {
            toml.to_string()
        } else {
            let at = toml
                .lines()
                .scan(0, |offset, l| {
                    let start = *offset;
                    *offset += l.len() + 1;
                    Some((start, l))
                })
                .find(|(_, l)| l.trim_start().starts_with('['))
                .map_or(toml.len(), |(start, _)| start);
            let sep = if at > 0 && !toml[..at].ends_with('\n') {
                "\n"
            } else {
                ""
            };
            format!("{}{sep}agents_as_root = true\n{}", &toml[..at], &toml[at..])
        };
        // The suite's scripts keep their marker files (pids, stall files,
        // counters, logs) beside themselves, and some look at the remote:
        // a sandboxed call may write the one and read the other
        // (docs/config.md#sandbox). A test with a `[sandbox]` table of its
        // own says what it gets.
        let toml = if toml.contains("[sandbox]") {
            toml
        } else {
            format!(
                "{toml}\n{}read = [\"{}\"]\n",
                bg::stall_sandbox(&self.agents),
                self.remote.display()
            )
        };
        self.write(".nightshift/config.toml", &toml);
        self.write(".nightshift/.gitignore", "*\n");
    }

    /// Config with command agents `writer`/`reviewer` scripts and `sh test.sh` as the gate.
    pub fn config_with(&self, writer: &str, reviewer: &str, extra: &str) {
        self.config(&format!(
            "verify = [\"sh test.sh\"]\n{extra}\n[writer]\nkind = \"command\"\ncommand = [\"{writer}\"]\n\n[reviewer]\nkind = \"command\"\ncommand = [\"{reviewer}\"]\n"
        ));
    }

    /// The nightshift binary with a cleared, hermetic environment.
    pub fn cmd(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_nightshift"));
        c.current_dir(&self.repo)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", &self.home)
            .env("TZ", "UTC")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
            .env("NIGHTSHIFT_DATA_DIR", &self.data)
            .env("NIGHTSHIFT_DATABASE_URL", &self.db.url);
        if let Some(g) = &self.github {
            c.env("GITHUB_API_URL", g).env("GH_REPO", "owner/repo");
            // The CI watch after a push looks often, and a PR whose
            // repository reports no check ends `ci_none` at the first look
            // (docs/github.md#ci); a test may set its own.
            c.env("NIGHTSHIFT_CI_POLL_MS", "100")
                .env("NIGHTSHIFT_CI_GRACE_MS", "0");
        }
        if let Some(t) = &self.token {
            c.env("GITHUB_TOKEN", t);
        }
        for (k, v) in &self.extra_env {
            c.env(k, v);
        }
        c
    }

    /// Runs nightshift with `args`.
    ///
    /// A `drain` or `run` without `--deadline` gets [`far_deadline`]: the
    /// default 07:00 would stop it early when the suite runs just before 07:00.
    pub fn run(&self, args: &[&str]) -> Output {
        let deadline = far_deadline();
        let mut args = args.to_vec();
        if matches!(args.first(), Some(&"drain" | &"run")) && !args.contains(&"--deadline") {
            args.extend(["--deadline", &deadline]);
        }
        self.cmd().args(&args).output().expect("nightshift runs")
    }

    /// `plan --json` → plan SHA (asserts success).
    pub fn plan_sha(&self) -> String {
        let out = self.run(&["plan", "--json"]);
        assert_ok(&out, "plan --json");
        let v: serde_json::Value =
            serde_json::from_slice(&out.stdout).expect("plan --json is JSON");
        v["plan_sha"].as_str().unwrap().to_string()
    }

    /// plan, approve, drain; returns the drain's output.
    pub fn approve_and_drain(&self, extra: &[&str]) -> Output {
        let sha = self.plan_sha();
        assert_ok(&self.run(&["approve", &sha]), "approve");
        let deadline = far_deadline();
        let mut args = vec!["drain", "--deadline", &deadline];
        args.extend_from_slice(extra);
        self.run(&args)
    }

    /// plan, approve, drain with `flags`; asserts that the drain exited
    /// with `code` (showing its output otherwise) and returns its output.
    pub fn drain_exits(&self, code: i32, flags: &[&str]) -> Output {
        let out = self.approve_and_drain(flags);
        assert_eq!(
            out.status.code(),
            Some(code),
            "drain {flags:?}:\n{}",
            text(&out)
        );
        out
    }

    /// `report --json` of the latest run.
    pub fn report(&self) -> serde_json::Value {
        let out = self.run(&["report", "--json"]);
        assert_ok(&out, "report --json");
        serde_json::from_slice(&out.stdout).expect("report --json is JSON")
    }

    /// Branches on the remote under `nightshift/`.
    pub fn remote_branches(&self) -> Vec<String> {
        git(
            &self.remote,
            &[
                "branch",
                "--list",
                "nightshift/*",
                "--format=%(refname:short)",
            ],
        )
        .lines()
        .map(str::to_string)
        .filter(|l| !l.is_empty())
        .collect()
    }
}

/// Asserts a command succeeded, printing its output otherwise.
pub fn assert_ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed ({:?}):\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whether a pull request as the fake GitHub keeps it (one element of
/// `gh.prs()`, JSON) carries the label `name`; panics if it has no `labels` list.
pub fn has_label(pr: &serde_json::Value, name: &str) -> bool {
    pr["labels"]
        .as_array()
        .unwrap()
        .iter()
        .any(|l| l["name"] == name)
}

/// Clones the fixture's remote into `<f.dir>/<name>`, checked out at `branch`
/// when given, as a person's own checkout; returns the clone's path.
pub fn clone_remote(f: &Fixture, name: &str, branch: Option<&str>) -> PathBuf {
    let clone = f.dir.path().join(name);
    let (remote, dest) = (f.remote.to_str().unwrap(), clone.to_str().unwrap());
    let mut args = vec!["clone", "-q"];
    args.extend(branch.iter().flat_map(|b| ["-b", b]));
    args.extend([remote, dest]);
    git(f.dir.path(), &args);
    clone
}

/// Puts `dir` ahead of this process's PATH for the fixture's runs of the
/// binary, so that the scripts in it (e.g. a fake `claude` or `cargo`) are found first.
pub fn prepend_path(f: &mut Fixture, dir: &Path) {
    let inherited = std::env::var("PATH").unwrap_or_default();
    let path = format!("{}:{inherited}", dir.display());
    f.extra_env.push(("PATH".into(), path));
}

/// The line `nightshift doctor` printed (in `out`) for the check `name`
/// (its status word, then the name padded to 9); empty when there is none.
pub fn doctor_line(out: &Output, name: &str) -> String {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| {
            l.get(5..)
                .is_some_and(|r| r.starts_with(&format!("{name:<9} ")))
        })
        .unwrap_or_default()
        .to_string()
}

/// stdout + stderr as text.
pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Hash of every file under `dir` (paths and bytes), for byte-identity checks.
pub fn tree_hash(dir: &Path) -> String {
    use sha2::{Digest, Sha256};
    let mut files = Vec::new();
    fn walk(d: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() && !p.is_symlink() {
                walk(&p, out);
            } else {
                out.push(p);
            }
        }
    }
    walk(dir, &mut files);
    let mut h = Sha256::new();
    for f in files {
        h.update(
            f.strip_prefix(dir)
                .unwrap()
                .display()
                .to_string()
                .as_bytes(),
        );
        h.update(std::fs::read(&f).unwrap_or_default());
    }
    hex::encode(h.finalize())
}

/// `json` (JSON text, one or more lines) with its one `@BIG@`, inside a
/// string, replaced by `unit` repeated `times` times. The unit is escaped
/// once, not each of its copies: serializing a 50 MiB string with the test
/// build's unoptimized serde_json took seconds of CPU per test.
///
/// Panics when `@BIG@` is not in `json` exactly once.
pub fn json_with_repeat(json: &str, unit: &str, times: usize) -> String {
    assert_eq!(json.matches("@BIG@").count(), 1, "{json}");
    let escaped = serde_json::to_string(unit).expect("a string is JSON");
    let escaped = &escaped[1..escaped.len() - 1];
    json.replacen("@BIG@", &escaped.repeat(times), 1)
}
