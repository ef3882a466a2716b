-- Core queries for PostgreSQL. :now may be NULL, meaning the database's clock:
-- every query reads the time as `clock.now` from (SELECT coalesce(:now, now()) AS now).

-- name: migrations_table
-- Create the table that records applied migrations.
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)

-- name: migrations_lock
-- Serialise migrators across processes (released at the end of the transaction).
SELECT pg_advisory_xact_lock(7146011)

-- name: migration_record
-- Record one applied migration.
INSERT INTO schema_migrations (version, name) VALUES (:version, :name)

-- name: database_now
-- The database's clock.
SELECT now() AS now

-- name: wal_position
-- Where this server's write-ahead log stands, in bytes from 0/0: on a standby, how far it has
-- replayed (every transaction committed before that point is visible there); on a primary,
-- where the next record will be inserted (every commit that has returned lies before it).
SELECT pg_is_in_recovery() AS in_recovery,
       (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()
             ELSE pg_current_wal_insert_lsn() END - '0/0'::pg_lsn)::bigint AS lsn

-- name: transaction_bounds
-- Through a transaction-mode pooler: a transaction's lock wait and idle bounds, set inside it (the executor fills in the two integers; SET LOCAL ends with the transaction).
SET LOCAL lock_timeout = {lock_timeout_ms}; SET LOCAL idle_in_transaction_session_timeout = {idle_in_transaction_ms}

-- name: job_insert
-- Insert a queued job (its first event is implied by its row: job_event_log); answers
-- only what the database decided (NewJob.queued builds the job).
INSERT INTO jobs (id, tenant_id, state, api, provider, endpoint, model, request, metadata,
                  webhook, priority, max_attempts, run_at, created_at, updated_at, expires_at,
                  execution_timeout_s, event_seq, transition_actor, transition_reason,
                  concurrency_key, model_route)
SELECT :id, :tenant_id, 'queued', :api, :provider, :endpoint, :model, :request, :metadata,
       :webhook, :priority, :max_attempts, clock.run_at, clock.now, clock.now,
       -- Intervals are clamped to ten years (storage.rows.MAX_INTERVAL_S): a stored time never
       -- overflows, whatever value reaches this statement.
       clock.run_at + make_interval(secs => CASE WHEN :start_timeout_s::double precision IS NOT NULL
                                            THEN least(greatest(:start_timeout_s, 0), 315360000)
                                            END),
       :execution_timeout_s, 1, 'api', 'submitted', :concurrency_key, :model_route
  FROM (SELECT now, greatest(now, coalesce(:run_at::timestamptz,
                                           now + make_interval(secs => :delay_s::double precision)))
                    AS run_at
          FROM (SELECT coalesce(:now::timestamptz, now()) AS now) AS t) AS clock
RETURNING id, created_at, run_at, expires_at

-- fragment: idempotency_rebind_expired
-- A key already bound (k) is taken over only once its binding expired; a live binding is left
-- as it is, and the statement inserts nothing for it.
ON CONFLICT (tenant_id, route, key) DO UPDATE
   SET body_hash = excluded.body_hash, job_id = excluded.job_id,
       status_code = excluded.status_code, created_at = excluded.created_at,
       expires_at = excluded.expires_at
 WHERE k.expires_at <= excluded.created_at

-- name: job_insert_idempotent
-- Bind an Idempotency-Key (or replace an expired binding) and insert the job, in one statement;
-- nothing is inserted when a live binding exists. Waits while another transaction holds the key.
WITH clock AS (
    SELECT now, greatest(now, coalesce(:run_at::timestamptz,
                                       now + make_interval(secs => :delay_s::double precision)))
                AS run_at
      FROM (SELECT coalesce(:now::timestamptz, now()) AS now) AS t
), bound AS (
    INSERT INTO idempotency_keys AS k
        (tenant_id, route, key, body_hash, job_id, status_code, created_at, expires_at)
    SELECT :tenant_id, :route, :key, :body_hash, :id, :status_code, clock.now,
           clock.now + make_interval(secs => :ttl_s::double precision)
      FROM clock
    {{idempotency_rebind_expired}}
    RETURNING k.job_id
)
INSERT INTO jobs (id, tenant_id, state, api, provider, endpoint, model, request, metadata,
                  webhook, priority, max_attempts, run_at, created_at, updated_at, expires_at,
                  execution_timeout_s, event_seq, transition_actor, transition_reason,
                  concurrency_key, model_route)
