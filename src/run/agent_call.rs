//! One agent call of a round (docs/loop.md#writer, docs/loop.md#review):
//! the call itself, its record in the ledger, the item's token and cost caps
//! (docs/loop.md#budgets), the sleep until a usage limit resets and short
//! waits out of throttling (docs/limits.md#sleep-policy). A call that was
//! cut short by a limit is made again and does not use up a round. It does
//! not read what the agent said (the round does) nor run the agent (that is
//! [`crate::agent`]).

use std::time::Instant;

use crate::agent::{self, CallEnd, Role};
use crate::config::{self, AgentConfig};
use crate::error::Error;
use crate::ledger::items::ItemEnd;
use crate::ledger::limits;
use crate::limit::{self, LimitKind, LimitReading};
use crate::outcome::Event;
use crate::{queue, schedule};

use super::decide::Fact;
use super::item::Round;
use super::record::AgentCall;
use super::{MAX_THROTTLE_RETRIES, Night, local, sleep_policy};

/// How an agent call ended for the round.
pub(super) enum Called {
    /// The agent answered; the round reads its report.
    Done(Box<agent::Report>),
    /// The item ends here (timeout, budget, signal, deadline, an agent that
    /// cannot start).
    Stop(ItemEnd),
}

/// The config of the agent that plays `role` in the round: the configured
/// one or its fallback (docs/limits.md#fallback, [`super::fallback`]).
fn agent_config(r: &Round<'_>, role: Role) -> AgentConfig {
    r.st.cast.agent(r.item.night, role).clone()
}

/// Calls the agent of `role` in round `r`, sleeping at usage limits and
/// waiting out throttling (at most [`MAX_THROTTLE_RETRIES`] times) in
/// between; the interrupted call does not use up a round
/// (docs/limits.md#sleep-policy).
///
/// # Errors
/// The ledger stays away (see [`Night::db`]).
pub(super) async fn call_agent(r: &mut Round<'_>, role: Role) -> Result<Called, Error> {
    let night = r.item.night;
    let mut attempt = 0u32;
    let mut throttles = 0u32;
    loop {
        attempt += 1;
        let left = r.st.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            let why = format!("the item timeout was reached during round {}", r.n);
            return Ok(Called::Stop(r.end(Fact::TimedOut(why))));
        }
        super::fallback::cast(night, &mut r.st.cast, role, r.n).await?;
        if role == Role::Writer
            && attempt == 1
            && let Some(end) = round_start(r).await?
        {
            return Ok(Called::Stop(end));
        }
        if let Some(end) = account_pause(r, role).await? {
            return Ok(Called::Stop(end));
        }
        let call = agent_call(r, role, attempt, left);
        let report = match agent::call(&agent_config(r, role), &call, r.item.cancel).await {
            Ok(report) => report,
            // The same executable would fail every item: stop, resume once fixed.
            Err(e) => {
                // A full disk is not the agent's fault (docs/loop.md).
                let why = night.redact(
                    &crate::file::disk_full(&e.to_string(), &night.data_dir).unwrap_or_else(|| {
                        format!(
                            "{e}; fix [{}] command in the config or the agent's installation",
                            role.as_str()
                        )
                    }),
                );
                night.stop_systemic(&why);
                return Ok(Called::Stop(r.end(Fact::AgentUnusable(why))));
            }
        };
        (r.item.record)
            .sandbox_refused(r.item.item_id, role.as_str(), &report.outcome.refused)
            .await?;
        if let Some(end) = count(r, role, &report).await? {
            return Ok(Called::Stop(end));
        }
        match report.end() {
            CallEnd::NoCredit(reading) => match no_credit(r, role, &reading).await? {
                Some(end) => return Ok(Called::Stop(end)),
                None => continue,
            },
            CallEnd::UsageLimit(reading) => match at_usage_limit(r, role, &reading).await? {
                Some(end) => return Ok(Called::Stop(end)),
                None => continue,
            },
            CallEnd::Transient(reading) if throttles < MAX_THROTTLE_RETRIES => {
                throttles += 1;
                match throttled(r, role, &reading).await? {
                    Some(end) => return Ok(Called::Stop(end)),
                    None => continue,
                }
            }
            CallEnd::TimedOut => {
                let why = format!(
                    "the {} call of round {} was killed after {}",
                    role.as_str(),
                    r.n,
                    config::format_duration(call.timeout)
                );
                return Ok(Called::Stop(r.end(Fact::TimedOut(why))));
            }
            // The round reads a failure from the report (and retries it).
            CallEnd::Succeeded | CallEnd::Failed(_) | CallEnd::Transient(_) => {}
        }
        return Ok(Called::Done(Box::new(report)));
    }
}

