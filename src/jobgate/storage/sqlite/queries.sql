-- Core queries for SQLite. Times are REAL Unix seconds; :now is always supplied by the caller.

-- name: migrations_table
-- Create the table that records applied migrations.
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at REAL NOT NULL
)

-- name: migration_record
-- Record one applied migration.
INSERT INTO schema_migrations (version, name, applied_at) VALUES (:version, :name, :now)

-- name: idempotency_bind
-- Bind a key to a new job, replacing an expired binding.
INSERT INTO idempotency_keys
    (tenant_id, route, key, body_hash, job_id, status_code, created_at, expires_at)
VALUES (:tenant_id, :route, :key, :body_hash, :job_id, :status_code, :now, :expires_at)
ON CONFLICT (tenant_id, route, key) DO UPDATE
   SET body_hash = excluded.body_hash, job_id = excluded.job_id,
       status_code = excluded.status_code, created_at = excluded.created_at,
       expires_at = excluded.expires_at
 WHERE idempotency_keys.expires_at <= :now

-- name: job_insert
-- Insert a queued job (its first event is written by the jobs_log_insert trigger); its times
-- come computed (sqlite.batch.insert_params), so nothing is read back (NewJob.queued).
INSERT INTO jobs (id, tenant_id, state, api, provider, endpoint, model, request, metadata,
                  webhook, priority, max_attempts, run_at, created_at, updated_at, expires_at,
                  execution_timeout_s, event_seq, transition_actor, transition_reason,
                  concurrency_key, model_route)
VALUES (:id, :tenant_id, 'queued', :api, :provider, :endpoint, :model, :request, :metadata,
        :webhook, :priority, :max_attempts, :run_at, :now, :now, :expires_at,
        :execution_timeout_s, 1, 'api', 'submitted', :concurrency_key, :model_route)

-- name: job_view_for_tenant
-- One job by id, only if the tenant owns it, as its views show it. The request is read
-- whole: picking its members in SQL would parse the JSON text in SQLite instead of once here.
SELECT {{job_columns}}
  FROM jobs
 WHERE id = :id AND tenant_id = :tenant_id

-- name: job_status_for_tenant
-- job_view_for_tenant, and for a queued job its place in its tenant's line as
-- job_queue_position walks it (queue_place: signed, negative a floor) and the oldest pause
-- covering it (covering_pause), with the time read.
SELECT {{job_columns}},
       CASE WHEN j.state = 'queued' THEN {{queue_place}} END AS queue_place,
       CASE WHEN j.state = 'queued' THEN {{covering_pause}} END AS pause,
       CASE WHEN j.state = 'queued' THEN :now END AS read_at
  FROM jobs AS j
 WHERE j.id = :id AND j.tenant_id = :tenant_id

-- name: job_without_input_for_tenant
-- One job by id, only if the tenant owns it, as a Response renders it. The request is read
-- whole, as for job_view_for_tenant.
SELECT {{job_columns}}
  FROM jobs
 WHERE id = :id AND tenant_id = :tenant_id

-- name: job_list
-- A page of a tenant's jobs, newest first, optionally filtered.
SELECT {{job_columns}}
  FROM jobs
 WHERE tenant_id = :tenant_id
   AND (:states IS NULL OR state IN (SELECT value FROM json_each(:states)))
   AND (:dead_lettered IS NULL OR dead_lettered = :dead_lettered)
   AND (:after_id IS NULL
        OR (created_at, id) < (SELECT a.created_at, a.id FROM jobs AS a
                                WHERE a.id = :after_id AND a.tenant_id = :tenant_id))
 ORDER BY created_at DESC, id DESC
 LIMIT :limit

