-- Dashboard sign-ins (issue 13): a server-side session per sign-in. The cookie holds a random
-- session id; only its SHA-256 is stored here, never the operator key. Revoking the operator's
-- key or deleting the row ends the session.

CREATE TABLE dashboard_sessions (
    id_hash         text PRIMARY KEY,
    operator_key_id text NOT NULL REFERENCES operator_keys (id) ON DELETE CASCADE,
    created_at      timestamptz NOT NULL,
    expires_at      timestamptz NOT NULL
);
CREATE INDEX dashboard_sessions_expires ON dashboard_sessions (expires_at);
