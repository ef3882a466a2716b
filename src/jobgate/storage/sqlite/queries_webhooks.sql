-- Webhook queries for SQLite: endpoints, and the outbox as a leased delivery queue.
-- Times are REAL Unix seconds; :now is always given (the host's clock is the database's).

-- name: webhook_endpoint_update
-- Apply a partial update (NULL leaves a field); enabling clears the disabled reason.
UPDATE webhook_endpoints
   SET url = coalesce(:url, url),
       description = coalesce(:description, description),
       event_types = coalesce(:event_types, event_types),
       include_result = coalesce(:include_result, include_result),
       progress_interval_s = coalesce(:progress_interval_s, progress_interval_s),
       disabled = coalesce(:disabled, disabled),
       disabled_reason = CASE WHEN :disabled IS NULL THEN disabled_reason
                              WHEN :disabled = 1 THEN coalesce(disabled_reason, 'disabled by request')
                              ELSE NULL END,
       updated_at = :now
 WHERE id = :id AND tenant_id = :tenant_id
RETURNING *

-- name: webhook_endpoint_delete
-- Delete an endpoint.
DELETE FROM webhook_endpoints WHERE id = :id AND tenant_id = :tenant_id RETURNING id

-- name: outbox_fail_for_endpoint
-- Give up an endpoint's pending deliveries (it was deleted).
UPDATE outbox
   SET state = 'failed', last_error = 'endpoint deleted', completed_at = :now, lease_token = NULL
 WHERE endpoint_id = :id AND state = 'pending'

-- name: webhook_endpoint_rotate
-- A new current secret; the old one keeps signing until the grace period ends.
UPDATE webhook_endpoints
   SET previous_secret = CASE WHEN :grace_s > 0 THEN secret END,
       previous_secret_expires_at = CASE WHEN :grace_s > 0 THEN :now + :grace_s END,
       secret = :secret,
       updated_at = :now
 WHERE id = :id AND tenant_id = :tenant_id
RETURNING *

-- name: webhook_endpoint_disable
-- Disable an endpoint when a delivery says so (it answered 410 Gone).
UPDATE webhook_endpoints
   SET disabled = 1, disabled_reason = :disable_reason, updated_at = :now
 WHERE id = :endpoint_id AND :disable_reason IS NOT NULL AND disabled = 0

-- name: delivery_claim
-- Lease due deliveries, oldest due first, skipping busy limit keys; counts the attempt. Answers
-- each row with its endpoint's URL and live secrets, or the tenant's secret for a job's own URL.
UPDATE outbox
   SET attempts = attempts + 1,
       next_attempt_at = :now + :lease_s,
       lease_token = lower(hex(randomblob(16)))
 WHERE id IN (SELECT o.id
                FROM outbox AS o
               WHERE o.state = 'pending'
                 AND o.next_attempt_at <= :now
                 AND coalesce(o.endpoint_id, 'url:' || coalesce(o.url, ''))
                     NOT IN (SELECT value FROM json_each(:busy))
                 -- An event after a progress in flight to the same endpoint waits for that
                 -- send to be recorded: progress never arrives after the terminal event.
                 AND (o.endpoint_id IS NULL
                      OR o.event_type IN ('job.progress', 'batch.progress')
                      OR NOT EXISTS (SELECT 1 FROM outbox AS p
                                      WHERE p.job_id = o.job_id
                                        AND p.event_type IN ('job.progress', 'batch.progress')
                                        AND p.target = o.target AND p.series = o.series
                                        AND p.state = 'pending' AND p.lease_token IS NOT NULL
                                        AND p.next_attempt_at > :now))
               ORDER BY o.next_attempt_at, o.id
               LIMIT :limit)
RETURNING *,
          (SELECT e.url FROM webhook_endpoints AS e WHERE e.id = outbox.endpoint_id)
              AS e_url,
          (SELECT e.secret FROM webhook_endpoints AS e WHERE e.id = outbox.endpoint_id)
              AS e_secret,
          (SELECT CASE WHEN e.previous_secret_expires_at > :now THEN e.previous_secret END
             FROM webhook_endpoints AS e WHERE e.id = outbox.endpoint_id)
              AS e_previous_secret,
          (SELECT e.include_result FROM webhook_endpoints AS e WHERE e.id = outbox.endpoint_id)
              AS e_include_result,
          (SELECT e.disabled FROM webhook_endpoints AS e WHERE e.id = outbox.endpoint_id)
              AS e_disabled,
          (SELECT t.webhook_secret FROM tenants AS t WHERE t.id = outbox.tenant_id)
              AS tenant_secret,
          NULL AS job_created_at  -- the outbox is not partitioned here

-- name: delivery_attempt_insert
-- Record one attempt, if one was made.
INSERT INTO webhook_attempts (id, outbox_id, event_id, tenant_id, job_id, target, attempt,
                              status_code, latency_ms, error, succeeded, created_at)
SELECT 'att_' || lower(hex(randomblob(12))), :id, :event_id, :tenant_id, :job_id, :target,
       :attempt, :status_code, :latency_ms, :error, :state = 'succeeded', :now
 WHERE :attempted

