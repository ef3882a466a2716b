-- Migration 0029 gives PostgreSQL a function for a queued job's place in line (a status read
-- then initialises no subplan for a job that is not queued); SQLite plans its inline count
-- only when it runs it.
SELECT 1;
