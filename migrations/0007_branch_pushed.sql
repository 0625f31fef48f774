-- A branch pushed without GitHub access has no PR: its item ends
-- `branch_pushed` rather than `pr_opened` (which then always means a PR on
-- GitHub) or `already_open` (docs/loop.md).
ALTER TABLE run_items DROP CONSTRAINT run_items_outcome_check;
ALTER TABLE run_items ADD CONSTRAINT run_items_outcome_check CHECK (outcome IN
    ('pr_opened', 'already_open', 'already_merged', 'no_changes', 'blocked',
     'not_approved', 'deadline', 'tests_failed', 'review_rejected', 'review_void',
     'rule_broken', 'no_progress', 'budget_exceeded', 'timed_out', 'interrupted',
     'push_failed', 'pr_failed', 'error', 'pr_updated', 'pr_left_alone', 'branch_pushed'));
