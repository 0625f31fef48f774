//! The closed sets of a run's life: how an item ended ([`Outcome`]), how a
//! round ended ([`RoundResult`]), what a run is doing ([`Phase`]), how a run
//! ended ([`RunStatus`]), what started it ([`RunKind`]), where a pushed
//! branch's PR stands ([`PrRecord`]) and where its checks on GitHub stand
//! ([`CiState`]).
//!
//! Each converts to and from the exact text the ledger stores and the JSON
//! prints (`as_str`, [`std::str::FromStr`], serde, sqlx): the SQL `CHECK`
//! constraints of `migrations/0001_init.sql` hold the same sets, so nothing
//! in the schema or the JSON changes with these types. The sets and what
//! each member means are described in docs/loop.md and docs/ledger.md. This
//! module holds no rule about when a value is chosen; `run` decides that.

use std::fmt;
use std::str::FromStr;

/// A text of the ledger or the JSON that is not a member of the set it was
/// read as (a ledger written by a newer nightshift, or a hand edit).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {set} {text:?}")]
pub struct UnknownText {
    /// The set's name, e.g. `outcome`.
    pub set: &'static str,
    /// The text that was read.
    pub text: String,
}

/// Defines a fieldless enum stored as text: its `as_str`, `ALL`,
/// `FromStr`, `Display`, serde as the text, and sqlx as PostgreSQL `text`.
macro_rules! text_set {
    (
        $(#[$doc:meta])*
        $name:ident, $set:literal {
            $( $(#[$vdoc:meta])* $variant:ident => $text:literal, )+
        }
    ) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $( $(#[$vdoc])* $variant, )+
        }

        impl $name {
            /// Every member, in the order the ledger's `CHECK` lists them.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The text the ledger stores and the JSON prints.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }
        }

        impl FromStr for $name {
            type Err = UnknownText;
            fn from_str(s: &str) -> Result<Self, UnknownText> {
                match s {
                    $($text => Ok($name::$variant),)+
                    _ => Err(UnknownText { set: $set, text: s.to_string() }),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }

        impl sqlx::Type<sqlx::Postgres> for $name {
            fn type_info() -> sqlx::postgres::PgTypeInfo {
                <&str as sqlx::Type<sqlx::Postgres>>::type_info()
            }
            fn compatible(ty: &sqlx::postgres::PgTypeInfo) -> bool {
                <&str as sqlx::Type<sqlx::Postgres>>::compatible(ty)
            }
        }

        impl sqlx::Encode<'_, sqlx::Postgres> for $name {
            fn encode_by_ref(
                &self,
                buf: &mut sqlx::postgres::PgArgumentBuffer,
            ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
                <&str as sqlx::Encode<sqlx::Postgres>>::encode_by_ref(&self.as_str(), buf)
            }
        }

        impl<'r> sqlx::Decode<'r, sqlx::Postgres> for $name {
            fn decode(
                value: sqlx::postgres::PgValueRef<'r>,
            ) -> Result<Self, sqlx::error::BoxDynError> {
                let s = <&str as sqlx::Decode<sqlx::Postgres>>::decode(value)?;
                Ok(s.parse()?)
            }
        }
    };
}

text_set! {
    /// How one item of a run ended (`run_items.outcome`; docs/loop.md).
    Outcome, "outcome" {
        /// A PR was opened on GitHub.
        PrOpened => "pr_opened",
        /// An earlier run's PR of the item is open.
        AlreadyOpen => "already_open",
        /// An earlier run's PR of the item was merged.
        AlreadyMerged => "already_merged",
        /// The writer changed nothing.
        NoChanges => "no_changes",
        /// A question for a person, or too many failed attempts.
        Blocked => "blocked",
        /// The item's contract is not in the approved plan.
        NotApproved => "not_approved",
        /// Not started (or stopped at a usage limit) before the deadline.
        Deadline => "deadline",
        /// The gate failed in the last round.
        TestsFailed => "tests_failed",
        /// The reviewer requested changes in the last round.
        ReviewRejected => "review_rejected",
        /// The reviewer was not read-only.
        ReviewVoid => "review_void",
        /// The writer committed, pushed, switched branch or left its scope.
        RuleBroken => "rule_broken",
        /// The same diff and the same failure three rounds in a row.
        NoProgress => "no_progress",
        /// A token or cost cap was reached.
        BudgetExceeded => "budget_exceeded",
        /// The item timeout or an agent timeout was reached.
        TimedOut => "timed_out",
        /// A signal (or a failure outside the item) stopped it.
        Interrupted => "interrupted",
        /// The push failed.
        PushFailed => "push_failed",
        /// Pushed, PR not opened yet (retried by the next run).
        PrFailed => "pr_failed",
        /// Anything else that went wrong.
        Error => "error",
        /// A tended PR: its branch pushed anew, body updated, one answering
        /// comment (docs/github.md "The second night").
        PrUpdated => "pr_updated",
        /// A tended PR left untouched: a person pushed to it, it was merged
        /// or closed meanwhile, or it opted out.
        PrLeftAlone => "pr_left_alone",
        /// The branch is pushed (by this run or an earlier one) but has no
        /// PR: there was no GitHub access to open it (the next run with
        /// access opens it; `report --show-body` shows it).
        BranchPushed => "branch_pushed",
        /// Not started: `max_open_prs` nightshift PRs of the repository
        /// are open, and the night opens no new one (docs/loop.md
        /// "Before the checkout").
        ReviewQueueFull => "review_queue_full",
        /// The agent account has no credit (billing or credits exhausted):
        /// its work stops for the night; the item whose call met it and the
        /// later items of the account end so (docs/limits.md#no-credit).
        NoCredit => "no_credit",
        /// Not started: its writer's or reviewer's account reached the
        /// `[quota] reserve` of a long usage window, which is kept for the
        /// day (docs/limits.md#reserve). Not a failure; uses no attempt.
        QuotaReserved => "quota_reserved",
    }
}

impl Outcome {
    /// Whether this outcome fails the run (exit 1; docs/commands.md): every
    /// outcome but `pr_opened`, `already_open`, `already_merged`,
    /// `no_changes`, `blocked`, `not_approved`, `deadline`, `pr_updated`,
    /// `pr_left_alone`, `branch_pushed`, `review_queue_full` and
    /// `quota_reserved`.
    pub fn fails_run(self) -> bool {
        !matches!(
            self,
            Outcome::PrOpened
                | Outcome::AlreadyOpen
                | Outcome::AlreadyMerged
                | Outcome::NoChanges
                | Outcome::Blocked
                | Outcome::NotApproved
                | Outcome::Deadline
                | Outcome::PrUpdated
                | Outcome::PrLeftAlone
                | Outcome::BranchPushed
                | Outcome::ReviewQueueFull
                | Outcome::QuotaReserved
        )
    }

    /// The word for an item's outcome, `running` (the run status) while it
    /// has none: how the report, the page and notifications show it.
    pub fn or_running(outcome: Option<Outcome>) -> &'static str {
        outcome.map_or(RunStatus::Running.as_str(), Outcome::as_str)
    }

    /// Whether an item that ended so counts as a failed attempt against
    /// `max_attempts` (docs/loop.md): the failures the item itself caused,
    /// not a signal, a push or PR failure, or anything that did not run it.
    pub fn counts_as_attempt(self) -> bool {
        matches!(
            self,
            Outcome::TestsFailed
                | Outcome::ReviewRejected
                | Outcome::ReviewVoid
                | Outcome::RuleBroken
                | Outcome::NoProgress
                | Outcome::BudgetExceeded
                | Outcome::TimedOut
                | Outcome::Error
        )
    }

    /// Whether a resumed run takes the item up again rather than carrying
    /// its end over: it was cut short, pushed without its PR, or not
    /// started because the review queue was full (nothing was spent on it,
    /// and PRs may have been merged since) or its account had no credit
    /// (credit may have been added since).
    pub fn resumes(self) -> bool {
        matches!(
            self,
            Outcome::Interrupted
                | Outcome::PrFailed
                | Outcome::ReviewQueueFull
                | Outcome::NoCredit
                | Outcome::QuotaReserved
        )
    }
}

/// How one round ended (`rounds.result`): approved, or the outcome of the
/// step that ended it (a round cut short ends with its item's outcome).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RoundResult {
    /// Green gate and an `approve` verdict.
    Approved,
    /// The step that ended the round, as the item outcome it stands for.
    Ended(Outcome),
}

impl RoundResult {
    /// The text the ledger stores.
    pub fn as_str(self) -> &'static str {
        match self {
            RoundResult::Approved => "approved",
            RoundResult::Ended(o) => o.as_str(),
        }
    }
}

impl From<Outcome> for RoundResult {
    fn from(o: Outcome) -> Self {
        RoundResult::Ended(o)
    }
}

impl FromStr for RoundResult {
    type Err = UnknownText;
    fn from_str(s: &str) -> Result<Self, UnknownText> {
        if s == RoundResult::Approved.as_str() {
            return Ok(RoundResult::Approved);
        }
        s.parse().map(RoundResult::Ended).map_err(|_| UnknownText {
            set: "round result",
            text: s.to_string(),
        })
    }
}

impl fmt::Display for RoundResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for RoundResult {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

text_set! {
    /// How a run ended, or that it is running (`runs.status`; docs/ledger.md).
    RunStatus, "run status" {
        /// Still running (or died without saying so; see `status`).
        Running => "running",
        /// Every item was taken to its end.
        Completed => "completed",
        /// The deadline stopped it cleanly.
        StoppedDeadline => "stopped_deadline",
        /// A signal stopped it.
        StoppedSignal => "stopped_signal",
        /// It died, or a failure outside the items stopped it; the next drain resumes it.
        Crashed => "crashed",
    }
}

impl RunStatus {
    /// Whether a run that ended so fails (exit 1): a signal or a crash.
    pub fn fails_run(self) -> bool {
        matches!(self, RunStatus::StoppedSignal | RunStatus::Crashed)
    }
}

text_set! {
    /// What started a run (`runs.kind`).
    RunKind, "run kind" {
        /// `nightshift drain`: every item of the plan.
        Drain => "drain",
        /// `nightshift run`: one item.
        Run => "run",
    }
}

text_set! {
    /// What a running run is doing now (`runs.phase`; `status` shows it).
    Phase, "phase" {
        /// Looking up an earlier PR of the item on GitHub.
        Github => "github",
        /// Preparing the item's checkout.
        Checkout => "checkout",
        /// Running the contract's setup commands.
        Setup => "setup",
        /// The writer agent's call.
        Writer => "writer",
        /// Reading the proof of work from git.
        Proof => "proof",
        /// Running the gate.
        Gate => "gate",
        /// The reviewer agent's call.
        Review => "review",
        /// Committing, pushing and opening the PR.
        Push => "push",
        /// Sleeping at an agent's usage limit.
        Sleeping => "sleeping",
    }
}

text_set! {
    /// What an entry of a run's event log says happened (`events.kind`).
    Event, "event" {
        /// The run began (or took up the run it resumes).
        RunStarted => "run_started",
        /// Something outside the items stopped the run.
        RunStopped => "run_stopped",
        /// An item ended (any outcome).
        ItemFinished => "item_finished",
        /// An item's branch was pushed.
        Pushed => "pushed",
        /// GitHub opened an item's PR.
        PrOpened => "pr_opened",
        /// A usage limit resets after the deadline: no sleep was taken.
        UsageLimitAfterDeadline => "usage_limit_after_deadline",
        /// A worker took over an item whose claim's lease passed
        /// (docs/workers.md#leases).
        TakenOver => "taken_over",
        /// A worker joined the run.
        WorkerJoined => "worker_joined",
        /// A worker left the run.
        WorkerLeft => "worker_left",
        /// A worker's heartbeat extended its lease (docs/workers.md#leases).
        WorkerBeat => "worker_beat",
        /// A worker (or the run) started an item's attempt.
        ItemStarted => "item_started",
        /// A round of an item began.
        RoundStarted => "round_started",
        /// The run moved to another phase of an item (`runs.phase`).
        PhaseChanged => "phase",
        /// A gate or setup command ran, with its exit code.
        GateRan => "gate_ran",
        /// The reviewer's verdict on a round.
        Reviewed => "reviewed",
        /// The run sleeps at an agent's usage limit until a reset.
        Sleeping => "sleeping",
        /// The run ended with its status and exit code.
        RunFinished => "run_finished",
        /// A PR's CI watch began, or followed a new head (docs/github.md#ci).
        CiWatch => "ci_watch",
        /// A PR's CI watch ended in its CI state.
        CiEnded => "ci_ended",
        /// A red required check put a fix round of its item on the queue
        /// (docs/github.md#fix-rounds).
        CiFixWanted => "ci_fix_wanted",
        /// A fix round ended: what it pushed, or why nothing.
        CiFixRound => "ci_fix_round",
        /// A drain or run refused to start (no usable approval, a missing
        /// agent): nothing ran.
        Refused => "refused",
        /// A person approved a plan or a contract.
        Approved => "approved",
        /// A scheduled fire found no approval for the plan.
        NotApproved => "not_approved",
        /// An end-of-run notification could not be delivered.
        NotifyFailed => "notify_failed",
        /// A `nightshift/` branch on the remote whose head nightshift did
        /// not push (docs/security.md#processes): a finding for a person.
        ForeignRef => "foreign_ref",
        /// A tended PR's requests or commands by authors who may not steer
        /// it were left out (docs/security.md "Who may steer a PR").
        TendIgnored => "tend_ignored",
        /// The sandbox's proxy refused connections of a call
        /// (docs/security.md#the-sandbox): its hosts, for a person.
        SandboxRefused => "sandbox_refused",
    }
}

text_set! {
    /// Where a pushed branch's PR stands in the ledger (`pull_requests.state`).
    PrRecord, "PR state" {
        /// Pushed without GitHub access: the PR was never asked for.
        Planned => "planned",
        /// Pushed; opening the PR failed (the next run retries).
        PrFailed => "pr_failed",
        /// The PR is open.
        Open => "open",
        /// The PR was merged.
        Merged => "merged",
        /// The pushed branch is no longer on the remote: the work is redone.
        Gone => "gone",
        /// A person closed the PR without merging it (`report --history`).
        Closed => "closed",
    }
}

text_set! {
    /// Where a PR's checks on GitHub stand at the end of the night
    /// (`ci_watches.ci_state`; docs/github.md#ci). Decided in `run`.
    CiState, "CI state" {
        /// Every required check succeeded on the PR's head.
        Green => "ci_green",
        /// A required check failed, and the fix budget is spent, a fix is
        /// not allowed, or the check fails on the base too.
        Failed => "ci_failed",
        /// Not conclusive before `ci_wait` or the deadline.
        Pending => "ci_pending",
        /// No required check known and none reported (never shown as green).
        None => "ci_none",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The members of `CHECK (column IN (...))` for `column` in the
    /// migrations: the last migration that sets it wins, or with `first`
    /// the first (`runs.kind`, not the later `plan_contracts.kind`).
    fn check_set(column: &str, first: bool) -> Vec<String> {
        let mut files: Vec<_> =
            std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"))
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
        files.sort();
        let sql: String = files
            .iter()
            .map(|p| std::fs::read_to_string(p).unwrap())
            .collect();
        let pattern = format!("CHECK ({column} IN");
        let start = if first {
            sql.find(&pattern)
        } else {
            sql.rfind(&pattern)
        }
        .unwrap_or_else(|| panic!("no CHECK for {column}"));
        let list = &sql[start..];
        let open = list.find("IN").expect("IN") + 2;
        let list = &list[open..];
        let list = &list[list.find('(').expect("(") + 1..list.find(')').expect(")")];
        list.split(',')
            .map(|s| s.trim().trim_matches('\'').to_string())
            .collect()
    }

    fn round_trips<T>(all: &[T])
    where
        T: Copy + PartialEq + fmt::Debug + FromStr + serde::Serialize,
        T: std::fmt::Display,
        <T as FromStr>::Err: fmt::Debug,
    {
        for v in all {
            let text = v.to_string();
            assert_eq!(text.parse::<T>().unwrap(), *v);
            assert_eq!(serde_json::to_value(v).unwrap(), serde_json::json!(text));
        }
    }

    #[test]
    fn every_member_round_trips_through_its_text() {
        round_trips(Outcome::ALL);
        round_trips(RunStatus::ALL);
        round_trips(RunKind::ALL);
        round_trips(Phase::ALL);
        round_trips(PrRecord::ALL);
        round_trips(CiState::ALL);
        let rounds: Vec<RoundResult> = std::iter::once(RoundResult::Approved)
            .chain(Outcome::ALL.iter().map(|&o| RoundResult::Ended(o)))
            .collect();
        round_trips(&rounds);
        for o in Outcome::ALL {
            let back: Outcome = serde_json::from_value(serde_json::json!(o.as_str())).unwrap();
            assert_eq!(back, *o);
        }
        assert!("pr_opend".parse::<Outcome>().is_err());
        assert!("".parse::<RunStatus>().is_err());
    }

    #[test]
    fn the_sets_are_the_ledgers_check_sets() {
        let texts = |all: &[&str]| all.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let outcomes: Vec<&str> = Outcome::ALL.iter().map(|o| o.as_str()).collect();
        assert_eq!(texts(&outcomes), check_set("outcome", false));
        let statuses: Vec<&str> = RunStatus::ALL.iter().map(|o| o.as_str()).collect();
        assert_eq!(texts(&statuses), check_set("status", false));
        let kinds: Vec<&str> = RunKind::ALL.iter().map(|o| o.as_str()).collect();
        assert_eq!(texts(&kinds), check_set("kind", true));
        let ci: Vec<&str> = CiState::ALL.iter().map(|o| o.as_str()).collect();
        assert_eq!(texts(&ci), check_set("ci_state", false));
    }

    #[test]
    fn which_outcomes_fail_a_run() {
        let ok: Vec<&str> = Outcome::ALL
            .iter()
            .filter(|o| !o.fails_run())
            .map(|o| o.as_str())
            .collect();
        assert_eq!(
            ok,
            [
                "pr_opened",
                "already_open",
                "already_merged",
                "no_changes",
                "blocked",
                "not_approved",
                "deadline",
                "pr_updated",
                "pr_left_alone",
                "branch_pushed",
                "review_queue_full",
                "quota_reserved"
            ]
        );
        // A failed attempt always fails the run.
        assert!(
            Outcome::ALL
                .iter()
                .all(|o| !o.counts_as_attempt() || o.fails_run())
        );
    }
}
