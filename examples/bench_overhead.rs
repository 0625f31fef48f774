//! Benchmark of nightshift's own cost per item on a big repository: a
//! generated repository of FILES small files (default 50,000) with a local
//! bare remote and no GitHub, drained by the real release binary against
//! the real PostgreSQL (`DATABASE_URL`), with agents and a gate that do
//! nothing — a `command` writer that appends one line to one file, `true` as
//! the gate, a `command` reviewer that approves — so that only nightshift's
//! own work remains. Beside it, in the same run and on the same repository,
//! the seed's in-place flow for the same change: branch, edit, add, commit,
//! push, checkout, `reset --hard`, `clean -fd`. The machine may be shared, so
//! the figure that counts is the ratio of the two, measured side by side.
//!
//! Per item is the item's time in the ledger (`run_items.started_at` to
//! `ended_at`: slot reset, writer, proof, gate, review, commit, push); the
//! first item of a drain also clones the slot and is shown apart. The goal
//! (docs/workers.md, issue 12): at most 1 s per item and at most 1× the seed
//! flow on 50,000 files.
//!
//! Run: `cargo build --release && cargo run --release --example bench_overhead [FILES] [ITEMS]`
//! (defaults 50000 and 6; the binary is `target/release/nightshift`, or
//! `NIGHTSHIFT_BIN`; the database server is `DATABASE_URL`, default
//! `postgres://postgres@127.0.0.1:5432/postgres`, where a scratch database
//! is created and dropped).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

#[path = "common/world.rs"]
mod world;

use world::{Db, binary, ok, run_git};

