-- The provider generation of a job: how many of its provider jobs ended and were followed by
-- a new attempt (a retryable failure or a rate limit at the provider, a redrive). A create's
-- Idempotency-Key is the job id while it is 0, then `job_id:generation`: a provider that
-- deduplicates creates answers a re-send with the original, but runs a new attempt anew.

ALTER TABLE jobs ADD COLUMN provider_generation integer NOT NULL DEFAULT 0;
