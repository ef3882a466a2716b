-- History partitioned by day. The event log (job_events), the output log (job_output_chunks),
-- the outbox and the delivery attempts (webhook_attempts) become tables partitioned by RANGE on
-- a new column, job_created_at: the creation time of the job the row belongs to (of the batch,
-- for a batch's webhook rows), one UTC day per partition (`<table>_pYYYYMMDD`), plus a DEFAULT
-- partition (`<table>_default`) that takes any row no day partition covers, so an insert never
-- fails for want of one.
--
-- Why the job's creation time and not the row's own: every row of a job lands in one partition,
-- so
-- - a read by job (its events, chunks, deliveries) names that partition exactly and probes one
--   index (jobgate_history_key gives the key; a job that is gone gives none and reads nothing);
-- - the keys stay what they were: a key that includes job_created_at is as unique as the key
--   without it, since a job (or batch) has one creation time. The outbox's
--   (job_id, event_type, target, series) still deduplicates the trigger's fan-out;
-- - a day's partition holds only jobs created that day: it may be dropped once none of them is
--   left (jobs_by_creation says so with one probe), the few still kept moving to DEFAULT.
--
-- jobgate_history_partition_ensure creates a day's partitions (the reaper keeps some days
-- ahead), jobgate_history_partition_drop detaches and drops a day once retention allows; both
-- are safe in several processes at once.
--
-- The conversion copies every row in this one transaction: day partitions for the days of the
-- last 35 that hold rows, and today's and the next three; older rows go to DEFAULT, which the
-- row-wise path empties as their jobs are deleted.

-- The partition key of a job's (or a batch's) history: its creation time; NULL when neither
-- exists any more.
CREATE FUNCTION jobgate_history_key(p_id text) RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT j.created_at FROM jobs AS j WHERE j.id = p_id),
                    (SELECT b.created_at FROM batches AS b WHERE b.id = p_id))
$$;

CREATE FUNCTION jobgate_history_tables() RETURNS text[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT ARRAY['job_events', 'job_output_chunks', 'outbox', 'webhook_attempts']
$$;

-- Create the partition of `p_parent` for the UTC day `p_day` unless it exists: true if made,
-- false if it was there, NULL if a lock was not granted within `p_lock_timeout` (nothing
-- changed: the caller tries again later). Rows already in DEFAULT for that day move into it.
-- Serialised per table by an advisory lock held to commit, so concurrent callers wait and then
-- find it made. Attaching takes SHARE UPDATE EXCLUSIVE on the table (reads and writes go on)
-- and ACCESS EXCLUSIVE on DEFAULT for its scan.
CREATE FUNCTION jobgate_history_partition_ensure(p_parent text, p_day date,
                                                 p_lock_timeout text DEFAULT '5s')
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    part text := p_parent || '_p' || to_char(p_day, 'YYYYMMDD');
    lo timestamptz := p_day::timestamp AT TIME ZONE 'UTC';
    hi timestamptz := (p_day + 1)::timestamp AT TIME ZONE 'UTC';
BEGIN
    IF NOT p_parent = ANY (jobgate_history_tables()) THEN
        RAISE EXCEPTION 'not a history table: %', p_parent;
    END IF;
    PERFORM pg_advisory_xact_lock(7146088, hashtext(p_parent));
    IF to_regclass(part) IS NOT NULL THEN
        RETURN false;
    END IF;
    PERFORM set_config('lock_timeout', p_lock_timeout, true);
    BEGIN
        EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
                       part, p_parent);
        EXECUTE format('WITH moved AS (DELETE FROM %I WHERE job_created_at >= %L'
                       ' AND job_created_at < %L RETURNING *) INSERT INTO %I SELECT * FROM moved',
                       p_parent || '_default', lo, hi, part);
        EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                       p_parent, part, lo, hi);
    EXCEPTION WHEN lock_not_available THEN
        RETURN NULL;
    END;
    RETURN true;
END;
$$;

-- Drop the partition of `p_parent` for the UTC day `p_day`: NULL when there is none, -1 when
-- more than `p_max_kept` of its rows' owners must stay (jobs created that day that still exist,
-- and for the outbox pending deliveries too: the caller tries again later), -2 when a lock was
-- not granted within `p_lock_timeout` (nothing changed), else how many rows
-- were kept by moving them to DEFAULT before the drop. The caller decides that the day is past
-- retention. The kept jobs are held FOR KEY SHARE until commit, so retention (which skips
-- locked jobs) cannot delete one whose rows are being moved. DETACH takes ACCESS EXCLUSIVE on
-- the table (CONCURRENTLY is refused beside a DEFAULT partition), waited for at most
-- `p_lock_timeout`.
CREATE FUNCTION jobgate_history_partition_drop(p_parent text, p_day date, p_max_kept integer,
                                               p_lock_timeout text) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    part text := p_parent || '_p' || to_char(p_day, 'YYYYMMDD');
    lo timestamptz := p_day::timestamp AT TIME ZONE 'UTC';
    hi timestamptz := (p_day + 1)::timestamp AT TIME ZONE 'UTC';
    kept integer;
    pending integer := 0;
    columns text;
    moved integer;
