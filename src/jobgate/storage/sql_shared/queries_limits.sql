-- Tenant limits, queue accounting and retention (both dialects).

-- name: tenant_limits_all
-- Every tenant's stored overrides.
SELECT * FROM tenant_limits

-- name: claimed_by_tenant
-- Claims per tenant so far.
SELECT tenant_id, claimed_total FROM tenant_stats
