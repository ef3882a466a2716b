-- Recurring schedules (SQLite).

-- name: schedule_insert
-- Store a new schedule unless its tenant keeps :max_per_tenant already (then no row).
INSERT INTO schedules (id, tenant_id, cron, template, paused, next_run_at, created_at)
SELECT :id, :tenant_id, :cron, :template, :paused, :next_run_at, :created_at
 WHERE (SELECT count(*) FROM schedules WHERE tenant_id = :tenant_id) < :max_per_tenant
RETURNING *

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
