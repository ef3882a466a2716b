-- OpenAI-compatible files and batches on PostgreSQL.

-- name: file_create
-- Insert a file while it uploads (invisible until file_finish), expiring :expires_after_s from
-- now (NULL: never); a batch's result file only while :lease_token still holds the batch.
INSERT INTO files (id, tenant_id, purpose, filename, status, created_at, batch_id, expires_at)
SELECT :id, :tenant_id, :purpose, :filename, 'uploading', clock.now, :batch_id::text,
       clock.now + make_interval(secs => :expires_after_s::double precision)
  FROM (SELECT coalesce(:now::timestamptz, now()) AS now) AS clock
 WHERE :lease_token::text IS NULL
    OR EXISTS (SELECT 1 FROM batches AS b
                WHERE b.id = :batch_id::text AND b.lease_token = :lease_token::text)

-- name: file_usage
-- What a tenant keeps uploaded (its processed files of purpose batch): how many, their bytes.
SELECT count(*)::integer AS files, coalesce(sum(bytes), 0)::bigint AS bytes
  FROM files
 WHERE tenant_id = :tenant_id AND purpose = 'batch' AND status = 'processed'

-- name: file_delete_expired
-- Delete up to :limit files whose time ran out (their chunks go with them), save the input of
-- a batch that has not ended; their ids.
DELETE FROM files
 WHERE id IN (SELECT f.id FROM files AS f
               WHERE f.expires_at <= coalesce(:now::timestamptz, now())
                 AND NOT EXISTS (SELECT 1 FROM batches AS b
                                  WHERE b.input_file_id = f.id
                                    AND b.status IN ('validating', 'in_progress', 'finalizing',
                                                     'cancelling'))
               ORDER BY f.expires_at
               LIMIT :limit
                 FOR UPDATE OF f SKIP LOCKED)
RETURNING id

-- name: file_lock
-- Lock a file of one tenant (unless :tenant_id is NULL) for its delete (no row: none).
SELECT id FROM files
 WHERE id = :id AND (:tenant_id::text IS NULL OR tenant_id = :tenant_id::text)
   FOR UPDATE

-- name: batch_create
-- Insert a validating batch over the tenant's processed file :input_file_id (its lines the
-- total), the file's row locked until commit: a delete of the file waits, then sees the batch.
INSERT INTO batches (id, tenant_id, status, endpoint, input_file_id, completion_window,
                     metadata, priority, total, created_at, expires_at)
SELECT :id, :tenant_id, 'validating', :endpoint, f.id, :completion_window,
       :metadata, :priority, f.lines, clock.now,
       clock.now + make_interval(secs => :window_s::double precision)
  FROM files AS f, (SELECT coalesce(:now::timestamptz, now()) AS now) AS clock
 WHERE f.id = :input_file_id AND f.tenant_id = :tenant_id AND f.status = 'processed'
   AND (f.expires_at IS NULL OR f.expires_at > clock.now)
   FOR SHARE OF f
RETURNING *

-- name: batch_claim_live
-- Lease live batches no batches role holds, each with a new token (SKIP LOCKED: racing
-- claimers take others), in turns by tenant: every tenant's oldest batch, then every
-- tenant's second, and so on, so one tenant's many live batches never keep another's out of
-- a pass. (A window cannot be locked: the turns pick, the lock re-checks what they picked.)
WITH clock AS (
    SELECT coalesce(:now::timestamptz, now()) AS now
), turns AS (
    SELECT b.id, b.created_at,
           row_number() OVER (PARTITION BY b.tenant_id ORDER BY b.created_at, b.id) AS turn
      FROM batches AS b, clock
     WHERE b.status IN ('validating', 'in_progress', 'finalizing', 'cancelling')
       AND (b.lease_until IS NULL OR b.lease_until <= clock.now)
), due AS (
    SELECT b.id FROM batches AS b, clock
     WHERE b.id IN (SELECT id FROM turns ORDER BY turn, created_at, id LIMIT :limit)
       AND b.status IN ('validating', 'in_progress', 'finalizing', 'cancelling')
       AND (b.lease_until IS NULL OR b.lease_until <= clock.now)
       FOR UPDATE OF b SKIP LOCKED
)
UPDATE batches AS b
   SET lease_until = clock.now + make_interval(secs => :lease_s::double precision),
       lease_token = replace(gen_random_uuid()::text, '-', '')
  FROM due, clock
 WHERE b.id = due.id
RETURNING b.*

