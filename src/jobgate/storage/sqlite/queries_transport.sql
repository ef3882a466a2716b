-- Transports: claims by id and the publication ledger (SQLite).

-- name: job_claim_by_id_candidates
-- The named jobs that are claimable now, best first (caps are applied in Python: one writer).
SELECT id, tenant_id, concurrency_key
  FROM jobs AS j
 WHERE id IN (SELECT value FROM json_each(:ids))
   AND state = 'queued'
   AND run_at <= :now
   -- Past its start deadline a job may not start (the reaper expires it).
   AND (expires_at IS NULL OR expires_at > :now)
   AND (:providers IS NULL OR provider IN (SELECT value FROM json_each(:providers)))
   -- An operator's pause holds the jobs it covers (their messages are deferred).
   AND NOT EXISTS (SELECT 1 FROM pauses AS p WHERE {{pause_covers}})
 ORDER BY priority, run_at, id

-- name: job_claim_by_id_queued
-- Which of the named jobs are still queued (a message for them is deferred, not dropped).
SELECT id FROM jobs WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'queued'

-- fragment: transport_ready
-- A queued job `j` the relay may publish at :now: due, before its start deadline, not of a
-- rate-limited provider (claimed from the table, their buckets taken first) and not paused
-- (no claim could take it; its resume wakes the relay). `p` in the pause rule is the pause,
-- shadowing any publication inside the subquery.
j.run_at <= :now
AND (j.expires_at IS NULL OR j.expires_at > :now)
AND j.provider NOT IN (SELECT value FROM json_each(:skip_providers))
AND NOT EXISTS (SELECT 1 FROM pauses AS p WHERE {{pause_covers}})

-- name: transport_publish_due
-- Record and answer the ready jobs that need a "job ready" message: never published; published
-- for an earlier transition; deferred (no message: consumed while the tenant was at its cap, or
-- the publish failed) and due; or, with :sweep, still unclaimed at their republish time (the
-- sweep, presumed lost). The window counts every message outstanding: each publication of a
-- queued job's current transition that is not deferred, due for the sweep or not. New messages
-- take no more than the window leaves, by weighted fair share (a tenant's k-th job scores
-- (running + outstanding + k) / weight, lowest first); the sweep replaces messages already
-- counted, so a full window does not stop it (lost messages filling the window would never be
-- replaced).
WITH shares AS (
    SELECT json_extract(value, '$.tenant_id') AS tenant_id,
           json_extract(value, '$.weight') AS weight
      FROM json_each(:shares)
), ledger AS (
    -- Every live job with its publication, read once for the window and the sweep.
    SELECT j.id, j.tenant_id, j.provider, j.model, j.event_seq, j.priority, j.run_at,
           j.expires_at, p.republish_at,
           j.state = 'running' AND j.lease_token IS NOT NULL AS holds_slot,
           -- A message in the broker for a queued job, not yet claimed.
           coalesce(j.state = 'queued' AND p.event_seq = j.event_seq AND NOT p.deferred, 0)
           AS outstanding
      FROM jobs AS j
      LEFT JOIN transport_publications AS p ON p.job_id = j.id
     WHERE j.state IN ({{live_states}})
), held AS (
    -- Per tenant: running jobs, and messages outstanding.
    SELECT tenant_id, sum(holds_slot) AS running, sum(outstanding) AS outstanding
      FROM ledger
     GROUP BY tenant_id
), swept AS (
    -- The sweep, unless :sweep is off (the broker holds a backlog as big as the window: its
    -- messages are slow, not lost). Each replaces a message the window counts already.
    SELECT j.id, j.event_seq
      FROM ledger AS j
     WHERE :sweep AND j.outstanding AND j.republish_at <= :now
       AND {{transport_ready}}
     ORDER BY j.priority, j.run_at, j.id
     LIMIT max(0, :limit)
), due AS (
    -- Each adds a message: ranked by fair share, within what the window leaves.
    SELECT j.id, j.event_seq, j.priority, j.run_at,
           (coalesce(h.running, 0) + coalesce(h.outstanding, 0)
            + row_number() OVER (PARTITION BY j.tenant_id ORDER BY j.priority, j.run_at, j.id))
           * 1.0 / coalesce(s.weight, :default_weight) AS share
      FROM jobs AS j
      LEFT JOIN transport_publications AS p ON p.job_id = j.id
      LEFT JOIN shares AS s ON s.tenant_id = j.tenant_id
      LEFT JOIN held AS h ON h.tenant_id = j.tenant_id
     WHERE j.state = 'queued'
       AND (p.job_id IS NULL OR p.event_seq <> j.event_seq
            -- A deferred job has no message: its delay alone decides, whatever :sweep says.
            OR (p.deferred AND p.republish_at <= :now))
       AND {{transport_ready}}
), picked AS (
    SELECT id, event_seq FROM swept
     UNION ALL
    SELECT * FROM (SELECT id, event_seq FROM due
                    ORDER BY share, priority, run_at, id
                    LIMIT max(0, min(:limit - (SELECT count(*) FROM swept),
                                     :window - (SELECT coalesce(sum(outstanding), 0)
                                                  FROM held))))
)
INSERT INTO transport_publications (job_id, event_seq, republish_at)
SELECT id, event_seq, :now + :republish_after_s
  FROM picked
 WHERE true
ON CONFLICT (job_id) DO UPDATE
   SET event_seq = excluded.event_seq,
       -- A republish of the same transition backs off: the n-th waits republish_after_s
       -- times 2^(n-1), capped at 16 times, so a broker slow to deliver is not flooded with
       -- duplicates of its own backlog.
       republish_at = CASE WHEN transport_publications.event_seq = excluded.event_seq
                           THEN :now + :republish_after_s
                                       * (1 << min(transport_publications.published_count, 4))
                           ELSE excluded.republish_at END,
       published_count = CASE WHEN transport_publications.event_seq = excluded.event_seq
                              THEN transport_publications.published_count + 1 ELSE 1 END,
       deferred = 0
RETURNING job_id, published_count

-- name: transport_defer
-- Mark these jobs' publications deferred (no message in the broker: the window stops counting
-- them) and publish them again after a delay if they are still ready then.
UPDATE transport_publications
   SET republish_at = :now + :delay_s,
       deferred = 1
 WHERE job_id IN (SELECT value FROM json_each(:ids))
