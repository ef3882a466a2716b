-- Per-tenant limits set with `jobgate tenants set` (NULL: the jobgate.toml value or the default
-- applies), claim counters for the drain rate, and a claim index that serves per-tenant
-- fair claiming; operator keys for the dashboard.

CREATE TABLE tenant_limits (
    tenant_id          TEXT PRIMARY KEY REFERENCES tenants (id),
    max_running        INTEGER,
    max_queued         INTEGER,
    weight             REAL,
    allowed_models     TEXT,       -- JSON array
    allowed_providers  TEXT,       -- JSON array
    max_output_tokens  INTEGER,
    daily_token_budget INTEGER,
    updated_at         REAL NOT NULL
);

-- How many jobs each tenant has had claimed, ever: deltas give the drain rate.
CREATE TABLE tenant_stats (
    tenant_id     TEXT PRIMARY KEY,
    claimed_total INTEGER NOT NULL DEFAULT 0
);

DROP INDEX jobs_claimable;
CREATE INDEX jobs_claimable ON jobs (tenant_id, priority, run_at, id) WHERE state = 'queued';
CREATE INDEX jobs_purgeable ON jobs (completed_at) WHERE purged_at IS NULL;

-- Operators see every tenant (the dashboard). Their keys are stored hashed, like API keys.
CREATE TABLE operator_keys (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    key_hash   TEXT NOT NULL UNIQUE,
    key_prefix TEXT NOT NULL,
    created_at REAL NOT NULL,
    revoked_at REAL
);
