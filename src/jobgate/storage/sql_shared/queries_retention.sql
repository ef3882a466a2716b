-- Retention (both dialects): delete finished jobs past the horizon with everything that hangs

-- name: usage_daily
-- The usage rollup, optionally of one tenant.
SELECT *
  FROM usage_daily
 WHERE (CAST(:tenant_id AS text) IS NULL OR tenant_id = :tenant_id)
 ORDER BY tenant_id, day, provider, model

-- fragment: usage_signed_tokens
-- The tokens of ledger rows `u`, summed as billed (the budgets, retention's rollups): a refund
-- counts against its completion.
sum(CASE u.kind WHEN 'refund' THEN -1 ELSE 1 END * u.input_tokens) AS input_tokens,
sum(CASE u.kind WHEN 'refund' THEN -1 ELSE 1 END * u.output_tokens) AS output_tokens,
sum(CASE u.kind WHEN 'refund' THEN -1 ELSE 1 END * u.cache_read_tokens) AS cache_read_tokens,
sum(CASE u.kind WHEN 'refund' THEN -1 ELSE 1 END * u.cache_write_tokens) AS cache_write_tokens

-- fragment: usage_daily_add
-- A day's rollup (into usage_daily AS d) adds to what an earlier pass rolled up of that day.
ON CONFLICT (tenant_id, day, provider, model) DO UPDATE
   SET jobs = d.jobs + excluded.jobs,
       input_tokens = d.input_tokens + excluded.input_tokens,
       output_tokens = d.output_tokens + excluded.output_tokens,
       cache_read_tokens = d.cache_read_tokens + excluded.cache_read_tokens,
       cache_write_tokens = d.cache_write_tokens + excluded.cache_write_tokens

-- fragment: usage_daily_keys_add
-- A day's rollup per concurrency key (into usage_daily_keys AS d) adds to an earlier pass's.
ON CONFLICT (day, tenant_id, concurrency_key, provider, model) DO UPDATE
   SET input_tokens = d.input_tokens + excluded.input_tokens,
       output_tokens = d.output_tokens + excluded.output_tokens,
       cache_read_tokens = d.cache_read_tokens + excluded.cache_read_tokens,
       cache_write_tokens = d.cache_write_tokens + excluded.cache_write_tokens
