-- Pauses (SQLite): the operator's holds on claims, and the rule every claim applies.

-- fragment: pause_covers
-- THE scope rule of a pause `p` over a job `j`, included by every claim (job_claim_candidates,
-- job_claim_by_id_candidates), the relay's publications and the wait a job's view explains:
-- each member the pause names must match, a member it leaves out matches anything.
((p.provider IS NULL OR p.provider = j.provider)
 AND (p.model IS NULL OR p.model = j.model)
 AND (p.tenant_id IS NULL OR p.tenant_id = j.tenant_id))

-- name: pause_delete
-- Delete one pause (resume its scope).
DELETE FROM pauses WHERE id = :id RETURNING *

-- name: pause_delete_all
-- Delete every pause.
DELETE FROM pauses RETURNING *
