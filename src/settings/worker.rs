//! What `worker` joins (docs/workers.md#nightshift-worker): the live run
//! of this repository, checked as docs/workers.md says (this host's root
//! rule, the plan's SHAs, the contracts' agents and gates on this host, the
//! run's signed approval), resolved into the same [`Request`] and [`Held`]
//! a drain has. Not the claiming of items ([`crate::run::join`]).

use std::path::Path;

use crate::approval;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::ledger as ledger_mod;
use crate::ledger::runs::RunRow;
use crate::ledger::{plans, runs};
use crate::plan::{self, Plan};
use crate::run::Selection;
use crate::schedule;

use super::held::lock_checkouts;
use super::{
    Held, Location, Request, agents_as_root_refusal, checked_jobs, data_dir, install_approval_key,
    ledger, load_config, repo_id, repo_root,
};

/// What `worker` joins: the request built from the run (its verified plan,
/// zone and deadline, this host's config with the contracts' agents), the
/// ledger and the hold on this host's checkouts, the run, and the contract
/// SHAs its approval covers.
pub struct Joined {
    pub req: Request,
    pub held: Held,
    pub run: RunRow,
    pub approved: Vec<String>,
}

/// Finds the live run of this repository and checks it as docs/workers.md
/// says: this host's root rule, the plan's SHAs, the contracts' agents and
/// gates on this host, the run's signed approval.
///
/// # Errors
/// Exit 3 when no run of this repository is live; exit 2 when the run's
/// agents or gate commands cannot start here, or a bad config; exit 1 when
/// the ledger or the data directory fail.
pub async fn join_live_run(at: &Location, jobs: Option<u32>) -> Result<Joined> {
    let repo = repo_root(at.repo.as_deref())?;
    let loaded = load_config(at.config.as_deref(), &repo)?;
    // This host's own rule for agents as root holds (docs/security.md).
    if let Some(why) = agents_as_root_refusal(&loaded.config, &loaded.path) {
        return Err(Error::config(why));
    }
    match super::repo::sandbox_state(&loaded.config, &loaded.path) {
        Err(why) => return Err(Error::config(why)),
        Ok(Some(warning)) => eprintln!("warning: {warning}"),
        Ok(None) => {}
    }
    let mut config = loaded.config.clone();
    if let Some(jobs) = jobs {
        config.jobs = checked_jobs(jobs, false)?;
    }
    let ledger = ledger().await?;
    super::held::check_clock(&ledger.pool).await?;
    let repo_id = repo_id(&repo, &config.remote);
    let run = live_run(&ledger, &repo_id, &repo).await?;
    let pool = &ledger.pool;
    let stored = plans::plan_stored(pool, &run.plan_sha).await?;
    let plan = plan::plan_from_ledger(&run.plan_sha, &stored).map_err(Error::refused)?;
    adopt_contract_agents(&mut config, &plan)?;
    check_gates_runnable(&plan)?;
    // Only contracts the run's signed approval covers run here.
    let approved = run_approval(pool, &run, &stored).await?;
    let req = Request {
        repo: repo.clone(),
        loaded,
        config,
        plan,
        selection: Selection::All,
        approve: None,
        tz: run.zone(),
        deadline: run.deadline.unwrap_or_else(schedule::server_now),
        now: schedule::server_now(),
        deadline_input: String::new(),
        scheduled: false,
    };
    let held = Held {
        ledger,
        repo_id,
        lock: None,
        slots_lock: lock_checkouts(&repo)?,
    };
    Ok(Joined {
        req,
        held,
        run,
        approved,
    })
}

/// The repository's run a `drain` is running now: the newest `running` run
/// while another process holds the repository's lock.
///
/// # Errors
/// Refused (exit 3), saying how to start one, when there is none.
async fn live_run(ledger: &ledger_mod::Ledger, repo_id: &str, repo: &Path) -> Result<RunRow> {
    let none = || {
        Error::refused(format!(
            "no run of {} is live: start one with `nightshift drain` on the host that approved the plan, then start `nightshift worker` again",
            repo.display()
        ))
    };
    let run = runs::running_run(&ledger.pool, repo_id)
        .await?
        .ok_or_else(none)?;
    let me = ledger_mod::HolderInfo::current();
    match ledger.try_lock_repo(repo_id, &me).await {
        // Nobody holds the lock: the run's drain is gone (it is resumed
        // by the next drain). The lock is released when the guard drops.
        Ok(ledger_mod::RepoLockAttempt::Acquired(_)) => Err(none()),
        // The lock's holder must be the drain that opened this run.
        Ok(ledger_mod::RepoLockAttempt::Held { holder: Some(h) })
            if run.host.as_deref().is_some_and(|rh| rh != h.host)
                || run.pid.is_some_and(|rp| rp != h.pid as i32) =>
        {
            Err(none())
        }
        Ok(ledger_mod::RepoLockAttempt::Held { .. }) => Ok(run),
        Err(e) => Err(Error::failed(format!("ledger: {e}"))),
    }
}

