-- Recurring schedules (both dialects).

-- name: schedule_get
-- One schedule of a tenant.
SELECT * FROM schedules WHERE id = :id AND tenant_id = :tenant_id

-- name: schedule_delete
-- Delete a schedule.
DELETE FROM schedules WHERE id = :id AND tenant_id = :tenant_id
