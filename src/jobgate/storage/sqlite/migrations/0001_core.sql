-- The durable core: tenants, keys, jobs, their event log, idempotency keys, the outbox and the
-- usage ledger. Times are REAL Unix seconds; JSON columns are TEXT.

CREATE TABLE tenants (
    id             TEXT PRIMARY KEY,
    name           TEXT NOT NULL UNIQUE,
    webhook_secret TEXT NOT NULL,           -- signs per-job webhook URLs (whsec_...)
    created_at     REAL NOT NULL
);

CREATE TABLE api_keys (
    id         TEXT PRIMARY KEY,
    tenant_id  TEXT NOT NULL REFERENCES tenants (id),
    key_hash   TEXT NOT NULL UNIQUE,        -- SHA-256 of the key; the key itself is never stored
    key_prefix TEXT NOT NULL,               -- the first characters, to recognise a key in lists
    created_at REAL NOT NULL,
    revoked_at REAL
);

CREATE TABLE jobs (
    id                  TEXT PRIMARY KEY,
    tenant_id           TEXT NOT NULL REFERENCES tenants (id),
    state               TEXT NOT NULL CHECK (state IN
                            ('queued', 'running', 'succeeded', 'failed', 'cancelled', 'expired')),
    api                 TEXT NOT NULL DEFAULT 'jobs',       -- jobs | responses
    provider            TEXT NOT NULL,
    endpoint            TEXT NOT NULL,
    model               TEXT,
    request             TEXT,                               -- NULL once purged
    metadata            TEXT NOT NULL DEFAULT '{}',
    webhook             TEXT,                               -- {"url", "event_types"} or NULL
    result              TEXT,
    error               TEXT,
    usage               TEXT,
    priority            INTEGER NOT NULL DEFAULT 5,         -- 0 runs first
    attempt             INTEGER NOT NULL DEFAULT 0,         -- attempts counted against max
    max_attempts        INTEGER NOT NULL DEFAULT 3,
    run_count           INTEGER NOT NULL DEFAULT 0,         -- every claim, counted or not
    lost_count          INTEGER NOT NULL DEFAULT 0,         -- leases that expired under a worker
    series              INTEGER NOT NULL DEFAULT 0,         -- bumped by each operator redrive
    run_at              REAL NOT NULL,                      -- not claimable before this
    created_at          REAL NOT NULL,
    updated_at          REAL NOT NULL,
    started_at          REAL,
    completed_at        REAL,
    cancel_requested_at REAL,
    expires_at          REAL,                               -- start deadline
    execution_timeout_s REAL,
    deadline_at         REAL,                               -- execution deadline
    lease_owner         TEXT,
    lease_token         TEXT,
    lease_expires_at    REAL,
    phase               TEXT,
    provider_job_id     TEXT,
    creation_outcome    TEXT,
    cancel_outcome      TEXT,
    reconcile_at        REAL,
    dead_lettered       INTEGER NOT NULL DEFAULT 0,
    purged_at           REAL,
    event_seq           INTEGER NOT NULL DEFAULT 0,         -- seq of the latest job_events row
    transition_actor    TEXT,                               -- who made the latest transition
    transition_reason   TEXT                                -- and why (copied into job_events)
);
CREATE INDEX jobs_claimable ON jobs (priority, run_at, id) WHERE state = 'queued';
CREATE INDEX jobs_lease_expiry ON jobs (lease_expires_at) WHERE state = 'running';
CREATE INDEX jobs_start_deadline ON jobs (expires_at)
    WHERE state = 'queued' AND expires_at IS NOT NULL;
CREATE INDEX jobs_by_tenant ON jobs (tenant_id, created_at, id);
CREATE INDEX jobs_dead_lettered ON jobs (tenant_id, created_at, id) WHERE dead_lettered = 1;

-- Append-only: the job row says where a job is now, this log says what happened.
CREATE TABLE job_events (
    job_id     TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    from_state TEXT,
    to_state   TEXT NOT NULL,
    actor      TEXT NOT NULL,
    reason     TEXT,
    applied    INTEGER NOT NULL DEFAULT 1,   -- 0: a late or duplicate event, recorded not applied
    created_at REAL NOT NULL,
    PRIMARY KEY (job_id, seq)
) WITHOUT ROWID;
CREATE TRIGGER job_events_append_only BEFORE UPDATE ON job_events
BEGIN
    SELECT RAISE(ABORT, 'job_events is append-only');
END;

CREATE TABLE idempotency_keys (
    tenant_id   TEXT NOT NULL,
    route       TEXT NOT NULL,
    key         TEXT NOT NULL,
    body_hash   TEXT NOT NULL,
    job_id      TEXT NOT NULL,
    status_code INTEGER NOT NULL,
    created_at  REAL NOT NULL,
    expires_at  REAL NOT NULL,
    PRIMARY KEY (tenant_id, route, key)
) WITHOUT ROWID;
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);

CREATE TABLE webhook_endpoints (
    id                         TEXT PRIMARY KEY,
    tenant_id                  TEXT NOT NULL REFERENCES tenants (id),
    url                        TEXT NOT NULL,
    description                TEXT NOT NULL DEFAULT '',
    event_types                TEXT NOT NULL DEFAULT '[]',  -- empty: every terminal event
    include_result             INTEGER NOT NULL DEFAULT 0,
    disabled                   INTEGER NOT NULL DEFAULT 0,
    disabled_reason            TEXT,
    secret                     TEXT NOT NULL,
    previous_secret            TEXT,
    previous_secret_expires_at REAL,
    created_at                 REAL NOT NULL,
    updated_at                 REAL NOT NULL
);
CREATE INDEX webhook_endpoints_by_tenant ON webhook_endpoints (tenant_id);

