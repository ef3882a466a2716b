-- Which roles are alive: each long-running role process (e.g. the reconciler) upserts its row
-- every few seconds, so an API or a worker can tell that nothing settles background jobs.
CREATE TABLE role_heartbeats (
    role TEXT NOT NULL,
    instance TEXT NOT NULL,
    seen_at REAL NOT NULL,
    PRIMARY KEY (role, instance)
);
