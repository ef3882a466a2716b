-- Provider-native batches (both dialects): the parts of a batch sent as provider batches.

-- name: provider_batches_of
-- The parts of a batch, in the order they were planned.
SELECT part_key, batch_id, provider, lines, provider_batch_id, created_at, recorded_at,
       status, request_counts, collected_at
  FROM provider_batches
 WHERE batch_id = :batch_id
 ORDER BY created_at, part_key

-- name: batch_native_lines
-- A page of a batch's lines sent in provider batches, in order, with their provider and request.
SELECT line, provider, request FROM batch_items
 WHERE batch_id = :batch_id AND provider IS NOT NULL AND line > :after_line
 ORDER BY line
 LIMIT :limit
