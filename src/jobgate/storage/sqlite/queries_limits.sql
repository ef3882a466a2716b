-- Tenant limits, queue accounting and retention (SQLite).

-- name: job_purge_expired
-- Erase input and result of jobs completed before the cut-off, oldest first.
UPDATE jobs
   SET request = NULL, result = NULL, purged_at = :now
 WHERE id IN (SELECT id FROM jobs
               WHERE purged_at IS NULL AND completed_at < :completed_before
               ORDER BY completed_at
               LIMIT :limit)

-- name: idempotency_purge_expired
-- Forget expired idempotency keys.
DELETE FROM idempotency_keys
 WHERE (tenant_id, route, key) IN (SELECT tenant_id, route, key
                                     FROM idempotency_keys
                                    WHERE expires_at <= :now
                                    LIMIT :limit)
