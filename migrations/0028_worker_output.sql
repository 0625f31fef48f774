-- The live end of a running call's output, per worker (docs/serve.md#live-output):
-- the process's output task writes the masked last lines of the call its
-- worker runs every few seconds, so that a board on any host sharing the
-- ledger shows what the agent is doing before its call ends. Cleared when
-- the worker moves to another item.
ALTER TABLE workers
    ADD COLUMN output_tail text,
    ADD COLUMN output_at timestamptz;
