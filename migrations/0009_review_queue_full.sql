-- An item not started because `max_open_prs` nightshift PRs of the
-- repository are open ends `review_queue_full`, not a failure
-- (docs/loop.md "Before the checkout").
ALTER TABLE run_items DROP CONSTRAINT run_items_outcome_check;
ALTER TABLE run_items ADD CONSTRAINT run_items_outcome_check CHECK (outcome IN
    ('pr_opened', 'already_open', 'already_merged', 'no_changes', 'blocked',
     'not_approved', 'deadline', 'tests_failed', 'review_rejected', 'review_void',
     'rule_broken', 'no_progress', 'budget_exceeded', 'timed_out', 'interrupted',
     'push_failed', 'pr_failed', 'error', 'pr_updated', 'pr_left_alone', 'branch_pushed',
     'review_queue_full'));
