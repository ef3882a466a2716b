-- Traffic control (issue 19): a job's concurrency key (e.g. an end user of the tenant), capped
-- per tenant by `max_running_per_key` in the claim. The partial index serves the claim's count
-- of running jobs per (tenant, key).

ALTER TABLE jobs ADD COLUMN concurrency_key text;

CREATE INDEX jobs_running_keys ON jobs (tenant_id, concurrency_key)
    WHERE state = 'running' AND concurrency_key IS NOT NULL;

ALTER TABLE tenant_limits ADD COLUMN max_running_per_key integer;
