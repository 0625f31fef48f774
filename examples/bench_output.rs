//! Benchmark of the process runner's output path: a child prints 100 MB of
//! lines, which `nightshift::process::run` streams through the redactor into
//! files, a 16 KiB tail and a line callback. Prints the runner's peak RSS
//! (`VmHWM` of /proc/self/status) and the throughput. The target is a peak
//! RSS of at most 64 MB: output is never held whole in memory.
//!
//! Run: `cargo run --example bench_output [BYTES]` (default 100,000,000).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nightshift::process::{Command, child_env, run};
use nightshift::secret::Redactor;
use tokio_util::sync::CancellationToken;

/// Peak resident set size of this process in kB, from `/proc/self/status`.
fn peak_rss_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/self/status")
}

#[tokio::main]
async fn main() {
    let bytes: u64 = std::env::args()
        .nth(1)
        .map(|arg| arg.parse().expect("BYTES must be a number"))
        .unwrap_or(100_000_000);
    let dir = tempfile::tempdir().expect("temp dir");
    let stdout_path = dir.path().join("stdout.log");
    let stderr_path = dir.path().join("stderr.log");
    let rss_before = peak_rss_kb();

    let lines = Arc::new(AtomicU64::new(0));
    let line_bytes = Arc::new(AtomicU64::new(0));
    let (count, sum) = (Arc::clone(&lines), Arc::clone(&line_bytes));
    // A stream-json-like line with a secret in it, so the redactor works.
    let line = r#"{"type":"assistant","message":{"content":[{"type":"text","text":"token ghp_benchSecretValue123 here"}]}}"#;
    let cmd = Command::shell(format!("yes '{line}' | head -c {bytes}"))
        .env_map(child_env(std::env::vars(), &[]))
        .timeout(Duration::from_secs(600))
        .stdout_file(&stdout_path)
        .stderr_file(&stderr_path)
        .redactor(Redactor::new(["ghp_benchSecretValue123"]))
        .on_stdout_line(move |line| {
            count.fetch_add(1, Ordering::Relaxed);
            sum.fetch_add(line.len() as u64, Ordering::Relaxed);
        });

    let started = Instant::now();
    let outcome = run(cmd, &CancellationToken::new()).await.expect("run");
    let elapsed = started.elapsed();
    let file_len = std::fs::metadata(&stdout_path).expect("stdout file").len();
    let peak_kb = peak_rss_kb();

    assert!(outcome.success(), "child failed: {outcome:?}");
    assert_eq!(outcome.stdout_bytes, bytes, "byte count");
    let mb = outcome.stdout_bytes as f64 / 1e6;
    println!(
        "child output:     {} bytes, {} lines seen by the callback",
        outcome.stdout_bytes,
        lines.load(Ordering::Relaxed)
    );
    println!("stdout file:      {file_len} bytes (redacted)");
    println!("tail kept:        {} bytes", outcome.stdout_tail.len());
    println!("elapsed:          {:.2} s", elapsed.as_secs_f64());
    println!("throughput:       {:.1} MB/s", mb / elapsed.as_secs_f64());
    println!("peak RSS before:  {:.1} MB", rss_before as f64 / 1024.0);
    println!(
        "peak RSS (VmHWM): {:.1} MB (target <= 64 MB)",
        peak_kb as f64 / 1024.0
    );
    if peak_kb > 64 * 1024 {
        eprintln!("peak RSS above the 64 MB target");
        std::process::exit(1);
    }
}
