//! Limits on the review work a night makes and on a change's size and
//! reach, through the real binary (docs/config.md, docs/loop.md "Before the
//! checkout" and "Proof", docs/github.md#pull-requests): `max_open_prs`
//! (counted on GitHub, or in the ledger without it), `draft`,
//! `max_changed_files`, `max_diff_lines` and `protected`, and the config's
//! and backlog's errors for them. Real PostgreSQL, real git, the fake
//! GitHub, script agents.

use crate::common;

use common::github::FakeGitHub;
use common::{Fixture, Night, assert_ok, outcomes, reason, text};
use serde_json::Value;

/// A writer that counts its calls in `$CALLS` and edits by the item's title.
const WRITER: &str = r#"#!/bin/sh
set -eu
echo call >> "$CALLS"
if [ -e "$(dirname "$CALLS")/slow" ]; then sleep 2; fi
# Parallel writers (--jobs) write it at once: a redirection, not cp (cp -n races: "File exists").
cat "$NIGHTSHIFT_PROMPT_FILE" > "$(dirname "$CALLS")/prompt.md"
title=$(grep -o '"title":"[^"]*"' "$NIGHTSHIFT_CONTRACT_FILE" | head -1)
case "$title" in
  *"Add sub"*) echo sub >> calc.txt ;;
  *"Add mul"*) echo mul >> calc.txt ;;
  *"Add pow twice"*) printf 'pow\npow\n' >> calc.txt ;;
  *"Four subs"*) printf 'sub\nsub\nsub\nsub\n' >> calc.txt ;;
  *"Sub and docs"*) echo sub >> calc.txt; echo "sub subtracts" >> docs/README.md ;;
  *"Sub and CI"*) echo sub >> calc.txt; mkdir -p .github/workflows; echo "on: push" > .github/workflows/ci.yml ;;
  *"Div and a migration"*) echo div >> calc.txt; mkdir -p migrations; echo "DROP TABLE x;" > migrations/0002_x.sql ;;
  *"Cache in CI, allowed"*) cp "$NIGHTSHIFT_PROMPT_FILE" "$(dirname "$CALLS")/prompt-allowed.md"; cp "$NIGHTSHIFT_CONTRACT_FILE" "$(dirname "$CALLS")/contract-allowed.json"; mkdir -p .github/workflows; printf 'on: push\njobs: {}\n' > .github/workflows/ci.yml ;;
  *"Cache in CI"*) mkdir -p .github/workflows; printf 'on: push\njobs: {}\n' > .github/workflows/ci.yml ;;
esac
"#;

/// A night with the counting writer, an approving reviewer, `config`
/// (top-level keys, then any tables) and `backlog`.
fn counted<'a>(config: &str, backlog: &str) -> Night<'a> {
    Night::new()
        .with(|f| {
            let calls = f.agents.join("calls").display().to_string();
            f.extra_env.push(("CALLS".into(), calls));
        })
        .writer(WRITER)
        .config(config)
        .backlog(backlog)
}

