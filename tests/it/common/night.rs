//! [`Night`]: a night described in one chain, in the manner of just's `Test`
//! builder (casey/just, tests/test.rs): the backlog, the writer and the
//! reviewer, config lines, the fake GitHub on or off, the drain's flags, the
//! exit code and the outcomes it must end with.
//!
//! ```text
//! let night = Night::new()
//!     .backlog("- [ ] Add sub\n- [ ] Add mul\n")
//!     .writer(WRITER)
//!     .reviewer(REJECT_MUL)
//!     .config("[limits]\nrounds = 2\n")
//!     .github()
//!     .drain(&["--jobs", "2"])
//!     .exit(1)
//!     .outcomes(&["pr_opened", "review_rejected"])
//!     .run()
//!     .await;
//! assert_eq!(night.db.items()[0].pr_number, Some(1));
//! ```
//!
//! [`Night::start`] sets the world up and runs nothing (for tests that drive
//! the binary themselves); [`Night::run`] plans, approves and drains, then
//! checks the exit code and the outcomes (in `report --json`, the public
//! surface) it was told to expect. The [`World`] it returns is the
//! [`Fixture`] (by `Deref`), the fake GitHub if it started one, and the
//! drain's output; the ledger's rows are read typed through the fixture's
//! database ([`super::rows`]).
//!
//! Not here: tests of one library function (they call it), and the agent
//! backends' own tests (tests/it/agent_*.rs), which call an agent without a
//! night.

use std::ops::{Deref, DerefMut};
use std::process::Output;

use super::github::FakeGitHub;
use super::{Fixture, assert_ok, git, text};

/// A reviewer that approves everything.
pub const APPROVE: &str = "#!/bin/sh\necho '{\"verdict\":\"approve\",\"findings\":[]}'\n";

/// The body of a writer script (no `#!` line: callers put their own lines
/// first) that appends the item's word (`sub`, `pow`, `mul`, `bogus`) to
/// calc.txt.
pub const WORD_WRITER: &str = r#"title=$(grep -o '"title":"[^"]*"' "$NIGHTSHIFT_CONTRACT_FILE" | head -1)
case "$title" in
  *sub*) echo sub >> calc.txt ;;
  *pow*) echo pow >> calc.txt ;;
  *mul*) echo mul >> calc.txt ;;
  *bogus*) echo bogus >> calc.txt ;;
esac
echo "edited calc.txt"
"#;

/// A writer that changes nothing.
pub const IDLE: &str = "#!/bin/sh\necho \"nothing to do\"\n";

/// The token a night with GitHub passes unless told another.
pub const TOKEN: &str = "ghp_night_token_0123456789abcdef";

/// Where the night's GitHub comes from.
enum GitHub<'a> {
    Off,
    /// A fake of the night's own; `serve_git`: it answers from the bare
    /// remote (a PR's commits, `mergeable`), as GitHub does.
    Own {
        serve_git: bool,
    },
    /// A fake the test started (to set faults or PRs up first).
    Given {
        gh: &'a FakeGitHub,
        serve_git: bool,
    },
    /// An API URL of the test's (e.g. one nothing listens on).
    Url(String),
}

/// A script (an agent's), fixed or made from the fixture's paths.
type Script<'a> = Box<dyn FnOnce(&Fixture) -> String + 'a>;

/// Set-up of the test's own on the fixture ([`Night::with`]).
type Hook<'a> = Box<dyn FnOnce(&mut Fixture) + 'a>;

/// A night to set up, and run or not: see the module docs.
pub struct Night<'a> {
    backlog: String,
    writer: Script<'a>,
    reviewer: Script<'a>,
    config: String,
    github: GitHub<'a>,
    token: Option<String>,
    env: Vec<(String, String)>,
    hooks: Vec<Hook<'a>>,
    commit_backlog: bool,
    approved: bool,
    drain: Vec<String>,
    exit: Option<i32>,
    outcomes: Option<Vec<String>>,
}

impl Default for Night<'_> {
    fn default() -> Self {
        Night::new()
    }
}

