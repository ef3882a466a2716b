-- Background mode, the reconciler and inbound provider events, for SQLite. Times are REAL Unix
-- seconds; :now is always supplied by the caller.

-- name: job_background_accept
-- Fenced on the lease: record the provider's id, release the lease, schedule the first check
-- (at once when an event about that id came first or a cancel is waiting).
UPDATE jobs
   SET {{background_accepted}}
       reconcile_at = CASE
           WHEN cancel_requested_at IS NOT NULL
             OR EXISTS (SELECT 1 FROM provider_events AS e
                         WHERE e.provider = jobs.provider
                           AND e.provider_job_id = :provider_job_id)
           THEN :now ELSE :now + :reconcile_in_s END,
       updated_at = :now
 WHERE id = :id AND lease_token = :token AND state = 'running'
RETURNING *, reconcile_at <= :now AS due_now

-- name: job_reconcile_refresh
-- Every running job with a provider id becomes due for a check now.
UPDATE jobs
   SET reconcile_at = :now
 WHERE state = 'running' AND provider_job_id IS NOT NULL AND lease_token IS NULL
   AND (reconcile_at IS NULL OR reconcile_at > :now)
   AND (:providers IS NULL OR provider IN (SELECT value FROM json_each(:providers)))

-- name: job_reconcile_claim
-- Take the background jobs due for a check, pushing their reconcile_at ahead as a lease.
UPDATE jobs
   SET reconcile_at = :now + :lease_s, reconciled_at = :now
 WHERE id IN (SELECT id
                FROM jobs
               WHERE provider_job_id IS NOT NULL
                 AND lease_token IS NULL
                 AND reconcile_at IS NOT NULL
                 AND (state = 'running' OR (state = 'cancelled' AND cancel_outcome = 'not_supported'))
                 AND (reconcile_at <= :now
                      OR (state = 'running' AND cancel_requested_at IS NOT NULL
                          AND (reconciled_at IS NULL OR reconciled_at < cancel_requested_at)))
                 AND (:providers IS NULL OR provider IN (SELECT value FROM json_each(:providers)))
               ORDER BY reconcile_at
               LIMIT :limit)
RETURNING *, :now AS checked_at, coalesce(deadline_at <= :now, 0) AS overdue

-- name: job_reconcile_defer
-- Schedule the next check of a job still at its provider; count a failed check.
UPDATE jobs
   SET reconcile_at = :now + :reconcile_in_s,
       reconcile_checks = reconcile_checks + 1,
       reconcile_failures = CASE WHEN :failure IS NULL THEN 0 ELSE reconcile_failures + 1 END,
       reconcile_error = :failure,
       provider_status = coalesce(:provider_status, provider_status),
       progress = coalesce(:progress, progress),
       cancel_sent_at = CASE WHEN :cancel_sent THEN coalesce(cancel_sent_at, :now)
                             ELSE cancel_sent_at END,
       updated_at = :now
 WHERE id = :id AND provider_job_id = :provider_job_id AND lease_token IS NULL
   AND (state = 'running' OR (state = 'cancelled' AND cancel_outcome = 'not_supported'))
RETURNING id

-- name: job_settle
-- Apply the provider's verdict to a job running at it (the first verdict wins; a retry after a
-- cancel request is the cancellation, see retry_unless_cancelled). A final verdict's usage is
-- billed next (usage_bill), in the same transaction.
UPDATE jobs AS j
   SET {{retry_unless_cancelled}},
       result = CASE WHEN j.purged_at IS NULL THEN :result END,
       error = :error,
       usage = coalesce(:usage, j.usage),
       attempt = j.attempt - :refund_attempt,
       dead_lettered = :dead_lettered,
       run_at = CASE WHEN v.state = 'queued' THEN :now + :retry_in_s ELSE j.run_at END,
       {{retry_forgets_provider_job}}
       provider_status = coalesce(:provider_status, j.provider_status),
       phase = NULL,
       reconcile_at = CASE WHEN :watch_in_s IS NULL THEN NULL ELSE :now + :watch_in_s END,
       reconcile_checks = 0,
       reconcile_failures = 0,
       reconcile_error = NULL,
       updated_at = :now,
       event_seq = j.event_seq + 1,
       transition_actor = :actor
  FROM (SELECT :state AS state, :reason AS reason, :cancel_outcome AS cancel_outcome) AS v
 WHERE j.id = :id AND j.provider_job_id = :provider_job_id AND j.state = 'running'
   AND j.lease_token IS NULL
RETURNING *

-- name: job_discard_late_result
-- A locally cancelled job's provider finished: stop checking on it, taking the event number of
-- the discarded result's log entry (job_discard_logged, then usage_bill, follow in the same
-- transaction).
UPDATE jobs
   SET reconcile_at = NULL, provider_status = :to_state, updated_at = :now,
       event_seq = event_seq + 1
 WHERE id = :id AND provider_job_id = :provider_job_id AND state = 'cancelled'
   AND cancel_outcome = 'not_supported' AND reconcile_at IS NOT NULL
RETURNING id

-- name: job_discard_logged
-- Log the late result discarded after a cancel (not applied: the job stays cancelled).
INSERT INTO job_events (job_id, seq, from_state, to_state, actor, reason, applied, created_at)
SELECT id, event_seq, state, :to_state, :actor, 'result_discarded_after_cancel', 0, :now
  FROM jobs
 WHERE id = :id

-- name: usage_bill
-- Bill a job's usage (a JSON object) once per kind of :kinds (a JSON array): the ledger is
-- unique on (job_id, kind).
INSERT INTO usage_ledger (job_id, kind, tenant_id, provider, model, input_tokens,
                          output_tokens, cache_read_tokens, cache_write_tokens, created_at)
SELECT j.id, kind.value, j.tenant_id, j.provider, j.model,
       CAST(coalesce(:usage ->> '$.input_tokens', 0) AS INTEGER),
       CAST(coalesce(:usage ->> '$.output_tokens', 0) AS INTEGER),
       CAST(coalesce(:usage ->> '$.cache_read_input_tokens', 0) AS INTEGER),
       CAST(coalesce(:usage ->> '$.cache_creation_input_tokens', 0) AS INTEGER),
       :now
  FROM jobs AS j, json_each(:kinds) AS kind
 WHERE j.id = :id AND :usage IS NOT NULL
ON CONFLICT (job_id, kind) DO NOTHING

-- name: provider_event_insert
-- Record an inbound provider event once.
INSERT INTO provider_events (provider, event_id, event_type, provider_job_id, received_at)
VALUES (:provider, :event_id, :event_type, :provider_job_id, :now)
ON CONFLICT (provider, event_id) DO NOTHING
RETURNING event_id

-- name: job_reconcile_now
-- An event named this provider job: check on it now.
UPDATE jobs
   SET reconcile_at = :now
 WHERE provider = :provider AND provider_job_id = :provider_job_id AND lease_token IS NULL
   AND (state = 'running'
        OR (state = 'cancelled' AND cancel_outcome = 'not_supported' AND reconcile_at IS NOT NULL))
RETURNING id
