//! Several workers on one plan (docs/workers.md): `drain --jobs N` in one
//! process, `nightshift worker` in another clone with its own data
//! directory, killed and paused workers. Real PostgreSQL, real git with a
//! local bare remote, the fake GitHub, the real binary.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common;

use common::bg::wait_until;
use common::github::FakeGitHub;
use common::{Fixture, Night, Table, assert_ok, git, text};

/// A writer that adds `items/<word>.txt` for the item titled `Add <word>`,
/// after `$SLOW_SECS` (from a file beside it) seconds; it marks its slot
/// busy while it works and logs `SHARED` when the slot already was.
pub(crate) const WRITER: &str = r#"#!/bin/sh
set -eu
here=$(dirname "$0")
word=$(grep -o '"title":"Add [a-z0-9]*' "$NIGHTSHIFT_CONTRACT_FILE" | head -1 | sed 's/.*Add //')
busy="$PWD.busy"
mkdir "$busy" 2>/dev/null || echo "SHARED $PWD" >> "$here/shared.log"
# A worker of the second clone (its data directory is dataB) is the slow one
# on its first call, so that it can be killed or paused mid-call.
case "$PWD" in
  *dataB*) if mkdir "$here/slow.once" 2>/dev/null; then echo $$ > "$here/slow.pid"; sleep "$(cat "$here/slow_secs")"; fi ;;
esac
sleep "$(cat "$here/work_secs")"
mkdir -p items
echo "$word" > "items/$word.txt"
rmdir "$busy" 2>/dev/null || true
echo "added $word"
"#;

/// A night of `n` items (`Add w1` … `Add wN`), command agents and the fake
/// GitHub; the writer works `work_secs` per call.
pub(crate) fn words<'a>(n: usize, work_secs: u32, extra: &str) -> Night<'a> {
    Night::new()
        .github_api_only()
        .token("ghp_testtoken_0123456789abcdef")
        .with(move |f| {
            std::fs::write(f.agents.join("work_secs"), work_secs.to_string()).unwrap();
            std::fs::write(f.agents.join("slow_secs"), "0").unwrap();
        })
        .writer(WRITER)
        .config(extra)
        .backlog(&format!(
            "# words\n\n{}",
            (1..=n)
                .map(|i| format!("- [ ] Add w{i}\n"))
                .collect::<String>()
        ))
}

/// A second clone of the fixture's remote with its own data directory
/// (`dataB`) and the same config: another host.
pub(crate) fn second_host(f: &Fixture) -> (PathBuf, PathBuf) {
    let clone = f.dir.path().join("hostB");
    let data = f.dir.path().join("dataB");
    std::fs::create_dir_all(&data).unwrap();
    git(
        f.dir.path(),
        &[
            "clone",
            "-q",
            f.remote.to_str().unwrap(),
            clone.to_str().unwrap(),
        ],
    );
    std::fs::create_dir_all(clone.join(".nightshift")).unwrap();
    for name in ["config.toml", ".gitignore"] {
        std::fs::copy(
            f.repo.join(".nightshift").join(name),
            clone.join(".nightshift").join(name),
        )
        .unwrap();
    }
    (clone, data)
}

