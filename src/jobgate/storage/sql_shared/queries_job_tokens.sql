-- Job tokens (both dialects): the secrets that sign them, one generation per rotation.

-- name: job_token_secret_list
-- Every stored secret, oldest generation first.
SELECT generation, secret, revokes_older, created_at FROM job_token_secrets ORDER BY generation

-- name: job_token_secret_first
-- Store generation 1 unless a secret exists (a concurrent first store wins, this one is dropped).
INSERT INTO job_token_secrets (generation, secret, revokes_older, created_at)
SELECT 1, :secret, false, {{now}}
 WHERE NOT EXISTS (SELECT 1 FROM job_token_secrets)
ON CONFLICT (generation) DO NOTHING

-- name: job_token_secret_rotate
-- Store the next generation, which signs from now on (nothing when a concurrent rotation took it).
INSERT INTO job_token_secrets (generation, secret, revokes_older, created_at)
SELECT coalesce(max(generation), 0) + 1, :secret, :revokes_older, {{now}}
  FROM job_token_secrets
 WHERE true  -- SQLite reads an ON CONFLICT after a bare FROM as a join's
ON CONFLICT (generation) DO NOTHING
RETURNING generation