/// The call of attempt `attempt`, given `left` of the item's time.
fn agent_call(r: &Round<'_>, role: Role, attempt: u32, left: std::time::Duration) -> agent::Call {
    let (item, night) = (r.item, r.item.night);
    let c = &item.entry.contract;
    // The reviewer sees the contract (and a fix round's failure) only; the
    // writer also what went wrong.
    let feedback = match role {
        Role::Writer => r.st.feedback.clone(),
        Role::Reviewer => r.st.review_context.clone(),
    };
    let mut env = crate::build_output::for_slot(&night.agent_env, &item.slot.path);
    let log_dir = agent::call_dir(item.dir, r.n, role, attempt);
    let sandbox = super::sandbox::for_agent(
        night,
        c,
        (role, &agent_config(r, role)),
        (&item.slot.path, &log_dir),
        &mut env,
    );
    agent::Call {
        role,
        round: r.n,
        prompt: agent::compose_prompt(role, c, &feedback, &item.slot.base_commit),
        contract_json: item.contract_json.clone(),
        feedback,
        cwd: item.slot.path.clone(),
        // The caps sealed in the approved contract, not the config of the moment.
        timeout: c.limits.agent_timeout().min(left),
        env,
        tz: night.tz,
        log_dir,
        secrets: night.secrets.clone(),
        run_as: night.run_as.clone(),
        max_output: night.config.max_agent_output,
        sandbox,
    }
}

/// Records the call and counts its tokens and cost; the item's end when a
/// signal came during it or it went over the contract's caps
/// (docs/loop.md#budgets).
async fn count(
    r: &mut Round<'_>,
    role: Role,
    report: &agent::Report,
) -> Result<Option<ItemEnd>, Error> {
    let night = r.item.night;
    let cfg = agent_config(r, role);
    let (kind, account) = (cfg.kind.to_string(), cfg.account());
    let call = AgentCall {
        item_id: r.item.item_id,
        round_id: Some(r.id),
        role,
        kind: &kind,
        account: &account,
        round: Some(r.n),
        fallback: r.st.cast.fallback(role),
        report,
    };
    r.item.record.agent_call(&call).await?;
    let worker = r.item.record.worker_id();
    super::quota::after_call(night, &cfg, report, r.item.run_id, &worker).await?;
    let totals = &mut r.st.totals;
    totals.tokens = totals.tokens.saturating_add(report.usage.total_tokens());
    if let Some(cost) = report.usage.cost_usd {
        totals.cost += cost;
        totals.cost_known = true;
    }
    let caps = &r.item.entry.contract.limits;
    let totals = &r.st.totals;
    let why = if r.item.cancel.is_cancelled() {
        let why = format!(
            "stopped by a signal during the {} call of round {}",
            role.as_str(),
            r.n
        );
        return Ok(Some(r.end(Fact::Signal(why))));
    } else if totals.tokens > caps.max_tokens.value {
        format!(
            "{} tokens used, above the cap of {}",
            totals.tokens, caps.max_tokens.value
        )
    } else if totals.cost_known && totals.cost > caps.max_cost_usd.value {
        format!(
            "${:.2} spent, above the item cap of ${:.2}",
            totals.cost, caps.max_cost_usd.value
        )
    } else {
        return Ok(None);
    };
    Ok(Some(r.end(Fact::OverBudget(why))))
}

