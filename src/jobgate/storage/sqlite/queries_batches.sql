-- OpenAI-compatible files and batches on SQLite.

-- name: file_create
-- Insert a file while it uploads (invisible until file_finish), expiring :expires_after_s from
-- now (NULL: never); a batch's result file only while :lease_token still holds the batch.
INSERT INTO files (id, tenant_id, purpose, filename, status, created_at, batch_id, expires_at)
SELECT :id, :tenant_id, :purpose, :filename, 'uploading', :now, :batch_id,
       :now + :expires_after_s
 WHERE :lease_token IS NULL
    OR EXISTS (SELECT 1 FROM batches AS b
                WHERE b.id = :batch_id AND b.lease_token = :lease_token)

-- name: file_usage
-- What a tenant keeps uploaded (its processed files of purpose batch): how many, their bytes.
SELECT count(*) AS files, coalesce(sum(bytes), 0) AS bytes
  FROM files
 WHERE tenant_id = :tenant_id AND purpose = 'batch' AND status = 'processed'

-- name: file_delete_expired
-- Delete up to :limit files whose time ran out (their chunks go with them), save the input of
-- a batch that has not ended; their ids.
DELETE FROM files
 WHERE id IN (SELECT f.id FROM files AS f
               WHERE f.expires_at <= :now
                 AND NOT EXISTS (SELECT 1 FROM batches AS b
                                  WHERE b.input_file_id = f.id
                                    AND b.status IN ('validating', 'in_progress', 'finalizing',
                                                     'cancelling'))
               ORDER BY f.expires_at
               LIMIT :limit)
RETURNING id

-- name: file_lock
-- A file of one tenant (unless :tenant_id is NULL), for its delete (the single writer holds
-- it for the rest of the write; no row: none).
SELECT id FROM files WHERE id = :id AND (:tenant_id IS NULL OR tenant_id = :tenant_id)

-- name: batch_create
-- Insert a validating batch over the tenant's processed file :input_file_id (its lines the
-- total); none if the file is gone.
INSERT INTO batches (id, tenant_id, status, endpoint, input_file_id, completion_window,
                     metadata, priority, total, created_at, expires_at)
SELECT :id, :tenant_id, 'validating', :endpoint, f.id, :completion_window,
       :metadata, :priority, f.lines, :now, :now + :window_s
  FROM files AS f
 WHERE f.id = :input_file_id AND f.tenant_id = :tenant_id AND f.status = 'processed'
   AND (f.expires_at IS NULL OR f.expires_at > :now)
RETURNING *

-- name: batch_claim_live
-- Lease live batches no batches role holds, each with a new token (one writer: no race to
-- skip), in turns by tenant: every tenant's oldest batch, then every tenant's second, and so
-- on, so one tenant's many live batches never keep another's out of a pass.
UPDATE batches
   SET lease_until = :now + :lease_s, lease_token = lower(hex(randomblob(16)))
 WHERE id IN (SELECT id
                FROM (SELECT id, created_at,
                             row_number() OVER (PARTITION BY tenant_id
                                                ORDER BY created_at, id) AS turn
                        FROM batches
                       WHERE status IN ('validating', 'in_progress', 'finalizing', 'cancelling')
                         AND (lease_until IS NULL OR lease_until <= :now)) AS live
               ORDER BY turn, created_at, id
               LIMIT :limit)
RETURNING *

-- name: batch_update
-- Update a batch while its status is one of :from_statuses and, for the batches role, while its
-- :lease_token holds it; a new status stamps its time once, a final status set stays set.
UPDATE batches
   SET status = coalesce(:status, status),
       final_status = coalesce(final_status, :final_status),
       expanded_chunks = coalesce(:expanded_chunks, expanded_chunks),
       completed_count = coalesce(:completed_count, completed_count),
       failed_count = coalesce(:failed_count, failed_count),
       output_file_id = coalesce(:output_file_id, output_file_id),
       error_file_id = coalesce(:error_file_id, error_file_id),
       errors = coalesce(:errors, errors),
       failures = coalesce(:failures, failures),
       total = coalesce(:total, total),
       model = coalesce(:model, model),
       lease_until = CASE WHEN :release THEN NULL
                          WHEN :lease_s IS NOT NULL THEN :now + :lease_s
                          ELSE lease_until END,
       lease_token = CASE WHEN :release THEN NULL ELSE lease_token END,
       in_progress_at = CASE WHEN :status = 'in_progress'
                             THEN coalesce(in_progress_at, :now) ELSE in_progress_at END,
       finalizing_at = CASE WHEN :status = 'finalizing'
                            THEN coalesce(finalizing_at, :now) ELSE finalizing_at END,
       completed_at = CASE WHEN :status = 'completed'
                           THEN coalesce(completed_at, :now) ELSE completed_at END,
       failed_at = CASE WHEN :status = 'failed'
                        THEN coalesce(failed_at, :now) ELSE failed_at END,
       expired_at = CASE WHEN :status = 'expired'
                         THEN coalesce(expired_at, :now) ELSE expired_at END,
       cancelling_at = CASE WHEN :status = 'cancelling'
                            THEN coalesce(cancelling_at, :now) ELSE cancelling_at END,
       cancelled_at = CASE WHEN :status = 'cancelled'
                           THEN coalesce(cancelled_at, :now) ELSE cancelled_at END
 WHERE id = :id AND status IN (SELECT value FROM json_each(:from_statuses))
   AND (:lease_token IS NULL OR lease_token = :lease_token)
   AND (NOT :unsettled OR final_status IS NULL)
