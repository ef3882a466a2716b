-- Provider-native batches (SQLite): the parts of a batch sent as provider batches.

-- name: provider_batch_seen
-- Keep a part's provider status and request counts as last read, while :lease_token holds its
-- batch and the part has not been read back.
UPDATE provider_batches
   SET status = :status, request_counts = :request_counts
 WHERE part_key = :part_key AND collected_at IS NULL
   AND EXISTS (SELECT 1 FROM batches AS b
                WHERE b.id = provider_batches.batch_id AND b.lease_token = :lease_token)

-- name: provider_batch_fence_lock
-- A batch that :lease_token holds while in progress or cancelling (else no row; the single
-- writer holds it for the rest of the write).
SELECT id FROM batches
 WHERE id = :batch_id AND lease_token = :lease_token
   AND status IN ('in_progress', 'cancelling')

-- name: batch_items_native_end
-- Write how the native lines of an ended part went (each once: a line read back keeps it).
UPDATE batch_items
   SET outcome = v.value ->> '$.outcome', result_line = json_extract(v.value, '$.result_line'),
       input_tokens = v.value ->> '$.input_tokens', output_tokens = v.value ->> '$.output_tokens',
       cached_tokens = v.value ->> '$.cached_tokens'
  FROM json_each(:results) AS v
 WHERE batch_items.batch_id = :batch_id AND batch_items.line = v.value ->> '$.line'
   AND batch_items.provider IS NOT NULL AND batch_items.outcome IS NULL
