-- Job search pages walk the tenant's jobs through jobs_by_tenant, at most a bounded number per
-- page (storage job_search), instead of reading an index per criterion: every claim and finish
-- updates the job row outside HOT, so each such index costs an insert on both, on the hot path
-- of every job, for a read that is rare.
DROP INDEX jobs_by_tenant_model;
DROP INDEX jobs_by_tenant_provider;