RETURNING *

-- name: batch_fence_lock
-- A batch that :lease_token holds while it is in progress and unsettled (else no row); the
-- single writer holds it for the rest of the write.
SELECT id FROM batches
 WHERE id = :id AND lease_token = :lease_token
   AND status = 'in_progress' AND final_status IS NULL

-- name: batch_finish_update
-- End a finalizing batch while :lease_token holds it: its final status, counts and files.
UPDATE batches
   SET status = :status,
       completed_count = :completed_count,
       failed_count = :failed_count,
       output_file_id = :output_file_id,
       error_file_id = :error_file_id,
       usage = :usage,
       lease_until = NULL, lease_token = NULL, failures = 0,
       completed_at = CASE WHEN :status = 'completed' THEN :now ELSE completed_at END,
       failed_at = CASE WHEN :status = 'failed' THEN :now ELSE failed_at END,
       expired_at = CASE WHEN :status = 'expired' THEN :now ELSE expired_at END,
       cancelled_at = CASE WHEN :status = 'cancelled' THEN :now ELSE cancelled_at END
 WHERE id = :id AND status = 'finalizing' AND lease_token = :lease_token
RETURNING *

-- name: batch_files_show
-- Show an ended batch's result files (processed, with their sizes).
UPDATE files
   SET status = 'processed',
       bytes = CASE WHEN id = :output_file_id THEN :output_bytes ELSE :error_bytes END,
       lines = CASE WHEN id = :output_file_id THEN :output_lines ELSE :error_lines END
 WHERE batch_id = :id AND id IN (:output_file_id, :error_file_id)

-- name: batch_files_drop_unshown
-- Delete the result files of an ended batch that a dead pass began (never shown).
DELETE FROM files
 WHERE batch_id = :id AND status = 'uploading'
   AND id IS NOT :output_file_id AND id IS NOT :error_file_id

-- name: batch_fail_update
-- Fail a live batch while :lease_token holds it: its errors, its lease released.
UPDATE batches
   SET status = 'failed', final_status = coalesce(final_status, 'failed'),
       errors = :errors, failures = coalesce(:failures, failures),
       failed_at = :now, lease_until = NULL, lease_token = NULL
 WHERE id = :id AND lease_token = :lease_token
   AND status IN ('validating', 'in_progress', 'finalizing', 'cancelling')
RETURNING *

-- name: batch_items_put
-- Record lines of a batch, a JSON array, a native line with its provider and request
-- (idempotent per line; `WHERE true` keeps the upsert
-- clause from reading as a join's ON).
INSERT INTO batch_items (batch_id, line, custom_id_json, job_id, error, provider, request)
SELECT :batch_id, v.value ->> '$.line', v.value ->> '$.custom_id_json', v.value ->> '$.job_id',
       json_extract(v.value, '$.error'), v.value ->> '$.provider',
       json_extract(v.value, '$.request')
  FROM json_each(:items) AS v
 WHERE true
ON CONFLICT (batch_id, line) DO NOTHING

-- name: batch_counts
-- A batch's lines by their jobs' states or, sent in a provider batch, their outcome read back,
-- and their usage so far (a stored count that is not a number counts as none).
SELECT count(*) AS items,
       coalesce(sum(j.state = 'succeeded' OR i.outcome = 'succeeded'), 0) AS completed,
       coalesce(sum(i.error IS NOT NULL OR j.state = 'failed' OR i.outcome = 'failed'), 0)
           AS failed,
       coalesce(sum(j.state IN ({{live_states}})), 0) AS live,
       CAST(min(total(CASE WHEN json_type(j.usage, '$.input_tokens') = 'integer'
                         THEN j.usage ->> '$.input_tokens' END)
                + total(i.input_tokens), 9.0e18) AS INTEGER) AS input_tokens,
       CAST(min(total(CASE WHEN json_type(j.usage, '$.output_tokens') = 'integer'
                         THEN j.usage ->> '$.output_tokens' END)
                + total(i.output_tokens), 9.0e18) AS INTEGER) AS output_tokens,
       CAST(min(total(CASE WHEN json_type(j.usage, '$.cache_read_input_tokens') = 'integer'
                         THEN j.usage ->> '$.cache_read_input_tokens' END)
                + total(i.cached_tokens), 9.0e18) AS INTEGER) AS cached_tokens
  FROM batch_items AS i LEFT JOIN jobs AS j ON j.id = i.job_id
 WHERE i.batch_id = :batch_id

-- name: batch_cancel_pick
-- The batch's jobs that a cancel changes (queued, or running with no cancel request yet);
-- job_bulk_cancel then cancels them by id, in the same write.
{{batch_cancel_jobs}}

-- name: batch_event_insert
-- Queue a batch's webhook event for each of the tenant's endpoints that wants it (idempotent).
INSERT INTO outbox (id, event_id, tenant_id, job_id, event_type, target, endpoint_id, url,
                    series, job_status, created_at, next_attempt_at)
SELECT 'msg_' || :batch_id || '_' || e.id, jobgate_event_id(:batch_id, :event_type, 0),
       :tenant_id, :batch_id, :event_type, e.id, e.id, NULL, 0, :status, :now, :now
  FROM webhook_endpoints AS e
 WHERE e.tenant_id = :tenant_id AND NOT e.disabled
   AND (EXISTS (SELECT 1 FROM json_each(e.event_types) WHERE value = :event_type)
        OR json_array_length(e.event_types) = 0)
ON CONFLICT (id) DO NOTHING
