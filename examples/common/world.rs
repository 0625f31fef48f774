//! What the benchmarks that drive the real binary share
//! (examples/bench_workers.rs, examples/bench_serve.rs): a scratch ledger
//! database, a repository with its bare remote and a backlog of items of a
//! scripted agent, and the binary run in it as a user would. Each benchmark
//! uses part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs `cmd`, panicking with its output when it fails.
pub fn ok(mut cmd: Command, what: &str) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// git in `dir` with no user config and a fixed identity.
pub fn run_git(dir: &Path, args: &[&str]) -> String {
    let mut c = Command::new("git");
    c.current_dir(dir)
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@example.invalid")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "bench@example.invalid");
    String::from_utf8_lossy(&ok(c, &format!("git {args:?}")).stdout)
        .trim()
        .to_string()
}

/// The nightshift binary: `NIGHTSHIFT_BIN`, else `nightshift` beside this
/// example's directory (`target/release/nightshift`).
pub fn binary() -> PathBuf {
    if let Ok(b) = std::env::var("NIGHTSHIFT_BIN") {
        return PathBuf::from(b);
    }
    let exe = std::env::current_exe().expect("current exe");
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/examples")
        .join("nightshift");
    assert!(
        bin.is_file(),
        "{} is missing: run `cargo build --release` first",
        bin.display()
    );
    bin
}

/// A scratch database on the `DATABASE_URL` server, dropped on drop.
pub struct Db {
    pub admin: String,
    pub name: String,
    pub url: String,
}

impl Db {
    pub fn create(tag: &str) -> Db {
        let admin = std::env::var("DATABASE_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        let name = format!("nightshift_bench_{tag}_{}", std::process::id());
        let mut c = Command::new("psql");
        c.args([&admin, "-q", "-c", &format!("CREATE DATABASE {name}")]);
        ok(c, "create the bench database");
        let base = admin
            .rsplit_once('/')
            .map_or(admin.clone(), |(b, _)| b.into());
        Db {
            url: format!("{base}/{name}"),
            admin,
            name,
        }
    }

    pub fn sql(&self, q: &str) -> String {
        let mut c = Command::new("psql");
        c.args([&self.url, "-qAt", "-c", q]);
        String::from_utf8_lossy(&ok(c, q).stdout).trim().to_string()
    }

    /// As [`Db::sql`], `None` when the statement fails (an extension the
    /// server does not have).
    pub fn try_sql(&self, q: &str) -> Option<String> {
        let out = Command::new("psql")
            .args([&self.url, "-qAt", "-v", "ON_ERROR_STOP=1", "-c", q])
            .stderr(Stdio::null())
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        let _ = Command::new("psql")
            .args([
                &self.admin,
                "-q",
                "-c",
                &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
            ])
            .output();
    }
}

/// One scenario's world: a repository pushed to a bare remote, a plan of
/// `items` items approved, agents whose writer sleeps `agent_secs`.
pub struct World {
    pub _dir: tempfile::TempDir,
    pub root: PathBuf,
    pub repo: PathBuf,
    pub config: String,
    pub db: Db,
    pub bin: PathBuf,
}

impl World {
    pub fn new(tag: &str, items: usize, agent_secs: u64, extra: &str) -> World {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().to_path_buf();
        let repo = root.join("repo");
        for d in ["repo", "home", "data", "agents"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        run_git(&root, &["init", "-q", "--bare", "-b", "main", "remote.git"]);
        run_git(&repo, &["init", "-q", "-b", "main"]);
        std::fs::write(repo.join("README.md"), "bench\n").unwrap();
        run_git(&repo, &["add", "-A"]);
        run_git(&repo, &["commit", "-q", "-m", "init"]);
        let remote = root.join("remote.git");
        run_git(
            &repo,
            &["remote", "add", "origin", remote.to_str().unwrap()],
        );
        run_git(&repo, &["push", "-q", "origin", "main"]);

        use std::os::unix::fs::PermissionsExt;
        let script = |name: &str, text: &str| {
            let p = root.join("agents").join(name);
            std::fs::write(&p, text).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
            p.display().to_string()
        };
        // A fixed time of work, then one file of the item's own.
        let writer = script(
            "writer.sh",
            &format!(
                "#!/bin/sh\nsleep {agent_secs}\nn=$(grep -o '\"title\":\"Item [0-9]*\"' \"$NIGHTSHIFT_CONTRACT_FILE\" | grep -o '[0-9][0-9]*' | head -n1)\nmkdir -p items\necho \"written by $$\" > \"items/item-$n.txt\"\n"
            ),
        );
        let reviewer = script(
            "reviewer.sh",
            "#!/bin/sh\necho '{\"verdict\":\"approve\",\"findings\":[]}'\n",
        );
        // As root, agents run as root only when the config says so.
        let as_root = if nix::unistd::geteuid().is_root() {
            "agents_as_root = true\n"
        } else {
            ""
        };
        let config = format!(
            "verify = [\"true\"]\n{as_root}{extra}\n[writer]\nkind = \"command\"\ncommand = [\"{writer}\"]\n\n[reviewer]\nkind = \"command\"\ncommand = [\"{reviewer}\"]\n"
        );
        write_config(&repo, &config);
        let backlog: String = (1..=items).map(|i| format!("- [ ] Item {i}\n")).collect();
        std::fs::write(repo.join("NEXT.md"), backlog).unwrap();
        let w = World {
            _dir: dir,
            root,
            repo,
            config,
            db: Db::create(tag),
            bin: binary(),
        };
        let plan: serde_json::Value =
            serde_json::from_slice(&ok(w.cmd(&w.repo, "data", &["plan", "--json"]), "plan").stdout)
                .expect("plan JSON");
        let sha = plan["plan_sha"].as_str().expect("plan_sha").to_string();
        ok(w.cmd(&w.repo, "data", &["approve", &sha]), "approve");
        w
    }

    /// nightshift `args` in `repo` with data directory `ROOT/data`, in a
    /// hermetic environment.
    pub fn cmd(&self, repo: &Path, data: &str, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.current_dir(repo)
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.root.join("home"))
            .env("TZ", "UTC")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "bench")
            .env("GIT_AUTHOR_EMAIL", "bench@example.invalid")
            .env("GIT_COMMITTER_NAME", "bench")
            .env("GIT_COMMITTER_EMAIL", "bench@example.invalid")
            .env("NIGHTSHIFT_DATA_DIR", self.root.join(data))
            .env("NIGHTSHIFT_DATABASE_URL", &self.db.url);
        c
    }

