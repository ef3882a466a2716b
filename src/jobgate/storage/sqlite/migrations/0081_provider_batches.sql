-- Provider-native batches: each part of a batch sent as one provider batch. The row is written
-- (the intent, named by `part_key`, which the provider batch carries in its metadata) before
-- the create is sent, and the provider's id recorded once known: a create whose answer was lost
-- is found again by listing the provider's batches for the key, never created twice.
CREATE TABLE provider_batches (
    part_key          TEXT PRIMARY KEY,
    batch_id          TEXT NOT NULL REFERENCES batches (id) ON DELETE CASCADE,
    provider          TEXT NOT NULL,
    lines             TEXT NOT NULL,       -- the caller's line numbers the part carries (JSON)
    provider_batch_id TEXT,                -- NULL until the create's answer (or a listing)
    created_at        REAL NOT NULL,
    recorded_at       REAL
);
CREATE INDEX provider_batches_batch ON provider_batches (batch_id);
