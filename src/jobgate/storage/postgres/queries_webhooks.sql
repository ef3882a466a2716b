-- Webhook queries for PostgreSQL: endpoints, and the outbox as a leased delivery queue.
-- :now may be NULL, meaning the database's clock.

-- name: webhook_endpoint_update
-- Apply a partial update (NULL leaves a field); enabling clears the disabled reason.
UPDATE webhook_endpoints AS e
   SET url = coalesce(:url::text, e.url),
       description = coalesce(:description::text, e.description),
       event_types = coalesce(:event_types::jsonb, e.event_types),
       include_result = coalesce(:include_result::boolean, e.include_result),
       progress_interval_s = coalesce(:progress_interval_s::double precision,
                                      e.progress_interval_s),
       disabled = coalesce(:disabled::boolean, e.disabled),
       disabled_reason = CASE WHEN :disabled::boolean IS NULL THEN e.disabled_reason
                              WHEN :disabled::boolean
                              THEN coalesce(e.disabled_reason, 'disabled by request')
                              ELSE NULL END,
       updated_at = clock.now
  FROM (SELECT coalesce(:now::timestamptz, now()) AS now) AS clock
 WHERE e.id = :id AND e.tenant_id = :tenant_id
RETURNING e.*

-- name: webhook_endpoint_delete
-- Delete an endpoint and give up its pending deliveries.
WITH deleted AS (
    DELETE FROM webhook_endpoints WHERE id = :id AND tenant_id = :tenant_id RETURNING id
), abandoned AS (
    UPDATE outbox AS o
       SET state = 'failed', last_error = 'endpoint deleted',
           completed_at = coalesce(:now::timestamptz, now()), lease_token = NULL
      FROM deleted
     WHERE o.endpoint_id = deleted.id AND o.state = 'pending'
)
SELECT id FROM deleted

-- name: webhook_endpoint_rotate
-- A new current secret; the old one keeps signing until the grace period ends.
UPDATE webhook_endpoints AS e
   SET previous_secret = CASE WHEN :grace_s::double precision > 0 THEN e.secret END,
       previous_secret_expires_at =
           CASE WHEN :grace_s::double precision > 0
                THEN clock.now + make_interval(secs => :grace_s::double precision) END,
       secret = :secret,
       updated_at = clock.now
  FROM (SELECT coalesce(:now::timestamptz, now()) AS now) AS clock
 WHERE e.id = :id AND e.tenant_id = :tenant_id
RETURNING e.*

-- name: delivery_claim
-- Lease due deliveries, oldest due first, skipping busy limit keys and rows another
-- dispatcher holds; counts the attempt. Answers each row with its endpoint's URL and live
-- secrets, or the tenant's secret for a job's own URL.
WITH clock AS (
    SELECT coalesce(:now::timestamptz, now()) AS now
), due AS (
    SELECT o.id, o.job_created_at
      FROM outbox AS o, clock
     WHERE o.state = 'pending'
       AND o.next_attempt_at <= clock.now
       AND coalesce(o.endpoint_id, 'url:' || coalesce(o.url, ''))
           <> ALL(ARRAY(SELECT jsonb_array_elements_text(:busy::jsonb)))
       -- An event after a progress in flight to the same endpoint waits for that send to be
       -- recorded: progress never arrives after the job's terminal event.
       AND (o.endpoint_id IS NULL OR o.event_type IN ('job.progress', 'batch.progress')
            OR NOT EXISTS (SELECT 1 FROM outbox AS p
                            WHERE p.job_id = o.job_id AND p.job_created_at = o.job_created_at
                              AND p.event_type IN ('job.progress', 'batch.progress')
                              AND p.target = o.target AND p.series = o.series
                              AND p.state = 'pending' AND p.lease_token IS NOT NULL
                              AND p.next_attempt_at > clock.now))
     ORDER BY o.next_attempt_at, o.id
     LIMIT :limit
       FOR UPDATE OF o SKIP LOCKED
), claimed AS (
    UPDATE outbox AS o
       SET attempts = o.attempts + 1,
           next_attempt_at = clock.now + make_interval(secs => :lease_s::double precision),
           lease_token = md5(random()::text || clock_timestamp()::text || o.id)
      FROM due, clock
     WHERE o.id = due.id AND o.job_created_at = due.job_created_at
    RETURNING o.*
)
SELECT c.*,
       e.url AS e_url,
       e.secret AS e_secret,
       CASE WHEN e.previous_secret_expires_at > clock.now THEN e.previous_secret END
           AS e_previous_secret,
       e.include_result AS e_include_result,
       e.disabled AS e_disabled,
       t.webhook_secret AS tenant_secret
  FROM claimed AS c
 CROSS JOIN clock
  LEFT JOIN webhook_endpoints AS e ON e.id = c.endpoint_id
  LEFT JOIN tenants AS t ON t.id = c.tenant_id
 ORDER BY c.created_at, c.id

