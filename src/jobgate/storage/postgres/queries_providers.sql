-- Background mode, the reconciler and inbound provider events, for PostgreSQL. :now may be
-- NULL, meaning the database's clock. A reconciler wakes on NOTIFY `r:` (a job is due now).

-- name: job_background_accept
-- Fenced on the lease: record the provider's id, release the lease, schedule the first check
-- (at once when an event about that id came first or a cancel is waiting).
UPDATE jobs AS j
   SET {{background_accepted}}
       reconcile_at = CASE
           WHEN j.cancel_requested_at IS NOT NULL
             OR EXISTS (SELECT 1 FROM provider_events AS e
                         WHERE e.provider = j.provider
                           AND e.provider_job_id = :provider_job_id::text)
           THEN clock.now
           ELSE clock.now + make_interval(secs => :reconcile_in_s::double precision) END,
       updated_at = clock.now
  FROM (SELECT coalesce(:now::timestamptz, now()) AS now) AS clock
 WHERE j.id = :id AND j.lease_token = :token AND j.state = 'running'
RETURNING j.*, (j.reconcile_at <= clock.now) AS due_now

-- name: job_reconcile_if_event
-- Run after a background accept or a provider event committed: if the job now holds this
-- provider job and an event about it is recorded, it is due now. Under READ COMMITTED the
-- accept (its EXISTS) and the event (its UPDATE) can each miss the other when they overlap;
-- whichever of these re-checks starts last sees both commits.
UPDATE jobs AS j
   SET reconcile_at = clock.now
  FROM (SELECT coalesce(:now::timestamptz, now()) AS now) AS clock
 WHERE j.provider = :provider AND j.provider_job_id = :provider_job_id
   AND j.state = 'running' AND j.lease_token IS NULL
   AND j.reconcile_at > clock.now
   AND EXISTS (SELECT 1 FROM provider_events AS e
                WHERE e.provider = j.provider AND e.provider_job_id = j.provider_job_id)
RETURNING j.id

-- name: job_reconcile_refresh
-- Every running job with a provider id becomes due for a check now.
UPDATE jobs AS j
   SET reconcile_at = clock.now
  FROM (SELECT coalesce(:now::timestamptz, now()) AS now) AS clock
 WHERE j.state = 'running' AND j.provider_job_id IS NOT NULL AND j.lease_token IS NULL
   AND (j.reconcile_at IS NULL OR j.reconcile_at > clock.now)
   AND (:providers::jsonb IS NULL
        OR j.provider = ANY(ARRAY(SELECT jsonb_array_elements_text(:providers::jsonb))))

-- name: job_reconcile_claim
-- Take the background jobs due for a check, pushing their reconcile_at ahead as a lease.
WITH clock AS (
    SELECT coalesce(:now::timestamptz, now()) AS now
), due AS (
    SELECT j.id
      FROM jobs AS j, clock
     WHERE j.provider_job_id IS NOT NULL
       AND j.lease_token IS NULL
       AND j.reconcile_at IS NOT NULL
       AND (j.state = 'running' OR (j.state = 'cancelled' AND j.cancel_outcome = 'not_supported'))
       AND (j.reconcile_at <= clock.now
            OR (j.state = 'running' AND j.cancel_requested_at IS NOT NULL
                AND (j.reconciled_at IS NULL OR j.reconciled_at < j.cancel_requested_at)))
       AND (:providers::jsonb IS NULL
            OR j.provider = ANY(ARRAY(SELECT jsonb_array_elements_text(:providers::jsonb))))
     ORDER BY j.reconcile_at
     LIMIT :limit
       FOR UPDATE OF j SKIP LOCKED
)
UPDATE jobs AS j
   SET reconcile_at = clock.now + make_interval(secs => :lease_s::double precision),
       reconciled_at = clock.now
  FROM due, clock
 WHERE j.id = due.id
RETURNING j.*, clock.now AS checked_at,
          coalesce(j.deadline_at <= clock.now, false) AS overdue

-- name: job_reconcile_defer
-- Schedule the next check of a job still at its provider; count a failed check.
UPDATE jobs AS j
   SET reconcile_at = clock.now + make_interval(secs => :reconcile_in_s::double precision),
       reconcile_checks = j.reconcile_checks + 1,
       reconcile_failures = CASE WHEN :failure::jsonb IS NULL THEN 0
                                 ELSE j.reconcile_failures + 1 END,
       reconcile_error = :failure::jsonb,
       provider_status = coalesce(:provider_status, j.provider_status),
       progress = coalesce(:progress::double precision, j.progress),
       cancel_sent_at = CASE WHEN :cancel_sent::boolean THEN coalesce(j.cancel_sent_at, clock.now)
                             ELSE j.cancel_sent_at END,
       updated_at = clock.now
  FROM (SELECT coalesce(:now::timestamptz, now()) AS now) AS clock
 WHERE j.id = :id AND j.provider_job_id = :provider_job_id AND j.lease_token IS NULL
   AND (j.state = 'running' OR (j.state = 'cancelled' AND j.cancel_outcome = 'not_supported'))
RETURNING j.id

