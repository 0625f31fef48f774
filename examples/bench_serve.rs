//! Benchmark of the live board (docs/serve.md, issue 26), by the real
//! binary against the real PostgreSQL (`DATABASE_URL`), with a local bare
//! remote and no GitHub: a `drain --jobs 4` of 16 items whose writer takes
//! 2 s, watched by `nightshift serve`.
//!
//! - **Latency**: for every event of the night, the time from its commit to
//!   its delivery on `/events`. The commit is seen by a `LISTEN` of the
//!   bench's own on `nightshift_events` (PostgreSQL delivers a NOTIFY at
//!   commit), the delivery by an SSE client; both on this machine's
//!   monotonic clock. Prints p50, p99 and the maximum. Goal: p99 <= 250 ms
//!   (with one client; with 201 it is printed).
//! - **200 clients**: the same night with 200 more SSE clients connected
//!   all night, against the night with one: the drain's time per item
//!   (wall time / items) and `serve`'s peak resident memory (`VmHWM`).
//!   Goals: time per item within 10 % of the one-client night; every client
//!   gets every event; memory under 100 MB.
//!
//! Run: `cargo build --release && cargo run --release --example bench_serve`
//! (the binary is `target/release/nightshift`, or `NIGHTSHIFT_BIN`). Exits
//! 1 when a goal is missed.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Runs `cmd`, panicking with its output when it fails.
fn ok(mut cmd: Command, what: &str) -> Output {
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
fn run_git(dir: &Path, args: &[&str]) -> String {
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
fn binary() -> PathBuf {
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
struct Db {
    admin: String,
    name: String,
    url: String,
}

impl Db {
    fn create(tag: &str) -> Db {
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
struct World {
    _dir: tempfile::TempDir,
    root: PathBuf,
    repo: PathBuf,
    db: Db,
    bin: PathBuf,
}

impl World {
    fn new(tag: &str, items: usize, agent_secs: u64, extra: &str) -> World {
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
    fn cmd(&self, repo: &Path, data: &str, args: &[&str]) -> Command {
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
    fn start_drain(&self, extra: &[&str]) -> std::process::Child {
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

    /// `serve --listen 127.0.0.1:0` in the repository; returns it and its
    /// `HOST:PORT`.
    fn serve(&self) -> (std::process::Child, String) {
        let mut child = self
            .cmd(&self.repo, "data", &["serve", "--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("serve starts");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut out, &mut std::io::sink());
        });
        let addr = line
            .trim()
            .trim_start_matches("board: http://")
            .trim_end_matches('/')
            .to_string();
        (child, addr)
    }
}

/// When each event number arrived (or was announced).
type Arrivals = Arc<Mutex<Vec<(i64, Instant)>>>;

/// An SSE client on `/events` (from now) counting the events it gets; with
/// `times`, it notes when each number arrived.
fn client(addr: &str, times: Option<Arrivals>) -> Arc<Mutex<usize>> {
    let got = Arc::new(Mutex::new(0));
    let mut s = TcpStream::connect(addr).expect("connect to serve");
    let req = format!("GET /events HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let n = got.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(s).lines() {
            let Ok(line) = line else { return };
            if let Some(id) = line.strip_prefix("id: ") {
                *n.lock().unwrap() += 1;
                if let (Some(t), Ok(id)) = (&times, id.trim().parse()) {
                    t.lock().unwrap().push((id, Instant::now()));
                }
            }
        }
    });
    got
}

/// The bench's own LISTEN: when each event number was announced.
fn notifications(url: String) -> Arrivals {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let out = seen.clone();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            let mut l = sqlx::postgres::PgListener::connect(&url).await.unwrap();
            l.listen("nightshift_events").await.unwrap();
            ready_tx.send(()).unwrap();
            while let Ok(n) = l.recv().await {
                if let Ok(seq) = n.payload().parse() {
                    out.lock().unwrap().push((seq, Instant::now()));
                }
            }
        });
    });
    ready_rx.recv().unwrap();
    seen
}

/// The peak resident memory of process `pid`, in kB.
fn peak_rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap_or(0)
}

/// What one night said.
struct Night {
    per_item: f64,
    latencies: Vec<Duration>,
    events: usize,
    short_clients: usize,
    rss_kb: u64,
}

/// One night of `items` items (`--jobs 4`) watched by `serve` with one
/// timed client and `extra` more.
fn night(tag: &str, items: usize, extra: usize) -> Night {
    let w = World::new(tag, items, 2, "");
    let (mut serve, addr) = w.serve();
    let announced = notifications(w.db.url.clone());
    let times = Arc::new(Mutex::new(Vec::new()));
    client(&addr, Some(times.clone()));
    let others: Vec<_> = (0..extra).map(|_| client(&addr, None)).collect();
    std::thread::sleep(Duration::from_millis(500));
    let start = Instant::now();
    let drain = w.start_drain(&["--jobs", "4"]);
    finish(drain, "drain");
    let wall = start.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_secs(2));
    let rss_kb = peak_rss_kb(serve.id());
    let _ = serve.kill();
    let _ = serve.wait();
    let announced = announced.lock().unwrap().clone();
    let times = times.lock().unwrap().clone();
    let mut latencies: Vec<Duration> = announced
        .iter()
        .filter_map(|(n, at)| {
            let got = times.iter().find(|(m, _)| m == n)?;
            Some(got.1.saturating_duration_since(*at))
        })
        .collect();
    latencies.sort();
    let events = times.len();
    let short_clients = others
        .iter()
        .filter(|c| *c.lock().unwrap() < events)
        .count();
    Night {
        per_item: wall / items as f64,
        latencies,
        events,
        short_clients,
        rss_kb,
    }
}

