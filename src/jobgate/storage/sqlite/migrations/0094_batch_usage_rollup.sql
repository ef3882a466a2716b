-- The usage of provider-native batches (usage ledger rows of kind 'batch', one per part, named by
-- the part's key) is summed here by retention once past the horizon, per tenant, UTC day
-- (TEXT 'YYYY-MM-DD'), provider and model ('' when the ledger had none), then its ledger rows
-- are deleted, as usage_daily does for jobs; kept apart because it is priced at the batch
-- price. The partial index serves retention's scan of those rows, oldest first.

CREATE TABLE usage_daily_batches (
    tenant_id          TEXT NOT NULL,
    day                TEXT NOT NULL,
    provider           TEXT NOT NULL,
    model              TEXT NOT NULL DEFAULT '',
    parts              INTEGER NOT NULL DEFAULT 0,
    input_tokens       INTEGER NOT NULL DEFAULT 0,
    output_tokens      INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens  INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, day, provider, model)
) WITHOUT ROWID;

CREATE INDEX usage_ledger_batch_parts ON usage_ledger (created_at) WHERE kind = 'batch';
