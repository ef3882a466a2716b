-- A job's first event is implied by its row instead of written beside it. Every insert of a
-- job (job_insert, job_insert_idempotent, the new_job_insert fragment of the batched and bulk
-- inserts) creates it 'queued' at event_seq 1 by actor 'api' for reason 'submitted', and
-- created_at, which nothing updates, is when: the row alone says everything its first event
-- row said. Writing that row and its two index entries was about a fifth of PostgreSQL's work
-- per job of a batched enqueue (a 150-job statement 1.9 -> 1.5 ms, 2026-12-03, bench/notes.md).
--
-- - The insert trigger writes a first event only for a row created otherwise (another state,
--   sequence, actor or reason: none today), so the log stays exact for any insert to come.
-- - `job_event_log` is the whole log: the stored events, plus the implied first event of each
--   job that has no stored event 1 (every job inserted before this migration has one: nothing
--   is rewritten, and nothing is read twice). Reads of the log go through it.
-- - jobs_by_creation serves the log's time reads for the implied events as job_events_by_time
--   serves the stored ones: the console reads the hour's newest transitions in order and stops
--   at its cap, so both sides of the view must come ordered (a BRIN index would not: at
--   10,000 jobs/s it would sort the hour's millions of jobs once a minute). Its entry, one
--   ascending timestamp per job, costs an insert ~2 % of what this migration saves.
-- The tenant check and the wake-up are as in 0027.
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
         WHERE (n.state, n.event_seq, n.transition_actor, n.transition_reason)
               IS DISTINCT FROM ('queued', 1, 'api', 'submitted')
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

CREATE VIEW job_event_log AS
SELECT e.job_id, e.seq, e.from_state, e.to_state, e.actor, e.reason, e.applied, e.created_at
  FROM job_events AS e
UNION ALL
SELECT j.id, 1, NULL::text, 'queued', 'api', 'submitted', true, j.created_at
  FROM jobs AS j
 WHERE NOT EXISTS (SELECT 1 FROM job_events AS first WHERE first.job_id = j.id AND first.seq = 1);

CREATE INDEX jobs_by_creation ON jobs (created_at);
