-- Bounded tables (issue 20). Retention deletes finished jobs with their events, outbox rows,
-- delivery attempts and usage ledger rows; their usage is summed here first, per tenant, UTC
-- day (TEXT 'YYYY-MM-DD'), provider and model ('' when the ledger had none).
-- The partial index serves retention's oldest-completion-first scan of terminal jobs.

CREATE TABLE usage_daily (
    tenant_id     TEXT NOT NULL,
    day           TEXT NOT NULL,
    provider      TEXT NOT NULL,
    model         TEXT NOT NULL DEFAULT '',
    jobs          INTEGER NOT NULL DEFAULT 0,     -- completions summed
    input_tokens  INTEGER NOT NULL DEFAULT 0,     -- completions minus refunds
    output_tokens INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, day, provider, model)
) WITHOUT ROWID;

CREATE INDEX jobs_retention ON jobs (completed_at)
    WHERE state IN ('succeeded', 'failed', 'cancelled', 'expired');
