-- Cheaper transitions. The job trigger skips the outbox fan-out (a join of the statement's
-- old and new rows, the event type and id of each, a lookup of its tenant's endpoints) when no
-- job the statement touched carries a webhook of its own and none of their tenants has an
-- enabled endpoint: the fan-out could insert nothing then, and with webhooks unused (or used
-- by a few tenants) that is most claims and finishes. The function is otherwise restated
-- unchanged from 0005. SQLite's 0008 moves its trigger's event type from Python to SQL.

CREATE OR REPLACE FUNCTION jobgate_jobs_after_update() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    chunk text;
BEGIN
    INSERT INTO job_events (job_id, seq, from_state, to_state, actor, reason, applied, created_at)
    SELECT n.id, n.event_seq, o.state, n.state, n.transition_actor, n.transition_reason, true,
           n.updated_at
      FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
     WHERE n.state IS DISTINCT FROM o.state
        OR n.cancel_requested_at IS DISTINCT FROM o.cancel_requested_at;

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
