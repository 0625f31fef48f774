-- The repository's own CI of each PR a run pushed (docs/github.md#ci,
-- docs/ledger.md#tables): one watch per item of a run, following the
-- checks of the PR's current head, and the checks it saw. A watch without
-- `ci_state` is still going (or its run died: the next run's report says
-- `ci_pending`).
CREATE TABLE ci_watches (
    id           bigserial PRIMARY KEY,
    run_id       uuid NOT NULL REFERENCES runs (id),
    item_key     text NOT NULL,
    pr_number    bigint NOT NULL,
    -- The head commit watched now (a fix round's push moves it).
    head_sha     text NOT NULL,
    -- The base commit the run started from (for "fails on the base too").
    base_sha     text NULL,
    ci_state     text NULL CHECK (ci_state IN ('ci_green', 'ci_failed', 'ci_pending', 'ci_none')),
    reason       text NULL,
    -- No required check was known: every reported check counted as required.
    all_reported boolean NOT NULL DEFAULT false,
    fix_rounds   integer NOT NULL DEFAULT 0 CHECK (fix_rounds >= 0),
    started_at   timestamptz NOT NULL DEFAULT now(),
    -- `ci_wait` after the latest push, capped by the run's deadline.
    wait_until   timestamptz NOT NULL,
    ended_at     timestamptz NULL,
    UNIQUE (run_id, item_key)
);
CREATE INDEX ci_watches_item_key ON ci_watches (item_key);

CREATE TABLE ci_checks (
    watch_id   bigint NOT NULL REFERENCES ci_watches (id) ON DELETE CASCADE,
    head_sha   text NOT NULL,
    name       text NOT NULL,
    required   boolean NOT NULL,
    -- GitHub's own word: a conclusion (`success`, `failure`, …) or, while
    -- running, a status (`queued`, `in_progress`, `pending`).
    conclusion text NOT NULL,
    url        text NULL,
    seen_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (watch_id, head_sha, name)
);
