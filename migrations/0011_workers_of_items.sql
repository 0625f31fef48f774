-- Several workers drain one run (docs/workers.md): each item names the
-- worker that ran its last attempt, each round the attempt it belongs to
-- (a takeover starts again at round 1 from a clean checkout), and the run
-- holds the base commit every worker on every host builds from.
ALTER TABLE run_items ADD COLUMN worker text NULL;
ALTER TABLE rounds ADD COLUMN attempt int NOT NULL DEFAULT 1 CHECK (attempt >= 1);
ALTER TABLE rounds DROP CONSTRAINT rounds_run_item_id_n_key;
ALTER TABLE rounds ADD CONSTRAINT rounds_item_attempt_n UNIQUE (run_item_id, attempt, n);
ALTER TABLE runs ADD COLUMN base_commit text NULL;
