-- Batched enqueue on PostgreSQL: many jobs per statement, bound as one JSON array of jobs
-- (postgres.batch.insert_payload). Typed arrays, one per column, unnested (as PgQueuer binds
-- them), would save PostgreSQL its JSON parsing but cost asyncpg more than that to encode (an
-- array per column against one jsonb per batch): not taken.

-- fragment: new_job_fields
-- The fields of a new job in the JSON array of new jobs (postgres.batch.insert_payload).
id text, tenant_id text, api text, provider text, endpoint text, model text, request jsonb,
metadata jsonb, webhook jsonb, priority integer, max_attempts integer,
start_timeout_s double precision, execution_timeout_s double precision, run_at timestamptz,
delay_s double precision, concurrency_key text, model_route text

-- fragment: new_job_columns
-- The new jobs v (new_job_fields) of r, the objects of the JSON array :jobs, one per job, and
-- sh, the one object :shared of the members all the array's jobs have alike
-- (postgres.batch.insert_payloads): a member is in sh or in the jobs' objects, never in both,
-- so coalescing the two gives each job its own value, and the shared members are parsed once
-- per statement instead of once per row (PostgreSQL's CPU per job of a batch: see there).
r.id, coalesce(r.tenant_id, sh.tenant_id) AS tenant_id, coalesce(r.api, sh.api) AS api,
coalesce(r.provider, sh.provider) AS provider, coalesce(r.endpoint, sh.endpoint) AS endpoint,
coalesce(r.model, sh.model) AS model, r.request, r.metadata, r.webhook,
coalesce(r.priority, sh.priority) AS priority,
coalesce(r.max_attempts, sh.max_attempts) AS max_attempts, r.start_timeout_s,
coalesce(r.execution_timeout_s, sh.execution_timeout_s) AS execution_timeout_s, r.run_at,
r.delay_s, r.concurrency_key, r.model_route

-- fragment: new_job_insert
-- The row of a new queued job v (new_job_fields), at clock.now and run at s.run_at.
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

-- fragment: new_job_run_at
-- When a new job v first runs: its run_at, else now plus its delay, never before now.
LATERAL (SELECT greatest(clock.now, coalesce(
             v.run_at, clock.now + make_interval(secs => coalesce(v.delay_s, 0))))
         AS run_at) AS s

-- name: job_insert_many
-- Insert many queued jobs in one statement (their first events are implied by their rows:
-- job_event_log); the jobs_after_insert trigger sends one wake-up for the whole batch.
-- Answers only what the database decided.
{{new_job_insert}}
  FROM (SELECT {{new_job_columns}}
          FROM jsonb_to_recordset(:jobs::jsonb) AS r({{new_job_fields}}),
               jsonb_to_record(:shared::jsonb) AS sh({{new_job_fields}})) AS v,
       (SELECT coalesce(:now::timestamptz, now()) AS now) AS clock,
       {{new_job_run_at}}
RETURNING id, created_at, run_at, expires_at

-- name: job_insert_many_counted
-- job_insert_many for one tenant's jobs under the admission locks (taken by an earlier
-- statement, so this statement's snapshot holds every admission before it), answering with
-- each row the queued jobs of :tenant_id and of everyone before the insert: one scan of the
-- queued rows and no round trip of its own (the counts see the snapshot, not the new rows).
WITH counted AS (
    SELECT count(*) FILTER (WHERE tenant_id = :tenant_id)::integer AS queued_tenant,
           count(*)::integer AS queued_total
      FROM jobs
     WHERE state = 'queued'
), inserted AS (
    {{new_job_insert}}
      FROM (SELECT {{new_job_columns}}
              FROM jsonb_to_recordset(:jobs::jsonb) AS r({{new_job_fields}}),
                   jsonb_to_record(:shared::jsonb) AS sh({{new_job_fields}})) AS v,
           (SELECT coalesce(:now::timestamptz, now()) AS now) AS clock,
           {{new_job_run_at}}
    RETURNING id, created_at, run_at, expires_at
)
SELECT inserted.*, counted.queued_tenant, counted.queued_total FROM inserted, counted

-- name: job_insert_idempotent_many
-- Bind many Idempotency-Keys (or replace expired bindings) and insert the jobs of the keys
-- bound, in one statement: job_insert_idempotent for a whole call. The keys must be distinct
-- (ON CONFLICT DO UPDATE touches a row once); they are bound in the array's order, and a key
-- another transaction holds is waited for. A key with a live binding inserts nothing.
WITH clock AS (
    SELECT coalesce(:now::timestamptz, now()) AS now
), v AS (
    SELECT *
      FROM ROWS FROM (jsonb_to_recordset(:jobs::jsonb)
                      AS ({{new_job_fields}}, route text, key text, body_hash text,
                          status_code integer, ttl_s double precision))
           WITH ORDINALITY AS v
), bound AS (
    INSERT INTO idempotency_keys AS k
        (tenant_id, route, key, body_hash, job_id, status_code, created_at, expires_at)
    SELECT v.tenant_id, v.route, v.key, v.body_hash, v.id, v.status_code, clock.now,
           clock.now + make_interval(secs => v.ttl_s)
      FROM v, clock
     ORDER BY v.ordinality
    {{idempotency_rebind_expired}}
    RETURNING k.job_id
)
{{new_job_insert}}
  FROM v JOIN bound ON bound.job_id = v.id, clock,
       {{new_job_run_at}}
RETURNING id, created_at, run_at, expires_at
