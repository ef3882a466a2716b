-- Core queries both dialects write alike ({{now}}: the caller's :now, or the database's clock).

-- name: migrations_applied
-- Versions already applied.
SELECT version FROM schema_migrations ORDER BY version

-- name: tenant_by_id
-- One tenant by id.
SELECT * FROM tenants WHERE id = :id

-- name: tenant_by_name
-- One tenant by name.
SELECT * FROM tenants WHERE name = :name

-- name: tenant_list
-- Every tenant, oldest first.
SELECT * FROM tenants ORDER BY created_at, id

-- name: api_key_tenant
-- The tenant owning a live key with this hash.
SELECT t.*
  FROM api_keys AS k JOIN tenants AS t ON t.id = k.tenant_id
 WHERE k.key_hash = :key_hash AND k.revoked_at IS NULL

-- name: api_key_list
-- A tenant's keys, oldest first.
SELECT * FROM api_keys WHERE tenant_id = :tenant_id ORDER BY created_at, id

-- name: job_get
-- One job by id.
SELECT * FROM jobs WHERE id = :id

-- name: job_get_for_tenant
-- One job by id, only if the tenant owns it.
SELECT * FROM jobs WHERE id = :id AND tenant_id = :tenant_id

-- name: usage_for_job
-- A job's ledger entries.
SELECT * FROM usage_ledger WHERE job_id = :job_id ORDER BY created_at, kind

-- name: ping
-- A round trip: is the database there?
SELECT 1

-- name: idempotency_find
-- The live binding of an Idempotency-Key.
SELECT body_hash, job_id, status_code
  FROM idempotency_keys
 WHERE tenant_id = :tenant_id AND route = :route AND key = :key
   AND expires_at > {{now}}

-- fragment: cancel_changes
-- Whether a cancel changes job `j`: a queued job, or a running one not yet asked to stop.
(j.state = 'queued' OR (j.state = 'running' AND j.cancel_requested_at IS NULL))

-- name: api_key_revoke
-- Revoke a key (idempotent).
UPDATE api_keys SET revoked_at = coalesce(revoked_at, {{now}}) WHERE id = :id RETURNING id

-- name: job_purge
-- Erase a job's input and result, leaving the row as a tombstone.
UPDATE jobs
   SET request = NULL, result = NULL, purged_at = coalesce(purged_at, {{now}}), updated_at = {{now}}
 WHERE id = :id AND tenant_id = :tenant_id
RETURNING *

-- name: tenant_insert
-- Create a tenant (nothing when the name is taken).
INSERT INTO tenants (id, name, webhook_secret, created_at)
VALUES (:id, :name, :webhook_secret, {{now}})
ON CONFLICT (name) DO NOTHING
RETURNING *

-- name: api_key_insert
-- Store a key's hash.
INSERT INTO api_keys (id, tenant_id, key_hash, key_prefix, created_at)
VALUES (:id, :tenant_id, :key_hash, :key_prefix, {{now}})
RETURNING *
