-- Job search (GET /v1/jobs?model=…&provider=…&metadata[KEY]=…): a tenant's jobs of one model
-- (provider) newest first, so a page walks only matching rows and stops at its limit. metadata
-- has no index here (SQLite has no inverted index over JSON): a metadata search walks the
-- tenant's jobs newest first (jobs_by_tenant, or one of these when model or provider is given
-- too) until its page is full.
CREATE INDEX jobs_by_tenant_model ON jobs (tenant_id, model, created_at, id);
CREATE INDEX jobs_by_tenant_provider ON jobs (tenant_id, provider, created_at, id);