/// Sleeps until the agent's usage limit resets (docs/limits.md#sleep-policy);
/// the item's end when the reset comes after the deadline or a signal ends
/// the sleep. The sleep moves the item's timeout on: it is not work time.
async fn usage_limit(
    r: &mut Round<'_>,
    role: Role,
    reading: &LimitReading,
) -> Result<Option<ItemEnd>, Error> {
    let (night, run_id, item_id) = (r.item.night, r.item.run_id, r.item.item_id);
    let pool = &night.pool;
    let cfg = agent_config(r, role);
    let kind = cfg.kind.to_string();
    let now = night.clock.now();
    let message = night.redact(&reading.message);
    let until = limit_until(night, reading);
    if until >= night.deadline {
        // No sleep is taken (nor recorded): the run stops now.
        let reset = reading
            .resets_at
            .map(|t| local(t, night.tz))
            .unwrap_or_else(|| "an unknown time".into());
        let what = serde_json::json!({"agent": cfg.kind.to_string(), "resets_at": reading.resets_at, "message": night.redact(&reading.message)});
        r.item
            .record
            .event(Event::UsageLimitAfterDeadline, what)
            .await?;
        let why = format!(
            "the {} agent's usage limit resets at {reset}, after the deadline {}",
            role.as_str(),
            local(night.deadline, night.tz)
        );
        return Ok(Some(r.end(Fact::Deadline(why))));
    }
    let limit_sleep = limits::LimitSleep {
        run_id,
        item_id: Some(item_id),
        agent: &kind,
        kind: LimitKind::UsageLimit.as_str(),
        message: &message,
        from: now,
        until,
        resets_at: reading.resets_at,
    };
    // The account pauses for every worker using it, on every host
    // (docs/workers.md#usage-limits); this worker sleeps like the others.
    let (account, worker) = (cfg.account(), r.item.record.worker_id());
    night
        .db(|| queue::pause_account(pool, &account, until, Some(run_id), &worker, &message))
        .await?;
    tracing::info!(until = %until, agent = %cfg.kind, "usage limit: sleeping until reset");
    let why = "stopped by a signal while sleeping at a usage limit";
    sleep_at_limit(r, role, &limit_sleep, why).await
}

/// Until when a usage limit read as `reading` pauses its account: its
/// reset (plus the buffer) under the sleep policy, an hour when unknown.
fn limit_until(night: &Night, reading: &LimitReading) -> chrono::DateTime<chrono::Utc> {
    let now = night.clock.now();
    let sleep = limit::sleep_for(reading, now, &sleep_policy(&night.config.limits));
    now + chrono::Duration::from_std(sleep).unwrap_or(chrono::Duration::hours(1))
}

/// At a usage limit of the agent playing `role`: when another agent of
/// the role has room (docs/limits.md#fallback), the account's pause is
/// recorded for every worker as at any usage limit, the other agent is
/// cast, and the call is made again with it instead of sleeping.
async fn fall_back(r: &mut Round<'_>, role: Role, reading: &LimitReading) -> Result<bool, Error> {
    let night = r.item.night;
    let account = agent_config(r, role).account();
    if !super::fallback::take_over(night, &mut r.st.cast, (role, r.n), &account).await? {
        return Ok(false);
    }
    let (pool, run_id, worker) = (&night.pool, r.item.run_id, r.item.record.worker_id());
    let (until, message) = (limit_until(night, reading), night.redact(&reading.message));
    night
        .db(|| queue::pause_account(pool, &account, until, Some(run_id), &worker, &message))
        .await?;
    tracing::info!(account = %account, until = %until, role = role.as_str(), "usage limit: the fallback agent takes the call over");
    Ok(true)
}

/// Records the usage-limit sleep `s` (and that the run sleeps), sleeps
/// until its end, and records the call's phase again; the item's end
/// (`interrupted`, for `why_cancelled`) when a signal ends the sleep. The
/// sleep moves the item's timeout on: it is not work time
/// (docs/limits.md#sleep-policy).
async fn sleep_at_limit(
    r: &mut Round<'_>,
    role: Role,
    s: &limits::LimitSleep<'_>,
    why_cancelled: &str,
) -> Result<Option<ItemEnd>, Error> {
    let night = r.item.night;
    r.item.record.limit_sleep(s).await?;
    r.item.record.sleeping(s.until, s.agent, s.kind).await?;
    let slept_from = Instant::now();
    let slept = schedule::sleep_until(
        night.clock.as_ref(),
        s.until,
        r.item.cancel,
        schedule::DEFAULT_SLICE,
    )
    .await;
    r.st.deadline += slept_from.elapsed();
    if slept == schedule::SleepOutcome::Cancelled {
        return Ok(Some(r.end(Fact::Signal(why_cancelled.into()))));
    }
    let key = r.item.entry.item.key.as_str();
    r.item.record.phase(role.phase(), key, Some(r.n)).await?;
    Ok(None)
}

