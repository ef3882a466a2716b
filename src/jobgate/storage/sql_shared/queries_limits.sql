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
