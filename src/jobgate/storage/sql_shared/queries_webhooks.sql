-- Webhook endpoints and the outbox as a leased delivery queue (both dialects).

-- name: webhook_endpoint_get
-- One endpoint by id.
SELECT * FROM webhook_endpoints WHERE id = :id

-- name: webhook_endpoint_get_for_tenant
-- One endpoint by id, only if the tenant owns it.
SELECT * FROM webhook_endpoints WHERE id = :id AND tenant_id = :tenant_id

-- name: webhook_endpoint_list
-- A page of a tenant's endpoints, oldest first.
SELECT *
  FROM webhook_endpoints
 WHERE tenant_id = :tenant_id
   AND (CAST(:after_id AS text) IS NULL
        OR (created_at, id) > (SELECT a.created_at, a.id FROM webhook_endpoints AS a
                                WHERE a.id = :after_id AND a.tenant_id = :tenant_id))
 ORDER BY created_at, id
 LIMIT :limit

-- name: webhook_endpoint_insert
-- Create an endpoint.
INSERT INTO webhook_endpoints (id, tenant_id, url, description, event_types, include_result,
                               disabled, secret, progress_interval_s, created_at, updated_at)
VALUES (:id, :tenant_id, :url, :description, :event_types, :include_result, :disabled, :secret,
        :progress_interval_s, {{now}}, {{now}})
RETURNING *
