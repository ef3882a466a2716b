-- What the operator console reads (SQLite): recent transitions, queue depth, job search.

-- name: console_transitions
-- Applied events since a moment, newest first, with each claim's last time into the queue.
SELECT e.job_id, j.tenant_id, j.provider, e.from_state, e.to_state, e.reason,
       e.created_at AS at, j.run_at,
       CASE WHEN e.to_state = 'running' THEN
           (SELECT max(p.created_at) FROM job_events AS p
             WHERE p.job_id = e.job_id AND p.seq < e.seq AND p.to_state = 'queued'
               AND p.applied = 1)
       END AS queued_at
  FROM job_events AS e
  JOIN jobs AS j ON j.id = e.job_id
 WHERE e.created_at >= :since AND e.applied = 1
 ORDER BY e.created_at DESC, e.job_id DESC, e.seq DESC
 LIMIT :limit

-- name: console_queue_depth
-- Queued jobs now, by tenant and provider, from the head of each tenant's line: at most
-- :counted entries of jobs_claimable walked per tenant in claim order, so the read costs the
-- same behind any backlog. `exact`: the walk reached the end of the tenant's line (else each of
-- its counts is a floor).
SELECT t.id AS tenant_id, j.provider, count(*) AS queued,
       sum(count(*)) OVER (PARTITION BY t.id) < :counted AS exact
  FROM tenants AS t
  JOIN jobs AS j ON j.id IN (SELECT h.id FROM jobs AS h INDEXED BY jobs_claimable
                              WHERE h.tenant_id = t.id AND h.state = 'queued'
                              ORDER BY h.priority, h.run_at, h.id
                              LIMIT :counted)
 GROUP BY t.id, j.provider

-- name: console_job_search
-- Jobs matching a filter (NULL: any), newest first, after a (created_at, id) cursor.
SELECT *
  FROM jobs AS j
 WHERE {{job_filter}}
   AND (:after_created_at IS NULL OR (j.created_at, j.id) < (:after_created_at, :after_id))
 ORDER BY j.created_at DESC, j.id DESC
 LIMIT :limit
