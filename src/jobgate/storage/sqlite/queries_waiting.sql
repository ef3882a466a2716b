-- Why queued jobs wait (SQLite): what the claim reads about them, read the same way.

-- fragment: covering_pause
-- The oldest pause covering job `j` (the claims' pause_covers) as {"id", "reason"}, or NULL.
(SELECT json_object('id', p.id, 'reason', p.reason) FROM pauses AS p WHERE {{pause_covers}}
  ORDER BY p.created_at, p.id LIMIT 1)

-- name: job_wait_facts
-- For a tenant's queued jobs: the time, the oldest pause covering each (the claims'
-- pause_covers), and when asked the slots its tenant and its concurrency key hold and its
-- place in line (job_queue_position's walk: the place, and whether it is exact or a floor).
SELECT f.*, abs(f.place) AS queue_position, f.place > 0 AS queue_position_exact
  FROM (SELECT j.id AS job_id, :now AS now,
               {{covering_pause}} AS pause,
               CASE WHEN :count_positions THEN {{queue_place}} END AS place,
               CASE WHEN :count_running THEN
                   (SELECT count(*) FROM jobs AS r INDEXED BY jobs_running
                     WHERE r.tenant_id = j.tenant_id AND {{holds_slot}})
               END AS running,
               CASE WHEN :count_keys AND j.concurrency_key IS NOT NULL THEN
                   (SELECT count(*) FROM jobs AS r
                     WHERE r.tenant_id = j.tenant_id AND r.concurrency_key = j.concurrency_key
                       AND {{holds_slot}})
               END AS key_running
          FROM jobs AS j
         WHERE j.id IN (SELECT value FROM json_each(:ids)) AND j.tenant_id = :tenant_id
           AND j.state = 'queued') AS f

-- fragment: queue_place
-- Job `j`'s place in its tenant's line, walked backward from it in claim order (priority,
-- run_at, id) over at most :counted entries of jobs_claimable: 1 + the claimable ones walked
-- (run_at come by :now), negated when the walk stopped at :counted entries (a floor, not the
-- place). Walked forward from the head of the line, a row comparison bounds the scan on its
-- first column only: the head of a line at one priority walked the whole line. The job's
-- columns lose their affinity (unary +): SQLite bounds an index range by a row value only
-- when its members' affinity is the index columns' own, and a column compared with a column
-- has NUMERIC or BLOB affinity (a scan of every job behind it at its priority otherwise).
(SELECT CASE WHEN count(*) < :counted THEN 1 ELSE -1 END
        * (count(CASE WHEN w.run_at <= :now THEN 1 END) + 1)
   FROM (SELECT a.run_at
           FROM jobs AS a
          WHERE a.state = 'queued' AND a.tenant_id = j.tenant_id
            AND (a.priority, a.run_at, a.id) < (+j.priority, +j.run_at, +j.id)
          ORDER BY a.priority DESC, a.run_at DESC, a.id DESC
          LIMIT :counted) AS w)

-- name: queued_wait_groups
-- Queued jobs grouped by what every claim rule reads (tenant, provider, model, the concurrency
-- key while :keys, run_at come or not), the largest groups first, each with the oldest pause
-- covering it and the slots held by its tenant (for :capped_tenants) and key. The jobs counted
-- are the head of each tenant's line: at most :counted entries of jobs_claimable walked per
-- tenant in claim order, so the read costs the same behind any backlog; `exact`: the walk
-- reached the end of the tenant's line (else the group's count is a floor).
WITH walked AS (
    SELECT q.*, count(*) OVER (PARTITION BY t.id) AS walked
      FROM tenants AS t
      JOIN jobs AS q ON q.id IN (SELECT h.id FROM jobs AS h INDEXED BY jobs_claimable
                                  WHERE h.tenant_id = t.id AND h.state = 'queued'
                                  ORDER BY h.priority, h.run_at, h.id
                                  LIMIT :counted)
), grouped AS (
    SELECT q.tenant_id, q.provider, q.model,
           CASE WHEN :keys THEN q.concurrency_key END AS concurrency_key,
           q.run_at > :now AS scheduled, min(q.run_at) AS run_at, count(*) AS queued,
           max(q.walked) < :counted AS exact
      FROM walked AS q
     GROUP BY 1, 2, 3, 4, 5
     ORDER BY queued DESC
     LIMIT :limit
)
SELECT j.*, :now AS now,
       {{covering_pause}} AS pause,
       CASE WHEN j.tenant_id IN (SELECT value FROM json_each(:capped_tenants)) THEN
           (SELECT count(*) FROM jobs AS r INDEXED BY jobs_running
             WHERE r.tenant_id = j.tenant_id AND {{holds_slot}})
       END AS running,
       CASE WHEN j.concurrency_key IS NOT NULL THEN
           (SELECT count(*) FROM jobs AS r
             WHERE r.tenant_id = j.tenant_id AND r.concurrency_key = j.concurrency_key
               AND {{holds_slot}})
       END AS key_running
  FROM grouped AS j