BEGIN
    IF NOT p_parent = ANY (jobgate_history_tables()) THEN
        RAISE EXCEPTION 'not a history table: %', p_parent;
    END IF;
    IF to_regclass(part) IS NULL THEN
        RETURN NULL;
    END IF;
    SELECT count(*) INTO kept
      FROM (SELECT 1 FROM jobs AS j WHERE j.created_at >= lo AND j.created_at < hi
             LIMIT p_max_kept + 1) AS k;
    IF p_parent = 'outbox' THEN
        EXECUTE format('SELECT count(*) FROM (SELECT 1 FROM %I WHERE state = ''pending'''
                       ' LIMIT %s) AS p', part, p_max_kept + 1) INTO pending;
    END IF;
    IF kept + pending > p_max_kept THEN
        RETURN -1;
    END IF;
    SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO columns
      FROM pg_attribute AS a
     WHERE a.attrelid = p_parent::regclass AND a.attnum > 0 AND NOT a.attisdropped;
    PERFORM set_config('lock_timeout', p_lock_timeout, true);
    BEGIN
        EXECUTE format('ALTER TABLE %I DETACH PARTITION %I', p_parent, part);
        EXECUTE format('WITH held AS MATERIALIZED (SELECT j.id FROM jobs AS j'
                       ' WHERE j.created_at >= $1 AND j.created_at < $2 FOR KEY SHARE)'
                       ' INSERT INTO %I (%s) SELECT %s FROM %I AS r'
                       ' WHERE r.job_id IN (SELECT held.id FROM held)%s',
                       p_parent, columns, columns, part,
                       CASE WHEN p_parent = 'outbox' THEN ' OR r.state = ''pending'''
                            ELSE '' END)
            USING lo, hi;
        GET DIAGNOSTICS moved = ROW_COUNT;
        EXECUTE format('DROP TABLE %I', part);
    EXCEPTION WHEN lock_not_available THEN
        RETURN -2;
    END;
    RETURN moved;
END;
$$;

