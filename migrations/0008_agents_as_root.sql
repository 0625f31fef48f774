-- A run whose agents ran as root without `agent_user` (config
-- `agents_as_root = true`): they could read everything nightshift held,
-- and the report says so (docs/security.md).
ALTER TABLE runs ADD COLUMN agents_as_root boolean NOT NULL DEFAULT false;
