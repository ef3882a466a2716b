-- Live output streaming on PostgreSQL: the output log of running jobs (job_output_chunks).

-- name: job_output_append
-- Append one chunk to the output of the attempt holding this lease and tell every listening
-- process (`s:<job id>`) in the same statement; no row when fenced off (the lease is gone, or
-- the job was purged: its output never outlives the purge).
WITH clock AS (SELECT coalesce(:now::timestamptz, now()) AS now),
appended AS (
    INSERT INTO job_output_chunks (job_id, seq, generation, text, continued_chars, created_at,
                                   job_created_at)
    SELECT j.id,
           coalesce((SELECT max(c.seq) FROM job_output_chunks AS c
                      WHERE c.job_id = j.id AND c.job_created_at = j.created_at), 0) + 1,
           j.run_count, :text::text, :continued_chars::integer, clock.now, j.created_at
      FROM jobs AS j, clock
     WHERE j.id = :job_id AND j.lease_token = :lease_token AND j.state = 'running'
       AND j.purged_at IS NULL
       FOR SHARE OF j  -- wait for a concurrent reclaim and re-check the fence after it
    RETURNING job_id, seq, generation, text, continued_chars, created_at
)
SELECT a.*, pg_notify('jobgate', 's:' || a.job_id) AS notified FROM appended AS a

-- name: job_output_read
-- A job's chunks after a sequence number, in order.
SELECT job_id, seq, generation, text, continued_chars, created_at
  FROM job_output_chunks
 WHERE job_id = :job_id AND job_created_at = (SELECT j.created_at FROM jobs AS j WHERE j.id = :job_id)
   AND seq > :after_seq
 ORDER BY seq
 LIMIT :limit

-- name: job_output_chars
-- How many characters one attempt (generation) of a job has streamed: summed here, not read
-- out chunk by chunk (every status read of a running streaming job asks).
SELECT coalesce(sum(length(text)), 0)::bigint AS chars
  FROM job_output_chunks
 WHERE job_id = :job_id AND job_created_at = (SELECT j.created_at FROM jobs AS j WHERE j.id = :job_id)
   AND generation = :generation