/// Waits out throttling for the time the reading asks (bounded by the sleep
/// policy); the item's end when a signal ends the wait.
async fn throttled(
    r: &mut Round<'_>,
    role: Role,
    reading: &LimitReading,
) -> Result<Option<ItemEnd>, Error> {
    let night = r.item.night;
    let kind = agent_config(r, role).kind.to_string();
    let now = night.clock.now();
    let message = night.redact(&reading.message);
    let wait = limit::sleep_for(reading, now, &sleep_policy(&night.config.limits));
    let until = now + chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::seconds(30));
    let limit_sleep = limits::LimitSleep {
        run_id: r.item.run_id,
        item_id: Some(r.item.item_id),
        agent: &kind,
        kind: LimitKind::Transient.as_str(),
        message: &message,
        from: now,
        until,
        resets_at: None,
    };
    r.item.record.limit_sleep(&limit_sleep).await?;
    let slept = schedule::sleep_until(
        night.clock.as_ref(),
        until,
        r.item.cancel,
        schedule::DEFAULT_SLICE,
    )
    .await;
    if slept == schedule::SleepOutcome::Cancelled {
        let why = "stopped by a signal while waiting out throttling".to_string();
        return Ok(Some(r.end(Fact::Signal(why))));
    }
    Ok(None)
}

/// The account cannot run at all (docs/limits.md#no-credit): it is stopped
/// for the rest of the night — a pause until the deadline, marked no-credit,
/// that every worker of the account on any host sees. No sleep helps; later
/// items of the account are not started ([`without_credit`]). Returns why
/// the item ends `no_credit` when no fallback takes the call over.
async fn stop_without_credit(
    r: &mut Round<'_>,
    role: Role,
    reading: &LimitReading,
) -> Result<String, Error> {
    let night = r.item.night;
    let cfg = agent_config(r, role);
    let (pool, run_id, until) = (&night.pool, r.item.run_id, night.deadline);
    let (account, worker) = (cfg.account(), r.item.record.worker_id());
    let message = night.redact(reading.message.trim());
    let message: String = message.chars().take(300).collect();
    night
        .db(|| {
            queue::stop_account_without_credit(
                pool,
                &account,
                until,
                Some(run_id),
                &worker,
                &message,
            )
        })
        .await?;
    tracing::warn!(agent = %cfg.kind, account = %account, "no credit: the account's work stops for the night");
    Ok(format!(
        "the {} agent's account {account:?} has no credit ({message}); its work stops for the night: add credit or fix its billing, and the next drain takes the item up",
        role.as_str()
    ))
}

/// The call of `role` met an account without credit: the account stops
/// for the night ([`stop_without_credit`]); a fallback of the role with
/// room takes the call over at once (docs/limits.md#fallback), as after a
/// usage limit (`None`: make the call again), else the item ends
/// `no_credit`.
async fn no_credit(
    r: &mut Round<'_>,
    role: Role,
    reading: &LimitReading,
) -> Result<Option<ItemEnd>, Error> {
    let why = stop_without_credit(r, role, reading).await?;
    let (night, account) = (r.item.night, agent_config(r, role).account());
    if super::fallback::take_over(night, &mut r.st.cast, (role, r.n), &account).await? {
        tracing::info!(account = %account, role = role.as_str(), "no credit: the fallback agent takes the call over");
        return Ok(None);
    }
    Ok(Some(r.end(Fact::NoCredit(why))))
}

/// At a usage limit of the agent playing `role`: its fallback takes the
/// call over ([`fall_back`]), else the account sleeps until the reset
/// ([`usage_limit`]). `None`: make the call again.
async fn at_usage_limit(
    r: &mut Round<'_>,
    role: Role,
    reading: &LimitReading,
) -> Result<Option<ItemEnd>, Error> {
    if fall_back(r, role, reading).await? {
        return Ok(None);
    }
    usage_limit(r, role, reading).await
}

/// Before a round's first call (docs/limits.md#reserve): no new round of
/// an account whose quota is kept for the day (a round that started
/// finishes; a window that resets before the deadline is waited for), and
/// an account drawing on paid overage pauses first.
async fn round_start(r: &mut Round<'_>) -> Result<Option<ItemEnd>, Error> {
    let (night, ids) = (r.item.night, (r.item.run_id, Some(r.item.item_id)));
    let from = Instant::now();
    let waited = super::quota::wait_reserve(night, &r.item.record, ids, r.item.cancel).await?;
    // A wait for the window's reset is not the item's work time.
    r.st.deadline += from.elapsed();
    match waited {
        super::quota::Reserve::Free if from.elapsed().as_secs() >= 1 => {
            r.phase(Role::Writer.phase()).await?;
        }
        super::quota::Reserve::Free => {}
        super::quota::Reserve::Reserved(why) => {
            let why = format!("stopped before round {}: {why}", r.n);
            return Ok(Some(r.end(Fact::QuotaReserved(why))));
        }
        super::quota::Reserve::Signal => {
            let why = "stopped by a signal while waiting for a quota window to reset";
            return Ok(Some(r.end(Fact::Signal(why.into()))));
        }
    }
    overage(r).await
}