SELECT :id, :tenant_id, 'queued', :api, :provider, :endpoint, :model, :request, :metadata,
       :webhook, :priority, :max_attempts, clock.run_at, clock.now, clock.now,
       -- Intervals are clamped to ten years (storage.rows.MAX_INTERVAL_S): a stored time never
       -- overflows, whatever value reaches this statement.
       clock.run_at + make_interval(secs => CASE WHEN :start_timeout_s::double precision IS NOT NULL
                                            THEN least(greatest(:start_timeout_s, 0), 315360000)
                                            END),
       :execution_timeout_s, 1, 'api', 'submitted', :concurrency_key, :model_route
  FROM clock, bound
RETURNING id, created_at, run_at, expires_at

-- name: job_view_for_tenant
-- One job by id, only if the tenant owns it, as its views show it (job_view_request).
SELECT {{job_view_request}} AS request, {{job_columns_but_request}}
  FROM jobs AS j
 WHERE j.id = :id AND j.tenant_id = :tenant_id

-- name: job_status_for_tenant
-- job_view_for_tenant, and for a queued job its place in its tenant's line as
-- job_queue_position walks it (at most :counted entries back from the job; signed: negative,
-- a floor) and the oldest pause covering it (what explains its wait: services.waiting), with
-- the time read: a status read in one statement. Both are functions (migrations 0053, 0041),
-- called for a queued job only: as subqueries they would be subplans that every read
-- initialises, taken or not.
SELECT {{job_view_request}} AS request, {{job_columns_but_request}},
       CASE WHEN j.state = 'queued' THEN
           jobgate_queue_place(j.tenant_id, j.priority, j.run_at, j.id,
                               coalesce(:now::timestamptz, now()), :counted)
       END AS queue_place,
       CASE WHEN j.state = 'queued' THEN
           jobgate_covering_pause(j.provider, j.model, j.tenant_id)
       END AS pause,
       CASE WHEN j.state = 'queued' THEN coalesce(:now::timestamptz, now()) END AS read_at
  FROM jobs AS j
 WHERE j.id = :id AND j.tenant_id = :tenant_id

-- fragment: job_view_request
-- The request as the job views read it: of one over 2 KB (its stored size, read from its
-- header: nothing detoasted) only the members they read (storage.protocol.
-- VIEW_REQUEST_MEMBERS, nulls left out), not the prompt; a smaller one whole, which costs
-- less than picking.
CASE WHEN pg_column_size(j.request) > 2048 AND jsonb_typeof(j.request) = 'object' THEN
     jsonb_strip_nulls(jsonb_build_object(
         'stream', j.request -> 'stream',
         'max_tokens', j.request -> 'max_tokens',
         'max_completion_tokens', j.request -> 'max_completion_tokens',
         'max_output_tokens', j.request -> 'max_output_tokens'))
     ELSE j.request
END

-- name: job_without_input_for_tenant
-- One job by id, only if the tenant owns it, as a Response renders it: of a request over 2 KB
-- (its stored size, from its header) everything but its `input`, the prompt, which a Response
-- never shows; a smaller one whole.
SELECT CASE WHEN pg_column_size(j.request) > 2048 AND jsonb_typeof(j.request) = 'object'
            THEN j.request - 'input'
            ELSE j.request
       END AS request,
       {{job_columns_but_request}}
  FROM jobs AS j
 WHERE j.id = :id AND j.tenant_id = :tenant_id

-- name: job_list
-- A page of a tenant's jobs as their views show them (job_view_request), newest first,
-- optionally filtered.
SELECT {{job_view_request}} AS request, {{job_columns_but_request}}
  FROM jobs AS j
 WHERE tenant_id = :tenant_id
   AND (:states::jsonb IS NULL OR state = ANY(ARRAY(SELECT jsonb_array_elements_text(:states::jsonb))))
   AND (:dead_lettered::boolean IS NULL OR dead_lettered = :dead_lettered::boolean)
   AND (:after_id::text IS NULL
        OR (created_at, id) < (SELECT a.created_at, a.id FROM jobs AS a
                                WHERE a.id = :after_id::text AND a.tenant_id = :tenant_id))
 ORDER BY created_at DESC, id DESC
 LIMIT :limit

