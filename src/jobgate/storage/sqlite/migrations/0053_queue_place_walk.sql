-- Migration 0053 gives PostgreSQL a backward walk for a queued job's place in line (a
-- function); SQLite's statements walk the same way inline (queue_place fragment).
SELECT 1;
