//! Typed reads and writes of the ledger tables (docs/ledger.md).
//!
//! Every row the run loop, `approve`, `report` and `status` need goes through
//! a function here, so the SQL lives in one file next to the schema in
//! `migrations/`. Approvals and events are insert-only (the schema's triggers
//! reject updates); runs and run items are updated as they progress.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use sqlx::{FromRow, PgExecutor, PgPool};
use uuid::Uuid;

use crate::approval::{self, Approval};
use crate::outcome::{Outcome, Phase, PrRecord, RoundResult, RunKind, RunStatus};
use crate::plan::Plan;

/// Result of a ledger call.
pub type Result<T> = std::result::Result<T, sqlx::Error>;

/// Text as the ledger keeps it: every secret nightshift holds is masked
/// ([`crate::secret::redact_known`], also base64-, hex- or percent-encoded,
/// cut by line breaks, or the password of a URL), so no table holds one
/// whatever an agent, a gate, git or GitHub printed (docs/agents.md, docs/ledger.md); and a
/// NUL byte (which `text` and `jsonb` reject) becomes U+FFFD, since agent
/// and gate output is arbitrary bytes and one NUL must not stop the night.
fn pg(s: &str) -> String {
    crate::secret::redact_known(&verbatim(s))
}

/// [`pg`] for every string inside a JSON value.
fn pgj(v: Value) -> Value {
    match v {
        Value::String(s) => Value::String(pg(&s)),
        Value::Array(a) => Value::Array(a.into_iter().map(pgj).collect()),
        Value::Object(o) => Value::Object(o.into_iter().map(|(k, v)| (pg(&k), pgj(v))).collect()),
        other => other,
    }
}

fn pgo(s: &Option<String>) -> Option<String> {
    s.as_deref().map(pg)
}

/// Text kept as given, but for NUL bytes: the plan and its contracts, which
/// come from the user's own backlog and config and must hash to their SHA.
fn verbatim(s: &str) -> String {
    s.replace('\0', "\u{FFFD}")
}

/// [`verbatim`] for every string inside a JSON value.
fn verbatim_json(v: Value) -> Value {
    match v {
        Value::String(s) => Value::String(verbatim(&s)),
        Value::Array(a) => Value::Array(a.into_iter().map(verbatim_json).collect()),
        Value::Object(o) => Value::Object(
            o.into_iter()
                .map(|(k, v)| (verbatim(&k), verbatim_json(v)))
                .collect(),
        ),
        other => other,
    }
}

/// [`verbatim_json`] for JSON text. A NUL can only be in it as the escape
/// `\u0000`: without one, the text is kept as it is, not parsed and printed
/// again.
fn verbatim_json_text(json: String) -> String {
    if !json.contains("\\u0000") {
        return json;
    }
    let v: Value = serde_json::from_str(&json).expect("JSON text parses");
    verbatim_json(v).to_string()
}

const APPROVAL_COLUMNS: &str = "SELECT a.id, a.plan_sha, a.contract_sha, a.created_at, a.expires_at, u.run_id AS used_by, a.repo, a.signature FROM approvals a LEFT JOIN approval_uses u ON u.approval_id = a.id";

/// Stores the plan, its contracts and their order (idempotent), in a few
/// statements whatever the number of items: the rows go over as arrays
/// (`UNNEST`), so a backlog of 20,000 items costs no 40,000 round trips.
/// Plans are content-addressed and stored whole in one transaction, so a
/// plan already stored is not sent again, and of a new plan only the
/// contracts the ledger does not hold yet are.
///
/// # Errors
/// Database errors.
pub async fn save_plan(pool: &PgPool, repo: &str, plan: &Plan) -> Result<()> {
    if plan_exists(pool, &plan.sha).await? {
        return Ok(());
    }
    let mut tx = pool.begin().await?;
    sqlx::query("INSERT INTO plans (sha, repo, backlog_path, backlog_sha, created_at, json) VALUES ($1, $2, $3, $4, now(), $5::json) ON CONFLICT (sha) DO NOTHING")
        .bind(&plan.sha)
        .bind(repo)
        .bind(plan.backlog_path.display().to_string())
        .bind(&plan.backlog_sha)
        .bind(verbatim_json_text(plan.to_json_string()))
        .execute(&mut *tx)
        .await?;
    let shas: Vec<&str> = plan
        .entries
        .iter()
        .map(|e| e.contract_sha.as_str())
        .collect();
    let stored: std::collections::HashSet<String> =
        sqlx::query_scalar("SELECT sha FROM contracts WHERE sha = ANY($1::text[])")
            .bind(&shas)
            .fetch_all(&mut *tx)
            .await?
            .into_iter()
            .collect();
    insert_contracts(&mut tx, plan, &stored).await?;
    let n = plan.entries.len();
    let (mut positions, mut indexes, mut blocked) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for (pos, e) in plan.entries.iter().enumerate() {
        positions.push(pos as i32);
        indexes.push(e.index as i32);
        blocked.push(e.blocked.as_deref().map(verbatim));
    }
    sqlx::query("INSERT INTO plan_contracts (plan_sha, position, contract_sha, item_index, blocked) SELECT $1, p, c, i, b FROM UNNEST($2::int4[], $3::text[], $4::int4[], $5::text[]) AS u(p, c, i, b) ON CONFLICT DO NOTHING")
        .bind(&plan.sha)
        .bind(&positions)
        .bind(&shas)
        .bind(&indexes)
        .bind(&blocked)
        .execute(&mut *tx)
        .await?;
    tx.commit().await
}

/// Inserts the contracts of `plan` whose SHA is not in `stored`, in one
/// statement (a contract twice in the plan is sent once).
async fn insert_contracts(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    plan: &Plan,
    stored: &std::collections::HashSet<String>,
) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    let (mut shas, mut keys, mut titles, mut jsons) = (vec![], vec![], vec![], vec![]);
    for e in &plan.entries {
        if stored.contains(&e.contract_sha) || !seen.insert(e.contract_sha.as_str()) {
            continue;
        }
        let cjson = verbatim_json_text(e.contract.canonical_json());
        shas.push(e.contract_sha.as_str());
        keys.push(e.item.key.as_str());
        titles.push(verbatim(&e.item.title));
        jsons.push(cjson);
    }
    if shas.is_empty() {
        return Ok(());
    }
    sqlx::query("INSERT INTO contracts (sha, item_key, title, json, created_at) SELECT s, k, t, j::json, now() FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[]) AS u(s, k, t, j) ON CONFLICT (sha) DO NOTHING")
        .bind(&shas)
        .bind(&keys)
        .bind(&titles)
        .bind(&jsons)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// Whether a plan with this SHA was stored. Plans are content-addressed: two
/// clones of one repository with the same backlog and config seal the same
/// plan, and an approval (which names its repository) binds to that content.
///
/// # Errors
/// Database errors.
pub async fn plan_exists(pool: &PgPool, sha: &str) -> Result<bool> {
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM plans WHERE sha = $1")
        .bind(sha)
        .fetch_one(pool)
        .await?;
    Ok(n > 0)
}

/// Whether a contract with this SHA was stored.
///
/// # Errors
/// Database errors.
pub async fn contract_exists(pool: &PgPool, sha: &str) -> Result<bool> {
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM contracts WHERE sha = $1")
        .bind(sha)
        .fetch_one(pool)
        .await?;
    Ok(n > 0)
}

/// Contract SHAs of a stored plan, in order.
///
/// # Errors
/// Database errors.
pub async fn plan_contracts(pool: &PgPool, plan_sha: &str) -> Result<Vec<String>> {
    sqlx::query_scalar(
        "SELECT contract_sha FROM plan_contracts WHERE plan_sha = $1 ORDER BY position",
    )
    .bind(plan_sha)
    .fetch_all(pool)
    .await
}