impl<'a> Night<'a> {
    /// An empty backlog, an idle writer, an approving reviewer, no GitHub.
    pub fn new() -> Night<'a> {
        Night {
            backlog: String::new(),
            writer: Box::new(|_| IDLE.to_string()),
            reviewer: Box::new(|_| APPROVE.to_string()),
            config: String::new(),
            github: GitHub::Off,
            token: None,
            env: vec![],
            hooks: vec![],
            commit_backlog: false,
            approved: false,
            drain: vec![],
            exit: None,
            outcomes: None,
        }
    }

    /// `NEXT.md`, as written.
    pub fn backlog(mut self, markdown: &str) -> Self {
        self.backlog = markdown.to_string();
        self
    }

    /// `NEXT.md` of one open item per title (`- [ ] title`).
    pub fn items<S: AsRef<str>>(mut self, titles: impl IntoIterator<Item = S>) -> Self {
        self.backlog = titles
            .into_iter()
            .map(|t| format!("- [ ] {}\n", t.as_ref()))
            .collect();
        self
    }

    /// The writer: a shell script run as a `command` agent.
    pub fn writer(mut self, script: &str) -> Self {
        let script = script.to_string();
        self.writer = Box::new(move |_| script);
        self
    }

    /// The writer, made from the fixture (for scripts that name its paths).
    pub fn writer_with(mut self, script: impl FnOnce(&Fixture) -> String + 'a) -> Self {
        self.writer = Box::new(script);
        self
    }

    /// The reviewer: a shell script run as a `command` agent.
    pub fn reviewer(mut self, script: &str) -> Self {
        let script = script.to_string();
        self.reviewer = Box::new(move |_| script);
        self
    }

    /// The reviewer, made from the fixture.
    pub fn reviewer_with(mut self, script: impl FnOnce(&Fixture) -> String + 'a) -> Self {
        self.reviewer = Box::new(script);
        self
    }

    /// Config lines besides the agents and the gate (`sh test.sh`): top-level
    /// keys first, then any tables ([`Fixture::config_with`]).
    pub fn config(mut self, toml: &str) -> Self {
        self.config = toml.to_string();
        self
    }

    /// A fake GitHub of the night's own, serving the bare remote.
    pub fn github(mut self) -> Self {
        self.github = GitHub::Own { serve_git: true };
        self
    }

    /// A fake GitHub of the night's own that knows nothing of the remote's
    /// commits (PRs are never `mergeable`-computed).
    pub fn github_api_only(mut self) -> Self {
        self.github = GitHub::Own { serve_git: false };
        self
    }

    /// The fake GitHub `gh`, started (and set up) by the test; it serves the
    /// bare remote.
    pub fn github_on(mut self, gh: &'a FakeGitHub) -> Self {
        self.github = GitHub::Given {
            gh,
            serve_git: true,
        };
        self
    }

    /// The fake GitHub `gh`, started by the test, knowing nothing of the
    /// remote's commits.
    pub fn github_api_on(mut self, gh: &'a FakeGitHub) -> Self {
        self.github = GitHub::Given {
            gh,
            serve_git: false,
        };
        self
    }

    /// GitHub's API at `url` (e.g. `http://127.0.0.1:1`, where nothing
    /// listens).
    pub fn github_url(mut self, url: &str) -> Self {
        self.github = GitHub::Url(url.to_string());
        self
    }

    /// The `GITHUB_TOKEN` (default with GitHub: [`TOKEN`]).
    pub fn token(mut self, token: &str) -> Self {
        self.token = Some(token.to_string());
        self
    }

    /// An environment variable for every run of the binary.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// Set-up of the fixture's own, run before the agents, config and
    /// backlog are written (files beside the agents, env naming its paths).
    pub fn with(mut self, hook: impl FnOnce(&mut Fixture) + 'a) -> Self {
        self.hooks.push(Box::new(hook));
        self
    }

    /// Commits the backlog and pushes it to the remote's `main`.
    pub fn commit_backlog(mut self) -> Self {
        self.commit_backlog = true;
        self
    }

    /// Plans and approves at [`Night::start`] (a drain then needs no approval).
    pub fn approved(mut self) -> Self {
        self.approved = true;
        self
    }

    /// The drain's flags ([`Night::run`]).
    pub fn drain(mut self, flags: &[&str]) -> Self {
        self.drain = flags.iter().map(|s| s.to_string()).collect();
        self
    }

    /// The exit code the drain must end with ([`Night::run`]).
    pub fn exit(mut self, code: i32) -> Self {
        self.exit = Some(code);
        self
    }

    /// The outcomes of the drain's items in `report --json`, in order
    /// ([`Night::run`]).
    pub fn outcomes(mut self, outcomes: &[&str]) -> Self {
        self.outcomes = Some(outcomes.iter().map(|s| s.to_string()).collect());
        self
    }

    /// The world, set up; nothing run (but plan and approve if
    /// [`Night::approved`]).
    pub async fn start(self) -> World {
        let mut f = Fixture::new();
        let gh = match self.github {
            GitHub::Off => None,
            GitHub::Own { serve_git } => {
                let gh = FakeGitHub::start().await;
                f.github = Some(gh.uri());
                if serve_git {
                    gh.serve_git(&f.remote);
                }
                Some(gh)
            }
            GitHub::Given { gh, serve_git } => {
                f.github = Some(gh.uri());
                if serve_git {
                    gh.serve_git(&f.remote);
                }
                None
            }
            GitHub::Url(url) => {
                f.github = Some(url);
                None
            }
        };
        f.token = self
            .token
            .or_else(|| f.github.as_ref().map(|_| TOKEN.into()));
        f.extra_env.extend(self.env);
        for hook in self.hooks {
            hook(&mut f);
        }
        let w = f.agent("writer.sh", &(self.writer)(&f));
        let r = f.agent("reviewer.sh", &(self.reviewer)(&f));
        f.config_with(&w, &r, &self.config);
        f.write("NEXT.md", &self.backlog);
        if self.commit_backlog {
            git(&f.repo, &["add", "NEXT.md"]);
            git(&f.repo, &["commit", "-qm", "backlog"]);
            git(&f.repo, &["push", "-q", "origin", "main"]);
        }
        if self.approved {
            let sha = f.plan_sha();
            assert_ok(&f.run(&["approve", &sha]), "approve");
        }
        World { f, gh, out: None }
    }

    /// Sets the world up, plans, approves and drains with the
    /// [`Night::drain`] flags; then checks the [`Night::exit`] code and the
    /// [`Night::outcomes`], if given.
    pub async fn run(mut self) -> World {
        let drain = std::mem::take(&mut self.drain);
        let (exit, outcomes) = (self.exit.take(), self.outcomes.take());
        let approved = self.approved;
        let mut world = self.start().await;
        let flags: Vec<&str> = drain.iter().map(String::as_str).collect();
        let out = if approved {
            let mut args = vec!["drain"];
            args.extend(&flags);
            world.run(&args)
        } else {
            world.approve_and_drain(&flags)
        };
        if let Some(code) = exit {
            assert_eq!(out.status.code(), Some(code), "drain:\n{}", text(&out));
        }
        if let Some(want) = outcomes {
            let report = world.report();
            assert_eq!(super::bg::outcomes(&report), want, "{report:#}");
        }
        world.out = Some(out);
        world
    }
}

/// A night's world: the fixture, the fake GitHub the night started (none
/// when it had none or was given one), the drain's output after
/// [`Night::run`].
pub struct World {
    pub f: Fixture,
    pub gh: Option<FakeGitHub>,
    pub out: Option<Output>,
}

impl World {
    /// The fake GitHub the night started.
    pub fn gh(&self) -> &FakeGitHub {
        self.gh.as_ref().expect("a night with .github()")
    }

    /// The drain's output ([`Night::run`]).
    pub fn out(&self) -> &Output {
        self.out.as_ref().expect("a night that ran (Night::run)")
    }

    /// The fixture and the fake GitHub, apart (for tests that change the
    /// fixture while they hold the GitHub).
    pub fn split(self) -> (Fixture, FakeGitHub) {
        (self.f, self.gh.expect("a night with .github()"))
    }
}

impl Deref for World {
    type Target = Fixture;

    fn deref(&self) -> &Fixture {
        &self.f
    }
}

impl DerefMut for World {
    fn deref_mut(&mut self) -> &mut Fixture {
        &mut self.f
    }
}
