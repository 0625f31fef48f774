//! The watch of the repository's own CI after a push (docs/github.md#ci).
//!
//! When a worker opens an item's PR it records a watch in the ledger
//! ([`open`]: the PR, its head commit, and how long to wait: the contract's
//! `ci_wait`, never past the deadline) and takes the next item: no worker
//! waits for CI. One watcher per process ([`watch`], started beside the
//! workers) follows every open watch of the run from the ledger, every
//! [`POLL`] ([`POLL_ENV`] in tests): the head commit's check runs and
//! statuses and the base branch's required checks. [`judge`] says where
//! they stand; a conclusive state (or the wait's end) ends the watch in
//! one [`CiState`], and a green draft is marked ready for review. The run
//! ends once its workers ended and every watch did (each is bounded by
//! `ci_wait` and the deadline); a signal ends the watches still going as
//! `ci_pending`.
//!
//! A red required check that passes on the base asks for a fix round of
//! its item ([`super::ci_ask`], run by [`super::ci_fix`]) while the item's `ci_rounds` and the
//! deadline allow; the watch waits for the round's end and goes on at the
//! head it pushed. Once the budget is spent the watch ends `ci_failed`,
//! saying so.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::Night;
use crate::error::Error;
use crate::forge::{Check, CheckVerdict, Forge, RequiredChecks};
use crate::ledger::ci::{self as rows, CheckRow, NewWatch, WatchRow};
use crate::outcome::CiState;

/// Environment variable: the watcher's pause between two looks at GitHub,
/// in milliseconds (tests). Default [`POLL`].
pub const POLL_ENV: &str = "NIGHTSHIFT_CI_POLL_MS";

/// The watcher's pause between two looks at GitHub: two calls per watched
/// PR and one for the required checks each time, far within GitHub's 5,000
/// requests an hour.
pub const POLL: Duration = Duration::from_secs(30);

/// Environment variable: how long after a push a PR with no required check
/// known and none reported still waits for one to appear, in milliseconds
/// (tests). Default [`GRACE`].
pub const GRACE_ENV: &str = "NIGHTSHIFT_CI_GRACE_MS";

/// How long after a push a PR with no required check known and none
/// reported waits for a check to appear before it is `ci_none` (GitHub
/// starts workflows within seconds of a push; a repository without CI
/// should not hold the night for `ci_wait`).
pub const GRACE: Duration = Duration::from_secs(3 * 60);

/// Where one watch stands after a look at its head commit's checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judgement {
    /// The watch's end; `None` while it goes on.
    pub state: Option<CiState>,
    /// Why, in a sentence (the checks named).
    pub reason: Option<String>,
    /// No required check was known: every reported check counted.
    pub all_reported: bool,
    /// The checks seen, as the ledger keeps them.
    pub rows: Vec<CheckRow>,
    /// The required checks that failed (for a fix round's prompt).
    pub failed: Vec<Check>,
}

