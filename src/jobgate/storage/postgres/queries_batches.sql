-- OpenAI-compatible files and batches on PostgreSQL (issue 17).

-- name: file_create
-- Insert a file while it uploads (invisible until file_finish).
INSERT INTO files (id, tenant_id, purpose, filename, status, created_at)
VALUES (:id, :tenant_id, :purpose, :filename, 'uploading', coalesce(:now::timestamptz, now()))

-- name: file_chunk_put
-- Store (or replace) one chunk of whole lines.
INSERT INTO file_chunks (file_id, seq, first_line, line_count, data)
VALUES (:file_id, :seq, :first_line, :line_count, :data)
ON CONFLICT (file_id, seq) DO UPDATE
   SET first_line = excluded.first_line, line_count = excluded.line_count, data = excluded.data

-- name: file_finish
-- Mark an uploaded file processed, with its size.
UPDATE files SET status = 'processed', bytes = :bytes, lines = :lines
 WHERE id = :id
RETURNING *

-- name: file_get
-- A processed file by id, of one tenant unless :tenant_id is NULL.
SELECT * FROM files
 WHERE id = :id AND status = 'processed'
   AND (:tenant_id::text IS NULL OR tenant_id = :tenant_id::text)

-- name: file_list
-- A page of a tenant's processed files, newest first.
SELECT * FROM files
 WHERE tenant_id = :tenant_id AND status = 'processed'
   AND (:purpose::text IS NULL OR purpose = :purpose::text)
   AND (:after_id::text IS NULL
        OR (created_at, id) < (SELECT a.created_at, a.id FROM files AS a
                                WHERE a.id = :after_id::text AND a.tenant_id = :tenant_id))
 ORDER BY created_at DESC, id DESC
 LIMIT :limit

-- name: file_chunks
-- Chunks of a file in order.
SELECT seq, first_line, line_count, data FROM file_chunks
 WHERE file_id = :file_id AND seq >= :from_seq
 ORDER BY seq
 LIMIT :limit

-- name: file_delete
-- Delete a file (its chunks go with it).
DELETE FROM files
 WHERE id = :id AND (:tenant_id::text IS NULL OR tenant_id = :tenant_id::text)
RETURNING id

-- name: batch_create
-- Insert a validating batch.
INSERT INTO batches (id, tenant_id, status, endpoint, input_file_id, completion_window,
                     metadata, priority, total, created_at, expires_at)
SELECT :id, :tenant_id, 'validating', :endpoint, :input_file_id, :completion_window,
       :metadata, :priority, :total, clock.now,
       clock.now + make_interval(secs => :window_s::double precision)
  FROM (SELECT coalesce(:now::timestamptz, now()) AS now) AS clock
RETURNING *

-- name: batch_get
-- A batch by id, of one tenant unless :tenant_id is NULL.
SELECT * FROM batches
 WHERE id = :id AND (:tenant_id::text IS NULL OR tenant_id = :tenant_id::text)

-- name: batch_list
-- A page of a tenant's batches, newest first.
SELECT * FROM batches
 WHERE tenant_id = :tenant_id
   AND (:after_id::text IS NULL
        OR (created_at, id) < (SELECT a.created_at, a.id FROM batches AS a
                                WHERE a.id = :after_id::text AND a.tenant_id = :tenant_id))
 ORDER BY created_at DESC, id DESC
 LIMIT :limit

-- name: batch_claim_live
-- Lease live batches no batches role holds (SKIP LOCKED: racing claimers take others).
WITH clock AS (
    SELECT coalesce(:now::timestamptz, now()) AS now
), due AS (
    SELECT b.id FROM batches AS b, clock
     WHERE b.status IN ('validating', 'in_progress', 'finalizing', 'cancelling')
       AND (b.lease_until IS NULL OR b.lease_until <= clock.now)
     ORDER BY b.created_at
     LIMIT :limit
       FOR UPDATE OF b SKIP LOCKED
)
UPDATE batches AS b
   SET lease_until = clock.now + make_interval(secs => :lease_s::double precision)
  FROM due, clock
 WHERE b.id = due.id
RETURNING b.*

