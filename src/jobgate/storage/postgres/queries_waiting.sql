-- Why queued jobs wait (PostgreSQL): what the claim reads about them, read the same way.

-- name: job_wait_facts
-- For a tenant's queued jobs: the database's time, the oldest pause covering each (the claims'
-- pause_covers), and when asked the slots its tenant and its concurrency key hold and its
-- place in line (job_queue_position's walk: the place, and whether it is exact or a floor).
WITH clock AS (
    SELECT coalesce(:now::timestamptz, now()) AS now
)
SELECT f.*, abs(f.place) AS queue_position, f.place > 0 AS queue_position_exact
  FROM (SELECT j.id AS job_id, clock.now,
               jobgate_covering_pause(j.provider, j.model, j.tenant_id) AS pause,
               CASE WHEN :count_positions::boolean THEN
                   jobgate_queue_place(j.tenant_id, j.priority, j.run_at, j.id, clock.now,
                                       :counted)
               END AS place,
               CASE WHEN :count_running::boolean THEN
                   (SELECT count(*)::integer FROM jobs AS r
                     WHERE r.tenant_id = j.tenant_id AND {{holds_slot}})
               END AS running,
               CASE WHEN :count_keys::boolean AND j.concurrency_key IS NOT NULL THEN
                   (SELECT count(*)::integer FROM jobs AS r
                     WHERE r.tenant_id = j.tenant_id AND r.concurrency_key = j.concurrency_key
                       AND {{holds_slot}})
               END AS key_running
          FROM jobs AS j
         CROSS JOIN clock
         WHERE j.id = ANY(:ids::text[]) AND j.tenant_id = :tenant_id
           AND j.state = 'queued') AS f

-- name: queued_wait_groups
-- Queued jobs grouped by what every claim rule reads (tenant, provider, model, the concurrency
-- key while :keys, run_at come or not), the largest groups first, each with the oldest pause
-- covering it and the slots held by its tenant (for :capped_tenants) and key. The jobs counted
-- are the head of each tenant's line: at most :counted entries of jobs_claimable walked per
-- tenant in claim order, so the read costs the same behind any backlog; `exact`: the walk
-- reached the end of the tenant's line (else the group's count is a floor).
WITH clock AS (
    SELECT coalesce(:now::timestamptz, now()) AS now
), walked AS (
    SELECT t.id AS tenant_id, q.*, count(*) OVER (PARTITION BY t.id) AS walked
      FROM tenants AS t
     CROSS JOIN LATERAL (SELECT j.provider, j.model, j.concurrency_key, j.run_at
                           FROM jobs AS j
                          WHERE j.tenant_id = t.id AND j.state = 'queued'
                          ORDER BY j.priority, j.run_at, j.id
                          LIMIT :counted) AS q
), grouped AS (
    SELECT q.tenant_id, q.provider, q.model,
           CASE WHEN :keys::boolean THEN q.concurrency_key END AS concurrency_key,
           q.run_at > clock.now AS scheduled, min(q.run_at) AS run_at,
           count(*)::integer AS queued, max(q.walked) < :counted AS exact
      FROM walked AS q
     CROSS JOIN clock
     GROUP BY 1, 2, 3, 4, 5
     ORDER BY queued DESC
     LIMIT :limit
)
SELECT j.*, clock.now,
       jobgate_covering_pause(j.provider, j.model, j.tenant_id) AS pause,
       CASE WHEN j.tenant_id = ANY(:capped_tenants::text[]) THEN
           (SELECT count(*)::integer FROM jobs AS r
             WHERE r.tenant_id = j.tenant_id AND {{holds_slot}})
       END AS running,
       CASE WHEN j.concurrency_key IS NOT NULL THEN
           (SELECT count(*)::integer FROM jobs AS r
             WHERE r.tenant_id = j.tenant_id AND r.concurrency_key = j.concurrency_key
               AND {{holds_slot}})
       END AS key_running
  FROM grouped AS j
 CROSS JOIN clock