/// Judges the checks reported for `head` against the `required` names
/// (docs/github.md#ci): every required check succeeded → `ci_green`; one
/// failed → `ci_failed`; some not reported or still running → go on, or
/// `ci_pending` once `waited_out`. With no required check known, every
/// reported check counts as required; with none reported either, the watch
/// goes on while `in_grace`, then ends `ci_none`. A check reported for
/// another commit is not counted.
pub fn judge(
    required: &BTreeSet<String>,
    checks: &[Check],
    head: &str,
    waited_out: bool,
    in_grace: bool,
) -> Judgement {
    let checks: Vec<&Check> = checks.iter().filter(|c| c.head_sha == head).collect();
    let all_reported = required.is_empty() && !checks.is_empty();
    let counts = |c: &Check| all_reported || required.contains(&c.name);
    let rows = checks
        .iter()
        .map(|c| CheckRow {
            head_sha: c.head_sha.clone(),
            name: c.name.clone(),
            required: counts(c),
            conclusion: c.conclusion.clone(),
            url: c.url.clone(),
        })
        .collect();
    let failed: Vec<Check> = checks
        .iter()
        .filter(|c| counts(c) && c.verdict == CheckVerdict::Failed)
        .map(|c| (*c).clone())
        .collect();
    let ends = |state, reason: String| (Some(state), Some(reason));
    let short = &head[..head.len().min(12)];
    let (state, reason) = if required.is_empty() && checks.is_empty() {
        if in_grace && !waited_out {
            (None, None)
        } else {
            ends(
                CiState::None,
                format!(
                    "no required check is known for the base branch and none was reported for {short}"
                ),
            )
        }
    } else if !failed.is_empty() {
        let names: Vec<String> = failed
            .iter()
            .map(|c| format!("`{}` ({})", c.name, c.conclusion))
            .collect();
        ends(
            CiState::Failed,
            format!("required check {} failed on {short}", names.join(", ")),
        )
    } else {
        let open = not_conclusive(required, &checks, &counts);
        if open.is_empty() {
            let counted = checks.iter().filter(|c| counts(c)).count();
            let why = if all_reported {
                format!(
                    "no required check is configured for the base branch; all {counted} reported check(s) counted as required and succeeded on {short}"
                )
            } else {
                format!("all {counted} required check(s) succeeded on {short}")
            };
            ends(CiState::Green, why)
        } else if waited_out {
            ends(
                CiState::Pending,
                format!(
                    "not conclusive before ci_wait or the deadline: {}",
                    open.join("; ")
                ),
            )
        } else {
            (None, None)
        }
    };
    Judgement {
        state,
        reason,
        all_reported,
        rows,
        failed,
    }
}

/// The counted checks that are not conclusive yet: required ones never
/// reported, and counted ones still running, each in a few words.
fn not_conclusive(
    required: &BTreeSet<String>,
    checks: &[&Check],
    counts: &dyn Fn(&Check) -> bool,
) -> Vec<String> {
    let missing = (required.iter())
        .filter(|n| !checks.iter().any(|c| &c.name == *n))
        .map(|n| format!("`{n}` never reported"));
    let running = (checks.iter())
        .filter(|c| counts(c) && c.verdict == CheckVerdict::Pending)
        .map(|c| format!("`{}` still {}", c.name, c.conclusion));
    missing.chain(running).collect()
}

/// What a watch follows: item `key`'s PR `pr_number` at commit `head`,
/// made on the run's `base` commit.
#[derive(Debug, Clone, Copy)]
pub(super) struct Watched<'a> {
    pub key: &'a str,
    pub pr_number: u64,
    pub head: &'a str,
    pub base: &'a str,
}

/// Records the watch of item `key`'s PR `pr_number` at `head` in run
/// `run`, waiting `ci_wait` from now but never past the deadline.
///
/// # Errors
/// The ledger stays away.
pub(super) async fn open(
    night: &Night,
    run: Uuid,
    watched: &Watched<'_>,
    ci_wait: Duration,
) -> Result<(), Error> {
    let Watched {
        key,
        pr_number,
        head,
        base,
    } = *watched;
    let wait_until = wait_until(night, ci_wait);
    let w = NewWatch {
        run,
        key,
        pr_number,
        head_sha: head,
        base_sha: Some(base),
        wait_until,
    };
    let pool = &night.pool;
    night.db(|| rows::open_watch(pool, &w)).await?;
    Ok(())
}

/// When a watch of a push made now stops waiting: `ci_wait` from now,
/// never past the deadline.
pub(super) fn wait_until(night: &Night, ci_wait: Duration) -> chrono::DateTime<Utc> {
    let wait = chrono::Duration::from_std(ci_wait).unwrap_or(chrono::Duration::MAX);
    Utc::now()
        .checked_add_signed(wait)
        .unwrap_or(night.deadline)
        .min(night.deadline)
}

