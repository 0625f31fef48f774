-- Each approval carries an HMAC-SHA256 by a key kept in nightshift's data
-- directory (docs/contract.md, docs/security.md): a row inserted by anyone
-- else who can reach the database carries none, or a wrong one, and is
-- refused. Rows from before this migration are unsigned: approve again.
ALTER TABLE approvals ADD COLUMN signature text NULL;
