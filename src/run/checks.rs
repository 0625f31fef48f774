//! Checks made between the steps of a round (docs/loop.md#rounds): what an
//! agent reached outside its checkout, the checkout handed to `agent_user`,
//! the run's cost cap, the no-progress rule (docs/loop.md#no-progress), and
//! the telling line of a command's output. Each answers a question; none
//! records anything or decides the item's end.

use std::time::Duration;

use crate::agent::Role;
use crate::slot::{self, Slot};

use super::{NO_PROGRESS_ROUNDS, Night, Totals};

/// The run's cost cap (`max_cost_usd_per_run`, docs/loop.md#budgets) counted over
/// `run_cost`, what the other items of the run spent (USD, on every worker
/// and host), and this one's calls so far; only costs the agents reported count.
pub(super) fn over_run_budget(night: &Night, run_cost: f64, t: &Totals) -> Option<String> {
    let cap = night.run_cost_cap();
    let spent = run_cost + t.cost;
    (t.cost_known && spent > cap).then(|| {
        format!("the run has spent ${spent:.2}, above its cap of ${cap:.2} (max_cost_usd_per_run)")
    })
}

/// Under `agent_user` (docs/security.md#with-agent_user), hands the checkout to that account so the
/// writer, setup and gates (which run as it) can write it; returns why not
/// when they cannot. Everything below the top directory except `.git` is
/// chowned to the account; the top directory stays the runner's, group-owned
/// by the account's group and group-writable, and `.git` stays the runner's
/// (read-only to the agent): git and libgit2 refuse a repository whose top
/// directory or `.git` another user owns, and the agent's git trusts the
/// checkout through `safe.directory` in its environment (see `cli::drain`).
/// The top directory is sticky, so the agent cannot rename `.git` away and
/// plant its own.
/// Only entries with another owner are changed, so a reused checkout costs a
/// walk, not a rewrite of every inode's ctime. The first call also checks, as
/// the account, that it can reach and write the checkout (a 0700 parent such
/// as `/root` would stop it). The slot's build directory beside the checkout
/// is handed over whole.
pub(super) async fn grant_checkout(night: &Night, slot: &Slot) -> Option<String> {
    let account = night.run_as.as_ref()?;
    let top = slot.path.clone();
    // The slot's build directory beside it (docs/loop.md#build-output-per-slot)
    // is the account's too: cargo writes there.
    let build = crate::build_output::slot_build_dir(&top);
    let handed = tokio::task::block_in_place(|| {
        slot::hand_over(&top, account.uid, account.gid)?;
        std::fs::create_dir_all(&build)?;
        slot::hand_over(&build, account.uid, account.gid)
    });
    if let Err(e) = handed {
        return Some(format!(
            "cannot hand the checkout {} to agent_user {}: {e}",
            top.display(),
            account.user
        ));
    }
    let probe = crate::process::Command::shell("test -w . && test -r .git/HEAD")
        .cwd(&top)
        .env_map(night.agent_env.clone())
        .timeout(Duration::from_secs(30))
        .run_as(account.clone());
    let why = match crate::process::run(probe, &night.cancel).await {
        Ok(o) if o.success() => return None,
        Ok(o) => format!("exit {:?}: {}", o.exit_code, last_line(&o.stderr_tail)),
        // Entering the directory as the account fails before anything runs.
        Err(e) => e.to_string().lines().next().unwrap_or_default().to_string(),
    };
    Some(format!(
        "agent_user {} cannot enter and write the checkout {} ({why}); every parent directory must be searchable by it — a 0700 home such as /root is not; set NIGHTSHIFT_DATA_DIR to a directory it can reach",
        account.user,
        top.display()
    ))
}

pub(super) fn no_progress(history: &mut Vec<(String, String)>, diff_hash: &str, sig: &str) -> bool {
    history.push((diff_hash.to_string(), sig.to_string()));
    history.len() >= NO_PROGRESS_ROUNDS
        && history[history.len() - NO_PROGRESS_ROUNDS..]
            .iter()
            .all(|h| h.0 == diff_hash && h.1 == sig)
}

