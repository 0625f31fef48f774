//! Several workers of one run against the limits that hold across all of
//! them (docs/workers.md#usage-limits-belong-to-an-account,
//! docs/workers.md#what-holds-across-all-workers): a usage limit one worker
//! hits pauses the account for the others, and the run's cost cap counts
//! every worker's calls. Real PostgreSQL, real git, the fake GitHub, the real
//! binary with `drain --jobs 2`; the workers are told apart by
//! `run_items.worker` (`host:pid:n`).
//!
//! The agents order themselves with `mkdir` markers (atomic): each call
//! takes the next free number `call-N` in a directory of the test's own, so
//! a script knows whether it is the night's first call, and a call can wait
//! until another worker's call has begun. No test waits on a wall-clock
//! figure of its own.

use std::path::Path;

use crate::common;

use common::github::FakeGitHub;
use common::{Fixture, assert_ok, text};

/// A reviewer that approves and reports a cost of $0.01 for its call.
const REVIEWER: &str = "#!/bin/sh\necho '{\"usage\":{\"cost_usd\":0.01}}'\necho '{\"verdict\":\"approve\",\"findings\":[]}'\n";

/// Shell lines that take this call's number: the first free `call-N` under
/// `dir`, made with `mkdir` (atomic, so two workers never take one number),
/// into `$n`.
fn take_number(dir: &Path) -> String {
    format!(
        "d={}\nn=1\nwhile ! mkdir \"$d/call-$n\" 2>/dev/null; do n=$((n+1)); done\n",
        dir.display()
    )
}

/// Shell lines that wait (at most 30 s) until call `$partner` has begun.
const WAIT_PARTNER: &str =
    "i=0\nwhile [ ! -d \"$d/call-$partner\" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done\n";

/// A fixture with the fake GitHub, the writer `writer` and [`REVIEWER`],
/// `extra` config lines and `items` items (`Item 1`, `Item 2`, …), planned
/// and approved.
async fn world(writer: &str, extra: &str, items: usize) -> (Fixture, FakeGitHub) {
    let gh = FakeGitHub::start().await;
    let mut f = Fixture::new();
    f.github = Some(gh.uri());
    f.token = Some("ghp_workers_token_0123456789ab".into());
    let w = f.agent("writer.sh", writer);
    let r = f.agent("reviewer.sh", REVIEWER);
    f.config_with(&w, &r, extra);
    let backlog: String = (1..=items).map(|i| format!("- [ ] Item {i}\n")).collect();
    f.write("NEXT.md", &backlog);
    let sha = f.plan_sha();
    assert_ok(&f.run(&["approve", &sha]), "approve");
    (f, gh)
}

