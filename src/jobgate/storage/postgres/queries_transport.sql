-- Transports: claims by id and the publication ledger (PostgreSQL).

-- name: job_claim_by_id
-- Lease the named jobs that are claimable, within each tenant's free slots and, under a
-- tenant's max_running_per_key, each concurrency key's free slots (best first by priority,
-- run_at, id), and no key over its budget or its rpm_per_key (claim_key_admits); rows another
-- claimer holds are skipped, not waited for.
WITH clock AS (
    SELECT coalesce(:now::timestamptz, now()) AS now
), shares AS (
    {{claim_shares}}
), wanted AS (
    SELECT j.id, j.tenant_id, j.priority, j.run_at, j.concurrency_key, kr.rpm_key
      FROM jobs AS j
     CROSS JOIN clock
     CROSS JOIN LATERAL (
           SELECT coalesce((SELECT s.rpm_per_key FROM shares AS s
                             WHERE s.tenant_id = j.tenant_id),
                           :default_rpm_per_key::integer) AS rpm_key) AS kr
     WHERE j.id = ANY(:ids::text[])
       AND j.state = 'queued'
       AND j.run_at <= clock.now
       -- Past its start deadline a job may not start (the reaper expires it).
       AND (j.expires_at IS NULL OR j.expires_at > clock.now)
       AND (:providers::text[] IS NULL OR j.provider = ANY(:providers::text[]))
       AND NOT j.tenant_id = ANY(:blocked_tenants::text[])
       -- An operator's pause holds the jobs it covers (their messages are deferred).
       AND NOT EXISTS (SELECT 1 FROM pauses AS p WHERE {{pause_covers}})
       AND {{claim_key_admits}}
     ORDER BY j.id
       FOR UPDATE OF j SKIP LOCKED
), busy AS (
    -- Read only under a cap on running jobs (nothing else here depends on them): each read
    -- visits the entries jobs that have left 'running' leave in jobs_running until a vacuum.
    SELECT j.tenant_id, count(*)::integer AS running
      FROM jobs AS j
     WHERE :running_capped::boolean
       AND j.state = 'running' AND j.lease_token IS NOT NULL
       AND j.tenant_id IN (SELECT tenant_id FROM wanted)
     GROUP BY j.tenant_id
), key_busy AS (
    -- Every running job of a key, leased or in background mode (as job_claim counts them).
    SELECT j.tenant_id, j.concurrency_key, count(*)::integer AS running
      FROM jobs AS j
     WHERE :keys_capped::boolean
       AND j.state = 'running' AND j.concurrency_key IS NOT NULL
       AND j.tenant_id IN (SELECT tenant_id FROM wanted)
     GROUP BY j.tenant_id, j.concurrency_key
), keyed AS (
    -- Under a per-key cap, no more of a key than its free slots (best first); the tenant's
    -- rank below counts only the jobs kept, as in job_claim.
    SELECT sc.*
      FROM (SELECT w.*,
                   {{claim_per_key}} AS per_key,
                   row_number() OVER (PARTITION BY w.tenant_id, w.concurrency_key
                                      ORDER BY w.priority, w.run_at, w.id) AS key_rank
              FROM wanted AS w
              LEFT JOIN shares AS s ON s.tenant_id = w.tenant_id) AS sc
      LEFT JOIN key_busy AS kb
        ON kb.tenant_id = sc.tenant_id AND kb.concurrency_key = sc.concurrency_key
     WHERE {{claim_key_cap}} AND {{claim_key_rate}}
), ranked AS (
    SELECT w.id,
           coalesce(b.running, 0)
           + row_number() OVER (PARTITION BY w.tenant_id ORDER BY w.priority, w.run_at, w.id)
           AS would_run,
           {{claim_max_running}} AS max_running
      FROM keyed AS w
      LEFT JOIN shares AS s ON s.tenant_id = w.tenant_id
      LEFT JOIN busy AS b ON b.tenant_id = w.tenant_id
), claimed AS (
    UPDATE jobs AS j
       {{claim_lease}}
      FROM clock
     WHERE j.id = ANY (ARRAY(SELECT id FROM ranked
                              WHERE max_running <= 0 OR would_run <= max_running))
    RETURNING j.*
), counted AS (
    {{claim_counted}}
)
SELECT * FROM claimed

-- name: job_claim_by_id_queued
-- Which of the named jobs are still queued (a message for them is deferred, not dropped).
SELECT id FROM jobs
 WHERE id = ANY(ARRAY(SELECT jsonb_array_elements_text(:ids::jsonb))) AND state = 'queued'

