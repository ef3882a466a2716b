-- Batch progress webhooks: the claim's hold (an endpoint's later event waits while a progress
-- of the same job or batch to it is in flight) covers `batch.progress` as `job.progress`.
DROP INDEX IF EXISTS outbox_progress_in_flight;
CREATE INDEX outbox_progress_in_flight ON outbox (job_id, target, series)
    WHERE event_type IN ('job.progress', 'batch.progress')
      AND state = 'pending' AND lease_token IS NOT NULL;
