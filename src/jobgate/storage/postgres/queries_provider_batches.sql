-- Provider-native batches (PostgreSQL): the parts of a batch sent as provider batches.

-- name: provider_batch_seen
-- Keep a part's provider status and request counts as last read, while :lease_token holds its
-- batch and the part has not been read back.
UPDATE provider_batches AS p
   SET status = :status, request_counts = :request_counts::jsonb
 WHERE p.part_key = :part_key AND p.collected_at IS NULL
   AND EXISTS (SELECT 1 FROM batches AS b
                WHERE b.id = p.batch_id AND b.lease_token = :lease_token::text)

-- name: provider_batch_fence_lock
-- Lock a batch that :lease_token holds while in progress or cancelling (else no row).
SELECT id FROM batches
 WHERE id = :batch_id AND lease_token = :lease_token::text
   AND status IN ('in_progress', 'cancelling')
   FOR UPDATE

-- name: batch_items_native_end
-- Write how the native lines of an ended part went (each once: a line read back keeps it).
UPDATE batch_items AS i
   SET outcome = v.outcome, result_line = v.result_line, input_tokens = v.input_tokens,
       output_tokens = v.output_tokens, cached_tokens = v.cached_tokens
  FROM jsonb_to_recordset(:results::jsonb) AS v(line integer, outcome text, result_line jsonb,
                                                 input_tokens bigint, output_tokens bigint,
                                                 cached_tokens bigint)
 WHERE i.batch_id = :batch_id AND i.line = v.line AND i.provider IS NOT NULL
   AND i.outcome IS NULL
