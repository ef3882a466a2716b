-- Job tokens: the secrets that sign them, one generation per rotation (the newest signs, every
-- generation from the newest that revoked its elders on verifies). API processes cache them, so
-- a token is verified without a read per request.
CREATE TABLE job_token_secrets (
    generation    integer PRIMARY KEY,
    secret        text NOT NULL,
    revokes_older boolean NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now()
);