/// Follows every open watch of run `run` until `workers_done` is cancelled
/// and none is left open (each ends by its `wait_until`); a signal ends the
/// ones left as `ci_pending`. Without GitHub there is nothing to watch.
///
/// # Errors
/// The ledger stays away.
pub(super) async fn watch(
    night: Arc<Night>,
    run: Uuid,
    workers_done: CancellationToken,
) -> Result<(), Error> {
    let Some(forge) = night.forge.as_ref() else {
        return Ok(());
    };
    let poll = ms_from_env(POLL_ENV, POLL);
    let grace = ms_from_env(GRACE_ENV, GRACE);
    let mut seen = Seen::default();
    loop {
        let finished = workers_done.is_cancelled();
        let pool = &night.pool;
        let open: Vec<WatchRow> = (night.db(|| rows::watches_of_run(pool, run)).await?)
            .into_iter()
            .filter(|w| w.ci_state.is_none())
            .collect();
        if night.cancel.is_cancelled() {
            for w in &open {
                end(
                    &night,
                    w,
                    CiState::Pending,
                    "the run was stopped by a signal before CI was conclusive",
                    false,
                )
                .await?;
            }
            return Ok(());
        }
        let mut left = 0;
        for w in &open {
            // A watch whose fix round is wanted or running waits for its
            // end (a worker's); once no worker of this process is left,
            // none will run it.
            let ended = match (w.fixing, finished) {
                (true, false) => false,
                (true, true) => {
                    let why = "a required check failed; its fix round was wanted but the run's workers stopped before one ran it";
                    end(&night, w, CiState::Failed, why, w.all_reported).await?;
                    true
                }
                (false, _) => look(&night, forge, w, &mut seen, grace).await?,
            };
            if !ended {
                left += 1;
            }
        }
        if finished && left == 0 {
            return Ok(());
        }
        tokio::select! {
            _ = tokio::time::sleep(poll) => {}
            _ = night.cancel.cancelled() => {}
            _ = workers_done.cancelled(), if !finished => {}
        }
    }
}

/// One look at watch `w`: its head's checks recorded and judged, the watch
/// ended when conclusive or waited out. Returns whether it ended. A GitHub
/// failure is told and looked at again next time, until the wait is over.
async fn look(
    night: &Night,
    forge: &Forge,
    w: &WatchRow,
    seen: &mut Seen,
    grace: Duration,
) -> Result<bool, Error> {
    let required = &mut seen.required;
    if let Some(down) = night.github_down() {
        let reason = format!("not conclusive: GitHub was unreachable earlier in this run ({down})");
        end(night, w, CiState::Pending, &reason, false).await?;
        return Ok(true);
    }
    let now = Utc::now();
    let waited_out = now >= w.wait_until;
    if required.is_none() {
        match forge.required_checks(&night.config.base).await {
            Ok(r) => *required = Some(r),
            Err(e) => return github_fault(night, w, waited_out, &e).await,
        }
    }
    let names = required
        .as_ref()
        .map(|r| r.names.clone())
        .unwrap_or_default();
    let checks = match forge.commit_checks(&w.head_sha).await {
        Ok(c) => c,
        Err(e) => return github_fault(night, w, waited_out, &e).await,
    };
    let in_grace = now < w.started_at + chrono::Duration::from_std(grace).unwrap_or_default();
    let j = judge(&names, &checks, &w.head_sha, waited_out, in_grace);
    let pool = &night.pool;
    night
        .db(|| rows::record_checks(pool, w.id, &j.rows))
        .await?;
    let Some(state) = j.state else {
        return Ok(false);
    };
    if state == CiState::Failed
        && rerun_infrastructure(night, forge, w, &j.failed, &mut seen.reran).await
    {
        return Ok(false);
    }
    let mut reason = j.reason.unwrap_or_default();
    if state == CiState::Failed {
        reason = match on_the_base_too(night, forge, w, &j.failed).await {
            Some(also) => also,
            // Not the base's: the item's fix round, if the contract and
            // the deadline allow one (docs/github.md#fix-rounds).
            None => match super::ci_ask::want(night, forge, w, &j.failed).await? {
                None => return Ok(false),
                Some(why_not) => format!("{reason}; {why_not}"),
            },
        };
    }
    if state == CiState::Green
        && night.config.draft
        && let Err(e) = forge.mark_ready_for_review(w.pr_number as u64).await
    {
        reason.push_str(&format!(
            "; the draft could not be marked ready for review: {e}"
        ));
    }
    end(night, w, state, &reason, j.all_reported).await?;
    Ok(true)
}

