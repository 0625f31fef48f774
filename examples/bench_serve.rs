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
use std::process::Stdio;

#[path = "common/world.rs"]
mod world;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use world::{World, finish};

impl World {
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