-- name: delivery_update
-- A delivery's new state, fenced on the lease token.
UPDATE outbox
   SET state = :state,
       next_attempt_at = CASE WHEN :state = 'pending' THEN :now + :retry_in_s
                              ELSE next_attempt_at END,
       lease_token = NULL,
       last_status_code = CASE WHEN :attempted = 1 THEN :status_code ELSE last_status_code END,
       last_error = :error,
       completed_at = CASE WHEN :state = 'pending' THEN NULL ELSE :now END
 WHERE id = :id AND lease_token = :token AND state = 'pending'
RETURNING id

-- name: delivery_release
-- Give a claimed delivery back unsent, refunding its attempt; fenced on the lease token.
UPDATE outbox
   SET attempts = attempts - 1, next_attempt_at = :now + :delay_s, lease_token = NULL
 WHERE id = :id AND lease_token = :token AND state = 'pending'
RETURNING id

-- name: delivery_recover
-- Re-queue an endpoint's failed deliveries since a time, with a fresh attempt budget.
UPDATE outbox
   SET state = 'pending', attempts = 0, next_attempt_at = :now, completed_at = NULL,
       lease_token = NULL
 WHERE endpoint_id = :endpoint_id AND tenant_id = :tenant_id AND state = 'failed'
   AND created_at >= :since

-- name: delivery_attempts_for_job
-- Every attempt at delivering a job's events, oldest first.
SELECT * FROM webhook_attempts WHERE job_id = :job_id ORDER BY created_at, attempt, id

-- name: outbox_batch_progress_arm
-- Arm an in-progress batch's `batch.progress` delivery to each enabled endpoint of its tenant
-- that lists it, as outbox_progress_arm does for a running job: one row per (batch, endpoint),
-- due once the endpoint's interval has passed since its last send; a pending row is left alone
-- (its request_counts are read when it is sent).
INSERT INTO outbox (id, event_id, tenant_id, job_id, event_type, target, endpoint_id, url,
                    series, job_status, created_at, next_attempt_at)
SELECT 'msg_' || lower(hex(randomblob(12))), 'evt_' || lower(hex(randomblob(12))),
       b.tenant_id, b.id, 'batch.progress', e.id, e.id, NULL, 0, b.status, :now,
       max(:now, coalesce(p.completed_at + e.progress_interval_s, :now))
  FROM batches AS b
  JOIN webhook_endpoints AS e
    ON e.tenant_id = b.tenant_id AND e.disabled = 0
   AND EXISTS (SELECT 1 FROM json_each(e.event_types) WHERE value = 'batch.progress')
  LEFT JOIN outbox AS p
    ON p.job_id = b.id AND p.event_type = 'batch.progress' AND p.target = e.id AND p.series = 0
 WHERE b.id = :batch_id AND b.status = 'in_progress'
   AND (p.id IS NULL OR p.state <> 'pending')
ON CONFLICT (job_id, event_type, target, series) DO UPDATE
   SET event_id = excluded.event_id, state = 'pending', attempts = 0,
       created_at = excluded.created_at, next_attempt_at = excluded.next_attempt_at,
       lease_token = NULL, last_status_code = NULL, last_error = NULL, completed_at = NULL
 WHERE outbox.state <> 'pending'
RETURNING id

-- name: outbox_progress_arm
-- Arm a running job's `job.progress` delivery to each enabled endpoint of its tenant that lists
-- it: one row per (job, endpoint, series), due once the endpoint's interval has passed since
-- its last send. A pending row is left alone: its body is built when it is sent, so it carries
-- the newest progress then (a newer progress supersedes an undelivered one). A sent or dropped
-- row is pending again under a new event id.
INSERT INTO outbox (id, event_id, tenant_id, job_id, event_type, target, endpoint_id, url,
                    series, job_status, created_at, next_attempt_at)
SELECT 'msg_' || lower(hex(randomblob(12))), 'evt_' || lower(hex(randomblob(12))),
       j.tenant_id, j.id, 'job.progress', e.id, e.id, NULL, j.series, j.state, :now,
       max(:now, coalesce(p.completed_at + e.progress_interval_s, :now))
  FROM jobs AS j
  JOIN webhook_endpoints AS e
    ON e.tenant_id = j.tenant_id AND e.disabled = 0
   AND EXISTS (SELECT 1 FROM json_each(e.event_types) WHERE value = 'job.progress')
  LEFT JOIN outbox AS p
    ON p.job_id = j.id AND p.event_type = 'job.progress' AND p.target = e.id
   AND p.series = j.series
 WHERE j.id = :job_id AND j.state = 'running'
   AND (p.id IS NULL OR p.state <> 'pending')
ON CONFLICT (job_id, event_type, target, series) DO UPDATE
   SET event_id = excluded.event_id, state = 'pending', attempts = 0,
       created_at = excluded.created_at, next_attempt_at = excluded.next_attempt_at,
       lease_token = NULL, last_status_code = NULL, last_error = NULL, completed_at = NULL
 WHERE outbox.state <> 'pending'
RETURNING id
