-- Job tokens: the secrets that sign them, one generation per rotation (the newest signs, every
-- generation from the newest that revoked its elders on verifies). API processes cache them, so
-- a token is verified without a read per request.
CREATE TABLE job_token_secrets (
    generation    INTEGER PRIMARY KEY,
    secret        TEXT NOT NULL,
    revokes_older INTEGER NOT NULL DEFAULT 0,
    created_at    REAL NOT NULL
);
