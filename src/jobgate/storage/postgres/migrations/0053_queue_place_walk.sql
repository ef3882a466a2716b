-- A queued job's place in its tenant's line, walked backward from the job: at most `walked`
-- entries of jobs_claimable, whatever the backlog. The count it replaces (0029) walked
-- forward from the head of the tenant's line, and a row comparison bounds a btree scan on its
-- first column only (priority): the job at the head of a line of 1,000,000 at one priority
-- walked all of them to find none ahead (~50 ms; status reads fell from ~1,300/s to ~370/s at
-- 25,000 queued, issue 45). Backward, the comparison places the scan's start and the LIMIT
-- ends it: an index-only scan of at most `walked` entries.
-- The answer is signed: the place (1 + the claimable jobs among those walked) when the walk
-- reached the head of the line (exact), its negation when it stopped at `walked` entries (a
-- floor: at least that place). Jobs ahead whose run_at is to come are walked, not counted.
DROP FUNCTION jobgate_queue_position(text, integer, timestamptz, text, timestamptz, integer);
CREATE FUNCTION jobgate_queue_place(p_tenant_id text, p_priority integer,
                                    p_run_at timestamptz, p_id text, p_now timestamptz,
                                    p_walked integer)
RETURNS integer LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT CASE WHEN count(*) < p_walked THEN 1 ELSE -1 END
                   * (count(*) FILTER (WHERE w.run_at <= p_now)::integer + 1)
              FROM (SELECT a.run_at
                      FROM jobs AS a
                     WHERE a.state = 'queued' AND a.tenant_id = p_tenant_id
                       AND (a.priority, a.run_at, a.id) < (p_priority, p_run_at, p_id)
                     ORDER BY a.priority DESC, a.run_at DESC, a.id DESC
                     LIMIT p_walked) AS w);
END;
$$;