-- name: batch_update
-- Update a batch while its status is one of :from_statuses; a new status stamps its time once.
WITH clock AS (SELECT coalesce(:now::timestamptz, now()) AS now)
UPDATE batches AS b
   SET status = coalesce(:status::text, b.status),
       final_status = coalesce(:final_status::text, b.final_status),
       expanded_chunks = coalesce(:expanded_chunks::integer, b.expanded_chunks),
       completed_count = coalesce(:completed_count::integer, b.completed_count),
       failed_count = coalesce(:failed_count::integer, b.failed_count),
       output_file_id = coalesce(:output_file_id::text, b.output_file_id),
       error_file_id = coalesce(:error_file_id::text, b.error_file_id),
       errors = coalesce(:errors::jsonb, b.errors),
       lease_until = CASE WHEN :release::boolean THEN NULL ELSE b.lease_until END,
       in_progress_at = CASE WHEN :status::text = 'in_progress'
                             THEN coalesce(b.in_progress_at, clock.now) ELSE b.in_progress_at END,
       finalizing_at = CASE WHEN :status::text = 'finalizing'
                            THEN coalesce(b.finalizing_at, clock.now) ELSE b.finalizing_at END,
       completed_at = CASE WHEN :status::text = 'completed'
                           THEN coalesce(b.completed_at, clock.now) ELSE b.completed_at END,
       failed_at = CASE WHEN :status::text = 'failed'
                        THEN coalesce(b.failed_at, clock.now) ELSE b.failed_at END,
       expired_at = CASE WHEN :status::text = 'expired'
                         THEN coalesce(b.expired_at, clock.now) ELSE b.expired_at END,
       cancelling_at = CASE WHEN :status::text = 'cancelling'
                            THEN coalesce(b.cancelling_at, clock.now) ELSE b.cancelling_at END,
       cancelled_at = CASE WHEN :status::text = 'cancelled'
                           THEN coalesce(b.cancelled_at, clock.now) ELSE b.cancelled_at END
  FROM clock
 WHERE b.id = :id
   AND b.status = ANY(ARRAY(SELECT jsonb_array_elements_text(:from_statuses::jsonb)))
RETURNING b.*

-- name: batch_items_put
-- Record lines of a batch (idempotent per line).
INSERT INTO batch_items (batch_id, line, custom_id, job_id, error)
SELECT :batch_id, v.line, v.custom_id, v.job_id, v.error
  FROM jsonb_to_recordset(:items::jsonb) AS v(line integer, custom_id text, job_id text,
                                               error jsonb)
ON CONFLICT (batch_id, line) DO NOTHING

-- name: batch_counts
-- A batch's lines by their jobs' states.
SELECT count(*)::integer AS items,
       count(*) FILTER (WHERE j.state = 'succeeded')::integer AS completed,
       count(*) FILTER (WHERE i.error IS NOT NULL OR j.state = 'failed')::integer AS failed,
       count(*) FILTER (WHERE j.state IN ('queued', 'running'))::integer AS live
  FROM batch_items AS i LEFT JOIN jobs AS j ON j.id = i.job_id
 WHERE i.batch_id = :batch_id

-- name: batch_items_page
-- Lines of a batch in order, with their jobs.
SELECT i.line, i.custom_id, i.job_id, i.error AS item_error, j.state, j.result, j.error
  FROM batch_items AS i LEFT JOIN jobs AS j ON j.id = i.job_id
 WHERE i.batch_id = :batch_id AND i.line > :after_line
 ORDER BY i.line
 LIMIT :limit

-- name: batch_live_job_ids
-- The batch's jobs still queued or running.
SELECT j.id
  FROM batch_items AS i JOIN jobs AS j ON j.id = i.job_id
 WHERE i.batch_id = :batch_id AND j.state IN ('queued', 'running')
 ORDER BY i.line
 LIMIT :limit

-- name: batch_event_insert
-- Queue a batch's webhook event for each of the tenant's endpoints that wants it (idempotent).
INSERT INTO outbox (id, event_id, tenant_id, job_id, event_type, target, endpoint_id, url,
                    series, job_status, created_at, next_attempt_at)
SELECT 'msg_' || :batch_id || '_' || e.id, jobgate_event_id(:batch_id, :event_type, 0),
       :tenant_id, :batch_id, :event_type, e.id, e.id, NULL, 0, :status, clock.now, clock.now
  FROM webhook_endpoints AS e, (SELECT coalesce(:now::timestamptz, now()) AS now) AS clock
 WHERE e.tenant_id = :tenant_id AND NOT e.disabled
   AND (e.event_types ? :event_type OR jsonb_array_length(e.event_types) = 0)
ON CONFLICT (id) DO NOTHING
RETURNING id