-- fragment: job_search_cursor
-- A job search reads the tenant's jobs after the :after_id cursor (one of the tenant's jobs),
-- or from the tenant's newest: one row comparison that is never NULL, so that it bounds the
-- index scan itself under a generic plan too.
(j.tenant_id, j.created_at, j.id)
    < (:tenant_id::text,
       coalesce((SELECT a.created_at FROM jobs AS a
                  WHERE a.id = :after_id::text AND a.tenant_id = :tenant_id::text), 'infinity'),
       coalesce(:after_id::text, ''))

-- name: job_search
-- A page of a tenant's jobs matching a filter, read by a bounded walk of jobs_by_tenant: the
-- tenant's jobs newest first after the cursor and inside the created_after/before range,
-- at most :walk_limit of them, each checked against the filter (model, provider, status,
-- metadata... need no index of their own, which every claim and finish would write). It
-- answers the walked jobs that match (matched), at most :limit, and the walk's last job when
-- the walk reaches its bound (walk_end: where the next page starts). The tenant is held by
-- row comparisons on jobs_by_tenant's columns rather than an equality, so that the walk's
-- order (tenant_id, created_at, id) comes from that index alone: with tenant_id known
-- constant, the planner may walk jobs_by_creation instead, skipping other tenants' jobs that
-- the walk's limit does not count.
SELECT {{job_view_request}} AS request, {{job_columns_but_request}},
       w.matched, w.walked = :walk_limit AS walk_end
  FROM (SELECT s.walk_tenant, s.walk_created_at, s.walk_id, s.matched,
               row_number() OVER (ORDER BY s.walk_tenant DESC, s.walk_created_at DESC,
                                           s.walk_id DESC) AS walked
          FROM (SELECT j.tenant_id AS walk_tenant, j.created_at AS walk_created_at,
                       j.id AS walk_id, coalesce({{job_filter}}, false) AS matched
                  FROM jobs AS j
                 WHERE (j.tenant_id, j.created_at)
                       >= (:tenant_id::text, coalesce(:created_after::timestamptz, '-infinity'))
                   AND (j.tenant_id, j.created_at)
                       < (:tenant_id::text, coalesce(:created_before::timestamptz, 'infinity'))
                   AND {{job_search_cursor}}
                 ORDER BY j.tenant_id DESC, j.created_at DESC, j.id DESC
                 LIMIT :walk_limit) AS s) AS w
  JOIN jobs AS j ON j.id = w.walk_id
 WHERE w.matched OR w.walked = :walk_limit
 ORDER BY w.walk_tenant DESC, w.walk_created_at DESC, w.walk_id DESC
 LIMIT :limit

-- name: job_search_by_metadata
-- A page of a tenant's jobs holding metadata pairs matching a filter, through jobs_by_metadata
-- (its predicate written out, so that the planner may use that partial index): the jobs
-- holding the pairs, sorted, so a page is never partial (walk_end is false).
SELECT {{job_view_request}} AS request, {{job_columns_but_request}},
       true AS matched, false AS walk_end
  FROM jobs AS j
 WHERE j.tenant_id = :tenant_id::text
   AND j.metadata <> '{}'::jsonb AND j.metadata @> :metadata::jsonb
   AND {{job_filter}}
   AND (:after_id::text IS NULL
        OR (j.created_at, j.id) < (SELECT a.created_at, a.id FROM jobs AS a
                                    WHERE a.id = :after_id::text
                                      AND a.tenant_id = :tenant_id::text))
 ORDER BY j.created_at DESC, j.id DESC
 LIMIT :limit

-- name: job_events
-- A job's event log after a sequence number (job_event_log: the stored events and the first
-- event its row implies, migration 0028), read from the job's partition (migration 0088: the
-- key read inline, an init plan, so the other partitions are pruned when the plan starts).
SELECT *
  FROM job_event_log
 WHERE job_id = :job_id AND job_created_at = (SELECT j.created_at FROM jobs AS j WHERE j.id = :job_id)
   AND seq > :after_seq
 ORDER BY seq
 LIMIT :limit

-- name: job_claim_lock
-- Serialise claims while a tenant cap applies, so that running counts read by one claim include
-- every earlier claim (the claim statement takes its snapshot after this lock is granted).
SELECT pg_advisory_xact_lock(7146012)

-- fragment: claim_shares
-- A claim policy's tenant shares (a JSON array) as rows s(tenant_id, max_running, weight,
-- max_running_per_key, rpm_per_key); a tenant without a row takes the policy's defaults.
SELECT *
  FROM jsonb_to_recordset(:shares::jsonb)
       AS s(tenant_id text, max_running integer, weight double precision,
            max_running_per_key integer, rpm_per_key integer)

