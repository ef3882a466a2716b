-- The history's day partitions on PostgreSQL (migration 0088): job_events, job_output_chunks,
-- outbox and webhook_attempts, partitioned by RANGE on job_created_at, one UTC day each.

-- name: history_partitions
-- Every day partition of the history tables: its table and its UTC day (from its name,
-- `<table>_pYYYYMMDD`, which jobgate_history_partition_ensure gives it).
SELECT p.relname AS parent, to_date(right(c.relname, 8), 'YYYYMMDD') AS day
  FROM pg_inherits AS i
  JOIN pg_class AS c ON c.oid = i.inhrelid
  JOIN pg_class AS p ON p.oid = i.inhparent
 WHERE p.relname = ANY (jobgate_history_tables())
   AND c.relname = p.relname || '_p' || right(c.relname, 8)
   AND right(c.relname, 8) ~ '^[0-9]{8}$'
 ORDER BY 1, 2

-- name: history_partition_ensure
-- Make one table's partition for one day (true), find it made (false), or give up on a busy
-- lock (NULL).
SELECT jobgate_history_partition_ensure(:parent::text, :day::date, :lock_timeout::text) AS made

-- name: history_partition_drop
-- Drop one table's partition for one day, its kept rows moved to DEFAULT first: how many
-- moved; -1 too many kept, -2 a lock busy, NULL none.
SELECT jobgate_history_partition_drop(:parent::text, :day::date, :max_kept::integer,
                                      :lock_timeout::text) AS moved