/// Whether any of the contracts `shas` is one of item `key` (a contract of
/// that item under other details or config).
///
/// # Errors
/// Database errors.
pub async fn item_in_contracts(pool: &PgPool, shas: &[String], key: &str) -> Result<bool> {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM contracts WHERE sha = ANY($1) AND item_key = $2)",
    )
    .bind(shas)
    .bind(key)
    .fetch_one(pool)
    .await
}

/// The items (key and title) of the contracts `shas`, in the order of
/// `shas` (an approved plan's, i.e. backlog order); unknown SHAs are left out.
///
/// # Errors
/// Database errors.
pub async fn contract_items(pool: &PgPool, shas: &[String]) -> Result<Vec<crate::approval::Held>> {
    let rows: Vec<(String, String, String)> =
        sqlx::query_as("SELECT sha, item_key, title FROM contracts WHERE sha = ANY($1)")
            .bind(shas)
            .fetch_all(pool)
            .await?;
    // By SHA: a plan of 20,000 contracts would make a scan per SHA quadratic.
    let by_sha: std::collections::HashMap<&str, (&String, &String)> =
        rows.iter().map(|(s, k, t)| (s.as_str(), (k, t))).collect();
    Ok(shas
        .iter()
        .filter_map(|s| by_sha.get(s.as_str()))
        .map(|(key, title)| crate::approval::Held {
            key: (*key).clone(),
            title: (*title).clone(),
        })
        .collect())
}

/// Records an approval of a plan (or, with `is_contract`, of one contract),
/// signed with `key` ([`approval::sign`]). The row is never updated
/// afterwards.
///
/// # Errors
/// Database errors.
pub async fn insert_approval(
    pool: &PgPool,
    repo: &str,
    sha: &str,
    is_contract: bool,
    by: &str,
    key: &approval::Key,
) -> Result<Approval> {
    use chrono::SubsecRound;
    // The ledger keeps microseconds: sign what it will give back.
    let now = Utc::now().trunc_subsecs(6);
    let (plan, contract) = if is_contract {
        (None, Some(sha))
    } else {
        (Some(sha), None)
    };
    let mut a = Approval {
        id: Uuid::new_v4(),
        plan_sha: plan.map(String::from),
        contract_sha: contract.map(String::from),
        created_at: now,
        expires_at: approval::expiry(now),
        used_by: None,
        repo: repo.to_string(),
        signature: None,
    };
    a.signature = Some(approval::sign(key, &a));
    sqlx::query("INSERT INTO approvals (id, plan_sha, contract_sha, repo, approved_by, created_at, expires_at, signature) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)")
        .bind(a.id)
        .bind(plan)
        .bind(contract)
        .bind(repo)
        .bind(by)
        .bind(a.created_at)
        .bind(a.expires_at)
        .bind(&a.signature)
        .execute(pool)
        .await?;
    Ok(a)
}

/// Approvals of `sha` (plan or contract) for `repo`, newest first.
///
/// # Errors
/// Database errors.
pub async fn approvals_of(pool: &PgPool, repo: &str, sha: &str) -> Result<Vec<Approval>> {
    let q = format!(
        "{APPROVAL_COLUMNS} WHERE a.repo = $1 AND (a.plan_sha = $2 OR a.contract_sha = $2) ORDER BY a.created_at DESC"
    );
    sqlx::query_as::<_, Approval>(sqlx::AssertSqlSafe(q))
        .bind(repo)
        .bind(sha)
        .fetch_all(pool)
        .await
}

/// Unused, unexpired plan approvals of `repo` with a valid signature
/// ([`approval::check_signed`]), newest first.
///
/// # Errors
/// Database errors.
pub async fn usable_plan_approvals(
    pool: &PgPool,
    repo: &str,
    now: DateTime<Utc>,
) -> Result<Vec<Approval>> {
    let q = format!(
        "{APPROVAL_COLUMNS} WHERE a.repo = $1 AND a.plan_sha IS NOT NULL AND u.run_id IS NULL AND a.expires_at > $2 ORDER BY a.created_at DESC"
    );
    let all = sqlx::query_as::<_, Approval>(sqlx::AssertSqlSafe(q))
        .bind(repo)
        .bind(now)
        .fetch_all(pool)
        .await?;
    Ok(all
        .into_iter()
        .filter(|a| approval::check_signed(a).is_ok())
        .collect())
}

/// One approval by id.
///
/// # Errors
/// Database errors.
pub async fn approval_by_id(pool: &PgPool, id: Uuid) -> Result<Option<Approval>> {
    let q = format!("{APPROVAL_COLUMNS} WHERE a.id = $1");
    sqlx::query_as::<_, Approval>(sqlx::AssertSqlSafe(q))
        .bind(id)
        .fetch_optional(pool)
        .await
}

/// What a new run row needs.
#[derive(Debug, Clone)]
pub struct NewRun<'a> {
    /// Repository identity (its remote URL, see `cli::repo_id`).
    pub repo: &'a str,
    /// `drain` or `run`.
    pub kind: RunKind,
    /// The snapshot's plan SHA.
    pub plan_sha: &'a str,
    /// The approval it runs under.
    pub approval_id: Uuid,
    /// Consume the approval (a new run) or not (a resumed crashed run,
    /// whose approval its first run consumed).
    pub consume: bool,
    /// The crashed run this one resumes.
    pub resumes: Option<Uuid>,
    /// The deadline (UTC).
    pub deadline: DateTime<Utc>,
    /// The zone name the deadline was resolved in.
    pub timezone: &'a str,
    /// Its agents run as root without `agent_user` (config
    /// `agents_as_root`); the report says what they could read.
    pub agents_as_root: bool,
}

/// Creates the run row and, for a new run, consumes the approval in the same
/// transaction. Returns `Ok(None)` when the approval was consumed by another
/// run first (single use enforced by the `approval_uses` primary key).
///
/// # Errors
/// Database errors.
pub async fn create_run(pool: &PgPool, r: &NewRun<'_>) -> Result<Option<Uuid>> {
    let id = Uuid::new_v4();
    let mut tx = pool.begin().await?;
    let host = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default();
    sqlx::query(
        "INSERT INTO runs (id, repo, kind, plan_sha, approval_id, status, started_at, deadline, timezone, host, pid, heartbeat_at, resumes, agents_as_root) \
         VALUES ($1, $2, $3, $4, $5, $11, now(), $6, $7, $8, $9, now(), $10, $12)",
    )
    .bind(id)
    .bind(r.repo)
    .bind(r.kind)
    .bind(r.plan_sha)
    .bind(r.approval_id)
    .bind(r.deadline)
    .bind(r.timezone)
    .bind(host)
    .bind(std::process::id() as i32)
    .bind(r.resumes)
    .bind(RunStatus::Running)
    .bind(r.agents_as_root)
    .execute(&mut *tx)
    .await?;
    if r.consume {
        let done = sqlx::query("INSERT INTO approval_uses (approval_id, run_id, used_at) VALUES ($1, $2, now()) ON CONFLICT DO NOTHING")
            .bind(r.approval_id)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        if done.rows_affected() == 0 {
            return Ok(None);
        }
    }
    tx.commit().await?;
    Ok(Some(id))
}

/// A run row as `report` and resume read it.
#[derive(Debug, Clone, FromRow)]
pub struct RunRow {
    /// Run id.
    pub id: Uuid,
    /// `drain` or `run`.
    pub kind: RunKind,
    /// Plan SHA of its snapshot.
    pub plan_sha: String,
    /// Approval it ran under.
    pub approval_id: Option<Uuid>,
    /// How it ended, or that it is running.
    pub status: RunStatus,
    /// Start (UTC).
    pub started_at: DateTime<Utc>,
    /// End (UTC).
    pub ended_at: Option<DateTime<Utc>>,
    /// Deadline (UTC).
    pub deadline: Option<DateTime<Utc>>,
    /// Zone name.
    pub timezone: Option<String>,
    /// Host that ran it.
    pub host: Option<String>,
    /// Its pid.
    pub pid: Option<i32>,
    /// Current phase (while running).
    pub phase: Option<Phase>,
    /// Current item key.
    pub current_item_key: Option<String>,
    /// Current round.
    pub current_round: Option<i32>,
    /// Sleeping until (UTC).
    pub sleeping_until: Option<DateTime<Utc>>,
    /// Agent whose limit it sleeps on.
    pub sleeping_agent: Option<String>,
    /// Exit code it ended with.
    pub exit_code: Option<i32>,
    /// Its agents ran as root without `agent_user` (docs/security.md).
    pub agents_as_root: bool,
}

