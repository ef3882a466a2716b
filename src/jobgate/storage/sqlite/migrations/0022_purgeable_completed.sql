-- jobs_purgeable holds completed jobs only: the purge looks for `completed_at < cut-off`, which
-- no queued or running job matches, so each insert and claim no longer writes an entry here.

DROP INDEX jobs_purgeable;
CREATE INDEX jobs_purgeable ON jobs (completed_at)
    WHERE purged_at IS NULL AND completed_at IS NOT NULL;
