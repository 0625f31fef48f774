//! End-to-end tests of the real binary: real PostgreSQL, real git with a local
//! bare remote, a local GitHub-compatible server, script agents (docs/README.md).

use crate::common;

use common::github::FakeGitHub;
use common::night::World;
use common::{
    Fixture, Night, Table, assert_ok, git, has_label, outcomes, prepend_path, reason, text,
    tree_hash,
};

/// A writer that edits calc.txt according to the item title.
const WRITER: &str = r#"#!/bin/sh
set -eu
title=$(grep -o '"title":"[^"]*"' "$NIGHTSHIFT_CONTRACT_FILE" | head -1)
case "$title" in
  *sub*) echo sub >> calc.txt; echo "added sub" ;;
  *bogus*) echo bogus >> calc.txt; echo "added bogus" ;;
  *mul*) echo mul >> calc.txt; echo "added mul" ;;
  *pow*) echo pow >> calc.txt; printf 'done\n\nFINDINGS:\n- docs/README.md is out of date\n\n' ;;
  *) echo "nothing to do for $title" ;;
esac
"#;

/// A reviewer that rejects anything adding `mul`, approves the rest.
const REVIEWER: &str = r#"#!/bin/sh
set -eu
if git diff HEAD -- calc.txt | grep -q '^+mul'; then
  echo '{"verdict":"request_changes","findings":["mul needs a design note first"]}'
else
  echo "fine"
  echo '{"verdict":"approve","findings":[]}'
fi
"#;

const BACKLOG: &str = "# calc\n\n> Keep calc.txt one word per line.\n\n## Words\n\n- [ ] Add sub\n  - accept: calc.txt lists sub\n  - scope: calc.txt\n- [ ] Add bogus\n- [ ] Add mul\n- [x] Add add (done: #1)\n";

/// The calc night: the backlog, writer and reviewer above, two rounds an
/// item, the fake GitHub.
fn calc() -> Night<'static> {
    Night::new()
        .backlog(BACKLOG)
        .writer(WRITER)
        .reviewer(REVIEWER)
        .config("[limits]\nrounds = 2\n")
        .github()
        .token("ghp_testtoken_0123456789abcdef")
}

#[tokio::test(flavor = "multi_thread")]
async fn one_pr_one_failed_gate_one_rejection() {
    let (f, gh) = calc().start().await.split();
    // The user's local main diverged from origin/main and the tree is dirty.
    f.write("calc.txt", "add\nlocal-only\n");
    git(&f.repo, &["commit", "-qam", "local work, not pushed"]);
    f.write("scratch.txt", "uncommitted\n");
    let origin_main = git(&f.remote, &["rev-parse", "main"]);
    let before = tree_hash(&f.repo);

    let out = f.approve_and_drain(&[]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "one item failed, so exit 1:\n{}",
        text(&out)
    );
    let report = f.report();
    assert_eq!(
        outcomes(&report),
        ["pr_opened", "tests_failed", "review_rejected"],
        "{report:#}"
    );
    assert_eq!(report["status"], "completed");

    // Exactly one branch on the remote, based on origin/main, with exactly the writer's edit.
    let branches = f.remote_branches();
    assert_eq!(branches.len(), 1, "{branches:?}");
    let b = &branches[0];
    assert!(b.starts_with("nightshift/add-sub-"), "{b}");
    assert_eq!(
        git(&f.remote, &["rev-parse", &format!("{b}^")]),
        origin_main
    );
    assert_eq!(
        git(&f.remote, &["diff", "--name-only", "main", b]),
        "calc.txt"
    );
    assert_eq!(
        git(&f.remote, &["show", &format!("{b}:calc.txt")]),
        "add\nsub"
    );

    // Exactly one PR, labelled, whose body names the contract SHA and the item key.
    let prs = gh.prs();
    assert_eq!(prs.len(), 1);
    let item = &report["items"][0];
    let body = prs[0]["body"].as_str().unwrap();
    assert!(
        body.contains(item["contract_sha"].as_str().unwrap()),
        "{body}"
    );
    assert!(body.contains("<!-- nightshift-item: "), "{body}");
    assert_eq!(prs[0]["title"], "nightshift: Add sub");
    assert!(has_label(&prs[0], "autopilot"), "{:?}", prs[0]["labels"]);
    assert_eq!(item["pr_number"], prs[0]["number"]);
    assert_eq!(report["items"][1]["rounds"], 2);
    gh.assert_never_merged_approved_or_closed().await;

    // The user's checkout (tree and .git) is byte-identical.
    assert_eq!(tree_hash(&f.repo), before);
    // The ledger has the rounds, gate runs, reviews and proofs.
    assert_eq!(f.db.count(Table::GateRuns), 5);
    assert_eq!(f.db.count(Table::Reviews), 3);
    assert!(f.db.count(Table::Events) >= 5);

    // A second plan after the config changed (every contract SHA changes):
    // no second PR; the item is already_open by its key.
    let w = f.agents.join("writer.sh").display().to_string();
    let r = f.agents.join("reviewer.sh").display().to_string();
    f.config_with(&w, &r, "label = \"autopilot\"\n[limits]\nrounds = 1\n");
    f.drain_exits(1, &[]);
    let report2 = f.report();
    assert_ne!(report2["items"][0]["contract_sha"], item["contract_sha"]);
    assert_eq!(
        report2["items"][0]["outcome"], "already_open",
        "{report2:#}"
    );
    assert_eq!(gh.prs().len(), 1);
    assert_eq!(f.remote_branches().len(), 1);
    gh.assert_never_merged_approved_or_closed().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn writers_that_break_rules_push_nothing() {
    let (f, gh) = Night::new()
        .github()
        .token("ghp_rules_token_abcdef123456")
        .writer(
            r#"#!/bin/sh
title=$(grep -o '"title":"[^"]*"' "$NIGHTSHIFT_CONTRACT_FILE" | head -1)
case "$title" in
  *scope*) echo sub >> calc.txt; echo "x" >> docs/README.md ;;
  *commit*) echo sub >> calc.txt; git -c user.name=w -c user.email=w@x add -A; git -c user.name=w -c user.email=w@x commit -qm sneaky ;;
  *switch*) git checkout -q -b elsewhere; echo sub >> calc.txt ;;
  *hook*) echo sub >> calc.txt; printf '#!/bin/sh\ntouch "$HOME/hook-ran"\n' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit ;;
  *push*) echo sub >> calc.txt; git stash -q; git push -q origin HEAD:refs/heads/evil; git stash pop -q ;;
  *user*) echo sub >> calc.txt; u=$(sed 's|/objects$||' .git/objects/info/alternates); printf '[alias]\n\tst = status\n' >> "$u/config" ;;
  *crash*) echo sub >> calc.txt; kill -SEGV $$ ;;
