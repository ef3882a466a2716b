-- The job trigger computes the event type of a transition in SQL (a CASE mirroring
-- jobgate.domain.events.event_type_for, as PostgreSQL's jobgate_event_type() does) instead of
-- calling back into Python twice per transition through the jobgate_event_type() function that
-- jobgate registers on each connection. The Python function stays registered for databases
-- not yet migrated; the trigger is otherwise restated unchanged from 0005. SQLite allows no
-- WITH in a trigger, so each branch of the outbox insert states the CASE.

DROP TRIGGER jobs_log_update;

CREATE TRIGGER jobs_log_update AFTER UPDATE ON jobs
WHEN new.state IS NOT old.state OR new.cancel_requested_at IS NOT old.cancel_requested_at
BEGIN
    INSERT INTO job_events (job_id, seq, from_state, to_state, actor, reason, applied, created_at)
    VALUES (new.id, new.event_seq, old.state, new.state, new.transition_actor,
            new.transition_reason, 1, new.updated_at);

    -- One outbox row per target: the tenant's endpoints whose filter admits the event (an
    -- empty filter admits every event except the opt-in ones), then the job's own URL.
    INSERT INTO outbox (id, event_id, tenant_id, job_id, event_type, target, endpoint_id, url,
                        series, job_status, created_at, next_attempt_at)
    SELECT 'msg_' || lower(hex(randomblob(12))),
           jobgate_event_id(new.id, ev.event_type, new.series),
           new.tenant_id, new.id, ev.event_type, e.id, e.id, NULL,
           new.series, new.state, new.updated_at, new.updated_at
      FROM (SELECT CASE
                       WHEN new.state = 'queued' THEN NULL
                       WHEN new.api = 'responses' THEN CASE
                           WHEN new.state = 'running' THEN 'response.in_progress'
                           WHEN new.state = 'succeeded'
                                AND new.result ->> '$.status' = 'incomplete'
                               THEN 'response.incomplete'
                           WHEN new.state = 'succeeded' THEN 'response.completed'
                           WHEN new.state = 'failed' THEN 'response.failed'
                           ELSE 'response.cancelled'  -- cancelled, expired
                       END
                       ELSE 'job.' || new.state
                   END AS event_type) AS ev
      JOIN webhook_endpoints AS e ON e.tenant_id = new.tenant_id AND e.disabled = 0
     WHERE new.state IS NOT old.state
       AND ev.event_type IS NOT NULL
       AND (EXISTS (SELECT 1 FROM json_each(e.event_types) WHERE value = ev.event_type)
            OR (json_array_length(e.event_types) = 0
                AND ev.event_type NOT IN ('job.running', 'response.in_progress')))
    UNION ALL
    SELECT 'msg_' || lower(hex(randomblob(12))),
           jobgate_event_id(new.id, ev.event_type, new.series),
           new.tenant_id, new.id, ev.event_type, 'job', NULL, new.webhook ->> '$.url',
           new.series, new.state, new.updated_at, new.updated_at
      FROM (SELECT CASE
                       WHEN new.state = 'queued' THEN NULL
                       WHEN new.api = 'responses' THEN CASE
                           WHEN new.state = 'running' THEN 'response.in_progress'
                           WHEN new.state = 'succeeded'
                                AND new.result ->> '$.status' = 'incomplete'
                               THEN 'response.incomplete'
                           WHEN new.state = 'succeeded' THEN 'response.completed'
                           WHEN new.state = 'failed' THEN 'response.failed'
                           ELSE 'response.cancelled'  -- cancelled, expired
                       END
                       ELSE 'job.' || new.state
                   END AS event_type) AS ev
     WHERE new.webhook IS NOT NULL
       AND new.state IS NOT old.state
       AND ev.event_type IS NOT NULL
       AND (EXISTS (SELECT 1 FROM json_each(new.webhook, '$.event_types')
                     WHERE value = ev.event_type)
            OR (coalesce(json_array_length(new.webhook, '$.event_types'), 0) = 0
                AND ev.event_type NOT IN ('job.running', 'response.in_progress')))
    ON CONFLICT (job_id, event_type, target, series) DO NOTHING;
END;
