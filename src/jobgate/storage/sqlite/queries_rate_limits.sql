-- Shared rate limit buckets on SQLite (domain.rate_limits has the rules; the single writer
-- serialises every update).

-- name: rate_limit_key_purge
-- Delete up to :limit buckets of concurrency keys (provider 'key:' || tenant) open for over a
-- minute at :now (the one writer: no claim is between its check and its take of one of them).
DELETE FROM rate_limit_buckets
 WHERE (provider, model) IN (
       SELECT provider, model FROM rate_limit_buckets
        WHERE provider LIKE 'key:%' AND requests_at < :now - 60
        LIMIT :limit)

-- name: rate_limit_ensure
-- Create a bucket row if it does not exist yet.
INSERT INTO rate_limit_buckets (provider, model) VALUES (:provider, :model)
ON CONFLICT DO NOTHING

-- name: rate_limit_read
-- Buckets (a JSON array of {provider, model}) as they stand (NULLs for one never written),
-- each with the time in Unix seconds.
WITH k AS (
    SELECT value ->> '$.provider' AS provider, value ->> '$.model' AS model
      FROM json_each(:buckets)
)
SELECT k.provider, k.model, b.requests_at, b.tokens_at, :now AS now
  FROM k
  LEFT JOIN rate_limit_buckets AS b ON b.provider = k.provider AND b.model = k.model

-- name: rate_limit_write
-- Store a bucket's new state.
UPDATE rate_limit_buckets
   SET requests_at = :requests_at, tokens_at = :tokens_at
 WHERE provider = :provider AND model = :model

-- name: rate_limited_queued
-- Claimable queued jobs per bucket (a JSON array of {provider, model}; model '': every model
-- of the provider).
WITH k AS (
    SELECT value ->> '$.provider' AS provider, value ->> '$.model' AS model
      FROM json_each(:buckets)
)
SELECT k.provider, k.model,
       (SELECT count(*) FROM jobs AS j
         WHERE j.state = 'queued' AND j.provider = k.provider
           AND (k.model = '' OR j.model = k.model)
           AND j.run_at <= :now) AS queued
  FROM k

-- name: job_reroute
-- Move a running job's next attempt to another route target, fenced on its lease (no state
-- change, so no event or webhook from the triggers: job_reroute_event logs it).
UPDATE jobs
   SET provider = :provider,
       model = :model,
       request = json_set(request, '$.model', :model),
       event_seq = event_seq + 1,
       updated_at = :now
 WHERE id = :id AND lease_token = :token AND state = 'running' AND request IS NOT NULL
RETURNING id, event_seq

-- name: job_reroute_event
-- The event of a reroute.
INSERT INTO job_events (job_id, seq, from_state, to_state, actor, reason, applied, created_at)
VALUES (:id, :seq, 'running', 'running', :actor, :reason, 1, :now)

-- name: job_queue_position
-- Claimable queued jobs of the tenant ahead of this one in claim order, plus one, among at
-- most :counted entries walked back from it; negative when the walk stopped there (a floor).
-- The walk of the queue_place fragment, for a job given by its sort key.
SELECT {{queue_place}} AS place
  FROM (SELECT :tenant_id AS tenant_id, :priority AS priority, :run_at AS run_at,
               :id AS id) AS j

-- name: breaker_open
-- A process opened a provider's breaker: no process calls it for open_s seconds.
INSERT INTO provider_breakers (provider, open_until, opened_by)
VALUES (:provider, :now + :open_s, :opened_by)
ON CONFLICT (provider) DO UPDATE SET open_until = excluded.open_until,
                                     opened_by = excluded.opened_by

-- name: breaker_states
-- Every open (or half-open: open_until passed) breaker, as seconds left.
SELECT provider, open_until - :now AS left_s FROM provider_breakers
