"""Prometheus metric objects, registered on the default registry (served by the /metrics route,
or on JOBGATE_METRICS_PORT by processes without the API role).

Labels are low-cardinality by design: never an endpoint or a job id. Per-tenant gauges carry
the tenant's name (bounded by the number of tenants) and are computed from the database when
/metrics is scraped, so every API process reports the same cluster-wide values.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

WEBHOOK_ATTEMPTS = Counter(
    "jobgate_webhook_attempts",
    "Webhook delivery attempts, by outcome (succeeded, failed, refused, timeout, error)",
    ["outcome"],
)
WEBHOOK_DELIVERIES_SUCCEEDED = Counter(
    "jobgate_webhook_deliveries_succeeded",
    "Webhook deliveries that a receiver accepted (2xx)",
)
WEBHOOK_DELIVERIES_FAILED = Counter(
    "jobgate_webhook_deliveries_failed",
    "Webhook deliveries given up (schedule spent, 410 Gone, endpoint disabled or deleted, "
    "URL refused for good; a job.progress not retried, or superseded by the job's end)",
    ["reason"],
)
WEBHOOK_ATTEMPT_SECONDS = Histogram(
    "jobgate_webhook_attempt_seconds",
    "Time from resolving a webhook URL to the receiver's answer",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15),
)


# -- jobs (cluster-wide, from the database at scrape time) -----------------------------------------

JOBS = Gauge(
    "jobgate_jobs",
    "Jobs queued (counted up to 10,000 per tenant: a floor beyond) or running, by tenant",
    ["tenant", "state"],
)
LAGGING_READS = Counter(
    "jobgate_replica_reads",
    "Reads a read replica may answer (status, list, events, a long poll's first read), by who "
    "answered: replica, primary (the caller wrote, or the replica lags or is down), "
    "primary_after_miss, primary_after_error",
    ["answered_by"],
)
QUEUE_OLDEST_AGE_SECONDS = Gauge(
    "jobgate_queue_oldest_age_seconds",
    "How long the longest-waiting claimable job of each tenant has waited (alert on this)",
    ["tenant"],
)
DEAD_LETTERED = Gauge("jobgate_jobs_dead_lettered", "Dead-lettered jobs, by tenant", ["tenant"])
TENANT_SPEND_USD_TODAY = Gauge(
    "jobgate_tenant_spend_usd_today",
    "USD each tenant has spent since UTC midnight, priced with the providers' configured prices",
    ["tenant"],
)

# -- this process ----------------------------------------------------------------------------------

QUEUE_WAIT_SECONDS = Histogram(
    "jobgate_queue_wait_seconds",
    "From claimable (queued, run_at reached) to claimed, on the database clock, by tenant "
    '(at most MAX_TENANT_LABELS names per process; later tenants share tenant="other")',
    ["tenant"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600),
)
PROVIDER_CALL_SECONDS = Histogram(
    "jobgate_provider_call_seconds",
    "Provider call latency, by provider and outcome (succeeded, or the error class)",
    ["provider", "outcome"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
)
ATTEMPTS = Counter(
    "jobgate_attempts", "Attempts that ended, by provider and verdict", ["provider", "verdict"]
)
CONFIG_RELOADS = Counter(
    "jobgate_config_reloads",
    "Configuration file changes this process read: applied, or refused (the old one stays)",
    ["result"],
)
PROVIDER_QUOTA_ERRORS = Counter(
    "jobgate_provider_quota_errors",
    "Provider answers saying the account is out of quota or over a spend limit (alert on any)",
    ["provider", "code"],
)
TRANSITIONS = Counter(
    "jobgate_job_transitions", "Job state transitions this process made", ["to_state"]
)
REAPER_RECLAIMED = Histogram(
    "jobgate_reaper_reclaimed_per_pass",
    "Expired leases one reaper pass reclaimed (a burst means workers are crashing)",
    buckets=(0, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000),
)
BREAKER_STATE = Gauge(
    "jobgate_provider_breaker_state",
    "Per-provider circuit breaker in this process: 0 closed, 1 half-open, 2 open",
    ["provider"],
)
BREAKER_STATES = {"closed": 0, "half_open": 1, "open": 2}
PROVIDER_CONCURRENCY_ALLOWED = Gauge(
    "jobgate_provider_concurrency_allowed",
    "Per-provider concurrency this process allows now: its `concurrency`, shrunk by "
    "latency-aware backpressure",
    ["provider"],
)

# -- operations ------------------------------------------------------------------------------------

# The queue-wait histogram's tenant label is bounded: each process labels the first
# MAX_TENANT_LABELS tenants it sees by name and every later one OTHER_TENANT, so one histogram
# is at most (MAX_TENANT_LABELS + 1) x 17 series per process whatever the number of tenants.
MAX_TENANT_LABELS = 100
OTHER_TENANT = "other"

REAPER_BULK_RECLAIMS = Counter(
    "jobgate_reaper_bulk_reclaims",
    "Reaper passes that reclaimed more leases than JOBGATE_REAPER_WARN_THRESHOLD (workers "
    "crashing in bulk)",
)
REDRIVES = Counter(
    "jobgate_job_redrives",
    "Dead-lettered jobs sent back to the queue, by how (single: POST /v1/jobs/{id}/retry; "
    "bulk: a redrive by filter)",
    ["how"],
)
BULK_ACTION_JOBS = Counter(
    "jobgate_bulk_action_jobs", "Jobs changed by bulk actions by filter, by action", ["action"]
)
HISTORY_PARTITIONS_DROPPED = Counter(
    "jobgate_history_partitions_dropped",
    "Day partitions of the history tables retention dropped (PostgreSQL)",
)
HISTORY_PARTITIONS_BLOCKED = Gauge(
    "jobgate_history_partitions_blocked",
    "Day partitions of the history tables past retention that the last pass could not drop yet"
    " (too many of their rows still kept, or a lock busy; PostgreSQL)",
)
RETENTION_DELETED_ROWS = Counter(
    "jobgate_retention_deleted_rows",
    "Rows retention deleted (JOBGATE_RETENTION_S), by table",
    ["table"],
)
WEBHOOK_ENDPOINTS_FAILING = Gauge(
    "jobgate_webhook_endpoints_failing",
    "Enabled webhook endpoints with a delivery still pending after 3 or more failed attempts, "
    "by tenant",
    ["tenant"],
)
TENANT_TOKENS_TODAY = Gauge(
    "jobgate_tenant_tokens_today",
    "Tokens each tenant has used since UTC midnight (completions minus refunds)",
    ["tenant"],
)
TENANT_DAILY_TOKEN_BUDGET = Gauge(
    "jobgate_tenant_daily_token_budget",
    "Each tenant's daily token budget (only tenants that have one)",
    ["tenant"],
)
TENANT_DAILY_COST_BUDGET_USD = Gauge(
    "jobgate_tenant_daily_cost_budget_usd",
    "Each tenant's daily cost budget in USD (only tenants that have one)",
    ["tenant"],
)

# -- robustness ------------------------------------------------------------------------------------

ROLE_RESTARTS = Counter(
    "jobgate_role_restarts",
    "Roles (worker, reaper, dispatcher, reconciler) restarted inside this process after a crash",
    ["role"],
)
POISON_JOBS = Counter(
    "jobgate_poison_jobs",
    "Jobs (or webhook deliveries) a role could not handle and failed alone, by role",
    ["role"],
)

# -- live output streaming -------------------------------------------------------------------------

OUTPUT_CHUNKS = Counter(
    "jobgate_output_chunks", "Output chunks appended by this process's streaming jobs"
)
OUTPUT_STREAMS_OPEN = Gauge(
    "jobgate_output_streams_open", "Live output streams this API process is serving"
)
STREAM_READERS = Gauge(
    "jobgate_stream_readers",
    "Live stream readers (job output, job events, Responses) this API process is serving",
)
STREAM_FEEDS = Gauge(
    "jobgate_stream_feeds",
    "Jobs this API process follows for its live stream readers (one feed per job, shared)",
)
STREAM_READERS_REFUSED = Counter(
    "jobgate_stream_readers_refused",
    "Live streams refused (429) because the tenant held stream_readers_per_tenant already",
)

# -- shared rate limits ----------------------------------------------------------------------------

RATE_LIMIT_WAITS = Counter(
    "jobgate_rate_limit_waits",
    "Claims held back because a provider's (or model's) shared rpm/tpm limit had no room "
    '(model "" = the provider-wide limit); the jobs stay queued',
    ["provider", "model"],
)
RATE_LIMITED_JOBS = Gauge(
    "jobgate_rate_limited_jobs",
    "Claimable queued jobs waiting for a provider's (or model's) shared rate limit, cluster-wide",
    ["provider", "model"],
)

# -- transports (JOBGATE_TRANSPORT other than `database`) ------------------------------------------

TRANSPORT_PUBLISHED = Counter(
    "jobgate_transport_published",
    '"Job ready" messages published, by reason (ready: a new transition; sweep: still '
    "unclaimed past its republish time, the broker may have lost it)",
    ["transport", "reason"],
)
TRANSPORT_RECEIVED = Counter(
    "jobgate_transport_received",
    "Messages received by workers, by outcome (claimed; deferred: its tenant was at its cap; "
    "dropped: the job was no longer claimable, e.g. a duplicate or a cancelled job; "
    "returned: given back to the broker, the claim having failed, or lost by the worker and "
    "found again; malformed: naming no job, acked as garbage)",
    ["transport", "outcome"],
)
TRANSPORT_REDELIVERIES = Counter(
    "jobgate_transport_redeliveries",
    "Messages the broker delivered more than once (a consumer died or did not ack in time)",
    ["transport"],
)
TRANSPORT_LAG = Gauge(
    "jobgate_transport_lag",
    "Messages waiting in the broker (not yet delivered, or delivered and not acked), as the "
    "relay last read it",
    ["transport"],
)
TRANSPORT_SWEEP_HELD = Gauge(
    "jobgate_transport_sweep_held",
    "1 while the relay's sweep holds because the broker reports a backlog of at least "
    "JOBGATE_TRANSPORT_WINDOW messages (slow, not lossy: republishing would add duplicates)",
    ["transport"],
)
TRANSPORT_UP = Gauge(
    "jobgate_transport_up",
    "1 while this process reaches its broker, 0 during an outage",
    ["transport"],
)
TRANSPORT_FALLBACKS = Counter(
    "jobgate_transport_fallbacks",
    "Times this process's worker turned to claiming from the job table because its broker "
    "was unreachable (JOBGATE_TRANSPORT_FALLBACK=database); /readyz warns while it lasts",
    ["transport"],
)
TRANSPORT_STALLED = Gauge(
    "jobgate_transport_stalled",
    "1 while this process's consumer has had no credit left (RabbitMQ's prefetch, all of it "
    "unacked) for a lease's time while its worker had free slots and messages waited",
    ["transport"],
)


def observe_all(histogram: Any, amounts: Sequence[float]) -> None:
    """`histogram.observe(amount)` for each amount (not NaN) of one labelled histogram, taking
    one lock per bucket reached and one for the sum instead of two per amount: the worker
    observes two histograms per job, on its hottest path. Reads prometheus_client's
    histogram internals (`_upper_bounds`, `_buckets`, `_sum`, as `Histogram.observe` does);
    tests/roles/test_worker_metrics_batch.py holds it to `observe`."""
    if not amounts:
        return
    bounds = histogram._upper_bounds
    counts = [0] * len(bounds)
    for amount in amounts:  # the first bound at or above it, as observe's `amount <= bound`
        counts[bisect.bisect_left(bounds, amount)] += 1
    histogram._sum.inc(sum(amounts))
    for index, count in enumerate(counts):
        if count:
            histogram._buckets[index].inc(count)