impl RunRow {
    /// The zone the run recorded; UTC when it recorded none or an unknown one.
    pub fn zone(&self) -> chrono_tz::Tz {
        self.timezone
            .as_deref()
            .and_then(|z| z.parse().ok())
            .unwrap_or(chrono_tz::UTC)
    }
}

const RUN_COLUMNS: &str = "SELECT id, kind, plan_sha, approval_id, status, started_at, ended_at, deadline, timezone, host, pid, phase, current_item_key, current_round, sleeping_until, sleeping_agent, exit_code, agents_as_root FROM runs";

/// The newest run of `repo`, or the run `id`.
///
/// # Errors
/// Database errors.
pub async fn run_row(pool: &PgPool, repo: &str, id: Option<Uuid>) -> Result<Option<RunRow>> {
    match id {
        Some(id) => {
            sqlx::query_as::<_, RunRow>(sqlx::AssertSqlSafe(format!("{RUN_COLUMNS} WHERE id = $1")))
                .bind(id)
                .fetch_optional(pool)
                .await
        }
        None => {
            sqlx::query_as::<_, RunRow>(sqlx::AssertSqlSafe(format!(
                "{RUN_COLUMNS} WHERE repo = $1 ORDER BY started_at DESC LIMIT 1"
            )))
            .bind(repo)
            .fetch_optional(pool)
            .await
        }
    }
}

/// The newest `limit` runs of `repo`: (id, start in UTC, status).
///
/// # Errors
/// Database errors.
pub async fn recent_runs(
    pool: &PgPool,
    repo: &str,
    limit: i64,
) -> Result<Vec<(Uuid, DateTime<Utc>, RunStatus)>> {
    sqlx::query_as(
        "SELECT id, started_at, status FROM runs WHERE repo = $1 ORDER BY started_at DESC LIMIT $2",
    )
    .bind(repo)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// Ids of `repo`'s runs that start with `prefix` (lowercase hex).
///
/// # Errors
/// Database errors.
pub async fn runs_with_prefix(pool: &PgPool, repo: &str, prefix: &str) -> Result<Vec<Uuid>> {
    sqlx::query_scalar("SELECT id FROM runs WHERE repo = $1 AND id::text LIKE $2 || '%'")
        .bind(repo)
        .bind(prefix)
        .fetch_all(pool)
        .await
}

/// Runs of `repo` still marked `running`. Called while holding the repo
/// lock, so every one of them is dead: they are marked `crashed` and
/// returned (newest first).
///
/// # Errors
/// Database errors.
pub async fn mark_dead_runs_crashed(pool: &PgPool, repo: &str) -> Result<Vec<RunRow>> {
    let rows = sqlx::query_as::<_, RunRow>(sqlx::AssertSqlSafe(format!(
        "{RUN_COLUMNS} WHERE repo = $1 AND status = $2 ORDER BY started_at DESC"
    )))
    .bind(repo)
    .bind(RunStatus::Running)
    .fetch_all(pool)
    .await?;
    for r in &rows {
        sqlx::query("UPDATE runs SET status = $2, ended_at = coalesce(ended_at, heartbeat_at), phase = NULL, sleeping_until = NULL WHERE id = $1").bind(r.id).bind(RunStatus::Crashed).execute(pool).await?;
        sqlx::query("UPDATE run_items SET outcome = $2, reason = 'the run crashed', ended_at = now() WHERE run_id = $1 AND outcome IS NULL").bind(r.id).bind(Outcome::Interrupted).execute(pool).await?;
        event(
            pool,
            Some(r.id),
            "run_crashed",
            json!({"pid": r.pid, "host": r.host}),
        )
        .await?;
    }
    Ok(rows)
}

/// The newest crashed or signal-stopped run of `repo` that has not been
/// resumed yet (either is resumed under its own approval; docs/ledger.md).
///
/// # Errors
/// Database errors.
pub async fn resumable_run(pool: &PgPool, repo: &str) -> Result<Option<RunRow>> {
    sqlx::query_as::<_, RunRow>(sqlx::AssertSqlSafe(format!(
        "{RUN_COLUMNS} r WHERE repo = $1 AND status IN ($2, $3) AND NOT EXISTS (SELECT 1 FROM runs n WHERE n.resumes = r.id) ORDER BY started_at DESC LIMIT 1"
    )))
    .bind(repo)
    .bind(RunStatus::Crashed)
    // A run a signal stopped is taken up like a crashed one (docs/ledger.md).
    .bind(RunStatus::StoppedSignal)
    .fetch_optional(pool)
    .await
}

/// Updates what `status` shows: phase, item, round; clears a sleep.
///
/// # Errors
/// Database errors.
pub async fn set_phase(
    db: impl PgExecutor<'_>,
    run: Uuid,
    phase: Phase,
    item_key: Option<&str>,
    round: Option<u32>,
) -> Result<()> {
    sqlx::query("UPDATE runs SET phase = $2, current_item_key = $3, current_round = $4, sleeping_until = NULL, sleeping_agent = NULL, heartbeat_at = now() WHERE id = $1")
        .bind(run)
        .bind(phase)
        .bind(item_key)
        .bind(round.map(|r| r as i32))
        .execute(db)
        .await?;
    Ok(())
}

/// Marks the run as sleeping until `until` on `agent`'s usage limit.
///
/// # Errors
/// Database errors.
pub async fn set_sleeping(
    db: impl PgExecutor<'_>,
    run: Uuid,
    until: DateTime<Utc>,
    agent: &str,
) -> Result<()> {
    sqlx::query("UPDATE runs SET phase = $4, sleeping_until = $2, sleeping_agent = $3, heartbeat_at = now() WHERE id = $1").bind(run).bind(until).bind(agent).bind(Phase::Sleeping).execute(db).await?;
    Ok(())
}

/// Ends a run with its final status and exit code.
///
/// # Errors
/// Database errors.
pub async fn finish_run(pool: &PgPool, run: Uuid, status: RunStatus, exit_code: i32) -> Result<()> {
    sqlx::query("UPDATE runs SET status = $2, exit_code = $3, ended_at = now(), phase = NULL, sleeping_until = NULL WHERE id = $1").bind(run).bind(status).bind(exit_code).execute(pool).await?;
    event(
        pool,
        Some(run),
        "run_finished",
        json!({"status": status, "exit_code": exit_code}),
    )
    .await
}

/// Appends to the event log (server-assigned sequence).
///
/// # Errors
/// Database errors.
pub async fn event(
    db: impl PgExecutor<'_>,
    run: Option<Uuid>,
    kind: &str,
    data: Value,
) -> Result<()> {
    sqlx::query("INSERT INTO events (run_id, kind, data) VALUES ($1, $2, $3)")
        .bind(run)
        .bind(kind)
        .bind(pgj(data))
        .execute(db)
        .await?;
    Ok(())
}

/// Creates the run item row of `entry` in `run`, or, when an attempt of it
/// already wrote one (a takeover by another worker, docs/workers.md), starts
/// it again: the end of the earlier attempt is cleared. `worker` is who runs
/// this attempt (`host:pid:n`), `None` for an item that is only recorded.
///
/// # Errors
/// Database errors.
pub async fn start_item(
    db: impl PgExecutor<'_>,
    run: Uuid,
    entry: &crate::contract::PlanEntry,
    worker: Option<&str>,
) -> Result<i64> {
    let row = ItemStart {
        key: &entry.item.key,
        contract_sha: &entry.contract_sha,
        index: entry.index,
        title: &entry.item.title,
    };
    start_row(db, run, &row, worker).await
}

/// What an item row starts with: key, the contract (or card) SHA it runs
/// under, its plan index (0 for a tended PR's card) and title.
pub struct ItemStart<'a> {
    pub key: &'a str,
    pub contract_sha: &'a str,
    pub index: usize,
    pub title: &'a str,
}

