-- OpenAI-compatible files and batches (both dialects).

-- name: file_finish
-- Mark an uploaded file processed, with its size.
UPDATE files SET status = 'processed', bytes = :bytes, lines = :lines
 WHERE id = :id
RETURNING *

-- name: file_chunks
-- Chunks of a file in order.
SELECT seq, first_line, line_count, data FROM file_chunks
 WHERE file_id = :file_id AND seq >= :from_seq
 ORDER BY seq
 LIMIT :limit

-- name: file_input_of
-- The oldest live batch whose input is the file :id (none: the file may go).
SELECT id FROM batches
 WHERE input_file_id = :id AND status IN ('validating', 'in_progress', 'finalizing', 'cancelling')
 ORDER BY created_at
 LIMIT 1

-- name: batch_items_page
-- Lines of a batch in order, with their jobs (custom_id: its JSON text).
SELECT i.line, i.custom_id_json AS custom_id, i.job_id, i.error AS item_error, j.state,
       j.result, j.error, i.provider, i.outcome, i.result_line
  FROM batch_items AS i LEFT JOIN jobs AS j ON j.id = i.job_id
 WHERE i.batch_id = :batch_id AND i.line > :after_line
 ORDER BY i.line
 LIMIT :limit

-- name: batch_live_job_ids
-- The batch's jobs still queued or running.
SELECT j.id
  FROM batch_items AS i JOIN jobs AS j ON j.id = i.job_id
 WHERE i.batch_id = :batch_id AND j.state IN ({{live_states}})
 ORDER BY i.line
 LIMIT :limit

-- name: batch_cursor_move
-- Move a batch's expansion cursor (inside batch_chunk_insert's transaction, under its fence).
UPDATE batches SET expanded_chunks = :expanded_chunks WHERE id = :id
RETURNING *

-- name: batch_get
-- A batch by id, of one tenant unless :tenant_id is NULL.
SELECT * FROM batches
 WHERE id = :id AND (CAST(:tenant_id AS text) IS NULL OR tenant_id = :tenant_id)

-- name: file_delete
-- Delete a file (its chunks go with it).
DELETE FROM files
 WHERE id = :id AND (CAST(:tenant_id AS text) IS NULL OR tenant_id = :tenant_id)
RETURNING id

-- name: file_get
-- A processed file by id, of one tenant unless :tenant_id is NULL, unless it expired.
SELECT * FROM files
 WHERE id = :id AND status = 'processed'
   AND (CAST(:tenant_id AS text) IS NULL OR tenant_id = :tenant_id)
   AND (expires_at IS NULL OR expires_at > {{now}})

-- name: file_chunk_put
-- Store (or replace) one chunk of whole lines; of a batch's result file only while
-- :lease_token still holds the batch.
INSERT INTO file_chunks (file_id, seq, first_line, line_count, data)
SELECT :file_id, :seq, :first_line, :line_count, :data
 WHERE CAST(:lease_token AS text) IS NULL
    OR EXISTS (SELECT 1 FROM files AS f JOIN batches AS b ON b.id = f.batch_id
                WHERE f.id = :file_id AND b.lease_token = :lease_token)
ON CONFLICT (file_id, seq) DO UPDATE
   SET first_line = excluded.first_line, line_count = excluded.line_count, data = excluded.data

-- name: batch_list
-- A page of a tenant's batches (of one status unless :status is NULL), newest first.
SELECT * FROM batches
 WHERE tenant_id = :tenant_id
   AND (CAST(:status AS text) IS NULL OR status = :status)
   AND (CAST(:after_id AS text) IS NULL
        OR (created_at, id) < (SELECT a.created_at, a.id FROM batches AS a
                                WHERE a.id = :after_id AND a.tenant_id = :tenant_id))
 ORDER BY created_at DESC, id DESC
 LIMIT :limit

-- name: file_list
-- A page of a tenant's processed files that have not expired, newest first.
SELECT * FROM files
 WHERE tenant_id = :tenant_id AND status = 'processed'
   AND (expires_at IS NULL OR expires_at > {{now}})
   AND (CAST(:purpose AS text) IS NULL OR purpose = :purpose)
   AND (CAST(:after_id AS text) IS NULL
        OR (created_at, id) < (SELECT a.created_at, a.id FROM files AS a
                                WHERE a.id = :after_id AND a.tenant_id = :tenant_id))
 ORDER BY created_at DESC, id DESC
 LIMIT :limit

-- name: file_list_oldest_first
-- A page of a tenant's processed files that have not expired, oldest first (order=asc).
SELECT * FROM files
 WHERE tenant_id = :tenant_id AND status = 'processed'
   AND (expires_at IS NULL OR expires_at > {{now}})
   AND (CAST(:purpose AS text) IS NULL OR purpose = :purpose)
   AND (CAST(:after_id AS text) IS NULL
        OR (created_at, id) > (SELECT a.created_at, a.id FROM files AS a
                                WHERE a.id = :after_id AND a.tenant_id = :tenant_id))
 ORDER BY created_at, id
 LIMIT :limit

-- name: batch_list_all
-- A page of every tenant's batches (of one status unless :status is NULL), newest first.
SELECT * FROM batches
 WHERE (CAST(:status AS text) IS NULL OR status = :status)
   AND (CAST(:after_id AS text) IS NULL
        OR (created_at, id) < (SELECT a.created_at, a.id FROM batches AS a
                                WHERE a.id = :after_id))
 ORDER BY created_at DESC, id DESC
 LIMIT :limit

-- fragment: batch_cancel_jobs
-- The batch's jobs that a cancel changes, in id order as a bulk chunk takes them (PostgreSQL's
-- batch_cancel_pick locks them; SQLite's one writer holds them already).
SELECT j.id
  FROM batch_items AS i JOIN jobs AS j ON j.id = i.job_id
 WHERE i.batch_id = :batch_id
   AND {{cancel_changes}}
 ORDER BY j.id
