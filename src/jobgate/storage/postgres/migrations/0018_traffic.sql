-- Shared rate limits (issue 19): one row per (provider, model) bucket ('' = provider-wide),
-- holding the times (Unix seconds, database clock) at which its next request may start and its
-- token debt is paid. Every worker process locks and updates these rows, so the limits hold
-- across processes (domain.rate_limits has the rules).

CREATE TABLE rate_limit_buckets (
    provider    text NOT NULL,
    model       text NOT NULL DEFAULT '',
    requests_at double precision NOT NULL DEFAULT 0,
    tokens_at   double precision NOT NULL DEFAULT 0,
    PRIMARY KEY (provider, model)
);

-- Model routes: the alias a job was submitted for (`[routes."ALIAS"]`); its provider and model
-- columns hold the target it runs on now.
ALTER TABLE jobs ADD COLUMN model_route text;

-- Honest progress: the fraction done its provider last reported (NULL: none reported).
ALTER TABLE jobs ADD COLUMN progress double precision;

-- Recurring schedules: a cron expression (UTC) and a job template; each run is an ordinary job
-- submitted with the Idempotency-Key "schedule:ID:SLOT", so a run fired twice (a restart
-- between submit and advance, two schedulers) is one job, and slots advance one at a time.
CREATE TABLE schedules (
    id          text PRIMARY KEY,
    tenant_id   text NOT NULL,
    cron        text NOT NULL,
    template    jsonb NOT NULL,
    paused      boolean NOT NULL DEFAULT false,
    next_run_at timestamptz NOT NULL,
    created_at  timestamptz NOT NULL
);
CREATE INDEX schedules_due ON schedules (next_run_at);
CREATE INDEX schedules_by_tenant ON schedules (tenant_id, created_at);
