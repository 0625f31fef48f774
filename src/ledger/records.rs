//! Typed reads and writes of the ledger tables (docs/ledger.md), under one
//! name for their callers.
//!
//! Every row the run loop, `approve`, `report` and `status` need goes through
//! a function of the ledger, so the SQL lives next to the schema in
//! `migrations/`, one module per table family ([`super::plans`],
//! [`super::approvals`], [`super::runs`], [`super::items`],
//! [`super::rounds`], [`super::prs`], [`super::tend`], [`super::limits`],
//! [`super::events`]) and the reads of `report --history`
//! ([`super::history`]); those of `report --html` are
//! [`super::timeline`]'s, named there. Approvals and events are insert-only
//! (the schema's triggers reject updates); runs and run items are updated
//! as they progress. This module holds no SQL of its own: it gathers those
//! modules' row types and functions, which take and return rows, never the
//! domain's types.

pub use super::approvals::*;
pub use super::events::*;
pub use super::history::*;
pub use super::items::*;
pub use super::limits::*;
pub use super::plans::*;
pub use super::prs::*;
pub use super::rounds::*;
pub use super::runs::*;
pub use super::tend::*;
pub use super::text::Result;

/// [`super::runs::mark_dead_runs_crashed`] with the run's outcome for the
/// items left without an end (`interrupted`), for `cli/drain` until it
/// calls `crate::run::mark_dead_runs_crashed`, which decides it; this
/// module goes then.
///
/// # Errors
/// Database errors.
pub async fn mark_dead_runs_crashed(
    pool: &sqlx::PgPool,
    repo: &str,
) -> Result<Vec<super::runs::RunRow>> {
    let left_items = crate::outcome::Outcome::Interrupted;
    super::runs::mark_dead_runs_crashed(pool, repo, left_items).await
}