-- fragment: job_search_cursor
-- The walk of a job search starts after the :after_id cursor (one of the tenant's jobs), or at
-- the tenant's newest job: one row comparison that is never NULL, so that it bounds the walk
-- of the index itself.
(j.created_at, j.id) < (coalesce((SELECT a.created_at FROM jobs AS a
                                   WHERE a.id = :after_id AND a.tenant_id = :tenant_id), 1e999),
                        coalesce(:after_id, ''))

-- fragment: job_search_walk
-- A page of a tenant's jobs matching a filter, read by a bounded walk of jobs_by_tenant: the
-- tenant's jobs newest first after the cursor and inside the created_after/before range (the
-- index walk's own bounds), at most :walk_limit of them, each checked against the filter
-- (model, provider, status, metadata... need no index of their own, which every claim and
-- finish would write; SQLite has no index over JSON members anyway). It answers the walked
-- jobs that match (matched), at most :limit, and the walk's last job when the walk reaches
-- its bound (walk_end: where the next page starts).
SELECT {{job_columns}}, w.matched, w.walked = :walk_limit AS walk_end
  FROM (SELECT s.walk_id, s.walk_created_at, s.matched,
               row_number() OVER (ORDER BY s.walk_created_at DESC, s.walk_id DESC) AS walked
          FROM (SELECT j.id AS walk_id, j.created_at AS walk_created_at,
                       coalesce({{job_filter}}, 0) AS matched
                  FROM jobs AS j INDEXED BY jobs_by_tenant
                 WHERE j.tenant_id = :tenant_id
                   AND j.created_at >= coalesce(:created_after, -1e999)
                   AND j.created_at < coalesce(:created_before, 1e999)
                   AND {{job_search_cursor}}
                 ORDER BY j.created_at DESC, j.id DESC
                 LIMIT :walk_limit) AS s) AS w
  JOIN jobs ON jobs.id = w.walk_id
 WHERE w.matched OR w.walked = :walk_limit
 ORDER BY w.walk_created_at DESC, w.walk_id DESC
 LIMIT :limit

-- name: job_search
-- A page of a tenant's jobs matching a filter (job_search_walk).
{{job_search_walk}}

-- name: job_search_by_metadata
-- A page of a tenant's jobs holding metadata pairs, and matching the rest of a filter: SQLite
-- has no index over JSON members, so this is the same bounded walk (job_search_walk).
{{job_search_walk}}

-- name: job_events
-- A job's event log after a sequence number.
SELECT * FROM job_events WHERE job_id = :job_id AND seq > :after_seq ORDER BY seq LIMIT :limit

-- name: job_claim_running
-- Worker slots held per tenant (background jobs at a provider hold none). INDEXED BY: left
-- alone, the planner walks jobs_by_tenant for the GROUP BY order, i.e. every job ever kept.
SELECT tenant_id, count(*) AS running
  FROM jobs INDEXED BY jobs_running
 WHERE state = 'running' AND lease_token IS NOT NULL
 GROUP BY tenant_id

-- name: job_claim_running_keys
-- Running jobs per (tenant, concurrency key), for max_running_per_key: with a worker's lease or
-- at their provider in background mode (no lease), both calls the key has in flight.
SELECT tenant_id, concurrency_key, count(*) AS running
  FROM jobs INDEXED BY jobs_running_keys
 WHERE state = 'running' AND concurrency_key IS NOT NULL
 GROUP BY tenant_id, concurrency_key

-- name: job_claim_next_tenant
-- The next tenant, in id order, with queued jobs (one index probe).
SELECT min(tenant_id) AS tenant_id FROM jobs WHERE state = 'queued' AND tenant_id > :after

-- name: key_buckets_closed
-- The concurrency keys of a tenant (bucket provider :provider, domain.rate_limits.key_bucket)
-- whose rpm_per_key bucket admits no start at :now yet.
SELECT model FROM rate_limit_buckets WHERE provider = :provider AND requests_at > :now

-- name: job_claim_candidates
-- A tenant's claimable jobs, best first, leaving out the concurrency keys at their cap, over a
-- budget per key or waiting for their rpm_per_key (:full_keys, a JSON array).
SELECT id, priority, run_at, concurrency_key
  FROM jobs AS j
 WHERE state = 'queued'
   AND tenant_id = :tenant_id
   AND run_at <= :now
   -- Past its start deadline a job may not start (the reaper expires it).
   AND (expires_at IS NULL OR expires_at > :now)
   AND (:providers IS NULL OR provider IN (SELECT value FROM json_each(:providers)))
   AND (:models IS NULL OR model IN (SELECT value FROM json_each(:models)))
   AND (:skip_models IS NULL OR model IS NULL
        OR model NOT IN (SELECT value FROM json_each(:skip_models)))
   AND (:full_keys IS NULL OR concurrency_key IS NULL
        OR concurrency_key NOT IN (SELECT value FROM json_each(:full_keys)))
   -- An operator's pause holds the jobs it covers in the queue.
   AND NOT EXISTS (SELECT 1 FROM pauses AS p WHERE {{pause_covers}})
 ORDER BY priority, run_at, id
 LIMIT :limit

-- name: job_claim
-- Lease the chosen jobs.
UPDATE jobs
   SET state = 'running',
       attempt = attempt + 1,
       run_count = run_count + 1,
       lease_owner = :worker_id,
       lease_token = lower(hex(randomblob(16))),
       lease_expires_at = :now + :lease_ttl_s,
       started_at = coalesce(started_at, :now),
       -- Clamped to [0, ten years] (storage.rows.MAX_INTERVAL_S): never a time past what a
       -- reader can hold, whatever the row's timeout.
       deadline_at = coalesce(deadline_at, :now + min(max(execution_timeout_s, 0), 315360000)),
       phase = 'awaiting_provider',
       updated_at = :now,
       event_seq = event_seq + 1,
       transition_actor = :worker_id,
       transition_reason = 'claimed'
 WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'queued'
RETURNING {{job_columns}}

-- fragment: job_columns
-- The columns a Job is decoded from (domain.job.Job's fields but `damaged`), for the
-- statements a worker runs per job: `*` also fetches the nine columns no Job holds
-- (transition_*, reconcile_*, series, ...), a tenth of a claim's row-fetching cost.
request, {{job_columns_but_request}}

-- fragment: job_columns_but_request
-- job_columns without the request (a prompt can be hundreds of kilobytes: the job views,
-- which never show it, do not read it).
id, tenant_id, state, api, provider, endpoint, model, metadata, webhook, result,
error, usage, priority, attempt, max_attempts, run_count, lost_count, run_at, created_at,
updated_at, started_at, completed_at, cancel_requested_at, expires_at, execution_timeout_s,
deadline_at, lease_owner, lease_token, lease_expires_at, phase, provider_job_id,
creation_outcome, cancel_outcome, reconcile_at, dead_lettered, purged_at, event_seq,
provider_generation, concurrency_key, model_route, reconciled_at, progress,
provider_request_id

-- name: tenant_stats_bump
-- Count a tenant's claims (for its drain rate).
INSERT INTO tenant_stats (tenant_id, claimed_total) VALUES (:tenant_id, :count)
ON CONFLICT (tenant_id) DO UPDATE SET claimed_total = claimed_total + excluded.claimed_total

-- name: job_heartbeat
-- Extend the leases still held (a JSON array of {id, token}); answers whether a cancel was
-- requested.
UPDATE jobs
   SET lease_expires_at = :now + :lease_ttl_s
  FROM (SELECT value ->> 'id' AS id, value ->> 'token' AS token FROM json_each(:leases)) AS held
 WHERE jobs.id = held.id AND jobs.lease_token = held.token AND jobs.state = 'running'
RETURNING jobs.id, jobs.cancel_requested_at

-- name: finish_verdicts_table
-- The writer connection's scratch table of verdicts for job_finish: bound row by row from
-- Python (executemany), they cost no JSON encoding and no JSON path per field and row. The
-- last five columns are the ledger row a success with usage bills (finish_verdicts_bill).
CREATE TEMP TABLE IF NOT EXISTS finish_verdicts (
    id, token, state, result, error, usage, refund_attempt, lost, dead_lettered, retry_in_s,
    cancel_outcome, creation_outcome, provider_request_id, actor, reason,
    billed, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens)

-- name: finish_verdicts_add
-- One verdict (sqlite.store.verdict_row) for the next job_finish. Positional: binding 20
-- values by name costs more than the insert itself (the name of each is looked up per row).
INSERT INTO temp.finish_verdicts VALUES (
    ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)

-- name: finish_verdicts_bill
-- Bill, once, the successes with usage among the verdicts job_finish is about to apply: run
-- just before it in the same operation of the one writer, this fence is the one job_finish
-- applies (nothing can move a row in between), and a success stays a success there (only a
-- retry turns into a cancellation). One statement for the batch instead of a row each.
INSERT INTO usage_ledger (job_id, kind, tenant_id, provider, model, input_tokens,
                          output_tokens, cache_read_tokens, cache_write_tokens, created_at)
SELECT j.id, 'completion', j.tenant_id, j.provider, j.model, v.input_tokens,
       v.output_tokens, v.cache_read_tokens, v.cache_write_tokens, :now
  FROM temp.finish_verdicts AS v
  JOIN jobs AS j ON j.id = v.id
 WHERE v.billed = 1
   AND j.lease_token = v.token AND j.state = 'running'
   AND (:expired_only = 0 OR j.lease_expires_at < :now)
ON CONFLICT (job_id, kind) DO NOTHING

-- name: finish_verdicts_clear
-- Empty the verdicts once applied.
DELETE FROM temp.finish_verdicts

-- name: job_finish
-- Apply lease holders' verdicts (temp.finish_verdicts, at most one per job), fenced on each
-- lease token.
-- A retry of a job whose cancel was requested becomes the cancellation instead. `result`,
-- `error` and `usage` arrive as JSON text. Answers what the caller reports (the ledger rows
-- were written by finish_verdicts_bill).
UPDATE jobs AS j
   SET {{verdict_writes}}
  FROM temp.finish_verdicts AS v
 WHERE j.id = v.id AND j.lease_token = v.token AND j.state = 'running'
   AND (:expired_only = 0 OR j.lease_expires_at < :now)
RETURNING id, state, attempt

-- name: job_cancel
-- Cancel: a queued job at once, a running one by request (its lease holder confirms).
UPDATE jobs
   SET state = CASE state WHEN 'queued' THEN 'cancelled' ELSE state END,
       completed_at = CASE state WHEN 'queued' THEN :now ELSE completed_at END,
       cancel_outcome = CASE state WHEN 'queued' THEN 'not_started' ELSE cancel_outcome END,
       cancel_requested_at = :now,
       updated_at = :now,
       event_seq = event_seq + 1,
       transition_actor = :actor,
       transition_reason = CASE state WHEN 'queued' THEN 'cancelled' ELSE 'cancel_requested' END
 WHERE id = :id AND tenant_id = :tenant_id
   AND (state = 'queued' OR (state = 'running' AND cancel_requested_at IS NULL))
RETURNING *

-- name: job_bump_seq
-- Take the next event sequence number without changing the state (an ignored event).
UPDATE jobs SET event_seq = event_seq + 1 WHERE id = :id RETURNING event_seq, state

-- name: job_event_insert
-- Append an event the triggers do not write (one that was not applied).
INSERT INTO job_events (job_id, seq, from_state, to_state, actor, reason, applied, created_at)
VALUES (:job_id, :seq, :from_state, :to_state, :actor, :reason, :applied, :now)

-- name: job_leases_expired
-- Running jobs whose lease ran out, oldest expiry first.
SELECT *
  FROM jobs
 WHERE state = 'running' AND lease_expires_at < :now
 ORDER BY lease_expires_at
 LIMIT :limit

-- name: job_expire_due
-- Queued jobs past their start deadline become expired.
UPDATE jobs
   SET state = 'expired',
       completed_at = :now,
       error = json_object('code', 'start_timeout', 'type', 'expired',
                           'message', 'no worker started the job before its start deadline'),
       updated_at = :now,
       event_seq = event_seq + 1,
       transition_actor = 'reaper',
       transition_reason = 'start_timeout'
 WHERE id IN (SELECT id FROM jobs
               WHERE state = 'queued' AND expires_at IS NOT NULL AND expires_at <= :now
               ORDER BY expires_at
               LIMIT :limit)
RETURNING id

-- fragment: redrive_reset
-- THE reset of every redrive (job_redrive, job_bulk_redrive), in `UPDATE jobs` setting the
-- transition's reason: a new attempt series (and, if a provider job of it ended, a new provider
-- generation), logged as the :actor's. A new series starts clean: no old cancel request (it
-- would cancel the job at its first heartbeat), and a start deadline as long as the submit's,
-- from now (the old one has passed: the job could never start).
state = 'queued',
attempt = 0,
lost_count = 0,
series = series + 1,
provider_generation = provider_generation
                      + CASE WHEN provider_job_id IS NOT NULL THEN 1 ELSE 0 END,
dead_lettered = 0,
run_at = :now,
completed_at = NULL,
deadline_at = NULL,
started_at = NULL,
updated_at = :now,
event_seq = event_seq + 1,
transition_actor = :actor,
cancel_requested_at = NULL,
cancel_outcome = NULL,
cancel_sent_at = NULL,
start_timeout_s = coalesce(start_timeout_s, expires_at - created_at),
expires_at = :now + coalesce(start_timeout_s, expires_at - created_at)

-- name: job_redrive
-- An operator's redrive: a dead-lettered failed job starts a new attempt series (and, if a
-- provider job of it ended, a new provider generation).
UPDATE jobs
   SET {{redrive_reset}},
       transition_reason = 'redrive'
 WHERE id = :id AND tenant_id = :tenant_id AND state = 'failed' AND dead_lettered = 1
   AND purged_at IS NULL  -- a purged job has no input left to send
RETURNING *

-- name: outbox_for_job
-- Every outbox row of a job.
SELECT * FROM outbox WHERE job_id = :job_id ORDER BY created_at, event_type, target
