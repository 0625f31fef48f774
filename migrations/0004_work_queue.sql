-- The ledger as a work queue (docs/workers.md): several workers, on one host
-- or many, drain one run's items, each item exactly once.

-- The items a run will try, in backlog order: what workers claim from.
-- `done_at` is set once the item ended, whichever worker ended it.
CREATE TABLE run_queue (
    run_id       uuid NOT NULL REFERENCES runs (id),
    position     int NOT NULL,
    item_key     text NOT NULL,
    contract_sha text NOT NULL,
    done_at      timestamptz NULL,
    PRIMARY KEY (run_id, position),
    UNIQUE (run_id, item_key)
);

-- One row per attempt at an item. The id is the fencing token: a write of an
-- attempt commits only while its claim is live (not ended, lease not past,
-- judged by the server's clock so that hosts' clocks do not matter).
CREATE TABLE claims (
    id          bigserial PRIMARY KEY,
    run_id      uuid NOT NULL REFERENCES runs (id),
    item_key    text NOT NULL,
    attempt     int NOT NULL CHECK (attempt >= 1),
    worker      text NOT NULL,
    host        text NOT NULL,
    pid         int NOT NULL,
    claimed_at  timestamptz NOT NULL DEFAULT now(),
    lease_until timestamptz NOT NULL,
    ended_at    timestamptz NULL,
    end_reason  text NULL CHECK (end_reason IN ('finished', 'lost', 'released')),
    UNIQUE (run_id, item_key, attempt)
);
-- At most one live claim per item: the last guard against two workers.
CREATE UNIQUE INDEX claims_one_live ON claims (run_id, item_key) WHERE ended_at IS NULL;

-- A usage limit belongs to an agent account, not to a worker: every worker of
-- the account starts no call of it before `paused_until`.
CREATE TABLE account_pauses (
    id           bigserial PRIMARY KEY,
    account      text NOT NULL,
    paused_until timestamptz NOT NULL,
    run_id       uuid NULL REFERENCES runs (id),
    worker       text NOT NULL,
    message      text NOT NULL,
    at           timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX account_pauses_account ON account_pauses (account, paused_until DESC);

-- The workers of a run, for `status`: what each is doing, and until when its
-- heartbeat vouches for it.
CREATE TABLE workers (
    id           text PRIMARY KEY,
    run_id       uuid NOT NULL REFERENCES runs (id),
    host         text NOT NULL,
    pid          int NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    lease_until  timestamptz NOT NULL,
    item_key     text NULL,
    round        int NULL,
    phase        text NULL,
    stopped_at   timestamptz NULL
);
CREATE INDEX workers_run ON workers (run_id);
