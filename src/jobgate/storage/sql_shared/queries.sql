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

-- fragment: retry_unless_cancelled
-- THE rule for a verdict that would send a job back to the queue (a worker's, the reaper's or
-- the provider's via the reconciler): once a cancel was requested, a retry becomes the
-- cancellation instead (`interrupted`), so nothing is started again after a cancel arrived.
-- Sets state, completed_at, cancel_outcome and transition_reason from the verdict `v` (state,
-- reason, cancel_outcome) and the row `j` as the statement sees it, at {{statement_clock}}.
state = CASE WHEN v.state = 'queued' AND j.cancel_requested_at IS NOT NULL
             THEN 'cancelled' ELSE v.state END,
completed_at = CASE WHEN v.state = 'queued' AND j.cancel_requested_at IS NULL
                    THEN NULL ELSE {{statement_clock}} END,
cancel_outcome = CASE WHEN v.state = 'queued' AND j.cancel_requested_at IS NOT NULL
                      THEN 'interrupted' ELSE coalesce(v.cancel_outcome, j.cancel_outcome) END,
transition_reason = CASE WHEN v.state = 'queued' AND j.cancel_requested_at IS NOT NULL
                         THEN 'cancel_requested' ELSE v.reason END

-- fragment: verdict_writes
-- What a lease holder's verdict `v` (job_finish's row of verdicts) writes to its job `j`: the
-- retry rule, the outcome, the attempt refunded, the lease released, the next event number.
{{retry_unless_cancelled}},
result = CASE WHEN j.purged_at IS NULL THEN v.result END,
error = v.error,
usage = coalesce(v.usage, j.usage),
attempt = j.attempt - v.refund_attempt,
lost_count = j.lost_count + v.lost,
dead_lettered = v.dead_lettered,
run_at = CASE WHEN v.state = 'queued' THEN {{retry_at}} ELSE j.run_at END,
creation_outcome = coalesce(v.creation_outcome, j.creation_outcome),
provider_request_id = coalesce(v.provider_request_id, j.provider_request_id),
phase = NULL,
lease_owner = NULL,
lease_token = NULL,
lease_expires_at = NULL,
updated_at = {{statement_clock}},
event_seq = j.event_seq + 1,
transition_actor = v.actor