/// How many times the writer was called.
fn writer_calls(f: &Fixture) -> usize {
    std::fs::read_to_string(f.agents.join("calls"))
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

/// A PR body as nightshift writes it for some other item.
fn item_pr_body(key_char: char) -> String {
    format!(
        "## Some earlier item\n\n<!-- nightshift-item: {} -->\n",
        key_char.to_string().repeat(64)
    )
}

/// Drains (exit 1: some item broke a rule) and checks the items' outcomes
/// are `expected`, in order; returns the run's report.
fn drain_exits_1_with(f: &Fixture, expected: &[&str]) -> Value {
    f.drain_exits(1, &[]);
    let rep = f.report();
    assert_eq!(outcomes(&rep), expected, "{rep:#}");
    rep
}

#[tokio::test(flavor = "multi_thread")]
async fn max_open_prs_leaves_items_unstarted_while_nightshift_prs_wait_for_review() {
    let gh = FakeGitHub::start().await;
    // One nightshift PR waits for review; a person's PR, a fork's PR that
    // copies the marker and the `sync` PR are not nightshift's item PRs.
    gh.add_pr(
        "nightshift/earlier-aaaaaaaa",
        &item_pr_body('a'),
        &["autopilot"],
    );
    gh.add_pr("feature/by-hand", "A person's PR", &[]);
    gh.add_fork_pr("someone", "nightshift/x-bbbbbbbb", &item_pr_body('b'), &[]);
    gh.add_pr(
        "nightshift/sync-backlog",
        "Ticks\n\n<!-- nightshift-item: sync-backlog -->\n",
        &["autopilot"],
    );
    let f = counted("max_open_prs = 2\n", "- [ ] Add sub\n- [ ] Add mul\n")
        .github_api_on(&gh)
        .token("ghp_reviewwork_token_0123456789")
        .start()
        .await;

    let out = f.approve_and_drain(&[]);
    assert_ok(&out, "a full review queue is not a failure: exit 0");
    let rep = f.report();
    assert_eq!(
        outcomes(&rep),
        ["pr_opened", "review_queue_full"],
        "{rep:#}"
    );
    let why = reason(&rep, 1);
    assert!(
        why.contains("not started")
            && why.contains("2 nightshift PR(s) are open on GitHub")
            && why.contains("max_open_prs = 2"),
        "{why}"
    );
    assert_eq!(
        writer_calls(&f),
        1,
        "no agent time for the item not started"
    );
    assert_eq!(rep["items"][1]["rounds"], 0);
    assert_eq!(f.remote_branches().len(), 1);
    assert_eq!(rep["totals"]["not_run"], 1, "{rep:#}");

    // A person merges the night's PR: the next night takes the item up.
    let opened = rep["items"][0]["pr_number"].as_u64().unwrap();
    gh.merge(opened);
    let out = f.approve_and_drain(&[]);
    assert_ok(&out, "second night");
    let rep = f.report();
    assert_eq!(outcomes(&rep), ["already_merged", "pr_opened"], "{rep:#}");
    assert_eq!(writer_calls(&f), 2);
}

/// With `--jobs 3` every item once passed the review-queue check at its
/// start (no PR open yet) and the night opened three PRs against
/// `max_open_prs = 2`. An item now counts the items claimed before it that
/// are still working, each of which may open a PR.
#[tokio::test(flavor = "multi_thread")]
async fn parallel_items_do_not_open_more_prs_than_max_open_prs() {
    let gh = FakeGitHub::start().await;
    let f = counted(
        "max_open_prs = 2\n",
        "- [ ] Add sub\n- [ ] Add mul\n- [ ] Four subs\n",
    )
    .with(|f| std::fs::write(f.agents.join("slow"), "").unwrap())
    .github_api_on(&gh)
    .token("ghp_reviewwork_token_0123456789")
    .start()
    .await;

    let out = f.approve_and_drain(&["--jobs", "3"]);
    assert_ok(&out, "a full review queue is not a failure: exit 0");
    let rep = f.report();
    let mut got = outcomes(&rep);
    got.sort();
    assert_eq!(
        got,
        ["pr_opened", "pr_opened", "review_queue_full"],
        "{rep:#}"
    );
    assert_eq!(gh.prs().len(), 2, "max_open_prs = 2 holds with --jobs 3");
    let full = (0..3)
        .find(|&i| rep["items"][i]["outcome"] == "review_queue_full")
        .unwrap();
    let why = reason(&rep, full);
    assert!(
        why.contains("claimed before it are still working") && why.contains("max_open_prs = 2"),
        "{why}"
    );
    assert_eq!(
        writer_calls(&f),
        2,
        "no agent time for the item not started"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn without_github_max_open_prs_counts_the_ledgers_pushed_branches() {
    let f = counted(
        "max_open_prs = 1\n",
        "- [ ] Add sub\n- [ ] Add mul\n- [ ] Add pow twice\n",
    )
    .start()
    .await;
    let out = f.approve_and_drain(&[]);
    assert_ok(&out, "drain without GitHub");
    let rep = f.report();
    assert_eq!(
        outcomes(&rep),
        ["branch_pushed", "review_queue_full", "review_queue_full"],
        "{rep:#}"
    );
    let why = reason(&rep, 1);
    assert!(
        why.contains("1 nightshift PR(s) are open or pushed awaiting their PR, by the ledger")
            && why.contains("max_open_prs = 1"),
        "{why}"
    );
    assert_eq!(writer_calls(&f), 1);
    assert_eq!(f.remote_branches().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn draft_opens_the_prs_as_drafts() {
    let gh = FakeGitHub::start().await;
    let f = counted("draft = true\n", "- [ ] Add sub\n")
        .github_api_on(&gh)
        .token("ghp_reviewwork_token_0123456789")
        .start()
        .await;
    f.drain_exits(0, &[]);
    assert_eq!(outcomes(&f.report()), ["pr_opened"]);
    let prs = gh.prs();
    assert_eq!(prs.len(), 1);
    assert_eq!(prs[0]["draft"], true, "{:#}", prs[0]);
    let posts: Vec<Value> = gh
        .requests()
        .await
        .into_iter()
        .filter(|(m, p, _)| m == "POST" && p.ends_with("/repos/owner/repo/pulls"))
        .map(|(_, _, b)| serde_json::from_str(&b).unwrap())
        .collect();
    assert_eq!(posts.len(), 1);
    assert_eq!(posts[0]["draft"], true, "{:#}", posts[0]);

    // Without the key nothing asks for a draft.
    let gh = FakeGitHub::start().await;
    let f = counted("", "- [ ] Add sub\n")
        .github_api_on(&gh)
        .token("ghp_reviewwork_token_0123456789")
        .start()
        .await;
    assert_ok(&f.approve_and_drain(&[]), "drain");
    assert_eq!(gh.prs()[0]["draft"], false);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_change_touching_more_files_than_max_changed_files_breaks_a_rule() {
    let f = counted(
        "",
        "- [ ] Sub and docs\n  - max_changed_files: 1\n- [ ] Add mul\n  - max_changed_files: 1\n",
    )
    .start()
    .await;
    let plan = text(&f.run(&["plan"]));
    assert!(
        plan.contains("at most 1 files (item) · 5000 lines added and removed (default)"),
        "{plan}"
    );
    let rep = drain_exits_1_with(&f, &["rule_broken", "branch_pushed"]);
    let why = reason(&rep, 0);
    assert!(
        why.contains(
            "the change touches 2 files, above max_changed_files = 1: calc.txt, docs/README.md"
        ),
        "{why}"
    );
    assert_eq!(rep["items"][0]["rounds"], 1, "the item ends in its round");
    assert_eq!(
        f.remote_branches().len(),
        1,
        "nothing of the broken item pushed"
    );
    let prompt = std::fs::read_to_string(f.agents.join("prompt.md")).unwrap();
    assert!(prompt.contains("At most 1 changed files"), "{prompt}");

    // An item may lower the policy's cap, never raise it.
    let w = f.agents.join("writer.sh").display().to_string();
    let r = f.agents.join("reviewer.sh").display().to_string();
    f.config_with(&w, &r, "[limits]\nmax_changed_files = 1\n");
    f.write("NEXT.md", "- [ ] Sub and docs\n  - max_changed_files: 3\n");
    let out = f.run(&["plan"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let t = text(&out);
    assert!(
        t.contains("NEXT.md:2")
            && t.contains("`max_changed_files: 3` is above the policy cap of 1"),
        "{t}"
    );
    f.write(
        "NEXT.md",
        "- [ ] Sub and docs\n  - max_changed_files: none\n",
    );
    let t = text(&f.run(&["plan"]));
    assert!(
        t.contains("NEXT.md:2") && t.contains("`max_changed_files: none` is not a whole number"),
        "{t}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_change_longer_than_max_diff_lines_breaks_a_rule() {
    let f = counted(
        "[limits]\nmax_diff_lines = 3\n",
        "- [ ] Four subs\n- [ ] Add pow twice\n  - max_diff_lines: 1\n- [ ] Add mul\n",
    )
    .start()
    .await;
    let plan = text(&f.run(&["plan"]));
    assert!(
        plan.contains("3 lines added and removed (policy)"),
        "{plan}"
    );
    assert!(plan.contains("1 lines added and removed (item)"), "{plan}");
    let rep = drain_exits_1_with(&f, &["rule_broken", "rule_broken", "branch_pushed"]);
    let why = reason(&rep, 0);
    assert!(
        why.contains(
            "adds and removes 4 lines (+4 −0), above max_diff_lines = 3; largest: calc.txt +4 −0"
        ),
        "{why}"
    );
    assert!(
        reason(&rep, 1).contains("2 lines (+2 −0), above max_diff_lines = 1"),
        "{rep:#}"
    );
    assert_eq!(f.remote_branches().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn protected_paths_break_a_rule_whatever_the_scope() {
    let f = counted(
        "protected = [\".github/**\", \"migrations/**\"]\n",
        "- [ ] Sub and CI\n  - scope: calc.txt .github/**\n- [ ] Div and a migration\n- [ ] Add mul\n",
    ).start().await;
    let plan = text(&f.run(&["plan"]));
    assert!(
        plan.contains(
            ", .nightshift/**, .github/**, migrations/** (never changed, whatever the scope)"
        ),
        "{plan}"
    );
    let rep = drain_exits_1_with(&f, &["rule_broken", "rule_broken", "branch_pushed"]);
    let why = reason(&rep, 0);
    assert!(
        why.contains(
            "files changed in protected paths (nightshift's defaults and config `protected`; only an item's `allow:` lifts them): .github/workflows/ci.yml"
        ) && !why.contains("outside scope"),
        "{why}"
    );
    assert!(
        reason(&rep, 1).contains("lifts them): migrations/0002_x.sql"),
        "{rep:#}"
    );
    assert_eq!(f.remote_branches().len(), 1);
    let prompt = std::fs::read_to_string(f.agents.join("prompt.md")).unwrap();
    assert!(
        prompt
            .contains("These paths must never change, whatever the scope: .github/workflows/**, ")
            && prompt.contains(", .nightshift/**, .github/**, migrations/**\n"),
        "{prompt}"
    );

    // The globs are sealed: changing them changes every contract.
    let sha = |f: &Fixture| {
        let out = f.run(&["plan", "--json"]);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["items"][2]["contract_sha"].as_str().unwrap().to_string()
    };
    let before = sha(&f);
    let w = f.agents.join("writer.sh").display().to_string();
    let r = f.agents.join("reviewer.sh").display().to_string();
    f.config_with(&w, &r, "protected = [\".github/**\"]\n");
    assert_ne!(sha(&f), before);
}

/// Issue 21, point 3: CI configuration is protected by default, a user's
/// `protected` adds to the defaults, and only an item's `allow:` line —
/// sealed and shown on the card — lifts it.
#[tokio::test(flavor = "multi_thread")]
async fn ci_configuration_is_protected_by_default_and_allow_on_the_card_lifts_it() {
    let gh = FakeGitHub::start().await;
    let f = counted(
        "protected = [\"migrations/**\"]\n",
        "- [ ] Cache in CI\n- [ ] Cache in CI, allowed\n  - allow: .github/workflows/ci.yml\n- [ ] Div and a migration\n",
    )
    .github_api_on(&gh)
        .token("ghp_reviewwork_token_0123456789")
    .start()
    .await;
    let plan = text(&f.run(&["plan"]));
    let cards: Vec<&str> = plan.split("── item ").skip(1).collect();
    assert_eq!(cards.len(), 3, "{plan}");
    for card in &cards {
        assert!(
            card.contains("   protected .github/workflows/**, .github/actions/**, ")
                && card.contains(
                    ", .nightshift/**, migrations/** (never changed, whatever the scope)"
                ),
            "{card}"
        );
    }
    assert!(!cards[0].contains("   allow "), "{}", cards[0]);
    assert!(
        cards[1].contains(
            "\n   allow     .github/workflows/ci.yml (lifts protected paths for this item)\n"
        ),
        "{}",
        cards[1]
    );

    let rep = drain_exits_1_with(&f, &["rule_broken", "pr_opened", "rule_broken"]);
    assert!(
        reason(&rep, 0).contains("protected paths")
            && reason(&rep, 0).ends_with(": .github/workflows/ci.yml"),
        "{rep:#}"
    );
    assert!(
        reason(&rep, 2).ends_with(": migrations/0002_x.sql"),
        "{rep:#}"
    );
    // One branch on the remote, one PR: the allowed item's, with the
    // workflow in it; nothing of the item that was not allowed.
    let branches = f.remote_branches();
    assert_eq!(branches.len(), 1, "{branches:?}");
    let shipped = common::git(
        &f.remote,
        &["show", &format!("{}:.github/workflows/ci.yml", branches[0])],
    );
    assert!(shipped.contains("jobs: {}"), "{shipped}");
    let prs = gh.prs();
    assert_eq!(prs.len(), 1, "{prs:#?}");
    assert_eq!(prs[0]["head"]["ref"].as_str(), Some(branches[0].as_str()));
    // The allow line is sealed in the contract the writer ran under.
    let contract: Value = serde_json::from_str(
        &std::fs::read_to_string(f.agents.join("contract-allowed.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        contract["allow"],
        serde_json::json!([".github/workflows/ci.yml"]),
        "{contract:#}"
    );
    assert!(
        contract["protected"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!(".github/workflows/**")),
        "{contract:#}"
    );
    let prompt = std::fs::read_to_string(f.agents.join("prompt-allowed.md")).unwrap();
    assert!(
        prompt.contains(
            "This item may change these protected paths all the same (its approved `allow:`; still only inside the scope): .github/workflows/ci.yml\n"
        ),
        "{prompt}"
    );
}

/// `allow:` lifts protection only: a path outside the item's `scope:`
/// still breaks the scope rule.
#[tokio::test(flavor = "multi_thread")]
async fn allow_never_widens_the_scope() {
    let f = counted(
        "",
        "- [ ] Cache in CI, allowed\n  - scope: calc.txt\n  - allow: .github/workflows/ci.yml\n",
    )
    .start()
    .await;
    let rep = drain_exits_1_with(&f, &["rule_broken"]);
    assert!(
        reason(&rep, 0).contains("files changed outside scope: .github/workflows/ci.yml"),
        "{rep:#}"
    );
    assert!(f.remote_branches().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_values_of_the_new_keys_name_file_line_and_key() {
    let f = counted("", "- [ ] Add sub\n").start().await;
    let w = f.agents.join("writer.sh").display().to_string();
    let r = f.agents.join("reviewer.sh").display().to_string();
    for (extra, key, says) in [
        ("max_open_prs = 0\n", "max_open_prs", "must be at least 1"),
        ("max_open_prs = \"ten\"\n", "max_open_prs", "invalid type"),
        ("draft = \"yes\"\n", "draft", "invalid type"),
        (
            "protected = \".github/**\"\n",
            "protected",
            "protected = [\".github/**\"]",
        ),
        (
            "protected = [\"src/[a\"]\n",
            "protected",
            "bad glob \"src/[a\"",
        ),
        ("protected = [\"\"]\n", "protected", "is not a path glob"),
        (
            "[limits]\nmax_changed_files = 0\n",
            "max_changed_files",
            "must be at least 1",
        ),
        (
            "[limits]\nmax_diff_lines = -5\n",
            "max_diff_lines",
            "invalid value",
        ),
    ] {
        f.config_with(&w, &r, extra);
        let written = std::fs::read_to_string(f.repo.join(".nightshift/config.toml")).unwrap();
        let line = written
            .lines()
            .position(|l| l.starts_with(&format!("{key} =")))
            .unwrap()
            + 1;
        let out = f.run(&["plan"]);
        assert_eq!(out.status.code(), Some(2), "{extra}: {}", text(&out));
        let t = text(&out);
        assert!(
            t.contains(&format!(".nightshift/config.toml:{line}"))
                && t.contains(&format!("`{key}`"))
                && t.contains(says),
            "{extra}: {t}"
        );
    }
}