-- name: delivery_record
-- Record an attempt (always), disable the endpoint on 410, and write the delivery's new state
-- fenced on the lease token; answers the row only when the fence held.
WITH clock AS (
    SELECT coalesce(:now::timestamptz, now()) AS now
), attempt AS (
    INSERT INTO webhook_attempts (id, outbox_id, event_id, tenant_id, job_id, target, attempt,
                                  status_code, latency_ms, error, succeeded, created_at,
                                  job_created_at)
    SELECT 'att_' || replace(gen_random_uuid()::text, '-', ''), :id, :event_id, :tenant_id,
           :job_id, :target, :attempt, :status_code, :latency_ms, :error,
           :state = 'succeeded', clock.now, o.job_created_at
      FROM clock, outbox AS o
     WHERE :attempted::boolean
       AND o.id = :id
       AND o.job_created_at = :job_created_at::timestamptz
), disabled AS (
    UPDATE webhook_endpoints AS e
       SET disabled = true, disabled_reason = :disable_reason::text, updated_at = clock.now
      FROM clock
     WHERE e.id = :endpoint_id::text AND :disable_reason::text IS NOT NULL AND NOT e.disabled
)
UPDATE outbox AS o
   SET state = :state,
       next_attempt_at = CASE WHEN :state = 'pending'
                              THEN clock.now + make_interval(secs => :retry_in_s::double precision)
                              ELSE o.next_attempt_at END,
       lease_token = NULL,
       last_status_code = CASE WHEN :attempted::boolean THEN :status_code::integer
                               ELSE o.last_status_code END,
       last_error = :error,
       completed_at = CASE WHEN :state = 'pending' THEN NULL ELSE clock.now END
  FROM clock
 WHERE o.id = :id
   AND o.job_created_at = :job_created_at::timestamptz
   AND o.lease_token = :token AND o.state = 'pending'
RETURNING o.id

-- name: delivery_release
-- Give a claimed delivery back unsent, refunding its attempt; fenced on the lease token.
UPDATE outbox AS o
   SET attempts = o.attempts - 1,
       next_attempt_at = clock.now + make_interval(secs => :delay_s::double precision),
       lease_token = NULL
  FROM (SELECT coalesce(:now::timestamptz, now()) AS now) AS clock
 WHERE o.id = :id
   AND o.job_created_at = :job_created_at::timestamptz
   AND o.lease_token = :token AND o.state = 'pending'
RETURNING o.id

