-- The job trigger's outbox branch runs only for a transition that can have a webhook to send:
-- the job has its own webhook, or its tenant has an enabled endpoint. Without either (most
-- jobs) the branch found no target yet cost about a third of the trigger at every transition
-- (two per drained job: claim and finish). The trigger of 0008 is split in two: the event row
-- as before, and the outbox rows, restated unchanged from 0008, in a trigger whose WHEN is the
-- union of the two branches' target conditions (the endpoint join and `new.webhook IS NOT
-- NULL`); the state-change condition the branches held moves into that WHEN too.
-- PostgreSQL's 0023 is a no-op: its statement trigger already skips the outbox fan-out when no
-- moved job has a webhook and none of their tenants an enabled endpoint (its 0008).

DROP TRIGGER jobs_log_update;

CREATE TRIGGER jobs_log_update AFTER UPDATE ON jobs
WHEN new.state IS NOT old.state OR new.cancel_requested_at IS NOT old.cancel_requested_at
BEGIN
    INSERT INTO job_events (job_id, seq, from_state, to_state, actor, reason, applied, created_at)
    VALUES (new.id, new.event_seq, old.state, new.state, new.transition_actor,
            new.transition_reason, 1, new.updated_at);
END;

CREATE TRIGGER jobs_outbox_update AFTER UPDATE ON jobs
WHEN new.state IS NOT old.state
 AND (new.webhook IS NOT NULL
      OR EXISTS (SELECT 1 FROM webhook_endpoints AS e
                  WHERE e.tenant_id = new.tenant_id AND e.disabled = 0))
BEGIN
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