/// [`start_item`] for any row: an item's or a tended PR's card.
///
/// # Errors
/// Database errors.
pub async fn start_row(
    db: impl PgExecutor<'_>,
    run: Uuid,
    row: &ItemStart<'_>,
    worker: Option<&str>,
) -> Result<i64> {
    sqlx::query_scalar(
        "INSERT INTO run_items (run_id, item_key, contract_sha, item_index, title, started_at, worker) VALUES ($1, $2, $3, $4, $5, now(), $6) \
         ON CONFLICT (run_id, item_key) DO UPDATE SET started_at = now(), worker = $6, outcome = NULL, ended_at = NULL RETURNING id",
    )
    .bind(run)
    .bind(row.key)
    .bind(row.contract_sha)
    .bind(row.index as i32)
    .bind(pg(row.title))
    .bind(worker)
    .fetch_one(db)
    .await
}

/// The final facts of one item in one run.
#[derive(Debug, Clone)]
pub struct ItemEnd {
    /// How the item ended.
    pub outcome: Outcome,
    /// Why, in a sentence.
    pub reason: Option<String>,
    /// A question for a person (blocked items).
    pub question: Option<String>,
    /// Branch pushed or planned.
    pub branch: Option<String>,
    /// PR number.
    pub pr_number: Option<u64>,
    /// PR URL.
    pub pr_url: Option<String>,
    /// Rounds used.
    pub rounds: u32,
    /// Tokens used.
    pub tokens: u64,
    /// Cost in USD, where reported.
    pub cost_usd: Option<f64>,
    /// The PR body (opened, or would have been opened without a token).
    pub pr_body: Option<String>,
}

impl ItemEnd {
    /// An end with `outcome` and nothing else known yet (no reason, no
    /// rounds, tokens or cost).
    pub fn of(outcome: Outcome) -> ItemEnd {
        ItemEnd {
            outcome,
            reason: None,
            question: None,
            branch: None,
            pr_number: None,
            pr_url: None,
            rounds: 0,
            tokens: 0,
            cost_usd: None,
            pr_body: None,
        }
    }
}

/// Records an item's end.
///
/// # Errors
/// Database errors.
pub async fn finish_item(db: impl PgExecutor<'_>, item_id: i64, e: &ItemEnd) -> Result<()> {
    sqlx::query(
        "UPDATE run_items SET outcome = $2, reason = $3, question = $4, branch = $5, pr_number = $6, pr_url = $7, rounds = $8, tokens = $9, cost_usd = $10, pr_body = $11, ended_at = now() WHERE id = $1",
    )
    .bind(item_id)
    .bind(e.outcome)
    .bind(pgo(&e.reason))
    .bind(pgo(&e.question))
    .bind(&e.branch)
    .bind(e.pr_number.map(|n| n as i64))
    .bind(&e.pr_url)
    .bind(e.rounds as i32)
    .bind(i64::try_from(e.tokens).unwrap_or(i64::MAX))
    .bind(e.cost_usd)
    .bind(pgo(&e.pr_body))
    .execute(db)
    .await?;
    Ok(())
}

/// Starts round `n` (from 1) of attempt `attempt` (from 1; a takeover by
/// another worker is the next attempt, docs/workers.md); returns its id.
///
/// # Errors
/// Database errors.
pub async fn start_round(
    db: impl PgExecutor<'_>,
    item_id: i64,
    attempt: u32,
    n: u32,
) -> Result<i64> {
    sqlx::query_scalar(
        "INSERT INTO rounds (run_item_id, attempt, n, started_at) VALUES ($1, $2, $3, now()) RETURNING id",
    )
    .bind(item_id)
    .bind(attempt.max(1) as i32)
    .bind(n as i32)
    .fetch_one(db)
    .await
}

/// Ends a round with its result, diff hash, failure signature and the
/// feedback it produced.
///
/// # Errors
/// Database errors.
pub async fn finish_round(
    db: impl PgExecutor<'_>,
    round_id: i64,
    result: RoundResult,
    diff_hash: Option<&str>,
    failure_sig: Option<&str>,
    feedback: Option<&str>,
) -> Result<()> {
    sqlx::query("UPDATE rounds SET ended_at = now(), result = $2, diff_hash = $3, failure_sig = $4, feedback = $5 WHERE id = $1")
        .bind(round_id)
        .bind(result.as_str())
        .bind(diff_hash)
        .bind(failure_sig)
        .bind(feedback.map(pg))
        .execute(db)
        .await?;
    Ok(())
}

/// Ends the rounds of an item still open when the item ended (cut short
/// by a timeout, a budget, a signal or the deadline) with its outcome.
///
/// # Errors
/// Database errors.
pub async fn close_open_rounds(
    db: impl PgExecutor<'_>,
    item_id: i64,
    outcome: Outcome,
) -> Result<()> {
    sqlx::query("UPDATE rounds SET ended_at = now(), result = $2 WHERE run_item_id = $1 AND ended_at IS NULL").bind(item_id).bind(outcome).execute(db).await?;
    Ok(())
}

/// The run that consumed an approval, if one did.
///
/// # Errors
/// Database errors.
pub async fn approval_used_by(pool: &PgPool, approval: Uuid) -> Result<Option<Uuid>> {
    sqlx::query_scalar("SELECT run_id FROM approval_uses WHERE approval_id = $1")
        .bind(approval)
        .fetch_optional(pool)
        .await
}

/// Records one agent call.
///
/// # Errors
/// Database errors.
pub async fn record_agent_call(
    db: impl PgExecutor<'_>,
    item_id: i64,
    round_id: Option<i64>,
    role: &str,
    kind: &str,
    r: &crate::agent::Report,
) -> Result<()> {
    let o = &r.outcome;
    let meta = json!({
        "failure": r.failure,
        "tools": r.tools,
        "mcp_servers": r.mcp_servers,
        "claimed_files": r.claimed_files,
        "notes": r.notes,
        "limit": r.limit.as_ref().map(|l| json!({"resets_at": l.resets_at, "source": l.source})),
        "stdout_path": o.stdout_path,
        "stderr_path": o.stderr_path,
        "stdout_bytes": o.stdout_bytes,
        "stderr_bytes": o.stderr_bytes,
        "signal": o.signal,
    });
    sqlx::query(
        "INSERT INTO agent_calls (run_item_id, round_id, role, kind, argv, started_at, duration_ms, exit_code, timed_out, tokens_in, tokens_out, cost_usd, limit_kind, stdout_tail, stderr_tail, meta) \
         VALUES ($1, $2, $3, $4, $5, now() - ($6 * interval '1 millisecond'), $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
    )
    .bind(item_id)
    .bind(round_id)
    .bind(role)
    .bind(kind)
    .bind(pgj(json!(r.argv)))
    .bind(o.duration.as_millis() as i64)
    .bind(o.exit_code)
    .bind(o.timed_out)
    .bind(r.usage.tokens_in.map(|t| i64::try_from(t).unwrap_or(i64::MAX)))
    .bind(r.usage.tokens_out.map(|t| i64::try_from(t).unwrap_or(i64::MAX)))
    .bind(r.usage.cost_usd)
    .bind(r.limit.as_ref().map(|l| l.kind.as_str()))
    .bind(pg(&crate::gate::tail_of(&r.text, 8192)))
    .bind(pg(&o.stderr_tail))
    .bind(pgj(meta))
    .execute(db)
    .await?;
    Ok(())
}

