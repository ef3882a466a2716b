-- The insert trigger holds each tenant of a statement's new jobs once, not once per job. Since
-- 0025 its events statement joined every new row to its tenant FOR KEY SHARE (a primary-key
-- probe and a tuple lock per job, though a batch names one tenant), then scanned the new rows
-- again to count them. Now the new rows are grouped by tenant once: each distinct tenant is
-- held FOR KEY SHARE through its primary key (a LATERAL subquery, so a plain probe whatever
-- the planner thinks of the tenants table: a join let it hash a scan of every tenant), a
-- tenant not found (missing, or deleted by a transaction that committed while this one waited
-- for its row) refuses the insert with foreign_key_violation (SQLSTATE 23503) as before, and
-- the same pass says whether a job is queued. The events are written from the new rows with
-- no join, in the same statement. Same guarantees: one event per job, the tenant held until
-- commit, one `q:` wake-up per statement that queued a job. EXPLAIN (ANALYZE) of a 500-row
-- insert, medians of 60: trigger 4.0 -> 3.0 ms; a one-row insert unchanged within noise
-- (backend CPU 248 vs 250 us); PostgreSQL CPU per job of submit_many(500) -5 to -8 % (median
-- of alternated pairs; 2026-12-03, branch enqueue-trigger, bench/notes.md).
CREATE OR REPLACE FUNCTION jobgate_jobs_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    wanted integer;
    held integer;
    any_queued boolean;
BEGIN
    WITH logged AS (
        INSERT INTO job_events (job_id, seq, from_state, to_state, actor, reason, applied,
                                created_at)
        SELECT n.id, n.event_seq, NULL, n.state, n.transition_actor, n.transition_reason, true,
               n.created_at
          FROM new_rows AS n
    )
    SELECT count(*), count(t.id), coalesce(bool_or(w.queued), false)
      INTO wanted, held, any_queued
      FROM (SELECT n.tenant_id, bool_or(n.state = 'queued') AS queued
              FROM new_rows AS n
             GROUP BY n.tenant_id) AS w
      LEFT JOIN LATERAL (SELECT t.id FROM tenants AS t WHERE t.id = w.tenant_id
                         FOR KEY SHARE) AS t ON true;
    IF held < wanted THEN
        RAISE EXCEPTION 'insert or update on table "jobs" names a tenant that does not exist'
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    IF any_queued THEN
        PERFORM pg_notify('jobgate', 'q:');
    END IF;
    RETURN NULL;
END;
$$;
