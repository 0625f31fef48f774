//! Benchmarks of several workers draining one plan (docs/workers.md,
//! issue 9), by the real release binary against the real PostgreSQL
//! (`DATABASE_URL`), with a local bare remote and no GitHub. Each item's
//! writer is a `command` agent that sleeps a fixed time and writes one file
//! of its own; the gate is `true` and the reviewer approves at once, so the
//! agent's time is the item's work and what is left is nightshift's.
//!
//! - **P4**: `drain --jobs 4`, 16 items whose agent takes 10 s: the wall
//!   time of the drain against the ideal 40 s (16 × 10 s / 4). Goal <= 1.15×.
//! - **P6**: 20 items whose agent takes 5 s, drained by two processes on one
//!   ledger — a `drain` and a `nightshift worker` in a second clone with its
//!   own data directory, started once the run is live — against the same
//!   plan drained by one process alone. Goal <= 0.55×, with each item run
//!   exactly once (one claim, one writer call), and both processes running
//!   items.
//!
//! - **S** (`scale [PROCESSES JOBS ITEMS]`, issue 27; default 10 20 2000):
//!   a `drain` and PROCESSES − 1 `worker`s, each in its own clone and data
//!   directory and each with `--jobs JOBS`, drain ITEMS items of an agent that
//!   does no work. Prints items per second, claim latency p50/p99 (each
//!   claim as its worker timed it, from the run logs' `claim_ms`, and its
//!   parts: waiting for the claim line, the statements, the commit; beside
//!   it the hand-over from one claim's end to the next), the server's peak
//!   connections to the ledger and what they were doing (`pg_stat_activity`
//!   — state, wait event, statement — sampled every 100 ms), the statements
//!   by total server time where the server loads `pg_stat_statements`, the
//!   events written, the plan of the claim's SELECT on the drained queue,
//!   the dead tuples left on the queue tables and whether every item ran
//!   exactly once with one PR row. Goals: each item once; <= 50 connections;
//!   claim p99 <= 100 ms. **S-kill** (`scale-kill …`): the same with a lease
//!   of 5 s while a random worker process is killed (`kill -9`) every 10 s.
//!   To compare two builds, run each (`NIGHTSHIFT_BIN`) back to back.
//!
//! Every scenario has its own repository, remote, data directories and
//! scratch database (created on the `DATABASE_URL` server and dropped).
//!
//! Run: `cargo build --release && cargo run --release --example bench_workers [p4|p6|all|scale|scale-kill]`
//! (default `all`; the binary is `target/release/nightshift`, or
//! `NIGHTSHIFT_BIN`). Exits 1 when a goal is missed.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

#[path = "common/world.rs"]
mod world;
use world::{Db, World, finish};

/// Where the time beyond the agent's went, from the ledger: before the
/// first item, per item (its time less the agent's `agent_secs`), between
/// one worker's items, and after the last (seconds).
fn breakdown(db: &Db, wall: f64, agent_secs: u64) -> String {
    let row = db.sql(&format!(
        "WITH i AS (SELECT worker, started_at, ended_at, extract(epoch FROM ended_at - started_at) - {agent_secs} AS extra, \
                      extract(epoch FROM started_at - lag(ended_at) OVER (PARTITION BY worker ORDER BY started_at)) AS gap FROM run_items), \
              r AS (SELECT min(started_at) AS s, max(ended_at) AS e FROM runs) \
         SELECT round(extract(epoch FROM (SELECT min(started_at) FROM i) - (SELECT s FROM r))::numeric, 2), \
                round((percentile_cont(0.5) WITHIN GROUP (ORDER BY extra))::numeric, 2), round(max(extra)::numeric, 2), \
                round(coalesce(max(gap), 0)::numeric, 2), \
                round(extract(epoch FROM (SELECT e FROM r) - (SELECT max(ended_at) FROM i))::numeric, 2), \
                round(extract(epoch FROM (SELECT e FROM r) - (SELECT s FROM r))::numeric, 2), \
                (SELECT round((percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_ms))::numeric / 1000, 2) FROM agent_calls WHERE role = 'writer') \
         FROM i"
    ));
    let c: Vec<&str> = row.split('|').collect();
    format!(
        "    run row {} s of {wall:.1} s wall; first item after {} s; per item beyond the agent: median {} s, max {} s (writer call median {} s); longest gap between a worker's items {} s; run ended {} s after the last item",
        c[5], c[0], c[1], c[2], c[6], c[3], c[4]
    )
}

