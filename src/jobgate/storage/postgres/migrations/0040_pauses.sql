-- Pauses: an operator holds back the claims of a scope (a provider, a model, a tenant, or any
-- of them together; none: every claim) until the pause is deleted. Claims read this table
-- themselves, so a pause applies to every worker process at once and survives restarts.
CREATE TABLE pauses (
    id         text PRIMARY KEY,
    provider   text,
    model      text,
    tenant_id  text REFERENCES tenants (id) ON DELETE CASCADE,
    reason     text,
    created_by text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
