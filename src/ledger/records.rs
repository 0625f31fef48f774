//! The ledger's table families (docs/ledger.md) under one name, for the
//! callers in `cli/` that still use it; everything else calls the family
//! modules ([`super::plans`], [`super::runs`], [`super::items`], …)
//! directly. This module holds no SQL of its own and goes once `cli/`
//! calls the families itself.

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
