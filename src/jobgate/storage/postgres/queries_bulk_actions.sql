-- Bulk actions by filter (PostgreSQL): pick a chunk in id order, then change it by id, in one
-- short transaction per chunk. A NULL parameter means "any" for that criterion.

-- fragment: job_filter
-- The filter of bulk actions and of the console's search, on jobs AS j (NULL: any); :states
-- is a JSON array.
(:tenant_id::text IS NULL OR j.tenant_id = :tenant_id::text)
   AND (:states::jsonb IS NULL
        OR j.state = ANY(ARRAY(SELECT jsonb_array_elements_text(:states::jsonb))))
   AND (:provider::text IS NULL OR j.provider = :provider::text)
   AND (:model::text IS NULL OR j.model = :model::text)
   AND (:error_code::text IS NULL OR j.error ->> 'code' = :error_code::text)
   AND (:created_after::timestamptz IS NULL OR j.created_at >= :created_after::timestamptz)
   AND (:created_before::timestamptz IS NULL OR j.created_at < :created_before::timestamptz)
   AND (:metadata::jsonb IS NULL OR j.metadata @> :metadata::jsonb)
   AND (:dead_lettered::boolean IS NULL OR j.dead_lettered = :dead_lettered::boolean)

-- fragment: bulk_eligible
-- Whether a job j may take the bulk :action: a cancel a live job not yet asked to stop, a
-- redrive a dead-lettered job not purged, a delete any job not purged.
CASE :action::text
    WHEN 'cancel' THEN {{cancel_changes}}
    WHEN 'redrive' THEN j.state = 'failed' AND j.dead_lettered AND j.purged_at IS NULL
    ELSE j.purged_at IS NULL
END

-- name: job_bulk_pick
-- Lock the next chunk of eligible jobs matching the filter after the cursor, in id order
-- (waits for rows another transaction holds, then checks them again).
SELECT j.id
  FROM jobs AS j
 WHERE (:after_id::text IS NULL OR j.id > :after_id::text)
   AND {{job_filter}}
   AND {{bulk_eligible}}
 ORDER BY j.id
 LIMIT :limit
   FOR UPDATE OF j

-- name: job_bulk_cancel
-- Cancel picked jobs as job_cancel does: queued ones at once, running ones by request (the
-- trigger logs each and tells their workers).
UPDATE jobs AS j
   SET state = CASE j.state WHEN 'queued' THEN 'cancelled' ELSE j.state END,
       completed_at = CASE j.state WHEN 'queued' THEN clock.now ELSE j.completed_at END,
       cancel_outcome = CASE j.state WHEN 'queued' THEN 'not_started' ELSE j.cancel_outcome END,
       cancel_requested_at = clock.now,
       updated_at = clock.now,
       event_seq = j.event_seq + 1,
       transition_actor = :actor,
       transition_reason = :reason
  FROM (SELECT coalesce(:now::timestamptz, now()) AS now) AS clock
 WHERE j.id = ANY(ARRAY(SELECT jsonb_array_elements_text(:ids::jsonb)))
   AND {{cancel_changes}}
RETURNING j.id, j.state

-- name: job_bulk_redrive
-- Redrive picked dead-lettered jobs as job_redrive does; a purged job is never redriven.
UPDATE jobs AS j
   SET {{redrive_reset}},
       transition_reason = :reason
  FROM (SELECT coalesce(:now::timestamptz, now()) AS now) AS clock
 WHERE j.id = ANY(ARRAY(SELECT jsonb_array_elements_text(:ids::jsonb)))
   AND j.state = 'failed' AND j.dead_lettered AND j.purged_at IS NULL
RETURNING j.id, j.state

-- name: job_bulk_delete
-- Delete picked jobs as DELETE /v1/jobs/{id} does: cancel if live, erase input and result.
-- The trigger logs a job whose state or cancel request changed; the others (already
-- terminal, or cancel already requested) are logged here, so every purge is audited.
WITH clock AS (
    SELECT coalesce(:now::timestamptz, now()) AS now
), before AS (
    SELECT id, state, cancel_requested_at
      FROM jobs
     WHERE id = ANY(ARRAY(SELECT jsonb_array_elements_text(:ids::jsonb))) AND purged_at IS NULL
), changed AS (
    UPDATE jobs AS j
       SET state = CASE j.state WHEN 'queued' THEN 'cancelled' ELSE j.state END,
           completed_at = CASE j.state WHEN 'queued' THEN clock.now ELSE j.completed_at END,
           cancel_outcome = CASE j.state WHEN 'queued' THEN 'not_started'
                                 ELSE j.cancel_outcome END,
           cancel_requested_at = CASE WHEN j.state IN ({{live_states}})
                                      THEN coalesce(j.cancel_requested_at, clock.now)
                                      ELSE j.cancel_requested_at END,
           request = NULL,
           result = NULL,
           purged_at = clock.now,
           updated_at = clock.now,
           event_seq = j.event_seq + 1,
           transition_actor = :actor,
           transition_reason = :reason
      FROM clock, before AS b
     WHERE j.id = b.id
    RETURNING j.id, j.state, j.event_seq, j.cancel_requested_at, j.created_at
), logged AS (
    INSERT INTO job_events (job_id, seq, from_state, to_state, actor, reason, applied,
                            created_at, job_created_at)
    SELECT c.id, c.event_seq, b.state, c.state, :actor, :reason, true, clock.now, c.created_at
      FROM changed AS c JOIN before AS b ON b.id = c.id, clock
     WHERE c.state = b.state AND c.cancel_requested_at IS NOT DISTINCT FROM b.cancel_requested_at
)
SELECT id, state FROM changed
