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

-- name: admin_endpoint_health
-- Webhook endpoints with their deliveries by state, whether one is failing (a delivery pending
-- after :min_attempts failures) and the last failure. Progress deliveries are best effort
-- (sent once, dropped when superseded): they count in none of these.
SELECT e.id AS endpoint_id, t.name AS tenant_name, e.url, e.disabled, e.disabled_reason,
       count(*) FILTER (WHERE {{delivery_failing}}) > 0 AS failing,
       count(*) FILTER (WHERE o.state = 'pending') AS pending,
       count(*) FILTER (WHERE o.state = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE o.state = 'failed') AS failed,
       (SELECT o2.last_status_code FROM outbox AS o2
         WHERE o2.endpoint_id = e.id AND o2.attempts > 0 AND o2.event_type NOT IN ('job.progress', 'batch.progress')
         ORDER BY o2.next_attempt_at DESC LIMIT 1) AS last_status_code,
       (SELECT o2.last_error FROM outbox AS o2
         WHERE o2.endpoint_id = e.id AND o2.last_error IS NOT NULL
           AND o2.event_type NOT IN ('job.progress', 'batch.progress')
         ORDER BY o2.next_attempt_at DESC LIMIT 1) AS last_error
  FROM webhook_endpoints AS e
  JOIN tenants AS t ON t.id = e.tenant_id
  LEFT JOIN outbox AS o ON o.endpoint_id = e.id AND o.event_type NOT IN ('job.progress', 'batch.progress')
 GROUP BY e.id, t.name
 ORDER BY t.name, e.created_at
