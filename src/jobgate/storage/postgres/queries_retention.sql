-- Retention (PostgreSQL): delete finished jobs past the horizon with everything that hangs
-- off them, summing their usage into usage_daily first.

-- name: retention_delete
-- Delete up to :limit terminal jobs past the horizon (oldest completion first; rows another
-- reaper holds are skipped), their events, outbox rows, delivery attempts and usage rows,
-- adding that usage to usage_daily in the same statement (today's too: the budgets read it
-- there), and that of jobs with a concurrency key to usage_daily_keys too. Jobs with a
-- pending delivery or named by an idempotency key live at :now stay.
-- History goes by the day on PostgreSQL (migrations 0088, 0089): this deletes the jobs' rows
-- in the DEFAULT partitions only (rows no day partition covered, and those of jobs a day's drop
-- kept), as the trigger of 0089 does their output chunks; their rows in their day's partition
-- go when history_partition_drop drops that day. The counts are of the rows deleted here (each
-- job's first event counted as its row implies it: job_event_log).
WITH picked AS (
    SELECT j.id, j.concurrency_key, j.created_at
      FROM jobs AS j
     WHERE j.state IN ({{terminal_states}})
       AND j.completed_at < :completed_before::timestamptz
       AND NOT EXISTS (SELECT 1 FROM outbox AS o
                        WHERE o.job_id = j.id AND o.job_created_at = j.created_at
                          AND o.state = 'pending')
       AND NOT EXISTS (SELECT 1 FROM idempotency_keys AS k
                        WHERE k.job_id = j.id AND k.expires_at > :now::timestamptz)
     ORDER BY j.completed_at
     LIMIT :limit
       FOR UPDATE OF j SKIP LOCKED
), usage AS (
    DELETE FROM usage_ledger AS u USING picked WHERE u.job_id = picked.id RETURNING u.*
), rolled AS (
    INSERT INTO usage_daily AS d (tenant_id, day, provider, model, jobs, input_tokens,
                                  output_tokens, cache_read_tokens, cache_write_tokens)
    SELECT tenant_id, (created_at AT TIME ZONE 'UTC')::date, provider, coalesce(model, ''),
           count(*) FILTER (WHERE kind = 'completion'),
           {{usage_signed_tokens}}
      FROM usage AS u
     GROUP BY 1, 2, 3, 4
        {{usage_daily_add}}
    RETURNING 1
), rolled_keys AS (
    -- The usage of jobs with a concurrency key, per key too: the per-key budgets read it.
    INSERT INTO usage_daily_keys AS d (day, tenant_id, concurrency_key, provider, model,
                                       input_tokens, output_tokens, cache_read_tokens,
                                       cache_write_tokens)
    SELECT (u.created_at AT TIME ZONE 'UTC')::date, u.tenant_id, p.concurrency_key, u.provider,
           coalesce(u.model, ''),
           {{usage_signed_tokens}}
      FROM usage AS u
      JOIN picked AS p ON p.id = u.job_id
     WHERE p.concurrency_key IS NOT NULL
     GROUP BY 1, 2, 3, 4, 5
        {{usage_daily_keys_add}}
    RETURNING 1
), events AS (
    DELETE FROM job_events_default AS e USING picked WHERE e.job_id = picked.id RETURNING e.seq
), attempts AS (
    DELETE FROM webhook_attempts_default AS a USING picked WHERE a.job_id = picked.id
    RETURNING 1
), deliveries AS (
    DELETE FROM outbox_default AS o USING picked WHERE o.job_id = picked.id RETURNING 1
), gone AS (
    DELETE FROM jobs AS j USING picked WHERE j.id = picked.id RETURNING 1
)
SELECT (SELECT count(*) FROM gone)::integer AS jobs,
       -- The log's entries: each job deleted had one first event, stored or implied by its
       -- row (job_event_log).
       ((SELECT count(*) FROM events) + (SELECT count(*) FROM gone)
        - (SELECT count(*) FROM events WHERE seq = 1))::integer AS job_events,
       (SELECT count(*) FROM deliveries)::integer AS outbox,
       (SELECT count(*) FROM attempts)::integer AS webhook_attempts,
       (SELECT count(*) FROM usage)::integer AS usage_ledger,
       (SELECT count(*) FROM rolled)::integer AS rolled_up
