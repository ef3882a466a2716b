-- Tenant limits, queue accounting and retention (PostgreSQL).

-- name: queue_lock_tenant
-- Serialise one tenant's admissions near its queue bound until commit, so that the count read
-- after this lock and the insert that follows decide together (no overshoot).
SELECT pg_advisory_xact_lock(hashtextextended('jobgate.queue:' || :tenant_id::text, 0))

-- name: queue_lock_total
-- Serialise every admission near the global queue bound until commit (taken after any tenant's).
SELECT pg_advisory_xact_lock(7146013)

-- name: usage_tokens_since
-- Tokens billed per tenant since a UTC midnight: completions minus refunds, in the ledger and
-- in what retention rolled up of its deleted jobs and its native batches' parts (usage_daily,
-- usage_daily_batches, by UTC day).
SELECT tenant_id, sum(tokens)::bigint AS tokens
  FROM (SELECT tenant_id,
               sum(CASE kind WHEN 'refund' THEN -1 ELSE 1 END * (input_tokens + output_tokens))
                   AS tokens
          FROM usage_ledger
         WHERE created_at >= :since::timestamptz
         GROUP BY tenant_id
        UNION ALL
        SELECT tenant_id, sum(input_tokens + output_tokens)
          FROM usage_daily
         WHERE day >= (:since::timestamptz AT TIME ZONE 'UTC')::date
         GROUP BY tenant_id
        UNION ALL
        SELECT tenant_id, sum(input_tokens + output_tokens)
          FROM usage_daily_batches
         WHERE day >= (:since::timestamptz AT TIME ZONE 'UTC')::date
         GROUP BY tenant_id) AS billed
 GROUP BY tenant_id

-- name: usage_by_model_since
-- Tokens billed per tenant, provider and model since a UTC midnight: completions minus
-- refunds, in the ledger and in what retention rolled up (usage_daily's '' model is none);
-- the usage of provider-native batches apart (native_batch: priced at the batch price), in
-- the ledger (kind 'batch') and rolled up (usage_daily_batches).
SELECT tenant_id, NULL AS concurrency_key, provider, model, native_batch,
       sum(input_tokens)::bigint AS input_tokens,
       sum(output_tokens)::bigint AS output_tokens,
       sum(cache_read_tokens)::bigint AS cache_read_tokens,
       sum(cache_write_tokens)::bigint AS cache_write_tokens
  FROM (SELECT tenant_id, provider, model, kind = 'batch' AS native_batch,
               {{usage_signed_tokens}}
          FROM usage_ledger AS u
         WHERE created_at >= :since::timestamptz
         GROUP BY tenant_id, provider, model, kind = 'batch'
        UNION ALL
        SELECT tenant_id, provider, nullif(model, ''), false, sum(input_tokens), sum(output_tokens),
               sum(cache_read_tokens), sum(cache_write_tokens)
          FROM usage_daily
         WHERE day >= (:since::timestamptz AT TIME ZONE 'UTC')::date
         GROUP BY tenant_id, provider, model
        UNION ALL
        SELECT tenant_id, provider, nullif(model, ''), true, sum(input_tokens), sum(output_tokens),
               sum(cache_read_tokens), sum(cache_write_tokens)
          FROM usage_daily_batches
         WHERE day >= (:since::timestamptz AT TIME ZONE 'UTC')::date
         GROUP BY tenant_id, provider, model) AS billed
 GROUP BY tenant_id, provider, model, native_batch

-- name: usage_by_key_since
-- Tokens billed per tenant, concurrency key, provider and model since a UTC midnight, for the
-- tenants named (:tenant_ids, JSON) and jobs with a key: completions minus refunds, in the ledger
-- (a job's key read from its row) and in what retention rolled up (usage_daily_keys).
SELECT tenant_id, concurrency_key, provider, model, false AS native_batch,
       sum(input_tokens)::bigint AS input_tokens,
       sum(output_tokens)::bigint AS output_tokens,
       sum(cache_read_tokens)::bigint AS cache_read_tokens,
       sum(cache_write_tokens)::bigint AS cache_write_tokens
  FROM (SELECT u.tenant_id, j.concurrency_key, u.provider, u.model,
               {{usage_signed_tokens}}
          FROM usage_ledger AS u
          JOIN jobs AS j ON j.id = u.job_id
         WHERE u.created_at >= :since::timestamptz
           AND u.tenant_id IN (SELECT jsonb_array_elements_text(:tenant_ids::jsonb))
           AND j.concurrency_key IS NOT NULL
         GROUP BY u.tenant_id, j.concurrency_key, u.provider, u.model
        UNION ALL
        SELECT tenant_id, concurrency_key, provider, nullif(model, ''), sum(input_tokens),
               sum(output_tokens), sum(cache_read_tokens), sum(cache_write_tokens)
          FROM usage_daily_keys
         WHERE day >= (:since::timestamptz AT TIME ZONE 'UTC')::date
           AND tenant_id IN (SELECT jsonb_array_elements_text(:tenant_ids::jsonb))
         GROUP BY tenant_id, concurrency_key, provider, model) AS billed
 GROUP BY tenant_id, concurrency_key, provider, model

-- name: job_purge_expired
-- Erase input and result of jobs completed before the cut-off, oldest first.
WITH due AS (
    SELECT id FROM jobs
     WHERE purged_at IS NULL AND completed_at < :completed_before
     ORDER BY completed_at
     LIMIT :limit
       FOR UPDATE SKIP LOCKED
)
UPDATE jobs AS j
   SET request = NULL, result = NULL, purged_at = coalesce(:now::timestamptz, now())
  FROM due
 WHERE j.id = due.id

-- name: idempotency_purge_expired
-- Forget expired idempotency keys.
DELETE FROM idempotency_keys
 WHERE ctid IN (SELECT ctid FROM idempotency_keys
                 WHERE expires_at <= coalesce(:now::timestamptz, now())
                 LIMIT :limit)