-- fragment: claim_max_running
-- A tenant's cap on running jobs (0: none), from its share row `s` or the default.
coalesce(s.max_running, :default_max_running::integer)

-- fragment: claim_per_key
-- A tenant's cap on running jobs per concurrency key (0: none), from `s` or the default.
coalesce(s.max_running_per_key, :default_max_running_per_key::integer)

-- fragment: claim_rpm_per_key
-- A tenant's job starts a minute per concurrency key (0: none), from `s` or the default.
coalesce(s.rpm_per_key, :default_rpm_per_key::integer)

-- fragment: claim_key_admits
-- THE per-key rate limit and budgets of every claim (job_claim, job_claim_by_id), for a queued
-- job `j` whose tenant's rpm_per_key is `rpm_key` (a column the statement provides): a key
-- over a daily budget per key (:blocked_keys, a JSON array of [tenant id, key]) is passed
-- over, and under rpm_per_key so is a key whose shared bucket (domain.rate_limits.key_bucket)
-- admits no start at `clock.now` yet. The claim takes that bucket for each key it starts
-- (storage.postgres.transport), serialised by job_claim_lock; at most one start per key per
-- claim (`claim_key_rate`).
(j.concurrency_key IS NULL
 OR (NOT EXISTS (SELECT 1 FROM jsonb_array_elements(:blocked_keys::jsonb) AS bk(pair)
                  WHERE bk.pair ->> 0 = j.tenant_id AND bk.pair ->> 1 = j.concurrency_key)
     AND (rpm_key <= 0 OR NOT EXISTS (
          SELECT 1 FROM rate_limit_buckets AS rb
           WHERE rb.provider = 'key:' || j.tenant_id AND rb.model = j.concurrency_key
             AND rb.requests_at > extract(epoch FROM clock.now)))))

-- fragment: claim_key_rate
-- Under rpm_per_key, one start per concurrency key per claim: a candidate `sc` (rpm_key,
-- concurrency_key, key_rank) is kept only as its key's first (its bucket admits one start).
(sc.rpm_key <= 0 OR sc.concurrency_key IS NULL OR sc.key_rank = 1)

-- fragment: claim_key_cap
-- THE per-key cap of every claim (job_claim, job_claim_by_id): a candidate `sc` (per_key,
-- concurrency_key, key_rank: its rank among its key's candidates, best first) is kept only
-- while its key's running jobs `kb.running` (key_busy, LEFT JOINed) plus its rank stay within
-- the cap; no cap, or no key, keeps it.
(sc.per_key <= 0 OR sc.concurrency_key IS NULL
 OR coalesce(kb.running, 0) + sc.key_rank <= sc.per_key)

-- fragment: claim_lease
-- THE lease of every claim (job_claim, job_claim_by_id): the SET list of `UPDATE jobs AS j ...
-- FROM clock` for the jobs claimed by :worker_id for :lease_ttl_s seconds.
SET state = 'running',
    attempt = j.attempt + 1,
    run_count = j.run_count + 1,
    lease_owner = :worker_id,
    lease_token = md5(random()::text || clock_timestamp()::text || j.id),
    lease_expires_at = clock.now + make_interval(secs => :lease_ttl_s::double precision),
    started_at = coalesce(j.started_at, clock.now),
    -- Clamped to [0, ten years] (NaN: ten years; storage.rows.MAX_INTERVAL_S), so that a
    -- row's timeout can never store a time past what any reader can hold.
    deadline_at = coalesce(j.deadline_at,
                           clock.now + make_interval(secs => CASE
                               WHEN j.execution_timeout_s IS NOT NULL
                               THEN least(greatest(j.execution_timeout_s, 0), 315360000)
                           END)),
    phase = 'awaiting_provider',
    updated_at = clock.now,
    event_seq = j.event_seq + 1,
    transition_actor = :worker_id,
    transition_reason = 'claimed'

-- fragment: claim_counted
-- Count each tenant's claims in the `claimed` CTE of a claim (the tenant's drain rate).
INSERT INTO tenant_stats AS t (tenant_id, claimed_total)
SELECT tenant_id, count(*) FROM claimed GROUP BY tenant_id
ON CONFLICT (tenant_id) DO UPDATE SET claimed_total = t.claimed_total + excluded.claimed_total

