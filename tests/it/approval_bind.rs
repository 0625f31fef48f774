//! Approvals bound to their run (docs/contract.md#the-runs-binding, issue
//! 22 points 1 and 2): a ledger writer without the approval key points a
//! live run at an expired, a used or a superseded genuine approval, and
//! deletes the record of a use. Every host that joins (`worker`) or resumes
//! (`drain`) the run refuses, naming what did not verify, and nothing of
//! the old plan runs. Real PostgreSQL, real git, the fake GitHub, the real
//! binary.

use std::time::Duration;

use chrono::SubsecRound;
use nix::sys::signal::Signal;

use crate::common;
use crate::workers::{run_worker, second_host, share_key};

use common::bg::{Bg, wait_until};
use common::github::FakeGitHub;
use common::{Fixture, assert_ok, text};

/// Adds `items/<word>.txt` for the item `Add <word>` after `work_secs`
/// seconds (a file beside it). The old plan's writer is this script behind
/// a line that leaves a mark in `OLD_RAN`.
const WRITER: &str = r#"here=$(dirname "$0")
word=$(grep -o '"title":"Add [a-z0-9]*' "$NIGHTSHIFT_CONTRACT_FILE" | head -1 | sed 's/.*Add //')
sleep "$(cat "$here/work_secs")"
mkdir -p items
echo "$word" > "items/$word.txt"
echo "added $word"
"#;

const REVIEWER: &str = "#!/bin/sh\necho '{\"verdict\":\"approve\",\"findings\":[]}'\n";

/// Where the old plan's writer and gate leave their mark.
const MARK: &str = "OLD_RAN";

/// The ledger writer's three targets: a genuine approval of the superseded
/// plan that is expired, used by an earlier run, or neither.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Target {
    Expired,
    Used,
    Superseded,
}

/// Writes the config: the old plan's writer and gate mark [`MARK`]; the
/// new plan's do not.
fn configure(f: &Fixture, old: bool) {
    let marker = f.agents.join(MARK);
    let (writer, gate) = if old {
        let w = f.agent(
            "old_writer.sh",
            &format!("#!/bin/sh\necho writer >> {}\n{WRITER}", marker.display()),
        );
        let g = f.agent(
            "old_gate.sh",
            &format!(
                "#!/bin/sh\necho gate >> {}\nexec sh test.sh\n",
                marker.display()
            ),
        );
        (w, format!("sh {g}"))
    } else {
        let w = f.agent("writer.sh", &format!("#!/bin/sh\n{WRITER}"));
        (w, "sh test.sh".to_string())
    };
    let r = f.agent("reviewer.sh", REVIEWER);
    f.config(&format!(
        "verify = [\"{gate}\"]\n\n[writer]\nkind = \"command\"\ncommand = [\"{writer}\"]\n\n[reviewer]\nkind = \"command\"\ncommand = [\"{r}\"]\n"
    ));
}

/// A genuine approval of `sha` given three days ago: signed with the
/// approving host's key, as `nightshift approve` signs, and long expired.
fn expired_approval(f: &Fixture, sha: &str) -> String {
    use nightshift::approval::{self, Approval};
    let key = approval::load_key(&f.data)
        .unwrap()
        .expect("the key exists");
    let created = chrono::Utc::now().trunc_subsecs(6) - chrono::Duration::days(3);
    let repo =
        f.db.sql(&format!("SELECT repo FROM plans WHERE sha = '{sha}'"));
    let mut a = Approval {
        id: uuid::Uuid::new_v4(),
        plan_sha: Some(sha.to_string()),
        contract_sha: None,
        created_at: created,
        expires_at: approval::expiry(created),
        used_by: None,
        repo,
        signature: None,
    };
    a.signature = Some(approval::sign(&key, &a));
    f.db.sql(&format!(
        "INSERT INTO approvals (id, plan_sha, repo, approved_by, created_at, expires_at, signature) VALUES ('{}', '{sha}', '{}', 't', '{}', '{}', '{}')",
        a.id,
        a.repo,
        a.created_at.to_rfc3339(),
        a.expires_at.to_rfc3339(),
        a.signature.as_deref().unwrap()
    ));
    a.id.to_string()
}

