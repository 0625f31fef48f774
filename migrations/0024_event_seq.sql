-- The events' commit sequence (docs/serve.md#events): every event gets a
-- number in the order its transaction committed, without gaps, and a NOTIFY
-- on channel `nightshift_events` carrying only that number, delivered at
-- commit. `seq` (bigserial) stays the row's key, but its values are taken
-- at insert time: a transaction that took seq 7 can commit after one that
-- took seq 8, so a reader that waits for "everything after 7" would skip
-- one. `commit_seq` is given by a deferred trigger that runs at commit,
-- after every other statement of the transaction, under the one row lock of
-- `event_counter`: committing transactions that wrote events are numbered
-- one at a time, and since that lock is the last one any of them takes, it
-- cannot close a deadlock. A transaction that rolls back numbers nothing.

CREATE TABLE event_counter (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    last     bigint NOT NULL
);

ALTER TABLE events ADD COLUMN commit_seq bigint NULL UNIQUE;

-- Rows written before this migration keep their order.
ALTER TABLE events DISABLE TRIGGER events_append_only;
UPDATE events e SET commit_seq = n.k
  FROM (SELECT seq, row_number() OVER (ORDER BY seq) AS k FROM events) n
 WHERE n.seq = e.seq;
ALTER TABLE events ENABLE TRIGGER events_append_only;
INSERT INTO event_counter (last) SELECT COALESCE(max(commit_seq), 0) FROM events;

CREATE FUNCTION nightshift_number_event() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    k bigint;
BEGIN
    UPDATE event_counter SET last = last + 1 RETURNING last INTO k;
    UPDATE events SET commit_seq = k WHERE seq = NEW.seq;
    PERFORM pg_notify('nightshift_events', k::text);
    RETURN NULL;
END;
$$;

CREATE CONSTRAINT TRIGGER events_number AFTER INSERT ON events
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION nightshift_number_event();

-- Events stay facts: the one change allowed is the numbering above (from
-- NULL, nothing else changed), and a row is deleted only by the pruning of
-- old events (`ledger::events::prune`), which says so for its transaction.
CREATE FUNCTION nightshift_events_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.commit_seq IS NULL AND NEW.commit_seq IS NOT NULL
       AND NEW.seq = OLD.seq AND NEW.run_id IS NOT DISTINCT FROM OLD.run_id
       AND NEW.at = OLD.at AND NEW.kind = OLD.kind AND NEW.data = OLD.data THEN
        RETURN NEW;
    END IF;
    IF TG_OP = 'DELETE' AND current_setting('nightshift.prune_events', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'nightshift: % on % rejected: its rows are append-only and immutable',
        TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$;

DROP TRIGGER events_append_only ON events;
CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events
    FOR EACH ROW EXECUTE FUNCTION nightshift_events_guard();

CREATE INDEX events_at ON events (at);
