//! Benchmark of `nightshift plan` on big backlogs: 200, 2,000 and 20,000
//! items (about 190 bytes each: a title, two `accept:` lines, a `scope:` and
//! a line of context; 20,000 items are 3.7 MB), run by the real release
//! binary against the real PostgreSQL (`DATABASE_URL`). Each size is planned
//! twice: first into an empty ledger (every contract stored), then again
//! (every contract already there). Beside it, in the same run: the same
//! binary planning a backlog of one item (the fixed cost of a start, the
//! config and the ledger connection) and `sha256sum` of the backlog (what
//! reading the file costs). The goal (issue 12): 20,000 items in at most 2 s.
//!
//! Run: `cargo build --release && cargo run --release --example bench_plan [SIZES...]`
//! (default `200 2000 20000`; the binary is `target/release/nightshift`, or
//! `NIGHTSHIFT_BIN`; the database server is `DATABASE_URL`, default
//! `postgres://postgres@127.0.0.1:5432/postgres`, where a scratch database
//! is created and dropped).

use std::process::Command;
use std::time::Instant;

#[path = "common/world.rs"]
mod world;

use world::{Db, binary, ok};

/// Seconds the seed took, measured in issue 12 on this machine.
const BEFORE: &[(usize, f64)] = &[(200, 0.49), (2_000, 1.7), (20_000, 15.0)];

/// A backlog of `n` items, their titles tagged with `tag` so that each size
/// seals contracts of its own.
fn backlog(n: usize, tag: &str) -> String {
    let mut text = String::from("# Backlog\n\n> Keep the public API stable.\n\n## Work\n\n");
    for i in 0..n {
        text.push_str(&format!(
            "- [ ] {tag} item {i}: fix the handling of case {i} in the parser\n  - accept: case {i} parses to the documented value\n  - accept: a regression test pins case {i}\n  - scope: src/parser.rs, tests/**\n  - The case was reported by a user.\n"
        ));
    }
    text
}

fn main() {
    let sizes: Vec<usize> = {
        let given: Vec<usize> = std::env::args()
            .skip(1)
            .map(|a| a.parse().expect("SIZES are numbers"))
            .collect();
        if given.is_empty() {
            vec![200, 2_000, 20_000]
        } else {
            given
        }
    };
    let bin = binary();
    let dir = tempfile::tempdir().expect("temp dir");
    let repo = dir.path().join("repo");
    let (home, data) = (dir.path().join("home"), dir.path().join("data"));
    for d in [&repo, &home, &data] {
        std::fs::create_dir_all(d).unwrap();
    }
    let git = |args: &[&str]| {
        let mut c = Command::new("git");
        c.current_dir(&repo)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .args(args);
        ok(c, &format!("git {args:?}"));
    };
    git(&["init", "-q", "-b", "main"]);
    git(&["remote", "add", "origin", "/nonexistent/remote.git"]);
    // As root, a plan is offered only when the config lets agents run as
    // root (docs/security.md); the bench runs no agent.
    let as_root = if nix::unistd::geteuid().is_root() {
        "agents_as_root = true\n"
    } else {
        ""
    };
    std::fs::create_dir_all(repo.join(".nightshift")).unwrap();
    std::fs::write(
        repo.join(".nightshift/config.toml"),
        format!("{as_root}verify = [\"true\"]\n\n[writer]\nkind = \"command\"\ncommand = [\"true\"]\n\n[reviewer]\nkind = \"command\"\ncommand = [\"true\"]\n"),
    )
    .unwrap();
    let db = Db::create("plan");
    // Wall time and the CPU seconds (user + system) the child used: on a
    // shared machine the wall time is mostly waiting for a core.
    let plan = || {
        let mut c = Command::new(&bin);
        c.current_dir(&repo)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", &home)
            .env("TZ", "UTC")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("NIGHTSHIFT_DATA_DIR", &data)
            .env("NIGHTSHIFT_DATABASE_URL", &db.url)
            .arg("plan");
        let (t, cpu) = (Instant::now(), children_cpu());
        ok(c, "nightshift plan");
        (t.elapsed().as_secs_f64(), children_cpu() - cpu)
    };
    std::fs::write(repo.join("NEXT.md"), backlog(1, "warm")).unwrap();
    plan();
    let (one, one_cpu) = plan();
    println!("load average: {}", load_average());
    println!("plan of 1 item (fixed cost): {one:.3} s, {one_cpu:.3} s CPU");
    println!(
        "{:>7}  {:>9}  {:>9}  {:>9}  {:>9}  {:>11}  {:>9}  {:>10}",
        "items", "bytes", "first s", "CPU s", "again s", "ms per item", "sha256 s", "before s"
    );
    let mut worst = 0.0f64;
    for &n in &sizes {
        let text = backlog(n, &format!("n{n}"));
        let path = repo.join("NEXT.md");
        std::fs::write(&path, &text).unwrap();
        let t = Instant::now();
        let mut c = Command::new("sha256sum");
        c.arg(&path);
        ok(c, "sha256sum");
        let read = t.elapsed().as_secs_f64();
        let (first, first_cpu) = plan();
        let (again, _) = plan();
        let per_item = (first - one).max(0.0) / n as f64 * 1000.0;
        let before = BEFORE
            .iter()
            .find(|(m, _)| *m == n)
            .map_or("-".to_string(), |(_, s)| format!("{s:.2}"));
        println!(
            "{n:>7}  {:>9}  {first:>9.3}  {first_cpu:>9.3}  {again:>9.3}  {per_item:>11.3}  {read:>9.3}  {before:>10}",
            text.len()
        );
        if n == 20_000 {
            worst = worst.max(first).max(again);
        }
    }
    if worst > 2.0 {
        eprintln!("20,000 items took more than the 2 s goal");
        std::process::exit(1);
    }
}

/// CPU seconds (user + system) used by this process's waited-for children.
fn children_cpu() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct it is given.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru);
        ru
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(ru.ru_utime) + secs(ru.ru_stime)
}

/// The 1, 5 and 15 minute load averages from `/proc/loadavg`.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
