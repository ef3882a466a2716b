-- Shared rate limit buckets on PostgreSQL (domain.rate_limits has the rules).

-- name: rate_limit_ensure
-- Create the bucket rows that do not exist yet.
INSERT INTO rate_limit_buckets (provider, model)
SELECT * FROM unnest(:providers::text[], :models::text[])
ON CONFLICT DO NOTHING

-- name: rate_limit_key_purge
-- Delete up to :limit buckets of concurrency keys (provider 'key:' || tenant) open for over a
-- minute at the database's time (run behind job_claim_lock: no claim is between its check and
-- its take of one of them).
DELETE FROM rate_limit_buckets AS b
 WHERE (b.provider, b.model) IN (
       SELECT k.provider, k.model
         FROM rate_limit_buckets AS k
        WHERE k.provider LIKE 'key:%'
          AND k.requests_at < extract(epoch FROM coalesce(:now::timestamptz, now())) - 60
        LIMIT :limit)
RETURNING 1

-- name: rate_limit_now
-- The database's time in Unix seconds (the authority for every bucket).
SELECT extract(epoch FROM coalesce(:now::timestamptz, now()))::double precision AS now

-- name: rate_limit_lock
-- Lock buckets in (provider, model) order, so that concurrent claims queue rather than deadlock.
SELECT b.provider, b.model, b.requests_at, b.tokens_at
  FROM rate_limit_buckets AS b
  JOIN unnest(:providers::text[], :models::text[]) AS k(provider, model)
    ON b.provider = k.provider AND b.model = k.model
 ORDER BY b.provider, b.model
   FOR UPDATE OF b

-- name: rate_limit_read
-- Buckets (a JSON array of {provider, model}) as they stand, without locking them (NULLs for
-- one never written), each with the database's time in Unix seconds.
SELECT k.provider, k.model, b.requests_at, b.tokens_at,
       extract(epoch FROM coalesce(:now::timestamptz, now()))::double precision AS now
  FROM jsonb_to_recordset(:buckets::jsonb) AS k(provider text, model text)
  LEFT JOIN rate_limit_buckets AS b ON b.provider = k.provider AND b.model = k.model

-- name: rate_limit_write
-- Store new bucket states.
UPDATE rate_limit_buckets AS b
   SET requests_at = v.requests_at, tokens_at = v.tokens_at
  FROM unnest(:providers::text[], :models::text[], :requests_at::double precision[],
              :tokens_at::double precision[]) AS v(provider, model, requests_at, tokens_at)
 WHERE b.provider = v.provider AND b.model = v.model

-- name: rate_limited_queued
-- Claimable queued jobs per bucket (a JSON array of {provider, model}; model '': every model
-- of the provider).
SELECT k.provider, k.model,
       (SELECT count(*)::integer FROM jobs AS j
         WHERE j.state = 'queued' AND j.provider = k.provider
           AND (k.model = '' OR j.model = k.model)
           AND j.run_at <= coalesce(:now::timestamptz, now())) AS queued
  FROM jsonb_to_recordset(:buckets::jsonb) AS k(provider text, model text)

-- name: job_reroute
-- Move a running job's next attempt to another route target, fenced on its lease, and log the
-- move as an event (running to running: no state change, so no webhook).
WITH moved AS (
    UPDATE jobs AS j
       SET provider = :provider,
           model = :model,
           request = jsonb_set(j.request, '{model}', to_jsonb(:model::text)),
           event_seq = j.event_seq + 1,
           updated_at = coalesce(:now::timestamptz, now())
     WHERE j.id = :id AND j.lease_token = :token AND j.state = 'running'
       AND j.request IS NOT NULL
    RETURNING j.id, j.event_seq, j.updated_at, j.created_at
)
INSERT INTO job_events (job_id, seq, from_state, to_state, actor, reason, applied, created_at,
                        job_created_at)
SELECT id, event_seq, 'running', 'running', :actor, :reason, true, updated_at, created_at
  FROM moved
RETURNING job_id

-- name: job_queue_position
-- Claimable queued jobs of the tenant ahead of this one in claim order, plus one, among at
-- most :counted entries walked back from the job (the walk is bounded: a status read costs
-- the same behind any backlog); negative when the walk stopped there (a floor). The walk is
-- the function job_status_for_tenant calls (migration 0053).
SELECT jobgate_queue_place(:tenant_id, :priority::integer, :run_at::timestamptz, :id,
                           coalesce(:now::timestamptz, now()), :counted::integer)
       AS place

-- name: breaker_open
-- A process opened a provider's breaker: no process calls it for open_s seconds.
INSERT INTO provider_breakers (provider, open_until, opened_by)
VALUES (:provider,
        extract(epoch FROM coalesce(:now::timestamptz, now()))::double precision
          + :open_s::double precision,
        :opened_by)
ON CONFLICT (provider) DO UPDATE SET open_until = excluded.open_until,
                                     opened_by = excluded.opened_by

-- name: breaker_states
-- Every open (or half-open: open_until passed) breaker, as seconds left by the database clock.
SELECT provider,
       open_until - extract(epoch FROM coalesce(:now::timestamptz, now()))::double precision
         AS left_s
  FROM provider_breakers
