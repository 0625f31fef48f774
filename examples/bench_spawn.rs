//! What starting one child costs a busy worker (docs/security.md#processes,
//! README "Performance"): `true` run through `process::run` (its own
//! supervisor, the cleared environment, the streams) from a process that
//! holds a heap the size of a worker's and keeps runtime threads busy, against
//! the baseline of the same `true` started with `std::process::Command`
//! (`posix_spawn`, no supervisor) in the same run. Prints per call the
//! median wall time and the CPU time of this process and of its children
//! (`getrusage`), which is what 200 workers on two cores compete for.
//!
//! Run: `cargo run --release --example bench_spawn [CALLS] [HEAP_MB]`
//! (defaults 200 and 256).

use std::time::{Duration, Instant};

use nightshift::process::{self, Command};
use tokio_util::sync::CancellationToken;

/// CPU time used so far by this process (`RUSAGE_SELF`) or by its waited-for
/// descendants (`RUSAGE_CHILDREN`).
fn cpu(who: libc::c_int) -> Duration {
    // SAFETY: getrusage fills the zeroed structure it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(who, &mut usage);
        usage
    };
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// One way of starting `true`, timed over `calls` runs: (median wall, CPU
/// per call of this process, of its children).
struct Figures {
    wall: Duration,
    own: Duration,
    children: Duration,
}

async fn measure<F, Fut>(calls: u32, mut start: F) -> Figures
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let (own, children) = (cpu(libc::RUSAGE_SELF), cpu(libc::RUSAGE_CHILDREN));
    let mut walls = Vec::new();
    for _ in 0..calls {
        let at = Instant::now();
        start().await;
        walls.push(at.elapsed());
    }
    walls.sort();
    Figures {
        wall: walls[walls.len() / 2],
        own: (cpu(libc::RUSAGE_SELF) - own) / calls,
        children: (cpu(libc::RUSAGE_CHILDREN) - children) / calls,
    }
}

fn print(name: &str, f: &Figures) {
    println!(
        "{name:<28} wall p50 {:>6.2} ms   CPU this process {:>6.2} ms   children {:>6.2} ms",
        f.wall.as_secs_f64() * 1e3,
        f.own.as_secs_f64() * 1e3,
        f.children.as_secs_f64() * 1e3,
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let calls: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(200);
    let heap_mb: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(256);
    // A worker's heap, written (a fork would copy its page tables and
    // fault on each page written after it).
    let heap = vec![1u8; heap_mb << 20];
    // Runtime threads that keep writing to the heap meanwhile, as a
    // worker's do.
    let stop = CancellationToken::new();
    let mut busy = Vec::new();
    for t in 0..2 {
        let stop = stop.clone();
        let mut mine = vec![0u8; 16 << 20];
        busy.push(tokio::spawn(async move {
            let mut i = t;
            while !stop.is_cancelled() {
                for b in mine.iter_mut().step_by(4096) {
                    *b = b.wrapping_add(1);
                }
                i += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            i
        }));
    }
    println!("{calls} calls of `true`, this process holding {heap_mb} MB");
    let plain = measure(calls, || async {
        let status = tokio::process::Command::new("true")
            .status()
            .await
            .expect("true starts");
        assert!(status.success());
    })
    .await;
    print("baseline (posix_spawn)", &plain);
    let run = measure(calls, || async {
        let cmd = Command::new("true").env("PATH", "/usr/bin:/bin");
        let o = process::run(cmd, &CancellationToken::new())
            .await
            .expect("true runs");
        assert_eq!(o.exit_code, Some(0), "true failed: {}", o.stderr_tail);
    })
    .await;
    print("process::run (supervised)", &run);
    let cpu = |f: &Figures| f.own + f.children;
    println!(
        "process::run costs {:.2} ms of CPU per call more than the baseline ({:.1}x)",
        (cpu(&run).as_secs_f64() - cpu(&plain).as_secs_f64()) * 1e3,
        cpu(&run).as_secs_f64() / cpu(&plain).as_secs_f64().max(1e-9),
    );
    stop.cancel();
    for b in busy {
        let _ = b.await;
    }
    assert_eq!(heap[heap.len() - 1], 1);
}
