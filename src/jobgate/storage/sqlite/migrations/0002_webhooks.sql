-- Outbound webhooks: every delivery attempt, recorded as it happens (GET /v1/jobs/{id}/deliveries),
-- and the indexes the dispatcher and the endpoints API read by.

CREATE TABLE webhook_attempts (
    id          TEXT PRIMARY KEY,            -- att_...
    outbox_id   TEXT NOT NULL,
    event_id    TEXT NOT NULL,               -- the webhook-id sent
    tenant_id   TEXT NOT NULL,
    job_id      TEXT NOT NULL,
    target      TEXT NOT NULL,               -- an endpoint id, or 'job'
    attempt     INTEGER NOT NULL,            -- 1-based, per outbox row
    status_code INTEGER,                     -- NULL: no HTTP answer (refused, timeout, ...)
    latency_ms  INTEGER NOT NULL,
    error       TEXT,                        -- NULL on success
    succeeded   INTEGER NOT NULL,
    created_at  REAL NOT NULL
);
CREATE INDEX webhook_attempts_by_job ON webhook_attempts (job_id, created_at, attempt);

-- Recovering an endpoint's failed deliveries, failing a deleted endpoint's pending ones.
CREATE INDEX outbox_by_endpoint ON outbox (endpoint_id, state, created_at)
    WHERE endpoint_id IS NOT NULL;
CREATE INDEX webhook_endpoints_by_tenant_created ON webhook_endpoints (tenant_id, created_at, id);
