-- Recurring schedules (both dialects).

-- name: schedule_get
-- One schedule of a tenant.
SELECT * FROM schedules WHERE id = :id AND tenant_id = :tenant_id

-- name: schedule_delete
-- Delete a schedule.
DELETE FROM schedules WHERE id = :id AND tenant_id = :tenant_id

-- name: schedule_due
-- Unpaused schedules whose next slot has come, fairly: every tenant's oldest slot, then every
-- tenant's second, and so on (one tenant's thousands never hold another's back).
SELECT id, tenant_id, cron, template, paused, next_run_at, created_at
  FROM (SELECT s.*, row_number() OVER (PARTITION BY tenant_id ORDER BY next_run_at, id) AS turn
          FROM schedules AS s
         WHERE NOT paused AND next_run_at <= {{now}}) AS due
 ORDER BY turn, next_run_at, id
 LIMIT :limit

-- name: schedule_list
-- A page of a tenant's schedules, oldest first, after the schedule :after_id (keyset).
SELECT *
  FROM schedules
 WHERE tenant_id = :tenant_id
   AND (CAST(:after_id AS text) IS NULL
        OR (created_at, id) > (SELECT a.created_at, a.id FROM schedules AS a
                                WHERE a.id = :after_id AND a.tenant_id = :tenant_id))
 ORDER BY created_at, id
 LIMIT :limit

-- name: schedule_set_paused
-- Pause or resume a schedule (a resume may move its next slot).
UPDATE schedules
   SET paused = :paused, next_run_at = coalesce(:next_run_at, next_run_at)
 WHERE id = :id AND tenant_id = :tenant_id
RETURNING *

-- name: schedule_advance
-- Move a schedule past a fired slot, only if it is still there (compare-and-set).
UPDATE schedules SET next_run_at = :next_run_at
 WHERE id = :id AND next_run_at = :slot AND NOT paused
