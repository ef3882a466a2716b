-- A day held back by more than `p_max_kept` jobs is recognised by counting them first, with
-- no lock taken: 0089's drop locked up to `p_max_kept` + 1 of them FOR KEY SHARE before it
-- counted, at every reaper pass, for each table of each day held back (a lock writes each
-- job's page). The jobs that stay are still held before the table is locked, and their
-- number checked again under the lock (one may have been created meanwhile). Otherwise as
-- 0089.
CREATE OR REPLACE FUNCTION jobgate_history_partition_drop(p_parent text, p_day date,
                                                          p_max_kept integer,
                                                          p_lock_timeout text)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    part text := p_parent || '_p' || to_char(p_day, 'YYYYMMDD');
    lo timestamptz := p_day::timestamp AT TIME ZONE 'UTC';
    hi timestamptz := (p_day + 1)::timestamp AT TIME ZONE 'UTC';
    held text[];
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
    IF p_parent = 'outbox' THEN
        EXECUTE format('SELECT count(*) FROM (SELECT 1 FROM %I WHERE state = ''pending'''
                       ' LIMIT %s) AS p', part, p_max_kept + 1) INTO pending;
    END IF;
    SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO columns
      FROM pg_attribute AS a
     WHERE a.attrelid = p_parent::regclass AND a.attnum > 0 AND NOT a.attisdropped;
    -- Counted before any lock: a day held back by many jobs costs a read of an index range
    -- at each pass, not a row lock (a write to each job's page) on each of them.
    SELECT count(*) INTO kept
      FROM (SELECT 1 FROM jobs AS j WHERE j.created_at >= lo AND j.created_at < hi
             LIMIT p_max_kept + 1) AS k;
    IF kept + pending > p_max_kept THEN
        RETURN -1;
    END IF;
    PERFORM set_config('lock_timeout', p_lock_timeout, true);
    BEGIN
        SELECT coalesce(array_agg(k.id), '{}') INTO held
          FROM (SELECT j.id FROM jobs AS j
                 WHERE j.created_at >= lo AND j.created_at < hi
                 LIMIT p_max_kept + 1
                   FOR KEY SHARE) AS k;
        IF cardinality(held) + pending > p_max_kept THEN
            RETURN -1;
        END IF;
        EXECUTE format('ALTER TABLE %I DETACH PARTITION %I', p_parent, part);
        EXECUTE format('INSERT INTO %I (%s) SELECT %s FROM %I AS r'
                       ' WHERE r.job_id = ANY ($1)%s',
                       p_parent, columns, columns, part,
                       CASE WHEN p_parent = 'outbox' THEN ' OR r.state = ''pending'''
                            ELSE '' END)
            USING held;
        GET DIAGNOSTICS moved = ROW_COUNT;
        EXECUTE format('DROP TABLE %I', part);
    EXCEPTION WHEN lock_not_available THEN
        RETURN -2;
    END;
    RETURN moved;
END;
$$;
