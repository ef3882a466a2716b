-- What operators see across tenants (both dialects).

-- name: operator_key_name
-- The operator owning a live key.
SELECT name FROM operator_keys WHERE key_hash = :key_hash AND revoked_at IS NULL

-- name: dashboard_session_delete
-- End a session (sign-out).
DELETE FROM dashboard_sessions WHERE id_hash = :id_hash