/// Copies the approving host's approval key to the second host's data
/// directory, as docs/workers.md tells a user to.
pub(crate) fn share_key(f: &Fixture, data: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let to = data.join("approval.key");
    std::fs::copy(f.data.join("approval.key"), &to).expect("the approval key exists");
    std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// `nightshift worker` on the second host, run to its end (no key copied).
pub(crate) fn run_worker(f: &Fixture, clone: &Path, data: &Path) -> std::process::Output {
    f.cmd()
        .current_dir(clone)
        .env("NIGHTSHIFT_DATA_DIR", data)
        .arg("worker")
        .output()
        .expect("worker runs")
}

/// `nightshift worker` on the second host, started in the background.
pub(crate) fn spawn_worker(f: &Fixture, clone: &Path, data: &Path) -> Child {
    share_key(f, data);
    f.cmd()
        .current_dir(clone)
        .env("NIGHTSHIFT_DATA_DIR", data)
        .arg("worker")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("worker starts")
}

/// `drain` after plan and approve, started in the background (with a far
/// deadline unless `extra` gives one).
pub(crate) fn spawn_drain(f: &Fixture, extra: &[&str]) -> Child {
    let sha = f.plan_sha();
    assert_ok(&f.run(&["approve", &sha]), "approve");
    let deadline = common::far_deadline();
    let mut args = vec!["drain"];
    if !extra.contains(&"--deadline") {
        args.extend(["--deadline", deadline.as_str()]);
    }
    args.extend_from_slice(extra);
    f.cmd()
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("drain starts")
}

/// Waits (at most 30 s) until a worker claimed an item.
pub(crate) fn wait_for_a_claim(f: &Fixture) {
    wait_until(Duration::from_secs(30), "a claim", || {
        f.db.count(Table::Claims) > 0
    });
}

pub(crate) fn finish(child: Child, what: &str) -> std::process::Output {
    let out = child.wait_with_output().expect(what);
    eprintln!("--- {what}:\n{}", text(&out));
    out
}

/// How many claims each item had, by item key.
pub(crate) fn claims_per_item(f: &Fixture) -> Vec<(String, i64)> {
    let mut per: BTreeMap<String, i64> = BTreeMap::new();
    for c in f.db.claims() {
        *per.entry(c.item_key).or_default() += 1;
    }
    per.into_iter().collect()
}

/// The claims of every item claimed more than once, as `attempt:end`
/// (`open` while it holds), in the order they were made.
fn taken_over(f: &Fixture) -> Vec<String> {
    let claims = f.db.claims();
    claims
        .iter()
        .filter(|c| claims.iter().filter(|o| o.item_key == c.item_key).count() > 1)
        .map(|c| {
            format!(
                "{}:{}",
                c.attempt,
                c.end_reason.as_deref().unwrap_or("open")
            )
        })
        .collect()
}

/// The distinct workers that ran items, and the distinct processes (the
/// `pid` of `host:pid:n`) among them.
fn workers_of_items(f: &Fixture) -> (BTreeSet<String>, BTreeSet<String>) {
    let workers: BTreeSet<String> = f.db.items().into_iter().filter_map(|i| i.worker).collect();
    let pids = workers
        .iter()
        .map(|w| w.split(':').nth(1).unwrap_or_default().to_string())
        .collect();
    (workers, pids)
}

#[tokio::test(flavor = "multi_thread")]
async fn jobs_4_run_12_items_once_each_with_12_prs_and_no_shared_slot() {
    let f = words(12, 1, "")
        .drain(&["--jobs", "4"])
        .exit(0)
        .outcomes(&["pr_opened"; 12])
        .run()
        .await;
    let report = f.report();
    let items = report["items"].as_array().unwrap();
    assert_eq!(f.gh().prs().len(), 12, "exactly one PR per item");
    let claims = claims_per_item(&f);
    assert_eq!(claims.len(), 12);
    assert!(claims.iter().all(|(_, n)| *n == 1), "{claims:?}");
    let shared = std::fs::read_to_string(f.agents.join("shared.log")).unwrap_or_default();
    assert!(
        shared.is_empty(),
        "a slot was used by two workers at once: {shared}"
    );
    // The work was shared: more than one worker ended items.
    let (workers, _) = workers_of_items(&f);
    assert!(workers.len() >= 2, "{workers:?}");
    // Each item names its worker in the report, and the text report says
    // which worker ran which items.
    assert!(items.iter().all(|i| i["worker"].is_string()), "{report:#}");
    let text_report = text(&f.run(&["report"]));
    assert!(text_report.contains(" ran items "), "{text_report}");
}

#[tokio::test(flavor = "multi_thread")]
async fn two_processes_with_their_own_clones_drain_one_plan() {
    let (f, gh) = words(10, 1, "").start().await.split();
    let (clone, data) = second_host(&f);
    // No live run yet: the worker refuses (exit 3) and says how to start one.
    let early = run_worker(&f, &clone, &data);
    assert_eq!(early.status.code(), Some(3), "{}", text(&early));
    assert!(
        text(&early).contains("nightshift drain"),
        "{}",
        text(&early)
    );
    let drain = spawn_drain(&f, &[]);
    wait_for_a_claim(&f);
    // Without the approving host's key it cannot check the run's approval:
    // it refuses (exit 3), saying which file to copy, and runs nothing.
    let keyless = run_worker(&f, &clone, &data);
    assert_eq!(keyless.status.code(), Some(3), "{}", text(&keyless));
    assert!(
        text(&keyless).contains("approval.key"),
        "{}",
        text(&keyless)
    );
    // A run whose approval was taken off in the ledger runs nothing either.
    let approval =
        f.db.sql("SELECT approval_id FROM runs WHERE status = 'running'");
    f.db.sql("UPDATE runs SET approval_id = NULL WHERE status = 'running'");
    share_key(&f, &data);
    let forged = run_worker(&f, &clone, &data);
    assert_eq!(forged.status.code(), Some(3), "{}", text(&forged));
    assert!(text(&forged).contains("no approval"), "{}", text(&forged));
    f.db.sql(&format!(
        "UPDATE runs SET approval_id = '{approval}' WHERE status = 'running'"
    ));
    let worker = spawn_worker(&f, &clone, &data);
    let w = finish(worker, "worker");
    let d = finish(drain, "drain");
    assert_eq!(d.status.code(), Some(0));
    assert_eq!(w.status.code(), Some(0));
    let claims = claims_per_item(&f);
    assert_eq!(claims.len(), 10);
    assert!(claims.iter().all(|(_, n)| *n == 1), "{claims:?}");
    assert_eq!(gh.prs().len(), 10, "exactly one PR per item");
    let (_, pids) = workers_of_items(&f);
    assert_eq!(pids.len(), 2, "both processes ran items: {pids:?}");
    let report = f.report();
    assert_eq!(report["status"], "completed");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_worker_s_item_is_taken_over_after_its_lease() {
    let (f, gh) = words(2, 3, "lease = \"5s\"\n").start().await.split();
    std::fs::write(f.agents.join("slow_secs"), "60").unwrap();
    let (clone, data) = second_host(&f);
    let drain = spawn_drain(&f, &[]);
    wait_for_a_claim(&f);
    let worker = spawn_worker(&f, &clone, &data);
    // The second host's first writer call hangs: kill -9 its worker then.
    let slow = f.agents.join("slow.pid");
    wait_until(Duration::from_secs(30), "the second host's writer", || {
        slow.exists()
    });
    // Its agent dies with it (its call's supervisor ends it; tests/it/reap.rs).
    kill_and_take_over(&f, &gh, drain, worker);
}

/// Kills `worker` (`kill -9`), lets `drain` finish, and checks the night a
/// takeover leaves of two items: exit 0, one PR per item, the dead attempt
/// `lost` and the takeover's `finished`, both items `pr_opened`.
fn kill_and_take_over(f: &Fixture, gh: &FakeGitHub, drain: Child, mut worker: Child) {
    worker.kill().unwrap();
    let _ = worker.wait();
    let d = finish(drain, "drain");
    assert_eq!(d.status.code(), Some(0), "{}", text(&d));
    assert_eq!(gh.prs().len(), 2, "one PR per item");
    assert_eq!(taken_over(f), ["1:lost", "2:finished"]);
    let report = f.report();
    let items = report["items"].as_array().unwrap();
    assert!(
        items.iter().all(|i| i["outcome"] == "pr_opened"),
        "{report:#}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_worker_that_lost_its_claim_writes_and_pushes_nothing() {
    let (f, gh) = words(2, 3, "lease = \"5s\"\n").start().await.split();
    std::fs::write(f.agents.join("slow_secs"), "8").unwrap();
    let (clone, data) = second_host(&f);
    let drain = spawn_drain(&f, &[]);
    wait_for_a_claim(&f);
    let worker = spawn_worker(&f, &clone, &data);
    let slow = f.agents.join("slow.pid");
    let until = Instant::now() + Duration::from_secs(30);
    while !slow.exists() {
        assert!(
            Instant::now() < until,
            "the second host never started its writer"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let pid = worker.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-STOP", &pid])
            .status()
            .unwrap()
            .success()
    );
    // The drain takes the item over once the lease passed and finishes it.
    let d = finish(drain, "drain");
    assert_eq!(d.status.code(), Some(0), "{}", text(&d));
    let branches_before = f.remote_branches();
    let prs_before = gh.prs().len();
    let lost_item =
        f.db.claims()
            .into_iter()
            .find(|c| c.attempt == 2)
            .expect("the item was taken over")
            .item_key;
    let rows = || {
        let mut n = [
            Table::AgentCalls,
            Table::Rounds,
            Table::Events,
            Table::PullRequests,
        ]
        .map(|t| f.db.count(t));
        // Its heartbeats and its leaving are events too (docs/serve.md),
        // not rows of its attempt.
        n[2] -= f.db.events("worker_beat") + f.db.events("worker_left");
        n
    };
    let rows_before = rows();
    assert!(
        Command::new("kill")
            .args(["-CONT", &pid])
            .status()
            .unwrap()
            .success()
    );
    let w = finish(worker, "worker");
    assert!(text(&w).contains("wrote nothing more"), "{}", text(&w));
    assert_eq!(f.remote_branches(), branches_before, "it pushed nothing");
    assert_eq!(gh.prs().len(), prs_before, "it opened no PR");
    assert_eq!(prs_before, 2);
    let rows_after = rows();
    assert_eq!(
        rows_after, rows_before,
        "it wrote no ledger row for its attempt"
    );
    let stale = f.db.sql(&format!(
        "SELECT count(*) FROM agent_calls a JOIN rounds r ON r.id = a.round_id JOIN run_items i ON i.id = r.run_item_id WHERE i.item_key = '{lost_item}' AND r.attempt = 1"
    ));
    assert_eq!(stale, "0", "the lost attempt's writer call is not recorded");
}

/// As root, a host whose own config neither names `agent_user` nor accepts
/// `agents_as_root` runs no agent, though the run's drain host accepts it.
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_as_root_keeps_its_own_hosts_root_rule() {
    if !nix::unistd::geteuid().is_root() {
        return;
    }
    let (f, _gh) = words(1, 0, "").start().await.split();
    let (clone, data) = second_host(&f);
    let config = clone.join(".nightshift/config.toml");
    let toml = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, toml.replace("agents_as_root = true\n", "")).unwrap();
    let out = run_worker(&f, &clone, &data);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("agents_as_root"), "{}", text(&out));
}

#[tokio::test(flavor = "multi_thread")]
async fn jobs_and_lease_are_checked_and_run_refuses_jobs() {
    let (f, _gh) = words(1, 0, "lease = \"1s\"\n").start().await.split();
    let out = f.run(&["plan"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("lease"), "{}", text(&out));
    let (f, _gh) = words(1, 0, "").start().await.split();
    let out = f.run(&["run", "--jobs", "2"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("--jobs is for"), "{}", text(&out));
    let out = f.run(&["drain", "--jobs", "0"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

/// A worker killed while GitHub was creating its PR (the PR exists, the
/// item's end was never recorded): the takeover finds the PR and reports
/// the run's own work, `pr_opened`, not an earlier night's `already_open`
/// (issue: a lost attempt's PR was recorded `already_open`).
#[tokio::test(flavor = "multi_thread")]
async fn a_takeover_that_finds_the_lost_attempt_s_pr_reports_it_opened() {
    let (f, gh) = words(2, 0, "lease = \"5s\"\n").start().await.split();
    // The drain's host works slowly, so the second host's PR comes first;
    // GitHub creates it and holds the answer back.
    let w = f.agent(
        "writer.sh",
        &WRITER.replace(
            "sleep \"$(cat \"$here/work_secs\")\"",
            "case \"$PWD\" in *dataB*) ;; *) sleep 6 ;; esac",
        ),
    );
    let r = f.agents.join("reviewer.sh").display().to_string();
    f.config_with(&w, &r, "lease = \"5s\"\n");
    gh.state.lock().unwrap().create_pr_delays = vec![Duration::from_secs(120)];
    let (clone, data) = second_host(&f);
    let drain = spawn_drain(&f, &[]);
    wait_for_a_claim(&f);
    let worker = spawn_worker(&f, &clone, &data);
    wait_until(Duration::from_secs(60), "the second host's PR", || {
        !gh.prs().is_empty()
    });
    kill_and_take_over(&f, &gh, drain, worker);
    let report = f.report();
    let items = report["items"].as_array().unwrap();
    assert!(items.iter().all(|i| i["pr_number"].is_u64()), "{report:#}");
}

/// The run's cost cap is the one of the plan that started the run, not
/// each host's own config: a worker whose config allows $100 still stops
/// at the run's $0.15 (docs/workers.md "What holds across all workers").
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_holds_the_run_to_the_cost_cap_the_run_started_with() {
    let limits = "[limits]\nmax_cost_usd_per_run = 0.15\n";
    let (f, gh) = words(4, 0, limits).start().await.split();
    // The drain's host works slowly on its one item; the second host's
    // items are quick. Every writer call costs $0.10.
    let writer = WRITER
        .replace(
            "sleep \"$(cat \"$here/work_secs\")\"",
            "case \"$PWD\" in *dataB*) ;; *) sleep 15 ;; esac",
        )
        .replace(
            "echo \"added $word\"",
            "echo '{\"usage\":{\"input_tokens\":100,\"output_tokens\":10,\"cost_usd\":0.1}}'",
        );
    let w = f.agent("writer.sh", &writer);
    let r = f.agents.join("reviewer.sh").display().to_string();
    f.config_with(&w, &r, limits);
    let (clone, data) = second_host(&f);
    let config = clone.join(".nightshift/config.toml");
    let own = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        own.replace(
            "max_cost_usd_per_run = 0.15",
            "max_cost_usd_per_run = 100.0",
        ),
    )
    .unwrap();
    let drain = spawn_drain(&f, &[]);
    wait_for_a_claim(&f);
    let worker = spawn_worker(&f, &clone, &data);
    let w = finish(worker, "worker");
    let d = finish(drain, "drain");
    assert_eq!(
        d.status.code(),
        Some(1),
        "budget_exceeded fails the run: {}",
        text(&d)
    );
    let ends: Vec<String> =
        f.db.items()
            .iter()
            .map(|i| {
                format!(
                    "{}:{}",
                    i.item_index,
                    i.outcome.as_deref().unwrap_or_default()
                )
            })
            .collect();
    // Item 2 ran on the quick host ($0.10, under the cap); item 3's writer
    // took the run over it there ($0.20), and item 4 did not start; the
    // slow item 1 ended over it too. The second host's own $100 did not
    // count.
    assert_eq!(
        ends,
        [
            "1:budget_exceeded",
            "2:pr_opened",
            "3:budget_exceeded",
            "4:budget_exceeded"
        ],
        "{}",
        text(&w)
    );
    assert_eq!(f.db.calls_of("writer"), 3, "item 4 made no call");
    assert_eq!(gh.prs().len(), 1);
    assert_eq!(f.db.sql("SELECT cost_cap_usd FROM runs"), "0.15");
}

/// The night's picture draws one lane per worker: with `--jobs 2` the two
/// workers' bars were drawn in one lane (the timeline read no worker), so
/// a parallel night looked serial.
#[tokio::test(flavor = "multi_thread")]
async fn the_html_page_draws_one_lane_per_worker() {
    let f = words(4, 1, "").drain(&["--jobs", "2"]).exit(0).run().await;
    let page = f.dir.path().join("night.html");
    assert_ok(
        &f.run(&["report", "--html", page.to_str().unwrap()]),
        "report --html",
    );
    let html = std::fs::read_to_string(&page).unwrap();
    let labels: Vec<&str> = html
        .split("<text x=\"4\" y=\"")
        .skip(1)
        .map(|t| t.split_once('>').unwrap().1.split_once('<').unwrap().0)
        .collect();
    assert_eq!(labels.len(), 2, "one lane per worker: {labels:?}");
    assert_ne!(labels[0], labels[1], "the lanes are told apart");
    let (workers, _) = workers_of_items(&f);
    assert_eq!(workers.len(), 2, "{workers:?}");
}
