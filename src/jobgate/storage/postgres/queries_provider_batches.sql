-- Provider-native batches (PostgreSQL): the parts of a batch sent as provider batches.

-- name: provider_batch_intend
-- Record a part before its create is sent; a part already recorded is answered as it stands.
INSERT INTO provider_batches (part_key, batch_id, provider, lines, created_at)
VALUES (:part_key, :batch_id, :provider, :lines::jsonb, coalesce(:now::timestamptz, now()))
ON CONFLICT (part_key) DO UPDATE SET part_key = provider_batches.part_key
RETURNING part_key, batch_id, provider, lines, provider_batch_id, created_at, recorded_at

-- name: provider_batch_record
-- Name the provider batch of a part: once (the same id again is a no-op; another is refused).
UPDATE provider_batches
   SET provider_batch_id = :provider_batch_id,
       recorded_at = coalesce(recorded_at, coalesce(:now::timestamptz, now()))
 WHERE part_key = :part_key
   AND (provider_batch_id IS NULL OR provider_batch_id = :provider_batch_id)
RETURNING part_key, batch_id, provider, lines, provider_batch_id, created_at, recorded_at

-- name: provider_batches_of
-- The parts of a batch, in the order they were planned.
SELECT part_key, batch_id, provider, lines, provider_batch_id, created_at, recorded_at
  FROM provider_batches
 WHERE batch_id = :batch_id
 ORDER BY created_at, part_key