/// The superseded plan (one item, `Add old`) and the genuine approval of
/// it the ledger writer will point the live run at.
fn old_plan(f: &Fixture, target: Target) -> (String, String) {
    configure(f, true);
    f.write("NEXT.md", "# words\n\n- [ ] Add old\n");
    let sha = f.plan_sha();
    assert_ok(&f.run(&["approve", &sha]), "approve the old plan");
    let newest = || {
        f.db.sql("SELECT id FROM approvals ORDER BY created_at DESC LIMIT 1")
    };
    let approval = match target {
        Target::Expired => expired_approval(f, &sha),
        Target::Superseded => newest(),
        Target::Used => {
            let id = newest();
            // Its own run, legitimately: the old plan's writer and gate run.
            let out = f.run(&["drain"]);
            assert_eq!(out.status.code(), Some(0), "{}", text(&out));
            std::fs::remove_file(f.agents.join(MARK)).expect("the old plan ran once");
            id
        }
    };
    (sha, approval)
}

/// Counts of the rows no refusal may lose.
fn rows(f: &Fixture) -> Vec<String> {
    ["runs", "run_items", "approvals", "approval_uses", "events"]
        .iter()
        .map(|t| f.db.sql(&format!("SELECT count(*) FROM {t}")))
        .collect()
}

/// The rows of `after` are at least those of `before` (a refusal adds
/// events).
fn nothing_lost(before: &[String], after: &[String]) {
    for (b, a) in before.iter().zip(after) {
        assert!(
            a.parse::<i64>().unwrap() >= b.parse::<i64>().unwrap(),
            "rows lost: {before:?} -> {after:?}"
        );
    }
}