/// Records one gate command's run.
///
/// # Errors
/// Database errors.
pub async fn record_gate_run(
    db: impl PgExecutor<'_>,
    round_id: i64,
    g: &crate::gate::GateRun,
) -> Result<()> {
    sqlx::query("INSERT INTO gate_runs (round_id, command, exit_code, timed_out, duration_ms, output_tail) VALUES ($1, $2, $3, $4, $5, $6)")
        .bind(round_id)
        .bind(pg(&g.command))
        .bind(g.exit_code)
        .bind(g.timed_out)
        .bind(g.duration_ms as i64)
        .bind(pg(&g.output_tail))
        .execute(db)
        .await?;
    Ok(())
}

/// Records a review (verdict, findings, or why it was void).
///
/// # Errors
/// Database errors.
pub async fn record_review(
    db: impl PgExecutor<'_>,
    round_id: i64,
    verdict: &str,
    findings: &[String],
    void_reason: Option<&str>,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO reviews (round_id, verdict, findings, void_reason) VALUES ($1, $2, $3, $4)",
    )
    .bind(round_id)
    .bind(verdict)
    .bind(pgj(json!(findings)))
    .bind(void_reason.map(pg))
    .execute(db)
    .await?;
    Ok(())
}

/// Records a proof of work.
///
/// # Errors
/// Database errors.
pub async fn record_proof(
    db: impl PgExecutor<'_>,
    round_id: i64,
    p: &crate::proof::Proof,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO proofs (round_id, base, head_before, head_after, changed, claimed_not_in_git, out_of_scope, head_moved, branch_switched, diff_hash) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
    )
    .bind(round_id)
    .bind(&p.base)
    .bind(&p.head_before)
    .bind(&p.head_after)
    // Paths are the writer's to name: a file may be named after a secret.
    .bind(pgj(serde_json::to_value(&p.changed).unwrap_or(Value::Null)))
    .bind(pgj(json!(p.claimed_not_in_git)))
    .bind(pgj(json!(p.out_of_scope)))
    .bind(p.head_moved)
    .bind(p.branch_switched)
    .bind(&p.diff_hash)
    .execute(db)
    .await?;
    Ok(())
}

/// One usage-limit sleep or throttling wait, as the `limit_sleeps` table
/// keeps it (docs/ledger.md#tables, docs/limits.md#sleep-policy).
#[derive(Debug, Clone)]
pub struct LimitSleep<'a> {
    /// The run that slept.
    pub run_id: Uuid,
    /// The item whose call hit the limit, if any.
    pub item_id: Option<i64>,
    /// The agent kind (`claude`, `codex`, `command`).
    pub agent: &'a str,
    /// A usage limit (slept until its reset) or throttling (a short wait).
    pub kind: crate::limit::LimitKind,
    /// The agent's own words, redacted.
    pub message: &'a str,
    /// When the sleep began (UTC).
    pub from: DateTime<Utc>,
    /// When it ends (UTC).
    pub until: DateTime<Utc>,
    /// When the agent said the limit resets (UTC), if it said.
    pub resets_at: Option<DateTime<Utc>>,
}

/// Records a usage-limit sleep.
///
/// # Errors
/// Database errors.
pub async fn record_limit_sleep(db: impl PgExecutor<'_>, s: &LimitSleep<'_>) -> Result<()> {
    sqlx::query("INSERT INTO limit_sleeps (run_id, run_item_id, agent, kind, message, slept_from, slept_until, resets_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)")
        .bind(s.run_id)
        .bind(s.item_id)
        .bind(s.agent)
        .bind(s.kind.as_str())
        .bind(pg(s.message))
        .bind(s.from)
        .bind(s.until)
        .bind(s.resets_at)
        .execute(db)
        .await?;
    Ok(())
}

/// A PR nightshift opened (or pushed a branch for).
#[derive(Debug, Clone, FromRow)]
pub struct PrRow {
    /// Item key.
    pub item_key: String,
    /// Branch.
    pub branch: String,
    /// PR number (None: pushed, PR not created yet).
    pub number: Option<i64>,
    /// PR URL.
    pub url: Option<String>,
    /// Where its PR stands.
    pub state: PrRecord,
    /// Contract it was made under.
    pub contract_sha: String,
}

/// The PR row of an item's branch, as [`upsert_pr`] writes it
/// (docs/ledger.md#tables, docs/github.md#pull-requests).
#[derive(Debug, Clone)]
pub struct PrUpsert<'a> {
    /// Repository identity.
    pub repo: &'a str,
    /// Item key.
    pub key: &'a str,
    /// The contract the branch was made under.
    pub contract_sha: &'a str,
    /// The run that writes the row.
    pub run: Uuid,
    /// The pushed branch.
    pub branch: &'a str,
    /// PR number, once GitHub made it (`None` keeps a known one).
    pub number: Option<u64>,
    /// PR URL, once GitHub made it (`None` keeps a known one).
    pub url: Option<&'a str>,
    /// Where its PR stands.
    pub state: PrRecord,
    /// The PR body (kept to open the PR later).
    pub body: &'a str,
}

/// Upserts the PR row of an item's branch.
///
/// # Errors
/// Database errors.
pub async fn upsert_pr(db: impl PgExecutor<'_>, p: &PrUpsert<'_>) -> Result<()> {
    sqlx::query(
        "INSERT INTO pull_requests (repo, item_key, contract_sha, run_id, branch, number, url, state, body, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, now(), now()) \
         ON CONFLICT (repo, item_key, branch) DO UPDATE SET number = coalesce(EXCLUDED.number, pull_requests.number), url = coalesce(EXCLUDED.url, pull_requests.url), state = EXCLUDED.state, body = EXCLUDED.body, contract_sha = EXCLUDED.contract_sha, run_id = EXCLUDED.run_id, updated_at = now()",
    )
    .bind(p.repo)
    .bind(p.key)
    .bind(p.contract_sha)
    .bind(p.run)
    .bind(p.branch)
    .bind(p.number.map(|n| n as i64))
    .bind(p.url)
    .bind(p.state)
    .bind(pg(p.body))
    .execute(db)
    .await?;
    Ok(())
}

/// The PR rows of an item key (newest first).
///
/// # Errors
/// Database errors.
pub async fn prs_of_item(pool: &PgPool, repo: &str, key: &str) -> Result<Vec<PrRow>> {
    sqlx::query_as::<_, PrRow>("SELECT item_key, branch, number, url, state, contract_sha FROM pull_requests WHERE repo = $1 AND item_key = $2 ORDER BY updated_at DESC")
        .bind(repo)
        .bind(key)
        .fetch_all(pool)
        .await
}

/// How many of `repo`'s item PRs the ledger holds open, or waiting to be
/// opened (a branch pushed without its PR: `planned`, `pr_failed`), not
/// counting `except_key`'s own: the review queue `max_open_prs` counts
/// when GitHub cannot be asked (docs/loop.md#before-the-checkout).
///
/// # Errors
/// Database errors.
pub async fn review_queue(pool: &PgPool, repo: &str, except_key: &str) -> Result<i64> {
    let states = [PrRecord::Open, PrRecord::Planned, PrRecord::PrFailed].map(PrRecord::as_str);
    sqlx::query_scalar(
        "SELECT count(*) FROM pull_requests WHERE repo = $1 AND item_key <> $2 AND state = ANY($3::text[])",
    )
    .bind(repo)
    .bind(except_key)
    .bind(&states[..])
    .fetch_one(pool)
    .await
}

