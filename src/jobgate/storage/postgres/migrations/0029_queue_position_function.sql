-- A queued job's place in its tenant's line as a function, so that a status read
-- (job_status_for_tenant) asks for it only for a queued job. Written inline, as a scalar
-- subquery in a CASE, the count is a subplan, and PostgreSQL initialises every node of a plan
-- at its start, taken or not: a finished or running job's status read paid ~15 us of backend
-- CPU for an index scan it never ran (80-97 against 67-77 us for the view alone, 2026-12-03,
-- bench/notes.md). A PL/pgSQL function is planned inside it, once per session, and runs only
-- when called. job_queue_position reads the same function: one definition of the count.
-- Claimable queued jobs of the tenant ahead of (priority, run_at, id) in claim order, plus
-- one; at most `counted` of them are counted (the scan is bounded: a job deep in a queue).
CREATE FUNCTION jobgate_queue_position(p_tenant_id text, p_priority integer,
                                       p_run_at timestamptz, p_id text, p_now timestamptz,
                                       p_counted integer)
RETURNS integer LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT count(*)::integer + 1
              FROM (SELECT 1
                      FROM jobs AS a
                     WHERE a.state = 'queued' AND a.tenant_id = p_tenant_id
                       AND a.run_at <= p_now
                       AND (a.priority, a.run_at, a.id) < (p_priority, p_run_at, p_id)
                     LIMIT p_counted) AS ahead);
END;
$$;
