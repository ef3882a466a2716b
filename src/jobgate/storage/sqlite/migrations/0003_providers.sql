-- Background mode and inbound provider webhooks: the reconciler's bookkeeping on each job that
-- runs at a provider, and the provider events received (deduplicated by their id).
-- provider_status: the provider's last word on the job; reconciled_at: when a reconciler last
-- took it; reconcile_error: the last failed check {"kind", "code", "message"}; cancel_sent_at:
-- when the provider was asked to cancel.

ALTER TABLE jobs ADD COLUMN provider_status TEXT;
ALTER TABLE jobs ADD COLUMN reconciled_at REAL;
ALTER TABLE jobs ADD COLUMN reconcile_checks INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN reconcile_failures INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN reconcile_error TEXT;
ALTER TABLE jobs ADD COLUMN cancel_sent_at REAL;

CREATE INDEX jobs_reconcile_due ON jobs (reconcile_at) WHERE reconcile_at IS NOT NULL;
CREATE INDEX jobs_by_provider_job ON jobs (provider, provider_job_id)
    WHERE provider_job_id IS NOT NULL;

-- event_id is the webhook-id: a redelivery repeats it.
CREATE TABLE provider_events (
    provider        TEXT NOT NULL,
    event_id        TEXT NOT NULL,
    event_type      TEXT NOT NULL,
    provider_job_id TEXT,
    received_at     REAL NOT NULL,
    PRIMARY KEY (provider, event_id)
) WITHOUT ROWID;
CREATE INDEX provider_events_by_job ON provider_events (provider, provider_job_id);
CREATE INDEX provider_events_by_age ON provider_events (received_at);