/// Writes `files` small files, 100 to a directory, commits them and pushes
/// to a bare remote; returns the user's checkout.
fn generate(root: &Path, files: usize) -> PathBuf {
    let remote = root.join("remote.git");
    let repo = root.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    run_git(root, &["init", "-q", "--bare", "-b", "main", "remote.git"]);
    run_git(&repo, &["init", "-q", "-b", "main"]);
    for i in 0..files {
        let dir = repo.join(format!("src/d{:04}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&dir).unwrap();
        }
        std::fs::write(
            dir.join(format!("f{i:06}.txt")),
            format!("file {i}\nline two\n"),
        )
        .unwrap();
    }
    std::fs::write(repo.join(".gitignore"), "target/\n").unwrap();
    std::fs::write(repo.join(".nightshift-ignore-me"), "").unwrap();
    run_git(&repo, &["add", "-A"]);
    run_git(&repo, &["commit", "-q", "-m", "generated"]);
    run_git(
        &repo,
        &["remote", "add", "origin", remote.to_str().unwrap()],
    );
    run_git(&repo, &["push", "-q", "origin", "main"]);
    repo
}

/// The seed's in-place flow for `items` one-line changes in `repo` (a
/// checkout of its own): per item, the seconds of branch, edit, add,
/// commit, push, checkout, reset --hard, clean -fd.
fn seed_flow(repo: &Path, items: usize, tag: &str) -> Vec<f64> {
    (0..items)
        .map(|i| {
            let t = Instant::now();
            let branch = format!("seed/{tag}-{i}");
            run_git(repo, &["checkout", "-q", "-b", &branch]);
            let file = repo.join(format!("src/d0000/f{:06}.txt", i % 100));
            let mut text = std::fs::read_to_string(&file).unwrap();
            text.push_str(&format!("seed edit {tag} {i}\n"));
            std::fs::write(&file, text).unwrap();
            run_git(repo, &["add", "-A"]);
            run_git(repo, &["commit", "-q", "-m", &format!("edit {i}")]);
            run_git(repo, &["push", "-q", "origin", &branch]);
            run_git(repo, &["checkout", "-q", "main"]);
            run_git(repo, &["reset", "-q", "--hard"]);
            run_git(repo, &["clean", "-q", "-fd"]);
            t.elapsed().as_secs_f64()
        })
        .collect()
}

/// nightshift with a hermetic environment, in `repo`.
fn nightshift(bin: &Path, repo: &Path, home: &Path, data: &Path, db: &Db) -> Command {
    let mut c = Command::new(bin);
    c.current_dir(repo)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("TZ", "UTC")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@example.invalid")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "bench@example.invalid")
        .env("NIGHTSHIFT_DATA_DIR", data)
        .env("NIGHTSHIFT_DATABASE_URL", &db.url);
    // Where the time goes, with BENCH_VERBOSE: each child's duration.
    if let Ok(filter) = std::env::var("NIGHTSHIFT_LOG") {
        c.env("NIGHTSHIFT_LOG", filter);
    }
    c
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let files: usize = args.next().map_or(50_000, |a| a.parse().expect("FILES"));
    let items: usize = args.next().map_or(6, |a| a.parse().expect("ITEMS"));
    assert!(
        items >= 2,
        "ITEMS must be at least 2 (the first clones the slot)"
    );
    let bin = binary();
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path();
    let t = Instant::now();
    let repo = generate(root, files);
    println!(
        "repository:       {files} files generated in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let (home, data, agents) = (root.join("home"), root.join("data"), root.join("agents"));
    for d in [&home, &data, &agents] {
        std::fs::create_dir_all(d).unwrap();
    }
    // The seed flow works in a checkout of its own, as a person's would.
    let seed = root.join("seed");
    run_git(
        root,
        &[
            "clone",
            "-q",
            root.join("remote.git").to_str().unwrap(),
            "seed",
        ],
    );
    let db = Db::create("overhead");

    use std::os::unix::fs::PermissionsExt;
    let script = |name: &str, text: &str| {
        let p = agents.join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p.display().to_string()
    };
    // One line appended to the file the item names (`edit src/...`).
    let writer = script(
        "writer.sh",
        "#!/bin/sh\nf=$(grep -o 'src/d[0-9]*/f[0-9]*\\.txt' \"$NIGHTSHIFT_CONTRACT_FILE\" 2>/dev/null | head -n1)\n[ -n \"$f\" ] || f=src/d0000/f000000.txt\necho \"edited by the writer $$\" >> \"$f\"\n",
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
    std::fs::create_dir_all(repo.join(".nightshift")).unwrap();
    std::fs::write(repo.join(".nightshift/.gitignore"), "*\n").unwrap();
    std::fs::write(
        repo.join(".nightshift/config.toml"),
        format!(
            "verify = [\"true\"]\n{as_root}\n[writer]\nkind = \"command\"\ncommand = [\"{writer}\"]\n\n[reviewer]\nkind = \"command\"\ncommand = [\"{reviewer}\"]\n"
        ),
    )
    .unwrap();
    let backlog: String = (0..items)
        .map(|i| format!("- [ ] Edit src/d{:04}/f{i:06}.txt\n", i / 100))
        .collect();
    std::fs::write(repo.join("NEXT.md"), backlog).unwrap();

    let seed_before = seed_flow(&seed, items, "a");
    let ns = |args: &[&str]| {
        let mut c = nightshift(&bin, &repo, &home, &data, &db);
        c.args(args);
        ok(c, &format!("nightshift {args:?}"))
    };
    let plan: serde_json::Value =
        serde_json::from_slice(&ns(&["plan", "--json"]).stdout).expect("plan JSON");
    let sha = plan["plan_sha"].as_str().expect("plan_sha").to_string();
    ns(&["approve", &sha]);
    let deadline = (chrono::Utc::now() + chrono::Duration::hours(12))
        .format("%H:%M")
        .to_string();
    let t = Instant::now();
    let drain = ns(&["drain", "--deadline", &deadline]);
    let drain_secs = t.elapsed().as_secs_f64();
    if std::env::var_os("BENCH_VERBOSE").is_some() {
        eprintln!("{}", String::from_utf8_lossy(&drain.stderr));
    }
    let seed_after = seed_flow(&seed, items, "b");

    let outcomes = db.sql("SELECT string_agg(outcome, ' ' ORDER BY item_index) FROM run_items");
    let secs: Vec<f64> = db
        .sql("SELECT string_agg(extract(epoch FROM ended_at - started_at)::text, ' ' ORDER BY item_index) FROM run_items")
        .split_whitespace()
        .map(|s| s.parse().expect("seconds"))
        .collect();
    assert!(
        outcomes
            .split(' ')
            .all(|o| o == "planned" || o == "pr_opened" || o == "pushed" || o == "branch_pushed"),
        "items did not all succeed: {outcomes}\n{}",
        String::from_utf8_lossy(&drain.stderr)
    );
    let seed_all: Vec<f64> = seed_before.iter().chain(&seed_after).copied().collect();
    let per_item = median(&secs[1..]);
    let seed_item = median(&seed_all);
    println!("load average:     {}", load_average());
    println!("outcomes:         {outcomes}");
    println!("drain:            {drain_secs:.2} s for {items} items");
    println!(
        "first item:       {:.3} s (clones and checks out the slot)",
        secs[0]
    );
    println!(
        "per item:         {per_item:.3} s nightshift (median of items 2..{items}: {})",
        secs[1..]
            .iter()
            .map(|s| format!("{s:.2}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "                  {seed_item:.3} s the seed's in-place flow (median of {} runs, before and after)",
        seed_all.len()
    );
    println!(
        "ratio:            {:.2}× the seed flow (goal <= 1×; per item goal <= 1 s)",
        per_item / seed_item
    );
    if per_item > 1.0 || per_item > seed_item {
        std::process::exit(1);
    }
}

/// The 1, 5 and 15 minute load averages from `/proc/loadavg`.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
