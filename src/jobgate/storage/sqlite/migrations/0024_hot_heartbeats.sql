-- A heartbeat writes only `lease_expires_at`; while that column was the key of
-- jobs_lease_expiry every renewal also rewrote the row's entry there. jobs_running indexes the
-- running jobs by a column no heartbeat writes; it serves what read jobs_lease_expiry: the
-- reaper (running jobs whose lease ran out, oldest first), the claim's running counts per
-- tenant (job_claim_running) and the admin overview's running count.
DROP INDEX jobs_lease_expiry;
CREATE INDEX jobs_running ON jobs (tenant_id) WHERE state = 'running';
