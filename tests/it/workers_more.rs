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

use std::collections::BTreeMap;

use crate::common;

use common::{Night, Table, text};

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

/// A night of `items` open items (`Item 1` …), approved, with the fake
/// GitHub, the writer `writer`, [`REVIEWER`] and `extra` config, drained by
/// two workers.
fn two_workers<'a>(writer: &str, extra: &str, items: usize) -> Night<'a> {
    Night::new()
        .github_api_only()
        .token("ghp_workers_token_0123456789ab")
        .writer(writer)
        .reviewer(REVIEWER)
        .config(extra)
        .items((1..=items).map(|i| format!("Item {i}")))
        .approved()
        .drain(&["--jobs", "2"])
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
    // The marks are the calls' to write (docs/config.md#sandbox).
    let limits = format!(
        "[limits]\nrounds = 1\nlimit_buffer = \"1s\"\nlimit_sleep_min = \"1s\"\n[sandbox]\nwrite = [\"{}\"]\n",
        marks.path().display()
    );
    let f = two_workers(&writer, &limits, 3).exit(0).run().await;
    let out = f.out();
    // A quota stop is no item's failure, nor an attempt: every item opened
    // its PR on its first attempt, in one round.
    assert_eq!(f.db.outcomes(), ["pr_opened"; 3], "{}", text(out));
    assert_eq!(f.gh().prs().len(), 3);
    let claims = f.db.claims();
    assert_eq!(claims.len(), 3, "{claims:?}");
    assert!(
        claims
            .iter()
            .all(|c| c.attempt == 1 && c.end_reason.as_deref() == Some("finished")),
        "{claims:?}"
    );
    assert_eq!(f.db.count(Table::Rounds), 3);

    // One pause of the account, recorded by the worker whose call hit it.
    let pauses = f.db.pauses();
    assert_eq!(pauses.len(), 1, "{pauses:?}");
    let pause = &pauses[0];
    let limited = pause.worker.as_str();
    let secs = (pause.paused_until - pause.at).num_milliseconds() as f64 / 1000.0;
    assert_eq!(
        pause.account, "command",
        "the account defaults to the agent kind"
    );
    assert!(secs > 5.0, "the pause lasts until the reset: {secs} s");
    let mut workers: Vec<String> = f.db.items().into_iter().filter_map(|i| i.worker).collect();
    workers.sort();
    workers.dedup();
    let other: Vec<&str> = workers
        .iter()
        .map(String::as_str)
        .filter(|w| *w != limited)
        .collect();
    assert_eq!(other.len(), 1, "two workers ran items: {workers:?}");
    let other = other[0];

    // Inside [the pause's start, its end) no worker started a call: the
    // limited one slept, and so did the other.
    let calls = f.db.calls();
    let inside =
        |c: &&common::rows::Call| pause.at <= c.started_at && c.started_at < pause.paused_until;
    assert_eq!(calls.iter().filter(inside).count(), 0, "calls: {calls:#?}");
    // The other worker was at work when the pause began (its writer) and
    // had a call to make before its end (its reviewer), which it made after.
    let of_other = || calls.iter().filter(|c| c.worker.as_deref() == Some(other));
    assert_eq!(
        of_other().filter(|c| c.started_at < pause.at).count(),
        1,
        "the other worker's writer began before the pause"
    );
    assert_ne!(
        of_other()
            .filter(|c| c.role == "reviewer" && c.started_at >= pause.paused_until)
            .count(),
        0
    );
    // Each worker recorded its own sleep, once: the limited one at the limit,
    // the other at the account's pause (until the pause's end).
    let mut sleeps: BTreeMap<String, Vec<bool>> = BTreeMap::new();
    for s in
        f.db.sleeps()
            .into_iter()
            .filter(|s| s.kind == "usage_limit")
    {
        if let Some(w) = s.worker {
            sleeps
                .entry(w)
                .or_default()
                .push(s.slept_until == pause.paused_until);
        }
    }
    let per_worker = |w: &str| {
        let v = sleeps.get(w).cloned().unwrap_or_default();
        (v.len(), v.iter().all(|b| *b))
    };
    assert_eq!(
        [per_worker(limited), per_worker(other)],
        [(1, true), (1, true)],
        "limit_sleeps per worker: {sleeps:?}"
    );
    assert_eq!(sleeps.len(), 2, "limit_sleeps per worker: {sleeps:?}");
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
    // The marks are the calls' to write (docs/config.md#sandbox).
    let limits = format!(
        "[limits]\nrounds = 1\nmax_cost_usd_per_run = {cap}\n[sandbox]\nwrite = [\"{}\"]\n",
        marks.path().display()
    );
    // budget_exceeded is a failure outcome: exit 1 (docs/commands.md#exit-codes).
    let f = two_workers(&writer, &limits, 6).exit(1).run().await;
    let out = f.out();
    assert_eq!(
        f.db.outcomes(),
        [
            "pr_opened",
            "pr_opened",
            "budget_exceeded",
            "budget_exceeded",
            "budget_exceeded",
            "budget_exceeded"
        ],
        "{}",
        text(out)
    );
    assert_eq!(f.gh().prs().len(), 2);
    assert_eq!(f.db.statuses(), ["completed"]);

    // Both workers stopped at the cap: items 3 and 4 ran on one each.
    let items = f.db.items();
    let mut stopped: Vec<_> = items
        .iter()
        .filter(|i| matches!(i.item_index, 3 | 4))
        .map(|i| i.worker.clone())
        .collect();
    stopped.dedup();
    assert_eq!(
        stopped.len(),
        2,
        "items 3 and 4 ran on different workers:\n{items:#?}\n{:#?}",
        f.db.calls()
    );
    assert_eq!(f.db.calls_of("writer"), 4, "items 5 and 6 made no call");
    // The cap counts every worker's spending: the run's sum is over it,
    // each worker's own is not.
    let mut spent: BTreeMap<Option<String>, f64> = BTreeMap::new();
    for c in f.db.calls() {
        *spent.entry(c.worker).or_default() += c.cost_usd.unwrap_or_default();
    }
    let per_worker: Vec<f64> = spent.into_values().collect();
    assert_eq!(per_worker.len(), 2, "{per_worker:?}");
    let total: f64 = per_worker.iter().sum();
    assert!(total > cap, "the run spent ${total}");
    assert!(
        per_worker.iter().all(|w| *w <= cap),
        "no worker alone reached the cap: {per_worker:?}"
    );
    let reasons: String = items
        .iter()
        .filter(|i| i.outcome.as_deref() == Some("budget_exceeded"))
        .filter_map(|i| i.reason.clone())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        reasons.contains("max_cost_usd_per_run") || reasons.contains("cost cap"),
        "{reasons}"
    );
}

