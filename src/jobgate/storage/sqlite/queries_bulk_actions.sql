-- Bulk actions by filter (SQLite): pick a chunk in id order, then change it by id, in one
-- write operation per chunk (the single writer keeps it consistent). A NULL parameter means
-- "any" for that criterion; :states, :metadata and :ids are JSON text.

-- fragment: job_filter
-- The filter of bulk actions and of the console's search, on jobs AS j (NULL: any).
(:tenant_id IS NULL OR j.tenant_id = :tenant_id)
   AND (:states IS NULL OR j.state IN (SELECT value FROM json_each(:states)))
   AND (:provider IS NULL OR j.provider = :provider)
   AND (:model IS NULL OR j.model = :model)
   AND (:error_code IS NULL OR j.error ->> '$.code' = :error_code)
   AND (:created_after IS NULL OR j.created_at >= :created_after)
   AND (:created_before IS NULL OR j.created_at < :created_before)
   AND (:metadata IS NULL
        OR NOT EXISTS (SELECT 1 FROM json_each(:metadata) AS f
                        WHERE NOT EXISTS (SELECT 1 FROM json_each(j.metadata) AS m
                                           WHERE m.key = f.key AND m.type = 'text'
                                             AND m.value = f.value)))
   AND (:dead_lettered IS NULL OR j.dead_lettered = :dead_lettered)

-- fragment: bulk_eligible
-- Whether a job j may take the bulk :action: a cancel a live job not yet asked to stop, a
-- redrive a dead-lettered job not purged, a delete any job not purged.
CASE :action
    WHEN 'cancel' THEN {{cancel_changes}}
    WHEN 'redrive' THEN j.state = 'failed' AND j.dead_lettered = 1 AND j.purged_at IS NULL
    ELSE j.purged_at IS NULL
END

-- name: job_bulk_pick
-- The next chunk of eligible jobs matching the filter after the cursor, in id order.
SELECT j.id
  FROM jobs AS j
 WHERE {{job_filter}}
   AND {{bulk_eligible}}
   AND (:after_id IS NULL OR j.id > :after_id)
 ORDER BY j.id
 LIMIT :limit

-- name: job_bulk_cancel
-- Cancel picked jobs as job_cancel does: queued ones at once, running ones by request.
UPDATE jobs
   SET state = CASE state WHEN 'queued' THEN 'cancelled' ELSE state END,
       completed_at = CASE state WHEN 'queued' THEN :now ELSE completed_at END,
       cancel_outcome = CASE state WHEN 'queued' THEN 'not_started' ELSE cancel_outcome END,
       cancel_requested_at = :now,
       updated_at = :now,
       event_seq = event_seq + 1,
       transition_actor = :actor,
       transition_reason = :reason
 WHERE id IN (SELECT value FROM json_each(:ids))
   AND (state = 'queued' OR (state = 'running' AND cancel_requested_at IS NULL))
RETURNING id, state

-- name: job_bulk_redrive
-- Redrive picked dead-lettered jobs as job_redrive does; a purged job is never redriven.
UPDATE jobs
   SET {{redrive_reset}},
       transition_reason = :reason
 WHERE id IN (SELECT value FROM json_each(:ids))
   AND state = 'failed' AND dead_lettered = 1 AND purged_at IS NULL
RETURNING id, state

-- name: job_bulk_delete_before
-- The picked jobs not yet purged, as they are before the delete (to log unchanged ones).
SELECT id, state, cancel_requested_at
  FROM jobs
 WHERE id IN (SELECT value FROM json_each(:ids)) AND purged_at IS NULL

-- name: job_bulk_delete
-- Delete picked jobs as DELETE /v1/jobs/{id} does: cancel if live, erase input and result.
UPDATE jobs
   SET state = CASE state WHEN 'queued' THEN 'cancelled' ELSE state END,
       completed_at = CASE state WHEN 'queued' THEN :now ELSE completed_at END,
       cancel_outcome = CASE state WHEN 'queued' THEN 'not_started' ELSE cancel_outcome END,
       cancel_requested_at = CASE WHEN state IN ({{live_states}})
                                  THEN coalesce(cancel_requested_at, :now)
                                  ELSE cancel_requested_at END,
       request = NULL,
       result = NULL,
       purged_at = :now,
       updated_at = :now,
       event_seq = event_seq + 1,
       transition_actor = :actor,
       transition_reason = :reason
 WHERE id IN (SELECT value FROM json_each(:ids)) AND purged_at IS NULL
RETURNING id, state, event_seq, cancel_requested_at