/// The PR rows of several item keys at once (newest first), for `plan`,
/// which asks about every item of a backlog: one statement, not one per
/// item.
///
/// # Errors
/// Database errors.
pub async fn prs_of_items(pool: &PgPool, repo: &str, keys: &[&str]) -> Result<Vec<PrRow>> {
    sqlx::query_as::<_, PrRow>("SELECT item_key, branch, number, url, state, contract_sha FROM pull_requests WHERE repo = $1 AND item_key = ANY($2::text[]) ORDER BY updated_at DESC")
        .bind(repo)
        .bind(keys)
        .fetch_all(pool)
        .await
}

/// The stored body of an item's PR on `branch` (to open a `pr_failed` PR).
///
/// # Errors
/// Database errors (also when there is no such row).
pub async fn pr_body(pool: &PgPool, repo: &str, key: &str, branch: &str) -> Result<String> {
    sqlx::query_scalar(
        "SELECT body FROM pull_requests WHERE repo = $1 AND item_key = $2 AND branch = $3",
    )
    .bind(repo)
    .bind(key)
    .bind(branch)
    .fetch_one(pool)
    .await
}

/// PRs nightshift opened that are open or merged, oldest first (`sync`).
///
/// # Errors
/// Database errors.
pub async fn opened_prs(pool: &PgPool, repo: &str) -> Result<Vec<PrRow>> {
    sqlx::query_as("SELECT item_key, branch, number, url, state, contract_sha FROM pull_requests WHERE repo = $1 AND number IS NOT NULL AND state = ANY($2) ORDER BY updated_at")
        .bind(repo)
        .bind([PrRecord::Open.as_str(), PrRecord::Merged.as_str()])
        .fetch_all(pool)
        .await
}

/// Records one writer finding and the issue it was filed as, if any.
///
/// # Errors
/// Database errors.
pub async fn record_finding(
    db: impl PgExecutor<'_>,
    item_id: i64,
    title: &str,
    issue_number: Option<i64>,
    url: Option<&str>,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO findings (run_item_id, title, issue_number, url) VALUES ($1, $2, $3, $4)",
    )
    .bind(item_id)
    .bind(pg(title))
    .bind(issue_number)
    .bind(url)
    .execute(db)
    .await?;
    Ok(())
}

/// Updates the state of a known PR (e.g. `merged`, seen on GitHub).
///
/// # Errors
/// Database errors.
pub async fn set_pr_state(
    db: impl PgExecutor<'_>,
    repo: &str,
    key: &str,
    branch: &str,
    state: PrRecord,
) -> Result<()> {
    sqlx::query("UPDATE pull_requests SET state = $4, updated_at = now() WHERE repo = $1 AND item_key = $2 AND branch = $3").bind(repo).bind(key).bind(branch).bind(state).execute(db).await?;
    Ok(())
}

/// Number of distinct runs in which the item ended in a failure outcome
/// (for `max_attempts`).
///
/// # Errors
/// Database errors.
pub async fn failed_attempts(
    pool: &PgPool,
    repo: &str,
    key: &str,
    contract_sha: &str,
) -> Result<i64> {
    // Counted per contract: editing the item (or the policy) seals a new
    // contract, which is a person's answer to the failures, so it starts over.
    // A remote that could not be fetched or pushed is not the item's fault.
    sqlx::query_scalar(
        "SELECT count(DISTINCT i.run_id) FROM run_items i JOIN runs r ON r.id = i.run_id WHERE r.repo = $1 AND i.item_key = $2 AND i.contract_sha = $4 \
         AND i.outcome = ANY($5) \
         AND NOT starts_with(coalesce(i.reason, ''), $3) AND NOT starts_with(coalesce(i.reason, ''), 'checkout failed:')",
    )
    .bind(repo)
    .bind(key)
    .bind(CARRIED_REASON)
    .bind(contract_sha)
    .bind(
        Outcome::ALL
            .iter()
            .filter(|o| o.counts_as_attempt())
            .map(|o| o.as_str())
            .collect::<Vec<_>>(),
    )
    .fetch_one(pool)
    .await
}

/// The question a writer asked about this very contract in an earlier run
/// (outcome `blocked` after at least one round), with that run's id and
/// when it ended, newest first; `None` if it asked none. The item waits for
/// a person's answer: editing the item seals a new contract (docs/loop.md#findings-and-questions).
///
/// # Errors
/// Database errors.
pub async fn open_question(
    pool: &PgPool,
    repo: &str,
    key: &str,
    contract_sha: &str,
) -> Result<Option<(String, Uuid, Option<DateTime<Utc>>)>> {
    sqlx::query_as(
        "SELECT i.question, i.run_id, i.ended_at FROM run_items i JOIN runs r ON r.id = i.run_id \
         WHERE r.repo = $1 AND i.item_key = $2 AND i.contract_sha = $3 AND i.outcome = $4 AND i.rounds > 0 AND i.question IS NOT NULL \
         ORDER BY i.started_at DESC LIMIT 1",
    )
    .bind(repo)
    .bind(key)
    .bind(contract_sha)
    .bind(Outcome::Blocked)
    .fetch_optional(pool)
    .await
}

/// [`open_question`] for several `(item key, contract SHA)` pairs at once
/// (`plan` asks about every item): the newest question of each pair that
/// has one, as `(key, contract SHA, question)`, in one statement.
///
/// # Errors
/// Database errors.
pub async fn open_questions(
    pool: &PgPool,
    repo: &str,
    pairs: &[(&str, &str)],
) -> Result<Vec<(String, String, String)>> {
    let (keys, shas): (Vec<&str>, Vec<&str>) = pairs.iter().copied().unzip();
    sqlx::query_as(
        "SELECT DISTINCT ON (i.item_key, i.contract_sha) i.item_key, i.contract_sha, i.question FROM run_items i JOIN runs r ON r.id = i.run_id \
         JOIN UNNEST($2::text[], $3::text[]) AS w(k, c) ON w.k = i.item_key AND w.c = i.contract_sha \
         WHERE r.repo = $1 AND i.outcome = 'blocked' AND i.rounds > 0 AND i.question IS NOT NULL \
         ORDER BY i.item_key, i.contract_sha, i.started_at DESC",
    )
    .bind(repo)
    .bind(&keys)
    .bind(&shas)
    .fetch_all(pool)
    .await
}

/// A run item as `report` shows it.
#[derive(Debug, Clone, FromRow)]
pub struct ItemRow {
    /// Index in the plan.
    pub item_index: i32,
    /// Key.
    pub item_key: String,
    /// Title.
    pub title: String,
    /// Contract SHA.
    pub contract_sha: String,
    /// Outcome (None while running).
    pub outcome: Option<Outcome>,
    /// Reason.
    pub reason: Option<String>,
    /// Question (blocked).
    pub question: Option<String>,
    /// Branch.
    pub branch: Option<String>,
    /// PR number.
    pub pr_number: Option<i64>,
    /// PR URL.
    pub pr_url: Option<String>,
    /// Rounds used.
    pub rounds: i32,
    /// Tokens.
    pub tokens: i64,
    /// Cost.
    pub cost_usd: Option<f64>,
    /// Started (UTC).
    pub started_at: DateTime<Utc>,
    /// Ended (UTC).
    pub ended_at: Option<DateTime<Utc>>,
    /// PR body (opened or planned).
    pub pr_body: Option<String>,
    /// The worker that ran its last attempt (`host:pid:n`,
    /// docs/workers.md); `None` for an item only recorded.
    pub worker: Option<String>,
}

/// Items of a run, in plan order.
///
/// # Errors
/// Database errors.
pub async fn run_items(pool: &PgPool, run: Uuid) -> Result<Vec<ItemRow>> {
    sqlx::query_as::<_, ItemRow>(
        "SELECT item_index, item_key, title, contract_sha, outcome, reason, question, branch, pr_number, pr_url, rounds, tokens, cost_usd, started_at, ended_at, pr_body, worker FROM run_items WHERE run_id = $1 ORDER BY item_index, id",
    )
    .bind(run)
    .fetch_all(pool)
    .await
}

