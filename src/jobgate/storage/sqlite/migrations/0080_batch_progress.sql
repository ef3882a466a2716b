-- No-op on SQLite, kept for the version parity of the two dialects: PostgreSQL's 0080 widens
-- the index of progresses in flight to `batch.progress`; SQLite probes the outbox's unique key
-- (job_id, event_type, target, series) per event type, which needs nothing more.

SELECT 1;
