//! No agent outlives its runner (docs/security.md#processes): a `nightshift
//! worker` killed with `kill -9` in its writer or gate call leaves no
//! process of that call running (each one's pid is written to a marker
//! file), and the takeover ships one PR; a `nightshift/` branch someone
//! else pushed during the night is in the report and the end-of-run
//! message. Real PostgreSQL, real git, the fake GitHub, the real binary.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{self, Fixture, assert_ok, git, text};
use crate::workers::{
    WRITER, finish, second_host, spawn_drain, spawn_worker, wait_for_a_claim, words,
};

/// Shell lines that start two more processes of the call and wait until
/// both wrote their pid beside the agents (`$here`): a background child in
/// the call's group, and a daemon that left its session with `setsid` and
/// cleared its environment (no group, session or marker leads to it).
const SPRAWL: &str = r#"sh -c 'echo $$ > "$1/child.tmp"; mv "$1/child.tmp" "$1/child.pid"; exec sleep 1000' sh "$here" &
setsid env -i sh -c 'echo $$ > "$1/daemon.tmp"; mv "$1/daemon.tmp" "$1/daemon.pid"; exec sleep 1000' sh "$here" >/dev/null 2>&1 &
while [ ! -s "$here/child.pid" ] || [ ! -s "$here/daemon.pid" ]; do sleep 0.05; done
"#;

/// A short lease, and no sandbox: these tests read the call's pids from
/// outside, which the sandbox's PID namespace hides (`$$` is the pid inside
/// it); what the sandbox ends is tested in tests/it/sandbox.rs.
const LEASE_NO_SANDBOX: &str = "lease = \"5s\"\n[sandbox]\nmode = \"off\"\n";

/// The pids of the call (in `marker`), its child and its daemon, once the
/// second host's slow call wrote them all.
fn call_pids(agents: &Path, marker: &str) -> Vec<i32> {
    let slow = agents.join(marker);
    let until = Instant::now() + Duration::from_secs(60);
    while !slow.exists() {
        assert!(
            Instant::now() < until,
            "the second host never started its slow call"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    [marker, "child.pid", "daemon.pid"]
        .iter()
        .map(|name| {
            let text = std::fs::read_to_string(agents.join(name)).unwrap();
            text.trim().parse().expect("a pid")
        })
        .collect()
}

/// Whether `pid` runs: in `/proc` and not a zombie.
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z'))
    })
}

/// The pids still running `secs` after now at the latest (sooner when all
/// are gone); kills them so that a failed test leaves nothing behind.
fn survivors(pids: &[i32], secs: u64) -> Vec<i32> {
    let until = Instant::now() + Duration::from_secs(secs);
    let mut left: Vec<i32> = pids.to_vec();
    while !left.is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
        left.retain(|&p| alive(p));
    }
    for &pid in &left {
        // SAFETY: kill(2) on processes this test's run started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    left
}