-- fragment: transport_ready
-- A queued job `j` the relay may publish now (with `clock`): due, before its start deadline,
-- not of a rate-limited provider (claimed from the table, their buckets taken first) and not
-- paused (no claim could take it; its resume wakes the relay). `p` in the pause rule is the
-- pause, shadowing any publication inside the subquery.
j.run_at <= clock.now
AND (j.expires_at IS NULL OR j.expires_at > clock.now)
AND j.provider <> ALL(ARRAY(SELECT jsonb_array_elements_text(:skip_providers::jsonb)))
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
-- replaced). The conflict clause re-checks against the row as committed, so two relays never
-- answer the same publication.
WITH clock AS (
    SELECT coalesce(:now::timestamptz, now()) AS now
), shares AS (
    SELECT * FROM jsonb_to_recordset(:shares::jsonb) AS s(tenant_id text, weight double precision)
), ledger AS (
    -- Every live job with its publication, read once for the window and the sweep.
    SELECT j.id, j.tenant_id, j.provider, j.model, j.event_seq, j.priority, j.run_at,
           j.expires_at, p.republish_at,
           j.state = 'running' AND j.lease_token IS NOT NULL AS holds_slot,
           -- A message in the broker for a queued job, not yet claimed.
           coalesce(j.state = 'queued' AND p.event_seq = j.event_seq AND NOT p.deferred, false)
           AS outstanding
      FROM jobs AS j
      LEFT JOIN transport_publications AS p ON p.job_id = j.id
     WHERE j.state IN ({{live_states}})
), held AS (
    -- Per tenant: running jobs, and messages outstanding.
    SELECT tenant_id,
           count(*) FILTER (WHERE holds_slot) AS running,
           count(*) FILTER (WHERE outstanding) AS outstanding
      FROM ledger
     GROUP BY tenant_id
), swept AS (
    -- The sweep, unless :sweep is off (the broker holds a backlog as big as the window: its
    -- messages are slow, not lost). Each replaces a message the window counts already.
    SELECT j.id, j.event_seq
      FROM ledger AS j
     CROSS JOIN clock
     WHERE :sweep::boolean AND j.outstanding AND j.republish_at <= clock.now
       AND {{transport_ready}}
     ORDER BY j.priority, j.run_at, j.id
     LIMIT greatest(0, :limit::integer)
), due AS (
    -- Each adds a message: ranked by fair share, within what the window leaves.
    SELECT j.id, j.event_seq, j.priority, j.run_at,
           (coalesce(h.running, 0) + coalesce(h.outstanding, 0)
            + row_number() OVER (PARTITION BY j.tenant_id ORDER BY j.priority, j.run_at, j.id))
           / coalesce(s.weight, :default_weight::double precision) AS share
      FROM jobs AS j
     CROSS JOIN clock
      LEFT JOIN transport_publications AS p ON p.job_id = j.id
      LEFT JOIN shares AS s ON s.tenant_id = j.tenant_id
      LEFT JOIN held AS h ON h.tenant_id = j.tenant_id
     WHERE j.state = 'queued'
       AND (p.job_id IS NULL OR p.event_seq <> j.event_seq
            -- A deferred job has no message: its delay alone decides, whatever :sweep says.
            OR (p.deferred AND p.republish_at <= clock.now))
       AND {{transport_ready}}
), picked AS (
    SELECT id, event_seq FROM swept
     UNION ALL
    (SELECT id, event_seq FROM due
      ORDER BY share, priority, run_at, id
      LIMIT greatest(0, least(:limit::integer - (SELECT count(*) FROM swept)::integer,
                              :window::integer - (SELECT coalesce(sum(outstanding), 0)::integer
                                                    FROM held))))
)
INSERT INTO transport_publications AS p (job_id, event_seq, republish_at)
SELECT picked.id, picked.event_seq,
       clock.now + make_interval(secs => :republish_after_s::double precision)
  FROM picked, clock
ON CONFLICT (job_id) DO UPDATE
   SET event_seq = excluded.event_seq,
       -- A republish of the same transition backs off: the n-th waits republish_after_s
       -- times 2^(n-1), capped at 16 times, so a broker slow to deliver is not flooded with
       -- duplicates of its own backlog.
       republish_at = CASE WHEN p.event_seq = excluded.event_seq
                           THEN coalesce(:now::timestamptz, now())
                                + make_interval(secs => :republish_after_s::double precision
                                                        * (1 << least(p.published_count, 4)))
                           ELSE excluded.republish_at END,
       published_count = CASE WHEN p.event_seq = excluded.event_seq
                              THEN p.published_count + 1 ELSE 1 END,
       deferred = false
 WHERE p.event_seq <> excluded.event_seq OR p.republish_at <= coalesce(:now::timestamptz, now())
RETURNING p.job_id, p.published_count

-- name: transport_defer
-- Mark these jobs' publications deferred (no message in the broker: the window stops counting
-- them) and publish them again after a delay if they are still ready then.
UPDATE transport_publications
   SET republish_at = coalesce(:now::timestamptz, now())
                      + make_interval(secs => :delay_s::double precision),
       deferred = true
 WHERE job_id = ANY(ARRAY(SELECT jsonb_array_elements_text(:ids::jsonb)))
