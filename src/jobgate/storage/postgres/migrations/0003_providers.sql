-- Background mode and inbound provider webhooks: the reconciler's bookkeeping on each job that
-- runs at a provider, and the provider events received (deduplicated by their id).

ALTER TABLE jobs
    ADD COLUMN provider_status    text,                       -- the provider's last word on it
    ADD COLUMN reconciled_at      timestamptz,                -- when a reconciler last took it
    ADD COLUMN reconcile_checks   integer NOT NULL DEFAULT 0,
    ADD COLUMN reconcile_failures integer NOT NULL DEFAULT 0,
    ADD COLUMN reconcile_error    jsonb,                      -- {"kind", "code", "message"}
    ADD COLUMN cancel_sent_at     timestamptz;                -- the provider was asked to cancel

CREATE INDEX jobs_reconcile_due ON jobs (reconcile_at) WHERE reconcile_at IS NOT NULL;
CREATE INDEX jobs_by_provider_job ON jobs (provider, provider_job_id)
    WHERE provider_job_id IS NOT NULL;

CREATE TABLE provider_events (
    provider        text NOT NULL,
    event_id        text NOT NULL,            -- the webhook-id: a redelivery repeats it
    event_type      text NOT NULL,
    provider_job_id text,
    received_at     timestamptz NOT NULL,
    PRIMARY KEY (provider, event_id)
);
CREATE INDEX provider_events_by_job ON provider_events (provider, provider_job_id);
CREATE INDEX provider_events_by_age ON provider_events (received_at);