    /// `drain` with `extra` flags in the repository, as a child process.
    pub fn start_drain(&self, extra: &[&str]) -> std::process::Child {
        let deadline = (chrono::Utc::now() + chrono::Duration::hours(12))
            .format("%H:%M")
            .to_string();
        let mut args = vec!["drain", "--deadline", &deadline];
        args.extend_from_slice(extra);
        self.cmd(&self.repo, "data", &args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("drain starts")
    }

    /// A second clone of the remote, with its own config and data directory
    /// (`ROOT/data2`), as on another host.
    pub fn second_clone(&self) -> PathBuf {
        self.clone_n(2)
    }

    /// Clone `n` of the remote (`ROOT/clone<n>`), with its own config and
    /// data directory (`ROOT/data<n>`, holding the approving host's key), as
    /// on another host.
    pub fn clone_n(&self, n: usize) -> PathBuf {
        let name = format!("clone{n}");
        let remote = self.root.join("remote.git");
        run_git(
            &self.root,
            &["clone", "-q", remote.to_str().unwrap(), &name],
        );
        let clone = self.root.join(&name);
        let data = self.root.join(format!("data{n}"));
        std::fs::create_dir_all(&data).unwrap();
        write_config(&clone, &self.config);
        clone
    }

    /// Copies the approving host's key into data directory `data` (a worker
    /// host checks the run's approval with it, docs/workers.md).
    pub fn share_key(&self, data: &str) {
        use std::os::unix::fs::PermissionsExt;
        let to = self.root.join(data).join("approval.key");
        std::fs::create_dir_all(self.root.join(data)).unwrap();
        std::fs::copy(self.root.join("data").join("approval.key"), &to).expect("approval key");
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o600)).unwrap();
    }

    /// Waits until the drain's run is live with all `items` queued.
    pub fn wait_live(&self, items: usize) {
        let live = Instant::now();
        while self
            .db
            .sql("SELECT count(*) FROM run_queue q JOIN runs r ON r.id = q.run_id WHERE r.status = 'running'")
            != items.to_string()
        {
            assert!(
                live.elapsed() < Duration::from_secs(120),
                "the drain's run did not go live"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Checks that every item ran exactly once and succeeded; returns the
    /// number of processes (pids) that ran items.
    pub fn check_each_once(&self, items: usize) -> usize {
        let outcomes = self
            .db
            .sql("SELECT string_agg(DISTINCT outcome, ' ') FROM run_items");
        assert!(
            outcomes
                .split(' ')
                .all(|o| o == "branch_pushed" || o == "pr_opened"),
            "items did not all succeed: {outcomes}"
        );
        let n = |q: &str| -> usize { self.db.sql(q).parse().expect("a count") };
        assert_eq!(n("SELECT count(DISTINCT item_key) FROM run_items"), items);
        assert_eq!(
            n("SELECT count(*) FROM claims"),
            items,
            "one claim per item"
        );
        assert_eq!(
            n("SELECT count(DISTINCT item_key) FROM claims"),
            items,
            "one claim per item"
        );
        assert_eq!(
            n("SELECT count(*) FROM agent_calls WHERE role = 'writer'"),
            items,
            "one writer call per item"
        );
        n("SELECT count(DISTINCT split_part(worker, ':', 2)) FROM run_items")
    }
}

/// Writes `.nightshift/config.toml` (ignored by git) in `repo`.
pub fn write_config(repo: &Path, config: &str) {
    std::fs::create_dir_all(repo.join(".nightshift")).unwrap();
    std::fs::write(repo.join(".nightshift/.gitignore"), "*\n").unwrap();
    std::fs::write(repo.join(".nightshift/config.toml"), config).unwrap();
}

/// Waits for `child`; panics with its output when it fails.
pub fn finish(child: std::process::Child, what: &str) -> Output {
    let out = child.wait_with_output().expect("wait");
    assert!(
        out.status.success(),
        "{what} failed ({:?}): {}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
