-- The run's cost cap (`max_cost_usd_per_run`, USD) as the plan that started
-- the run showed it (docs/workers.md "What holds across all workers"): every
-- worker on every host, and a drain that resumes the run, hold the run to it
-- rather than to their own config. NULL for runs older than this column:
-- each host's own config then applies, as before.
ALTER TABLE runs ADD COLUMN cost_cap_usd double precision NULL
    CHECK (cost_cap_usd IS NULL OR cost_cap_usd >= 0);
