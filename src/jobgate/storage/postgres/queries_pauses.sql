-- Pauses (PostgreSQL): the operator's holds on claims, and the rule every claim applies.

-- fragment: pause_covers
-- THE scope rule of a pause `p` over a job `j` (migration 0041's function, inlined by the
-- planner), included by every claim (job_claim, job_claim_by_id), the relay's publications
-- and the wait a job's view explains: each member the pause names must match, a member it
-- leaves out matches anything.
jobgate_pause_covers(p.provider, p.model, p.tenant_id, j.provider, j.model, j.tenant_id)

-- name: pause_delete
-- Delete one pause (resume its scope), telling every worker to claim again.
WITH gone AS (DELETE FROM pauses WHERE id = :id RETURNING *)
SELECT g.*, pg_notify('jobgate', 'q:') AS notified FROM gone AS g

-- name: pause_delete_all
-- Delete every pause, telling every worker to claim again.
WITH gone AS (DELETE FROM pauses RETURNING *)
SELECT g.*, pg_notify('jobgate', 'q:') AS notified FROM gone AS g