-- name: delivery_recover
-- Re-queue an endpoint's failed deliveries since a time, with a fresh attempt budget; not
-- those of a job retention deleted (its rows wait in their day's partition for the drop).
UPDATE outbox AS o
   SET state = 'pending', attempts = 0, next_attempt_at = clock.now, completed_at = NULL,
       lease_token = NULL
  FROM (SELECT coalesce(:now::timestamptz, now()) AS now) AS clock
 WHERE o.endpoint_id = :endpoint_id AND o.tenant_id = :tenant_id AND o.state = 'failed'
   AND o.created_at >= :since
   AND o.job_created_at = coalesce((SELECT j.created_at FROM jobs AS j WHERE j.id = o.job_id),
                                   (SELECT b.created_at FROM batches AS b WHERE b.id = o.job_id))

-- name: delivery_attempts_for_job
-- Every attempt at delivering a job's events, oldest first.
SELECT *
  FROM webhook_attempts
 WHERE job_id = :job_id
   AND job_created_at = coalesce((SELECT j.created_at FROM jobs AS j WHERE j.id = :job_id),
                   (SELECT b.created_at FROM batches AS b WHERE b.id = :job_id))
 ORDER BY created_at, attempt, id

-- name: outbox_batch_progress_arm
-- Arm an in-progress batch's `batch.progress` delivery to each enabled endpoint of its tenant
-- that lists it, as outbox_progress_arm does for a running job: one row per (batch, endpoint),
-- due once the endpoint's interval has passed since its last send; a pending row is left alone
-- (its request_counts are read when it is sent).
WITH clock AS (
    SELECT coalesce(:now::timestamptz, now()) AS now
)
INSERT INTO outbox AS o (id, event_id, tenant_id, job_id, event_type, target, endpoint_id, url,
                         series, job_status, created_at, next_attempt_at, job_created_at)
SELECT 'msg_' || replace(gen_random_uuid()::text, '-', ''),
       'evt_' || left(replace(gen_random_uuid()::text, '-', ''), 24),
       b.tenant_id, b.id, 'batch.progress', e.id, e.id, NULL, 0, b.status, clock.now,
       greatest(clock.now, p.completed_at + make_interval(secs => e.progress_interval_s)),
       b.created_at
  FROM clock
  JOIN batches AS b ON b.id = :batch_id AND b.status = 'in_progress'
  JOIN webhook_endpoints AS e
    ON e.tenant_id = b.tenant_id AND NOT e.disabled AND e.event_types @> '["batch.progress"]'
  LEFT JOIN outbox AS p
    ON p.job_id = b.id AND p.job_created_at = b.created_at AND p.event_type = 'batch.progress'
   AND p.target = e.id AND p.series = 0
 WHERE p.id IS NULL OR p.state <> 'pending'
ON CONFLICT (job_id, event_type, target, series, job_created_at) DO UPDATE
   SET event_id = excluded.event_id, state = 'pending', attempts = 0,
       created_at = excluded.created_at, next_attempt_at = excluded.next_attempt_at,
       lease_token = NULL, last_status_code = NULL, last_error = NULL, completed_at = NULL
 WHERE o.state <> 'pending'
RETURNING o.id

-- name: outbox_progress_arm
-- Arm a running job's `job.progress` delivery to each enabled endpoint of its tenant that lists
-- it: one row per (job, endpoint, series), due once the endpoint's interval has passed since
-- its last send. A pending row is left alone: its body is built when it is sent, so it carries
-- the newest progress then (a newer progress supersedes an undelivered one). A sent or dropped
-- row is pending again under a new event id.
WITH clock AS (
    SELECT coalesce(:now::timestamptz, now()) AS now
)
INSERT INTO outbox AS o (id, event_id, tenant_id, job_id, event_type, target, endpoint_id, url,
                         series, job_status, created_at, next_attempt_at, job_created_at)
SELECT 'msg_' || replace(gen_random_uuid()::text, '-', ''),
       'evt_' || left(replace(gen_random_uuid()::text, '-', ''), 24),
       j.tenant_id, j.id, 'job.progress', e.id, e.id, NULL, j.series, j.state, clock.now,
       greatest(clock.now, p.completed_at + make_interval(secs => e.progress_interval_s)),
       j.created_at
  FROM clock
  JOIN jobs AS j ON j.id = :job_id AND j.state = 'running'
  JOIN webhook_endpoints AS e
    ON e.tenant_id = j.tenant_id AND NOT e.disabled AND e.event_types @> '["job.progress"]'
  LEFT JOIN outbox AS p
    ON p.job_id = j.id AND p.job_created_at = j.created_at AND p.event_type = 'job.progress'
   AND p.target = e.id
   AND p.series = j.series
 WHERE p.id IS NULL OR p.state <> 'pending'
ON CONFLICT (job_id, event_type, target, series, job_created_at) DO UPDATE
   SET event_id = excluded.event_id, state = 'pending', attempts = 0,
       created_at = excluded.created_at, next_attempt_at = excluded.next_attempt_at,
       lease_token = NULL, last_status_code = NULL, last_error = NULL, completed_at = NULL
 WHERE o.state <> 'pending'
RETURNING o.id