// ---------- many workers on one ledger (issue 27) ----------

/// Worker `n` of a made-up process, for the claims below.
fn worker_n(n: u32) -> nightshift::queue::WorkerId {
    nightshift::queue::WorkerId {
        host: "host-a".into(),
        pid: 100,
        n,
    }
}

/// A worker claims through its process's own connection: with every other
/// connection of the pool held (at twenty workers a process, the
/// heartbeat's and the attempts' fenced writes keep them busy), a claim
/// through the pool waits, one through the claim line does not.
#[tokio::test]
async fn a_claim_does_not_wait_for_a_busy_pool() {
    use nightshift::ledger::{Ledger, POOL_SIZE};
    use std::time::Duration;
    let db = common::db::Db::create();
    let ledger = Ledger::connect(&db.source()).await.unwrap();
    let (pool, lease) = (&ledger.pool, Duration::from_secs(60));
    let run = crate::ledger::queued_run(&ledger, 3).await;
    let line = nightshift::queue::ClaimLine::default();
    let (first, _) = line.claim(pool, run, &worker_n(1), lease).await.unwrap();
    assert_eq!(first.map(|c| c.position), Some(0));
    let mut busy = Vec::new();
    for _ in 1..POOL_SIZE {
        busy.push(pool.acquire().await.unwrap());
    }
    let second_worker = worker_n(2);
    let through_pool = nightshift::queue::claim(pool, run, &second_worker, lease);
    assert!(
        tokio::time::timeout(Duration::from_millis(500), through_pool)
            .await
            .is_err(),
        "a claim through the pool waits while its connections are busy"
    );
    let (second, times) = tokio::time::timeout(
        Duration::from_secs(5),
        line.claim(pool, run, &worker_n(3), lease),
    )
    .await
    .expect("a claim through the line does not wait for the pool")
    .unwrap();
    assert_eq!(second.map(|c| c.position), Some(1));
    assert!(times.acquire < Duration::from_secs(1), "{times:?}");
    assert_eq!(
        pool.size(),
        POOL_SIZE,
        "the line is one of the pool's connections"
    );
}

/// Every worker's phase changes and every item's base commit touch the
/// run's one row: while another transaction holds that row (another
/// worker's phase, the drain's heartbeat), a phase is still recorded — its
/// event written, the row left to the holder — and the pinned base is read
/// without waiting. Once the row is free the phase is on it again.
#[tokio::test]
async fn a_phase_and_the_pinned_base_do_not_wait_for_the_run_s_row() {
    use nightshift::ledger::{Ledger, events, runs};
    use nightshift::outcome::{Event, Phase};
    use std::time::Duration;
    let db = common::db::Db::create();
    let ledger = Ledger::connect(&db.source()).await.unwrap();
    let pool = &ledger.pool;
    let run = crate::ledger::queued_run(&ledger, 1).await;
    let (a, b) = ("a".repeat(40), "b".repeat(40));
    assert_eq!(runs::pin_base(pool, run, &a).await.unwrap(), a);
    let mut holder = pool.begin().await.unwrap();
    sqlx::query("UPDATE runs SET heartbeat_at = now() WHERE id = $1")
        .bind(run)
        .execute(&mut *holder)
        .await
        .unwrap();
    tokio::time::timeout(
        Duration::from_secs(5),
        runs::set_phase(pool, run, Phase::Gate, Some("key00"), Some(1)),
    )
    .await
    .expect("a phase does not wait for the run's row")
    .unwrap();
    let pinned = tokio::time::timeout(Duration::from_secs(5), runs::pin_base(pool, run, &b))
        .await
        .expect("the pinned base is read without waiting for the run's row")
        .unwrap();
    assert_eq!(pinned, a, "the first base stays the run's");
    holder.commit().await.unwrap();
    let phases = events::of_kind_in_run(pool, run, Event::PhaseChanged.as_str())
        .await
        .unwrap();
    assert_eq!(phases.len(), 1, "{phases:?}");
    assert_eq!(phases[0]["phase"], "gate");
    runs::set_phase(pool, run, Phase::Review, Some("key00"), Some(1))
        .await
        .unwrap();
    let row: String = sqlx::query_scalar("SELECT phase FROM runs WHERE id = $1")
        .bind(run)
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(row, Phase::Review.as_str());
}