/// The outcome of each item in backlog order.
fn outcomes(f: &Fixture) -> Vec<String> {
    f.db.sql("SELECT outcome FROM run_items ORDER BY item_index")
        .lines()
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_usage_limit_pauses_the_account_for_the_other_worker() {
    let marks = tempfile::tempdir().unwrap();
    // Call 1 (the night's first) waits until the other worker's writer has
    // begun (call 2), then, a second later, says the account's limit resets
    // 8 s from now. Every other call works 2 s: the other worker's writer
    // ends inside the pause, so its reviewer call falls in it.
    let writer = format!(
        "#!/bin/sh\nset -eu\n{take}if [ \"$n\" = 1 ]; then\n  partner=2\n{WAIT_PARTNER}  sleep 1\n  echo \"Claude AI usage limit reached|$(( $(date +%s) + 8 ))\" >&2\n  exit 1\nfi\nsleep 2\necho \"call $n\" > \"note-$n.txt\"\necho \"wrote note-$n.txt\"\n",
        take = take_number(marks.path()),
    );
    let limits = "[limits]\nrounds = 1\nlimit_buffer = \"1s\"\nlimit_sleep_min = \"1s\"\n";
    let (f, gh) = world(&writer, limits, 3).await;

    let out = f.run(&["drain", "--jobs", "2"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // A quota stop is no item's failure, nor an attempt: every item opened
    // its PR on its first attempt, in one round.
    assert_eq!(outcomes(&f), ["pr_opened"; 3], "{}", text(&out));
    assert_eq!(gh.prs().len(), 3);
    assert_eq!(
        f.db.sql("SELECT count(*), min(attempt), max(attempt), string_agg(DISTINCT end_reason, ',') FROM claims"),
        "3|1|1|finished"
    );
    assert_eq!(f.db.sql("SELECT count(*) FROM rounds"), "3");

    // One pause of the account, recorded by the worker whose call hit it.
    assert_eq!(f.db.sql("SELECT count(*) FROM account_pauses"), "1");
    let pause = f
        .db
        .sql("SELECT account, worker, extract(epoch FROM paused_until - at) FROM account_pauses");
    let cols: Vec<&str> = pause.split('|').collect();
    let (account, limited) = (cols[0], cols[1]);
    let secs: f64 = cols[2].parse().unwrap();
    assert_eq!(account, "command", "the account defaults to the agent kind");
    assert!(secs > 5.0, "the pause lasts until the reset: {secs} s");
    let workers =
        f.db.sql("SELECT string_agg(DISTINCT worker, ',') FROM run_items");
    let other: Vec<&str> = workers.split(',').filter(|w| *w != limited).collect();
    assert_eq!(other.len(), 1, "two workers ran items: {workers}");
    let other = other[0];

    // Inside [the pause's start, its end) no worker started a call: the
    // limited one slept, and so did the other.
    let inside = "(SELECT at FROM account_pauses) <= a.started_at AND a.started_at < (SELECT paused_until FROM account_pauses)";
    assert_eq!(
        f.db.sql(&format!(
            "SELECT count(*) FROM agent_calls a WHERE {inside}"
        )),
        "0",
        "calls: {}",
        f.db.sql("SELECT string_agg(a.role || ' ' || i.worker || ' ' || a.started_at, E'\\n' ORDER BY a.started_at) FROM agent_calls a JOIN run_items i ON i.id = a.run_item_id")
    );
    // The other worker was at work when the pause began (its writer) and
    // had a call to make before its end (its reviewer), which it made after.
    let calls_of = |w: &str, when: &str| {
        f.db.sql(&format!(
            "SELECT count(*) FROM agent_calls a JOIN run_items i ON i.id = a.run_item_id \
             WHERE i.worker = '{w}' AND {when}"
        ))
    };
    assert_eq!(
        calls_of(other, "a.started_at < (SELECT at FROM account_pauses)"),
        "1",
        "the other worker's writer began before the pause"
    );
    assert_ne!(
        calls_of(
            other,
            "a.role = 'reviewer' AND a.started_at >= (SELECT paused_until FROM account_pauses)"
        ),
        "0"
    );
    // Each worker recorded its own sleep, once: the limited one at the limit,
    // the other at the account's pause (until the pause's end).
    let sleeps = f.db.sql(&format!(
        "SELECT i.worker, count(*), max(s.slept_until) = (SELECT paused_until FROM account_pauses) \
         FROM limit_sleeps s JOIN run_items i ON i.id = s.run_item_id \
         WHERE s.kind = 'usage_limit' GROUP BY i.worker ORDER BY i.worker = '{other}'"
    ));
    let rows: Vec<&str> = sleeps.lines().collect();
    assert_eq!(
        rows,
        [format!("{limited}|1|t"), format!("{other}|1|t")],
        "limit_sleeps per worker"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_run_cost_cap_reached_by_two_workers_together_stops_both() {
    let marks = tempfile::tempdir().unwrap();
    // Each writer call costs $0.10 and waits for its partner call (1 with 2,
    // 3 with 4) to begin, so the two workers run items 1–2, then 3–4,
    // side by side. Each reviewer call costs $0.01.
    let writer = format!(
        "#!/bin/sh\nset -eu\n{take}if [ $((n % 2)) = 1 ]; then partner=$((n + 1)); else partner=$((n - 1)); fi\n{WAIT_PARTNER}echo \"call $n\" > \"note-$n.txt\"\necho '{{\"usage\":{{\"input_tokens\":100,\"output_tokens\":10,\"cost_usd\":0.1}}}}'\n",
        take = take_number(marks.path()),
    );
    // Items 1 and 2 spend $0.22 together, under the cap; items 3 and 4 take
    // the run over it ($0.42), though neither worker alone spent more than
    // $0.21. Items 5 and 6 are not started.
    let cap = 0.25;
    let limits = format!("[limits]\nrounds = 1\nmax_cost_usd_per_run = {cap}\n");
    let (f, gh) = world(&writer, &limits, 6).await;

    let out = f.run(&["drain", "--jobs", "2"]);
    // budget_exceeded is a failure outcome: exit 1 (docs/commands.md#exit-codes).
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(
        outcomes(&f),
        [
            "pr_opened",
            "pr_opened",
            "budget_exceeded",
            "budget_exceeded",
            "budget_exceeded",
            "budget_exceeded"
        ],
        "{}",
        text(&out)
    );
    assert_eq!(gh.prs().len(), 2);
    assert_eq!(f.db.sql("SELECT status FROM runs"), "completed");

    // Both workers stopped at the cap: items 3 and 4 ran on one each.
    let stopped =
        f.db.sql("SELECT count(DISTINCT worker) FROM run_items WHERE item_index IN (3, 4)");
    assert_eq!(
        stopped,
        "2",
        "items 3 and 4 ran on different workers:\n{}\n{}",
        f.db.sql("SELECT item_index, worker, outcome, reason, started_at, ended_at FROM run_items ORDER BY item_index"),
        f.db.sql("SELECT i.item_index, a.role, a.cost_usd, a.started_at, a.duration_ms FROM agent_calls a JOIN run_items i ON i.id = a.run_item_id ORDER BY a.id")
    );
    assert_eq!(
        f.db.sql("SELECT count(*) FROM agent_calls WHERE role = 'writer'"),
        "4",
        "items 5 and 6 made no call"
    );
    // The cap counts every worker's spending: the run's sum is over it,
    // each worker's own is not.
    let per_worker: Vec<f64> = f
        .db
        .sql("SELECT sum(a.cost_usd) FROM agent_calls a JOIN run_items i ON i.id = a.run_item_id GROUP BY i.worker")
        .lines()
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(per_worker.len(), 2, "{per_worker:?}");
    let total: f64 = per_worker.iter().sum();
    assert!(total > cap, "the run spent ${total}");
    assert!(
        per_worker.iter().all(|w| *w <= cap),
        "no worker alone reached the cap: {per_worker:?}"
    );
    let reasons = f
        .db
        .sql("SELECT string_agg(DISTINCT reason, E'\\n') FROM run_items WHERE outcome = 'budget_exceeded'");
    assert!(
        reasons.contains("max_cost_usd_per_run") || reasons.contains("cost cap"),
        "{reasons}"
    );
}
