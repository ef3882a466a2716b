-- A heartbeat writes only `lease_expires_at`; while that column was the key of
-- jobs_lease_expiry no heartbeat could be a HOT update (every renewal wrote a new index entry
-- and every other index's entry for the new tuple). jobs_running indexes the running jobs by a
-- column no heartbeat writes; it serves what read jobs_lease_expiry: the reaper (running jobs
-- whose lease ran out, oldest first: it reads the running jobs' rows and sorts the expired
-- ones), the claims' running counts per tenant and the admin overview's running count.
DROP INDEX jobs_lease_expiry;
CREATE INDEX jobs_running ON jobs (tenant_id) WHERE state = 'running';

-- Room on each page for a renewed row to stay beside the old one (HOT). It applies to rows
-- written from now on: pages already full stay so until their rows are removed or the table
-- is rewritten (VACUUM FULL, CLUSTER), which this migration does not do.
ALTER TABLE jobs SET (fillfactor = 70);
