-- An agent account whose credit or billing is exhausted cannot run at all
-- (docs/limits.md#no-credit): its work stops for the night. The item whose
-- call met it, and every later item of the account, ends `no_credit`; the
-- account's pause until the deadline is marked so every worker on any host
-- starts no item of it.
ALTER TABLE run_items DROP CONSTRAINT run_items_outcome_check;
ALTER TABLE run_items ADD CONSTRAINT run_items_outcome_check CHECK (outcome IN
    ('pr_opened', 'already_open', 'already_merged', 'no_changes', 'blocked',
     'not_approved', 'deadline', 'tests_failed', 'review_rejected', 'review_void',
     'rule_broken', 'no_progress', 'budget_exceeded', 'timed_out', 'interrupted',
     'push_failed', 'pr_failed', 'error', 'pr_updated', 'pr_left_alone', 'branch_pushed',
     'review_queue_full', 'no_credit'));
ALTER TABLE account_pauses ADD COLUMN no_credit boolean NOT NULL DEFAULT false;