-- name: job_claim
-- Lease the next jobs by weighted fair share across tenants (see jobgate.domain.fairness): a
-- tenant's k-th candidate scores (running + k) / weight, lowest first; within a tenant by
-- (priority, run_at, id); no more than a tenant's free slots. `waiting` is a loose index scan
-- over jobs_claimable for the tenants with queued jobs. Each tenant's candidates are locked as
-- they are scanned (LIMIT with SKIP LOCKED on the scan itself), so concurrent claimers pass
-- over each other's rows instead of colliding on the same few. Under a tenant's
-- max_running_per_key, jobs of a concurrency key already at its cap are not scanned, and no more
-- of a key are taken than its free slots (the fair-share rank counts only jobs kept); jobs of
-- a key over its budget or its rpm_per_key are not scanned either (claim_key_admits).
WITH RECURSIVE clock AS (
    SELECT coalesce(:now::timestamptz, now()) AS now
), waiting AS (
    -- Ordered as jobs_claimable is (partial: queued jobs only), so that the scan reads that
    -- index. Ordered by tenant alone, the planner may pick jobs_by_tenant (every job, oldest
    -- first) and walk past each tenant's finished jobs to reach a queued one: a drain's claims
    -- then cost more the more it has finished (quadratic over the drain).
    (SELECT j.tenant_id FROM jobs AS j
      WHERE j.state = 'queued' ORDER BY j.tenant_id, j.priority LIMIT 1)
    UNION ALL
    SELECT (SELECT j.tenant_id FROM jobs AS j
             WHERE j.state = 'queued' AND j.tenant_id > w.tenant_id
             ORDER BY j.tenant_id, j.priority LIMIT 1)
      FROM waiting AS w
     WHERE w.tenant_id IS NOT NULL
), shares AS (
    {{claim_shares}}
), contenders AS (
    SELECT count(*) AS tenants
      FROM waiting AS w
     WHERE w.tenant_id IS NOT NULL AND NOT w.tenant_id = ANY(:blocked_tenants::text[])
), key_busy AS (
    -- Every running job of a key, with a worker's lease or at its provider in background mode
    -- (no lease): both are calls the key's end user has in flight.
    SELECT j.tenant_id, j.concurrency_key, count(*)::integer AS running
      FROM jobs AS j
     WHERE :keys_capped::boolean
       AND j.state = 'running' AND j.concurrency_key IS NOT NULL
     GROUP BY j.tenant_id, j.concurrency_key
), slots AS (
    SELECT w.tenant_id,
           coalesce(b.running, 0) AS running,
           coalesce(s.weight, :default_weight::double precision) AS weight,
           {{claim_per_key}} AS per_key,
           {{claim_rpm_per_key}} AS rpm_key,
           CASE WHEN {{claim_max_running}} > 0
                THEN greatest({{claim_max_running}} - coalesce(b.running, 0), 0)
                ELSE :limit::integer END AS free
      FROM waiting AS w
      LEFT JOIN shares AS s ON s.tenant_id = w.tenant_id
      -- The worker slots the tenant holds (background jobs at a provider hold none), counted
      -- only where they decide something: under a cap, or in the share order of two or more
      -- tenants. A lone uncapped tenant's order is its own (priority, run_at, id) whatever it
      -- holds, so its count is skipped (a gate evaluated before the scan). Counted per tenant,
      -- which plans as a plain index scan of jobs_running: it marks the entries of jobs that
      -- have left 'running' dead as it passes them, where the one bitmap scan of every running
      -- job it replaces revisited each such heap page on every claim until a vacuum.
      LEFT JOIN LATERAL (
           SELECT count(*)::integer AS running
             FROM jobs AS j
            WHERE j.tenant_id = w.tenant_id AND j.state = 'running'
              AND j.lease_token IS NOT NULL
              AND ({{claim_max_running}} > 0 OR (SELECT tenants FROM contenders) > 1)
           ) AS b ON true
     WHERE w.tenant_id IS NOT NULL
       AND NOT w.tenant_id = ANY(:blocked_tenants::text[])
), scanned AS (
    SELECT sl.tenant_id, sl.running, sl.weight, sl.per_key, sl.rpm_key,
           c.id, c.priority, c.run_at, c.concurrency_key,
           row_number() OVER (PARTITION BY sl.tenant_id, c.concurrency_key
                              ORDER BY c.priority, c.run_at, c.id) AS key_rank
      FROM slots AS sl
     CROSS JOIN LATERAL (
           SELECT j.id, j.priority, j.run_at, j.concurrency_key
             FROM jobs AS j, clock
            WHERE j.state = 'queued'
              AND j.tenant_id = sl.tenant_id
              AND j.run_at <= clock.now
              -- Past its start deadline a job may not start (the reaper expires it).
              AND (j.expires_at IS NULL OR j.expires_at > clock.now)
              AND (:providers::text[] IS NULL OR j.provider = ANY(:providers::text[]))
              AND (:models::text[] IS NULL OR j.model = ANY(:models::text[]))
              AND (:skip_models::text[] IS NULL OR j.model IS NULL
                   OR NOT j.model = ANY(:skip_models::text[]))
              AND (sl.per_key = 0 OR j.concurrency_key IS NULL OR NOT EXISTS (
                   SELECT 1 FROM key_busy AS kb
                    WHERE kb.tenant_id = sl.tenant_id AND kb.concurrency_key = j.concurrency_key
                      AND kb.running >= sl.per_key))
              AND {{claim_key_admits}}
              -- An operator's pause holds the jobs it covers in the queue.
              AND NOT EXISTS (SELECT 1 FROM pauses AS p WHERE {{pause_covers}})
            ORDER BY j.priority, j.run_at, j.id
            LIMIT least(sl.free, :limit::integer)
              FOR UPDATE OF j SKIP LOCKED
           ) AS c
     WHERE sl.free > 0
), candidates AS (
    SELECT sc.id, sc.priority, sc.run_at,
           (sc.running + row_number() OVER (PARTITION BY sc.tenant_id
                                            ORDER BY sc.priority, sc.run_at, sc.id))
           / sc.weight AS share
      FROM scanned AS sc
      LEFT JOIN key_busy AS kb
        ON kb.tenant_id = sc.tenant_id AND kb.concurrency_key = sc.concurrency_key
     WHERE {{claim_key_cap}} AND {{claim_key_rate}}
), next AS (
    SELECT id FROM candidates ORDER BY share, priority, run_at, id LIMIT :limit
), claimed AS (
    UPDATE jobs AS j
       {{claim_lease}}
      FROM clock
     -- An array probe of the primary key: a join with `next` lets the planner, which cannot
     -- see how few rows `next` holds, hash-join against a sequential scan of every job.
     WHERE j.id = ANY (ARRAY(SELECT id FROM next))
    RETURNING {{job_columns}}
), counted AS (
    {{claim_counted}}
)
SELECT * FROM claimed

