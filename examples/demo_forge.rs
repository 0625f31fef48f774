//! The demo's GitHub (examples/demo/run.sh): the same local
//! GitHub-compatible server the tests use (tests/it/common/github.rs and
//! github_ci.rs, included here, not copied), serving `owner/repo` over a
//! bare repository so that `mergeable` is computed from real git, as GitHub
//! does. It lets a new user try the second night (a merged sibling, a
//! conflict, a requested change) offline.
//!
//! Its CI (docs/github.md#ci): `main` is protected and requires one check,
//! `lint`, which every pushed commit gets at once. It fails on a commit
//! whose `src/lib.rs` holds a needless `return` (the demo's writer leaves
//! one in the subtract item), with a clippy-like job log naming the line,
//! served from a second local "log host" as GitHub's job logs are; it
//! succeeds on every other commit. So the first night shows one PR going
//! red, one fix round, and the same PR green.
//!
//! Usage: `demo_forge BARE_REPO INFO_FILE`. It writes `api=URL` and
//! `control=PORT` lines to INFO_FILE once it listens, then serves until
//! killed. The control port speaks one line per command, answered by one
//! line (`ok …` or `error: …`), so that a shell script can play the person
//! who reviews and merges in the morning (bash's `/dev/tcp`, no curl):
//! - `prs` — `N branch state` for every PR, on one line, `;`-separated;
//! - `merged BRANCH` — marks the PR of BRANCH merged (the script merges
//!   the branch into main itself, with git);
//! - `review BRANCH LOGIN PATH LINE TEXT…` — LOGIN, a member of the
//!   repository, requests changes on the PR of BRANCH with one line
//!   comment TEXT on PATH:LINE;
//! - `checks` — `sha name conclusion` for every check run reported, on one
//!   line, `;`-separated, oldest first.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

#[allow(dead_code, unused_imports)]
mod common {
    #[path = "../../tests/it/common/github.rs"]
    pub mod github;
    #[path = "../../tests/it/common/github_ci.rs"]
    pub mod github_ci;
}

use common::github::FakeGitHub;
use common::github_ci::AutoCheck;

/// The text the demo's `lint` check fails on (a needless `return`, which
/// clippy's `needless_return` rejects).
const LINT_FAULT: &str = "return a - b;";

/// The `lint` job's log when it fails: clippy's words, as GitHub Actions
/// shows them, naming the file, the line and the fix.
const LINT_LOG: &str = "\
2026-12-06T01:00:00.0000000Z ##[group]Run cargo clippy --all-targets -- -D warnings
2026-12-06T01:00:01.0000000Z     Checking calc v0.1.0 (/home/runner/work/calc/calc)
2026-12-06T01:00:02.0000000Z error: unneeded `return` statement
2026-12-06T01:00:02.0000000Z   --> src/lib.rs
2026-12-06T01:00:02.0000000Z    |
2026-12-06T01:00:02.0000000Z    |     return a - b;
2026-12-06T01:00:02.0000000Z    |     ^^^^^^^^^^^^^
2026-12-06T01:00:02.0000000Z    |
2026-12-06T01:00:02.0000000Z    = help: for further information visit https://rust-lang.github.io/rust-clippy/master/index.html#needless_return
2026-12-06T01:00:02.0000000Z    = note: `-D clippy::needless-return` implied by `-D warnings`
2026-12-06T01:00:02.0000000Z help: remove `return`
2026-12-06T01:00:02.0000000Z error: could not compile `calc` (lib) due to 1 previous error
2026-12-06T01:00:02.0000000Z ##[error]Process completed with exit code 101.
";

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [bare, info] = &args[..] else {
        eprintln!("usage: demo_forge BARE_REPO INFO_FILE");
        std::process::exit(2);
    };
    let bare = PathBuf::from(bare);
    if !bare.join("HEAD").is_file() {
        eprintln!(
            "demo_forge: {} is not a bare git repository (no HEAD file): give the demo's remote.git",
            bare.display()
        );
        std::process::exit(2);
    }
    let gh = Arc::new(FakeGitHub::start().await);
    gh.serve_git(&bare);
    // The repository's CI: a required `lint` check on every pushed commit,
    // its job's log on another local host (kept alive with the server).
    let _logs = gh.log_server().await;
    gh.protect("main", &["lint"]);
    gh.ci(|ci| {
        ci.auto = vec![
            AutoCheck::new("lint", Some("failure"))
                .summary("cargo clippy: 1 error (needless_return) in src/lib.rs")
                .log(LINT_LOG)
                .failed_by("src/lib.rs", LINT_FAULT),
        ]
    });
    let control = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("demo_forge: bind a control port on 127.0.0.1");
    let port = control.local_addr().expect("control address").port();
    let tmp = format!("{info}.tmp");
    std::fs::write(&tmp, format!("api={}\ncontrol={port}\n", gh.uri()))
        .and_then(|()| std::fs::rename(&tmp, info))
        .unwrap_or_else(|e| panic!("demo_forge: write {info}: {e}"));
    loop {
        let Ok((stream, _)) = control.accept().await else {
            continue;
        };
        let gh = gh.clone();
        tokio::spawn(async move {
            let (read, mut write) = stream.into_split();
            let mut lines = BufReader::new(read).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let answer = command(&gh, &line);
                if write
                    .write_all(format!("{answer}\n").as_bytes())
                    .await
                    .is_err()
                {
                    break;
                }
            }
        });
    }
}