/// The items of plan `plan_sha` after index `after` (the plan's 1-based
/// `index`, docs/commands.md), in backlog order, as `(index, title, contract_sha)`:
/// what a run stopped at item `after` never started.
///
/// # Errors
/// Database errors.
pub async fn plan_items_after(
    pool: &PgPool,
    plan_sha: &str,
    after: i32,
) -> Result<Vec<(i32, String, String)>> {
    sqlx::query_as::<_, (i32, String, String)>(
        "SELECT pc.item_index, c.title, pc.contract_sha FROM plan_contracts pc JOIN contracts c ON c.sha = pc.contract_sha WHERE pc.plan_sha = $1 AND pc.kind = 'item' AND pc.item_index > $2 ORDER BY pc.item_index",
    )
    .bind(plan_sha)
    .bind(after)
    .fetch_all(pool)
    .await
}

/// Seconds slept at usage limits during a run.
///
/// # Errors
/// Database errors.
pub async fn slept_seconds(pool: &PgPool, run: Uuid) -> Result<i64> {
    let s: Option<f64> = sqlx::query_scalar("SELECT sum(extract(epoch FROM slept_until - slept_from))::float8 FROM limit_sleeps WHERE run_id = $1").bind(run).fetch_one(pool).await?;
    Ok(s.unwrap_or(0.0) as i64)
}

/// A PR nightshift opened that the ledger knows open, with the head it last
/// pushed (for tending, docs/github.md "The second night").
#[derive(Debug, Clone, FromRow)]
pub struct TendRow {
    /// Item key.
    pub item_key: String,
    /// Branch.
    pub branch: String,
    /// PR number.
    pub number: i64,
    /// Contract the PR was made under.
    pub contract_sha: String,
    /// The branch head nightshift last pushed (40 hex); `None` for a PR
    /// pushed before the ledger recorded heads.
    pub head_sha: Option<String>,
    /// When that push was recorded (UTC).
    pub head_pushed_at: Option<DateTime<Utc>>,
}

/// nightshift's PRs of `repo` that are open as far as the ledger knows, by
/// PR number.
///
/// # Errors
/// Database errors.
pub async fn open_prs(pool: &PgPool, repo: &str) -> Result<Vec<TendRow>> {
    sqlx::query_as("SELECT item_key, branch, number, contract_sha, head_sha, head_pushed_at FROM pull_requests WHERE repo = $1 AND number IS NOT NULL AND state = 'open' ORDER BY number")
        .bind(repo)
        .fetch_all(pool)
        .await
}

/// Records `sha` as the head nightshift pushed to an item's `branch`, now:
/// called right after each successful push (a first push or a tend), so the
/// next night can tell a person's push from its own.
///
/// # Errors
/// Database errors.
pub async fn set_pr_head(
    db: impl PgExecutor<'_>,
    repo: &str,
    key: &str,
    branch: &str,
    sha: &str,
) -> Result<()> {
    sqlx::query("UPDATE pull_requests SET head_sha = $4, head_pushed_at = now(), updated_at = now() WHERE repo = $1 AND item_key = $2 AND branch = $3")
        .bind(repo)
        .bind(key)
        .bind(branch)
        .bind(sha)
        .execute(db)
        .await?;
    Ok(())
}

/// Replaces the body the ledger keeps for an item's `branch` (a tended PR
/// whose evidence card was rewritten); its run, contract and state stay.
///
/// # Errors
/// Database errors.
pub async fn set_pr_body(
    db: impl PgExecutor<'_>,
    repo: &str,
    key: &str,
    branch: &str,
    body: &str,
) -> Result<()> {
    sqlx::query("UPDATE pull_requests SET body = $4, updated_at = now() WHERE repo = $1 AND item_key = $2 AND branch = $3")
        .bind(repo)
        .bind(key)
        .bind(branch)
        .bind(pg(body))
        .execute(db)
        .await?;
    Ok(())
}

/// Number of distinct runs in which tending PR `pr` from `head` (the head
/// nightshift last pushed) ended in a failure that counts against
/// `max_attempts` (docs/github.md "The second night"): a tend card names
/// its PR and head, so a successful push (a new head) starts over, and a
/// new comment (a new card on the same head) does not.
///
/// # Errors
/// Database errors.
pub async fn tend_attempts(
    pool: &PgPool,
    repo: &str,
    key: &str,
    pr: u64,
    head: &str,
) -> Result<i64> {
    sqlx::query_scalar(
        "SELECT count(DISTINCT i.run_id) FROM run_items i JOIN runs r ON r.id = i.run_id JOIN contracts c ON c.sha = i.contract_sha \
         WHERE r.repo = $1 AND i.item_key = $2 AND c.json ->> 'pr' = $3 AND c.json ->> 'head' = $4 \
         AND i.outcome = ANY($6) AND NOT starts_with(coalesce(i.reason, ''), $5) AND NOT starts_with(coalesce(i.reason, ''), 'checkout failed:')",
    )
    .bind(repo)
    .bind(key)
    .bind(pr.to_string())
    .bind(head)
    .bind(CARRIED_REASON)
    .bind(
        Outcome::ALL
            .iter()
            .filter(|o| o.counts_as_attempt())
            .map(|o| o.as_str())
            .collect::<Vec<_>>(),
    )
    .fetch_one(pool)
    .await
}

/// The stored canonical JSON of contract `sha`, if it was ever planned.
///
/// # Errors
/// Database errors.
pub async fn contract_json(pool: &PgPool, sha: &str) -> Result<Option<Value>> {
    sqlx::query_scalar("SELECT json FROM contracts WHERE sha = $1")
        .bind(sha)
        .fetch_optional(pool)
        .await
}

/// Stores a plan's tend cards that call for work — their contracts and
/// their places in `plan_contracts` (kind `tend`, after the plan's items'
/// positions) — so an approval of the plan covers exactly them
/// (idempotent).
///
/// # Errors
/// Database errors.
pub async fn save_tend_cards(
    pool: &PgPool,
    plan_sha: &str,
    items: usize,
    cards: &[crate::tend::TendCard],
) -> Result<()> {
    let mut tx = pool.begin().await?;
    let sealed = cards
        .iter()
        .filter_map(|c| c.sealed.as_ref().map(|s| (c, s)));
    for (pos, (card, sealed)) in sealed.enumerate() {
        let json: Value =
            serde_json::from_str(&sealed.canonical_json).expect("canonical JSON parses");
        sqlx::query("INSERT INTO contracts (sha, item_key, title, json, created_at) VALUES ($1, $2, $3, $4, now()) ON CONFLICT (sha) DO NOTHING")
            .bind(&sealed.sha)
            .bind(&card.item_key)
            .bind(pg(&format!("tend PR #{}: {}", card.number, card.title)))
            .bind(pgj(json))
            .execute(&mut *tx)
            .await?;
        sqlx::query("INSERT INTO plan_contracts (plan_sha, position, contract_sha, item_index, blocked, kind, pr_number) VALUES ($1, $2, $3, 0, NULL, 'tend', $4) ON CONFLICT DO NOTHING")
            .bind(plan_sha)
            .bind((items + pos) as i32)
            .bind(&sealed.sha)
            .bind(card.number as i64)
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await
}

/// The tended PRs of run `run` for the report's section: run items whose
/// outcome is `pr_updated` or `pr_left_alone`, or whose contract is a tend
/// card (a tend that failed), by PR number; with what the card asked and
/// the head nightshift pushed last.
///
/// # Errors
/// Database errors.
pub async fn tended_items(pool: &PgPool, run: Uuid) -> Result<Vec<crate::tend::Tended>> {
    /// pr_number, title, outcome, reason, contract JSON, pushed head.
    type Row = (
        Option<i64>,
        String,
        Option<Outcome>,
        Option<String>,
        Option<Value>,
        Option<String>,
    );
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT ri.pr_number, ri.title, ri.outcome, ri.reason, c.json, p.head_sha \
         FROM run_items ri JOIN runs r ON r.id = ri.run_id \
         LEFT JOIN contracts c ON c.sha = ri.contract_sha \
         LEFT JOIN pull_requests p ON p.repo = r.repo AND p.item_key = ri.item_key AND p.branch = ri.branch \
         WHERE ri.run_id = $1 AND (ri.outcome = ANY($2) OR (c.json::jsonb ? 'pr' AND c.json::jsonb ? 'action')) \
         ORDER BY ri.pr_number, ri.id",
    )
    .bind(run)
    .bind(vec![Outcome::PrUpdated.as_str(), Outcome::PrLeftAlone.as_str()])
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(pr, title, outcome, reason, card, head)| {
            let card = card.filter(|c| c.get("pr").is_some() && c.get("action").is_some());
            crate::tend::Tended {
                pr: pr.unwrap_or(0) as u64,
                title,
                outcome,
                reason,
                action: card
                    .as_ref()
                    .and_then(|c| c["action"].as_str().map(str::to_string)),
                asked: card
                    .as_ref()
                    .and_then(|c| serde_json::from_value(c["comments"].clone()).ok())
                    .unwrap_or_default(),
                old_head: card
                    .as_ref()
                    .and_then(|c| c["head"].as_str().map(str::to_string)),
                new_head: head,
            }
        })
        .collect())
}