esac
"#,
        )
        .backlog("- [ ] Out of scope\n  - scope: calc.txt\n- [ ] A commit\n- [ ] A branch switch\n- [ ] A hook\n- [ ] A crash\n  - rounds: 1\n- [ ] A push of its own\n")
        // The second line, without the sandbox (which refuses the push and
        // the write to your repository: tests/it/sandbox.rs).
        .config("[sandbox]\nmode = \"off\"\n")
        .start()
        .await
        .split();
    let git_before = tree_hash(&f.repo.join(".git"));
    f.drain_exits(1, &[]);
    let report = f.report();
    // A crashed writer's half-done work is never gated, reviewed or pushed;
    // a writer's push stops the run (it goes last here, so nothing is left).
    assert_eq!(
        outcomes(&report),
        [
            "rule_broken",
            "rule_broken",
            "rule_broken",
            "rule_broken",
            "error",
            "rule_broken"
        ],
        "{report:#}"
    );
    assert!(
        reason(&report, 3).contains(".git/hooks/pre-commit"),
        "the part is named: {report:#}"
    );
    assert!(reason(&report, 5).contains("refs/heads/evil"), "{report:#}");
    assert!(reason(&report, 4).contains("signal 11"), "{report:#}");
    assert!(f.remote_branches().is_empty());
    assert!(gh.prs().is_empty());
    assert!(!f.home.join("hook-ran").exists(), "a planted hook ran");
    assert_eq!(
        tree_hash(&f.repo.join(".git")),
        git_before,
        "the user's .git changed"
    );

    // A writer that reaches the user's own .git through the checkout's
    // alternates is caught (its change is the user's to undo).
    f.write("NEXT.md", "- [ ] A user repo edit\n");
    f.drain_exits(1, &[]);
    let report = f.report();
    assert_eq!(report["items"][0]["outcome"], "rule_broken", "{report:#}");
    assert!(reason(&report, 0).contains(".git/config in "), "{report:#}");
    assert!(f.remote_branches().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn refusals_run_nothing_and_post_nothing() {
    let (f, gh) = calc().start().await.split();
    // No approval at all.
    let out = f.run(&["drain"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        text(&out).contains("nightshift approve"),
        "prints the SHA to approve: {}",
        text(&out)
    );
    // An approval for another SHA that was never planned.
    let out = f.run(&["drain", "--approve", &"a".repeat(64)]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    // Expired: an approval given 25 hours ago.
    let sha = f.plan_sha();
    f.db.sql(&format!(
        "INSERT INTO approvals (id, plan_sha, repo, approved_by, created_at, expires_at) SELECT gen_random_uuid(), '{sha}', repo, 't', now() - interval '25 hours', now() - interval '1 hour' FROM plans WHERE sha = '{sha}'"
    ));
    let out = f.run(&["drain", "--approve", &sha]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(text(&out).contains("expired"), "{}", text(&out));
    assert_eq!(f.db.count(Table::Runs), 0);
    // Used: one run consumes it; a second is refused.
    assert_ok(&f.run(&["approve", &sha]), "approve");
    let first = f.run(&["drain", "--approve", &sha]);
    assert_eq!(first.status.code(), Some(1), "{}", text(&first));
    let posts_after_first = gh.requests().await.len();
    let out = f.run(&["drain", "--approve", &sha]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(text(&out).contains("already used"), "{}", text(&out));
    // Without --approve too: the plan's own approval is named as used, by which run.
    let out = f.run(&["drain"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let run = f.db.runs()[0].id;
    assert!(
        text(&out).contains(&format!("already used by run {run}")),
        "{}",
        text(&out)
    );
    assert_eq!(
        gh.requests().await.len(),
        posts_after_first,
        "a refused run talked to GitHub"
    );
    assert_eq!(f.db.count(Table::Runs), 1);
    // `run ITEM` without an approval: its error line is the SHA to approve
    // now (the item's contract), not the used plan approval.
    let plan = f.run(&["plan", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    let contract = v["items"][1]["contract_sha"].as_str().unwrap().to_string();
    let out = f.run(&["run", "2"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    let line = err
        .lines()
        .find(|l| l.contains("approv"))
        .unwrap_or_default();
    assert!(
        line.contains(&format!("nightshift approve {contract}")) && !err.contains("already used"),
        "{err}"
    );
    // Approvals are immutable rows.
    let out = std::process::Command::new("psql")
        .args([
            f.db.url.as_str(),
            "-c",
            "UPDATE approvals SET approved_by = 'x'",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success(), "approvals must reject UPDATE");
}

/// `run ITEM` finds the approval of that item's contract by itself, as
/// `drain` finds its plan's (docs/contract.md#approval); the approval is then used up, and an
/// approval of another item's contract does not serve.
#[tokio::test(flavor = "multi_thread")]
async fn run_uses_the_approval_of_its_items_contract() {
    let (f, gh) = calc().start().await.split();
    let out = f.run(&["plan", "--json"]);
    assert_ok(&out, "plan");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let contract = |i: usize| v["items"][i]["contract_sha"].as_str().unwrap().to_string();
    assert_ok(
        &f.run(&["approve", &contract(1)]),
        "approve item 2's contract",
    );
    // Item 1 is not approved by it.
    let out = f.run(&["run", "1"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let out = f.run(&["run", "2"]);
    assert!(!text(&out).contains("approve it with"), "{}", text(&out));
    assert_eq!(f.report()["items"].as_array().unwrap().len(), 1);
    assert_eq!(f.db.count(Table::Runs), 1);
    // Used up: a second `run 2` is refused.
    let again = f.run(&["run", "2"]);
    assert_eq!(again.status.code(), Some(3), "{}", text(&again));
    gh.assert_never_merged_approved_or_closed().await;
}

/// An approval of a plan made before the backlog changed: `approve` warns
/// and names the current plan; the drain runs the unchanged item only, and
/// says of each other one whether it changed or is new (docs/contract.md).
#[tokio::test(flavor = "multi_thread")]
async fn a_changed_backlog_runs_only_what_was_approved() {
    let (f, gh) = calc().start().await.split();
    f.write("NEXT.md", "- [ ] Add sub\n- [ ] Add mul\n- [ ] Add div\n");
    let old = f.plan_sha();
    // `Add mul` gets a detail (same key), `Add div` is reworded (a new key
    // where the approved item sat), `Add pow` is new.
    f.write(
        "NEXT.md",
        "- [ ] Add sub\n- [ ] Add mul\n  - accept: mul multiplies\n- [ ] Add pow\n- [ ] Add the div word\n",
    );
    let out = f.run(&["approve", &old]);
    assert_ok(&out, "approve the older plan");
    let t = text(&out);
    let current = f.plan_sha();
    assert!(
        t.contains("changed since this plan was made")
            && t.contains(&format!("nightshift approve {current}"))
            && t.contains("only the 1 of 4"),
        "{t}"
    );
    let out = f.run(&["drain"]);
    assert_ok(&out, "drain");
    let rep = f.report();
    let items = rep["items"].as_array().unwrap();
    let of = |i: usize| {
        (
            items[i]["outcome"].as_str().unwrap().to_string(),
            items[i]["reason"].as_str().unwrap_or_default().to_string(),
        )
    };
    assert_eq!(of(0).0, "pr_opened", "{rep:#}");
    assert_eq!(of(1).0, "not_approved");
    assert!(of(1).1.contains("changed since the approval"), "{rep:#}");
    assert_eq!(of(2).0, "not_approved");
    assert!(of(2).1.contains("added after it"), "{rep:#}");
    assert_eq!(of(3).0, "not_approved");
    assert!(of(3).1.contains("changed since the approval"), "{rep:#}");
    assert_eq!(gh.prs().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn agents_never_see_tokens_or_the_ledger_url() {
    let token = "ghp_secret_value_987654321";
    let f = Night::new()
        .token(token)
        .env("GH_TOKEN", "gho_other_secret_123456")
        .writer_with(|f| {
            format!(
                "#!/bin/sh\nenv > {}\necho sub >> calc.txt\necho \"leak: $GITHUB_TOKEN\"\n",
                f.agents.join("env.txt").display()
            )
        })
        .items(["Add sub"])
        .exit(0)
        .run()
        .await;
    let env = std::fs::read_to_string(f.agents.join("env.txt")).unwrap();
    for var in [
        "GITHUB_TOKEN=",
        "GH_TOKEN=",
        "NIGHTSHIFT_DATABASE_URL=",
        "DATABASE_URL=",
    ] {
        assert!(
            !env.lines().any(|l| l.starts_with(var)),
            "{var} reached the agent"
        );
    }
    assert!(
        !env.contains(token) && !env.contains(&f.db.name),
        "a secret value reached the agent"
    );
    assert!(env.contains("NIGHTSHIFT_ROLE=writer"));
    assert!(env.contains("TZ="));
    // Nothing stored holds the token.
    let dumped =
        f.db.sql("SELECT string_agg(t::text, ' ') FROM (SELECT * FROM agent_calls) t");
    assert!(!dumped.contains(token), "the token is in the ledger");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_inputs_get_clear_messages_and_codes() {
    let f = Fixture::new();
    let w = f.agent("writer.sh", WRITER);
    let r = f.agent("reviewer.sh", REVIEWER);
    // Malformed config: file, line and key.
    f.config(&format!(
        "verify = [\"sh test.sh\"]\nverfy = 1\n[writer]\nkind = \"command\"\ncommand = [\"{w}\"]\n"
    ));
    f.write("NEXT.md", "- [ ] Add sub\n");
    let out = f.run(&["plan"]);
    assert_eq!(out.status.code(), Some(2));
    let t = text(&out);
    assert!(t.contains("config.toml:2") && t.contains("verfy"), "{t}");
    // Missing backlog.
    f.config_with(&w, &r, "backlog = \"TODO.md\"\n");
    let out = f.run(&["plan"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("TODO.md"), "{}", text(&out));
    // An agent_user that does not exist is refused at plan (as root).
    if nix::unistd::geteuid().is_root() {
        f.config_with(&w, &r, "agent_user = \"nightshift-no-such-account\"\n");
        let out = f.run(&["plan"]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(
            text(&out).contains("useradd -m nightshift-no-such-account"),
            "{}",
            text(&out)
        );
        f.config_with(&w, &r, "");
    }
    // A relative data dir is refused (it would land in the working tree).
    let out = f
        .cmd()
        .env("NIGHTSHIFT_DATA_DIR", "relative/data")
        .args(["plan"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("relative path") && !f.repo.join("relative").exists(),
        "{}",
        text(&out)
    );
    // A backlog that is a FIFO (or a directory) is refused, not read
    // forever.
    f.config_with(&w, &r, "backlog = \"PIPE.md\"\n");
    nix::unistd::mkfifo(
        &f.repo.join("PIPE.md"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    let out = f.run(&["plan"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("PIPE.md: not a regular file"),
        "{}",
        text(&out)
    );
    // Malformed detail lines: every problem with file:line, no card.
    f.config_with(&w, &r, "");
    f.write(
        "NEXT.md",
        "- [ ] One\n  - accept:\n- [ ] Two\n  - rounds: x\n- [ ] Three\n  - rounds: 99\n",
    );
    let out = f.run(&["plan"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let t = text(&out);
    assert!(
        t.contains("NEXT.md:2") && t.contains("NEXT.md:4") && t.contains("NEXT.md:6"),
        "{t}"
    );
    assert!(
        !t.contains("contract  sha256"),
        "no card before problems are fixed: {t}"
    );
    // No open items: nothing to do, exit 0.
    f.write("NEXT.md", "- [x] Done\n");
    let out = f.run(&["plan"]);
    assert_ok(&out, "plan with nothing open");
    assert!(text(&out).contains("no open items"), "{}", text(&out));
    // A verify command that does not exist: tests_failed, recorded.
    f.config(&format!("verify = [\"no-such-test-command-xyz\"]\n[limits]\nrounds = 1\n[writer]\nkind = \"command\"\ncommand = [\"{w}\"]\n[reviewer]\nkind = \"command\"\ncommand = [\"{r}\"]\n"));
    f.write("NEXT.md", "- [ ] Add sub\n");
    f.drain_exits(1, &[]);
    assert_eq!(f.report()["items"][0]["outcome"], "tests_failed");
    assert_eq!(f.db.sql("SELECT exit_code FROM gate_runs"), "127");
    // A writer command that does not exist: `plan` offers no SHA to approve
    // (the approval would only be spent on a refusal), in text and in JSON,
    // and stores no plan that `approve` could take.
    f.config(&format!("verify = [\"sh test.sh\"]\n[writer]\nkind = \"command\"\ncommand = [\"/no/such/writer\"]\n[reviewer]\nkind = \"command\"\ncommand = [\"{r}\"]\n"));
    let plans_before = f.db.count(Table::Plans);
    let out = f.run(&["plan"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let t = text(&out);
    assert!(
        t.contains("/no/such/writer")
            && t.contains("no SHA to approve")
            && t.contains("fix [writer] command")
            && !t.contains("approve it with"),
        "{t}"
    );
    let out = f.run(&["plan", "--json"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("plan --json is JSON");
    assert!(v["plan_sha"].is_null() && v["runnable"] == false, "{v}");
    assert!(
        v["problems"][0]
            .as_str()
            .is_some_and(|p| p.contains("/no/such/writer")),
        "{v}"
    );
    assert_eq!(f.db.count(Table::Plans), plans_before);
    // A writer that disappears after the approval: the drain exits 2 before
    // the approval is consumed, names it, and the ledger records the refusal.
    let gone = f.agent("gone-writer.sh", WRITER);
    f.config(&format!("verify = [\"sh test.sh\"]\n[writer]\nkind = \"command\"\ncommand = [\"{gone}\"]\n[reviewer]\nkind = \"command\"\ncommand = [\"{r}\"]\n"));
    let sha = f.plan_sha();
    assert_ok(&f.run(&["approve", &sha]), "approve");
    std::fs::remove_file(&gone).unwrap();
    let runs_before = f.db.count(Table::Runs);
    let out = f.run(&["drain"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("gone-writer.sh"), "{}", text(&out));
    assert_eq!(f.db.count(Table::Runs), runs_before, "no run started");
    assert!(
        f.db.sql(
            "SELECT data->>'reason' FROM events WHERE kind = 'refused' ORDER BY seq DESC LIMIT 1"
        )
        .contains("gone-writer.sh")
    );
    assert_eq!(f.db.sql("SELECT count(*) FROM approval_uses u JOIN approvals a ON a.id = u.approval_id WHERE a.created_at = (SELECT max(created_at) FROM approvals)"), "0", "the approval was not consumed");
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_token_branches_are_pushed_and_prs_shown() {
    let f = Fixture::new();
    let w = f.agent("writer.sh", WRITER);
    let r = f.agent("reviewer.sh", REVIEWER);
    // The gate leaves an artifact behind and touches a tracked file: neither
    // is the writer's work, so neither may reach the proof or the commit.
    f.config(&format!(
        "verify = [\"sh test.sh && date > gate-artifact.txt && echo touched >> docs/README.md\"]\n[writer]\nkind = \"command\"\ncommand = [\"{w}\"]\n[reviewer]\nkind = \"command\"\ncommand = [\"{r}\"]\n"
    ));
    f.write(
        "NEXT.md",
        "- [ ] Add pow\n  - scope: calc.txt\n- [ ] Needs a person\n  - question: which base?\n",
    );
    f.drain_exits(0, &[]);
    let rep = f.report();
    assert_eq!(rep["items"][0]["outcome"], "branch_pushed", "{rep:#}");
    // The summary's counts agree with the rows: no PR was opened.
    assert_eq!(rep["totals"]["prs_opened"], 0, "{rep:#}");
    assert_eq!(rep["totals"]["branches_pushed"], 1, "{rep:#}");
    assert!(
        rep["items"][0]["pr_body"]
            .as_str()
            .unwrap()
            .contains("nightshift-item")
    );
    assert_eq!(rep["items"][1]["outcome"], "blocked");
    // The report's row and doctor's token line say one thing about the
    // missing token on a local remote.
    let reason = rep["items"][0]["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let (what, fix) = reason.split_once("; ").expect("what; fix");
    assert!(
        what.contains("no GitHub token") && fix.contains("report --show-body"),
        "{reason}"
    );
    let doctor = String::from_utf8_lossy(&f.run(&["doctor"]).stdout).to_string();
    assert!(
        doctor
            .lines()
            .any(|l| l.starts_with("warn token ") && l.ends_with(&format!("{what} — fix: {fix}"))),
        "{doctor}"
    );
    let branches = f.remote_branches();
    assert_eq!(branches.len(), 1);
    assert_eq!(
        git(&f.remote, &["diff", "--name-only", "main", &branches[0]]),
        "calc.txt",
        "gate leftovers were committed"
    );
    let shown = f.run(&["report", "--show-body"]);
    assert_ok(&shown, "report --show-body");
    assert!(
        text(&shown).contains("would have been opened"),
        "{}",
        text(&shown)
    );
    // The writer's FINDINGS were recorded.
    assert_eq!(
        f.db.sql("SELECT title FROM findings"),
        "docs/README.md is out of date"
    );
    // Pushed without a PR, the branch is what stands for the item: while it
    // is on the remote the item is not redone; once deleted, it is.
    let out = f.approve_and_drain(&[]);
    assert_ok(&out, "second drain");
    let rep = f.report();
    assert_eq!(rep["items"][0]["outcome"], "branch_pushed", "{rep:#}");
    assert!(rep["items"][0]["pr_number"].is_null(), "{rep:#}");
    // `run ITEM` on that item, or on a blocked one, says it will not run
    // before asking for an approval, and uses none.
    let approvals = f.db.count(Table::Approvals);
    let uses = f.db.count(Table::ApprovalUses);
    let runs = f.db.count(Table::Runs);
    for (item, why) in [("1", "was pushed by an earlier night"), ("2", "is blocked")] {
        let out = f.run(&["run", item]);
        assert_ok(&out, "run of an item that will not run");
        assert!(
            text(&out).contains("will not run") && text(&out).contains(why),
            "{}",
            text(&out)
        );
        assert!(!text(&out).contains("approve it with"), "{}", text(&out));
    }
    assert_eq!(f.db.count(Table::Approvals), approvals);
    assert_eq!(f.db.count(Table::ApprovalUses), uses);
    assert_eq!(f.db.count(Table::Runs), runs);
    git(&f.remote, &["branch", "-D", &branches[0]]);
    let out = f.approve_and_drain(&[]);
    assert_ok(&out, "third drain");
    assert_eq!(f.report()["items"][0]["outcome"], "branch_pushed");
    assert_eq!(f.remote_branches().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_embedded_database_through_the_binary() {
    let f = Fixture::new();
    let w = f.agent("writer.sh", WRITER);
    let r = f.agent("reviewer.sh", REVIEWER);
    f.config_with(&w, &r, "");
    f.write("NEXT.md", "- [ ] Add sub\n");
    let embedded = |args: &[&str]| {
        let mut c = f.cmd();
        c.env_remove("NIGHTSHIFT_DATABASE_URL")
            .env_remove("DATABASE_URL");
        c.args(args).output().expect("nightshift runs")
    };
    let out = embedded(&["db", "status"]);
    assert_ok(&out, "db status");
    assert!(text(&out).contains("running: no"), "{}", text(&out));
    // First use creates and starts the private cluster, and says so once,
    // with where and how to stop it; a second run reuses it.
    let out = embedded(&["plan", "--json"]);
    assert_ok(&out, "plan on the embedded database");
    let said = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        said.contains(&format!(
            "created a private PostgreSQL for nightshift's ledger at {}",
            f.data.join("pg").display()
        )) && said.contains("left it running")
            && said.contains("`nightshift db stop`"),
        "{said}"
    );
    let again = embedded(&["plan", "--json"]);
    assert_ok(&again, "a second plan");
    assert!(
        !String::from_utf8_lossy(&again.stderr).contains("created a private PostgreSQL"),
        "said once only: {}",
        text(&again)
    );
    let status = text(&embedded(&["db", "status"]));
    assert!(status.contains("running: yes"), "{status}");
    let pid = status
        .split("pid ")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .unwrap()
        .to_string();
    let sha: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_ok(
        &embedded(&["approve", sha["plan_sha"].as_str().unwrap()]),
        "approve",
    );
    assert!(
        text(&embedded(&["db", "status"])).contains(&format!("pid {pid}")),
        "the cluster was not reused"
    );
    let data_dir = f.data.join("pg");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&data_dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
    let conf = std::fs::read_to_string(data_dir.join("postgresql.auto.conf")).unwrap_or_default()
        + &std::fs::read_to_string(data_dir.join("nightshift.conf")).unwrap_or_default();
    assert!(
        conf.contains("listen_addresses = ''") || conf.contains("listen_addresses=''"),
        "the private cluster must not listen on TCP: {conf}"
    );
    let stopped = embedded(&["db", "stop"]);
    assert_ok(&stopped, "db stop");
    assert!(
        text(&stopped).starts_with("the embedded database is stopped"),
        "{}",
        text(&stopped)
    );
    assert!(text(&embedded(&["db", "status"])).contains("running: no"));
    // Missing server binaries: the documented message.
    let mut c = f.cmd();
    c.env_remove("NIGHTSHIFT_DATABASE_URL")
        .env("NIGHTSHIFT_PG_BINDIR", f.dir.path().join("empty-bindir"));
    std::fs::create_dir_all(f.dir.path().join("empty-bindir")).unwrap();
    let out = c.args(["plan"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("apt-get install postgresql"),
        "{}",
        text(&out)
    );
}

/// GitHub unreachable: the night still does its work. The first failed
/// look-up marks GitHub down for the run; every item's branch is pushed and
/// recorded `pr_failed`, to be opened by the next run.
#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_github_does_not_stall_the_night() {
    let started = std::time::Instant::now();
    let f = Night::new()
        .github_url("http://127.0.0.1:1")
        .token("ghp_unreachable_0123456789")
        .env("NIGHTSHIFT_GITHUB_BACKOFF_MS", "10")
        .writer(WRITER)
        .reviewer(REVIEWER)
        .items(["Add sub", "Add pow"])
        .exit(1)
        .outcomes(&["pr_failed", "pr_failed"])
        .run()
        .await;
    assert_eq!(f.remote_branches().len(), 2, "the work is pushed");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(f.db.pr_states(), ["pr_failed", "pr_failed"]);
}

/// A base branch missing on the remote stops the run before the approval is
/// consumed, instead of failing every item.
#[tokio::test(flavor = "multi_thread")]
async fn a_missing_base_branch_is_a_usage_error() {
    let f = Night::new()
        .writer(WRITER)
        .reviewer(REVIEWER)
        .config("base = \"develop\"\n")
        .items(["Add sub"])
        .exit(2)
        .run()
        .await;
    let out = f.out();
    assert!(
        text(out).contains("\"develop\" does not exist on the remote"),
        "{}",
        text(out)
    );
    assert_eq!(f.db.count(Table::Runs), 0);
}

/// Two clones of one repository are one repository to nightshift: they
/// share the lock and the history, so the second clone does not redo (and
/// force-push over) what the first did.
#[tokio::test(flavor = "multi_thread")]
async fn two_clones_of_one_repository_share_its_history() {
    let f = Night::new()
        .writer(WRITER)
        .reviewer(REVIEWER)
        .items(["Add sub"])
        .exit(0)
        .run()
        .await;
    let first = git(&f.remote, &["rev-parse", &f.remote_branches()[0]]);
    // A second clone of the same remote, through another spelling of its URL.
    let second = f.dir.path().join("second");
    git(
        f.dir.path(),
        &[
            "clone",
            "-q",
            &format!("file://{}/", f.remote.display()),
            second.to_str().unwrap(),
        ],
    );
    std::fs::create_dir_all(second.join(".nightshift")).unwrap();
    std::fs::copy(
        f.repo.join(".nightshift/config.toml"),
        second.join(".nightshift/config.toml"),
    )
    .unwrap();
    std::fs::copy(f.repo.join("NEXT.md"), second.join("NEXT.md")).unwrap();
    let run = |args: &[&str]| f.cmd().current_dir(&second).args(args).output().unwrap();
    let plan: serde_json::Value = serde_json::from_slice(&run(&["plan", "--json"]).stdout).unwrap();
    assert_ok(
        &run(&["approve", plan["plan_sha"].as_str().unwrap()]),
        "approve in the second clone",
    );
    let out = run(&["drain", "--deadline", &common::far_deadline()]);
    assert_ok(&out, "drain in the second clone");
    let rep: serde_json::Value =
        serde_json::from_slice(&run(&["report", "--json"]).stdout).unwrap();
    assert_eq!(rep["items"][0]["outcome"], "branch_pushed", "{rep:#}");
    assert_eq!(
        git(&f.remote, &["rev-parse", &f.remote_branches()[0]]),
        first,
        "the branch was not pushed over"
    );
}

/// Runs `night` over the one item "Add sub", which must end in `error`
/// (exit 1); returns the world and its report.
async fn one_item_ends_in_error(night: Night<'_>) -> (World, serde_json::Value) {
    let f = night
        .items(["Add sub"])
        .exit(1)
        .outcomes(&["error"])
        .run()
        .await;
    let rep = f.report();
    (f, rep)
}

/// A file GitHub would refuse (100 MiB or more) fails the item with the
/// reason instead of a push that cannot succeed.
#[tokio::test(flavor = "multi_thread")]
async fn a_file_too_large_for_github_is_not_pushed() {
    let (f, rep) = one_item_ends_in_error(
        Night::new()
            .writer("#!/bin/sh\necho sub >> calc.txt\ntruncate -s 100M huge.bin\n")
            .reviewer(REVIEWER),
    )
    .await;
    assert!(reason(&rep, 0).contains("huge.bin is 100 MiB"), "{rep:#}");
    assert!(f.remote_branches().is_empty());
    // Found from sizes right after the writer: no diff of it, no gate, no review.
    assert_eq!(f.db.count(Table::Proofs), 0);
    assert_eq!(f.db.count(Table::GateRuns), 0);
    assert_eq!(f.db.count(Table::Reviews), 0);
}

/// A reviewer that prints an approval and then fails is not trusted.
#[tokio::test(flavor = "multi_thread")]
async fn a_failing_reviewer_approval_is_not_trusted() {
    let (f, rep) = one_item_ends_in_error(
        Night::new()
            .writer(WRITER)
            .reviewer("#!/bin/sh\necho '{\"verdict\":\"approve\",\"findings\":[]}'\nexit 1\n")
            .config("[limits]\nrounds = 1\n"),
    )
    .await;
    assert!(reason(&rep, 0).contains("the reviewer failed"), "{rep:#}");
    assert!(f.remote_branches().is_empty());
}

/// A remote that cannot be fetched fails the item's checkout, and that is
/// not the item's failure: it does not count towards `max_attempts`, so
/// the item runs again once the remote is back.
#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_remote_does_not_use_up_max_attempts() {
    let (f, gh) = calc().start().await.split();
    let w = f.agents.join("writer.sh").display().to_string();
    let r = f.agents.join("reviewer.sh").display().to_string();
    f.config_with(&w, &r, "[limits]\nmax_attempts = 1\n");
    f.write("NEXT.md", "- [ ] Add sub\n- [ ] Add mul\n");
    let url = git(&f.repo, &["remote", "get-url", "origin"]);
    git(
        &f.repo,
        &["remote", "set-url", "origin", "/nonexistent/remote.git"],
    );
    for _ in 0..2 {
        f.drain_exits(1, &[]);
        let rep = f.report();
        assert_eq!(rep["items"][0]["outcome"], "error", "{rep:#}");
        assert!(
            rep["items"][0]["reason"]
                .as_str()
                .unwrap()
                .starts_with("checkout failed:"),
            "{rep:#}"
        );
        // The second item does not wait for the same remote again.
        assert!(
            rep["items"][1]["reason"]
                .as_str()
                .unwrap()
                .starts_with("checkout failed: not tried, the remote could not be fetched earlier"),
            "{rep:#}"
        );
    }
    git(&f.repo, &["remote", "set-url", "origin", &url]);
    let out = f.approve_and_drain(&[]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "item 2 (mul) is rejected by the reviewer: {}",
        text(&out)
    );
    assert_eq!(f.report()["items"][0]["outcome"], "pr_opened");
    assert_eq!(gh.prs().len(), 1);
}

/// An agent given by a path relative to the repository (`tools/writer.sh`)
/// is that file, although agents run in a checkout elsewhere.
#[tokio::test(flavor = "multi_thread")]
async fn agents_given_by_a_relative_path_are_the_repositorys_files() {
    let (f, gh) = calc().start().await.split();
    let tools = f.repo.join("tools");
    std::fs::create_dir_all(&tools).unwrap();
    std::fs::copy(f.agents.join("writer.sh"), tools.join("writer.sh")).unwrap();
    std::fs::copy(f.agents.join("reviewer.sh"), tools.join("reviewer.sh")).unwrap();
    f.config_with("tools/writer.sh", "./tools/reviewer.sh", "");
    f.write("NEXT.md", "- [ ] Add sub\n");
    f.drain_exits(0, &[]);
    assert_eq!(f.report()["items"][0]["outcome"], "pr_opened");
    assert_eq!(gh.prs().len(), 1);
}

/// A branch pushed by a night without GitHub access ("planned") gets its PR
/// from the first night that has a token, from the pushed branch and its
/// recorded card, without redoing the work.
#[tokio::test(flavor = "multi_thread")]
async fn a_branch_pushed_without_a_token_gets_its_pr_from_the_next_run_with_one() {
    let gh = FakeGitHub::start().await;
    let mut f = Fixture::new();
    let calls = f.agents.join("writer-calls");
    let w = f.agent(
        "writer.sh",
        &format!(
            "#!/bin/sh\necho call >> {}\necho sub >> calc.txt\necho 'added sub'\n",
            calls.display()
        ),
    );
    let r = f.agent("reviewer.sh", REVIEWER);
    f.config_with(&w, &r, "");
    f.write("NEXT.md", "- [ ] Add sub\n");
    // Night 1: no token, no GitHub repository.
    let out = f.approve_and_drain(&[]);
    assert_ok(&out, "the night without GitHub");
    assert_eq!(f.remote_branches().len(), 1);
    assert_eq!(f.db.pr_states(), ["planned"]);
    // The card says what happens to it next, and under which condition.
    let plan = f.run(&["plan"]);
    assert!(
        text(&plan).contains("a run with a GitHub token opens its PR"),
        "{}",
        text(&plan)
    );
    // Night 2: with a token, the PR is opened from the pushed branch.
    f.use_github(&gh);
    f.token = Some("ghp_second_night_token_0123456789".into());
    let out = f.approve_and_drain(&[]);
    assert_ok(&out, "the night with GitHub");
    let rep = f.report();
    assert_eq!(rep["items"][0]["outcome"], "pr_opened", "{rep:#}");
    assert_eq!(gh.prs().len(), 1);
    assert_eq!(
        std::fs::read_to_string(&calls).unwrap().lines().count(),
        1,
        "the work was not redone"
    );
    assert_eq!(f.db.pr_states(), ["open"]);
}

/// Config read errors name file, line and key, and say what to write
/// instead (issue 14.8): a string where a list is expected keeps its value.
#[test]
fn config_read_errors_say_what_to_write() {
    let f = Fixture::new();
    f.write("NEXT.md", "- [ ] Add sub\n");
    for (config, at, fix) in [
        (
            "verify = \"sh test.sh\"\n",
            1,
            "`verify = [\"sh test.sh\"]`",
        ),
        (
            "base = \"main\"\n[writer]\nkind = \"claud\"\n",
            3,
            "`kind = \"claude\"`",
        ),
        ("[limits]\nrounds = -1\n", 2, "`rounds = 3`"),
        (
            "[limits]\nagent_timeout = 45\n",
            2,
            "`agent_timeout = \"60m\"`",
        ),
        (
            "[limits]\ngate_timeout = \"soon\"\n",
            2,
            "write e.g. \"45m\"",
        ),
        ("tick_in_pr = \"yes\"\n", 1, "`tick_in_pr = false`"),
        ("base = main\n", 1, "`base = \"main\"`"),
        (
            "github_repo = \"nope\"\n",
            1,
            "`github_repo = \"owner/repo\"`",
        ),
    ] {
        // Written as is: the lines the messages name are the ones above.
        f.write(".nightshift/config.toml", config);
        let out = f.run(&["plan"]);
        assert_eq!(out.status.code(), Some(2), "{config}: {}", text(&out));
        let t = text(&out);
        assert!(
            t.contains(&format!(".nightshift/config.toml:{at}:")) && t.contains(fix),
            "{config:?}: {t}"
        );
    }
}

/// One duration grammar in the config and the backlog, titles of invisible
/// characters only are no items, and a ledger URL without a password is
/// shown whole (issue 14.16).
#[test]
fn one_duration_grammar_no_invisible_titles_and_a_readable_ledger_url() {
    let f = Fixture::new();
    let w = f.agent("writer.sh", WRITER);
    let r = f.agent("reviewer.sh", REVIEWER);
    f.config_with(
        &w,
        &r,
        "[limits]\nagent_timeout = \"10 minutes\"\nitem_timeout = \"3 hours\"\n",
    );
    f.write("NEXT.md", "- [ ] Add sub\n  - timeout: 45 minutes\n");
    let out = f.run(&["plan"]);
    assert_ok(&out, "plan with worded durations");
    let t = text(&out);
    assert!(t.contains("45m") && t.contains("10m"), "{t}");
    // A zero-width space and a word joiner: nothing a person can see.
    f.write("NEXT.md", "- [ ] Add sub\n- [ ] \u{200B}\u{2060}\n");
    let out = f.run(&["plan"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let t = text(&out);
    assert!(
        t.contains("NEXT.md:2: the title is only invisible characters (U+200B U+2060)"),
        "{t}"
    );
    // The fixture's ledger URL has no password: doctor shows it, not `****`.
    let out = f.run(&["doctor"]);
    let line = String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.contains(" database "))
        .unwrap_or_default()
        .to_string();
    assert!(
        line.contains(&f.db.name) && line.contains("@") && !line.contains("****"),
        "{line}"
    );
    // With a password, only the password is masked.
    let out = f
        .cmd()
        .env(
            "NIGHTSHIFT_DATABASE_URL",
            "postgres://nightshift:Xk9-secret-pw@127.0.0.1:1/ledger",
        )
        .args(["doctor"])
        .output()
        .unwrap();
    let t = text(&out);
    assert!(
        !t.contains("Xk9-secret-pw") && t.contains("postgres://nightshift@127.0.0.1:1/ledger"),
        "{t}"
    );
}

/// `init` guesses the gate from the repository's files, says so, and names
/// the config in its "next" line; with nothing to go by it writes a marked
/// placeholder that `plan` refuses (issue 14.4).
#[test]
fn init_guesses_the_gate_or_writes_a_placeholder() {
    let f = Fixture::new();
    let cfg = f.repo.join(".nightshift/config.toml");
    // The fixture is a shell project: no test tool to go by.
    let out = f.run(&["init"]);
    assert_ok(&out, "init");
    let t = text(&out);
    assert!(
        t.contains("holds a placeholder")
            && t.contains(&format!("next: set `verify` in {}", cfg.display())),
        "{t}"
    );
    let written = std::fs::read_to_string(&cfg).unwrap();
    assert!(
        written.contains("# PLACEHOLDER: set your test command"),
        "{written}"
    );
    let out = f.run(&["plan"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("placeholder"), "{}", text(&out));
    for (file, body, gate, why) in [
        (
            "Cargo.toml",
            "[package]\nname = \"x\"\n",
            "cargo test",
            "Cargo.toml",
        ),
        (
            "package.json",
            "{\"scripts\": {\"test\": \"node test.js\"}}",
            "npm test",
            "package.json has a `test` script",
        ),
        ("pytest.ini", "[pytest]\n", "pytest", "pytest.ini"),
        (
            "pyproject.toml",
            "[tool.pytest.ini_options]\n",
            "pytest",
            "pyproject.toml mentions pytest",
        ),
        ("go.mod", "module x\n", "go test ./...", "go.mod"),
        (
            "Makefile",
            "all:\n\ttrue\ntest:\n\tsh test.sh\n",
            "make test",
            "Makefile has a `test:` target",
        ),
    ] {
        std::fs::remove_file(&cfg).unwrap();
        f.write(file, body);
        let out = f.run(&["init"]);
        assert_ok(&out, "init");
        let t = text(&out);
        assert!(
            t.contains(&format!("gate:   verify = [\"{gate}\"] (guessed: {why})"))
                && t.contains(&format!("next: check {} (gate `{gate}`", cfg.display())),
            "{file}: {t}"
        );
        let written = std::fs::read_to_string(&cfg).unwrap();
        assert!(
            written.contains(&format!("verify = [\"{gate}\"]")),
            "{written}"
        );
        std::fs::remove_file(f.repo.join(file)).unwrap();
    }
    // A package.json without a test script shows no test command.
    std::fs::remove_file(&cfg).unwrap();
    f.write("package.json", "{\"scripts\": {\"build\": \"tsc\"}}");
    assert!(text(&f.run(&["init"])).contains("holds a placeholder"));
}

/// `doctor` checks the backlog (found, well formed) and the gate (every
/// program of every `verify` command exists where the gate runs it, and a
/// project tool has its project file) (issue 14.2).
#[test]
fn doctor_checks_the_backlog_and_the_gate() {
    let mut f = Fixture::new();
    let w = f.agent("writer.sh", WRITER);
    let r = f.agent("reviewer.sh", REVIEWER);
    f.config_with(&w, &r, "");
    f.write("NEXT.md", "- [ ] Add sub\n");
    let doctor = |f: &Fixture| {
        let out = f.run(&["doctor"]);
        let t = String::from_utf8_lossy(&out.stdout).to_string();
        (out.status.code(), t)
    };
    let line = |t: &str, start: &str| {
        t.lines()
            .find(|l| l.starts_with(start))
            .unwrap_or_else(|| panic!("no line {start:?} in:\n{t}"))
            .to_string()
    };
    let (code, t) = doctor(&f);
    assert_eq!(code, Some(0), "{t}");
    assert!(line(&t, "ok   backlog ").contains("1 open item(s)"), "{t}");
    assert!(line(&t, "ok   gate ").contains("`sh test.sh`"), "{t}");
    // No backlog: a failed check with the fix.
    std::fs::remove_file(f.repo.join("NEXT.md")).unwrap();
    let (code, t) = doctor(&f);
    assert_eq!(code, Some(1), "{t}");
    let l = line(&t, "FAIL backlog ");
    assert!(
        l.contains("backlog not found") && l.contains(" — fix: "),
        "{l}"
    );
    // A malformed item: named with file:line.
    f.write("NEXT.md", "- [ ] Add sub\n  - accept:\n");
    let (code, t) = doctor(&f);
    assert_eq!(code, Some(1), "{t}");
    assert!(line(&t, "FAIL backlog ").contains("NEXT.md:2"), "{t}");
    // Gate programs that are not there: a script of the repository behind
    // `env`, a tool not on PATH, and an item's own `verify:`.
    f.write(
        "NEXT.md",
        "- [ ] Add sub\n  - verify: `missing-tool-abc --x`\n",
    );
    let gate = |f: &Fixture, verify: &str| {
        f.config(&format!("verify = {verify}\n[writer]\nkind = \"command\"\ncommand = [\"{w}\"]\n[reviewer]\nkind = \"command\"\ncommand = [\"{r}\"]\n"))
    };
    gate(
        &f,
        "[\"env CI=1 ./scripts/check.sh\", \"cd . && no-such-tool-xyz --all\"]",
    );
    let (code, t) = doctor(&f);
    assert_eq!(code, Some(1), "{t}");
    let l = line(&t, "FAIL gate ");
    assert!(
        l.contains("./scripts/check.sh is not a file of the repository")
            && l.contains("`no-such-tool-xyz` is not on PATH")
            && l.contains("NEXT.md:2 verify:")
            && l.contains("`missing-tool-abc` is not on PATH"),
        "{l}"
    );
    // The same script, there and executable, with builtins around it: fine.
    f.write("scripts/check.sh", "#!/bin/sh\nexit 0\n");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        f.repo.join("scripts/check.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    f.write("NEXT.md", "- [ ] Add sub\n");
    gate(&f, "[\"env CI=1 ./scripts/check.sh && test -f calc.txt\"]");
    let (code, t) = doctor(&f);
    assert_eq!(code, Some(0), "{t}");
    assert!(line(&t, "ok   gate ").contains("./scripts/check.sh"), "{t}");
    // A shell project under the default gate (`cargo test`): warned, even
    // with cargo installed, with the fix.
    let bin = f.dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let cargo = bin.join("cargo");
    std::fs::write(&cargo, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
    prepend_path(&mut f, &bin);
    // The sandbox is shown this cargo (else `doctor`'s toolchain line
    // fails: tests/it/sandbox.rs).
    f.config(&format!(
        "[writer]\nkind = \"command\"\ncommand = [\"{w}\"]\n[reviewer]\nkind = \"command\"\ncommand = [\"{r}\"]\n[sandbox]\nread = [\"{}\"]\n",
        bin.display()
    ));
    let (code, t) = doctor(&f);
    assert_eq!(code, Some(0), "{t}");
    let l = line(&t, "warn gate ");
    assert!(
        l.contains("`cargo test` runs cargo, but the repository has no Cargo.toml")
            && l.contains("set `verify` in"),
        "{l}"
    );
}

/// What the gate does to the checkout is measured from two walks, and
/// only what git would commit is put back (issue 12): a tracked file the
/// gate appended to, an untracked file it made and a commit it made (HEAD
/// moved) are gone before the reviewer reads the checkout, while its build
/// output in an ignored directory stays. The reviewer requests changes if
/// it sees any of the gate's work, so the pushed branch proves it saw none;
/// the branch holds the writer's change alone, on the base.
#[tokio::test(flavor = "multi_thread")]
async fn the_reviewer_reads_the_writers_work_whatever_the_gate_did() {
    let f = Fixture::new();
    let w = f.agent("writer.sh", WRITER);
    let r = f.agent(
        "reviewer.sh",
        "#!/bin/sh\nif grep -q touched docs/README.md || [ -e gate-artifact.txt ] || [ ! -e build/out.o ] || [ \"$(git rev-parse HEAD)\" != \"$(git rev-parse origin/main)\" ]; then\n  echo '{\"verdict\":\"request_changes\",\"findings\":[\"gate work is in the checkout\"]}'\nelse\n  echo '{\"verdict\":\"approve\",\"findings\":[]}'\nfi\n",
    );
    f.write(".gitignore", "build/\n");
    git(&f.repo, &["add", ".gitignore"]);
    git(&f.repo, &["commit", "-qm", "ignore build"]);
    git(&f.repo, &["push", "-q", "origin", "HEAD"]);
    f.config(&format!(
        "verify = [\"sh test.sh && mkdir -p build && echo o > build/out.o && date > gate-artifact.txt && echo touched >> docs/README.md && git -c user.name=g -c user.email=g@example.com commit -qam gate\"]\n[writer]\nkind = \"command\"\ncommand = [\"{w}\"]\n[reviewer]\nkind = \"command\"\ncommand = [\"{r}\"]\n"
    ));
    f.write("NEXT.md", "- [ ] Add pow\n  - scope: calc.txt\n");
    f.drain_exits(0, &[]);
    let rep = f.report();
    assert_eq!(rep["items"][0]["outcome"], "branch_pushed", "{rep:#}");
    let branches = f.remote_branches();
    assert_eq!(branches.len(), 1);
    assert_eq!(
        git(&f.remote, &["diff", "--name-only", "main", &branches[0]]),
        "calc.txt"
    );
    assert_eq!(
        git(&f.remote, &["rev-parse", &format!("{}^", branches[0])]),
        git(&f.remote, &["rev-parse", "main"]),
        "one commit on the base"
    );
}
