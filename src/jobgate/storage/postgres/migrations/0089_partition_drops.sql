-- The job update trigger's joins stay hashed (0013's setting, which 0088's restatement of
-- jobgate_jobs_after_update reset: a heartbeat renewing thousands of leases was a nested loop
-- over the transition tables again).
ALTER FUNCTION jobgate_jobs_after_update() SET enable_nestloop = off;

-- Retention drops history by the day (0088's partitions): its row-wise batches delete history
-- from the DEFAULT partitions only (queries_retention.sql), and so does deleting a job's output
-- chunks with it; the rows of a deleted job in its day's partition go when the day is dropped,
-- and no read finds them before (reads by job name its partition through the job, which is
-- gone). A purge still erases a job's output wherever it is (0088).
CREATE OR REPLACE FUNCTION jobgate_jobs_delete_output() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM job_output_chunks_default AS c USING old_rows AS o WHERE c.job_id = o.id;
    RETURN NULL;
END;
$$;

-- The drop of 0088, restated to take its locks in the order that cannot deadlock with
-- retention: the jobs of the day still kept are held FOR KEY SHARE first (a retention batch
-- deleting one of them is waited for, and one that starts later skips them: it takes its jobs
-- FOR UPDATE SKIP LOCKED), and only then is the table locked to detach the partition. Returns
-- NULL when there is no such partition, -1 when more than `p_max_kept` jobs of that day still
-- exist or (outbox) deliveries in it are pending, -2 when a lock was not granted within
-- `p_lock_timeout` (nothing changed), else how many rows were moved to DEFAULT before the drop.
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
