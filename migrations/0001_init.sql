-- nightshift ledger, first schema (SPEC §9).
-- Migrations are append-only: never edit this file once released; add 0002_… instead
-- (sqlx checks each applied migration's checksum).
-- Run ids are uuid; every other id is a server-assigned bigserial; every instant is timestamptz.

-- Rejects UPDATE, DELETE and TRUNCATE on tables whose rows are facts once written.
CREATE FUNCTION nightshift_reject_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'nightshift: % on % rejected: its rows are append-only and immutable',
        TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$;

CREATE TABLE plans (
    sha          text PRIMARY KEY,
    repo         text NOT NULL,
    backlog_path text NOT NULL,
    backlog_sha  text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    json         jsonb NOT NULL
);

CREATE TABLE contracts (
    sha        text PRIMARY KEY,
    item_key   text NOT NULL,
    title      text NOT NULL,
    json       jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX contracts_item_key ON contracts (item_key);

CREATE TABLE plan_contracts (
    plan_sha     text NOT NULL REFERENCES plans (sha),
    position     int NOT NULL,
    contract_sha text NOT NULL REFERENCES contracts (sha),
    item_index   int NOT NULL,
    blocked      text NULL,
    PRIMARY KEY (plan_sha, position)
);
CREATE INDEX plan_contracts_contract ON plan_contracts (contract_sha);

-- An approval binds to exactly one plan (drain) or one contract (run); SPEC §4.
CREATE TABLE approvals (
    id           uuid PRIMARY KEY,
    plan_sha     text NULL REFERENCES plans (sha),
    contract_sha text NULL REFERENCES contracts (sha),
    repo         text NOT NULL,
    approved_by  text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    CONSTRAINT approvals_exactly_one_target
        CHECK ((plan_sha IS NULL) <> (contract_sha IS NULL)),
    CONSTRAINT approvals_expire_after_creation CHECK (expires_at > created_at)
);
CREATE INDEX approvals_plan_sha ON approvals (plan_sha);
CREATE INDEX approvals_contract_sha ON approvals (contract_sha);
CREATE TRIGGER approvals_immutable BEFORE UPDATE OR DELETE ON approvals
    FOR EACH ROW EXECUTE FUNCTION nightshift_reject_change();
CREATE TRIGGER approvals_no_truncate BEFORE TRUNCATE ON approvals
    FOR EACH STATEMENT EXECUTE FUNCTION nightshift_reject_change();

CREATE TABLE runs (
    id               uuid PRIMARY KEY,
    repo             text NOT NULL,
    kind             text NOT NULL CHECK (kind IN ('drain', 'run')),
    plan_sha         text NOT NULL,
    approval_id      uuid NULL REFERENCES approvals (id),
    status           text NOT NULL CHECK (status IN
                         ('running', 'completed', 'stopped_deadline', 'stopped_signal', 'crashed')),
    started_at       timestamptz NOT NULL DEFAULT now(),
    ended_at         timestamptz NULL,
    deadline         timestamptz NULL,
    timezone         text NOT NULL,
    host             text NOT NULL,
    pid              int NOT NULL,
    phase            text NULL,
    current_item_key text NULL,
    current_round    int NULL,
    sleeping_until   timestamptz NULL,
    sleeping_agent   text NULL,
    heartbeat_at     timestamptz NOT NULL DEFAULT now(),
    exit_code        int NULL
);
CREATE INDEX runs_repo_started ON runs (repo, started_at DESC);
CREATE INDEX runs_status ON runs (status);

-- Inserting this row consumes the approval; the primary key makes it single use (SPEC §4).
CREATE TABLE approval_uses (
    approval_id uuid PRIMARY KEY REFERENCES approvals (id),
    run_id      uuid NOT NULL REFERENCES runs (id),
    used_at     timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE run_items (
    id           bigserial PRIMARY KEY,
    run_id       uuid NOT NULL REFERENCES runs (id),
    item_key     text NOT NULL,
    contract_sha text NOT NULL,
    item_index   int NOT NULL,
    title        text NOT NULL,
    outcome      text NULL CHECK (outcome IN
                     ('pr_opened', 'already_open', 'already_merged', 'no_changes', 'blocked',
                      'not_approved', 'deadline', 'tests_failed', 'review_rejected', 'review_void',
                      'rule_broken', 'no_progress', 'budget_exceeded', 'timed_out', 'interrupted',
                      'push_failed', 'pr_failed', 'error')),
    reason       text NULL,
    question     text NULL,
    branch       text NULL,
    pr_number    bigint NULL,
    pr_url       text NULL,
    rounds       int NOT NULL DEFAULT 0,
    tokens       bigint NOT NULL DEFAULT 0,
    cost_usd     double precision NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    ended_at     timestamptz NULL,
    pr_body      text NULL,
    UNIQUE (run_id, item_key)
);
CREATE INDEX run_items_item_key ON run_items (item_key);

CREATE TABLE rounds (
    id          bigserial PRIMARY KEY,
    run_item_id bigint NOT NULL REFERENCES run_items (id),
    n           int NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT now(),
    ended_at    timestamptz NULL,
    result      text NULL,
    diff_hash   text NULL,
    failure_sig text NULL,
    feedback    text NULL,
    UNIQUE (run_item_id, n)
);

CREATE TABLE agent_calls (
    id          bigserial PRIMARY KEY,
    run_item_id bigint NOT NULL REFERENCES run_items (id),
    round_id    bigint NULL REFERENCES rounds (id),
    role        text NOT NULL,
    kind        text NOT NULL,
    argv        jsonb NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT now(),
    duration_ms bigint NOT NULL,
    exit_code   int NULL,
    timed_out   boolean NOT NULL DEFAULT false,
    tokens_in   bigint NULL,
    tokens_out  bigint NULL,
    cost_usd    double precision NULL,
    limit_kind  text NULL,
    stdout_tail text NOT NULL DEFAULT '',
    stderr_tail text NOT NULL DEFAULT '',
    meta        jsonb NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX agent_calls_run_item ON agent_calls (run_item_id);

CREATE TABLE gate_runs (
    id          bigserial PRIMARY KEY,
    round_id    bigint NOT NULL REFERENCES rounds (id),
    command     text NOT NULL,
    exit_code   int NULL,
    timed_out   boolean NOT NULL DEFAULT false,
    duration_ms bigint NOT NULL,
    output_tail text NOT NULL DEFAULT ''
);
CREATE INDEX gate_runs_round ON gate_runs (round_id);

CREATE TABLE reviews (
    id          bigserial PRIMARY KEY,
    round_id    bigint NOT NULL REFERENCES rounds (id),
    verdict     text NOT NULL,
    findings    jsonb NOT NULL DEFAULT '[]'::jsonb,
    void_reason text NULL
);
CREATE INDEX reviews_round ON reviews (round_id);

CREATE TABLE proofs (
    id                 bigserial PRIMARY KEY,
    round_id           bigint NOT NULL REFERENCES rounds (id),
    base               text NOT NULL,
    head_before        text NOT NULL,
    head_after         text NOT NULL,
    changed            jsonb NOT NULL,
    claimed_not_in_git jsonb NOT NULL,
    out_of_scope       jsonb NOT NULL,
    head_moved         boolean NOT NULL,
    branch_switched    boolean NOT NULL,
    diff_hash          text NOT NULL
);
CREATE INDEX proofs_round ON proofs (round_id);

CREATE TABLE limit_sleeps (
    id          bigserial PRIMARY KEY,
    run_id      uuid NOT NULL REFERENCES runs (id),
    run_item_id bigint NULL REFERENCES run_items (id),
    agent       text NOT NULL,
    kind        text NOT NULL,
    message     text NOT NULL,
    slept_from  timestamptz NOT NULL,
    slept_until timestamptz NOT NULL,
    resets_at   timestamptz NULL
);
CREATE INDEX limit_sleeps_run ON limit_sleeps (run_id);

CREATE TABLE pull_requests (
    id           bigserial PRIMARY KEY,
    repo         text NOT NULL,
    item_key     text NOT NULL,
    contract_sha text NOT NULL,
    run_id       uuid NOT NULL REFERENCES runs (id),
    branch       text NOT NULL,
    number       bigint NULL,
    url          text NULL,
    state        text NOT NULL,
    body         text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (repo, item_key, branch)
);
CREATE INDEX pull_requests_item_key ON pull_requests (item_key);

CREATE TABLE findings (
    id           bigserial PRIMARY KEY,
    run_item_id  bigint NOT NULL REFERENCES run_items (id),
    title        text NOT NULL,
    issue_number bigint NULL,
    url          text NULL
);
CREATE INDEX findings_run_item ON findings (run_item_id);

-- The event log: the server assigns `seq`; rows are never changed (SPEC §9).
CREATE TABLE events (
    seq    bigserial PRIMARY KEY,
    run_id uuid NULL REFERENCES runs (id),
    at     timestamptz NOT NULL DEFAULT now(),
    kind   text NOT NULL,
    data   jsonb NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX events_run ON events (run_id, seq);
CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION nightshift_reject_change();
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events
    FOR EACH STATEMENT EXECUTE FUNCTION nightshift_reject_change();

-- Who holds a repo's drain lock (the lock itself is a PostgreSQL advisory lock held by
-- a dedicated connection; this row only names the holder for the refusal message).
CREATE TABLE repo_locks (
    repo        text PRIMARY KEY,
    host        text NOT NULL,
    pid         int NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT now(),
    backend_pid int NOT NULL
);