fn pct(v: &[Duration], p: f64) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let items = 16;
    println!("bench_serve: drain --jobs 4, {items} items of a 2 s writer, watched by serve");
    let one = night("serve1", items, 0);
    let many = night("serve200", items, 200);
    let mut ok = true;
    for (name, n) in [("1 client", &one), ("201 clients", &many)] {
        let (p50, p99) = (pct(&n.latencies, 0.5), pct(&n.latencies, 0.99));
        let max = n.latencies.last().copied().unwrap_or_default();
        println!(
            "  {name}: {} events, latency commit -> SSE p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; drain {:.2} s per item; serve peak RSS {:.1} MB; clients short of events: {}",
            n.events,
            p50.as_secs_f64() * 1e3,
            p99.as_secs_f64() * 1e3,
            max.as_secs_f64() * 1e3,
            n.per_item,
            n.rss_kb as f64 / 1024.0,
            n.short_clients
        );
        // The latency goal is the one-client night's; with 201 clients the
        // goal is the drain's time per item (below) and every client served.
        if name == "1 client" {
            ok &= p99 <= Duration::from_millis(250);
        }
        ok &= n.short_clients == 0 && n.rss_kb < 100 * 1024;
        ok &= n.latencies.len() + 2 >= n.events;
    }
    let ratio = many.per_item / one.per_item;
    println!("  time per item with 201 clients / with 1: {ratio:.3} (goal <= 1.10)");
    ok &= ratio <= 1.10;
    println!(
        "  load average: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    if !ok {
        println!("a goal was missed");
        std::process::exit(1);
    }
}

/// Writes `.nightshift/config.toml` (ignored by git) in `repo`.
fn write_config(repo: &Path, config: &str) {
    std::fs::create_dir_all(repo.join(".nightshift")).unwrap();
    std::fs::write(repo.join(".nightshift/.gitignore"), "*\n").unwrap();
    std::fs::write(repo.join(".nightshift/config.toml"), config).unwrap();
}

/// Waits for `child`; panics with its output when it fails.
fn finish(child: std::process::Child, what: &str) -> Output {
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
