-- The second night: tending nightshift's open PRs (docs/github.md "The second night").
-- Append-only like every migration: never edit this file once released.

-- The branch head nightshift last pushed to a PR's branch, and when: a head
-- that differs on GitHub means a person pushed, and the PR is left alone;
-- comments older than the push were already answered.
ALTER TABLE pull_requests ADD COLUMN head_sha text NULL;
ALTER TABLE pull_requests ADD COLUMN head_pushed_at timestamptz NULL;

-- Outcomes of a tended PR: `pr_updated` (pushed to the same branch, body
-- updated, one answering comment) and `pr_left_alone` (a person pushed, the
-- hands-off label, `/nightshift stop`, or closed/merged meanwhile).
ALTER TABLE run_items DROP CONSTRAINT run_items_outcome_check;
ALTER TABLE run_items ADD CONSTRAINT run_items_outcome_check CHECK (outcome IN
    ('pr_opened', 'already_open', 'already_merged', 'no_changes', 'blocked',
     'not_approved', 'deadline', 'tests_failed', 'review_rejected', 'review_void',
     'rule_broken', 'no_progress', 'budget_exceeded', 'timed_out', 'interrupted',
     'push_failed', 'pr_failed', 'error', 'pr_updated', 'pr_left_alone'));

-- A plan's tend cards sit in plan_contracts beside its items, so approving
-- the plan approves acting on them; `kind` tells them apart (a tend card has
-- no backlog index: item_index 0) and `pr_number` names the PR it tends.
ALTER TABLE plan_contracts ADD COLUMN kind text NOT NULL DEFAULT 'item'
    CHECK (kind IN ('item', 'tend'));
ALTER TABLE plan_contracts ADD COLUMN pr_number bigint NULL;
ALTER TABLE plan_contracts ADD CONSTRAINT plan_contracts_tend_names_its_pr
    CHECK ((kind = 'tend') = (pr_number IS NOT NULL));
