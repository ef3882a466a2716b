-- Batched enqueue on PostgreSQL.

-- name: job_insert_many
-- Insert many queued jobs in one statement; the jobs_after_insert trigger writes their first
-- events and sends one wake-up for the whole batch. Answers only what the database decided.
INSERT INTO jobs (id, tenant_id, state, api, provider, endpoint, model, request, metadata,
                  webhook, priority, max_attempts, run_at, created_at, updated_at, expires_at,
                  execution_timeout_s, event_seq, transition_actor, transition_reason,
                  concurrency_key, model_route)
SELECT v.id, v.tenant_id, 'queued', v.api, v.provider, v.endpoint, v.model, v.request,
       coalesce(v.metadata, '{}'::jsonb), v.webhook, v.priority, v.max_attempts,
       s.run_at, clock.now, clock.now,
       s.run_at + make_interval(secs => CASE WHEN v.start_timeout_s IS NOT NULL  -- ten years at most
                                        THEN least(greatest(v.start_timeout_s, 0), 315360000)
                                        END),
       v.execution_timeout_s, 1, 'api', 'submitted', v.concurrency_key, v.model_route
  FROM jsonb_to_recordset(:jobs::jsonb) AS v(
           id text, tenant_id text, api text, provider text, endpoint text, model text,
           request jsonb, metadata jsonb, webhook jsonb, priority integer,
           max_attempts integer, start_timeout_s double precision,
           execution_timeout_s double precision, run_at timestamptz,
           delay_s double precision, concurrency_key text, model_route text),
       (SELECT coalesce(:now::timestamptz, now()) AS now) AS clock,
       LATERAL (SELECT greatest(clock.now, coalesce(
                    v.run_at, clock.now + make_interval(secs => coalesce(v.delay_s, 0))))
                AS run_at) AS s
RETURNING id, created_at, run_at, expires_at
