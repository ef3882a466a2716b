-- No-op on SQLite, kept for the version parity of the two dialects. PostgreSQL's 0064 indexes
-- the job.progress rows in flight for the claim's hold, which its planner may run as one
-- hashed scan; SQLite runs the hold as a probe per candidate on the outbox's unique key
-- (job_id, event_type, target, series), which needs nothing more.

SELECT 1;