/// What one watcher learnt across looks: the base branch's required
/// checks (read once), and the checks it asked GitHub to run again, by
/// watch and name (each at most once).
#[derive(Debug, Default)]
struct Seen {
    required: Option<RequiredChecks>,
    reran: std::collections::HashSet<(i64, String)>,
}

/// A failed GitHub Actions check with no output and no log is an
/// infrastructure failure (docs/github.md#ci): it is asked to run again,
/// once, before it counts. Returns whether a re-run was asked for (the
/// watch then goes on).
async fn rerun_infrastructure(
    night: &Night,
    forge: &Forge,
    w: &WatchRow,
    failed: &[Check],
    reran: &mut std::collections::HashSet<(i64, String)>,
) -> bool {
    let mut asked = false;
    for c in failed.iter().filter(|c| c.summary.trim().is_empty()) {
        let Some(job) = c.job_id else { continue };
        if !reran.insert((w.id, c.name.clone())) {
            continue;
        }
        let lines = night.config.ci_log_lines as usize;
        let silent = match forge.job_log_tail(job, lines).await {
            Ok(log) => log.is_none_or(|l| l.trim().is_empty()),
            Err(e) => {
                tracing::warn!(job, error = %e, "reading a failed job's log failed");
                false
            }
        };
        if !silent {
            continue;
        }
        match forge.rerun_job(job).await {
            Ok(()) => {
                tracing::info!(pr = w.pr_number, check = %c.name, "a check failed with no output and no log: asked GitHub to run it again");
                asked = true;
            }
            Err(e) => tracing::warn!(job, error = %e, "asking GitHub to run a job again failed"),
        }
    }
    asked
}

/// When every failed required check of `w` failed on the run's base commit
/// too, the failure is not the item's (docs/github.md#ci): the PR gets one
/// comment saying so, with links to both, and the reason to end with. `None`
/// when one passed there, was not reported there, or the base cannot be read.
async fn on_the_base_too(
    night: &Night,
    forge: &Forge,
    w: &WatchRow,
    failed: &[Check],
) -> Option<String> {
    let base = w.base_sha.as_deref()?;
    let on_base = match forge.commit_checks(base).await {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "reading the base commit's checks failed");
            return None;
        }
    };
    let pairs: Vec<(&Check, &Check)> = failed
        .iter()
        .filter_map(|f| {
            let b = on_base.iter().find(|b| b.name == f.name)?;
            (b.verdict == CheckVerdict::Failed).then_some((f, b))
        })
        .collect();
    if pairs.is_empty() || pairs.len() != failed.len() {
        return None;
    }
    let short = &base[..base.len().min(12)];
    let link = |c: &Check| c.url.clone().unwrap_or_else(|| "(no link)".into());
    let lines: Vec<String> = pairs
        .iter()
        .map(|(f, b)| {
            format!(
                "- `{}`: this PR {} · the base {} {}",
                f.name.replace('`', "'"),
                link(f),
                short,
                link(b)
            )
        })
        .collect();
    let body = format!(
        "nightshift: the required check(s) below fail on the base commit `{short}` as well, so the failure is not this change's; no fix round was started.\n\n{}\n",
        lines.join("\n")
    );
    let names: Vec<String> = pairs.iter().map(|(f, _)| format!("`{}`", f.name)).collect();
    let mut reason = format!(
        "required check {} failed, and fails on the base {short} too: not this change's fault; no fix round",
        names.join(", ")
    );
    let me = forge.own_login().await.unwrap_or_default();
    if let Err(e) = forge.post_comment(w.pr_number as u64, &me, &body).await {
        reason.push_str(&format!(
            "; the PR comment saying so failed: {}",
            night.redact(&e.to_string())
        ));
    }
    Some(reason)
}

