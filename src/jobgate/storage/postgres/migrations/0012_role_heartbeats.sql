-- Which roles are alive: each long-running role process (e.g. the reconciler) upserts its row
-- every few seconds, so an API or a worker can tell that nothing settles background jobs.
CREATE TABLE role_heartbeats (
    role text NOT NULL,
    instance text NOT NULL,
    seen_at timestamptz NOT NULL,
    PRIMARY KEY (role, instance)
);