/// One control command's answer line.
fn command(gh: &FakeGitHub, line: &str) -> String {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        ["prs"] => {
            let prs: Vec<String> = gh
                .prs()
                .iter()
                .map(|p| {
                    format!(
                        "{} {} {}",
                        p["number"],
                        p["head"]["ref"].as_str().unwrap_or(""),
                        state(p)
                    )
                })
                .collect();
            format!("ok {}", prs.join(";"))
        }
        ["merged", branch] => match pr_of(gh, branch) {
            Some(n) => {
                gh.merge(n);
                format!("ok #{n} merged")
            }
            None => format!("error: no PR has the branch {branch}"),
        },
        ["review", branch, login, path, line_no, text @ ..] if !text.is_empty() => {
            let (Some(n), Ok(at)) = (pr_of(gh, branch), line_no.parse::<u64>()) else {
                return format!(
                    "error: no PR has the branch {branch}, or {line_no} is not a line number"
                );
            };
            let text = text.join(" ");
            gh.add_review(n, login, "CHANGES_REQUESTED", "", &[(path, at, &text)]);
            format!("ok #{n} changes requested by {login}")
        }
        ["checks"] => {
            let runs: Vec<String> = gh.ci(|ci| {
                (ci.check_runs.iter())
                    .map(|r| {
                        let sha: String = r["head_sha"]
                            .as_str()
                            .unwrap_or("")
                            .chars()
                            .take(12)
                            .collect();
                        let name = r["name"].as_str().unwrap_or("");
                        format!(
                            "{sha} {name} {}",
                            r["conclusion"].as_str().unwrap_or("pending")
                        )
                    })
                    .collect()
            });
            format!("ok {}", runs.join(";"))
        }
        _ => format!(
            "error: unknown command {line:?}: prs | checks | merged BRANCH | review BRANCH LOGIN PATH LINE TEXT"
        ),
    }
}

/// The PR whose head is `branch`.
fn pr_of(gh: &FakeGitHub, branch: &str) -> Option<u64> {
    gh.prs()
        .iter()
        .find(|p| p["head"]["ref"] == branch)
        .and_then(|p| p["number"].as_u64())
}

/// `open`, `merged` or `closed`, as a person reads a PR's state.
fn state(p: &serde_json::Value) -> &'static str {
    match (p["state"].as_str(), p["merged_at"].is_string()) {
        (_, true) => "merged",
        (Some("open"), _) => "open",
        _ => "closed",
    }
}
