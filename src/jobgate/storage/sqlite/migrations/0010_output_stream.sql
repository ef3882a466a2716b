-- Live output streaming: the output deltas of a running job, appended in small batches by the
-- lease holder (one row per batch, never one per token) and read by any API process.
-- `seq` numbers a job's chunks from 1 across every attempt; `generation` is the job's
-- run_count when the chunk was written, so a reclaimed attempt's output is told apart from
-- the one it replaces. Rows go with their job (purge, retention): no foreign key, like
-- job_events, so that a rebuild of `jobs` never cascades into the log.

CREATE TABLE job_output_chunks (
    job_id     TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    generation INTEGER NOT NULL,
    text       TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (job_id, seq)
) WITHOUT ROWID;

-- The output is the result's: purging a job (on request, or past retention) drops its log,
-- and so does deleting the job, whichever code path does it.
CREATE TRIGGER jobs_purge_output AFTER UPDATE OF purged_at ON jobs
WHEN old.purged_at IS NULL AND new.purged_at IS NOT NULL
BEGIN
    DELETE FROM job_output_chunks WHERE job_id = new.id;
END;

CREATE TRIGGER jobs_delete_output AFTER DELETE ON jobs
BEGIN
    DELETE FROM job_output_chunks WHERE job_id = old.id;
END;