/// What a writer changed outside its checkout, if anything: a ref on the
/// remote that now points at an object the checkout has (the writer pushed;
/// a person's push at night brings objects the checkout has never seen), a
/// deleted `nightshift/` branch, or the user's own repository (its `.git`
/// config and hooks, refs, HEAD, index, working tree: [`crate::user_repo`]).
/// A push to the remote also stops the run (docs/loop.md).
pub(super) fn outside_reach(
    night: &Night,
    role: Role,
    slot: &Slot,
    remote_before: Option<&std::collections::BTreeMap<String, String>>,
    user_git_before: &crate::user_repo::RepoState,
    token: Option<&str>,
) -> Option<String> {
    let after = tokio::task::block_in_place(|| night.repo_watch.state());
    let changed = crate::user_repo::changes(user_git_before, &after);
    if !changed.is_empty() {
        return Some(format!(
            "the {} changed {} in {} during its call; check it before you run git there again",
            role.as_str(),
            changed.join(", "),
            night.repo.display()
        ));
    }
    let before = remote_before?;
    let after = match tokio::task::block_in_place(|| slot.remote_refs(token)) {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!("cannot list the remote's refs after the writer: {e}");
            return None;
        }
    };
    let pushed = slot::remote_moves(before, &after, |oid| {
        tokio::task::block_in_place(|| slot.has_object(oid))
    });
    let why = (!pushed.is_empty()).then(|| {
        format!(
            "the {} pushed to the remote: {}; only the runner pushes",
            role.as_str(),
            pushed.join(", ")
        )
    })?;
    // The remote is no longer what the run started from: nothing more is
    // built or pushed tonight (docs/loop.md).
    night.stop_systemic(&why);
    Some(why)
}

/// The most telling line of a command's output tail, for a one-line
/// reason: the last line that names a failure (a panic, an assertion, a
/// failing test, a compiler error), else the last non-empty line. Generic
/// trailers such as cargo's "test failed, to rerun pass `--lib`" say nothing.
pub(super) fn last_line(s: &str) -> String {
    // In order of how much they tell: the assertion itself, then the failing
    // test or error, then anything that says it failed.
    const TELLING: &[&[&str]] = &[
        &["assertion", "AssertionError", "expected", "panicked at"],
        &[
            "error[",
            "Error:",
            "error:",
            "FAIL:",
            "not found",
            "No such file",
        ],
        &["FAILED", "failed", "Traceback"],
    ];
    const GENERIC: &[&str] = &[
        "test failed, to rerun",
        "could not compile",
        "aborting due to",
        "Some tests failed",
        "npm ERR! Test failed",
        "test result:",
    ];
    let lines: Vec<&str> = s
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !GENERIC.iter().any(|g| l.contains(g)))
        .collect();
    let telling = TELLING.iter().find_map(|group| {
        lines
            .iter()
            .rev()
            .find(|l| group.iter().any(|t| l.contains(t)))
    });
    telling
        .or(lines.last())
        .or(s.lines().rev().find(|l| !l.trim().is_empty()).as_ref())
        .map(|l| l.trim())
        .unwrap_or("")
        .chars()
        .take(300)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::last_line;

    #[test]
    fn the_telling_line_of_a_failure() {
        let cargo = "running 3 tests\ntest t::a ... ok\ntest t::b ... FAILED\n\nfailures:\n\n---- t::b stdout ----\n\nthread 't::b' panicked at src/lib.rs:9:9:\nassertion `left == right` failed: modulo\n  left: 1\n right: 3\n\nfailures:\n    t::b\n\ntest result: FAILED. 2 passed; 1 failed\n\nerror: test failed, to rerun pass `--lib`\n";
        assert_eq!(last_line(cargo), "assertion `left == right` failed: modulo");
        assert_eq!(
            last_line("sh: 1: nope: not found\n"),
            "sh: 1: nope: not found"
        );
        assert_eq!(last_line("all good\nbut exit 1\n"), "but exit 1");
        assert_eq!(
            last_line("error: test failed, to rerun pass `--lib`\n"),
            "error: test failed, to rerun pass `--lib`"
        );
    }
}
