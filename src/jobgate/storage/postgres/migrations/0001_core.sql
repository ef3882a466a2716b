-- The durable core: tenants, keys, jobs, their event log, idempotency keys, the outbox and the
-- usage ledger, plus the trigger that turns job changes into LISTEN/NOTIFY wake-ups.

CREATE TABLE tenants (
    id             text PRIMARY KEY,
    name           text NOT NULL UNIQUE,
    webhook_secret text NOT NULL,           -- signs per-job webhook URLs (whsec_...)
    created_at     timestamptz NOT NULL
);

CREATE TABLE api_keys (
    id         text PRIMARY KEY,
    tenant_id  text NOT NULL REFERENCES tenants (id),
    key_hash   text NOT NULL UNIQUE,        -- SHA-256 of the key; the key itself is never stored
    key_prefix text NOT NULL,               -- the first characters, to recognise a key in lists
    created_at timestamptz NOT NULL,
    revoked_at timestamptz
);

CREATE TABLE jobs (
    id                  text PRIMARY KEY,
    tenant_id           text NOT NULL REFERENCES tenants (id),
    state               text NOT NULL CHECK (state IN
                            ('queued', 'running', 'succeeded', 'failed', 'cancelled', 'expired')),
    api                 text NOT NULL DEFAULT 'jobs',       -- jobs | responses
    provider            text NOT NULL,
    endpoint            text NOT NULL,
    model               text,
    request             jsonb,                              -- NULL once purged
    metadata            jsonb NOT NULL DEFAULT '{}',
    webhook             jsonb,                              -- {"url", "event_types"} or NULL
    result              jsonb,
    error               jsonb,
    usage               jsonb,
    priority            integer NOT NULL DEFAULT 5,         -- 0 runs first
    attempt             integer NOT NULL DEFAULT 0,         -- attempts counted against max
    max_attempts        integer NOT NULL DEFAULT 3,
    run_count           integer NOT NULL DEFAULT 0,         -- every claim, counted or not
    lost_count          integer NOT NULL DEFAULT 0,         -- leases that expired under a worker
    series              integer NOT NULL DEFAULT 0,         -- bumped by each operator redrive
    run_at              timestamptz NOT NULL,               -- not claimable before this
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL,
    started_at          timestamptz,
    completed_at        timestamptz,
    cancel_requested_at timestamptz,
    expires_at          timestamptz,                        -- start deadline
    execution_timeout_s double precision,
    deadline_at         timestamptz,                        -- execution deadline
    lease_owner         text,
    lease_token         text,
    lease_expires_at    timestamptz,
    phase               text,
    provider_job_id     text,
    creation_outcome    text,
    cancel_outcome      text,
    reconcile_at        timestamptz,
    dead_lettered       boolean NOT NULL DEFAULT false,
    purged_at           timestamptz,
    event_seq           integer NOT NULL DEFAULT 0,         -- seq of the latest job_events row
    transition_actor    text,                               -- who made the latest transition
    transition_reason   text                                -- and why (copied into job_events)
);
CREATE INDEX jobs_claimable ON jobs (priority, run_at, id) WHERE state = 'queued';
CREATE INDEX jobs_lease_expiry ON jobs (lease_expires_at) WHERE state = 'running';
CREATE INDEX jobs_start_deadline ON jobs (expires_at)
    WHERE state = 'queued' AND expires_at IS NOT NULL;
CREATE INDEX jobs_by_tenant ON jobs (tenant_id, created_at, id);
CREATE INDEX jobs_dead_lettered ON jobs (tenant_id, created_at, id) WHERE dead_lettered;

-- Append-only: the job row says where a job is now, this log says what happened.
CREATE TABLE job_events (
    job_id     text NOT NULL,
    seq        integer NOT NULL,
    from_state text,
    to_state   text NOT NULL,
    actor      text NOT NULL,
    reason     text,
    applied    boolean NOT NULL DEFAULT true,  -- false: a late or duplicate event, not applied
    created_at timestamptz NOT NULL,
    PRIMARY KEY (job_id, seq)
);
CREATE FUNCTION jobgate_refuse_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only', TG_TABLE_NAME;
END;
$$;
CREATE TRIGGER job_events_append_only BEFORE UPDATE ON job_events
    FOR EACH ROW EXECUTE FUNCTION jobgate_refuse_update();

