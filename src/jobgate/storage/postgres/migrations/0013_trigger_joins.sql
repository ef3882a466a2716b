-- The job trigger joins its transition tables (old_rows, new_rows) by id. Those carry no
-- statistics, and the plan of a parameterless query in PL/pgSQL is cached for the session,
-- so a plan chosen for a claim of a few rows was reused for a heartbeat renewing thousands of
-- leases: a nested loop over the two tables, quadratic in the rows (10,000 leases took over
-- 45 s, so a worker holding that many calls lost their leases). Joins inside the trigger are
-- hashed instead, linear in the rows whatever their number (10,000 leases: about 0.3 s).
-- A later migration that restates this function must keep the setting (CREATE OR REPLACE
-- resets it); tests/services/test_inflight_postgres.py would catch its loss.
ALTER FUNCTION jobgate_jobs_after_update() SET enable_nestloop = off;