-- fragment: job_columns
-- The columns a Job is decoded from (domain.job.Job's fields but `damaged`), for the
-- statements a worker runs per job: `j.*` also sends the nine columns no Job holds
-- (transition_*, reconcile_*, series, ...), each encoded here and decoded by the worker.
j.request, {{job_columns_but_request}}

-- fragment: job_columns_but_request
-- job_columns without the request (a prompt can be hundreds of kilobytes: the job views,
-- which never show it, do not read it).
j.id, j.tenant_id, j.state, j.api, j.provider, j.endpoint, j.model, j.metadata,
j.webhook, j.result, j.error, j.usage, j.priority, j.attempt, j.max_attempts, j.run_count,
j.lost_count, j.run_at, j.created_at, j.updated_at, j.started_at, j.completed_at,
j.cancel_requested_at, j.expires_at, j.execution_timeout_s, j.deadline_at, j.lease_owner,
j.lease_token, j.lease_expires_at, j.phase, j.provider_job_id, j.creation_outcome,
j.cancel_outcome, j.reconcile_at, j.dead_lettered, j.purged_at, j.event_seq,
j.provider_generation, j.concurrency_key, j.model_route, j.reconciled_at, j.progress,
j.provider_request_id

-- name: job_heartbeat
-- Extend the leases still held (a JSON array of {id, token}); answers whether a cancel was
-- requested.
UPDATE jobs AS j
   SET lease_expires_at = clock.now + make_interval(secs => :lease_ttl_s::double precision)
  FROM jsonb_to_recordset(:leases::jsonb) AS held(id text, token text),
       (SELECT coalesce(:now::timestamptz, now()) AS now) AS clock
 WHERE j.id = held.id AND j.lease_token = held.token AND j.state = 'running'
RETURNING j.id, j.cancel_requested_at

-- name: job_finish
-- Apply lease holders' verdicts, fenced on each lease token, and bill each success once. A
-- retry of a job whose cancel was requested becomes the cancellation instead. Answers only
-- what the lease holder needs (the jobs' request and result stay in the database).
WITH clock AS (
    SELECT coalesce(:now::timestamptz, now()) AS now
), verdict AS (
    -- storage.base.finish_payload leaves out the fields at their defaults: read them back.
    SELECT v.id, v.token, v.state, v.result, v.error, v.usage,
           coalesce(v.refund_attempt, 0) AS refund_attempt, coalesce(v.lost, 0) AS lost,
           coalesce(v.dead_lettered, false) AS dead_lettered,
           coalesce(v.retry_in_s, 0) AS retry_in_s, v.cancel_outcome, v.creation_outcome,
           v.actor, v.reason, v.provider_request_id
      FROM jsonb_to_recordset(:finishes::jsonb) AS v(
           id text, token text, state text, result jsonb, error jsonb, usage jsonb,
           refund_attempt integer, lost integer, dead_lettered boolean,
           retry_in_s double precision, cancel_outcome text, creation_outcome text,
           actor text, reason text, provider_request_id text)
), finished AS (
    UPDATE jobs AS j
       SET {{verdict_writes}}
      FROM verdict AS v, clock
     -- Found by primary key: with `state = 'running'` as written elsewhere, the planner
     -- (estimating few running jobs) read every running job through jobs_running instead, a
     -- bitmap scan that revisits the heap page of each entry left by a job since finished until
     -- a vacuum (thousands of pages per small finish under a steady load). `state || ''` is the
     -- same test in a form no partial index's predicate matches.
     WHERE j.id = ANY (ARRAY(SELECT id FROM verdict))
       AND j.id = v.id AND j.lease_token = v.token AND j.state || '' = 'running'
       AND (NOT :expired_only::boolean OR j.lease_expires_at < clock.now)
    RETURNING j.id, j.state, j.attempt, j.tenant_id, j.provider, j.model, j.updated_at
), billed AS (
    INSERT INTO usage_ledger (job_id, kind, tenant_id, provider, model, input_tokens,
                              output_tokens, cache_read_tokens, cache_write_tokens, created_at)
    SELECT f.id, 'completion', f.tenant_id, f.provider, f.model,
           coalesce((v.usage ->> 'input_tokens')::bigint, 0),
           coalesce((v.usage ->> 'output_tokens')::bigint, 0),
           coalesce((v.usage ->> 'cache_read_input_tokens')::bigint, 0),
           coalesce((v.usage ->> 'cache_creation_input_tokens')::bigint, 0),
           f.updated_at
      FROM finished AS f JOIN verdict AS v ON v.id = f.id
     WHERE f.state = 'succeeded' AND v.usage IS NOT NULL
    ON CONFLICT (job_id, kind) DO NOTHING
)
SELECT id, state, attempt FROM finished

-- name: job_leases_expired
-- Lock running jobs whose lease ran out, oldest expiry first (skipping those another reaper
-- holds). No index holds lease_expires_at, so that a heartbeat is a HOT update: the running
-- jobs are read through jobs_running, only the expired ones' (id, lease_expires_at) sorted
-- (whole rows, sorted under the lock, spilled to disk at 50,000 expired), and each row is
-- then locked in that order, rechecked on its newest version, until :limit are held.
SELECT j.*
  FROM (SELECT e.id, e.lease_expires_at
          FROM jobs AS e
         WHERE e.state = 'running' AND e.lease_expires_at < coalesce(:now::timestamptz, now())
         ORDER BY e.lease_expires_at) AS expired
 CROSS JOIN LATERAL (
       SELECT *
         FROM jobs AS j
        WHERE j.id = expired.id
          AND j.state = 'running' AND j.lease_expires_at < coalesce(:now::timestamptz, now())
          FOR UPDATE SKIP LOCKED) AS j
 ORDER BY expired.lease_expires_at
 LIMIT :limit

-- name: job_cancel
-- Cancel: a queued job at once, a running one by request (its lease holder confirms).
UPDATE jobs AS j
   SET state = CASE j.state WHEN 'queued' THEN 'cancelled' ELSE j.state END,
       completed_at = CASE j.state WHEN 'queued' THEN clock.now ELSE j.completed_at END,
       cancel_outcome = CASE j.state WHEN 'queued' THEN 'not_started' ELSE j.cancel_outcome END,
       -- The time the row is written, not the transaction's start: a reconciler's claim that
       -- committed in between stamped reconciled_at later than now(), and the cancel would wait
       -- for the next scheduled check (job_reconcile_claim compares the two).
       cancel_requested_at = clock.stamped,
       updated_at = clock.now,
       event_seq = j.event_seq + 1,
       transition_actor = :actor,
       transition_reason = CASE j.state WHEN 'queued' THEN 'cancelled'
                                ELSE 'cancel_requested' END
  FROM (SELECT coalesce(:now::timestamptz, now()) AS now,
               coalesce(:now::timestamptz, clock_timestamp()) AS stamped) AS clock
 WHERE j.id = :id AND j.tenant_id = :tenant_id
   AND {{cancel_changes}}
RETURNING j.*

-- name: job_record_ignored
-- Log an event that was not applied, under the job's next sequence number.
WITH bumped AS (
    UPDATE jobs SET event_seq = event_seq + 1 WHERE id = :id
    RETURNING id, event_seq, state, created_at
)
INSERT INTO job_events (job_id, seq, from_state, to_state, actor, reason, applied, created_at,
                        job_created_at)
SELECT id, event_seq, state, :to_state, :actor, :reason, false,
       coalesce(:now::timestamptz, now()), created_at
  FROM bumped

-- name: job_expire_due
-- Queued jobs past their start deadline become expired.
WITH clock AS (
    SELECT coalesce(:now::timestamptz, now()) AS now
), due AS (
    SELECT j.id
      FROM jobs AS j, clock
     WHERE j.state = 'queued' AND j.expires_at IS NOT NULL AND j.expires_at <= clock.now
     ORDER BY j.expires_at
     LIMIT :limit
       FOR UPDATE OF j SKIP LOCKED
)
UPDATE jobs AS j
   SET state = 'expired',
       completed_at = clock.now,
       error = jsonb_build_object('code', 'start_timeout', 'type', 'expired', 'message',
                                  'no worker started the job before its start deadline'),
       updated_at = clock.now,
       event_seq = j.event_seq + 1,
       transition_actor = 'reaper',
       transition_reason = 'start_timeout'
  FROM due, clock
 WHERE j.id = due.id
RETURNING j.id

-- fragment: redrive_reset
-- THE reset of every redrive (job_redrive, job_bulk_redrive), in `UPDATE jobs AS j ... FROM
-- clock` setting the transition's reason: a new attempt series (and, if a provider job of it
-- ended, a new provider generation), logged as the :actor's. A new series starts clean: no old
-- cancel request (it would cancel the job at its first heartbeat), and a start deadline as long
-- as the submit's, from now (the old one has passed: the job could never start).
state = 'queued',
attempt = 0,
lost_count = 0,
series = j.series + 1,
provider_generation = j.provider_generation
                      + CASE WHEN j.provider_job_id IS NOT NULL THEN 1 ELSE 0 END,
dead_lettered = false,
run_at = clock.now,
completed_at = NULL,
deadline_at = NULL,
started_at = NULL,
updated_at = clock.now,
event_seq = j.event_seq + 1,
transition_actor = :actor,
cancel_requested_at = NULL,
cancel_outcome = NULL,
cancel_sent_at = NULL,
start_timeout_s = coalesce(j.start_timeout_s, extract(epoch FROM j.expires_at - j.created_at)),
expires_at = clock.now + make_interval(
    secs => coalesce(j.start_timeout_s,
                     extract(epoch FROM j.expires_at - j.created_at))::double precision)

-- name: job_redrive
-- An operator's redrive: a dead-lettered failed job starts a new attempt series (and, if a
-- provider job of it ended, a new provider generation).
UPDATE jobs AS j
   SET {{redrive_reset}},
       transition_reason = 'redrive'
  FROM (SELECT coalesce(:now::timestamptz, now()) AS now) AS clock
 WHERE j.id = :id AND j.tenant_id = :tenant_id AND j.state = 'failed' AND j.dead_lettered
   AND j.purged_at IS NULL  -- a purged job has no input left to send
RETURNING j.*

-- name: outbox_for_job
-- Every outbox row of a job (or batch), read from its partition.
SELECT *
  FROM outbox
 WHERE job_id = :job_id
   AND job_created_at = coalesce((SELECT j.created_at FROM jobs AS j WHERE j.id = :job_id),
                   (SELECT b.created_at FROM batches AS b WHERE b.id = :job_id))
 ORDER BY created_at, event_type, target
