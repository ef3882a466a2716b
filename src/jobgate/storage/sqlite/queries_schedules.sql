-- Recurring schedules (SQLite).

-- name: schedule_insert
-- Store a new schedule unless its tenant keeps :max_per_tenant already (then no row).
INSERT INTO schedules (id, tenant_id, cron, template, paused, next_run_at, created_at)
SELECT :id, :tenant_id, :cron, :template, :paused, :next_run_at, :created_at
 WHERE (SELECT count(*) FROM schedules WHERE tenant_id = :tenant_id) < :max_per_tenant
RETURNING *
