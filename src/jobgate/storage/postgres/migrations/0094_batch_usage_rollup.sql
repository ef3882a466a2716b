-- The usage of provider-native batches (usage ledger rows of kind 'batch', one per part, named by
-- the part's key) is summed here by retention once past the horizon, per tenant, UTC day,
-- provider and model ('' when the ledger had none), then its ledger rows are deleted, as
-- usage_daily does for jobs; kept apart because it is priced at the batch price. The partial
-- index serves retention's scan of those rows, oldest first.

CREATE TABLE usage_daily_batches (
    tenant_id          text NOT NULL,
    day                date NOT NULL,
    provider           text NOT NULL,
    model              text NOT NULL DEFAULT '',
    parts              bigint NOT NULL DEFAULT 0,
    input_tokens       bigint NOT NULL DEFAULT 0,
    output_tokens      bigint NOT NULL DEFAULT 0,
    cache_read_tokens  bigint NOT NULL DEFAULT 0,
    cache_write_tokens bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, day, provider, model)
);

CREATE INDEX usage_ledger_batch_parts ON usage_ledger (created_at) WHERE kind = 'batch';
