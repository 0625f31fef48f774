//! The item loop through the real binary (docs/backlog.md, docs/contract.md, docs/loop.md, docs/agents.md): no-progress
//! detection, feedback between rounds, caps with provenance, recipes,
//! findings and questions, hanging agents, `agent_user`, and the token's
//! secrecy. Real PostgreSQL, real git, the fake GitHub, script agents.

use crate::common;
use crate::common::night::APPROVE;
use common::Table;

use std::path::Path;
use std::time::{Duration, Instant};

use common::github::FakeGitHub;
use common::{Fixture, Night, assert_ok, git, prepend_path, reason, text};
use serde_json::Value;

/// The writer script's dispatch on the contract's title.
const TITLE: &str =
    "title=$(grep -o '\"title\":\"[^\"]*\"' \"$NIGHTSHIFT_CONTRACT_FILE\" | head -1)\n";

fn outcomes(report: &Value) -> Vec<String> {
    report["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["outcome"].as_str().unwrap().to_string())
        .collect()
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[tokio::test(flavor = "multi_thread")]
async fn no_progress_stops_after_three_same_rounds_and_feedback_carries_the_failure() {
    let f = Fixture::new();
    let ev = f.agents.display().to_string();
    let w = f.agent(
        "writer.sh",
        &format!(
            "#!/bin/sh\n{TITLE}case \"$title\" in\n  *gate*) tag=gate; printf 'add\\nbogus\\n' > calc.txt ;;\n  *findings*) tag=findings; printf 'add\\nsub\\n' > calc.txt ;;\n  *changing*) tag=changing; printf 'add\\nbogus%s\\n' \"$NIGHTSHIFT_ROUND\" > calc.txt ;;\n  *writer*) echo 'sh: 1: arithmetic expression: expecting primary' >&2; exit 2 ;;\nesac\ncp \"$NIGHTSHIFT_FEEDBACK_FILE\" \"{ev}/feedback-$tag-$NIGHTSHIFT_ROUND.txt\"\n"
        ),
    );
    let r = f.agent(
        "reviewer.sh",
        "#!/bin/sh\nif grep -qx sub calc.txt; then echo '{\"verdict\":\"request_changes\",\"findings\":[\"sub needs a test\",\"explain sub in docs\"]}'; else echo '{\"verdict\":\"approve\",\"findings\":[]}'; fi\n",
    );
    f.config_with(&w, &r, "[limits]\nrounds = 5\n");
    f.write(
        "NEXT.md",
        "- [ ] Same gate failure\n- [ ] Same findings\n- [ ] A changing diff\n- [ ] Same writer failure\n",
    );
    f.drain_exits(1, &[]);
    let rep = f.report();
    assert_eq!(
        outcomes(&rep),
        ["no_progress", "no_progress", "tests_failed", "no_progress"],
        "{rep:#}"
    );
    let rounds: Vec<i64> = rep["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["rounds"].as_i64().unwrap())
        .collect();
    assert_eq!(
        rounds,
        [3, 3, 5, 3],
        "no_progress wins over the round cap; a changing diff runs to the cap: {rep:#}"
    );
    // The reason says which command failed, how, and what it printed, in words.
    // Wrapped in no_progress, every reason names the failing step and its
    // telling line.
    let why = |i: usize| rep["items"][i]["reason"].as_str().unwrap().to_string();
    assert!(
        why(0).contains(
            "3 rounds in a row with the same diff and the same failure: the gate failed in round 3: `sh test.sh` exited 1: unknown word: bogus"
        ),
        "{}",
        why(0)
    );
    assert!(
        why(1).contains("the same findings: the reviewer requested changes in round 3: sub needs a test; explain sub in docs"),
        "{}",
        why(1)
    );
    assert!(
        why(3).starts_with(
            "3 rounds in a row with the same diff and the same failure: the writer failed: "
        ) && why(3).contains("expecting primary"),
        "{}",
        why(3)
    );

    // Round 1 has no feedback; round 2 gets the failing gate's tail, or the findings.
    let fb = |tag: &str, n: u32| f.agents.join(format!("feedback-{tag}-{n}.txt"));
    assert_eq!(read(&fb("gate", 1)), "");
    let g2 = read(&fb("gate", 2));
    assert!(
        g2.contains("sh test.sh")
            && g2.contains("unknown word: bogus")
            && g2.contains("exit code 1"),
        "{g2}"
    );
    let r2 = read(&fb("findings", 2));
    assert!(
        r2.contains("sub needs a test") && r2.contains("explain sub in docs"),
        "{r2}"
    );
    let c3 = read(&fb("changing", 3));
    assert!(
        c3.contains("unknown word: bogus2"),
        "round 3 sees round 2's failure: {c3}"
    );
    assert!(
        !fb("gate", 4).exists(),
        "a fourth round ran after no progress"
    );
    assert!(f.remote_branches().is_empty());
}

/// A writer whose behaviour (and reported usage) depends on the title.
const CAPS_WRITER: &str = r#"case "$title" in
  *Sleep*) sleep 60 ;;
  *tokens*) echo sub >> calc.txt; echo '{"usage":{"input_tokens":600,"output_tokens":500}}' ;;
  *pricey*) echo sub >> calc.txt; echo '{"usage":{"input_tokens":10,"output_tokens":10,"cost_usd":3.0}}' > "$NIGHTSHIFT_USAGE_FILE" ;;
  *sub*) echo sub >> calc.txt; echo '{"usage":{"input_tokens":10,"output_tokens":5,"cost_usd":0.6}}' ;;
  *div*) echo div >> calc.txt; echo '{"usage":{"input_tokens":10,"output_tokens":5,"cost_usd":0.6}}' ;;
  *pow*) echo pow >> calc.txt ;;
esac
"#;

fn caps_world(limits: &str, backlog: &str) -> Fixture {
    let f = Fixture::new();
    let w = f.agent("writer.sh", &format!("#!/bin/sh\n{TITLE}{CAPS_WRITER}"));
    let r = f.agent("reviewer.sh", APPROVE);
    f.config_with(&w, &r, &format!("[limits]\n{limits}"));
    f.write("NEXT.md", backlog);
    f
}