-- name: batch_update
-- Update a batch while its status is one of :from_statuses and, for the batches role, while its
-- :lease_token holds it; a new status stamps its time once, a final status set stays set.
WITH clock AS (SELECT coalesce(:now::timestamptz, now()) AS now)
UPDATE batches AS b
   SET status = coalesce(:status::text, b.status),
       final_status = coalesce(b.final_status, :final_status::text),
       expanded_chunks = coalesce(:expanded_chunks::integer, b.expanded_chunks),
       completed_count = coalesce(:completed_count::integer, b.completed_count),
       failed_count = coalesce(:failed_count::integer, b.failed_count),
       output_file_id = coalesce(:output_file_id::text, b.output_file_id),
       error_file_id = coalesce(:error_file_id::text, b.error_file_id),
       errors = coalesce(:errors::jsonb, b.errors),
       failures = coalesce(:failures::integer, b.failures),
       total = coalesce(:total::integer, b.total),
       model = coalesce(:model::text, b.model),
       lease_until = CASE WHEN :release::boolean THEN NULL
                          WHEN :lease_s::double precision IS NOT NULL
                          THEN clock.now + make_interval(secs => :lease_s::double precision)
                          ELSE b.lease_until END,
       lease_token = CASE WHEN :release::boolean THEN NULL ELSE b.lease_token END,
       in_progress_at = CASE WHEN :status::text = 'in_progress'
                             THEN coalesce(b.in_progress_at, clock.now) ELSE b.in_progress_at END,
       finalizing_at = CASE WHEN :status::text = 'finalizing'
                            THEN coalesce(b.finalizing_at, clock.now) ELSE b.finalizing_at END,
       completed_at = CASE WHEN :status::text = 'completed'
                           THEN coalesce(b.completed_at, clock.now) ELSE b.completed_at END,
       failed_at = CASE WHEN :status::text = 'failed'
                        THEN coalesce(b.failed_at, clock.now) ELSE b.failed_at END,
       expired_at = CASE WHEN :status::text = 'expired'
                         THEN coalesce(b.expired_at, clock.now) ELSE b.expired_at END,
       cancelling_at = CASE WHEN :status::text = 'cancelling'
                            THEN coalesce(b.cancelling_at, clock.now) ELSE b.cancelling_at END,
       cancelled_at = CASE WHEN :status::text = 'cancelled'
                           THEN coalesce(b.cancelled_at, clock.now) ELSE b.cancelled_at END
  FROM clock
 WHERE b.id = :id
   AND b.status = ANY(ARRAY(SELECT jsonb_array_elements_text(:from_statuses::jsonb)))
   AND (:lease_token::text IS NULL OR b.lease_token = :lease_token::text)
   AND (NOT :unsettled::boolean OR b.final_status IS NULL)
RETURNING b.*

-- name: batch_fence_lock
-- Lock a batch that :lease_token holds while it is in progress and unsettled (else no row).
SELECT id FROM batches
 WHERE id = :id AND lease_token = :lease_token::text
   AND status = 'in_progress' AND final_status IS NULL
   FOR UPDATE

-- name: batch_finish
-- End a finalizing batch while :lease_token holds it, in one statement: its final status and
-- counts, its new result files shown (those a dead pass began, deleted), its webhook events.
WITH clock AS (
    SELECT coalesce(:now::timestamptz, now()) AS now
), done AS (
    UPDATE batches AS b
       SET status = :status::text,
           completed_count = :completed_count::integer,
           failed_count = :failed_count::integer,
           output_file_id = :output_file_id::text,
           error_file_id = :error_file_id::text,
           usage = :usage::jsonb,
           lease_until = NULL, lease_token = NULL, failures = 0,
           completed_at = CASE WHEN :status::text = 'completed' THEN clock.now
                               ELSE b.completed_at END,
           failed_at = CASE WHEN :status::text = 'failed' THEN clock.now ELSE b.failed_at END,
           expired_at = CASE WHEN :status::text = 'expired' THEN clock.now ELSE b.expired_at END,
           cancelled_at = CASE WHEN :status::text = 'cancelled' THEN clock.now
                               ELSE b.cancelled_at END
      FROM clock
     WHERE b.id = :id AND b.status = 'finalizing' AND b.lease_token = :lease_token::text
    RETURNING b.*
), shown AS (
    UPDATE files AS f
       SET status = 'processed',
           bytes = CASE WHEN f.id = :output_file_id::text THEN :output_bytes::bigint
                        ELSE :error_bytes::bigint END,
           lines = CASE WHEN f.id = :output_file_id::text THEN :output_lines::integer
                        ELSE :error_lines::integer END
      FROM done
     WHERE f.batch_id = done.id AND f.id IN (:output_file_id::text, :error_file_id::text)
    RETURNING f.id
), dropped AS (
    DELETE FROM files AS f USING done
     WHERE f.batch_id = done.id AND f.status = 'uploading'
       AND f.id IS DISTINCT FROM :output_file_id::text
       AND f.id IS DISTINCT FROM :error_file_id::text
    RETURNING f.id
), events AS (
    INSERT INTO outbox (id, event_id, tenant_id, job_id, event_type, target, endpoint_id, url,
                        series, job_status, created_at, next_attempt_at, job_created_at)
    SELECT 'msg_' || done.id || '_' || e.id, jobgate_event_id(done.id, :event_type, 0),
           done.tenant_id, done.id, :event_type, e.id, e.id, NULL, 0, done.status,
           clock.now, clock.now, done.created_at
      FROM done, clock, webhook_endpoints AS e
     WHERE e.tenant_id = done.tenant_id AND NOT e.disabled
       AND (e.event_types ? :event_type::text OR jsonb_array_length(e.event_types) = 0)
    ON CONFLICT (id, job_created_at) DO NOTHING
    RETURNING id
)
SELECT * FROM done

