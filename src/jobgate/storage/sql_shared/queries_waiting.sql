-- Why queued jobs wait (both dialects): what the claim reads about them, read the same way.

-- fragment: holds_slot
-- Whether job `r` holds a worker slot, as the claims count them (background jobs at a
-- provider hold none). SQLite's counts over it read jobs_running (INDEXED BY: left to itself
-- the planner may walk an index of every job of the tenant).
(r.state = 'running' AND r.lease_token IS NOT NULL)
