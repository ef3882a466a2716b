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
