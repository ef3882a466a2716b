-- Background mode, the reconciler and inbound provider events (both dialects).

-- name: job_by_provider_job
-- The newest job a provider id belongs to.
SELECT * FROM jobs
 WHERE provider = :provider AND provider_job_id = :provider_job_id
 ORDER BY created_at DESC
 LIMIT 1

-- name: provider_events_prune
-- Forget old provider events.
DELETE FROM provider_events WHERE received_at < :before

-- fragment: background_accepted
-- What a background accept sets, besides when the first check is due: the provider's id, the
-- lease released, the reconciler's counters from zero.
provider_job_id = :provider_job_id,
       provider_status = :provider_status,
       creation_outcome = 'accepted',
       phase = 'awaiting_provider',
       lease_owner = NULL,
       lease_token = NULL,
       lease_expires_at = NULL,
       reconcile_checks = 0,
       reconcile_failures = 0,
       reconcile_error = NULL,
       reconciled_at = NULL,
       cancel_sent_at = NULL,

-- fragment: retry_forgets_provider_job
-- What a settled verdict `v` does to job `j`'s provider job: a retry forgets it (a new one is
-- created, under the next generation); a cancellation keeps it.
creation_outcome = CASE WHEN v.state = 'queued' AND j.cancel_requested_at IS NULL
                        THEN NULL ELSE j.creation_outcome END,
provider_job_id = CASE WHEN v.state = 'queued' AND j.cancel_requested_at IS NULL
                       THEN NULL ELSE j.provider_job_id END,
provider_generation = j.provider_generation
                      + CASE WHEN v.state = 'queued' AND j.cancel_requested_at IS NULL
                             THEN 1 ELSE 0 END,

-- name: job_provider_submitting
-- Fenced on the lease: a create is about to leave for the provider.
UPDATE jobs
   SET phase = 'submitting', creation_outcome = 'sending', updated_at = {{now}}
 WHERE id = :id AND lease_token = :token AND state = 'running'
RETURNING id
