//! Which agent plays each role of a round (docs/limits.md#fallback): the
//! configured writer and reviewer, or their fallbacks (`[writer] fallback`,
//! `[reviewer] fallback`) while their accounts are paused. The writer
//! falls back when its account has no room (a usage-limit pause, a reserve
//! stop, no credit, paid overage with `overage = "never"`) and the
//! fallback's has; the reviewer stays of the other vendor than the round's
//! writer where one is configured, else takes one with room. The choice is
//! made before every call (so a new round, and the call after a usage
//! limit, use the fallback) and kept on the item's [`Cast`]; the calls'
//! records name the agent. It does not call the agents (that is
//! [`super::agent_call`]) nor read the quota (that is [`super::quota`]).

use crate::agent::Role;
use crate::config::{AgentConfig, AgentKind};
use crate::error::Error;
use crate::ledger::quota as rows;
use crate::queue;

use super::Night;

/// The agents of the item's current round: `None` plays the configured
/// agent, `Some((name, config))` a fallback.
#[derive(Debug, Clone, Default)]
pub(super) struct Cast {
    writer: Candidate,
    reviewer: Candidate,
}

impl Cast {
    fn slot(&self, role: Role) -> &Candidate {
        match role {
            Role::Writer => &self.writer,
            Role::Reviewer => &self.reviewer,
        }
    }

    /// The config of the agent that plays `role` now.
    pub fn agent<'a>(&'a self, night: &'a Night, role: Role) -> &'a AgentConfig {
        config_of(night, role, self.slot(role))
    }

    /// Who played the round, for its line in the PR body and the report
    /// (`writer codex (fallback) · reviewer claude`): the agent's name
    /// (a fallback's name, else its kind); empty when neither role has a
    /// fallback configured.
    pub fn describe(&self, night: &Night) -> String {
        let c = &night.config;
        if c.writer.fallback.is_none() && c.reviewer.fallback.is_none() {
            return String::new();
        }
        let one = |role: Role| match self.slot(role) {
            Some((name, _)) => format!("{} {name} (fallback)", role.as_str()),
            None => format!("{} {}", role.as_str(), self.agent(night, role).kind),
        };
        format!("{} · {}", one(Role::Writer), one(Role::Reviewer))
    }

    /// The fallback's name when one plays `role` now (`None`: the
    /// configured agent).
    pub fn fallback(&self, role: Role) -> Option<&str> {
        self.slot(role).as_ref().map(|(n, _)| n.as_str())
    }
}

/// Whether an account may start a call now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Room {
    /// Nothing holds it.
    Free,
    /// Paused by a usage limit (beyond a couple of seconds): a call of it
    /// waits for the pause to end, as without a fallback.
    Paused,
    /// Stopped by the reserve, without credit, or drawing on overage the
    /// config forbids: no call of it may start.
    Held,
}

/// How much room `cfg`'s account has now ([`Room`]). `skip` is an account
/// taken as paused (the one whose call just hit its limit, before the
/// pause is recorded).
async fn room_of(night: &Night, cfg: &AgentConfig, skip: Option<&str>) -> Result<Room, Error> {
    let (pool, account) = (&night.pool, cfg.account());
    let held = night
        .db(|| rows::running_stop(pool, &account))
        .await?
        .is_some()
        || night
            .db(|| queue::account_without_credit(pool, &account))
            .await?
            .is_some()
        || super::quota::overage_pause(night, cfg).await?.is_some();
    if held {
        return Ok(Room::Held);
    }
    if skip == Some(account.as_str()) {
        return Ok(Room::Paused);
    }
    let soon = night.clock.now() + chrono::Duration::seconds(2);
    let paused = night
        .db(|| queue::account_paused_until(pool, &account))
        .await?;
    Ok(if paused.is_some_and(|t| t > soon) {
        Room::Paused
    } else {
        Room::Free
    })
}

/// One candidate for a role: `None` the configured agent, else a fallback.
type Candidate = Option<(String, AgentConfig)>;

/// The config of candidate `c` for `role`.
fn config_of<'a>(night: &'a Night, role: Role, c: &'a Candidate) -> &'a AgentConfig {
    match (c, role) {
        (Some((_, a)), _) => a,
        (None, Role::Writer) => &night.config.writer,
        (None, Role::Reviewer) => &night.config.reviewer,
    }
}

