-- Retention keeps a finished job only while an idempotency key naming it is live (not every job
-- for a day), and deletes today's billed jobs too, their usage rolled up into usage_daily,
-- which the daily budgets now read beside the ledger. Two indexes serve those reads: a key's
-- job, probed for each job retention picks; and usage_daily by day, so that a budget reads
-- today's rollup rather than every day ever kept.

CREATE INDEX idempotency_keys_by_job ON idempotency_keys (job_id);

CREATE INDEX usage_daily_by_day ON usage_daily (day);
