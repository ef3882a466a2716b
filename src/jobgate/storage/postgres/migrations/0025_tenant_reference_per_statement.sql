-- A job's tenant exists, checked once per statement instead of once per row. The foreign key
-- jobs.tenant_id -> tenants ran a query per inserted row (a quarter of PostgreSQL's CPU per
-- job in a batched insert of 500, 2026-12-02); the insert trigger, which already sees the
-- statement's rows at once, now holds each distinct tenant with FOR KEY SHARE (as the foreign
-- key's check does) and refuses the statement when one is missing. The other side of the
-- reference keeps the foreign key's NO ACTION rule: a tenant that still has jobs cannot be
-- deleted or renamed (tenants_keep_jobs), and a job moved to another tenant is checked as an
-- insert is (jobs_tenant_exists). The error is the foreign key's own: foreign_key_violation.
ALTER TABLE jobs DROP CONSTRAINT jobs_tenant_id_fkey;

CREATE OR REPLACE FUNCTION jobgate_jobs_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    owners integer;
    held integer;
BEGIN
    -- Locked until commit, so that a concurrent delete of a tenant waits for this insert
    -- and then sees its jobs (and an insert after an uncommitted delete finds no row).
    SELECT count(DISTINCT tenant_id) INTO owners FROM new_rows;
    SELECT count(*) INTO held
      FROM (SELECT 1
              FROM tenants AS t
             WHERE t.id = ANY (ARRAY(SELECT DISTINCT tenant_id FROM new_rows))
               FOR KEY SHARE) AS locked;
    IF held < owners THEN
        RAISE EXCEPTION 'insert or update on table "jobs" names a tenant that does not exist'
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    INSERT INTO job_events (job_id, seq, from_state, to_state, actor, reason, applied, created_at)
    SELECT id, event_seq, NULL, state, transition_actor, transition_reason, true, created_at
      FROM new_rows;
    IF EXISTS (SELECT 1 FROM new_rows WHERE state = 'queued') THEN
        PERFORM pg_notify('jobgate', 'q:');
    END IF;
    RETURN NULL;
END;
$$;

CREATE FUNCTION jobgate_job_tenant_exists() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM tenants WHERE id = NEW.tenant_id FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'insert or update on table "jobs" names a tenant that does not exist'
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN NEW;
END;
$$;
-- Fires only for an UPDATE whose SET names tenant_id (none of jobgate's does).
CREATE TRIGGER jobs_tenant_exists BEFORE UPDATE OF tenant_id ON jobs
    FOR EACH ROW WHEN (NEW.tenant_id IS DISTINCT FROM OLD.tenant_id)
    EXECUTE FUNCTION jobgate_job_tenant_exists();

CREATE FUNCTION jobgate_tenants_keep_jobs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- The row is locked before this runs: an insert holding it (FOR KEY SHARE) has committed
    -- or rolled back, and this query's snapshot sees its jobs.
    IF TG_OP = 'UPDATE' AND NEW.id = OLD.id THEN
        RETURN NEW;
    END IF;
    IF EXISTS (SELECT 1 FROM jobs WHERE tenant_id = OLD.id) THEN
        RAISE EXCEPTION 'tenant % still has jobs', OLD.id
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    RETURN CASE TG_OP WHEN 'DELETE' THEN OLD ELSE NEW END;
END;
$$;
CREATE TRIGGER tenants_keep_jobs BEFORE DELETE OR UPDATE OF id ON tenants
    FOR EACH ROW EXECUTE FUNCTION jobgate_tenants_keep_jobs();