#[tokio::test(flavor = "multi_thread")]
async fn caps_on_calls_tokens_and_cost_end_items_and_the_run_goes_on() {
    let f = caps_world(
        "agent_timeout = \"2s\"\nmax_tokens = 1000\nmax_cost_usd = 2.0\n",
        "- [ ] Sleep in the writer\n- [ ] Spend tokens\n- [ ] A pricey call\n- [ ] Add sub\n",
    );
    let t = Instant::now();
    f.drain_exits(1, &[]);
    assert!(
        t.elapsed() < Duration::from_secs(40),
        "took {:?}",
        t.elapsed()
    );
    let rep = f.report();
    assert_eq!(
        outcomes(&rep),
        [
            "timed_out",
            "budget_exceeded",
            "budget_exceeded",
            "branch_pushed"
        ],
        "{rep:#}"
    );
    let items = rep["items"].as_array().unwrap();
    assert!(
        items[0]["reason"]
            .as_str()
            .unwrap()
            .contains("killed after 2s"),
        "{rep:#}"
    );
    assert!(
        items[0]["seconds"].as_i64().unwrap() < 2 + 5 + 3,
        "killed within timeout + grace: {rep:#}"
    );
    assert!(
        items[1]["reason"].as_str().unwrap().contains("1100 tokens"),
        "{rep:#}"
    );
    assert_eq!(items[1]["tokens"], 1100);
    assert!(
        items[1]["cost_usd"].is_null(),
        "no cost reported is unknown, not $0: {rep:#}"
    );
    assert!(
        items[2]["reason"].as_str().unwrap().contains("$3.00"),
        "{rep:#}"
    );
    assert_eq!(items[2]["cost_usd"], 3.0);
    assert_eq!(
        items[3]["cost_usd"], 0.6,
        "the cost the writer reported is recorded: {rep:#}"
    );
    // Per call, in the ledger, with the usage the agent reported.
    let at_3_usd =
        f.db.calls()
            .iter()
            .filter(|c| c.cost_usd == Some(3.0))
            .count();
    assert_eq!(at_3_usd, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_run_cost_cap_counts_every_item() {
    let f = caps_world(
        "max_cost_usd = 5.0\nmax_cost_usd_per_run = 1.0\n",
        "- [ ] Add sub\n- [ ] Add div\n- [ ] Add pow\n",
    );
    f.drain_exits(1, &[]);
    let rep = f.report();
    assert_eq!(
        outcomes(&rep),
        ["branch_pushed", "budget_exceeded", "budget_exceeded"],
        "{rep:#}"
    );
    let items = rep["items"].as_array().unwrap();
    assert!(
        items[1]["reason"]
            .as_str()
            .unwrap()
            .contains("max_cost_usd_per_run"),
        "{rep:#}"
    );
    assert!(
        items[2]["reason"].as_str().unwrap().contains("used up"),
        "{rep:#}"
    );
    assert_eq!(items[2]["rounds"], 0, "no agent ran for the third item");
    assert_eq!(f.remote_branches().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn item_timeouts_from_the_backlog_and_the_policy_kill_the_writer() {
    for (limits, backlog) in [
        ("", "- [ ] Sleep a while\n  - timeout: 2s\n- [ ] Add sub\n"),
        (
            "item_timeout = \"2s\"\n",
            "- [ ] Sleep a while\n- [ ] Add sub\n",
        ),
    ] {
        let f = caps_world(limits, backlog);
        let plan = text(&f.run(&["plan"]));
        let source = if limits.is_empty() {
            "item 2s (item)"
        } else {
            "item 2s (policy)"
        };
        assert!(plan.contains(source), "{source} on the card:\n{plan}");
        let t = Instant::now();
        f.drain_exits(1, &[]);
        let rep = f.report();
        assert_eq!(outcomes(&rep)[0], "timed_out", "{rep:#}");
        if limits.is_empty() {
            assert_eq!(outcomes(&rep)[1], "branch_pushed", "{rep:#}");
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "took {:?}",
            t.elapsed()
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_card_shows_every_limit_with_its_source() {
    let f = Fixture::new();
    let w = f.agent("writer.sh", APPROVE);
    f.write("docs/FIX.md", "fix recipe\n");
    f.config_with(&w, &w, "[limits]\nrounds = 4\nagent_timeout = \"10m\"\n\n[[recipes]]\nprefix = \"fix:\"\nprompt = \"docs/FIX.md\"\nrounds = 2\n");
    f.write("NEXT.md", "- [ ] Plain item\n- [ ] Tight item\n  - rounds: 1\n  - timeout: 30m\n- [ ] fix: the parser\n");
    let out = f.run(&["plan"]);
    assert_ok(&out, "plan");
    let t = text(&out);
    let cards: Vec<&str> = t.split("── item ").skip(1).collect();
    assert_eq!(cards.len(), 3, "{t}");
    for want in [
        "rounds 4 (policy)",
        "item 2h (default)",
        "agent call 10m (policy)",
        "gate 20m (default)",
        "20000000 tokens (default)",
        "$20.00 (default)",
    ] {
        assert!(cards[0].contains(want), "{want:?} missing:\n{}", cards[0]);
    }
    assert!(
        cards[1].contains("rounds 1 (item)") && cards[1].contains("item 30m (item)"),
        "{}",
        cards[1]
    );
    assert!(
        cards[2].contains("rounds 2 (recipe)") && cards[2].contains("recipe    fix:"),
        "{}",
        cards[2]
    );
    assert!(
        cards[0].contains("only if it reports cost_usd"),
        "the card says when the cost cap is enforced:\n{}",
        cards[0]
    );
    assert!(t.contains("run budget $100.00 (default)"), "{t}");
    f.config_with(&w, &w, "[limits]\nmax_cost_usd_per_run = 7.5\n");
    f.write("NEXT.md", "- [ ] Plain item\n");
    assert!(text(&f.run(&["plan"])).contains("run budget $7.50 (policy)"));
    // An item may lower a cap, never raise it; a bad value is named with its line.
    f.write(
        "NEXT.md",
        "- [ ] Too long\n  - timeout: 3h\n- [ ] Unreadable\n  - timeout: soon\n",
    );
    let out = f.run(&["plan"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let t = text(&out);
    assert!(
        t.contains("NEXT.md:2") && t.contains("item_timeout") && t.contains("NEXT.md:4"),
        "{t}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_recipe_template_leads_the_prompt_and_is_sealed_in_the_contract() {
    let f = Fixture::new();
    let ev = f.agents.display().to_string();
    let w = f.agent(
        "writer.sh",
        &format!("#!/bin/sh\n{TITLE}case \"$title\" in *fix:*) tag=fix ;; *) tag=plain ;; esac\ncp \"$NIGHTSHIFT_PROMPT_FILE\" \"{ev}/prompt-$tag.md\"\ncp \"$NIGHTSHIFT_CONTRACT_FILE\" \"{ev}/contract-$tag.json\"\necho sub >> calc.txt\n"),
    );
    let r = f.agent("reviewer.sh", APPROVE);
    let template = "# Fixing a bug\nReproduce it in a test first, then fix it.\n";
    f.write("docs/FIX.md", template);
    f.config_with(
        &w,
        &r,
        "[[recipes]]\nprefix = \"fix:\"\nprompt = \"docs/FIX.md\"\n",
    );
    f.write("NEXT.md", "- [ ] fix: sub is missing\n- [ ] Add sub\n");
    let plan = |f: &Fixture| -> Vec<String> {
        let out = f.run(&["plan", "--json"]);
        assert_ok(&out, "plan --json");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["contract_sha"].as_str().unwrap().to_string())
            .collect()
    };
    let first = plan(&f);
    f.write("docs/FIX.md", "# Fixing a bug\nChanged wording.\n");
    let changed = plan(&f);
    assert_ne!(
        first[0], changed[0],
        "the template is part of the recipe item's contract"
    );
    assert_eq!(first[1], changed[1], "other items' contracts do not change");
    f.write("docs/FIX.md", template);
    assert_eq!(plan(&f), first);

    f.drain_exits(0, &[]);
    let prompt = read(&f.agents.join("prompt-fix.md"));
    assert!(
        prompt.starts_with(template),
        "the prompt starts with the template:\n{prompt}"
    );
    assert!(read(&f.agents.join("prompt-plain.md")).starts_with("# Item: Add sub"));
    let contract: Value = serde_json::from_str(&read(&f.agents.join("contract-fix.json"))).unwrap();
    use sha2::Digest;
    assert_eq!(
        contract["recipe"]["sha256"],
        hex::encode(sha2::Sha256::digest(template.as_bytes()))
    );
    assert_eq!(contract["recipe"]["template"], template);
    assert_eq!(contract["recipe"]["path"], "docs/FIX.md");
    assert!(serde_json::from_str::<Value>(&read(&f.agents.join("contract-plain.json"))).unwrap()["recipe"].is_null());

    // A template outside the repository is a configuration problem, named.
    std::os::unix::fs::symlink("/etc/hostname", f.repo.join("docs/LINK.md")).unwrap();
    for outside in ["/etc/hostname", "../outside.md", "docs/LINK.md"] {
        f.config_with(
            &w,
            &r,
            &format!("[[recipes]]\nprefix = \"fix:\"\nprompt = \"{outside}\"\n"),
        );
        let out = f.run(&["plan"]);
        assert_eq!(out.status.code(), Some(2), "{outside}: {}", text(&out));
        let t = text(&out);
        // A path that leaves the repository on its face is a config error;
        // a symlink leading out is found when the template is read.
        let named = (t.contains("must be a path inside the repository")
            && t.contains("config.toml:"))
            || (t.contains("not a file inside the repository") && t.contains("NEXT.md:1"));
        assert!(named, "{t}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn findings_become_deduplicated_capped_issues_and_questions_block() {
    let gh = FakeGitHub::start().await;
    let mut f = Fixture::new();
    f.use_github(&gh);
    f.token = Some("ghp_findings_token_0123456789".into());
    let existing = gh.add_issue("docs/README.md is out of date", "found-overnight", "open");
    gh.add_issue("an old closed finding", "found-overnight", "closed");
    let w = f.agent(
        "writer.sh",
        &format!(
            "#!/bin/sh\n{TITLE}case \"$title\" in\n  *Ask*) printf 'I need a decision.\\n\\nQUESTION: should sub round towards zero?\\n' ;;\n  *bogus*) echo bogus >> calc.txt; printf 'FINDINGS:\\n- an old closed finding\\n\\n' ;;\n  *) echo sub >> calc.txt; printf 'done\\n\\nFINDINGS:\\n- docs/README.md is out of date\\n- test.sh ignores blank lines\\n- test.sh ignores blank lines\\n- calc.txt has no header\\n\\n' ;;\nesac\n"
        ),
    );
    let r = f.agent("reviewer.sh", APPROVE);
    f.config_with(
        &w,
        &r,
        "max_findings_per_item = 2\nfindings_label = \"found-overnight\"\n[limits]\nrounds = 1\n",
    );
    let backlog = "- [ ] Add sub\n- [ ] Ask first\n- [ ] Add bogus\n";
    f.write("NEXT.md", backlog);
    f.drain_exits(1, &[]);
    let rep = f.report();
    assert_eq!(
        outcomes(&rep),
        ["pr_opened", "blocked", "tests_failed"],
        "{rep:#}"
    );

    // Issues: the open duplicate reused, one new, the third over the cap; a
    // failed item's finding is filed too (a closed issue does not count).
    let issues = gh.issues();
    let titles: Vec<&str> = issues
        .iter()
        .map(|i| i["title"].as_str().unwrap())
        .collect();
    assert_eq!(
        titles
            .iter()
            .filter(|t| **t == "docs/README.md is out of date")
            .count(),
        1,
        "{titles:?}"
    );
    assert_eq!(
        titles
            .iter()
            .filter(|t| **t == "test.sh ignores blank lines")
            .count(),
        1,
        "{titles:?}"
    );
    assert!(
        !titles.contains(&"calc.txt has no header"),
        "over max_findings_per_item: {titles:?}"
    );
    assert_eq!(
        titles
            .iter()
            .filter(|t| **t == "an old closed finding")
            .count(),
        2,
        "{titles:?}"
    );
    for i in issues.iter().skip(2) {
        assert!(
            i["labels"]
                .as_array()
                .unwrap()
                .iter()
                .any(|l| l["name"] == "found-overnight"),
            "labelled with findings_label: {i}"
        );
    }
    assert_eq!(
        f.db.sql(&format!(
            "SELECT count(*) FROM findings WHERE issue_number = {existing}"
        )),
        "1"
    );
    assert_eq!(f.db.count(Table::Findings), 3);
    // Never added to the backlog: the user's NEXT.md and the PR's tree are untouched.
    assert_eq!(read(&f.repo.join("NEXT.md")), backlog);
    let b = &f.remote_branches()[0];
    assert_eq!(
        git(&f.remote, &["diff", "--name-only", "main", b]),
        "calc.txt"
    );
    assert_eq!(gh.prs().len(), 1);

    // The question is stored and shown, in JSON and in text.
    assert_eq!(
        rep["items"][1]["question"], "should sub round towards zero?",
        "{rep:#}"
    );
    let shown = f.run(&["report"]);
    assert_ok(&shown, "report");
    assert!(
        text(&shown).contains("should sub round towards zero?"),
        "{}",
        text(&shown)
    );

    // The next night the question still waits: the writer is not called
    // again for that item until a person answers it by editing the item.
    let writer_calls = |f: &Fixture| {
        f.db.sql("SELECT count(*) FROM agent_calls c JOIN rounds r ON r.id = c.round_id JOIN run_items i ON i.id = r.run_item_id WHERE c.role = 'writer' AND i.title = 'Ask first'")
    };
    assert_eq!(writer_calls(&f), "1");
    f.drain_exits(1, &[]);
    let rep = f.report();
    let ask = rep["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["title"] == "Ask first")
        .unwrap()
        .clone();
    assert_eq!(ask["outcome"], "blocked", "{rep:#}");
    assert_eq!(ask["question"], "should sub round towards zero?", "{rep:#}");
    assert!(
        ask["reason"]
            .as_str()
            .unwrap()
            .contains("waiting for an answer"),
        "{rep:#}"
    );
    assert_eq!(
        writer_calls(&f),
        "1",
        "no second writer call for an unanswered question"
    );
    // Answered: the edited item runs again.
    f.write(
        "NEXT.md",
        "- [ ] Add sub\n- [ ] Ask first\n  - Round towards zero.\n- [ ] Add bogus\n",
    );
    let _ = f.approve_and_drain(&[]);
    assert_eq!(writer_calls(&f), "2", "the answered item ran");
    gh.assert_never_merged_approved_or_closed().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn hanging_agents_are_killed_within_timeout_and_grace_and_the_run_goes_on() {
    let f = Fixture::new();
    // Unique sleep lengths so the check for survivors finds only ours.
    let tag = 3000 + (std::process::id() % 997);
    let w = f.agent(
        "writer.sh",
        &format!(
            "#!/bin/sh\n{TITLE}case \"$title\" in\n  *grandchild*) sh -c 'trap \"\" TERM; sleep {tag}1' & sleep {tag}2 ;;\n  *setsid*) setsid sh -c 'sleep {tag}3' & sleep {tag}4 ;;\n  *mul*) echo mul >> calc.txt ;;\n  *) echo sub >> calc.txt ;;\nesac\n"
        ),
    );
    // A reviewer (command kind) that edits the checkout while reviewing.
    let r = f.agent("reviewer.sh", "#!/bin/sh\nif grep -qx mul calc.txt; then echo div >> calc.txt; fi\necho '{\"verdict\":\"approve\",\"findings\":[]}'\n");
    // Without the sandbox: the reviewer's edit is the second line's to catch
    // (the sandbox refuses it: tests/it/sandbox.rs), and the sweep of a
    // setsid child is the supervisor's.
    f.config_with(
        &w,
        &r,
        "[limits]\nagent_timeout = \"2s\"\n[sandbox]\nmode = \"off\"\n",
    );
    f.write("NEXT.md", "- [ ] Hang with a grandchild on stdout\n- [ ] Hang after a setsid child\n- [ ] Add mul\n- [ ] Add sub\n");
    let t = Instant::now();
    let out = f.approve_and_drain(&[]);
    let took = t.elapsed();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let rep = f.report();
    assert_eq!(
        outcomes(&rep),
        ["timed_out", "timed_out", "review_void", "branch_pushed"],
        "{rep:#}"
    );
    // The grandchild ignores SIGTERM (so it needs the KILL after the grace);
    // the setsid child left the process group (so it needs the sweep).
    // Whole items (checkout and cleanup included), to the millisecond.
    let secs = f.db.sql("SELECT string_agg(round(extract(epoch FROM ended_at - started_at)::numeric, 2)::text, ' ' ORDER BY item_index) FROM run_items WHERE item_index <= 2");
    let secs: Vec<f64> = secs
        .split_whitespace()
        .map(|s| s.parse().unwrap())
        .collect();
    eprintln!("hanging items took {secs:?} s; whole drain: {took:?}");
    assert_eq!(secs.len(), 2, "{secs:?}");
    for s in &secs {
        // Timeout 2 s + grace 5 s, plus checkout, reaping and cleanup on a busy machine.
        assert!(
            *s <= 2.0 + 5.0 + 3.0,
            "killed within timeout + grace: {s} s"
        );
    }
    assert!(took < Duration::from_secs(60), "took {took:?}");
    assert!(
        reason(&rep, 2).contains("checkout changed during the review"),
        "{rep:#}"
    );
    let survivors = std::process::Command::new("pgrep")
        .args(["-f", &format!("sleep {tag}")])
        .output()
        .unwrap();
    assert!(
        survivors.stdout.is_empty(),
        "left running: {}",
        String::from_utf8_lossy(&survivors.stdout)
    );
    assert_eq!(f.remote_branches().len(), 1);
}

/// Creates (once) the unprivileged account the agent_user tests run as, with
/// its own home. Tests of this binary run in parallel threads, so creation
/// happens once under a lock; useradd's own lock may still be held by another
/// process for a moment, hence the retries.
fn test_account() -> String {
    static ACCOUNT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ACCOUNT
        .get_or_init(|| {
            let name = "nsagent";
            let exists = || {
                std::process::Command::new("id")
                    .arg(name)
                    .output()
                    .unwrap()
                    .status
                    .success()
            };
            let mut last = String::new();
            for _ in 0..10 {
                if exists() {
                    return name.to_string();
                }
                let out = std::process::Command::new("useradd")
                    .args(["-m", "-d", "/home/nsagent", "-s", "/bin/sh", name])
                    .output()
                    .expect("useradd runs");
                last = String::from_utf8_lossy(&out.stderr).into_owned();
                std::thread::sleep(Duration::from_millis(200));
            }
            assert!(exists(), "useradd {name} failed: {last}");
            name.to_string()
        })
        .clone()
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

#[tokio::test(flavor = "multi_thread")]
async fn agent_user_runs_agents_and_gates_as_that_user() {
    if !is_root() {
        eprintln!(
            "SKIPPED agent_user_runs_agents_and_gates_as_that_user: needs root to switch users (run tests/run.sh as root, as CI does)"
        );
        return;
    }
    let user = test_account();
    let f = Fixture::new();
    use std::os::unix::fs::PermissionsExt;
    // The account must reach the repository, the agents and nightshift's data dir.
    std::fs::set_permissions(f.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let ev = f.dir.path().join("evidence");
    std::fs::create_dir(&ev).unwrap();
    std::fs::set_permissions(&ev, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = ev.display();
    // Root-owned files outside the checkout that planted symlinks point at:
    // handing the checkout over must never chown them.
    let outside = f.dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("inner.txt"), "root's\n").unwrap();
    let victim = f.dir.path().join("victim.txt");
    std::fs::write(&victim, "root's\n").unwrap();
    let (victim, outside) = (victim.display().to_string(), outside.display().to_string());
    let w = f.agent(
        "writer.sh",
        &format!(
            "#!/bin/sh\necho \"$(id -un) $HOME\" > {e}/writer\nif git status --porcelain >/dev/null; then echo ok > {e}/writer-git; fi\nif [ \"$NIGHTSHIFT_ROUND\" = 1 ]; then\n  echo bogus >> calc.txt; ln -s {victim} outside-link; mkdir -p d; ln -s {outside} d/dir-link\nelse\n  printf 'add\\nsub\\n' > calc.txt; rm -rf outside-link d\nfi\nmkdir -p notes && echo 'why sub' > notes/sub.txt\nif git -c user.name=a -c user.email=a@b commit -qam sneaky 2>/dev/null; then echo committed > {e}/writer-commit; fi\n"
        ),
    );
    let r = f.agent("reviewer.sh", &format!("#!/bin/sh\necho \"$(id -un) $HOME\" > {e}/reviewer\nif git diff HEAD --stat | grep -q calc.txt; then echo '{{\"verdict\":\"approve\",\"findings\":[]}}'; else echo '{{\"verdict\":\"request_changes\",\"findings\":[\"git diff did not work\"]}}'; fi\n"));
    f.config(&format!(
        "agent_user = \"{user}\"\nsetup = [\"id -un > {e}/setup && touch .setup-ok && rm .setup-ok\"]\nverify = [\"id -un > {e}/gate && sh test.sh\"]\n[sandbox]\nwrite = [\"{e}\"]\n[limits]\nrounds = 2\n[writer]\nkind = \"command\"\ncommand = [\"{w}\"]\n[reviewer]\nkind = \"command\"\ncommand = [\"{r}\"]\n"
    ));
    f.write("NEXT.md", "- [ ] Add sub\n");
    let out = f.approve_and_drain(&[]);
    assert_ok(&out, "drain with agent_user");
    use std::os::unix::fs::MetadataExt;
    for p in [
        victim.clone(),
        format!("{outside}/inner.txt"),
        outside.clone(),
    ] {
        assert_eq!(
            std::fs::metadata(&p).unwrap().uid(),
            0,
            "{p} was chowned through a planted symlink"
        );
    }
    let rep = f.report();
    assert_eq!(outcomes(&rep), ["branch_pushed"], "{rep:#}");
    assert_eq!(
        rep["items"][0]["rounds"], 2,
        "round 2 ran after the gate failed: {rep:#}"
    );
    let home = format!("/home/{user}");
    assert_eq!(read(&ev.join("writer")).trim(), format!("{user} {home}"));
    assert_eq!(read(&ev.join("reviewer")).trim(), format!("{user} {home}"));
    assert_eq!(read(&ev.join("gate")).trim(), user);
    assert_eq!(read(&ev.join("setup")).trim(), user);
    assert!(
        ev.join("writer-git").exists(),
        "git status failed for the agent user"
    );
    assert!(
        !ev.join("writer-commit").exists(),
        "the agent could write the checkout's .git"
    );
    let b = &f.remote_branches()[0];
    assert_eq!(
        git(&f.remote, &["diff", "--name-only", "main", b]),
        "calc.txt\nnotes/sub.txt"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn plan_refuses_a_claude_writer_that_claude_would_refuse_as_root() {
    if !is_root() {
        eprintln!(
            "SKIPPED plan_refuses_a_claude_writer_that_claude_would_refuse_as_root: the rule only applies when nightshift runs as root"
        );
        return;
    }
    let mut f = Fixture::new();
    let r = f.agent("reviewer.sh", APPROVE);
    // A claude on PATH: `plan` offers no SHA for a writer that is not there.
    f.agent("claude", "#!/bin/sh\nexit 0\n");
    let agents = f.agents.clone();
    prepend_path(&mut f, &agents);
    let cfg = |extra: &str| {
        format!(
            "verify = [\"sh test.sh\"]\n{extra}[writer]\nkind = \"claude\"\ncommand = [\"claude\"]\npermission_flags = [\"--dangerously-skip-permissions\"]\n[reviewer]\nkind = \"command\"\ncommand = [\"{r}\"]\n"
        )
    };
    f.config(&cfg(""));
    f.write("NEXT.md", "- [ ] Add sub\n");
    let out = f.run(&["plan"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let t = text(&out);
    assert!(
        t.contains("cannot be used with root/sudo privileges") && t.contains("agent_user"),
        "{t}"
    );
    assert!(!t.contains("contract  sha256"), "no card: {t}");
    f.config(&cfg(&format!("agent_user = \"{}\"\n", test_account())));
    assert_ok(&f.run(&["plan"]), "plan with agent_user");
    // An agent_user without a home cannot hold claude's login: refused before any item.
    f.config(&cfg("agent_user = \"nobody\"\n"));
    let out = f.drain_exits(2, &[]);
    assert!(
        text(&out).contains("has no home directory"),
        "{}",
        text(&out)
    );
    assert_eq!(f.db.count(Table::RunItems), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn tokens_and_secrets_never_leak_even_when_agents_and_gates_print_them() {
    let gh = FakeGitHub::start().await;
    let mut f = Fixture::new();
    let token = "ghp_leakcheck_TOKEN_1a2b3c4d5e6f";
    let gh_token = "gho_leakcheck_OTHER_9z8y7x6w";
    let api_key = "sk-leakcheck-KEY-00112233";
    f.use_github(&gh);
    f.token = Some(token.into());
    f.extra_env.push(("GH_TOKEN".into(), gh_token.into()));
    f.extra_env.push(("MY_API_KEY".into(), api_key.into()));
    let all = format!("{token} {gh_token} {api_key}");
    let secrets_file = f.agents.join("secrets.txt");
    std::fs::write(&secrets_file, format!("{all}\n")).unwrap();
    let ev = f.agents.display().to_string();
    // Printed in two writes with a pause: the token crosses a read boundary.
    let (head, tail) = token.split_at(12);
    let w = f.agent(
        "writer.sh",
        &format!(
            "#!/bin/sh\nenv > {ev}/writer-env.txt\nNS=$(awk '{{print $4}}' /proc/$PPID/stat)\ntr '\\0' '\\n' < /proc/$NS/environ > {ev}/parent-env.txt\necho \"$NS\" > {ev}/parent-pid.txt\necho sub >> calc.txt\necho \"stdout: {all}\"\necho \"stderr: {all}\" >&2\nprintf 'split: {head}'; sleep 0.3; printf '{tail}\\n'\nprintf 'split: {head}' >&2; sleep 0.3; printf '{tail}\\n' >&2\nprintf 'done\\n\\nFINDINGS:\\n- rotate {token} soon\\n\\n'\n"
        ),
    );
    let r = f.agent("reviewer.sh", &format!("#!/bin/sh\necho \"reviewing with {all}\"\necho '{{\"verdict\":\"approve\",\"findings\":[\"saw {token} in the logs\"]}}'\n"));
    // The second line, without the sandbox: what an agent reads of its
    // parent (in the sandbox, its PID 1) is scrubbed and masked.
    f.config(&format!(
        "secrets = [\"MY_API_KEY\"]\nverify = [\"env > {ev}/gate-env.txt && cat {} && cat {} >&2 && sh test.sh\"]\n[writer]\nkind = \"command\"\ncommand = [\"{w}\"]\n[reviewer]\nkind = \"command\"\ncommand = [\"{r}\"]\n[sandbox]\nmode = \"off\"\n",
        secrets_file.display(),
        secrets_file.display()
    ));
    f.write("NEXT.md", "- [ ] Add sub\n");
    let out = f.drain_exits(0, &[]);
    assert_eq!(outcomes(&f.report()), ["pr_opened"]);
    let secrets = [token, gh_token, api_key];
    let leaks = |what: &str, s: &str| {
        for x in secrets {
            assert!(!s.contains(x), "{x} leaked into {what}");
        }
    };
    leaks("nightshift's output", &text(&out));
    // Not in the agent's environment, nor in nightshift's own /proc environ.
    let env = read(&f.agents.join("writer-env.txt"));
    leaks("the writer's environment", &env);
    for var in [
        "GITHUB_TOKEN=",
        "GH_TOKEN=",
        "MY_API_KEY=",
        "NIGHTSHIFT_DATABASE_URL=",
    ] {
        assert!(
            !env.lines().any(|l| l.starts_with(var)),
            "{var} reached the agent"
        );
    }
    leaks(
        "the gate's environment",
        &read(&f.agents.join("gate-env.txt")),
    );
    let parent = read(&f.agents.join("parent-env.txt"));
    // Root reads it (nightshift is not dumpable, which stops only other users).
    assert!(
        parent.contains("NIGHTSHIFT_DATA_DIR=")
            || (parent.is_empty() && !nix::unistd::geteuid().is_root()),
        "the writer read nightshift's environ: {parent}"
    );
    // The config's `secrets` too: wiped at start-up, before any thread.
    for x in [token, gh_token, api_key, f.db.url.as_str()] {
        assert!(!parent.contains(x), "{x} is in /proc/<nightshift>/environ");
    }
    // Not in the ledger: every table, every row.
    let tables = f.db.sql("SELECT string_agg(table_name, ' ') FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'");
    let mut checked = 0;
    for t in tables.split_whitespace() {
        leaks(
            &format!("ledger table {t}"),
            &f.db.sql(&format!(
                "SELECT coalesce(string_agg(x::text, ' '), '') FROM {t} x"
            )),
        );
        checked += 1;
    }
    assert!(checked >= 8, "{tables}");
    // Not in any file under the data dir (logs, call files, checkouts) or HOME (XDG dirs).
    let mut files = 0;
    let mut split_seen = false;
    let mut stack = vec![f.data.clone(), f.home.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() && !p.is_symlink() {
                stack.push(p);
            } else if let Ok(bytes) = std::fs::read(&p) {
                files += 1;
                let content = String::from_utf8_lossy(&bytes);
                leaks(&p.display().to_string(), &content);
                if p.file_name().is_some_and(|n| n == "writer.stdout") {
                    assert!(
                        content.contains("split: "),
                        "the split write was captured: {content}"
                    );
                    split_seen = true;
                }
            }
        }
    }
    assert!(files > 5 && split_seen, "the data dir holds the logs");
    let logged = std::fs::read_dir(f.data.join("logs")).is_ok();
    assert!(logged, "no logs under the data dir");
    // Not in anything sent to GitHub: the PR body, the issue.
    assert_eq!(gh.prs().len(), 1);
    for (m, p, body) in gh.requests().await {
        leaks(&format!("{m} {p}"), &body);
    }
    assert!(
        gh.prs()[0]["body"]
            .as_str()
            .unwrap()
            .contains("in the logs"),
        "the reviewer's finding is in the body, redacted"
    );
    assert_eq!(gh.issues().len(), 1, "the finding was filed, redacted");
}

#[tokio::test(flavor = "multi_thread")]
async fn agent_user_that_cannot_reach_the_checkout_is_told_why() {
    if !is_root() {
        eprintln!(
            "SKIPPED agent_user_that_cannot_reach_the_checkout_is_told_why: needs root to switch users"
        );
        return;
    }
    let user = test_account();
    // A 0700 parent (like /root): the account cannot reach the data dir.
    let f = Fixture::new();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(f.dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let r = f.agent("reviewer.sh", APPROVE);
    let w = f.agent("writer.sh", "#!/bin/sh\necho sub >> calc.txt\n");
    f.config_with(&w, &r, &format!("agent_user = \"{user}\"\n"));
    f.write("NEXT.md", "- [ ] Add sub\n");
    f.drain_exits(1, &[]);
    let rep = f.report();
    assert_eq!(outcomes(&rep), ["error"], "{rep:#}");
    let why = rep["items"][0]["reason"].as_str().unwrap();
    assert!(
        why.contains(&user) && why.contains("NIGHTSHIFT_DATA_DIR"),
        "{why}"
    );
    assert!(f.remote_branches().is_empty());
}

/// The reviewer judges each numbered acceptance condition: an approval that
/// says one is not met is a request for changes (the condition becomes the
/// next round's feedback); the PR body shows each condition with the
/// reviewer's judgement and evidence.
#[tokio::test(flavor = "multi_thread")]
async fn an_approval_with_an_unmet_condition_is_a_request_for_changes() {
    let gh = FakeGitHub::start().await;
    let mut f = Fixture::new();
    f.use_github(&gh);
    f.token = Some("ghp_conditions_token_0123456789".into());
    let ev = f.agents.display().to_string();
    let w = f.agent(
        "writer.sh",
        &format!("#!/bin/sh\ncp \"$NIGHTSHIFT_FEEDBACK_FILE\" \"{ev}/feedback-$NIGHTSHIFT_ROUND.txt\"\ncp \"$NIGHTSHIFT_PROMPT_FILE\" \"{ev}/prompt.txt\"\necho sub >> calc.txt\n[ \"$NIGHTSHIFT_ROUND\" = 2 ] && echo 'sub subtracts' > README.calc\nexit 0\n"),
    );
    // Round 1: approves, yet says condition 2 is unmet. Round 2: all met.
    let r = f.agent(
        "reviewer.sh",
        "#!/bin/sh\nif [ -e README.calc ]; then\n  echo '{\"verdict\":\"approve\",\"findings\":[],\"conditions\":[{\"index\":1,\"met\":true,\"evidence\":\"calc.txt line 2\"},{\"index\":2,\"met\":true,\"evidence\":\"README.calc line 1\"}]}'\nelse\n  echo '{\"verdict\":\"approve\",\"findings\":[],\"conditions\":[{\"index\":1,\"met\":true,\"evidence\":\"calc.txt line 2\"},{\"index\":2,\"met\":false,\"evidence\":\"no README.calc\"}]}'\nfi\n",
    );
    f.config_with(&w, &r, "[limits]\nrounds = 3\n");
    f.write(
        "NEXT.md",
        "- [ ] Add sub\n  - accept: calc.txt lists sub\n  - accept: README.calc explains sub\n",
    );
    f.drain_exits(0, &[]);
    let rep = f.report();
    assert_eq!(outcomes(&rep), ["pr_opened"], "{rep:#}");
    assert_eq!(rep["items"][0]["rounds"], 2, "{rep:#}");
    let prompt = read(&f.agents.join("prompt.txt"));
    assert!(
        prompt.contains("1. calc.txt lists sub\n2. README.calc explains sub\n"),
        "the conditions are numbered: {prompt}"
    );
    let fb = read(&f.agents.join("feedback-2.txt"));
    assert!(
        fb.contains("acceptance condition 2 is not met (README.calc explains sub): no README.calc"),
        "{fb}"
    );
    assert_eq!(f.db.verdicts().join(","), "request_changes,approve");
    let body = gh.prs()[0]["body"].as_str().unwrap().to_string();
    assert!(
        body.contains("- [ ] calc.txt lists sub\n  — reviewer: met; evidence: calc.txt line 2"),
        "{body}"
    );
    assert!(
        body.contains(
            "- [ ] README.calc explains sub\n  — reviewer: met; evidence: README.calc line 1"
        ),
        "{body}"
    );
    gh.assert_never_merged_approved_or_closed().await;
}

/// A round that failed its gate shows, in the PR body's round list, the
/// telling line of the gate's output, not only the command and exit code.
#[tokio::test(flavor = "multi_thread")]
async fn the_pr_body_shows_why_an_earlier_round_failed_its_gate() {
    let gh = FakeGitHub::start().await;
    let mut f = Fixture::new();
    f.use_github(&gh);
    f.token = Some("ghp_rounds_token_0123456789".into());
    let w = f.agent("writer.sh", "#!/bin/sh\nif [ \"$NIGHTSHIFT_ROUND\" = 1 ]; then echo bogus >> calc.txt; else sed -i 's/^bogus$/sub/' calc.txt; fi\n");
    let r = f.agent("reviewer.sh", APPROVE);
    f.config_with(&w, &r, "[limits]\nrounds = 3\n");
    f.write("NEXT.md", "- [ ] Add sub\n");
    f.drain_exits(0, &[]);
    let body = gh.prs()[0]["body"].as_str().unwrap().to_string();
    let line = body
        .lines()
        .find(|l| l.starts_with("1. tests_failed"))
        .unwrap_or_else(|| panic!("{body}"));
    assert!(
        line.contains("`sh test.sh` exit 1") && line.contains("unknown word: bogus"),
        "{line}"
    );
}

/// A writer that writes a secret's value into the change (here the GitHub
/// token it was never given, copied from a file, and a `secrets` value)
/// gets nothing pushed: the branch would carry it in clear.
#[tokio::test(flavor = "multi_thread")]
async fn a_change_that_contains_a_secret_is_never_pushed() {
    let gh = FakeGitHub::start().await;
    let mut f = Fixture::new();
    f.use_github(&gh);
    let token = "ghp_pushcheck_token_0123456789";
    f.token = Some(token.into());
    let leak = f.agents.join("leak.txt");
    std::fs::write(&leak, format!("{token}\n")).unwrap();
    let w = f.agent(
        "writer.sh",
        &format!(
            "#!/bin/sh\necho sub >> calc.txt\nprintf 'key=%s\\n' \"$(cat {})\" > settings.env\n",
            leak.display()
        ),
    );
    let r = f.agent("reviewer.sh", APPROVE);
    f.config_with(&w, &r, "");
    f.write("NEXT.md", "- [ ] Add sub\n");
    let out = f.drain_exits(1, &[]);
    let rep = f.report();
    assert_eq!(outcomes(&rep), ["rule_broken"], "{rep:#}");
    assert!(reason(&rep, 0).contains("settings.env"), "{rep:#}");
    assert!(f.remote_branches().is_empty(), "nothing pushed");
    assert!(gh.prs().is_empty());
    assert!(!text(&out).contains(token));
}

/// An item whose title is longer than GitHub allows for a PR title (256
/// characters) still gets its PR, under a shortened title; a long finding
/// still becomes an issue.
#[tokio::test(flavor = "multi_thread")]
async fn long_titles_are_shortened_to_what_github_takes() {
    let gh = FakeGitHub::start().await;
    let mut f = Fixture::new();
    f.use_github(&gh);
    f.token = Some("ghp_longtitle_token_0123456789".into());
    let long = format!("Add sub {}", "and explain it ".repeat(30));
    let w = f.agent(
        "writer.sh",
        &format!(
            "#!/bin/sh\necho sub >> calc.txt\nprintf 'done\\n\\nFINDINGS:\\n- {}\\n\\n'\n",
            "x".repeat(400)
        ),
    );
    let r = f.agent("reviewer.sh", APPROVE);
    f.config_with(&w, &r, "");
    f.write("NEXT.md", &format!("- [ ] {}\n", long.trim()));
    f.drain_exits(0, &[]);
    assert_eq!(outcomes(&f.report()), ["pr_opened"]);
    let prs = gh.prs();
    let title = prs[0]["title"].as_str().unwrap();
    assert_eq!(title.chars().count(), 256, "{title}");
    assert!(
        title.starts_with("nightshift: Add sub and explain it") && title.ends_with('…'),
        "{title}"
    );
    assert_eq!(gh.issues().len(), 1, "the long finding became an issue");
}

/// A writer that deletes the checkout's `.git` breaks a rule (not a git
/// error); one that exits 1 without a word is said to have printed nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_writer_that_deletes_git_or_says_nothing_is_named_plainly() {
    let f = Night::new()
        .writer(&format!("#!/bin/sh\n{TITLE}case \"$title\" in\n  *git*) echo sub >> calc.txt; rm -rf .git ;;\n  *) exit 1 ;;\nesac\n"))
        .reviewer(APPROVE)
        .config("[limits]\nrounds = 1\n")
        .backlog("- [ ] Remove git\n- [ ] Say nothing\n")
        .exit(1)
        .run()
        .await;
    let rep = f.report();
    assert_eq!(outcomes(&rep), ["rule_broken", "error"], "{rep:#}");
    assert!(
        reason(&rep, 0).contains("removed or replaced the checkout's .git"),
        "{rep:#}"
    );
    assert!(
        reason(&rep, 1).contains("exited with code 1 and printed nothing"),
        "{rep:#}"
    );
    assert!(f.remote_branches().is_empty());
}

/// `gate_env` gives a gate the project's own DATABASE_URL when the ledger
/// uses NIGHTSHIFT_DATABASE_URL (the project's tests need their database),
/// and never the token: that is said, not silently dropped.
#[tokio::test(flavor = "multi_thread")]
async fn gate_env_passes_the_projects_database_url_but_never_the_token() {
    let gh = FakeGitHub::start().await;
    let mut f = Fixture::new();
    f.use_github(&gh);
    f.token = Some("ghp_gateenv_token_0123456789".into());
    f.extra_env.push((
        "DATABASE_URL".into(),
        "postgres://app@db.invalid/app_test".into(),
    ));
    let ev = f.agents.display().to_string();
    let gate = f.agent(
        "gate.sh",
        &format!("#!/bin/sh\nenv > {ev}/gate-env.txt\nsh test.sh\n"),
    );
    let w = f.agent(
        "writer.sh",
        &format!("#!/bin/sh\nenv > {ev}/writer-env.txt\necho sub >> calc.txt\n"),
    );
    let r = f.agent("reviewer.sh", APPROVE);
    f.config(&format!("verify = [\"{gate}\"]\ngate_env = [\"DATABASE_URL\", \"GITHUB_TOKEN\"]\n[writer]\nkind = \"command\"\ncommand = [\"{w}\"]\n[reviewer]\nkind = \"command\"\ncommand = [\"{r}\"]\n"));
    f.write("NEXT.md", "- [ ] Add sub\n");
    let out = f.drain_exits(0, &[]);
    assert!(
        text(&out).contains("gate_env lists GITHUB_TOKEN, which nightshift never passes"),
        "{}",
        text(&out)
    );
    let gate_env = read(&f.agents.join("gate-env.txt"));
    assert!(
        gate_env
            .lines()
            .any(|l| l == "DATABASE_URL=postgres://app@db.invalid/app_test"),
        "{gate_env}"
    );
    assert!(
        !gate_env.contains("ghp_gateenv_token") && !gate_env.contains(&f.db.url),
        "{gate_env}"
    );
    let writer_env = read(&f.agents.join("writer-env.txt"));
    assert!(
        !writer_env.contains("DATABASE_URL="),
        "agents get no database URL: {writer_env}"
    );
}