CREATE TABLE idempotency_keys (
    tenant_id   text NOT NULL,
    route       text NOT NULL,
    key         text NOT NULL,
    body_hash   text NOT NULL,
    job_id      text NOT NULL,
    status_code integer NOT NULL,
    created_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, route, key)
);
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);

CREATE TABLE webhook_endpoints (
    id                         text PRIMARY KEY,
    tenant_id                  text NOT NULL REFERENCES tenants (id),
    url                        text NOT NULL,
    description                text NOT NULL DEFAULT '',
    event_types                jsonb NOT NULL DEFAULT '[]',  -- empty: every terminal event
    include_result             boolean NOT NULL DEFAULT false,
    disabled                   boolean NOT NULL DEFAULT false,
    disabled_reason            text,
    secret                     text NOT NULL,
    previous_secret            text,
    previous_secret_expires_at timestamptz,
    created_at                 timestamptz NOT NULL,
    updated_at                 timestamptz NOT NULL
);
CREATE INDEX webhook_endpoints_by_tenant ON webhook_endpoints (tenant_id);

-- One row per (job, event type, target, redrive series), written in the transaction of the
-- transition that causes it; the dispatcher leases rows by pushing next_attempt_at forward.
CREATE TABLE outbox (
    id               text PRIMARY KEY,        -- msg_...
    event_id         text NOT NULL,           -- evt_...: the webhook-id, the same on every retry
    tenant_id        text NOT NULL,
    job_id           text NOT NULL,
    event_type       text NOT NULL,
    target           text NOT NULL,           -- a webhook endpoint id, or 'job' (the job's URL)
    endpoint_id      text,
    url              text,                    -- only for target 'job'
    series           integer NOT NULL DEFAULT 0,
    job_status       text NOT NULL,
    created_at       timestamptz NOT NULL,
    state            text NOT NULL DEFAULT 'pending',  -- pending | succeeded | failed
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL,
    lease_token      text,
    last_status_code integer,
    last_error       text,
    completed_at     timestamptz,
    UNIQUE (job_id, event_type, target, series)
);
CREATE INDEX outbox_due ON outbox (next_attempt_at) WHERE state = 'pending';

-- Billing facts, one per (job, kind): a redelivered completion cannot charge twice.
CREATE TABLE usage_ledger (
    job_id        text NOT NULL,
    kind          text NOT NULL,              -- completion | refund
    tenant_id     text NOT NULL,
    provider      text NOT NULL,
    model         text,
    input_tokens  bigint NOT NULL DEFAULT 0,
    output_tokens bigint NOT NULL DEFAULT 0,
    created_at    timestamptz NOT NULL,
    PRIMARY KEY (job_id, kind)
);
CREATE INDEX usage_ledger_by_tenant ON usage_ledger (tenant_id, created_at);

-- The event type a job entering `state` emits (mirrors jobgate.domain.events), and the stable
-- id of that event (mirrors jobgate.ids.event_id).
CREATE FUNCTION jobgate_event_type(api text, state text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN state = 'queued' THEN NULL
        WHEN api = 'responses' THEN CASE state
            WHEN 'running' THEN 'response.in_progress'
            WHEN 'succeeded' THEN 'response.completed'
            WHEN 'failed' THEN 'response.failed'
            ELSE 'response.cancelled'
        END
        ELSE 'job.' || state
    END
$$;

CREATE FUNCTION jobgate_event_id(job_id text, event_type text, series integer) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT 'evt_' || left(encode(sha256(convert_to(job_id || ':' || event_type || ':' || series,
                                                   'UTF8')), 'hex'), 24)
$$;

-- The transition log and the outbox are written by the database itself, in the statement that
-- moves a job: no code path can change a job's state without its event and its webhooks.
-- Every statement that changes `state` or `cancel_requested_at` bumps `event_seq` and sets
-- `transition_actor` / `transition_reason`. Statement-level triggers see a whole batch at once.
--
-- Wake-ups go out on one channel, `jobgate`, payloads `kind:ids`:
--   q:        new claimable work          j:id,id  jobs that changed (long polls)
--   c:id,id   cancel requested (workers)   o:       new outbox rows (dispatcher)
-- Ids are chunked so that no payload exceeds NOTIFY's 8000-byte limit.
CREATE FUNCTION jobgate_jobs_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_events (job_id, seq, from_state, to_state, actor, reason, applied, created_at)
    SELECT id, event_seq, NULL, state, transition_actor, transition_reason, true, created_at
      FROM new_rows;
    IF EXISTS (SELECT 1 FROM new_rows WHERE state = 'queued') THEN
        PERFORM pg_notify('jobgate', 'q:');
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER jobs_after_insert AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION jobgate_jobs_after_insert();

CREATE FUNCTION jobgate_jobs_after_update() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    chunk text;
BEGIN
    INSERT INTO job_events (job_id, seq, from_state, to_state, actor, reason, applied, created_at)
    SELECT n.id, n.event_seq, o.state, n.state, n.transition_actor, n.transition_reason, true,
           n.updated_at
      FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
     WHERE n.state IS DISTINCT FROM o.state
        OR n.cancel_requested_at IS DISTINCT FROM o.cancel_requested_at;

    -- One outbox row per target: the tenant's endpoints whose filter admits the event (an
    -- empty filter admits every event except the opt-in ones), then the job's own URL.
    WITH moved AS (
        SELECT n.*, jobgate_event_type(n.api, n.state) AS event_type
          FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
         WHERE n.state IS DISTINCT FROM o.state
    )
    INSERT INTO outbox (id, event_id, tenant_id, job_id, event_type, target, endpoint_id, url,
                        series, job_status, created_at, next_attempt_at)
    SELECT 'msg_' || replace(gen_random_uuid()::text, '-', ''),
           jobgate_event_id(m.id, m.event_type, m.series),
           m.tenant_id, m.id, m.event_type, e.id, e.id, NULL,
           m.series, m.state, m.updated_at, m.updated_at
      FROM moved AS m
      JOIN webhook_endpoints AS e ON e.tenant_id = m.tenant_id AND NOT e.disabled
     WHERE m.event_type IS NOT NULL
       AND (e.event_types ? m.event_type
            OR (jsonb_array_length(e.event_types) = 0
                AND m.event_type NOT IN ('job.running', 'response.in_progress')))
    UNION ALL
    SELECT 'msg_' || replace(gen_random_uuid()::text, '-', ''),
           jobgate_event_id(m.id, m.event_type, m.series),
           m.tenant_id, m.id, m.event_type, 'job', NULL, m.webhook ->> 'url',
           m.series, m.state, m.updated_at, m.updated_at
      FROM moved AS m
     WHERE m.event_type IS NOT NULL
       AND m.webhook IS NOT NULL
       AND (coalesce(m.webhook -> 'event_types', '[]'::jsonb) ? m.event_type
            OR (jsonb_array_length(coalesce(m.webhook -> 'event_types', '[]'::jsonb)) = 0
                AND m.event_type NOT IN ('job.running', 'response.in_progress')))
    ON CONFLICT (job_id, event_type, target, series) DO NOTHING;

    FOR chunk IN
        SELECT string_agg(changed.id, ',')
          FROM (SELECT n.id, (row_number() OVER ()) / 200 AS part
                  FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
                 WHERE n.state IS DISTINCT FROM o.state
                    OR n.cancel_requested_at IS DISTINCT FROM o.cancel_requested_at) AS changed
         GROUP BY changed.part
    LOOP
        PERFORM pg_notify('jobgate', 'j:' || chunk);
    END LOOP;
    FOR chunk IN
        SELECT string_agg(asked.id, ',')
          FROM (SELECT n.id, (row_number() OVER ()) / 200 AS part
                  FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
                 WHERE n.state = 'running' AND o.cancel_requested_at IS NULL
                   AND n.cancel_requested_at IS NOT NULL) AS asked
         GROUP BY asked.part
    LOOP
        PERFORM pg_notify('jobgate', 'c:' || chunk);
    END LOOP;
    IF EXISTS (SELECT 1 FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
                WHERE n.state = 'queued' AND o.state <> 'queued') THEN
        PERFORM pg_notify('jobgate', 'q:');
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER jobs_after_update AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION jobgate_jobs_after_update();

CREATE FUNCTION jobgate_outbox_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM new_rows) THEN
        PERFORM pg_notify('jobgate', 'o:');
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER outbox_after_insert AFTER INSERT ON outbox
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION jobgate_outbox_after_insert();
