-- The hot statements log themselves. A claim (job_claim) and a batched finish (job_finish)
-- write the job_events rows of what they moved in their own statement (a data-modifying CTE
-- over the rows they updated, which knows where each came from without a join) and set the
-- transaction-local jobgate.transitions_logged to 'moved'; a heartbeat (job_heartbeat), which
-- moves nothing, sets it to 'unmoved'. The job trigger clears the setting (it covers one
-- statement) and then, for 'moved', skips its event insert and the joins of its transition
-- tables old_rows and new_rows (wide rows: request, result, 40+ columns), sending the wake-ups
-- from new_rows alone (such a statement moves every row it updates and requests no cancel);
-- the outbox fan-out is unchanged. For 'unmoved' there is nothing to log, wake or send. Every
-- other UPDATE of jobs is logged by the trigger exactly as before (0008). The figures are in
-- bench/notes.md (2026-12-02, pg-finish). SQLite's 0024 is a no-op.

CREATE OR REPLACE FUNCTION jobgate_jobs_after_update() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    chunk text;
    logging text;
BEGIN
    -- Set by job_claim and job_finish ('moved': the statement wrote the events of what it
    -- moved) and by job_heartbeat ('unmoved'), for this statement only.
    logging := coalesce(current_setting('jobgate.transitions_logged', true), '');
    IF logging <> '' THEN
        PERFORM set_config('jobgate.transitions_logged', '', true);
    END IF;
    IF logging = 'unmoved' THEN
        RETURN NULL;
    ELSIF logging <> 'moved' THEN
        INSERT INTO job_events (job_id, seq, from_state, to_state, actor, reason, applied,
                                created_at)
        SELECT n.id, n.event_seq, o.state, n.state, n.transition_actor, n.transition_reason,
               true, n.updated_at
          FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
         WHERE n.state IS DISTINCT FROM o.state
            OR n.cancel_requested_at IS DISTINCT FROM o.cancel_requested_at;
    END IF;

    -- One outbox row per target: the tenant's endpoints whose filter admits the event (an
    -- empty filter admits every event except the opt-in ones), then the job's own URL. Only
    -- a job with a webhook of its own or a tenant with an enabled endpoint can have targets:
    -- when the statement moved none, the fan-out below would insert nothing, so skip it.
    IF EXISTS (SELECT 1 FROM new_rows AS n WHERE n.webhook IS NOT NULL)
       OR EXISTS (SELECT 1 FROM webhook_endpoints AS e
                   WHERE NOT e.disabled
                     AND e.tenant_id IN (SELECT DISTINCT n.tenant_id FROM new_rows AS n)) THEN
        WITH moved AS (
            SELECT n.*, jobgate_event_type(n.api, n.state, n.result ->> 'status') AS event_type
              FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
             WHERE n.state IS DISTINCT FROM o.state
        )
        INSERT INTO outbox (id, event_id, tenant_id, job_id, event_type, target, endpoint_id, url,
                            series, job_status, created_at, next_attempt_at)
        SELECT 'msg_' || replace(gen_random_uuid()::text, '-', ''),
               jobgate_event_id(m.id, m.event_type, m.series),
               m.tenant_id, m.id, m.event_type, e.id, e.id, NULL,
               m.series, m.state, m.updated_at, m.updated_at
          FROM moved AS m
          JOIN webhook_endpoints AS e ON e.tenant_id = m.tenant_id AND NOT e.disabled
         WHERE m.event_type IS NOT NULL
           AND (e.event_types ? m.event_type
                OR (jsonb_array_length(e.event_types) = 0
                    AND m.event_type NOT IN ('job.running', 'response.in_progress')))
        UNION ALL
        SELECT 'msg_' || replace(gen_random_uuid()::text, '-', ''),
               jobgate_event_id(m.id, m.event_type, m.series),
               m.tenant_id, m.id, m.event_type, 'job', NULL, m.webhook ->> 'url',
               m.series, m.state, m.updated_at, m.updated_at
          FROM moved AS m
         WHERE m.event_type IS NOT NULL
           AND m.webhook IS NOT NULL
           AND (coalesce(m.webhook -> 'event_types', '[]'::jsonb) ? m.event_type
                OR (jsonb_array_length(coalesce(m.webhook -> 'event_types', '[]'::jsonb)) = 0
                    AND m.event_type NOT IN ('job.running', 'response.in_progress')))
        ON CONFLICT (job_id, event_type, target, series) DO NOTHING;
    END IF;

    IF logging = 'moved' THEN
        -- Every row moved (queued -> running, running -> another state), none was asked to
        -- cancel: the wake-ups need no join with old_rows.
        FOR chunk IN
            SELECT string_agg(changed.id, ',')
              FROM (SELECT n.id, (row_number() OVER ()) / 200 AS part
                      FROM new_rows AS n) AS changed
             GROUP BY changed.part
        LOOP
            PERFORM pg_notify('jobgate', 'j:' || chunk);
        END LOOP;
        IF EXISTS (SELECT 1 FROM new_rows AS n WHERE n.state = 'queued') THEN
            PERFORM pg_notify('jobgate', 'q:');
        END IF;
        RETURN NULL;
    END IF;
    FOR chunk IN
        SELECT string_agg(changed.id, ',')
          FROM (SELECT n.id, (row_number() OVER ()) / 200 AS part
                  FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
                 WHERE n.state IS DISTINCT FROM o.state
                    OR n.cancel_requested_at IS DISTINCT FROM o.cancel_requested_at) AS changed
         GROUP BY changed.part
    LOOP
        PERFORM pg_notify('jobgate', 'j:' || chunk);
    END LOOP;
    FOR chunk IN
        SELECT string_agg(asked.id, ',')
          FROM (SELECT n.id, (row_number() OVER ()) / 200 AS part
                  FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
                 WHERE n.state = 'running' AND o.cancel_requested_at IS NULL
                   AND n.cancel_requested_at IS NOT NULL) AS asked
         GROUP BY asked.part
    LOOP
        PERFORM pg_notify('jobgate', 'c:' || chunk);
    END LOOP;
    IF EXISTS (SELECT 1 FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
                WHERE n.state = 'queued' AND o.state <> 'queued') THEN
        PERFORM pg_notify('jobgate', 'q:');
    END IF;
    RETURN NULL;
END;
$$;

-- CREATE OR REPLACE reset the setting of 0013; the joins above must stay hashed.
ALTER FUNCTION jobgate_jobs_after_update() SET enable_nestloop = off;
