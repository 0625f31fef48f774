-- Quota gauges (docs/limits.md#gauges): every agent call's readings of its
-- account's usage windows, as the agent CLI reported them (claude's
-- `rate_limit_event`, codex's `rate_limits` snapshot), kept as read: a value
-- out of range or a reset in the past is recorded, never refused.
CREATE TABLE quota_readings (
    id              bigserial PRIMARY KEY,
    account         text NOT NULL,
    source          text NOT NULL CHECK (source IN ('claude', 'codex')),
    run_id          uuid NULL REFERENCES runs (id),
    run_item_id     bigint NULL REFERENCES run_items (id),
    role            text NULL,
    round           integer NULL,
    quota_window    text NOT NULL,
    window_minutes  bigint NULL,
    percent         double precision NULL,
    raw_utilization text NULL,
    status          text NULL,
    resets_at       timestamptz NULL,
    overage_in_use  boolean NULL,
    overage_status  text NULL,
    raw             jsonb NOT NULL,
    read_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX quota_readings_account ON quota_readings (account, quota_window, read_at DESC);
CREATE INDEX quota_readings_run ON quota_readings (run_id, read_at);

-- The reserve (docs/limits.md#reserve): an account whose long window reached
-- `100% - reserve` starts no new item or round until `until` (the window's
-- reset), on every worker and host. A later reading under the reserve (the
-- window reset) ends it early (`until` moved to then).
CREATE TABLE quota_stops (
    id           bigserial PRIMARY KEY,
    account      text NOT NULL,
    quota_window text NOT NULL,
    percent      double precision NOT NULL,
    reserve      double precision NOT NULL,
    resets_at    timestamptz NULL,
    until        timestamptz NOT NULL,
    run_id       uuid NULL REFERENCES runs (id),
    worker       text NOT NULL,
    at           timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX quota_stops_account ON quota_stops (account, until DESC);

-- Items not started because their account's quota is kept for the day.
ALTER TABLE run_items DROP CONSTRAINT run_items_outcome_check;
ALTER TABLE run_items ADD CONSTRAINT run_items_outcome_check CHECK (outcome IN
    ('pr_opened', 'already_open', 'already_merged', 'no_changes', 'blocked',
     'not_approved', 'deadline', 'tests_failed', 'review_rejected', 'review_void',
     'rule_broken', 'no_progress', 'budget_exceeded', 'timed_out', 'interrupted',
     'push_failed', 'pr_failed', 'error', 'pr_updated', 'pr_left_alone', 'branch_pushed',
     'review_queue_full', 'no_credit', 'quota_reserved'));
