-- Pauses (both dialects): the operator's holds on claims.

-- name: pause_list
-- Every pause, oldest first.
SELECT * FROM pauses ORDER BY created_at, id

-- name: pause_insert
-- Store a pause (its time the database's).
INSERT INTO pauses (id, provider, model, tenant_id, reason, created_by, created_at)
VALUES (:id, :provider, :model, :tenant_id, :reason, :created_by, {{now}})
RETURNING *
