-- Recurring schedules (PostgreSQL).

-- name: schedule_lock_tenant
-- Serialise one tenant's schedule creations until commit, so that the count schedule_insert
-- reads after it is exact (no overshoot of the cap by concurrent creates).
SELECT pg_advisory_xact_lock(hashtextextended('jobgate.schedules:' || :tenant_id::text, 0))

-- name: schedule_insert
-- Store a new schedule unless its tenant keeps :max_per_tenant already (then no row).
INSERT INTO schedules (id, tenant_id, cron, template, paused, next_run_at, created_at)
SELECT :id::text, :tenant_id::text, :cron::text, :template::jsonb, :paused::boolean,
       :next_run_at::timestamptz, :created_at::timestamptz
 WHERE (SELECT count(*) FROM schedules WHERE tenant_id = :tenant_id::text)
       < :max_per_tenant::bigint
RETURNING *
