-- Role heartbeats (both dialects).

-- name: role_heartbeat_forget
-- Forget one process of a role (it stopped): the role reads as missing at once if it was the last.
DELETE FROM role_heartbeats WHERE role = :role AND instance = :instance

-- name: roles_with_work
-- Which roles have something to do now (each an indexed probe): a worker (queued jobs), the
-- batches role (live batches), a dispatcher (pending deliveries), a reaper (leases to watch,
-- schedules to fire; a background job at its provider holds no lease).
SELECT EXISTS (SELECT 1 FROM jobs WHERE state = 'queued') AS worker,
       EXISTS (SELECT 1 FROM batches
                WHERE status IN ('validating', 'in_progress', 'finalizing', 'cancelling'))
           AS batches,
       EXISTS (SELECT 1 FROM outbox WHERE state = 'pending') AS dispatcher,
       (EXISTS (SELECT 1 FROM jobs WHERE state = 'running' AND lease_token IS NOT NULL)
        OR EXISTS (SELECT 1 FROM schedules WHERE NOT paused)) AS reaper

-- name: role_heartbeat_upsert
-- Record that one process of a role is alive now.
INSERT INTO role_heartbeats (role, instance, seen_at)
VALUES (:role, :instance, {{now}})
ON CONFLICT (role, instance) DO UPDATE SET seen_at = excluded.seen_at
