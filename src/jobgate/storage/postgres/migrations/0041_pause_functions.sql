-- The pause rule as functions, so that a status read learns whether a pause holds a queued job
-- in its one statement (job_status_for_tenant), as it learns its place in line (0029): a call
-- in a CASE runs only for a queued job, where a subquery would be a subplan that every read
-- initialises. jobgate_pause_covers is THE rule (the `pause_covers` fragment of every claim,
-- the relay and the wait queries calls it): a scalar SQL function without FROM, so the planner
-- inlines it and a claim's plan is what the expression written out would give.
CREATE FUNCTION jobgate_pause_covers(p_provider text, p_model text, p_tenant_id text,
                                     j_provider text, j_model text, j_tenant_id text)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (p_provider IS NULL OR p_provider = j_provider)
       AND (p_model IS NULL OR p_model = j_model)
       AND (p_tenant_id IS NULL OR p_tenant_id = j_tenant_id)
$$;

-- The oldest pause covering a job of (provider, model, tenant): {"id", "reason"}, or NULL.
CREATE FUNCTION jobgate_covering_pause(j_provider text, j_model text, j_tenant_id text)
RETURNS jsonb LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT jsonb_build_object('id', p.id, 'reason', p.reason)
              FROM pauses AS p
             WHERE jobgate_pause_covers(p.provider, p.model, p.tenant_id,
                                        j_provider, j_model, j_tenant_id)
             ORDER BY p.created_at, p.id
             LIMIT 1);
END;
$$;
