-- Transports (issue 18): claims by id and the publication ledger (SQLite).

-- name: job_claim_by_id_candidates
-- The named jobs that are claimable now, best first (caps are applied in Python: one writer).
SELECT id, tenant_id
  FROM jobs
 WHERE id IN (SELECT value FROM json_each(:ids))
   AND state = 'queued'
   AND run_at <= :now
   -- Past its start deadline a job may not start (the reaper expires it).
   AND (expires_at IS NULL OR expires_at > :now)
   AND (:providers IS NULL OR provider IN (SELECT value FROM json_each(:providers)))
 ORDER BY priority, run_at, id

-- name: job_claim_by_id_queued
-- Which of the named jobs are still queued (a message for them is deferred, not dropped).
SELECT id FROM jobs WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'queued'

-- name: transport_publish_due
-- Record and answer the ready jobs that need a "job ready" message: never published, published
-- for an earlier transition, or still unclaimed at their republish time.
INSERT INTO transport_publications (job_id, event_seq, republish_at)
SELECT j.id, j.event_seq, :now + :republish_after_s
  FROM jobs AS j
  LEFT JOIN transport_publications AS p ON p.job_id = j.id
 WHERE j.state = 'queued'
   AND j.run_at <= :now
   AND (j.expires_at IS NULL OR j.expires_at > :now)
   AND (p.job_id IS NULL OR p.event_seq <> j.event_seq OR p.republish_at <= :now)
 ORDER BY j.priority, j.run_at, j.id
 LIMIT :limit
ON CONFLICT (job_id) DO UPDATE
   SET event_seq = excluded.event_seq,
       republish_at = excluded.republish_at,
       published_count = CASE WHEN transport_publications.event_seq = excluded.event_seq
                              THEN transport_publications.published_count + 1 ELSE 1 END
RETURNING job_id, published_count

-- name: transport_defer
-- Publish these jobs again after a delay if they are still ready then.
UPDATE transport_publications
   SET republish_at = :now + :delay_s
 WHERE job_id IN (SELECT value FROM json_each(:ids))