-- The conversion, table by table: the old table renamed away, its partitioned successor
-- created under its name with its DEFAULT and day partitions, every row copied with its job's
-- (or batch's) creation time (a row whose owner is gone keeps its own time), the old one
-- dropped, then the keys, indexes and triggers as they were (the keys with job_created_at).
DROP VIEW job_event_log;

ALTER TABLE job_events RENAME TO job_events_unpartitioned;
ALTER TABLE job_output_chunks RENAME TO job_output_chunks_unpartitioned;
ALTER TABLE outbox RENAME TO outbox_unpartitioned;
ALTER TABLE webhook_attempts RENAME TO webhook_attempts_unpartitioned;

CREATE TABLE job_events (
    job_id         text NOT NULL,
    seq            integer NOT NULL,
    from_state     text,
    to_state       text NOT NULL,
    actor          text NOT NULL,
    reason         text,
    applied        boolean NOT NULL DEFAULT true,
    created_at     timestamptz NOT NULL,
    job_created_at timestamptz NOT NULL
) PARTITION BY RANGE (job_created_at);

CREATE TABLE job_output_chunks (
    job_id          text NOT NULL,
    seq             integer NOT NULL,
    generation      integer NOT NULL,
    text            text NOT NULL,
    created_at      timestamptz NOT NULL,
    continued_chars integer NOT NULL DEFAULT 0 CHECK (continued_chars >= 0),
    job_created_at  timestamptz NOT NULL
) PARTITION BY RANGE (job_created_at);

CREATE TABLE outbox (
    id               text NOT NULL,
    event_id         text NOT NULL,
    tenant_id        text NOT NULL,
    job_id           text NOT NULL,
    event_type       text NOT NULL,
    target           text NOT NULL,
    endpoint_id      text,
    url              text,
    series           integer NOT NULL DEFAULT 0,
    job_status       text NOT NULL,
    created_at       timestamptz NOT NULL,
    state            text NOT NULL DEFAULT 'pending',
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL,
    lease_token      text,
    last_status_code integer,
    last_error       text,
    completed_at     timestamptz,
    job_created_at   timestamptz NOT NULL
) PARTITION BY RANGE (job_created_at);

CREATE TABLE webhook_attempts (
    id             text NOT NULL,
    outbox_id      text NOT NULL,
    event_id       text NOT NULL,
    tenant_id      text NOT NULL,
    job_id         text NOT NULL,
    target         text NOT NULL,
    attempt        integer NOT NULL,
    status_code    integer,
    latency_ms     integer NOT NULL,
    error          text,
    succeeded      boolean NOT NULL,
    created_at     timestamptz NOT NULL,
    job_created_at timestamptz NOT NULL
) PARTITION BY RANGE (job_created_at);

DO $$
DECLARE
    parent text;
    day date;
    today date := (now() AT TIME ZONE 'UTC')::date;
BEGIN
    FOREACH parent IN ARRAY jobgate_history_tables() LOOP
        EXECUTE format('CREATE TABLE %I PARTITION OF %I DEFAULT', parent || '_default', parent);
        FOR day IN
            EXECUTE format(
                'SELECT DISTINCT (coalesce(j.created_at, b.created_at, r.created_at)'
                '                 AT TIME ZONE ''UTC'')::date'
                '  FROM %I AS r'
                '  LEFT JOIN jobs AS j ON j.id = r.job_id'
                '  LEFT JOIN batches AS b ON b.id = r.job_id AND j.id IS NULL', 
                parent || '_unpartitioned')
        LOOP
            IF day >= today - 35 AND day < today THEN
                PERFORM jobgate_history_partition_ensure(parent, day);
            END IF;
        END LOOP;
        FOR day IN SELECT generate_series(today, today + 3, interval '1 day')::date LOOP
            PERFORM jobgate_history_partition_ensure(parent, day);
        END LOOP;
        EXECUTE format(
            'INSERT INTO %I SELECT r.*, coalesce(j.created_at, b.created_at, r.created_at)'
            '  FROM %I AS r'
            '  LEFT JOIN jobs AS j ON j.id = r.job_id'
            '  LEFT JOIN batches AS b ON b.id = r.job_id AND j.id IS NULL',
            parent, parent || '_unpartitioned');
        EXECUTE format('DROP TABLE %I', parent || '_unpartitioned');
    END LOOP;
END;
$$;

ALTER TABLE job_events ADD PRIMARY KEY (job_id, seq, job_created_at);
CREATE INDEX job_events_by_time ON job_events (created_at);
CREATE TRIGGER job_events_append_only BEFORE UPDATE ON job_events
    FOR EACH ROW EXECUTE FUNCTION jobgate_refuse_update();

ALTER TABLE job_output_chunks ADD PRIMARY KEY (job_id, seq, job_created_at);

ALTER TABLE outbox ADD PRIMARY KEY (id, job_created_at);
ALTER TABLE outbox ADD CONSTRAINT outbox_job_id_event_type_target_series_key
    UNIQUE (job_id, event_type, target, series, job_created_at);
CREATE INDEX outbox_due ON outbox (next_attempt_at) WHERE state = 'pending';
CREATE INDEX outbox_by_endpoint ON outbox (endpoint_id, state, created_at)
    WHERE endpoint_id IS NOT NULL;
CREATE INDEX outbox_progress_in_flight ON outbox (job_id, target, series)
    WHERE event_type IN ('job.progress', 'batch.progress')
      AND state = 'pending' AND lease_token IS NOT NULL;
CREATE TRIGGER outbox_after_insert AFTER INSERT ON outbox
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION jobgate_outbox_after_insert();
CREATE TRIGGER outbox_skip_batch_lines BEFORE INSERT ON outbox FOR EACH ROW
    WHEN (NEW.event_type LIKE 'response.%')
    EXECUTE FUNCTION jobgate_outbox_skip_batch_lines();

ALTER TABLE webhook_attempts ADD PRIMARY KEY (id, job_created_at);
CREATE INDEX webhook_attempts_by_job ON webhook_attempts (job_id, created_at, attempt);

-- The log as before (0028), with each entry's partition key; the implied first event's probe
-- names its job's partition.
CREATE VIEW job_event_log AS
SELECT e.job_id, e.seq, e.from_state, e.to_state, e.actor, e.reason, e.applied, e.created_at,
       e.job_created_at
  FROM job_events AS e
UNION ALL
SELECT j.id, 1, NULL::text, 'queued', 'api', 'submitted', true, j.created_at, j.created_at
  FROM jobs AS j
 WHERE NOT EXISTS (SELECT 1 FROM job_events AS first
                    WHERE first.job_id = j.id AND first.seq = 1
                      AND first.job_created_at = j.created_at);

-- The job triggers write job_created_at (restated from 0028 and 0008 with that one change, and
-- the outbox's conflict target with it).
CREATE OR REPLACE FUNCTION jobgate_jobs_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    wanted integer;
    held integer;
    any_queued boolean;
BEGIN
    WITH logged AS (
        INSERT INTO job_events (job_id, seq, from_state, to_state, actor, reason, applied,
                                created_at, job_created_at)
        SELECT n.id, n.event_seq, NULL, n.state, n.transition_actor, n.transition_reason, true,
               n.created_at, n.created_at
          FROM new_rows AS n
         WHERE (n.state, n.event_seq, n.transition_actor, n.transition_reason)
               IS DISTINCT FROM ('queued', 1, 'api', 'submitted')
    )
    SELECT count(*), count(t.id), coalesce(bool_or(w.queued), false)
      INTO wanted, held, any_queued
      FROM (SELECT n.tenant_id, bool_or(n.state = 'queued') AS queued
              FROM new_rows AS n
             GROUP BY n.tenant_id) AS w
      LEFT JOIN LATERAL (SELECT t.id FROM tenants AS t WHERE t.id = w.tenant_id
                         FOR KEY SHARE) AS t ON true;
    IF held < wanted THEN
        RAISE EXCEPTION 'insert or update on table "jobs" names a tenant that does not exist'
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    IF any_queued THEN
        PERFORM pg_notify('jobgate', 'q:');
    END IF;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION jobgate_jobs_after_update() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    chunk text;
BEGIN
    INSERT INTO job_events (job_id, seq, from_state, to_state, actor, reason, applied, created_at,
                            job_created_at)
    SELECT n.id, n.event_seq, o.state, n.state, n.transition_actor, n.transition_reason, true,
           n.updated_at, n.created_at
      FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
     WHERE n.state IS DISTINCT FROM o.state
        OR n.cancel_requested_at IS DISTINCT FROM o.cancel_requested_at;

    -- One outbox row per target: the tenant's endpoints whose filter admits the event (an
    -- empty filter admits every event except the opt-in ones), then the job's own URL. Only
    -- a job with a webhook of its own or a tenant with an enabled endpoint can have targets:
    -- when the statement moved none, the fan-out below would insert nothing, so skip it.
    IF EXISTS (SELECT 1 FROM new_rows AS n WHERE n.webhook IS NOT NULL)
       OR EXISTS (SELECT 1 FROM webhook_endpoints AS e
                   WHERE NOT e.disabled
                     AND e.tenant_id IN (SELECT DISTINCT n.tenant_id FROM new_rows AS n)) THEN
        WITH moved AS (
            SELECT n.*, jobgate_event_type(n.api, n.state, n.result ->> 'status') AS event_type
              FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
             WHERE n.state IS DISTINCT FROM o.state
        )
        INSERT INTO outbox (id, event_id, tenant_id, job_id, event_type, target, endpoint_id, url,
                            series, job_status, created_at, next_attempt_at, job_created_at)
        SELECT 'msg_' || replace(gen_random_uuid()::text, '-', ''),
               jobgate_event_id(m.id, m.event_type, m.series),
               m.tenant_id, m.id, m.event_type, e.id, e.id, NULL,
               m.series, m.state, m.updated_at, m.updated_at, m.created_at
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
               m.series, m.state, m.updated_at, m.updated_at, m.created_at
          FROM moved AS m
         WHERE m.event_type IS NOT NULL
           AND m.webhook IS NOT NULL
           AND (coalesce(m.webhook -> 'event_types', '[]'::jsonb) ? m.event_type
                OR (jsonb_array_length(coalesce(m.webhook -> 'event_types', '[]'::jsonb)) = 0
                    AND m.event_type NOT IN ('job.running', 'response.in_progress')))
        ON CONFLICT (job_id, event_type, target, series, job_created_at) DO NOTHING;
    END IF;

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

-- Purging or deleting a job drops its output from its partition.
CREATE OR REPLACE FUNCTION jobgate_jobs_purge_output() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM job_output_chunks WHERE job_id = new.id AND job_created_at = new.created_at;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION jobgate_jobs_delete_output() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM job_output_chunks AS c USING old_rows AS o
     WHERE c.job_id = o.id AND c.job_created_at = o.created_at;
    RETURN NULL;
END;
$$;
