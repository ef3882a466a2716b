-- The console (issue 20): its charts read the last hour of job_events by time, and its search
-- finds a job by the provider's id without knowing the provider.

CREATE INDEX job_events_by_time ON job_events (created_at);
CREATE INDEX jobs_by_provider_job_id ON jobs (provider_job_id) WHERE provider_job_id IS NOT NULL;
