-- Job tokens (SQLite): the secrets that sign them, one generation per rotation.

-- name: job_token_secret_first
-- Store generation 1 unless a secret exists (a concurrent first store wins, this one is dropped).
INSERT INTO job_token_secrets (generation, secret, revokes_older, created_at)
SELECT 1, :secret, 0, :now WHERE NOT EXISTS (SELECT 1 FROM job_token_secrets)
ON CONFLICT (generation) DO NOTHING

-- name: job_token_secret_rotate
-- Store the next generation, which signs from now on (nothing when a concurrent rotation took it).
INSERT INTO job_token_secrets (generation, secret, revokes_older, created_at)
SELECT coalesce(max(generation), 0) + 1, :secret, :revokes_older, :now FROM job_token_secrets WHERE true
ON CONFLICT (generation) DO NOTHING
RETURNING generation

-- name: job_token_secret_prune
-- Delete the generations that verify nothing any more: revoked, or replaced longer than a token lives.
DELETE FROM job_token_secrets
 WHERE EXISTS (SELECT 1 FROM job_token_secrets AS later
                WHERE later.generation > job_token_secrets.generation
                  AND (later.revokes_older OR later.created_at < :now - :max_ttl_s))
