-- Tenant limits, queue accounting and retention (SQLite).

-- name: usage_tokens_since
-- Tokens billed per tenant since a UTC midnight: completions minus refunds, in the ledger and
-- in what retention rolled up of its deleted jobs and its native batches' parts (usage_daily,
-- usage_daily_batches, by UTC day).
SELECT tenant_id, sum(tokens) AS tokens
  FROM (SELECT tenant_id,
               sum(CASE kind WHEN 'refund' THEN -1 ELSE 1 END * (input_tokens + output_tokens))
                   AS tokens
          FROM usage_ledger
         WHERE created_at >= :since
         GROUP BY tenant_id
        UNION ALL
        SELECT tenant_id, sum(input_tokens + output_tokens)
          FROM usage_daily
         WHERE day >= date(:since, 'unixepoch')
         GROUP BY tenant_id
        UNION ALL
        SELECT tenant_id, sum(input_tokens + output_tokens)
          FROM usage_daily_batches
         WHERE day >= date(:since, 'unixepoch')
         GROUP BY tenant_id) AS billed
 GROUP BY tenant_id

-- name: usage_by_model_since
-- Tokens billed per tenant, provider and model since a UTC midnight: completions minus
-- refunds, in the ledger and in what retention rolled up (usage_daily's '' model is none);
-- the usage of provider-native batches apart (native_batch: priced at the batch price), in
-- the ledger (kind 'batch') and rolled up (usage_daily_batches).
SELECT tenant_id, NULL AS concurrency_key, provider, model, native_batch,
       sum(input_tokens) AS input_tokens,
       sum(output_tokens) AS output_tokens,
       sum(cache_read_tokens) AS cache_read_tokens,
       sum(cache_write_tokens) AS cache_write_tokens
  FROM (SELECT tenant_id, provider, model, kind = 'batch' AS native_batch,
               {{usage_signed_tokens}}
          FROM usage_ledger AS u
         WHERE created_at >= :since
         GROUP BY tenant_id, provider, model, kind = 'batch'
        UNION ALL
        SELECT tenant_id, provider, nullif(model, ''), 0, sum(input_tokens), sum(output_tokens),
               sum(cache_read_tokens), sum(cache_write_tokens)
          FROM usage_daily
         WHERE day >= date(:since, 'unixepoch')
         GROUP BY tenant_id, provider, model
        UNION ALL
        SELECT tenant_id, provider, nullif(model, ''), 1, sum(input_tokens), sum(output_tokens),
               sum(cache_read_tokens), sum(cache_write_tokens)
          FROM usage_daily_batches
         WHERE day >= date(:since, 'unixepoch')
         GROUP BY tenant_id, provider, model) AS billed
 GROUP BY tenant_id, provider, model, native_batch

-- name: usage_by_key_since
-- Tokens billed per tenant, concurrency key, provider and model since a UTC midnight, for the
-- tenants named (:tenant_ids, JSON) and jobs with a key: completions minus refunds, in the
-- ledger (a job's key read from its row) and in what retention rolled up (usage_daily_keys).
SELECT tenant_id, concurrency_key, provider, model, 0 AS native_batch,
       sum(input_tokens) AS input_tokens,
       sum(output_tokens) AS output_tokens,
       sum(cache_read_tokens) AS cache_read_tokens,
       sum(cache_write_tokens) AS cache_write_tokens
  FROM (SELECT u.tenant_id, j.concurrency_key, u.provider, u.model,
               {{usage_signed_tokens}}
          FROM usage_ledger AS u
          JOIN jobs AS j ON j.id = u.job_id
         WHERE u.created_at >= :since
           AND u.tenant_id IN (SELECT value FROM json_each(:tenant_ids))
           AND j.concurrency_key IS NOT NULL
         GROUP BY u.tenant_id, j.concurrency_key, u.provider, u.model
        UNION ALL
        SELECT tenant_id, concurrency_key, provider, nullif(model, ''), sum(input_tokens),
               sum(output_tokens), sum(cache_read_tokens), sum(cache_write_tokens)
          FROM usage_daily_keys
         WHERE day >= date(:since, 'unixepoch')
           AND tenant_id IN (SELECT value FROM json_each(:tenant_ids))
         GROUP BY tenant_id, concurrency_key, provider, model) AS billed
 GROUP BY tenant_id, concurrency_key, provider, model

-- name: job_purge_expired
-- Erase input and result of jobs completed before the cut-off, oldest first.
UPDATE jobs
   SET request = NULL, result = NULL, purged_at = :now
 WHERE id IN (SELECT id FROM jobs
               WHERE purged_at IS NULL AND completed_at < :completed_before
               ORDER BY completed_at
               LIMIT :limit)

-- name: idempotency_purge_expired
-- Forget expired idempotency keys.
DELETE FROM idempotency_keys
 WHERE (tenant_id, route, key) IN (SELECT tenant_id, route, key
                                     FROM idempotency_keys
                                    WHERE expires_at <= :now
                                    LIMIT :limit)
