-- Nothing to change on SQLite: PostgreSQL's 0025 replaces the per-row foreign-key query of
-- jobs.tenant_id by one check per statement; SQLite's foreign-key check is an index lookup in
-- this process, part of the same write, and stays.
SELECT 1;
