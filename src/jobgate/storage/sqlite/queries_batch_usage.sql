-- Retention of provider-native batches' usage (SQLite): ledger rows of kind 'batch' past the
-- horizon summed into usage_daily_batches and deleted, in one write operation. :ids is JSON.

-- name: retention_batch_usage_pick
-- Up to :limit ledger rows of kind 'batch' (one per part, named by its key) billed before
-- :completed_before, oldest first. A part is read back once (provider_batch_end marks it
-- collected in the transaction that bills it), so its row is never billed again once gone.
SELECT job_id
  FROM usage_ledger
 WHERE kind = 'batch' AND created_at < :completed_before
 ORDER BY created_at
 LIMIT :limit

-- name: retention_batch_usage_rollup
-- Add the picked rows' usage to usage_daily_batches (per tenant, UTC day, provider and model).
INSERT INTO usage_daily_batches AS d (tenant_id, day, provider, model, parts, input_tokens,
                                      output_tokens, cache_read_tokens, cache_write_tokens)
SELECT tenant_id, date(created_at, 'unixepoch'), provider, coalesce(model, ''), count(*),
       sum(input_tokens), sum(output_tokens), sum(cache_read_tokens), sum(cache_write_tokens)
  FROM usage_ledger
 WHERE kind = 'batch' AND job_id IN (SELECT value FROM json_each(:ids))
 GROUP BY 1, 2, 3, 4
{{usage_daily_batches_add}}

-- name: retention_batch_usage_delete
-- The picked rows (already summed).
DELETE FROM usage_ledger WHERE kind = 'batch' AND job_id IN (SELECT value FROM json_each(:ids))
