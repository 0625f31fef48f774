//! The sandbox's own cost per call (docs/security.md#the-sandbox): the same
//! `true` run through `process::run` with and without a sandbox, and the
//! difference per call — namespaces, the new root's mounts, Landlock and
//! seccomp, and their tear-down; no agent work — then with an allowed host
//! (the filtering proxy's listener made inside and served outside). Goal:
//! at most 50 ms.
//!
//! Run: `cargo run --example bench_sandbox [CALLS]` (default 30; the best
//! and the median of each are printed). Needs a kernel the sandbox can be
//! built on (`nightshift doctor` says); otherwise it says why and exits 2.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use nightshift::process::{self, Command};
use nightshift::sandbox::{Allow, Network, Policy, probe};
use tokio_util::sync::CancellationToken;

/// Times `calls` runs of `true`, without a sandbox (`None`) or with one
/// and that network; sorted.
async fn time(calls: usize, sandboxed: Option<Network>, slot: &std::path::Path) -> Vec<Duration> {
    let mut out = Vec::with_capacity(calls);
    for _ in 0..calls {
        let mut cmd = Command::new("true").cwd(slot).env("PATH", "/usr/bin:/bin");
        if let Some(network) = &sandboxed {
            cmd = cmd.sandbox(Policy {
                write: vec![slot.to_path_buf()],
                read: vec![],
                home: PathBuf::from("/home/sandbox"),
                home_files: vec![],
                home_dirs: vec![],
                network: network.clone(),
                tmp_size: None,
            });
        }
        let start = Instant::now();
        let o = process::run(cmd, &CancellationToken::new())
            .await
            .expect("true runs");
        assert_eq!(o.exit_code, Some(0), "true failed: {}", o.stderr_tail);
        out.push(start.elapsed());
    }
    out.sort();
    out
}

#[tokio::main]
async fn main() {
    let calls: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(30);
    if let Err(missing) = probe() {
        eprintln!("the sandbox cannot be built here: {missing}");
        std::process::exit(2);
    }
    let slot = tempfile::tempdir().expect("a temporary slot");
    let plain = time(calls, None, slot.path()).await;
    let boxed = time(calls, Some(Network::None), slot.path()).await;
    let mut allow = Allow::default();
    allow.add("example.org:443").expect("a host");
    let proxied = time(calls, Some(Network::Proxy(allow)), slot.path()).await;
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let median = |v: &[Duration]| v[v.len() / 2];
    println!("calls: {calls} each");
    println!(
        "without sandbox: best {:7.2} ms · median {:7.2} ms",
        ms(plain[0]),
        ms(median(&plain))
    );
    println!(
        "with sandbox:    best {:7.2} ms · median {:7.2} ms",
        ms(boxed[0]),
        ms(median(&boxed))
    );
    println!(
        "with the proxy:  best {:7.2} ms · median {:7.2} ms",
        ms(proxied[0]),
        ms(median(&proxied))
    );
    let cost = ms(median(&boxed)) - ms(median(&plain));
    println!("sandbox cost per call (median): {cost:7.2} ms (goal: at most 50 ms)");
    let cost = ms(median(&proxied)) - ms(median(&plain));
    println!("with the proxy (median):        {cost:7.2} ms (goal: at most 50 ms)");
}
