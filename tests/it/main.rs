//! The integration tests, as one test binary (`cargo nextest run --test it`,
//! or `cargo test --test it`).
//!
//! One binary links the library, octocrab, sqlx and git2 once, where one
//! binary per file linked them fifteen times. Each area is a module
//! (its tests are named `area::test_name`, so `cargo nextest run --test it
//! forge::` runs one area), and the shared harness is a module every area uses:
//! [`common`] (a database per test cloned from one migrated template,
//! fixtures, the stateful fake GitHub, background runs), [`fakes`] and
//! [`fakes_codex`] (the model APIs the real agent CLIs talk to, and their
//! replaying stand-ins).
//!
//! Files that are not Rust stay where the library's own unit tests and
//! `tests/run.sh` find them: recorded transcripts and corpora under
//! `tests/data/`, the fake `claude` and `codex` executables and their
//! transcripts under `tests/fakes/` and `tests/fakes_codex/`.

mod common;
mod fakes;
mod fakes_codex;

mod agent_claude;
mod agent_codex;
mod approval_bind;
mod attack;
mod backlog;
mod build_output;
mod ci;
mod ci_fix;
mod clock;
mod e2e;
mod forge;
mod git;
mod house;
mod ledger;
mod limit;
// `loop` is a keyword: as `r#loop` its tests would be named `r#loop::…`.
#[path = "loop.rs"]
mod item_loop;
mod morning;
mod morning_edges;
mod night;
mod ops;
mod process;
mod quota;
mod reap;
mod review_work;
mod sandbox;
mod schedule;
mod serve;
mod tend;
mod workers;
mod workers_more;
