//! Benchmark of the backlog parser (`nightshift::backlog::parse`) on big
//! backlogs: sections of 100 items each (a title with CJK and code, an
//! `accept:`, a `scope:`, a note and a lazy-looking checklist note; a glued
//! box and a code block per section), 2,500 to 20,000 items. The parse
//! must grow with the file, not with its square: each size's time is
//! printed beside the time per item and its ratio to the smallest size,
//! against a baseline measured in the same run on the same text — SHA-256
//! of it, which is linear by construction. A parser ratio well above the
//! baseline's is a quadratic step (4x the items taking 16x the time).
//!
//! This was a timed test (`backlog::parse_time_is_linear_in_the_number_of_items`,
//! which failed when 10,000 items took 10x the time of 2,500); timings
//! belong in a benchmark, where a loaded machine cannot fail the suite.
//!
//! Run: `cargo run --release --example bench_backlog [SECTIONS...]`
//! (default `25 50 100 200`: 2,500 to 20,000 items; each size is timed as
//! the best of 3 runs).

use std::path::Path;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// A backlog of `sections` sections of 100 open items each.
fn backlog(sections: usize) -> String {
    let mut text = String::from("# Big\n\n> rule\n\n");
    for s in 0..sections {
        text.push_str(&format!("## Section {s}\n\n> section rule\n\n- Group\n"));
        for i in 0..100 {
            text.push_str(&format!(
                "  - [ ] item {s}-{i} 中文 `code`\n    accept: works\n    scope: src/**\n    a note\n    -[ ] lazy-looking checklist note\n"
            ));
        }
        text.push_str("\n-[ ] a glued box\n\n```\nexample\n```\n\n");
    }
    text
}

/// The best of three runs of `f`.
fn best_of_3(mut f: impl FnMut()) -> Duration {
    (0..3)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .min()
        .expect("three runs")
}

fn main() {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("SECTIONS must be whole numbers"))
        .collect();
    let sizes = if sizes.is_empty() {
        vec![25, 50, 100, 200]
    } else {
        sizes
    };
    println!(
        "{:>7} {:>9} {:>10} {:>9} {:>7} | {:>10} {:>7}",
        "items", "bytes", "parse", "µs/item", "ratio", "sha256", "ratio"
    );
    let mut first: Option<(f64, f64, usize)> = None;
    for sections in sizes {
        let text = backlog(sections);
        let mut items = 0;
        let parse = best_of_3(|| {
            let b = nightshift::backlog::parse(Path::new("NEXT.md"), &text);
            items = b.items.len();
        });
        let hash = best_of_3(|| {
            std::hint::black_box(Sha256::digest(text.as_bytes()));
        });
        let (p, h) = (parse.as_secs_f64(), hash.as_secs_f64());
        let (p0, h0, n0) = *first.get_or_insert((p, h, items));
        // Ratios per item, so that a linear step reads 1.0 at every size.
        let scale = items as f64 / n0 as f64;
        println!(
            "{items:>7} {:>9} {:>8.1}ms {:>9.2} {:>7.2} | {:>8.2}ms {:>7.2}",
            text.len(),
            p * 1e3,
            p * 1e6 / items as f64,
            p / p0 / scale,
            h * 1e3,
            h / h0 / scale,
        );
    }
    println!(
        "ratio: time per item against the smallest size (1.0 = linear); the parser's should stay near the sha256 baseline's"
    );
}
