-- Job tokens (both dialects): the secrets that sign them, one generation per rotation.

-- name: job_token_secret_list
-- Every stored secret, oldest generation first.
SELECT generation, secret, revokes_older, created_at FROM job_token_secrets ORDER BY generation
