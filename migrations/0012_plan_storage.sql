-- Storing a plan of 20,000 items fast (issue 12), with the same guarantees.
--
-- Contracts and plans keep their JSON as `json` (the text as sent, checked
-- for syntax) rather than `jsonb`: the few queries into them use `->>`
-- (which `json` has too) or cast one run's rows, and converting 25 MB of
-- contracts to `jsonb` cost a tenth of the insert. A plan's JSON (5 MB for
-- 20,000 items) is compressed with lz4 where the server has it: pglz took
-- 0.1 s of the plan's write.
ALTER TABLE contracts ALTER COLUMN json TYPE json USING json::json;
ALTER TABLE plans ALTER COLUMN json TYPE json USING json::json;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_settings
               WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)) THEN
        ALTER TABLE plans ALTER COLUMN json SET COMPRESSION lz4;
    END IF;
END;
$$;

-- plan_contracts' two foreign keys were checked row by row (two lookups
-- per row, 0.2 s of a 20,000-row insert). The same rule is kept by
-- statement-level triggers: rows inserted or updated must name a stored
-- plan and contract (one query per statement), and a plan or contract
-- still named may not be deleted, have its SHA changed, or be truncated
-- (stricter than the foreign key: not even together with plan_contracts).
-- A deletion first takes a SHARE lock on plan_contracts, so it waits for
-- inserts in flight and then sees their rows, as the keys' row locks did.
ALTER TABLE plan_contracts DROP CONSTRAINT plan_contracts_plan_sha_fkey;
ALTER TABLE plan_contracts DROP CONSTRAINT plan_contracts_contract_sha_fkey;

CREATE FUNCTION nightshift_plan_contracts_refs() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM new_rows n WHERE NOT EXISTS (SELECT 1 FROM plans p WHERE p.sha = n.plan_sha)) THEN
        RAISE EXCEPTION 'nightshift: % on plan_contracts names a plan that is not stored', TG_OP
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    IF EXISTS (SELECT 1 FROM new_rows n WHERE NOT EXISTS (SELECT 1 FROM contracts c WHERE c.sha = n.contract_sha)) THEN
        RAISE EXCEPTION 'nightshift: % on plan_contracts names a contract that is not stored', TG_OP
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER plan_contracts_refs_insert AFTER INSERT ON plan_contracts
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION nightshift_plan_contracts_refs();
CREATE TRIGGER plan_contracts_refs_update AFTER UPDATE ON plan_contracts
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION nightshift_plan_contracts_refs();

-- Before a deletion, SHA change or truncation of plans or contracts: wait
-- for plan_contracts' writers in flight (SHARE conflicts with their ROW
-- EXCLUSIVE), and refuse a truncation while plan_contracts has rows.
CREATE FUNCTION nightshift_referenced_lock() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    LOCK TABLE plan_contracts IN SHARE MODE;
    IF TG_OP = 'TRUNCATE' AND EXISTS (SELECT 1 FROM plan_contracts) THEN
        RAISE EXCEPTION 'nightshift: TRUNCATE on % rejected: plan_contracts names its rows', TG_TABLE_NAME
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NULL;
END;
$$;

-- After a deletion or update of plans (TG_ARGV[0] = 'plan_sha') or
-- contracts ('contract_sha'): no plan_contracts row may name a SHA that
-- is gone.
CREATE FUNCTION nightshift_referenced_kept() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    gone boolean;
BEGIN
    EXECUTE format(
        'SELECT EXISTS (SELECT 1 FROM old_rows o JOIN plan_contracts pc ON pc.%1$I = o.sha
                        WHERE NOT EXISTS (SELECT 1 FROM %2$I t WHERE t.sha = o.sha))',
        TG_ARGV[0], TG_TABLE_NAME) INTO gone;
    IF gone THEN
        RAISE EXCEPTION 'nightshift: % on % rejected: plan_contracts still names the row', TG_OP, TG_TABLE_NAME
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER plans_referenced_lock BEFORE DELETE OR UPDATE OF sha OR TRUNCATE ON plans
    FOR EACH STATEMENT EXECUTE FUNCTION nightshift_referenced_lock();
CREATE TRIGGER contracts_referenced_lock BEFORE DELETE OR UPDATE OF sha OR TRUNCATE ON contracts
    FOR EACH STATEMENT EXECUTE FUNCTION nightshift_referenced_lock();
CREATE TRIGGER plans_referenced_delete AFTER DELETE ON plans
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION nightshift_referenced_kept('plan_sha');
CREATE TRIGGER plans_referenced_update AFTER UPDATE ON plans
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION nightshift_referenced_kept('plan_sha');
CREATE TRIGGER contracts_referenced_delete AFTER DELETE ON contracts
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION nightshift_referenced_kept('contract_sha');
CREATE TRIGGER contracts_referenced_update AFTER UPDATE ON contracts
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION nightshift_referenced_kept('contract_sha');
