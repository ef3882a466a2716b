-- Live output streaming: the output deltas of a running job, appended in small batches by the
-- lease holder (one row per batch, never one per token) and read by any API process.
-- `seq` numbers a job's chunks from 1 across every attempt; `generation` is the job's
-- run_count when the chunk was written, so a reclaimed attempt's output is told apart from
-- the one it replaces. Rows go with their job (purge, retention): no foreign key, like
-- job_events. Each append sends `s:<job id>` on the jobgate channel (see queries_streams.sql).

CREATE TABLE job_output_chunks (
    job_id     text NOT NULL,
    seq        integer NOT NULL,
    generation integer NOT NULL,
    text       text NOT NULL,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (job_id, seq)
);

-- The output is the result's: purging a job (on request, or past retention) drops its log,
-- and so does deleting the job, whichever code path does it. The update trigger fires only
-- for statements that set purged_at (never the hot paths: claim, heartbeat, finish).
CREATE FUNCTION jobgate_jobs_purge_output() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM job_output_chunks WHERE job_id = new.id;
    RETURN NULL;
END;
$$;

CREATE TRIGGER jobs_purge_output AFTER UPDATE OF purged_at ON jobs
FOR EACH ROW WHEN (old.purged_at IS NULL AND new.purged_at IS NOT NULL)
EXECUTE FUNCTION jobgate_jobs_purge_output();

CREATE FUNCTION jobgate_jobs_delete_output() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM job_output_chunks AS c USING old_rows AS o WHERE c.job_id = o.id;
    RETURN NULL;
END;
$$;

CREATE TRIGGER jobs_delete_output AFTER DELETE ON jobs
REFERENCING OLD TABLE AS old_rows
FOR EACH STATEMENT EXECUTE FUNCTION jobgate_jobs_delete_output();
