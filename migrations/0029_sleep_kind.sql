-- What a sleeping run waits for (docs/limits.md): `usage_limit` (an
-- agent's usage limit, until its reset) or `quota_reserve` (a reserve stop
-- of a long window that ends tonight). NULL for rows written before: they
-- were usage limits.
ALTER TABLE runs ADD COLUMN sleeping_kind text;
