-- Job search (GET /v1/jobs?model=…&provider=…&metadata[KEY]=…): each filter a page can be read
-- through in its own order. model and provider: a tenant's jobs of one model (provider) newest
-- first, so a page walks only matching rows and stops at its limit. metadata: its keys are the
-- applications' own, so no expression index can name them; a GIN index (jsonb_path_ops, which
-- serves @> and is a third the size of the default operator class) over the jobs that have
-- metadata at all finds the jobs holding every pair, which the page then sorts (a metadata pair
-- names an application's object, a user or a document: few jobs). Jobs without metadata, most
-- of them, add no GIN entry to write.
CREATE INDEX jobs_by_tenant_model ON jobs (tenant_id, model, created_at, id);
CREATE INDEX jobs_by_tenant_provider ON jobs (tenant_id, provider, created_at, id);
CREATE INDEX jobs_by_metadata ON jobs USING gin (metadata jsonb_path_ops)
    WHERE metadata <> '{}'::jsonb;
