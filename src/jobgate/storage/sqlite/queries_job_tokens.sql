-- Job tokens (SQLite): the secrets that sign them, one generation per rotation.

-- name: job_token_secret_prune
-- Delete the generations that verify nothing any more: revoked, or replaced longer than a token lives.
DELETE FROM job_token_secrets
 WHERE EXISTS (SELECT 1 FROM job_token_secrets AS later
                WHERE later.generation > job_token_secrets.generation
                  AND (later.revokes_older OR later.created_at < :now - :max_ttl_s))
