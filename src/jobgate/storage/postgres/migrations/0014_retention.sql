-- Bounded tables (issue 20). Retention deletes finished jobs with their events, outbox rows,
-- delivery attempts and usage ledger rows; their usage is summed here first, per tenant, UTC
-- day, provider and model (model '' when the ledger had none), so spend stays reportable.
-- The partial index serves retention's oldest-completion-first scan of terminal jobs.

CREATE TABLE usage_daily (
    tenant_id     text NOT NULL,
    day           date NOT NULL,
    provider      text NOT NULL,
    model         text NOT NULL DEFAULT '',
    jobs          bigint NOT NULL DEFAULT 0,      -- completions summed
    input_tokens  bigint NOT NULL DEFAULT 0,      -- completions minus refunds
    output_tokens bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, day, provider, model)
);

CREATE INDEX jobs_retention ON jobs (completed_at)
    WHERE state IN ('succeeded', 'failed', 'cancelled', 'expired');
