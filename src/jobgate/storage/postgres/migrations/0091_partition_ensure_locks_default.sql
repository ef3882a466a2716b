-- Making a day's partition locks DEFAULT before it moves that day's rows out of it. 0088's
-- function moved them, then waited for DEFAULT's lock to attach the partition: a row of that
-- day inserted into DEFAULT meanwhile (its day had no partition yet, so it went there) made
-- the attach fail on DEFAULT's check, and with inserts of that day going on (a day the reaper
-- was too long away to make ahead) every pass could fail the same way. Holding DEFAULT from the
-- start, inserts headed for it wait for the few statements that follow (at most
-- `p_lock_timeout` is waited for the lock itself), and the move sees every row of the day.
-- Otherwise as 0088.
CREATE OR REPLACE FUNCTION jobgate_history_partition_ensure(p_parent text, p_day date,
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
        EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', p_parent || '_default');
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