/// P4: `drain --jobs 4` on 16 items of a 10 s agent; returns the ratio to the
/// ideal 40 s.
fn p4() -> f64 {
    let (items, secs, jobs) = (16, 10, 4);
    let w = World::new("p4", items, secs, "");
    let t = Instant::now();
    let drain = w.start_drain(&["--jobs", "4"]);
    finish(drain, "drain --jobs 4");
    let wall = t.elapsed().as_secs_f64();
    w.check_each_once(items);
    let ideal = (items as u64 * secs / jobs) as f64;
    let ratio = wall / ideal;
    println!(
        "P4  drain --jobs {jobs}, {items} items × {secs} s agent: {wall:.1} s wall, ideal {ideal:.0} s -> {ratio:.2}× (goal <= 1.15×)"
    );
    println!("{}", breakdown(&w.db, wall, secs));
    ratio
}

/// P6: 20 items of a 5 s agent, one process alone, then a `drain` and a
/// `worker` on one ledger; returns the ratio of the two wall times.
fn p6() -> f64 {
    let (items, secs) = (20, 5);
    let alone = World::new("p6a", items, secs, "");
    let t = Instant::now();
    finish(alone.start_drain(&[]), "drain (alone)");
    let one = t.elapsed().as_secs_f64();
    alone.check_each_once(items);
    println!("P6  baseline: one process, {items} items × {secs} s agent: {one:.1} s wall");
    println!("{}", breakdown(&alone.db, one, secs));

    let w = World::new("p6b", items, secs, "");
    let clone = w.second_clone();
    let t = Instant::now();
    let drain = w.start_drain(&[]);
    // The worker joins once the drain's run is live (its queue filled).
    w.wait_live(items);
    let joined = t.elapsed().as_secs_f64();
    w.share_key("data2");
    let worker = w
        .cmd(&clone, "data2", &["worker"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("worker starts");
    finish(drain, "drain (with a worker)");
    let drained = t.elapsed().as_secs_f64();
    finish(worker, "worker");
    let two = t.elapsed().as_secs_f64();
    let processes = w.check_each_once(items);
    let by_pid = w.db.sql(
        "SELECT string_agg(n::text, ' + ') FROM (SELECT count(*) AS n FROM run_items GROUP BY split_part(worker, ':', 2) ORDER BY min(started_at)) t",
    );
    assert_eq!(processes, 2, "both processes ran items ({by_pid})");
    let ratio = two / one;
    println!(
        "P6  drain + worker (second clone, own data dir), one ledger: {two:.1} s wall (drain done at {drained:.1} s, worker started at {joined:.1} s; items {by_pid}), each item once -> {ratio:.2}× one process (goal <= 0.55×)"
    );
    println!("{}", breakdown(&w.db, two, secs));
    ratio
}

/// The soak of issue 27: `processes` processes (a `drain` and
/// `processes − 1` workers, each in its own clone and data directory) each
/// with `--jobs jobs`, on `items` items of an agent that does no work.
struct Soak {
    processes: usize,
    jobs: usize,
    items: usize,
    /// Kill a random worker process (not the drain) every 10 s.
    kill: bool,
}

impl Soak {
    /// From `scale [PROCESSES JOBS ITEMS]` (default 10 20 2000).
    fn from_args(args: &[String], kill: bool) -> Soak {
        let n = |i: usize, d: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
        Soak {
            processes: n(0, 10).max(1),
            jobs: n(1, 20).max(1),
            items: n(2, 2000).max(1),
            kill,
        }
    }
}

/// What the sampler saw of the server while the soak ran: the peak of
/// connections to the bench database, and how often a connection was found
/// in each state (`state`, wait event, the statement's first words).
#[derive(Default)]
struct Sampled {
    peak: usize,
    samples: usize,
    seen: std::collections::HashMap<String, usize>,
}

/// Samples the server's connections to the bench database
/// (`pg_stat_activity`) every 100 ms until `stop`.
fn sample_server(db: &Db, stop: &std::sync::atomic::AtomicBool) -> Sampled {
    let q = format!(
        "SELECT coalesce(state, '?') || ' | ' || coalesce(wait_event_type || ':' || wait_event, 'on CPU') || ' | ' || \
                left(regexp_replace(query, '\\s+', ' ', 'g'), 60) FROM pg_stat_activity WHERE datname = '{}'",
        db.name
    );
    let mut s = Sampled::default();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let rows = db.sql(&q);
        let rows: Vec<&str> = rows.lines().filter(|l| !l.is_empty()).collect();
        s.peak = s.peak.max(rows.len());
        s.samples += 1;
        for row in rows.into_iter().filter(|r| !r.starts_with("idle |")) {
            *s.seen.entry(row.to_string()).or_default() += 1;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    s
}

impl Sampled {
    /// The busiest states, each as the mean number of connections found in
    /// it per sample (idle connections left out).
    fn busiest(&self, n: usize) -> String {
        let mut rows: Vec<(&String, &usize)> = self.seen.iter().collect();
        rows.sort_by(|a, b| b.1.cmp(a.1));
        let per = self.samples.max(1) as f64;
        rows.into_iter()
            .take(n)
            .map(|(k, c)| format!("    {:5.2}  {k}", *c as f64 / per))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// S (and S-kill): the soak; returns whether its goals held (each item
/// once, at most 50 server connections, claim p99 <= 100 ms).
fn soak(s: &Soak) -> bool {
    let extra = if s.kill { "lease = \"5s\"\n" } else { "" };
    let w = World::new(if s.kill { "soakk" } else { "soak" }, s.items, 0, extra);
    let jobs = s.jobs.to_string();
    let clones: Vec<(PathBuf, String)> = (2..=s.processes)
        .map(|n| (w.clone_n(n), format!("data{n}")))
        .collect();
    let log = |name: &str| std::fs::File::create(w.root.join(name)).expect("log file");
    let stop = std::sync::atomic::AtomicBool::new(false);
    // The server's statement statistics from here on, where it keeps them
    // (`pg_stat_statements` loaded; the figures name this database only).
    let _ =
        w.db.try_sql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements");
    let _ = w.db.try_sql(
        "SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database WHERE datname = current_database()), 0)",
    );
    let t = Instant::now();
    let (sampled, kills, wall, drained) = std::thread::scope(|scope| {
        let sampler = scope.spawn(|| sample_server(&w.db, &stop));
        let deadline = (chrono::Utc::now() + chrono::Duration::hours(12))
            .format("%H:%M")
            .to_string();
        let mut drain = w
            .cmd(
                &w.repo,
                "data",
                &["drain", "--deadline", &deadline, "--jobs", &jobs, "--quiet"],
            )
            .stdout(log("drain.out"))
            .stderr(log("drain.err"))
            .spawn()
            .expect("drain starts");
        w.wait_live(s.items);
        let mut workers: Vec<std::process::Child> = (clones.iter().enumerate())
            .map(|(i, (clone, data))| {
                w.share_key(data);
                w.cmd(clone, data, &["worker", "--jobs", &jobs])
                    .stdout(log(&format!("worker{i}.out")))
                    .stderr(log(&format!("worker{i}.err")))
                    .spawn()
                    .expect("worker starts")
            })
            .collect();
        let (mut kills, mut next_kill) = (0, Instant::now() + Duration::from_secs(10));
        let drained = loop {
            if let Some(status) = drain.try_wait().expect("drain") {
                break status;
            }
            if s.kill && Instant::now() >= next_kill && !workers.is_empty() {
                let victim = (t.elapsed().as_nanos() as usize) % workers.len();
                let mut child = workers.swap_remove(victim);
                let _ = child.kill();
                let _ = child.wait();
                kills += 1;
                next_kill += Duration::from_secs(10);
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        let wall = t.elapsed().as_secs_f64();
        for mut child in workers {
            let _ = child.wait();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        (sampler.join().expect("sampler"), kills, wall, drained)
    });
    if !drained.success() {
        let err = std::fs::read_to_string(w.root.join("drain.err")).unwrap_or_default();
        println!(
            "S   the drain failed ({drained}): {}",
            err.lines().rev().take(20).collect::<Vec<_>>().join("\n")
        );
        return false;
    }
    report_soak(&w, s, &sampled, kills, wall)
}

/// Prints the soak's figures from the ledger and the sampled server; returns
/// whether the goals held.
fn report_soak(w: &World, s: &Soak, sampled: &Sampled, kills: usize, wall: f64) -> bool {
    let peak = sampled.peak;
    let n = |q: &str| -> usize { w.db.sql(q).parse().unwrap_or(usize::MAX) };
    let ended = n(
        "SELECT count(DISTINCT item_key) FROM run_items WHERE outcome IN ('branch_pushed', 'pr_opened')",
    );
    let rows = n("SELECT count(*) FROM run_items WHERE outcome IN ('branch_pushed', 'pr_opened')");
    let prs = n("SELECT count(*) FROM pull_requests");
    let prs_per_item = n("SELECT count(DISTINCT item_key) FROM pull_requests");
    let once = ended == s.items && rows == s.items && prs == s.items && prs_per_item == s.items;
    // The claim's latency as each worker saw it (a pooled connection, then
    // the claim's transaction): `claim_ms` of the processes' run logs, and
    // its parts.
    // Each worker's first claim (the start of the night, when every worker
    // of every process asks at once while the processes start) apart from
    // the rest, by the item it claimed.
    let first: std::collections::HashSet<String> =
        w.db.sql(
            "SELECT string_agg(item_key, ' ') FROM claims c \
             WHERE claimed_at = (SELECT min(claimed_at) FROM claims d WHERE d.worker = c.worker)",
        )
        .split_whitespace()
        .map(String::from)
        .collect();
    let logged = claim_latency(&w.root, &first);
    let (p50, p99) = logged.first().map_or((f64::NAN, f64::NAN), |l| (l.1, l.2));
    // A worker's hand-over: from the end of its last claim to its next one
    // (the item's bookkeeping, the stop checks and the claim), from the ledger.
    let gap = w.db.sql(
        "WITH c AS (SELECT claimed_at - lag(ended_at) OVER (PARTITION BY worker ORDER BY claimed_at) AS gap FROM claims) \
         SELECT round(extract(epoch FROM percentile_cont(0.5) WITHIN GROUP (ORDER BY gap)) * 1000) || ' ms, p99 ' || \
                round(extract(epoch FROM percentile_cont(0.99) WITHIN GROUP (ORDER BY gap)) * 1000) || ' ms' FROM c WHERE gap IS NOT NULL",
    );
    let dead = w.db.sql("SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables WHERE relname IN ('claims', 'run_queue', 'workers')");
    let claims = n("SELECT count(*) FROM claims");
    println!(
        "S{}  {} process(es) × --jobs {}, {} items of an agent that does no work: {wall:.1} s wall, {:.1} items/s; \
         claim latency p50 {p50:.1} ms, p99 {p99:.1} ms (goal <= 100 ms; hand-over p50 {gap}); peak server connections {peak} (goal <= 50); \
         dead tuples on claims/run_queue/workers at the end {dead}; {claims} claims{}; each item once with one PR: {}",
        if s.kill { "-kill" } else { "" },
        s.processes,
        s.jobs,
        s.items,
        s.items as f64 / wall,
        if s.kill {
            format!(", {kills} worker process(es) killed")
        } else {
            String::new()
        },
        if once { "yes" } else { "NO" },
    );
    for (field, p50, p99) in &logged {
        println!("    {field:>34}: p50 {p50:7.1} ms, p99 {p99:7.1} ms");
    }
    println!(
        "    the server's connections to the ledger, mean per sample ({} samples, idle ones left out): state | wait event | statement\n{}",
        sampled.samples,
        sampled.busiest(14)
    );
    if let Some(top) = w.db.try_sql(&format!(
        "SELECT lpad(calls::text, 7) || ' calls ' || lpad(round(mean_exec_time::numeric, 1)::text, 8) || ' ms mean ' || \
                lpad(round(max_exec_time::numeric)::text, 6) || ' ms max ' || lpad(round(total_exec_time::numeric / 1000, 1)::text, 7) || ' s  ' || \
                left(regexp_replace(query, '\\s+', ' ', 'g'), 90) \
         FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = '{}' \
         ORDER BY total_exec_time DESC LIMIT 14",
        w.db.name
    )) {
        println!("    pg_stat_statements, by total time:\n{}", indent(&top));
    }
    let events = w.db.sql(
        "SELECT string_agg(kind || ' ' || n, ', ' ORDER BY n DESC) FROM (SELECT kind, count(*) AS n FROM events GROUP BY kind) e",
    );
    println!("    events written: {events}");
    // The claim's SELECT once every item is done: it passes every row of
    // the queue, the most a claim of this run ever reads.
    let plan = w.db.sql(
        "BEGIN; EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT q.position, q.item_key, q.contract_sha FROM run_queue q \
         WHERE q.run_id = (SELECT id FROM runs LIMIT 1) AND q.done_at IS NULL \
           AND NOT EXISTS (SELECT 1 FROM claims c WHERE c.run_id = q.run_id AND c.item_key = q.item_key AND c.ended_at IS NULL) \
         ORDER BY q.position FOR UPDATE SKIP LOCKED LIMIT 1; ROLLBACK",
    );
    println!(
        "    the claim's SELECT on the drained queue:\n{}",
        indent(&plan)
    );
    once && peak <= 50 && p99 <= 100.0
}

/// `text`'s lines, each indented by six spaces.
fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("      {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The fields of a `claimed` line of a run log: the claim's latency and its
/// parts ([`nightshift::queue::ClaimTimes`]).
const CLAIM_FIELDS: [&str; 3] = ["claim_ms", "acquire_ms", "statements_ms"];

/// p50 and p99 (ms) of each of [`CLAIM_FIELDS`] the processes under `root`
/// logged (their run logs, `data*/logs/run-*.jsonl`): (field, p50, p99),
/// a field none logged left out; then `claim_ms` of the claims of the
/// items in `first` (each worker's first) and of the others.
fn claim_latency(
    root: &Path,
    first: &std::collections::HashSet<String>,
) -> Vec<(&'static str, f64, f64)> {
    let mut ms: Vec<Vec<f64>> = vec![Vec::new(); CLAIM_FIELDS.len() + 2];
    for data in std::fs::read_dir(root).into_iter().flatten().flatten() {
        for log in std::fs::read_dir(data.path().join("logs"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let text = std::fs::read_to_string(log.path()).unwrap_or_default();
            for line in text.lines().filter(|l| l.contains("claim_ms")) {
                let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                    continue;
                };
                for (i, f) in CLAIM_FIELDS.iter().enumerate() {
                    ms[i].extend(v["fields"][f].as_f64());
                }
                let item = v["fields"]["item"].as_str().unwrap_or_default();
                let at = CLAIM_FIELDS.len() + usize::from(!first.contains(item));
                ms[at].extend(v["fields"]["claim_ms"].as_f64());
            }
        }
    }
    let names = CLAIM_FIELDS.into_iter().chain([
        "claim_ms, a worker's first claim",
        "claim_ms, every later claim",
    ]);
    let mut out = Vec::new();
    for (f, mut ms) in names.zip(ms) {
        if ms.is_empty() {
            continue;
        }
        ms.sort_by(f64::total_cmp);
        let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
        out.push((f, at(0.5), at(0.99)));
    }
    out
}

fn main() {
    let which = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    println!("load average: {}", load_average());
    let mut missed = false;
    if matches!(which.as_str(), "p4" | "all") {
        missed |= p4() > 1.15;
    }
    if matches!(which.as_str(), "p6" | "all") {
        missed |= p6() > 0.55;
    }
    if matches!(which.as_str(), "scale" | "scale-kill") {
        let rest: Vec<String> = std::env::args().skip(2).collect();
        missed |= !soak(&Soak::from_args(&rest, which == "scale-kill"));
    }
    println!("load average: {}", load_average());
    if missed {
        std::process::exit(1);
    }
}

/// The 1, 5 and 15 minute load averages from `/proc/loadavg`.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
