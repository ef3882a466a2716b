-- Batched enqueue on SQLite (the inserts themselves reuse job_insert, in one transaction).

-- name: queued_count_many
-- One tenant's queued jobs and everyone's, in one read.
SELECT coalesce(sum(tenant_id = :tenant_id), 0) AS tenant_queued, count(*) AS total_queued
  FROM jobs
 WHERE state = 'queued'
