-- What operators see across tenants (both dialects).

-- name: operator_key_name
-- The operator owning a live key.
SELECT name FROM operator_keys WHERE key_hash = :key_hash AND revoked_at IS NULL

-- name: dashboard_session_delete
-- End a session (sign-out).
DELETE FROM dashboard_sessions WHERE id_hash = :id_hash

-- name: operator_key_insert
-- Store an operator key's hash.
INSERT INTO operator_keys (id, name, key_hash, key_prefix, created_at)
VALUES (:id, :name, :key_hash, :key_prefix, {{now}})

-- name: dashboard_session_operator
-- The operator of a live session (unexpired, its key not revoked).
SELECT k.name FROM dashboard_sessions AS s JOIN operator_keys AS k ON k.id = s.operator_key_id
 WHERE s.id_hash = :id_hash AND s.expires_at > {{now}}
   AND k.revoked_at IS NULL

-- name: dashboard_session_sweep
-- Forget expired sessions.
DELETE FROM dashboard_sessions WHERE expires_at <= {{now}}

-- name: operator_key_count
-- How many live operator keys exist.
SELECT count(*) AS keys FROM operator_keys WHERE revoked_at IS NULL
