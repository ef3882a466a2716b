-- No-op on PostgreSQL, kept for the version parity of the two dialects. SQLite's 0023 gates its
-- per-row trigger's outbox branch on the job having a webhook or its tenant an enabled endpoint;
-- PostgreSQL's statement trigger jobgate_jobs_after_update has skipped the outbox fan-out in
-- that case since 0008.

SELECT 1;