-- name: job_settle
-- Apply the provider's verdict to a job running at it (the first verdict wins; a retry after a
-- cancel request is the cancellation, see retry_unless_cancelled), and bill a verdict that
-- carries usage once.
WITH clock AS (
    SELECT coalesce(:now::timestamptz, now()) AS now
), v AS (
    SELECT :state::text AS state, :reason::text AS reason, :cancel_outcome::text AS cancel_outcome
), settled AS (
    UPDATE jobs AS j
       SET {{retry_unless_cancelled}},
           result = CASE WHEN j.purged_at IS NULL THEN :result::jsonb END,
           error = :error::jsonb,
           usage = coalesce(:usage::jsonb, j.usage),
           attempt = j.attempt - :refund_attempt,
           dead_lettered = :dead_lettered,
           run_at = CASE WHEN v.state = 'queued'
                         THEN clock.now + make_interval(secs => :retry_in_s::double precision)
                         ELSE j.run_at END,
           {{retry_forgets_provider_job}}
           provider_status = coalesce(:provider_status, j.provider_status),
           phase = NULL,
           reconcile_at = CASE WHEN :watch_in_s::double precision IS NULL THEN NULL
                               ELSE clock.now + make_interval(secs => :watch_in_s) END,
           reconcile_checks = 0,
           reconcile_failures = 0,
           reconcile_error = NULL,
           updated_at = clock.now,
           event_seq = j.event_seq + 1,
           transition_actor = :actor
      FROM clock, v
     WHERE j.id = :id AND j.provider_job_id = :provider_job_id AND j.state = 'running'
       AND j.lease_token IS NULL
    RETURNING j.*
), billed AS (
    INSERT INTO usage_ledger (job_id, kind, tenant_id, provider, model, input_tokens,
                              output_tokens, cache_read_tokens, cache_write_tokens, created_at)
    SELECT s.id, 'completion', s.tenant_id, s.provider, s.model,
           coalesce((:usage::jsonb ->> 'input_tokens')::bigint, 0),
           coalesce((:usage::jsonb ->> 'output_tokens')::bigint, 0),
           coalesce((:usage::jsonb ->> 'cache_read_input_tokens')::bigint, 0),
           coalesce((:usage::jsonb ->> 'cache_creation_input_tokens')::bigint, 0),
           s.updated_at
      FROM settled AS s
     WHERE :usage::jsonb IS NOT NULL AND s.state <> 'queued'
    ON CONFLICT (job_id, kind) DO NOTHING
)
SELECT * FROM settled

-- name: job_discard_late_result
-- A locally cancelled job's provider finished: stop watching, log the discarded result, and
-- bill its usage with a matching refund.
WITH clock AS (
    SELECT coalesce(:now::timestamptz, now()) AS now
), stopped AS (
    UPDATE jobs AS j
       SET reconcile_at = NULL, provider_status = :to_state, updated_at = clock.now,
           event_seq = j.event_seq + 1
      FROM clock
     WHERE j.id = :id AND j.provider_job_id = :provider_job_id AND j.state = 'cancelled'
       AND j.cancel_outcome = 'not_supported' AND j.reconcile_at IS NOT NULL
    RETURNING j.*
), logged AS (
    INSERT INTO job_events (job_id, seq, from_state, to_state, actor, reason, applied,
                            created_at, job_created_at)
    SELECT s.id, s.event_seq, s.state, :to_state, :actor, 'result_discarded_after_cancel',
           false, s.updated_at, s.created_at
      FROM stopped AS s
), billed AS (
    INSERT INTO usage_ledger (job_id, kind, tenant_id, provider, model, input_tokens,
                              output_tokens, cache_read_tokens, cache_write_tokens, created_at)
    SELECT s.id, kind.name, s.tenant_id, s.provider, s.model,
           coalesce((:usage::jsonb ->> 'input_tokens')::bigint, 0),
           coalesce((:usage::jsonb ->> 'output_tokens')::bigint, 0),
           coalesce((:usage::jsonb ->> 'cache_read_input_tokens')::bigint, 0),
           coalesce((:usage::jsonb ->> 'cache_creation_input_tokens')::bigint, 0),
           s.updated_at
      FROM stopped AS s, (VALUES ('completion'), ('refund')) AS kind(name)
     WHERE :usage::jsonb IS NOT NULL
    ON CONFLICT (job_id, kind) DO NOTHING
)
SELECT id FROM stopped

-- name: provider_event_record
-- Record an inbound provider event once; a first sighting makes its job due for a check now.
WITH clock AS (
    SELECT coalesce(:now::timestamptz, now()) AS now
), inserted AS (
    INSERT INTO provider_events (provider, event_id, event_type, provider_job_id, received_at)
    SELECT :provider, :event_id, :event_type, :provider_job_id, clock.now FROM clock
    ON CONFLICT (provider, event_id) DO NOTHING
    RETURNING provider, provider_job_id
), due AS (
    UPDATE jobs AS j
       SET reconcile_at = clock.now
      FROM inserted AS i, clock
     WHERE j.provider = i.provider AND j.provider_job_id = i.provider_job_id
       AND j.lease_token IS NULL
       AND (j.state = 'running'
            OR (j.state = 'cancelled' AND j.cancel_outcome = 'not_supported'
                AND j.reconcile_at IS NOT NULL))
    RETURNING j.id
)
SELECT (SELECT count(*) FROM inserted) AS inserted, (SELECT count(*) FROM due) AS due

-- name: notify_reconcile
-- Wake every reconciler: a background job is due now.
SELECT pg_notify('jobgate', 'r:')
