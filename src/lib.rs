//! nightshift drains a markdown checkbox backlog overnight with coding agents.
//!
//! For each open item of the backlog it seals a contract, lets a writer agent
//! change the code in an isolated checkout, runs the project's gate itself,
//! asks a read-only reviewer for a verdict, and opens at most one labelled
//! pull request per item. It never merges. Everything is recorded in the
//! PostgreSQL ledger. The product's reference is `docs/` (start at docs/README.md); this crate is laid out
//! one module per concept so that `ls src/` shows the architecture.

pub mod agent;
pub mod approval;
pub mod backlog;
pub mod build_output;
pub mod cli;
pub mod config;
pub mod contract;
pub mod doctor;
pub mod duration;
pub mod error;
pub mod file;
pub mod forge;
pub mod gate;
pub mod git;
pub mod history;
pub mod ledger;
pub mod limit;
pub mod notify;
pub mod outcome;
pub mod plan;
pub mod process;
pub mod proof;
pub mod queue;
pub mod remote;
pub mod report;
pub mod review;
pub mod run;
pub mod sandbox;
pub mod schedule;
pub mod secret;
pub mod serve;
pub mod settings;
pub mod slot;
pub mod snapshot;
pub mod status;
pub mod sync;
pub mod tend;
pub mod timeline;
pub mod user_repo;
pub mod views;