/// A GitHub failure during a look: told in the log, and the watch goes on
/// unless its wait is over or the failure reaches every call (GitHub down
/// or refusing the token: see [`crate::forge::Scope::Run`]); then it ends
/// `ci_pending` naming the failure.
async fn github_fault(
    night: &Night,
    w: &WatchRow,
    waited_out: bool,
    e: &crate::forge::ForgeError,
) -> Result<bool, Error> {
    let why = night.redact(&e.to_string());
    tracing::warn!(pr = w.pr_number, error = %why, "reading the PR's checks failed");
    let run_wide = e.scope() == crate::forge::Scope::Run;
    if run_wide {
        night.mark_github_down(&why);
    }
    if !waited_out && !run_wide {
        return Ok(false);
    }
    let reason = format!("not conclusive: GitHub failed while the checks were read: {why}");
    end(night, w, CiState::Pending, &reason, false).await?;
    Ok(true)
}

/// Ends watch `w` in `state`.
async fn end(
    night: &Night,
    w: &WatchRow,
    state: CiState,
    reason: &str,
    all_reported: bool,
) -> Result<(), Error> {
    let (pool, reason) = (&night.pool, night.redact(reason));
    night
        .db(|| rows::end_watch(pool, w.id, state, Some(&reason), all_reported))
        .await
}

/// The milliseconds in environment variable `name` when it is a number,
/// else `default`.
fn ms_from_env(name: &str, default: Duration) -> Duration {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(default, Duration::from_millis)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forge::CheckSource;

    const HEAD: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

    fn check(name: &str, verdict: CheckVerdict, head: &str) -> Check {
        let conclusion = match verdict {
            CheckVerdict::Passed => "success",
            CheckVerdict::Failed => "failure",
            CheckVerdict::Pending => "in_progress",
        };
        Check {
            name: name.into(),
            head_sha: head.into(),
            source: CheckSource::Run,
            verdict,
            conclusion: conclusion.into(),
            url: None,
            summary: String::new(),
            job_id: None,
        }
    }

    fn names(n: &[&str]) -> BTreeSet<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn required_checks_decide_and_optional_ones_do_not() {
        let req = names(&["test"]);
        let green = [
            check("test", CheckVerdict::Passed, HEAD),
            check("lint", CheckVerdict::Failed, HEAD),
        ];
        let j = judge(&req, &green, HEAD, false, false);
        assert_eq!(j.state, Some(CiState::Green));
        assert!(!j.all_reported && j.failed.is_empty());
        assert_eq!(j.rows.iter().filter(|r| r.required).count(), 1);
        let red = [check("test", CheckVerdict::Failed, HEAD)];
        let j = judge(&req, &red, HEAD, false, false);
        assert_eq!(j.state, Some(CiState::Failed));
        assert!(j.reason.unwrap().contains("`test` (failure)"));
    }

    #[test]
    fn missing_or_running_checks_wait_then_end_pending() {
        let req = names(&["test", "build"]);
        let some = [check("test", CheckVerdict::Pending, HEAD)];
        assert_eq!(judge(&req, &some, HEAD, false, false).state, None);
        let j = judge(&req, &some, HEAD, true, false);
        assert_eq!(j.state, Some(CiState::Pending));
        let why = j.reason.unwrap();
        assert!(
            why.contains("`build` never reported") && why.contains("`test` still in_progress"),
            "{why}"
        );
    }

    #[test]
    fn a_check_of_another_commit_does_not_count() {
        let req = names(&["test"]);
        let stale = [check("test", CheckVerdict::Passed, "bbbb")];
        assert_eq!(judge(&req, &stale, HEAD, false, false).state, None);
        assert!(judge(&req, &stale, HEAD, false, false).rows.is_empty());
    }

    #[test]
    fn without_required_checks_every_reported_one_counts_and_none_is_not_green() {
        let none = BTreeSet::new();
        let j = judge(
            &none,
            &[check("lint", CheckVerdict::Passed, HEAD)],
            HEAD,
            false,
            false,
        );
        assert_eq!(j.state, Some(CiState::Green));
        assert!(j.all_reported && j.reason.unwrap().contains("counted as required"));
        let j = judge(
            &none,
            &[check("lint", CheckVerdict::Failed, HEAD)],
            HEAD,
            false,
            false,
        );
        assert_eq!(j.state, Some(CiState::Failed));
        assert_eq!(
            judge(&none, &[], HEAD, false, true).state,
            None,
            "in the grace"
        );
        assert_eq!(
            judge(&none, &[], HEAD, false, false).state,
            Some(CiState::None)
        );
    }
}