-- One row per (job, event type, target, redrive series), written in the transaction of the
-- transition that causes it; the dispatcher leases rows by pushing next_attempt_at forward.
CREATE TABLE outbox (
    id               TEXT PRIMARY KEY,        -- msg_...
    event_id         TEXT NOT NULL,           -- evt_...: the webhook-id, the same on every retry
    tenant_id        TEXT NOT NULL,
    job_id           TEXT NOT NULL,
    event_type       TEXT NOT NULL,
    target           TEXT NOT NULL,           -- a webhook endpoint id, or 'job' (the job's URL)
    endpoint_id      TEXT,
    url              TEXT,                    -- only for target 'job'
    series           INTEGER NOT NULL DEFAULT 0,
    job_status       TEXT NOT NULL,
    created_at       REAL NOT NULL,
    state            TEXT NOT NULL DEFAULT 'pending',  -- pending | succeeded | failed
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  REAL NOT NULL,
    lease_token      TEXT,
    last_status_code INTEGER,
    last_error       TEXT,
    completed_at     REAL,
    UNIQUE (job_id, event_type, target, series)
);
CREATE INDEX outbox_due ON outbox (next_attempt_at) WHERE state = 'pending';

-- Billing facts, one per (job, kind): a redelivered completion cannot charge twice.
CREATE TABLE usage_ledger (
    job_id        TEXT NOT NULL,
    kind          TEXT NOT NULL,              -- completion | refund
    tenant_id     TEXT NOT NULL,
    provider      TEXT NOT NULL,
    model         TEXT,
    input_tokens  INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    created_at    REAL NOT NULL,
    PRIMARY KEY (job_id, kind)
) WITHOUT ROWID;
CREATE INDEX usage_ledger_by_tenant ON usage_ledger (tenant_id, created_at);

-- The transition log and the outbox are written by the database itself, in the statement that
-- moves a job: no code path can change a job's state without its event and its webhooks.
-- Every statement that changes `state` or `cancel_requested_at` bumps `event_seq` and sets
-- `transition_actor` / `transition_reason`. jobgate_event_type() and jobgate_event_id() are
-- registered by jobgate on each connection (jobgate.storage.sqlite.store).
CREATE TRIGGER jobs_log_insert AFTER INSERT ON jobs
BEGIN
    INSERT INTO job_events (job_id, seq, from_state, to_state, actor, reason, applied, created_at)
    VALUES (new.id, new.event_seq, NULL, new.state, new.transition_actor, new.transition_reason,
            1, new.created_at);
END;

CREATE TRIGGER jobs_log_update AFTER UPDATE ON jobs
WHEN new.state IS NOT old.state OR new.cancel_requested_at IS NOT old.cancel_requested_at
BEGIN
    INSERT INTO job_events (job_id, seq, from_state, to_state, actor, reason, applied, created_at)
    VALUES (new.id, new.event_seq, old.state, new.state, new.transition_actor,
            new.transition_reason, 1, new.updated_at);

    -- One outbox row per target: the tenant's endpoints whose filter admits the event (an
    -- empty filter admits every event except the opt-in ones), then the job's own URL.
    INSERT INTO outbox (id, event_id, tenant_id, job_id, event_type, target, endpoint_id, url,
                        series, job_status, created_at, next_attempt_at)
    SELECT 'msg_' || lower(hex(randomblob(12))),
           jobgate_event_id(new.id, ev.event_type, new.series),
           new.tenant_id, new.id, ev.event_type, e.id, e.id, NULL,
           new.series, new.state, new.updated_at, new.updated_at
      FROM (SELECT jobgate_event_type(new.api, new.state) AS event_type) AS ev
      JOIN webhook_endpoints AS e ON e.tenant_id = new.tenant_id AND e.disabled = 0
     WHERE new.state IS NOT old.state
       AND ev.event_type IS NOT NULL
       AND (EXISTS (SELECT 1 FROM json_each(e.event_types) WHERE value = ev.event_type)
            OR (json_array_length(e.event_types) = 0
                AND ev.event_type NOT IN ('job.running', 'response.in_progress')))
    UNION ALL
    SELECT 'msg_' || lower(hex(randomblob(12))),
           jobgate_event_id(new.id, ev.event_type, new.series),
           new.tenant_id, new.id, ev.event_type, 'job', NULL, new.webhook ->> '$.url',
           new.series, new.state, new.updated_at, new.updated_at
      FROM (SELECT jobgate_event_type(new.api, new.state) AS event_type) AS ev
     WHERE new.state IS NOT old.state
       AND ev.event_type IS NOT NULL
       AND new.webhook IS NOT NULL
       AND (EXISTS (SELECT 1 FROM json_each(new.webhook, '$.event_types')
                     WHERE value = ev.event_type)
            OR (coalesce(json_array_length(new.webhook, '$.event_types'), 0) = 0
                AND ev.event_type NOT IN ('job.running', 'response.in_progress')))
    ON CONFLICT (job_id, event_type, target, series) DO NOTHING;
END;
