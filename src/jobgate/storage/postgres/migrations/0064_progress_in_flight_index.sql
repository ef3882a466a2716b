-- The progresses being sent, for the claim's hold (an endpoint's later event for a job waits
-- while a job.progress of that job to it is in flight): a handful of rows at any time, so the
-- hold costs a probe of this index, never a walk over the retries scheduled for later.
CREATE INDEX outbox_progress_in_flight ON outbox (job_id, target, series)
    WHERE event_type = 'job.progress' AND state = 'pending' AND lease_token IS NOT NULL;