/// Kills the second host's worker (`kill -9`) once its slow call runs (its
/// pid in `marker`), asserts that no process of that call survives it,
/// then that the drain takes the item over and ships one PR per item.
async fn kill_worker_mid_call(f: &Fixture, gh: &common::github::FakeGitHub, marker: &str) {
    let (clone, data) = second_host(f);
    let drain = spawn_drain(f, &[]);
    wait_for_a_claim(f);
    let mut worker = spawn_worker(f, &clone, &data);
    let pids = call_pids(&f.agents, marker);
    assert!(pids.iter().all(|&p| alive(p)), "{pids:?}");
    worker.kill().unwrap();
    let _ = worker.wait();
    let left = survivors(&pids, 5);
    assert!(
        left.is_empty(),
        "processes of the killed worker's call survived it: {left:?} of {pids:?}"
    );
    let d = finish(drain, "drain");
    assert_eq!(d.status.code(), Some(0), "{}", text(&d));
    let prs = gh.prs();
    let mut heads: Vec<&str> = prs
        .iter()
        .filter_map(|p| p["head"]["ref"].as_str())
        .collect();
    heads.sort_unstable();
    heads.dedup();
    assert_eq!(
        (prs.len(), heads.len()),
        (2, 2),
        "one PR per item: {prs:#?}"
    );
    let report = f.report();
    let items = report["items"].as_array().unwrap();
    assert!(
        items.iter().all(|i| i["outcome"] == "pr_opened"),
        "{report:#}"
    );
    assert_eq!(report["foreign_refs"], serde_json::json!([]), "{report:#}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_killed_mid_writer_leaves_nothing_of_its_writer_and_the_takeover_ships() {
    let (f, gh) = words(2, 3, LEASE_NO_SANDBOX).start().await.split();
    std::fs::write(f.agents.join("slow_secs"), "600").unwrap();
    // The second host's slow writer starts two more processes first.
    let marked = "echo $$ > \"$here/slow.pid\"";
    let writer = WRITER.replacen(marked, &format!("{SPRAWL}{marked}"), 1);
    assert_ne!(writer, WRITER);
    f.agent("writer.sh", &writer);
    kill_worker_mid_call(&f, &gh, "slow.pid").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_killed_mid_gate_leaves_nothing_of_its_gate_and_the_takeover_ships() {
    let (f, gh) = words(2, 1, LEASE_NO_SANDBOX).start().await.split();
    // The project's test: on the second host, the first call sprawls and
    // hangs; everywhere else it passes.
    let test = format!(
        "#!/bin/sh\nhere={}\ncase \"$PWD\" in\n  *dataB*) if mkdir \"$here/gate.once\" 2>/dev/null; then\n{SPRAWL}echo $$ > \"$here/gate.pid\"; sleep 600; fi ;;\nesac\necho ok\n",
        f.agents.display()
    );
    f.write("test.sh", &test);
    git(&f.repo, &["commit", "-qam", "a test that hangs on host B"]);
    git(&f.repo, &["push", "-q", "origin", "main"]);
    kill_worker_mid_call(&f, &gh, "gate.pid").await;
}

/// A branch under `nightshift/` that something other than nightshift
/// pushed while the run went on (here: with a commit no checkout has seen,
/// so no writer round takes it for its agent's push) is named in the
/// report, text and `--json`, and in the end-of-run message; the branch
/// nightshift pushed itself is not.
#[tokio::test(flavor = "multi_thread")]
async fn a_branch_pushed_by_someone_else_during_the_run_is_reported() {
    let (f, _gh) = words(1, 3, "").start().await.split();
    let told = f.agents.join("told.json");
    let notify = f.agent(
        "notify.sh",
        &format!("#!/bin/sh\ncat > {}\n", told.display()),
    );
    let config = std::fs::read_to_string(f.repo.join(".nightshift/config.toml")).unwrap();
    f.write(
        ".nightshift/config.toml",
        &format!("{config}\n[notify]\ncommand = [\"{notify}\"]\n"),
    );
    let drain = spawn_drain(&f, &[]);
    wait_for_a_claim(&f);
    let other = f.dir.path().join("someone");
    git(
        f.dir.path(),
        &[
            "clone",
            "-q",
            f.remote.to_str().unwrap(),
            other.to_str().unwrap(),
        ],
    );
    std::fs::write(other.join("planted.txt"), "not nightshift's\n").unwrap();
    git(&other, &["add", "-A"]);
    git(
        &other,
        &[
            "-c",
            "user.name=x",
            "-c",
            "user.email=x@x",
            "commit",
            "-qm",
            "planted",
        ],
    );
    git(
        &other,
        &["push", "-q", "origin", "HEAD:refs/heads/nightshift/planted"],
    );
    let head = git(&other, &["rev-parse", "HEAD"]).trim().to_string();
    let d = finish(drain, "drain");
    assert_eq!(d.status.code(), Some(0), "{}", text(&d));
    assert!(
        text(&d).contains("refs/heads/nightshift/planted"),
        "{}",
        text(&d)
    );
    let report = f.report();
    assert_eq!(report["items"][0]["outcome"], "pr_opened", "{report:#}");
    assert_eq!(
        report["foreign_refs"],
        serde_json::json!([{"ref": "refs/heads/nightshift/planted", "head": head, "nightshift_pushed": null}]),
        "{report:#}"
    );
    let out = f.run(&["report"]);
    assert_ok(&out, "report");
    assert!(
        text(&out).contains("refs nightshift did not push")
            && text(&out).contains("refs/heads/nightshift/planted"),
        "{}",
        text(&out)
    );
    let message = std::fs::read_to_string(&told).expect("the end-of-run message was sent");
    assert!(
        message.contains("refs/heads/nightshift/planted"),
        "{message}"
    );
}
