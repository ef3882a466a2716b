-- Webhook endpoints and the outbox as a leased delivery queue (both dialects).

-- name: webhook_endpoint_get
-- One endpoint by id.
SELECT * FROM webhook_endpoints WHERE id = :id

-- name: webhook_endpoint_get_for_tenant
-- One endpoint by id, only if the tenant owns it.
SELECT * FROM webhook_endpoints WHERE id = :id AND tenant_id = :tenant_id
