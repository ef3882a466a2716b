-- Retention of provider-native batches' usage (PostgreSQL): ledger rows of kind 'batch' past the
-- horizon summed into usage_daily_batches and deleted, in one statement.

-- name: retention_batch_usage
-- Up to :limit ledger rows of kind 'batch' (one per part, named by its key) billed before
-- :completed_before, oldest first (rows another reaper holds skipped): their usage added to
-- usage_daily_batches (per tenant, UTC day, provider and model), then the rows deleted. A part
-- is read back once (provider_batch_end marks it collected in the transaction that bills it),
-- so its row is never billed again once gone.
WITH picked AS (
    SELECT job_id
      FROM usage_ledger
     WHERE kind = 'batch' AND created_at < :completed_before::timestamptz
     ORDER BY created_at
     LIMIT :limit
       FOR UPDATE SKIP LOCKED
), usage AS (
    DELETE FROM usage_ledger AS u USING picked
     WHERE u.job_id = picked.job_id AND u.kind = 'batch'
    RETURNING u.*
), rolled AS (
    INSERT INTO usage_daily_batches AS d (tenant_id, day, provider, model, parts, input_tokens,
                                          output_tokens, cache_read_tokens, cache_write_tokens)
    SELECT tenant_id, (created_at AT TIME ZONE 'UTC')::date, provider, coalesce(model, ''),
           count(*), sum(input_tokens), sum(output_tokens), sum(cache_read_tokens),
           sum(cache_write_tokens)
      FROM usage
     GROUP BY 1, 2, 3, 4
        {{usage_daily_batches_add}}
    RETURNING 1
)
SELECT (SELECT count(*) FROM usage)::integer AS usage_ledger,
       (SELECT count(*) FROM rolled)::integer AS rolled_up
