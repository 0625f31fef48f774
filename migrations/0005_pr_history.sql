-- What became of each PR after the night (docs/commands.md#report-history):
-- asked from GitHub by `report --history` and remembered here, so a later
-- history without GitHub access still knows what was merged and when.
ALTER TABLE pull_requests ADD COLUMN merged_at timestamptz NULL;
ALTER TABLE pull_requests ADD COLUMN closed_at timestamptz NULL;
ALTER TABLE pull_requests ADD COLUMN checked_at timestamptz NULL;
