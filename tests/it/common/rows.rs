//! Typed reads of a test database's ledger rows, for the assertions of the
//! tests about a night: `f.db.items()` is every item row with its outcome,
//! attempts and PR; `f.db.count(Table::Reviews)` a table's size; and so on
//! for runs, agent calls, usage-limit sleeps and pull requests.
//!
//! Each read is one query through sqlx on the test's one session
//! ([`Db::on_session`]; no `psql` or connection per assertion), ordered so that a test can compare whole vectors.
//! The queries read the schema in `migrations/` directly, not through the
//! library's ledger: a test checks what the binary wrote, not what the
//! library reads back. Not here: the ledger's own tests (tests/it/ledger.rs),
//! which exercise the schema's triggers and constraints with raw SQL, and
//! set-up writes that put a ledger into a state (`Db::sql`).

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;

use super::db::Db;

/// The ledger tables the tests count (a closed set: a misspelt table is a
/// compile error, not a failed query).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    Runs,
    RunItems,
    Rounds,
    AgentCalls,
    GateRuns,
    Reviews,
    Proofs,
    Events,
    Plans,
    Approvals,
    ApprovalUses,
    LimitSleeps,
    AccountPauses,
    PullRequests,
    Findings,
    Claims,
}

impl Table {
    fn name(self) -> &'static str {
        match self {
            Table::Runs => "runs",
            Table::RunItems => "run_items",
            Table::Rounds => "rounds",
            Table::AgentCalls => "agent_calls",
            Table::GateRuns => "gate_runs",
            Table::Reviews => "reviews",
            Table::Proofs => "proofs",
            Table::Events => "events",
            Table::Plans => "plans",
            Table::Approvals => "approvals",
            Table::ApprovalUses => "approval_uses",
            Table::LimitSleeps => "limit_sleeps",
            Table::AccountPauses => "account_pauses",
            Table::PullRequests => "pull_requests",
            Table::Findings => "findings",
            Table::Claims => "claims",
        }
    }
}

/// One `run_items` row: an item of a run, as the night ended it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Item {
    pub run_id: uuid::Uuid,
    pub item_index: i32,
    pub item_key: String,
    pub title: String,
    /// `None` while the item runs (or when a crash left it so).
    pub outcome: Option<String>,
    pub reason: Option<String>,
    pub branch: Option<String>,
    pub pr_number: Option<i64>,
    pub rounds: i32,
    pub worker: Option<String>,
    pub cost_usd: Option<f64>,
    /// How many times a worker claimed the item in its run (`claims` rows;
    /// 0 for a run that claims nothing, e.g. `run ITEM`).
    pub attempts: i64,
}

/// One `runs` row.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Run {
    pub id: uuid::Uuid,
    pub repo: String,
    pub status: String,
    pub exit_code: Option<i32>,
    pub pid: i32,
    pub phase: Option<String>,
    pub deadline: Option<DateTime<Utc>>,
}

/// One `agent_calls` row, with the index and the worker of its item.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Call {
    pub item_index: i32,
    pub worker: Option<String>,
    pub started_at: DateTime<Utc>,
    pub role: String,
    pub kind: String,
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    pub tokens_in: Option<i64>,
    pub tokens_out: Option<i64>,
    pub cost_usd: Option<f64>,
    pub limit_kind: Option<String>,
    /// What the backend read besides the fields above (`failure`,
    /// `limit.source`, `stderr_path`, `notes`, …).
    pub meta: serde_json::Value,
}

impl Call {
    /// `role:limit_kind` (`-` for none), as the tests compare a night's calls.
    pub fn role_and_limit(&self) -> String {
        format!(
            "{}:{}",
            self.role,
            self.limit_kind.as_deref().unwrap_or("-")
        )
    }

    /// `role:tokens_in/tokens_out` (`?` for a count not recorded).
    pub fn role_and_tokens(&self) -> String {
        let n = |t: Option<i64>| t.map_or("?".to_string(), |t| t.to_string());
        format!("{}:{}/{}", self.role, n(self.tokens_in), n(self.tokens_out))
    }
}

/// One `limit_sleeps` row: a usage-limit or transient sleep, with the
/// worker of its item (none for a sleep outside an item).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Sleep {
    pub worker: Option<String>,
    pub agent: String,
    pub kind: String,
    pub message: String,
    pub slept_from: DateTime<Utc>,
    pub slept_until: DateTime<Utc>,
    /// When the limit said it resets (none for a sleep by policy).
    pub resets_at: Option<DateTime<Utc>>,
}

impl Sleep {
    /// How long the sleep was, in seconds.
    pub fn secs(&self) -> f64 {
        (self.slept_until - self.slept_from).num_milliseconds() as f64 / 1000.0
    }
}

/// One `account_pauses` row: an account's usage limit, for every worker.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Pause {
    pub account: String,
    pub worker: String,
    pub at: DateTime<Utc>,
    pub paused_until: DateTime<Utc>,
}