async fn replayed_onto_a_live_run(target: Target, field: &str) {
    let gh = FakeGitHub::start().await;
    let mut f = Fixture::new();
    f.use_github(&gh);
    f.token = Some("ghp_testtoken_0123456789abcdef".into());
    std::fs::write(f.agents.join("work_secs"), "0").unwrap();
    let (old_sha, old_approval) = old_plan(&f, target);
    let prs_before = gh.prs().len();
    // Tonight's plan: other items, another writer and gate, approved.
    configure(&f, false);
    std::fs::write(f.agents.join("work_secs"), "5").unwrap();
    f.write(
        "NEXT.md",
        "# words\n\n- [ ] Add w1\n- [ ] Add w2\n- [ ] Add w3\n",
    );
    let sha = f.plan_sha();
    assert_ok(&f.run(&["approve", &sha]), "approve");
    let mut drain = Bg::start(&f, &["drain", "--deadline", &common::far_deadline()]);
    wait_until(Duration::from_secs(60), "the drain's first claim", || {
        f.db.sql("SELECT count(*) FROM claims c JOIN runs r ON r.id = c.run_id WHERE r.status = 'running'")
            != "0"
    });
    // A ledger writer without the key points the live run at the old plan.
    f.db.sql(&format!(
        "UPDATE runs SET plan_sha = '{old_sha}', approval_id = '{old_approval}' WHERE status = 'running'"
    ));
    let run = f.db.sql("SELECT id FROM runs WHERE status = 'running'");
    assert_eq!(run.len(), 36, "one live run: {run:?}");
    let before = rows(&f);
    // A worker on another host, with the key, refuses to join.
    let (clone, data) = second_host(&f);
    share_key(&f, &data);
    let joined = run_worker(&f, &clone, &data);
    let said = text(&joined);
    eprintln!("--- worker:\n{said}");
    assert_eq!(joined.status.code(), Some(3), "{said}");
    for want in [
        run.as_str(),
        old_approval.as_str(),
        field,
        "does not verify",
    ] {
        assert!(
            said.contains(want),
            "the worker's refusal names {want}: {said}"
        );
    }
    // The drain dies; the next one would resume the run, and refuses.
    drain.signal(Signal::SIGKILL);
    drain.wait(Duration::from_secs(10));
    let resumed = f.run(&["drain"]);
    let said = text(&resumed);
    eprintln!("--- drain:\n{said}");
    assert_eq!(resumed.status.code(), Some(3), "{said}");
    for want in [
        run.as_str(),
        old_approval.as_str(),
        field,
        "nightshift approve",
    ] {
        assert!(
            said.contains(want),
            "the drain's refusal names {want}: {said}"
        );
    }
    // `status` does not offer it for a resume either.
    let status = f.run(&["status", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert!(
        json["resumable_run_id"].is_null(),
        "status offers the run whose binding does not verify: {json}"
    );
    // Nothing of the old plan ran, and no row was lost.
    assert!(
        !f.agents.join(MARK).exists(),
        "the old plan's writer or gate ran"
    );
    assert!(
        gh.prs()
            .iter()
            .skip(prs_before)
            .all(|p| !p["title"].as_str().unwrap_or("").contains("old")),
        "a PR of the old plan was opened"
    );
    nothing_lost(&before, &rows(&f));
    assert_eq!(
        f.db.sql(&format!("SELECT status FROM runs WHERE id = '{run}'")),
        "crashed"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_live_run_pointed_at_an_expired_approval_runs_nothing() {
    replayed_onto_a_live_run(Target::Expired, "expires_at").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_live_run_pointed_at_a_used_approval_runs_nothing() {
    replayed_onto_a_live_run(Target::Used, "approval_uses").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_live_run_pointed_at_a_superseded_plan_runs_nothing() {
    replayed_onto_a_live_run(Target::Superseded, "plan_sha").await;
}

/// psql's exit status and stderr for `q`, which may fail.
fn try_sql(f: &Fixture, q: &str) -> (bool, String) {
    let out = std::process::Command::new("psql")
        .args([f.db.url.as_str(), "-qAt", "-c", q])
        .output()
        .expect("psql runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_use_does_not_start_a_second_run() {
    let gh = FakeGitHub::start().await;
    let mut f = Fixture::new();
    f.use_github(&gh);
    f.token = Some("ghp_testtoken_0123456789abcdef".into());
    std::fs::write(f.agents.join("work_secs"), "0").unwrap();
    configure(&f, false);
    f.write("NEXT.md", "# words\n\n- [ ] Add w1\n");
    let sha = f.plan_sha();
    assert_ok(&f.run(&["approve", &sha]), "approve");
    let out = f.run(&["drain"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let first = f.db.sql("SELECT id FROM runs");
    // The record of the use refuses a plain DELETE, and an UPDATE.
    for q in [
        "DELETE FROM approval_uses",
        "UPDATE approval_uses SET used_at = now()",
        "TRUNCATE approval_uses",
    ] {
        let (ok, err) = try_sql(&f, q);
        assert!(!ok && err.contains("immutable"), "{q}: {err}");
    }
    // A superuser drops the protection and deletes it anyway.
    f.db.sql(
        "ALTER TABLE approval_uses DISABLE TRIGGER approval_uses_immutable; DELETE FROM approval_uses; ALTER TABLE approval_uses ENABLE TRIGGER approval_uses_immutable",
    );
    assert_eq!(f.db.sql("SELECT count(*) FROM approval_uses"), "0");
    let before = rows(&f);
    for args in [vec!["drain", "--approve", sha.as_str()], vec!["drain"]] {
        let out = f.run(&args);
        let said = text(&out);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {said}");
        assert!(
            said.contains(&format!("already used by run {first}")),
            "{args:?}: {said}"
        );
    }
    assert_eq!(f.db.sql("SELECT count(*) FROM runs"), "1", "no second run");
    nothing_lost(&before, &rows(&f));
}