-- name: batch_fail
-- Fail a live batch while :lease_token holds it, in one statement: its errors, its lease
-- released, and its `batch.failed` webhook events.
WITH clock AS (
    SELECT coalesce(:now::timestamptz, now()) AS now
), done AS (
    UPDATE batches AS b
       SET status = 'failed', final_status = coalesce(b.final_status, 'failed'),
           errors = :errors::jsonb, failures = coalesce(:failures::integer, b.failures),
           failed_at = clock.now, lease_until = NULL, lease_token = NULL
      FROM clock
     WHERE b.id = :id AND b.lease_token = :lease_token::text
       AND b.status IN ('validating', 'in_progress', 'finalizing', 'cancelling')
    RETURNING b.*
), events AS (
    INSERT INTO outbox (id, event_id, tenant_id, job_id, event_type, target, endpoint_id, url,
                        series, job_status, created_at, next_attempt_at, job_created_at)
    SELECT 'msg_' || done.id || '_' || e.id, jobgate_event_id(done.id, 'batch.failed', 0),
           done.tenant_id, done.id, 'batch.failed', e.id, e.id, NULL, 0, 'failed',
           clock.now, clock.now, done.created_at
      FROM done, clock, webhook_endpoints AS e
     WHERE e.tenant_id = done.tenant_id AND NOT e.disabled
       AND (e.event_types ? 'batch.failed' OR jsonb_array_length(e.event_types) = 0)
    ON CONFLICT (id, job_created_at) DO NOTHING
    RETURNING id
)
SELECT * FROM done

-- name: batch_items_put
-- Record lines of a batch (idempotent per line); a native line with its provider and request.
INSERT INTO batch_items (batch_id, line, custom_id_json, job_id, error, provider, request)
SELECT :batch_id, v.line, v.custom_id_json, v.job_id, v.error, v.provider, v.request
  FROM jsonb_to_recordset(:items::jsonb) AS v(line integer, custom_id_json text, job_id text,
                                               error jsonb, provider text, request jsonb)
ON CONFLICT (batch_id, line) DO NOTHING

-- name: batch_counts
-- A batch's lines by their jobs' states or, sent in a provider batch, their outcome read back,
-- and their usage so far (a stored count that is not a number counts as none).
SELECT count(*)::integer AS items,
       count(*) FILTER (WHERE j.state = 'succeeded' OR i.outcome = 'succeeded')::integer
           AS completed,
       count(*) FILTER (WHERE i.error IS NOT NULL OR j.state = 'failed'
                           OR i.outcome = 'failed')::integer AS failed,
       count(*) FILTER (WHERE j.state IN ({{live_states}}))::integer AS live,
       least(coalesce(sum(CASE WHEN jsonb_typeof(j.usage -> 'input_tokens') = 'number'
                         THEN (j.usage ->> 'input_tokens')::numeric END), 0)
             + coalesce(sum(i.input_tokens), 0), 9223372036854775807)::bigint AS input_tokens,
       least(coalesce(sum(CASE WHEN jsonb_typeof(j.usage -> 'output_tokens') = 'number'
                         THEN (j.usage ->> 'output_tokens')::numeric END), 0)
             + coalesce(sum(i.output_tokens), 0), 9223372036854775807)::bigint AS output_tokens,
       least(coalesce(sum(CASE WHEN jsonb_typeof(j.usage -> 'cache_read_input_tokens') = 'number'
                         THEN (j.usage ->> 'cache_read_input_tokens')::numeric END), 0)
             + coalesce(sum(i.cached_tokens), 0), 9223372036854775807)::bigint AS cached_tokens
  FROM batch_items AS i LEFT JOIN jobs AS j ON j.id = i.job_id
 WHERE i.batch_id = :batch_id

-- name: batch_cancel_pick
-- Lock the batch's jobs that a cancel changes (queued, or running with no cancel request yet),
-- in id order as a bulk chunk locks them (job_bulk_cancel then cancels them by id).
{{batch_cancel_jobs}}
   FOR UPDATE OF j

-- name: batch_event_insert
-- Queue a batch's webhook event for each of the tenant's endpoints that wants it (idempotent).
INSERT INTO outbox (id, event_id, tenant_id, job_id, event_type, target, endpoint_id, url,
                    series, job_status, created_at, next_attempt_at, job_created_at)
SELECT 'msg_' || :batch_id || '_' || e.id, jobgate_event_id(:batch_id, :event_type, 0),
       :tenant_id, :batch_id, :event_type, e.id, e.id, NULL, 0, :status, clock.now, clock.now,
       b.created_at
  FROM webhook_endpoints AS e, (SELECT coalesce(:now::timestamptz, now()) AS now) AS clock,
       batches AS b
 WHERE b.id = :batch_id AND e.tenant_id = :tenant_id AND NOT e.disabled
   AND (e.event_types ? :event_type OR jsonb_array_length(e.event_types) = 0)
ON CONFLICT (id, job_created_at) DO NOTHING
RETURNING id