/// One `claims` row: a worker's attempt at an item.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Claim {
    pub item_key: String,
    pub attempt: i32,
    pub worker: String,
    pub end_reason: Option<String>,
}

/// One `pull_requests` row.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Pr {
    pub state: String,
    pub number: Option<i64>,
    pub branch: String,
}

impl Db {
    /// Every row `q` answers, as `T`.
    fn rows<T>(&self, q: impl Into<String>) -> Vec<T>
    where
        T: for<'r> sqlx::FromRow<'r, PgRow> + Send + Unpin,
    {
        let q: String = q.into();
        self.on_session(&|c| {
            let q = q.clone();
            Box::pin(async move {
                sqlx::query_as::<_, T>(sqlx::AssertSqlSafe(q))
                    .fetch_all(c)
                    .await
            })
        })
        .unwrap_or_else(|e| panic!("{q}: {e}"))
    }

    /// How many rows `table` has.
    pub fn count(&self, table: Table) -> usize {
        let q = format!("SELECT count(*) FROM {}", table.name());
        usize::try_from(self.rows::<(i64,)>(q)[0].0).expect("a count is not negative")
    }

    /// Every item row, by run (oldest first), then backlog order.
    pub fn items(&self) -> Vec<Item> {
        self.rows(
            "SELECT i.run_id, i.item_index, i.item_key, i.title, i.outcome, i.reason, i.branch, \
             i.pr_number, i.rounds, i.worker, i.cost_usd, \
             (SELECT count(*) FROM claims c WHERE c.run_id = i.run_id AND c.item_key = i.item_key) AS attempts \
             FROM run_items i JOIN runs r ON r.id = i.run_id ORDER BY r.started_at, i.item_index",
        )
    }

    /// The outcome of every item row, in [`Db::items`] order (`""` for none).
    pub fn outcomes(&self) -> Vec<String> {
        self.items()
            .into_iter()
            .map(|i| i.outcome.unwrap_or_default())
            .collect()
    }

    /// Every run, oldest first.
    pub fn runs(&self) -> Vec<Run> {
        self.rows(
            "SELECT id, repo, status, exit_code, pid, phase, deadline FROM runs ORDER BY started_at",
        )
    }

    /// Every agent call, in the order they were recorded.
    pub fn calls(&self) -> Vec<Call> {
        self.rows(
            "SELECT i.item_index, i.worker, a.started_at, a.role, a.kind, a.exit_code, a.timed_out, a.tokens_in, \
             a.tokens_out, a.cost_usd, a.limit_kind, a.meta \
             FROM agent_calls a JOIN run_items i ON i.id = a.run_item_id ORDER BY a.id",
        )
    }

    /// How many agent calls had `role` (`writer`, `reviewer`).
    pub fn calls_of(&self, role: &str) -> usize {
        self.calls().iter().filter(|c| c.role == role).count()
    }

    /// Every usage-limit or transient sleep, in the order they began.
    pub fn sleeps(&self) -> Vec<Sleep> {
        self.rows(
            "SELECT i.worker, s.agent, s.kind, s.message, s.slept_from, s.slept_until, s.resets_at \
             FROM limit_sleeps s LEFT JOIN run_items i ON i.id = s.run_item_id ORDER BY s.slept_from, s.id",
        )
    }

    /// Every account pause, in the order they were recorded.
    pub fn pauses(&self) -> Vec<Pause> {
        self.rows("SELECT account, worker, at, paused_until FROM account_pauses ORDER BY id")
    }

    /// Every claim, in the order they were made.
    pub fn claims(&self) -> Vec<Claim> {
        self.rows("SELECT item_key, attempt, worker, end_reason FROM claims ORDER BY id")
    }

    /// Every pull-request row, in the order they were recorded.
    pub fn prs(&self) -> Vec<Pr> {
        self.rows("SELECT state, number, branch FROM pull_requests ORDER BY id")
    }

    /// The state of every pull-request row, in order (`open`, `planned`,
    /// `pr_failed`, …).
    pub fn pr_states(&self) -> Vec<String> {
        self.prs().into_iter().map(|p| p.state).collect()
    }

    /// The status of every run, oldest first (`completed`, `crashed`, …).
    pub fn statuses(&self) -> Vec<String> {
        self.runs().into_iter().map(|r| r.status).collect()
    }

    /// Every review's verdict, in order.
    pub fn verdicts(&self) -> Vec<String> {
        self.rows::<(String,)>("SELECT verdict FROM reviews ORDER BY id")
            .into_iter()
            .map(|(v,)| v)
            .collect()
    }

    /// How many events of `kind` the ledger holds.
    pub fn events(&self, kind: &str) -> usize {
        self.rows::<(String,)>("SELECT kind FROM events")
            .iter()
            .filter(|(k,)| k == kind)
            .count()
    }
}
