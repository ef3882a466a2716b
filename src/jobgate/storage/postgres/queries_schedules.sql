-- Recurring schedules (PostgreSQL).

-- name: schedule_insert
-- Store a new schedule.
INSERT INTO schedules (id, tenant_id, cron, template, paused, next_run_at, created_at)
VALUES (:id, :tenant_id, :cron, :template, :paused, :next_run_at::timestamptz, :created_at::timestamptz)
RETURNING *

-- name: schedule_list
-- A tenant's schedules, oldest first.
SELECT * FROM schedules WHERE tenant_id = :tenant_id ORDER BY created_at, id LIMIT :limit

-- name: schedule_get
-- One schedule of a tenant.
SELECT * FROM schedules WHERE id = :id AND tenant_id = :tenant_id

-- name: schedule_set_paused
-- Pause or resume a schedule (a resume may move its next slot).
UPDATE schedules
   SET paused = :paused, next_run_at = coalesce(:next_run_at::timestamptz, next_run_at)
 WHERE id = :id AND tenant_id = :tenant_id
RETURNING *

-- name: schedule_delete
-- Delete a schedule.
DELETE FROM schedules WHERE id = :id AND tenant_id = :tenant_id

-- name: schedule_due
-- Unpaused schedules whose next slot has come, oldest slot first.
SELECT * FROM schedules
 WHERE NOT paused AND next_run_at <= coalesce(:now::timestamptz, now())
 ORDER BY next_run_at, id
 LIMIT :limit

-- name: schedule_advance
-- Move a schedule past a fired slot, only if it is still there (compare-and-set).
UPDATE schedules SET next_run_at = :next_run_at::timestamptz
 WHERE id = :id AND next_run_at = :slot::timestamptz AND NOT paused
