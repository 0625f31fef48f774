-- A run is bound to its approval (docs/contract.md#the-runs-binding): the
-- binding names the run, its plan SHA, its approval, its start (server
-- time), the run it resumes and the approval's use, and carries an
-- HMAC-SHA256 of them by the approval key. Every host that joins or resumes
-- the run checks it, so a ledger writer without the key cannot point a run
-- at another approval or plan. Runs from before this migration carry none
-- and are not resumed (docs/security.md).
ALTER TABLE runs ADD COLUMN binding jsonb NULL;
CREATE INDEX runs_approval_id ON runs (approval_id);

-- The record of a use is a fact once written, like an approval and an
-- event: deleting it must not make an approval usable again.
CREATE TRIGGER approval_uses_immutable BEFORE UPDATE OR DELETE ON approval_uses
    FOR EACH ROW EXECUTE FUNCTION nightshift_reject_change();
CREATE TRIGGER approval_uses_no_truncate BEFORE TRUNCATE ON approval_uses
    FOR EACH STATEMENT EXECUTE FUNCTION nightshift_reject_change();
