-- /v1/responses: a Responses job that finished with an `incomplete` response (cut short at
-- max_output_tokens, or filtered) emits OpenAI's `response.incomplete`, not
-- `response.completed`. The event type now also reads the stored result's `status` (the
-- three-argument jobgate_event_type() that jobgate registers on each connection); the job
-- trigger is restated with that one change.

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
      FROM (SELECT jobgate_event_type(new.api, new.state, new.result ->> '$.status')
                   AS event_type) AS ev
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
      FROM (SELECT jobgate_event_type(new.api, new.state, new.result ->> '$.status')
                   AS event_type) AS ev
     WHERE new.state IS NOT old.state
       AND ev.event_type IS NOT NULL
       AND new.webhook IS NOT NULL
       AND (EXISTS (SELECT 1 FROM json_each(new.webhook, '$.event_types')
                     WHERE value = ev.event_type)
            OR (coalesce(json_array_length(new.webhook, '$.event_types'), 0) = 0
                AND ev.event_type NOT IN ('job.running', 'response.in_progress')))
    ON CONFLICT (job_id, event_type, target, series) DO NOTHING;
END;
