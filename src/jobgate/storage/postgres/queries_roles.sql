-- Role heartbeats (PostgreSQL).

-- name: role_heartbeat_prune
-- Forget processes of a role not seen for a day (restarted ones get a new instance id).
DELETE FROM role_heartbeats
 WHERE role = :role AND seen_at < coalesce(:now::timestamptz, now()) - interval '1 day'

-- name: role_heartbeat_age
-- Seconds since any process of a role was last seen (NULL: never).
SELECT extract(epoch FROM coalesce(:now::timestamptz, now()) - max(seen_at))::float8 AS age_s
  FROM role_heartbeats WHERE role = :role

-- name: role_heartbeat_ages
-- Seconds since each role's freshest process was seen, for every role ever seen.
SELECT role,
       extract(epoch FROM coalesce(:now::timestamptz, now()) - max(seen_at))::float8 AS age_s
  FROM role_heartbeats GROUP BY role
