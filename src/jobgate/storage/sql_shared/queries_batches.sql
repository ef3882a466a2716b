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
