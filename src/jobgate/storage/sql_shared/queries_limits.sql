-- Tenant limits, queue accounting and retention (both dialects).

-- name: tenant_limits_all
-- Every tenant's stored overrides.
SELECT * FROM tenant_limits

-- name: claimed_by_tenant
-- Claims per tenant so far.
SELECT tenant_id, claimed_total FROM tenant_stats

-- name: tenant_limits_upsert
-- Replace a tenant's stored overrides.
INSERT INTO tenant_limits (tenant_id, max_running, max_queued, weight, allowed_models,
                           allowed_providers, max_output_tokens, daily_token_budget,
                           daily_cost_budget_usd, max_running_per_key, rpm_per_key,
                           daily_token_budget_per_key, daily_cost_budget_usd_per_key,
                           updated_at)
VALUES (:tenant_id, :max_running, :max_queued, :weight, :allowed_models, :allowed_providers,
        :max_output_tokens, :daily_token_budget, :daily_cost_budget_usd, :max_running_per_key,
        :rpm_per_key, :daily_token_budget_per_key, :daily_cost_budget_usd_per_key,
        {{now}})
ON CONFLICT (tenant_id) DO UPDATE
   SET max_running = excluded.max_running, max_queued = excluded.max_queued,
       weight = excluded.weight, allowed_models = excluded.allowed_models,
       allowed_providers = excluded.allowed_providers,
       max_output_tokens = excluded.max_output_tokens,
       daily_token_budget = excluded.daily_token_budget,
       daily_cost_budget_usd = excluded.daily_cost_budget_usd,
       max_running_per_key = excluded.max_running_per_key,
       rpm_per_key = excluded.rpm_per_key,
       daily_token_budget_per_key = excluded.daily_token_budget_per_key,
       daily_cost_budget_usd_per_key = excluded.daily_cost_budget_usd_per_key,
       updated_at = excluded.updated_at
RETURNING *

-- name: queued_by_tenant
-- Queued jobs per tenant (an index-only scan of jobs_claimable).
SELECT tenant_id, count(*) AS queued FROM jobs WHERE state = 'queued' GROUP BY tenant_id

-- name: queued_count
-- One tenant's queued jobs.
SELECT count(*) AS queued FROM jobs WHERE state = 'queued' AND tenant_id = :tenant_id

-- name: queued_total
-- Everyone's queued jobs.
SELECT count(*) AS queued FROM jobs WHERE state = 'queued'

-- name: usage_tokens_since
-- Tokens billed per tenant since a UTC midnight: completions minus refunds, in the ledger and
-- in what retention rolled up of its deleted jobs and its native batches' parts (usage_daily,
-- usage_daily_batches, by UTC day).
SELECT tenant_id, CAST(sum(tokens) AS bigint) AS tokens
  FROM (SELECT tenant_id,
               sum(CASE kind WHEN 'refund' THEN -1 ELSE 1 END * (input_tokens + output_tokens))
                   AS tokens
          FROM usage_ledger
         WHERE created_at >= :since
         GROUP BY tenant_id
        UNION ALL
        SELECT tenant_id, sum(input_tokens + output_tokens)
          FROM usage_daily
         WHERE day >= {{since_day}}
         GROUP BY tenant_id
        UNION ALL
        SELECT tenant_id, sum(input_tokens + output_tokens)
          FROM usage_daily_batches
         WHERE day >= {{since_day}}
         GROUP BY tenant_id) AS billed
 GROUP BY tenant_id

-- name: usage_by_model_since
-- Tokens billed per tenant, provider and model since a UTC midnight: completions minus
-- refunds, in the ledger and in what retention rolled up (usage_daily's '' model is none);
-- the usage of provider-native batches apart (native_batch: priced at the batch price), in
-- the ledger (kind 'batch') and rolled up (usage_daily_batches).
SELECT tenant_id, NULL AS concurrency_key, provider, model, native_batch,
       CAST(sum(input_tokens) AS bigint) AS input_tokens,
       CAST(sum(output_tokens) AS bigint) AS output_tokens,
       CAST(sum(cache_read_tokens) AS bigint) AS cache_read_tokens,
       CAST(sum(cache_write_tokens) AS bigint) AS cache_write_tokens
  FROM (SELECT tenant_id, provider, model, kind = 'batch' AS native_batch,
               {{usage_signed_tokens}}
          FROM usage_ledger AS u
         WHERE created_at >= :since
         GROUP BY tenant_id, provider, model, kind = 'batch'
        UNION ALL
        SELECT tenant_id, provider, nullif(model, ''), false, sum(input_tokens), sum(output_tokens),
               sum(cache_read_tokens), sum(cache_write_tokens)
          FROM usage_daily
         WHERE day >= {{since_day}}
         GROUP BY tenant_id, provider, model
        UNION ALL
        SELECT tenant_id, provider, nullif(model, ''), true, sum(input_tokens), sum(output_tokens),
               sum(cache_read_tokens), sum(cache_write_tokens)
          FROM usage_daily_batches
         WHERE day >= {{since_day}}
         GROUP BY tenant_id, provider, model) AS billed
 GROUP BY tenant_id, provider, model, native_batch

-- name: usage_by_key_since
-- Tokens billed per tenant, concurrency key, provider and model since a UTC midnight, for the
-- tenants named (:tenant_ids, JSON) and jobs with a key: completions minus refunds, in the ledger
-- (a job's key read from its row) and in what retention rolled up (usage_daily_keys).
SELECT tenant_id, concurrency_key, provider, model, false AS native_batch,
       CAST(sum(input_tokens) AS bigint) AS input_tokens,
       CAST(sum(output_tokens) AS bigint) AS output_tokens,
       CAST(sum(cache_read_tokens) AS bigint) AS cache_read_tokens,
       CAST(sum(cache_write_tokens) AS bigint) AS cache_write_tokens
  FROM (SELECT u.tenant_id, j.concurrency_key, u.provider, u.model,
               {{usage_signed_tokens}}
          FROM usage_ledger AS u
          JOIN jobs AS j ON j.id = u.job_id
         WHERE u.created_at >= :since
           AND u.tenant_id IN ({{tenant_ids}})
           AND j.concurrency_key IS NOT NULL
         GROUP BY u.tenant_id, j.concurrency_key, u.provider, u.model
        UNION ALL
        SELECT tenant_id, concurrency_key, provider, nullif(model, ''), sum(input_tokens),
               sum(output_tokens), sum(cache_read_tokens), sum(cache_write_tokens)
          FROM usage_daily_keys
         WHERE day >= {{since_day}}
           AND tenant_id IN ({{tenant_ids}})
         GROUP BY tenant_id, concurrency_key, provider, model) AS billed
 GROUP BY tenant_id, concurrency_key, provider, model
