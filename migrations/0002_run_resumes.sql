-- A run that resumes a crashed run under its approval (SPEC §4) names it, so
-- the crashed run is resumed once and the report can tell the two apart.
ALTER TABLE runs ADD COLUMN resumes uuid REFERENCES runs (id);
CREATE INDEX runs_resumes_idx ON runs (resumes);
