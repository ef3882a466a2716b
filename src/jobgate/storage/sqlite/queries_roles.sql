-- Role heartbeats (SQLite).

-- name: role_heartbeat_prune
-- Forget processes of a role not seen for a day (restarted ones get a new instance id).
DELETE FROM role_heartbeats WHERE role = :role AND seen_at < :now - 86400

-- name: role_heartbeat_age
-- Seconds since any process of a role was last seen (NULL: never).
SELECT :now - max(seen_at) AS age_s FROM role_heartbeats WHERE role = :role

-- name: role_heartbeat_ages
-- Seconds since each role's freshest process was seen, for every role ever seen.
SELECT role, :now - max(seen_at) AS age_s FROM role_heartbeats GROUP BY role
