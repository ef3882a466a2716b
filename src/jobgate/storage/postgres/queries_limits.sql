-- Tenant limits, queue accounting and retention (PostgreSQL).

-- name: queue_lock_tenant
-- Serialise one tenant's admissions near its queue bound until commit, so that the count read
-- after this lock and the insert that follows decide together (no overshoot).
SELECT pg_advisory_xact_lock(hashtextextended('jobgate.queue:' || :tenant_id::text, 0))

-- name: queue_lock_total
-- Serialise every admission near the global queue bound until commit (taken after any tenant's).
SELECT pg_advisory_xact_lock(7146013)

-- name: job_purge_expired
-- Erase input and result of jobs completed before the cut-off, oldest first.
WITH due AS (
    SELECT id FROM jobs
     WHERE purged_at IS NULL AND completed_at < :completed_before
     ORDER BY completed_at
     LIMIT :limit
       FOR UPDATE SKIP LOCKED
)
UPDATE jobs AS j
   SET request = NULL, result = NULL, purged_at = coalesce(:now::timestamptz, now())
  FROM due
 WHERE j.id = due.id

-- name: idempotency_purge_expired
-- Forget expired idempotency keys.
DELETE FROM idempotency_keys
 WHERE ctid IN (SELECT ctid FROM idempotency_keys
                 WHERE expires_at <= coalesce(:now::timestamptz, now())
                 LIMIT :limit)