/// How the reason of an item carried over from a crashed or stopped run
/// begins ("finished by the crashed run <id>: …", or "the stopped run");
/// such rows are not attempts of their own.
pub const CARRIED_REASON: &str = "finished by the ";

/// The reason of an item a resumed run finished (`from`, crashed unless
/// `stopped` by a signal), as the resuming run records it: `prev`, the
/// reason that run gave, after [`CARRIED_REASON`] and `from`. A reason that
/// was itself carried over keeps its text, so after several resumes it
/// still names the one run that finished the item, at one level.
pub fn carried_reason(prev: Option<&str>, from: Uuid, stopped: bool) -> String {
    if let Some(r) = prev.filter(|r| r.starts_with(CARRIED_REASON)) {
        return r.to_string();
    }
    let how = if stopped {
        "stopped"
    } else {
        RunStatus::Crashed.as_str()
    };
    format!(
        "{CARRIED_REASON}{how} run {from}{}",
        prev.map(|r| format!(": {r}")).unwrap_or_default()
    )
}

/// The rounds the run `run` began of the item `key` (whatever their end):
/// a resumed run that began one did the work of a PR found afterwards.
///
/// # Errors
/// Database errors.
pub async fn rounds_begun(pool: &PgPool, run: Uuid, key: &str) -> Result<i64> {
    sqlx::query_scalar(
        "SELECT count(*) FROM rounds r JOIN run_items i ON i.id = r.run_item_id WHERE i.run_id = $1 AND i.item_key = $2",
    )
    .bind(run)
    .bind(key)
    .fetch_one(pool)
    .await
}

/// What the agent calls of run `run` cost so far (USD, where reported),
/// except those of item row `except`.
///
/// # Errors
/// Database errors.
pub async fn run_spent(pool: &PgPool, run: Uuid, except: Option<i64>) -> Result<f64> {
    sqlx::query_scalar(
        "SELECT coalesce(sum(a.cost_usd), 0)::float8 FROM agent_calls a JOIN run_items i ON i.id = a.run_item_id \
         WHERE i.run_id = $1 AND ($2::bigint IS NULL OR i.id <> $2)",
    )
    .bind(run)
    .bind(except)
    .fetch_one(pool)
    .await
}

/// The base commit of run `run`: the recorded one, else `proposed` is
/// recorded (the first writer wins) and returned.
///
/// # Errors
/// Database errors.
pub async fn pin_base(db: impl PgExecutor<'_>, run: Uuid, proposed: &str) -> Result<String> {
    sqlx::query_scalar(
        "UPDATE runs SET base_commit = coalesce(base_commit, $2) WHERE id = $1 RETURNING base_commit",
    )
    .bind(run)
    .bind(proposed)
    .fetch_one(db)
    .await
}

/// The base commit run `run` pinned (40 hex), if an item pinned it yet.
///
/// # Errors
/// Database errors.
pub async fn pinned_base(pool: &PgPool, run: Uuid) -> Result<Option<String>> {
    sqlx::query_scalar("SELECT base_commit FROM runs WHERE id = $1")
        .bind(run)
        .fetch_optional(pool)
        .await
        .map(Option::flatten)
}

/// The branches run `run` pushed (its `pushed` events), oldest first, each
/// with its title, the files it changes and its PR number once opened.
///
/// # Errors
/// Database errors.
pub async fn pushed_in_run(
    pool: &PgPool,
    repo: &str,
    run: Uuid,
) -> Result<Vec<crate::report::Overlap>> {
    let rows: Vec<(Value, Option<i64>)> = sqlx::query_as(
        "SELECT e.data, p.number FROM events e LEFT JOIN pull_requests p \
           ON p.repo = $1 AND p.item_key = e.data->>'key' AND p.branch = e.data->>'branch' \
         WHERE e.run_id = $2 AND e.kind = $3 ORDER BY e.seq",
    )
    .bind(repo)
    .bind(run)
    .bind(crate::outcome::Event::Pushed.as_str())
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(d, number)| crate::report::Overlap {
            title: d["title"].as_str().unwrap_or_default().to_string(),
            branch: d["branch"].as_str().unwrap_or_default().to_string(),
            pr_number: number.map(|n| n as u64),
            files: (d["files"].as_array().into_iter().flatten())
                .filter_map(|f| f.as_str().map(str::to_string))
                .collect(),
        })
        .collect())
}

/// The status of run `run`, if it exists.
///
/// # Errors
/// Database errors.
pub async fn run_status(pool: &PgPool, run: Uuid) -> Result<Option<RunStatus>> {
    sqlx::query_scalar("SELECT status FROM runs WHERE id = $1")
        .bind(run)
        .fetch_optional(pool)
        .await
}

/// The contracts of plan `plan_sha` in plan order, each with its stored
/// JSON (`None` when the ledger lost it), for `nightshift worker`.
///
/// # Errors
/// Database errors.
pub async fn plan_stored(pool: &PgPool, plan_sha: &str) -> Result<Vec<(String, Option<Value>)>> {
    sqlx::query_as(
        "SELECT pc.contract_sha, c.json FROM plan_contracts pc LEFT JOIN contracts c ON c.sha = pc.contract_sha \
         WHERE pc.plan_sha = $1 ORDER BY pc.position",
    )
    .bind(plan_sha)
    .fetch_all(pool)
    .await
}

/// The newest `running` run of `repo`, if any (whether its drain lives is
/// the repository lock's to say).
///
/// # Errors
/// Database errors.
pub async fn running_run(pool: &PgPool, repo: &str) -> Result<Option<RunRow>> {
    let id: Option<Uuid> = sqlx::query_scalar(
        "SELECT id FROM runs WHERE repo = $1 AND status = $2 ORDER BY started_at DESC LIMIT 1",
    )
    .bind(repo)
    .bind(RunStatus::Running)
    .fetch_optional(pool)
    .await?;
    match id {
        Some(id) => run_row(pool, repo, Some(id)).await,
        None => Ok(None),
    }
}

/// How many items of run `run` ended under a worker whose name starts
/// with `prefix` (`host:pid:`, one process's workers).
///
/// # Errors
/// Database errors.
pub async fn items_by_worker(pool: &PgPool, run: Uuid, prefix: &str) -> Result<usize> {
    let n: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM run_items WHERE run_id = $1 AND ended_at IS NOT NULL AND starts_with(worker, $2)",
    )
    .bind(run)
    .bind(prefix)
    .fetch_one(pool)
    .await?;
    Ok(n as usize)
}
