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

-- name: provider_batch_record
-- Name the provider batch of a part: once (the same id again is a no-op; another is refused).
UPDATE provider_batches
   SET provider_batch_id = :provider_batch_id,
       recorded_at = coalesce(recorded_at, {{now}})
 WHERE part_key = :part_key
   AND (provider_batch_id IS NULL OR provider_batch_id = :provider_batch_id)
RETURNING part_key, batch_id, provider, lines, provider_batch_id, created_at, recorded_at,
          status, request_counts, collected_at

-- name: usage_ledger_part_insert
-- Bill a part's usage once, at the batch price: a ledger row of kind 'batch' named by the key.
INSERT INTO usage_ledger (job_id, kind, tenant_id, provider, model, input_tokens,
                          output_tokens, cache_read_tokens, cache_write_tokens, created_at)
VALUES (:part_key, 'batch', :tenant_id, :provider, :model, :input_tokens, :output_tokens,
        :cache_read_tokens, 0, {{now}})
ON CONFLICT (job_id, kind) DO NOTHING

-- name: provider_batch_intend
-- Record a part before its create is sent; a part already recorded is answered as it stands.
INSERT INTO provider_batches (part_key, batch_id, provider, lines, created_at)
VALUES (:part_key, :batch_id, :provider, :lines, {{now}})
ON CONFLICT (part_key) DO UPDATE SET part_key = provider_batches.part_key
RETURNING part_key, batch_id, provider, lines, provider_batch_id, created_at, recorded_at,
          status, request_counts, collected_at

-- name: provider_batch_collected
-- Mark a part read back, with the provider's last status and counts (once).
UPDATE provider_batches
   SET status = :status, request_counts = :request_counts, collected_at = {{now}}
 WHERE part_key = :part_key AND collected_at IS NULL
RETURNING part_key
