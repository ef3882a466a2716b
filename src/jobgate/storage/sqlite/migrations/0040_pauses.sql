-- Pauses: an operator holds back the claims of a scope (a provider, a model, a tenant, or any
-- of them together; none: every claim) until the pause is deleted. Claims read this table
-- themselves, so a pause applies to every worker process at once and survives restarts.
CREATE TABLE pauses (
    id         TEXT PRIMARY KEY,
    provider   TEXT,
    model      TEXT,
    tenant_id  TEXT REFERENCES tenants (id) ON DELETE CASCADE,
    reason     TEXT,
    created_by TEXT NOT NULL,
    created_at REAL NOT NULL
);
