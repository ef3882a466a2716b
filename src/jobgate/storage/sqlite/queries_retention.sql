-- Retention (SQLite): delete finished jobs past the horizon with everything that hangs off
-- them, summing their usage into usage_daily first, all in one write operation. :ids is JSON.

-- name: retention_pick
-- Up to :limit terminal jobs past the horizon, oldest completion first (none with a pending
-- delivery or named by an idempotency key live at :now).
SELECT j.id
  FROM jobs AS j
 WHERE j.state IN ({{terminal_states}})
   AND j.completed_at < :completed_before
   AND NOT EXISTS (SELECT 1 FROM outbox AS o WHERE o.job_id = j.id AND o.state = 'pending')
   AND NOT EXISTS (SELECT 1 FROM idempotency_keys AS k
                    WHERE k.job_id = j.id AND k.expires_at > :now)
 ORDER BY j.completed_at
 LIMIT :limit

-- name: retention_rollup
-- Add the picked jobs' usage to usage_daily (per tenant, UTC day, provider and model; today's
-- too: the budgets read it there).
INSERT INTO usage_daily AS d (tenant_id, day, provider, model, jobs, input_tokens, output_tokens,
                              cache_read_tokens, cache_write_tokens)
SELECT tenant_id, date(created_at, 'unixepoch'), provider, coalesce(model, ''),
       sum(kind = 'completion'),
       {{usage_signed_tokens}}
  FROM usage_ledger AS u
 WHERE job_id IN (SELECT value FROM json_each(:ids))
 GROUP BY 1, 2, 3, 4
{{usage_daily_add}}

-- name: retention_rollup_keys
-- Add the usage of the picked jobs that have a concurrency key to usage_daily_keys (per UTC
-- day, tenant, key, provider and model): the per-key budgets read today's there.
INSERT INTO usage_daily_keys AS d (day, tenant_id, concurrency_key, provider, model,
                                   input_tokens, output_tokens, cache_read_tokens,
                                   cache_write_tokens)
SELECT date(u.created_at, 'unixepoch'), u.tenant_id, j.concurrency_key, u.provider,
       coalesce(u.model, ''),
       {{usage_signed_tokens}}
  FROM usage_ledger AS u
  JOIN jobs AS j ON j.id = u.job_id
 WHERE u.job_id IN (SELECT value FROM json_each(:ids)) AND j.concurrency_key IS NOT NULL
 GROUP BY 1, 2, 3, 4, 5
{{usage_daily_keys_add}}

-- name: retention_delete_usage
-- The picked jobs' usage ledger rows (already summed).
DELETE FROM usage_ledger WHERE job_id IN (SELECT value FROM json_each(:ids))

-- name: retention_delete_events
-- The picked jobs' event logs.
DELETE FROM job_events WHERE job_id IN (SELECT value FROM json_each(:ids))

-- name: retention_delete_attempts
-- The picked jobs' webhook delivery attempts.
DELETE FROM webhook_attempts WHERE job_id IN (SELECT value FROM json_each(:ids))

-- name: retention_delete_outbox
-- The picked jobs' outbox rows (none pending).
DELETE FROM outbox WHERE job_id IN (SELECT value FROM json_each(:ids))

-- name: retention_delete_jobs
-- The picked jobs themselves.
-- A job's output chunks go with it: migration 0010's trigger deletes them with the job row.
DELETE FROM jobs WHERE id IN (SELECT value FROM json_each(:ids))
