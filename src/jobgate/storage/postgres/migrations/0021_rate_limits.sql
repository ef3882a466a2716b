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
