-- Per end user limits: `jobgate tenants set` overrides of rpm_per_key and the daily budgets per
-- concurrency key (NULL: not overridden), and the usage retention rolls up of the deleted jobs
-- that had a concurrency key, per UTC day, tenant, key, provider and model (model '' when the
-- ledger had none), so that a key's budget still counts today's jobs once they are deleted.
-- Day first in the key: the budgets read today's rows.

ALTER TABLE tenant_limits ADD COLUMN rpm_per_key integer;
ALTER TABLE tenant_limits ADD COLUMN daily_token_budget_per_key bigint;
ALTER TABLE tenant_limits ADD COLUMN daily_cost_budget_usd_per_key double precision;

CREATE TABLE usage_daily_keys (
    day                date NOT NULL,
    tenant_id          text NOT NULL,
    concurrency_key    text NOT NULL,
    provider           text NOT NULL,
    model              text NOT NULL DEFAULT '',
    input_tokens       bigint NOT NULL DEFAULT 0,  -- completions minus refunds
    output_tokens      bigint NOT NULL DEFAULT 0,
    cache_read_tokens  bigint NOT NULL DEFAULT 0,
    cache_write_tokens bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (day, tenant_id, concurrency_key, provider, model)
);
