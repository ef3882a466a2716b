-- What operators see across tenants (PostgreSQL).

-- name: admin_overview
-- Per tenant: queued (at most :counted entries of jobs_claimable walked: `queued_exact` when
-- the walk reached the end of the line, else a floor), running, the longest-waiting claimable
-- job (the earliest come run_at at each priority of :priorities, one index probe each, rather
-- than a walk of the whole line), dead letters. Each read costs the same behind any backlog.
SELECT o.*, o.queued < :counted AS queued_exact
  FROM (SELECT t.id AS tenant_id, t.name AS tenant_name,
               (SELECT count(*)::integer
                  FROM (SELECT 1 FROM jobs AS j
                         WHERE j.tenant_id = t.id AND j.state = 'queued'
                         LIMIT :counted) AS w) AS queued,
               (SELECT count(*)::integer FROM jobs AS j
                 WHERE j.tenant_id = t.id AND j.state = 'running') AS running,
               (SELECT min(d.run_at)
                  FROM jsonb_array_elements(:priorities::jsonb) AS p(priority)
                 CROSS JOIN LATERAL
                       (SELECT j.run_at FROM jobs AS j
                         WHERE j.tenant_id = t.id AND j.state = 'queued'
                           AND j.priority = p.priority::integer
                           AND j.run_at <= coalesce(:now::timestamptz, now())
                         ORDER BY j.run_at
                         LIMIT 1) AS d) AS oldest_due_at,
               (SELECT count(*)::integer FROM jobs AS j
                 WHERE j.tenant_id = t.id AND j.dead_lettered AND j.state = 'failed')
                   AS dead_lettered
          FROM tenants AS t) AS o
 ORDER BY o.tenant_name

-- name: admin_job_list
-- Jobs of one tenant or all, newest first.
SELECT *
  FROM jobs
 WHERE (:tenant_id::text IS NULL OR tenant_id = :tenant_id::text)
   AND (:states::jsonb IS NULL OR state = ANY(ARRAY(SELECT jsonb_array_elements_text(:states::jsonb))))
   AND (:dead_lettered::boolean IS NULL OR dead_lettered = :dead_lettered::boolean)
   AND (:after_id::text IS NULL
        OR (created_at, id) < (SELECT a.created_at, a.id FROM jobs AS a
                                WHERE a.id = :after_id::text))
 ORDER BY created_at DESC, id DESC
 LIMIT :limit

-- name: dashboard_session_insert
-- Open a dashboard session for a live operator key (no row: the key is not valid).
WITH key AS (
    SELECT id, name FROM operator_keys WHERE key_hash = :key_hash AND revoked_at IS NULL
), opened AS (
    INSERT INTO dashboard_sessions (id_hash, operator_key_id, created_at, expires_at)
    SELECT :id_hash, key.id, coalesce(:now::timestamptz, now()),
           coalesce(:now::timestamptz, now()) + make_interval(secs => :ttl_s::double precision)
      FROM key
    RETURNING operator_key_id
)
SELECT key.name FROM opened JOIN key ON key.id = opened.operator_key_id