/// With `[quota] overage = "never"`, before a round: an account of the
/// round (writer's or reviewer's) whose latest call read paid overage in
/// use pauses as at a usage limit (docs/limits.md#overage): the sleep until
/// its plan window resets, every worker of it pausing too; the item's end
/// when that is after the deadline or a signal ends the sleep.
async fn overage(r: &mut Round<'_>) -> Result<Option<ItemEnd>, Error> {
    let night = r.item.night;
    for role in [Role::Writer, Role::Reviewer] {
        if let Some(reading) = super::quota::overage_pause(night, &agent_config(r, role)).await? {
            return usage_limit(r, role, &reading).await;
        }
    }
    Ok(None)
}

/// Why an item cannot run this night because the writer's or the reviewer's
/// account has no credit (docs/limits.md#no-credit), if so: a no-credit stop
/// another item (here or on another host) recorded — of every agent of the
/// role, its fallback's account too (docs/limits.md#fallback).
///
/// # Errors
/// The ledger stays away (see [`Night::db`]).
pub(super) async fn without_credit(night: &Night) -> Result<Option<String>, Error> {
    'roles: for role in [Role::Writer, Role::Reviewer] {
        let mut first = None;
        // A fallback with credit lets the item run (docs/limits.md#fallback).
        for account in super::fallback::accounts(night, role) {
            let pool = &night.pool;
            match night
                .db(|| queue::account_without_credit(pool, &account))
                .await?
            {
                Some(message) => {
                    first.get_or_insert((account, message));
                }
                None => continue 'roles,
            }
        }
        if let Some((account, message)) = first {
            return Ok(Some(format!(
                "the {} agent's account {account:?} has no credit this night ({message}): add credit or fix its billing, and the next drain takes the item up",
                role.as_str()
            )));
        }
    }
    Ok(None)
}

/// Waits while the agent's account is paused by a usage limit another
/// worker (here or on another host) hit (docs/workers.md#usage-limits):
/// the sleep is recorded for this worker; the item's end when the pause
/// outlasts the deadline or a signal ends the wait. Not an attempt's failure.
async fn account_pause(r: &mut Round<'_>, role: Role) -> Result<Option<ItemEnd>, Error> {
    let night = r.item.night;
    let cfg = agent_config(r, role);
    let (pool, account) = (&night.pool, cfg.account());
    // An account without credit is not waited for: the item stops.
    if let Some(why) = without_credit(night).await? {
        let why = format!("stopped before the {} call: {why}", role.as_str());
        return Ok(Some(r.end(Fact::NoCredit(why))));
    }
    let Some(until) = night
        .db(|| queue::account_paused_until(pool, &account))
        .await?
    else {
        return Ok(None);
    };
    // A pause about to end (this worker's own, or a clock a little apart
    // from the server's) is waited out without a record.
    let left = (until - night.clock.now()).to_std().unwrap_or_default();
    if left <= std::time::Duration::from_secs(2) {
        tokio::time::sleep(left).await;
        return Ok(None);
    }
    let reading = LimitReading {
        kind: LimitKind::UsageLimit,
        resets_at: Some(until),
        retry_after: None,
        source: "account pause in the ledger".into(),
        message: format!(
            "the {account} account is paused until {until} by a usage limit another worker hit"
        ),
    };
    if until >= night.deadline {
        return usage_limit(r, role, &reading).await;
    }
    let kind = cfg.kind.to_string();
    let now = night.clock.now();
    let limit_sleep = limits::LimitSleep {
        run_id: r.item.run_id,
        item_id: Some(r.item.item_id),
        agent: &kind,
        kind: LimitKind::UsageLimit.as_str(),
        message: &reading.message,
        from: now,
        until,
        resets_at: Some(until),
    };
    let why = "stopped by a signal while the agent's account was paused";
    sleep_at_limit(r, role, &limit_sleep, why).await
}
