-- Fix rounds for a red required check (docs/github.md#fix-rounds,
-- docs/ledger.md#tables). A watch that wants a fix round holds the failure
-- the round's writer is told (`fix_failure`, masked and bounded) and puts
-- its item back on the run's queue, where a worker claims it like an item
-- (leases, fencing); the round's end clears it. `fix_note` says how the
-- latest fix round ended (for the reason of a watch whose budget is spent).
ALTER TABLE ci_watches ADD COLUMN fix_failure text NULL;
ALTER TABLE ci_watches ADD COLUMN fix_checks text NULL;
ALTER TABLE ci_watches ADD COLUMN fix_note text NULL;

-- One row per fix round of a watch: the checks it was to repair, the head
-- it started from, the head it pushed (none: it pushed nothing), how it
-- ended, and the worker that ran it.
CREATE TABLE ci_fix_rounds (
    watch_id   bigint NOT NULL REFERENCES ci_watches (id) ON DELETE CASCADE,
    n          integer NOT NULL CHECK (n >= 1),
    checks     text NOT NULL,
    from_head  text NOT NULL,
    to_head    text NULL,
    result     text NOT NULL,
    worker     text NULL,
    at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (watch_id, n)
);