/// The candidates for `role`: the configured agent (`None`), then its
/// fallback, if any.
fn candidates(night: &Night, role: Role) -> Vec<Candidate> {
    let c = &night.config;
    let primary = match role {
        Role::Writer => &c.writer,
        Role::Reviewer => &c.reviewer,
    };
    let mut v = vec![None];
    v.extend(c.fallback_of(primary).map(Some));
    v
}

/// Chooses who plays `role` (docs/limits.md#fallback). The writer: the
/// configured one while its account is free, else its fallback if that
/// one's is, else the configured one (which then waits or stops, as
/// without a fallback). The reviewer: of another vendor than `writer` and
/// free, else of another vendor and only paused (waiting for it), else any
/// free, else the configured one. `skip` as for [`room_of`].
async fn choose(
    night: &Night,
    role: Role,
    writer: AgentKind,
    skip: Option<&str>,
) -> Result<Candidate, Error> {
    let all = candidates(night, role);
    if all.len() < 2 {
        return Ok(None);
    }
    let mut room = Vec::with_capacity(all.len());
    for c in &all {
        room.push(room_of(night, config_of(night, role, c), skip).await?);
    }
    let other = |c: &Candidate| role == Role::Reviewer && config_of(night, role, c).kind != writer;
    let pick = (0..all.len())
        .find(|&i| other(&all[i]) && room[i] == Room::Free)
        .or_else(|| (0..all.len()).find(|&i| other(&all[i]) && room[i] == Room::Paused))
        .or_else(|| (0..all.len()).find(|&i| room[i] == Room::Free))
        .unwrap_or(0);
    Ok(all[pick].clone())
}

/// Casts `role` for the coming call of round `n` of an item whose agents
/// are `cast`: the choice of [`choose`]; a change is logged.
///
/// # Errors
/// The ledger stays away (see [`Night::db`]).
pub(super) async fn cast(night: &Night, cast: &mut Cast, role: Role, n: u32) -> Result<(), Error> {
    let writer = cast.agent(night, Role::Writer).kind;
    let chosen = choose(night, role, writer, None).await?;
    recast(night, cast, (role, n), chosen);
    Ok(())
}

/// Puts `chosen` in `role`'s place on `cast`, logging a change.
fn recast(night: &Night, cast: &mut Cast, (role, n): (Role, u32), chosen: Candidate) {
    let slot = match role {
        Role::Writer => &mut cast.writer,
        Role::Reviewer => &mut cast.reviewer,
    };
    let before = slot.as_ref().map(|(n, _)| n.clone());
    let after = chosen.as_ref().map(|(n, _)| n.clone());
    *slot = chosen;
    if before != after {
        let agent = cast.agent(night, role);
        tracing::info!(role = role.as_str(), agent = %agent.kind, fallback = ?after, account = %agent.account(), round = n, "agent chosen for the round");
    }
}

/// After the call of `role` in round `n` hit a usage limit of `account`,
/// or found it without credit: whether another agent of the role, of
/// another account, has room (then it is cast, and the call is made again
/// with it instead of sleeping or ending the item); otherwise `cast` stays
/// as it is.
///
/// # Errors
/// The ledger stays away (see [`Night::db`]).
pub(super) async fn take_over(
    night: &Night,
    cast: &mut Cast,
    (role, n): (Role, u32),
    account: &str,
) -> Result<bool, Error> {
    if candidates(night, role).len() < 2 {
        return Ok(false);
    }
    let writer = cast.agent(night, Role::Writer).kind;
    let chosen = choose(night, role, writer, Some(account)).await?;
    let other = config_of(night, role, &chosen);
    if other.account() == account || room_of(night, other, Some(account)).await? != Room::Free {
        return Ok(false);
    }
    recast(night, cast, (role, n), chosen);
    Ok(true)
}

/// The accounts of `role`'s agents, configured one first.
pub(super) fn accounts(night: &Night, role: Role) -> Vec<String> {
    candidates(night, role)
        .iter()
        .map(|c| config_of(night, role, c).account())
        .collect()
}
