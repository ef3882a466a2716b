-- What the operator console reads (PostgreSQL): recent transitions, queue depth, job search.

-- name: console_transitions
-- Applied events since a moment, newest first, with each claim's last time into the queue.
-- The log's two sides (job_event_log, migration 0028) are read apart, each newest first
-- through its time index and cut at the limit, then merged: the stored events through
-- job_events_by_time, the first events the job rows imply through jobs_by_creation (a read of
-- the view as a whole is not ordered by the planner: it sorted the hour's every job).
SELECT e.job_id, e.tenant_id, e.provider, e.from_state, e.to_state, e.reason,
       e.created_at AS at, e.run_at,
       CASE WHEN e.to_state = 'running' THEN
           (SELECT max(p.created_at) FROM job_event_log AS p
             WHERE p.job_id = e.job_id AND p.job_created_at = e.job_created_at
               AND p.seq < e.seq AND p.to_state = 'queued'
               AND p.applied)
       END AS queued_at
  FROM ((SELECT s.job_id, s.seq, s.from_state, s.to_state, s.reason, s.created_at,
                j.tenant_id, j.provider, j.run_at, j.created_at AS job_created_at
           FROM job_events AS s
           JOIN jobs AS j ON j.id = s.job_id
          WHERE s.created_at >= :since::timestamptz AND s.applied
          ORDER BY s.created_at DESC, s.job_id DESC, s.seq DESC
          LIMIT :limit)
        UNION ALL
        (SELECT c.id, 1, NULL::text, 'queued', 'submitted', c.created_at,  -- as job_event_log
                c.tenant_id, c.provider, c.run_at, c.created_at
           FROM jobs AS c
          WHERE c.created_at >= :since::timestamptz
            AND NOT EXISTS (SELECT 1 FROM job_events AS first
                             WHERE first.job_id = c.id AND first.seq = 1
                               AND first.job_created_at = c.created_at)
          ORDER BY c.created_at DESC, c.id DESC
          LIMIT :limit)) AS e
 ORDER BY e.created_at DESC, e.job_id DESC, e.seq DESC
 LIMIT :limit

-- name: console_queue_depth
-- Queued jobs now, by tenant and provider, from the head of each tenant's line: at most
-- :counted entries of jobs_claimable walked per tenant in claim order, so the read costs the
-- same behind any backlog. `exact`: the walk reached the end of the tenant's line (else each of
-- its counts is a floor).
WITH walked AS (
    SELECT t.id AS tenant_id, w.provider
      FROM tenants AS t
     CROSS JOIN LATERAL (SELECT j.provider FROM jobs AS j
                          WHERE j.tenant_id = t.id AND j.state = 'queued'
                          ORDER BY j.priority, j.run_at, j.id
                          LIMIT :counted) AS w
)
SELECT tenant_id, provider, count(*)::integer AS queued,
       sum(count(*)) OVER (PARTITION BY tenant_id) < :counted AS exact
  FROM walked
 GROUP BY tenant_id, provider

-- name: console_job_search
-- Jobs matching a filter (NULL: any), newest first, after a (created_at, id) cursor.
SELECT *
  FROM jobs AS j
 WHERE {{job_filter}}
   AND (:after_created_at::timestamptz IS NULL
        OR (j.created_at, j.id) < (:after_created_at::timestamptz, :after_id::text))
 ORDER BY j.created_at DESC, j.id DESC
 LIMIT :limit