/// The contracts of `stored` (the run's plan) that the run's approval
/// covers, once the run verifies as every host that joins it checks it
/// (docs/workers.md, docs/contract.md#the-runs-binding): its signed binding
/// matches the run, its approval is signed by this host's copy of the
/// approval key, was unexpired at the run's start and was used by this run
/// alone, and the approved plan's contracts hash to it. A run, approval or
/// plan rewritten in the ledger runs nothing.
///
/// # Errors
/// Refused (exit 3) naming what did not verify and, for the key, how to
/// copy it; database errors.
async fn run_approval(
    pool: &sqlx::PgPool,
    run: &RunRow,
    stored: &[(String, Option<serde_json::Value>)],
) -> Result<Vec<String>> {
    install_approval_key()?;
    if !approval::key_installed() {
        let key = approval::key_path(&data_dir());
        return Err(Error::refused(format!(
            "run {}: {}; nothing was run",
            run.id,
            no_key(pool, run, &key).await
        )));
    }
    let covered = approval::binding::verify(pool, run).await??.contracts;
    Ok(stored
        .iter()
        .map(|(sha, _)| sha.clone())
        .filter(|sha| covered.contains(sha))
        .collect())
}

/// Why a worker without `approval.key` runs nothing, and the fix: the
/// file to copy from the approving host, as that host's drain recorded it
/// in its `run_started` event (its data directory differs as root).
async fn no_key(pool: &sqlx::PgPool, run: &RunRow, key: &Path) -> String {
    let started = crate::ledger::events::of_kind_in_run(
        pool,
        run.id,
        crate::outcome::Event::RunStarted.as_str(),
    )
    .await
    .ok()
    .and_then(|e| e.into_iter().next());
    let there = started
        .as_ref()
        .and_then(|d| d["approval_key"].as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{} in its data directory", approval::KEY_FILE));
    let host = run.host.as_deref().unwrap_or("the approving host");
    format!(
        "no {} in {}: copy it from the approving host ({host}:{there}), e.g. `scp {host}:{there} {}` (mode 0600)",
        approval::KEY_FILE,
        key.parent().unwrap_or(key).display(),
        key.display()
    )
}

/// A worker runs the agents the run's contracts were sealed with, not the
/// ones its own config names (only `account` stays this host's).
///
/// # Errors
/// Exit 2 when a contract names an agent kind this build does not know.
fn adopt_contract_agents(config: &mut Config, plan: &Plan) -> Result<()> {
    let Some(first) = plan.entries.first() else {
        return Ok(());
    };
    let c = &first.contract;
    if let Some(e) = plan.entries.iter().find(|e| {
        e.contract.writer != c.writer
            || e.contract.reviewer != c.reviewer
            || e.contract.writer_fallback != c.writer_fallback
            || e.contract.reviewer_fallback != c.reviewer_fallback
    }) {
        return Err(Error::refused(format!(
            "the run's contracts name different agents (item {:?} differs from item {:?}); a worker runs one pair",
            e.item.title, first.item.title
        )));
    }
    for (agent, spec) in [
        (&mut config.writer, &c.writer),
        (&mut config.reviewer, &c.reviewer),
    ] {
        agent.kind = kind_of(spec)?;
        agent.command = spec.command.clone();
        agent.permission_flags = spec.permission_flags.clone();
        agent.model = spec.model.clone();
        agent.allow_hosts = spec.allow_hosts.clone();
    }
    adopt_fallbacks(config, [&c.writer_fallback, &c.reviewer_fallback])
}

/// The agent kind a contract's `spec` names.
///
/// # Errors
/// Exit 2 when this build does not know it.
fn kind_of(spec: &crate::contract::AgentSpec) -> Result<crate::config::AgentKind> {
    serde_json::from_value(serde_json::Value::from(spec.kind.as_str())).map_err(|_| {
        Error::config(format!(
            "the run's contracts name the agent kind {:?}, which this nightshift does not know; install the same nightshift version on every host",
            spec.kind
        ))
    })
}

/// The fallback agents sealed in the run's contract (`sealed`: the
/// writer's, the reviewer's; docs/limits.md#fallback) replace this host's:
/// each named as sealed, with its sealed kind, command and flags, and the
/// account this host's config gives an agent of that name (else its kind).
///
/// # Errors
/// Exit 2 when a contract names an agent kind this build does not know.
fn adopt_fallbacks(
    config: &mut Config,
    sealed: [&Option<crate::contract::AgentSpec>; 2],
) -> Result<()> {
    config.writer.fallback = None;
    config.reviewer.fallback = None;
    for (is_writer, spec) in [(true, sealed[0]), (false, sealed[1])] {
        let Some(spec) = spec else { continue };
        let name = spec.name.clone().unwrap_or_else(|| spec.kind.clone());
        let kind = kind_of(spec)?;
        let probe = crate::config::AgentConfig {
            fallback: Some(name.clone()),
            ..Default::default()
        };
        let account = config.fallback_of(&probe).and_then(|(_, a)| a.account);
        let agent = crate::config::AgentConfig {
            kind,
            command: spec.command.clone(),
            permission_flags: spec.permission_flags.clone(),
            model: spec.model.clone(),
            account,
            fallback: None,
            allow_hosts: spec.allow_hosts.clone(),
        };
        config.agents.insert(name.clone(), agent);
        let primary = if is_writer {
            &mut config.writer
        } else {
            &mut config.reviewer
        };
        primary.fallback = Some(name);
    }
    Ok(())
}

/// Every gate and setup command of the run's contracts must be able to
/// start here: its program (the first word) is a shell builtin, a path
/// that exists in this clone, or a name on `PATH`.
///
/// # Errors
/// Exit 2 naming the command and the item.
fn check_gates_runnable(plan: &Plan) -> Result<()> {
    for e in &plan.entries {
        let c = &e.contract;
        for command in c.verify.iter().chain(&c.setup) {
            if let Some(program) = missing_program(command) {
                return Err(Error::config(format!(
                    "item {:?}: the command `{command}` of its contract cannot run on this host ({program} is not found); install it, or run this worker where it is",
                    e.item.title
                )));
            }
        }
    }
    Ok(())
}

/// The program `command` starts, when it cannot be found on this host.
fn missing_program(command: &str) -> Option<String> {
    const BUILTINS: &[&str] = &[
        "cd", "true", "false", "test", "[", "echo", "export", "exit", "set", ":", ".", "exec",
        "printf", "if", "for", "while", "!", "{", "(", "source", "command", "env",
    ];
    let program = command
        .split_whitespace()
        .find(|w| !w.contains('='))?
        .trim_start_matches('(');
    if program.is_empty() || BUILTINS.contains(&program) {
        return None;
    }
    if program.contains('/') {
        return None;
    }
    which::which_global(program)
        .is_err()
        .then(|| program.to_string())
}

#[cfg(test)]
mod tests {
    use crate::config::{AgentKind, Config};
    use crate::contract::AgentSpec;

    /// A worker runs the fallback sealed in the contract, with this host's
    /// account for its name; a fallback this host configures but the
    /// contract does not seal is dropped.
    #[test]
    fn a_worker_adopts_the_sealed_fallbacks_with_its_own_accounts() {
        let mut c: Config = toml::from_str(
            "[reviewer]\nfallback = \"codex\"\n[agents.spare]\nkind = \"codex\"\naccount = \"team-b\"\n",
        )
        .unwrap();
        let sealed = Some(AgentSpec {
            command: vec!["/opt/codex".into(), "-c".into(), "x=1".into()],
            kind: "codex".into(),
            model: Some("m".into()),
            name: Some("spare".into()),
            permission_flags: None,
            allow_hosts: vec![],
        });
        super::adopt_fallbacks(&mut c, [&sealed, &None]).unwrap();
        let (name, a) = c.fallback_of(&c.writer).unwrap();
        assert_eq!(
            (
                name.as_str(),
                a.kind,
                a.command[0].as_str(),
                a.model.as_deref(),
                a.account()
            ),
            (
                "spare",
                AgentKind::Codex,
                "/opt/codex",
                Some("m"),
                "team-b".to_string()
            )
        );
        assert!(c.fallback_of(&c.reviewer).is_none());
        let unknown = Some(AgentSpec {
            kind: "gemini".into(),
            ..sealed.clone().unwrap()
        });
        assert!(super::adopt_fallbacks(&mut c, [&unknown, &None]).is_err());
    }
}
