-- Per-tenant limits set with `jobgate tenants set` (NULL: the jobgate.toml value or the default
-- applies), claim counters for the drain rate, and a claim index that serves per-tenant
-- fair claiming; operator keys for the dashboard.

CREATE TABLE tenant_limits (
    tenant_id          text PRIMARY KEY REFERENCES tenants (id),
    max_running        integer,
    max_queued         integer,
    weight             double precision,
    allowed_models     jsonb,
    allowed_providers  jsonb,
    max_output_tokens  integer,
    daily_token_budget bigint,
    updated_at         timestamptz NOT NULL
);

-- How many jobs each tenant has had claimed, ever: deltas give the drain rate.
CREATE TABLE tenant_stats (
    tenant_id     text PRIMARY KEY,
    claimed_total bigint NOT NULL DEFAULT 0
);

DROP INDEX jobs_claimable;
CREATE INDEX jobs_claimable ON jobs (tenant_id, priority, run_at, id) WHERE state = 'queued';
CREATE INDEX jobs_purgeable ON jobs (completed_at) WHERE purged_at IS NULL;

-- Operators see every tenant (the dashboard). Their keys are stored hashed, like API keys.
CREATE TABLE operator_keys (
    id         text PRIMARY KEY,
    name       text NOT NULL,
    key_hash   text NOT NULL UNIQUE,
    key_prefix text NOT NULL,
    created_at timestamptz NOT NULL,
    revoked_at timestamptz
);
