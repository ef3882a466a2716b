-- What operators see across tenants (SQLite).

-- name: admin_overview
-- Per tenant: queued (at most :counted entries of jobs_claimable walked: `queued_exact` when
-- the walk reached the end of the line, else a floor), running, the longest-waiting claimable
-- job (the earliest come run_at at each priority of :priorities, one index probe each, rather
-- than a walk of the whole line), dead letters. Each read costs the same behind any backlog.
-- INDEXED BY: left to itself the planner may walk an index of every job of the tenant.
SELECT o.*, o.queued < :counted AS queued_exact
  FROM (SELECT t.id AS tenant_id, t.name AS tenant_name,
               (SELECT count(*) FROM (SELECT 1 FROM jobs AS j INDEXED BY jobs_claimable
                                       WHERE j.tenant_id = t.id AND j.state = 'queued'
                                       LIMIT :counted)) AS queued,
               (SELECT count(*) FROM jobs AS j INDEXED BY jobs_running
                 WHERE j.tenant_id = t.id AND j.state = 'running') AS running,
               (SELECT min((SELECT j.run_at FROM jobs AS j INDEXED BY jobs_claimable
                             WHERE j.tenant_id = t.id AND j.state = 'queued'
                               AND j.priority = p.value AND j.run_at <= :now
                             ORDER BY j.run_at
                             LIMIT 1))
                  FROM json_each(:priorities) AS p) AS oldest_due_at,
               (SELECT count(*) FROM jobs AS j INDEXED BY jobs_dead_lettered
                 WHERE j.tenant_id = t.id AND j.dead_lettered = 1 AND j.state = 'failed')
                   AS dead_lettered
          FROM tenants AS t) AS o
 ORDER BY o.tenant_name

-- name: admin_job_list
-- Jobs of one tenant or all, newest first.
SELECT *
  FROM jobs
 WHERE (:tenant_id IS NULL OR tenant_id = :tenant_id)
   AND (:states IS NULL OR state IN (SELECT value FROM json_each(:states)))
   AND (:dead_lettered IS NULL OR dead_lettered = :dead_lettered)
   AND (:after_id IS NULL
        OR (created_at, id) < (SELECT a.created_at, a.id FROM jobs AS a WHERE a.id = :after_id))
 ORDER BY created_at DESC, id DESC
 LIMIT :limit

-- name: dashboard_session_insert
-- Open a dashboard session for a live operator key (no row: the key is not valid).
INSERT INTO dashboard_sessions (id_hash, operator_key_id, created_at, expires_at)
SELECT :id_hash, id, :now, :now + :ttl_s FROM operator_keys
 WHERE key_hash = :key_hash AND revoked_at IS NULL
RETURNING (SELECT name FROM operator_keys WHERE id = operator_key_id) AS name
