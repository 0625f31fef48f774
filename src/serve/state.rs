//! The board's state (`/api/state`, and the `state` frames of `/events`):
//! the model of `status --json` (docs/commands.md#json-output), the same
//! fields, with `board` — the view model `report --html` draws too
//! ([`crate::report::board`]) — and `last_seq`, the number of the last event
//! it includes, added.

use std::path::PathBuf;

use serde_json::{Value, json};
use sqlx::PgPool;
use uuid::Uuid;

use crate::error::Result;

/// Which run a server shows, of which repository.
#[derive(Debug, Clone)]
pub struct Source {
    /// The repository's identity in the ledger.
    pub repo: String,
    /// The run to show (`--run`); `None`: the newest, whichever it is now.
    pub run: Option<Uuid>,
    /// Where the approval key is (`status` says whether a run may resume).
    pub key_path: PathBuf,
    /// How long events are kept (`[serve] retention`): older ones are
    /// pruned hourly while serving (docs/serve.md#pruning).
    pub retention: std::time::Duration,
}

impl Source {
    /// The state now; `last_seq` is the number of the last event the
    /// server sent (the state reflects at least that much).
    ///
    /// # Errors
    /// Database errors.
    pub async fn state(&self, pool: &PgPool, last_seq: i64) -> Result<Value> {
        let st = crate::status::Status::load(pool, &self.repo, self.key_path.clone()).await?;
        let text = st.text();
        let mut v = st.json(text);
        let run = crate::ledger::runs::run_row(pool, &self.repo, self.run).await?;
        let board = match &run {
            Some(r) => Some(crate::report::board::load(pool, r).await?),
            None => None,
        };
        v["board"] = serde_json::to_value(board).expect("the board is JSON");
        v["last_seq"] = json!(last_seq);
        v["repo"] = json!(self.repo);
        Ok(super::access::masked(v))
    }
}
