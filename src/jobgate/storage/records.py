"""Plain records the storage layer takes and returns (besides domain.job's Job and JobEvent):
the core's first, then one section per family (schedules, providers, webhooks, batches)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import date, datetime
from typing import Any

from jobgate import errors
from jobgate.domain import frozen
from jobgate.domain.job import Job, JSONObject, NewJob
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Poisoning


@dataclasses.dataclass(frozen=True, slots=True)
class Tenant:
    id: str
    name: str
    webhook_secret: str
    created_at: datetime


@dataclasses.dataclass(frozen=True, slots=True)
class ApiKey:
    id: str
    tenant_id: str
    key_prefix: str
    created_at: datetime
    revoked_at: datetime | None


@dataclasses.dataclass(frozen=True, slots=True)
class IdempotencyClaim:
    """An Idempotency-Key to bind to the job a submit creates."""

    route: str
    key: str
    body_hash: str
    status_code: int
    ttl_s: float


@frozen.record  # one per stored bulk item
class SubmitOutcome:
    job: Job
    replayed: bool  # True: the key was seen before with the same body; nothing was inserted
    status_code: int  # the status the first submit answered


@dataclasses.dataclass(frozen=True, slots=True)
class JobStatus:
    """A status read (Storage.job_status): the job as its views show it and, while it is
    queued, its place in its tenant's line (None otherwise)."""

    job: Job
    queue_position: int | None
    wait: WaitRead | None = None  # while it is queued: what explains its wait (services.waiting)
    queue_position_exact: bool = False  # False: queue_position is a floor (or None)


@dataclasses.dataclass(frozen=True, slots=True)
class JobSearchPage:
    """A job search's page (Storage.job_search): the matching jobs its walk met, newest first,
    and, when the walk reached its bound first, the id of the last job it walked (`walked_to`,
    matching or not), after which the next page's walk starts. None: the walk met every job
    left, or `jobs` is full."""

    jobs: list[Job]
    walked_to: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Finished:
    """A fenced verdict as applied: what the lease holder counts and logs, without the job's
    request and result. `state` is the state written (a retry of a job whose cancel was
    requested is written `cancelled`); `attempt` is after any refund."""

    job_id: str
    state: JobState
    attempt: int


@dataclasses.dataclass(frozen=True, slots=True)
class HeartbeatResult:
    job_id: str
    cancel_requested: bool


@dataclasses.dataclass(slots=True)
class ReapResult:
    requeued: list[str] = dataclasses.field(default_factory=list)
    failed: list[str] = dataclasses.field(default_factory=list)
    cancelled: list[str] = dataclasses.field(default_factory=list)
    poisoned: list[str] = dataclasses.field(default_factory=list)  # among failed: poison_job
    # Every job judged poison in the pass, for the reaper's log line (with its traceback).
    poisonings: list[Poisoning] = dataclasses.field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.requeued) + len(self.failed) + len(self.cancelled)


@dataclasses.dataclass(frozen=True, slots=True)
class UsageEntry:
    job_id: str
    kind: str
    tenant_id: str
    provider: str
    model: str | None
    input_tokens: int  # every input token, cache reads and writes included
    output_tokens: int
    created_at: datetime
    cache_read_tokens: int = 0  # of input_tokens
    cache_write_tokens: int = 0  # of input_tokens


@dataclasses.dataclass(frozen=True, slots=True)
class OutboxEntry:
    id: str
    event_id: str
    tenant_id: str
    job_id: str
    event_type: str
    target: str
    endpoint_id: str | None
    url: str | None
    series: int
    job_status: str
    created_at: datetime
    state: str
    attempts: int
    next_attempt_at: datetime
    last_status_code: int | None
    last_error: str | None
    completed_at: datetime | None


@dataclasses.dataclass(frozen=True, slots=True)
class TenantShare:
    """A tenant's claim on worker slots."""

    max_running: int = 0  # 0: no cap
    weight: float = 1.0
    max_running_per_key: int = 0  # running jobs per concurrency key (0: no cap)
    rpm_per_key: int = 0  # job starts a minute per concurrency key (0: none)

    def tenant_full(self, running: int) -> bool:
        """THE cap rule of every claim: a tenant holding max_running slots gets no more (the
        PostgreSQL claims apply it in SQL, `claim_max_running`)."""
        return self.max_running > 0 and running >= self.max_running

    def key_full(self, running: int) -> bool:
        """THE per-key rule of every claim: a concurrency key holding max_running_per_key
        slots gets no more (PostgreSQL: `claim_key_cap`)."""
        return self.max_running_per_key > 0 and running >= self.max_running_per_key


@dataclasses.dataclass(frozen=True, slots=True)
class ClaimPolicy:
    """Who may take worker slots, and how many: per-tenant caps and weights for fair claims."""

    default: TenantShare = TenantShare()
    tenants: Mapping[str, TenantShare] = dataclasses.field(default_factory=dict)  # by tenant id
    blocked_tenants: frozenset[str] = frozenset()  # e.g. over their daily budget
    # (tenant id, concurrency key) over a daily budget per key -> the limit's name
    blocked_keys: Mapping[tuple[str, str], str] = dataclasses.field(default_factory=dict)

    def share(self, tenant_id: str) -> TenantShare:
        return self.tenants.get(tenant_id, self.default)

    @property
    def capped(self) -> bool:
        """Whether any cap applies (then claims must be serialised to enforce it exactly: a
        claim reads the running counts and the per-key buckets that the one before it wrote)."""
        return self.keys_capped or self.running_capped or self.keys_rated

    @property
    def keys_rated(self) -> bool:
        """Whether any tenant limits its job starts per concurrency key (rpm_per_key)."""
        return any(share.rpm_per_key > 0 for share in self._shares())

    @property
    def keys_limited(self) -> bool:
        """Whether a concurrency key can hold a job back (a cap, a rate or a budget)."""
        return self.keys_capped or self.keys_rated or bool(self.blocked_keys)

    def blocked_key_list(self) -> list[list[str]]:
        """The blocked keys as [tenant id, key] pairs, sorted (for a claim's parameters)."""
        return [[tenant_id, key] for tenant_id, key in sorted(self.blocked_keys)]

    @property
    def running_capped(self) -> bool:
        """Whether any tenant caps its running jobs."""
        return any(share.max_running > 0 for share in self._shares())

    @property
    def keys_capped(self) -> bool:
        """Whether any tenant caps its jobs per concurrency key."""
        return any(share.max_running_per_key > 0 for share in self._shares())

    def _shares(self) -> tuple[TenantShare, ...]:
        return (self.default, *self.tenants.values())


@dataclasses.dataclass(frozen=True, slots=True)
class ClaimRequest:
    """One job_claim or job_claim_by_id call's arguments, as each dialect's claim transaction
    takes them."""

    worker_id: str
    limit: int
    lease_ttl_s: float
    rules: ClaimPolicy
    now: datetime | None
    providers: list[str] | None
    models: list[str] | None = None
    skip_models: list[str] | None = None
    ids: list[str] | None = None  # a claim by id: only these (sorted, distinct)


@dataclasses.dataclass(frozen=True, slots=True)
class LimitOverrides:
    """Limits stored for one tenant by `jobgate tenants set`; None: not overridden."""

    max_running: int | None = None
    max_queued: int | None = None
    weight: float | None = None
    allowed_models: tuple[str, ...] | None = None
    allowed_providers: tuple[str, ...] | None = None
    max_output_tokens: int | None = None
    daily_token_budget: int | None = None
    daily_cost_budget_usd: float | None = None
    max_running_per_key: int | None = None
    rpm_per_key: int | None = None
    daily_token_budget_per_key: int | None = None
    daily_cost_budget_usd_per_key: float | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class QueueLimit:
    """Queue bounds a submit must check exactly before it inserts (None: not checked)."""

    tenant_max: int | None = None
    total_max: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class QueueCounts:
    queued_by_tenant: Mapping[str, int]
    claimed_by_tenant: Mapping[str, int]  # claims ever made, for the drain rate

    @property
    def queued_total(self) -> int:
        return sum(self.queued_by_tenant.values())


@dataclasses.dataclass(frozen=True, slots=True)
class BulkItem:
    job: NewJob
    idempotency: IdempotencyClaim | None = None


# One item's answer: its job (new or replayed) or the refusal of its key.
BulkResult = SubmitOutcome | errors.IdempotencyKeyReused


class Inserted:
    """What one insert (Storage.job_insert) did: `jobs`, the jobs it stored, in the order of
    their items; `results`, one answer per item, in order. Without keys every item is stored,
    and its answer is made only when read (a batch's jobs travel without one per job)."""

    __slots__ = ("_results", "jobs")

    def __init__(self, jobs: list[Job], results: list[BulkResult] | None = None) -> None:
        self.jobs = jobs
        self._results = results

    @classmethod
    def of(cls, results: list[BulkResult]) -> Inserted:
        new = [r.job for r in results if isinstance(r, SubmitOutcome) and not r.replayed]
        return cls(new, results)

    @property
    def results(self) -> list[BulkResult]:
        if self._results is None:
            self._results = [SubmitOutcome(job, False, 202) for job in self.jobs]
        return self._results


@dataclasses.dataclass(frozen=True, slots=True)
class ClaimedById:
    """What a claim by id did with each id it was given."""

    claimed: list[Job]  # now running under a fresh lease of the caller
    deferred: list[str]  # still queued but not claimable now (a cap, a block, not yet due)


@dataclasses.dataclass(frozen=True, slots=True)
class Publication:
    """A "job ready" message to publish: the job, and how often it was published for the same
    transition (1 the first time; more means the sweep found it unclaimed)."""

    job_id: str
    published_count: int


@dataclasses.dataclass(frozen=True, slots=True)
class OutputChunk:
    """One appended batch of output text. `seq` numbers a job's chunks from 1 across all its
    attempts; `generation` is the job's run count when it was written: a chunk whose
    generation differs from the one before it starts the output of a new attempt."""

    job_id: str
    seq: int
    generation: int
    text: str
    created_at: datetime
    # On the first chunk of an attempt that continues the previous one's output: how many
    # characters of that output `text` repeats first (0: the attempt started over).
    continued_chars: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class BulkChunk:
    job_ids: list[str]  # the jobs this chunk changed, in id order
    last_id: str | None  # the cursor for the next chunk (None when nothing was changed)


@dataclasses.dataclass(frozen=True, slots=True)
class RetentionBatch:
    """Rows one retention transaction deleted, by table."""

    jobs: int = 0
    job_events: int = 0
    outbox: int = 0
    webhook_attempts: int = 0
    usage_ledger: int = 0

    def by_table(self) -> dict[str, int]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionDrops:
    """What one pass over the history's day partitions past retention did (PostgreSQL; SQLite
    keeps its history in single tables and has none)."""

    dropped: int = 0  # day partitions detached and dropped
    moved_rows: int = 0  # rows of kept jobs (or pending deliveries) moved to DEFAULT first
    blocked: int = 0  # day partitions past retention kept: too many kept rows, or a lock busy


@dataclasses.dataclass(frozen=True, slots=True)
class UsageDay:
    tenant_id: str
    day: date  # UTC
    provider: str
    model: str  # '' when the ledger had no model
    jobs: int  # completions
    input_tokens: int  # completions minus refunds
    output_tokens: int
    cache_read_tokens: int = 0  # of input_tokens
    cache_write_tokens: int = 0  # of input_tokens


@dataclasses.dataclass(frozen=True, slots=True)
class WalPosition:
    """Where a PostgreSQL server's write-ahead log stands (postgres.engine: wal_position)."""

    in_recovery: bool  # a standby (a streaming replica)
    lsn: int | None  # bytes from 0/0: replayed (standby) or the insert position (primary)


@dataclasses.dataclass(frozen=True, slots=True)
class TenantOverview:
    tenant_id: str
    tenant_name: str
    queued: int  # counted up to ranges.QUEUE_COUNTED: a floor unless queued_exact
    running: int
    oldest_due_at: datetime | None  # run_at of the longest-waiting claimable job
    dead_lettered: int
    queued_exact: bool  # False: `queued` is a floor (the walk stopped at its bound)


@dataclasses.dataclass(frozen=True, slots=True)
class EndpointHealth:
    endpoint_id: str
    tenant_name: str
    url: str
    disabled: bool
    disabled_reason: str | None
    failing: bool  # a delivery still pending after the failing threshold's attempts
    pending: int
    succeeded: int
    failed: int  # deliveries given up
    last_status_code: int | None
    last_error: str | None


# -- schedules: recurring schedules as storage keeps them (POST /v1/schedules) ------------
@dataclasses.dataclass(frozen=True, slots=True)
class Schedule:
    id: str
    tenant_id: str
    cron: str  # five fields, UTC
    template: dict[str, Any]  # a POST /v1/jobs body
    paused: bool
    next_run_at: datetime  # the next slot to fire (the oldest not yet fired)
    created_at: datetime


# -- job tokens: the secrets that sign them (POST /v1/jobs/{id}/tokens) ----------------------
@dataclasses.dataclass(frozen=True, slots=True)
class JobTokenSecret:
    """One generation of the job-token secret: the newest signs new tokens."""

    generation: int
    secret: str  # base64 of 32 random bytes
    revokes_older: bool  # its rotation voided every token the older generations signed
    created_at: datetime


# -- pauses: an operator's hold on the claims of a scope (POST /v1/pauses) -----------------
@dataclasses.dataclass(frozen=True, slots=True)
class Pause:
    """Claims skip the queued jobs this covers: each member it names must match (None
    matches anything; all None: every job)."""

    id: str
    provider: str | None
    model: str | None
    tenant_id: str | None
    reason: str | None
    created_by: str  # the operator who paused
    created_at: datetime


@dataclasses.dataclass(frozen=True, slots=True)
class WaitRead:
    """What the claim would read about one queued job (Storage.job_wait_facts): the database's
    time, the oldest pause covering it, and (when asked) its place in line and the worker
    slots its tenant and its concurrency key hold."""

    job_id: str
    now: datetime
    pause: dict[str, Any] | None  # the oldest covering pause: {"id", "reason"}
    queue_position: int | None  # job_queue_position's walk (when asked)
    running: int | None
    key_running: int | None
    queue_position_exact: bool  # False: queue_position is a floor (the walk's bound), or None


@dataclasses.dataclass(frozen=True, slots=True)
class WaitGroup:
    """Queued jobs alike for every claim rule (Storage.queued_wait_groups): one tenant,
    provider, model, concurrency key (only while a per-key cap applies) and side of their
    run_at, with what the claim would read about them."""

    tenant_id: str
    provider: str
    model: str | None
    concurrency_key: str | None
    scheduled: bool  # run_at is still ahead
    run_at: datetime  # the earliest of the group
    queued: int
    exact: bool  # False: `queued` is a floor (its tenant's line was walked to the bound only)
    now: datetime
    pause: dict[str, Any] | None  # the oldest covering pause: {"id", "reason"}
    running: int | None
    key_running: int | None


# -- providers: background jobs as the reconciler sees them, settlements, and the answer to
# an inbound provider event
@dataclasses.dataclass(frozen=True, slots=True)
class BackgroundJob:
    """A job whose work runs at a provider, with the reconciler's bookkeeping."""

    job: Job
    provider_status: str | None
    reconciled_at: datetime | None  # when a reconciler last took it
    reconcile_checks: int  # status checks so far (drives the backoff)
    reconcile_failures: int  # consecutive failed checks or failed completion handling
    reconcile_error: JSONObject | None  # the last failure: {kind, code, message}
    cancel_sent_at: datetime | None  # when the provider was asked to cancel
    # Set by a reconcile claim, from the database's clock (the host's may be skewed): the
    # claim's time, and whether the job's execution deadline had passed by then.
    checked_at: datetime | None = None
    overdue: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class Settlement:
    """The provider's verdict on a background job, applied only while the job is still running
    at that provider (fenced on the provider job id, no lease)."""

    job_id: str
    provider_job_id: str
    state: JobState  # succeeded | failed | cancelled | queued (a new attempt)
    reason: str
    actor: str
    provider_status: str | None = None
    result: JSONObject | None = None
    error: JSONObject | None = None
    usage: JSONObject | None = None  # {"input_tokens", "output_tokens", ...}: billed once
    cancel_outcome: str | None = None
    dead_lettered: bool = False
    retry_in_s: float = 0.0
    count_attempt: bool = True
    # Cancelled locally while the provider goes on (cancel not supported): keep checking on
    # it so that its result, when it comes, is discarded and refunded.
    watch_in_s: float | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class ReconcileDeferral:
    """Not settled this time: when to look again, and what was learnt."""

    job_id: str
    provider_job_id: str
    reconcile_in_s: float
    provider_status: str | None = None
    failure: JSONObject | None = None  # a failed check: {kind, code, message}
    cancel_sent: bool = False
    progress: float | None = None  # the fraction done the provider reported, if any


@dataclasses.dataclass(frozen=True, slots=True)
class ProviderEventOutcome:
    duplicate: bool  # the event id was seen before: acknowledged, not processed again
    job: Job | None  # the job the event is about, if known yet


# -- webhooks: endpoints, claimed deliveries and their attempts ---------------------------
ENDPOINT_ACTIVE = "active"
ENDPOINT_DISABLED = "disabled"
ENDPOINT_MISSING = "missing"  # deleted after the delivery was written


@dataclasses.dataclass(frozen=True, slots=True)
class WebhookEndpoint:
    id: str
    tenant_id: str
    url: str
    description: str
    event_types: tuple[str, ...]  # empty: every terminal event
    include_result: bool
    disabled: bool
    disabled_reason: str | None
    secret: str
    previous_secret: str | None  # still signs until previous_secret_expires_at
    previous_secret_expires_at: datetime | None
    created_at: datetime
    updated_at: datetime
    progress_interval_s: float = 5.0  # job.progress: at most one per job per this many seconds


@dataclasses.dataclass(frozen=True, slots=True)
class NewWebhookEndpoint:
    id: str
    tenant_id: str
    url: str
    secret: str
    description: str = ""
    event_types: tuple[str, ...] = ()
    include_result: bool = False
    disabled: bool = False
    progress_interval_s: float = 5.0


@dataclasses.dataclass(frozen=True, slots=True)
class EndpointChanges:
    """A partial update; None leaves a field as it is."""

    url: str | None = None
    description: str | None = None
    event_types: tuple[str, ...] | None = None
    include_result: bool | None = None
    disabled: bool | None = None
    progress_interval_s: float | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Delivery:
    """An outbox row claimed under a lease, with what sending it needs."""

    entry: OutboxEntry  # attempts already counts this attempt
    lease_token: str
    url: str | None  # None when the endpoint is gone
    secrets: tuple[str, ...]  # the current secret, then the previous one during its grace
    include_result: bool
    endpoint_state: str  # ENDPOINT_ACTIVE | ENDPOINT_DISABLED | ENDPOINT_MISSING
    # The row's partition key on PostgreSQL (its job's or batch's created_at), so that
    # recording or releasing it reads one day's partition; None where the outbox is not
    # partitioned (SQLite).
    job_created_at: datetime | None = None

    @property
    def attempt(self) -> int:
        return self.entry.attempts

    @property
    def limit_key(self) -> str:
        """What the per-endpoint concurrency cap counts: an endpoint, or a per-job URL."""
        return self.entry.endpoint_id or f"url:{self.entry.url or ''}"


@dataclasses.dataclass(frozen=True, slots=True)
class DeliveryOutcome:
    """The result of one claimed delivery, recorded fenced on its lease token."""

    state: str  # pending (retry at retry_in_s) | succeeded | failed
    attempted: bool  # False: nothing was sent (endpoint disabled or deleted); no attempt row
    status_code: int | None = None
    latency_ms: int = 0
    error: str | None = None
    retry_in_s: float = 0.0
    disable_endpoint: str | None = None  # a reason: disable the endpoint (410 Gone)


@dataclasses.dataclass(frozen=True, slots=True)
class DeliveryAttempt:
    id: str
    outbox_id: str
    event_id: str
    job_id: str
    target: str
    attempt: int
    status_code: int | None
    latency_ms: int
    error: str | None
    succeeded: bool
    created_at: datetime


# -- files and batches (OpenAI's Batch API) ----------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class FileRecord:
    id: str
    tenant_id: str
    purpose: str
    filename: str
    bytes: int
    lines: int
    status: str
    created_at: datetime
    batch_id: str | None = None  # a result file: the batch that writes it
    expires_at: datetime | None = None  # then retention deletes it (None: never)


@dataclasses.dataclass(frozen=True, slots=True)
class FileUsage:
    """What a tenant keeps uploaded: its files and their bytes (result files not counted)."""

    files: int
    bytes: int


@dataclasses.dataclass(frozen=True, slots=True)
class FileChunk:
    seq: int
    first_line: int
    line_count: int
    data: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class BatchRecord:
    id: str
    tenant_id: str
    status: str
    endpoint: str
    input_file_id: str
    completion_window: str
    metadata: dict[str, Any] | None
    priority: int
    total: int
    expanded_chunks: int
    final_status: str | None
    completed_count: int | None
    failed_count: int | None
    output_file_id: str | None
    error_file_id: str | None
    errors: dict[str, Any] | None
    created_at: datetime
    expires_at: datetime
    in_progress_at: datetime | None
    finalizing_at: datetime | None
    completed_at: datetime | None
    failed_at: datetime | None
    expired_at: datetime | None
    cancelling_at: datetime | None
    cancelled_at: datetime | None
    lease_token: str | None = None  # the batches role's fence while it holds the batch
    failures: int = 0  # passes in a row that failed on the batch
    model: str | None = None  # the one model its lines name (known once validated)
    usage: dict[str, Any] | None = None  # its lines' usage summed, frozen when it ends


@dataclasses.dataclass(frozen=True, slots=True)
class NewBatchItem:
    line: int
    custom_id: str
    job_id: str | None
    error: dict[str, Any] | None = None
    # A line sent in a provider-native batch (no job): its provider, and the body it is sent
    # with (the routed model in it).
    provider: str | None = None
    request: dict[str, Any] | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class BatchChunk:
    """One input chunk of a batch expanded: its new jobs and every one of its lines (each
    naming its job, or why it was refused), stored together, and the cursor moved past it."""

    batch_id: str
    lease_token: str
    jobs: Sequence[NewJob]
    items: Sequence[NewBatchItem]
    expanded_chunks: int


@dataclasses.dataclass(frozen=True, slots=True)
class ResultFile:
    """A result file a batches role wrote (invisible until the batch ends with it)."""

    id: str
    bytes: int
    lines: int


@dataclasses.dataclass(frozen=True, slots=True)
class BatchEnding:
    """How a finalizing batch ends: its final status and counts, its result files, the
    webhook event it sends; written together while `lease_token` holds it."""

    batch_id: str
    tenant_id: str
    lease_token: str
    status: str
    completed_count: int
    failed_count: int
    output: ResultFile | None
    error: ResultFile | None
    usage: dict[str, Any] | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class BatchItemResult:
    """A line of a batch with its job as it stands (job fields None: refused, or deleted)."""

    line: int
    custom_id: str
    job_id: str | None
    item_error: dict[str, Any] | None
    state: str | None
    result: dict[str, Any] | None
    error: dict[str, Any] | None
    provider: str | None  # a native line's provider (None: a job's line)
    outcome: str | None  # a native line's end: succeeded | failed | not_run (None: not yet)
    result_line: dict[str, Any] | None  # its output or error file line, without custom_id


@dataclasses.dataclass(frozen=True, slots=True)
class BatchCounts:
    items: int  # lines expanded so far
    completed: int
    failed: int  # failed jobs and lines refused at expansion
    live: int  # jobs queued or running
    input_tokens: int = 0  # the lines' usage so far, summed
    output_tokens: int = 0
    cached_tokens: int = 0


# -- conversations: OpenAI's Conversations API (POST /v1/conversations) ----------------------
@dataclasses.dataclass(frozen=True, slots=True)
class Conversation:
    id: str
    tenant_id: str
    metadata: dict[str, Any]
    created_at: datetime


@dataclasses.dataclass(frozen=True, slots=True)
class ProviderBatch:
    """One part of a batch sent as a provider batch (domain.provider_batches): `lines` are the
    caller's line numbers it carries; `provider_batch_id` is None from the intent until the
    create's answer, or a listing of the provider's batches, names it."""

    part_key: str
    batch_id: str
    provider: str
    lines: tuple[int, ...]
    provider_batch_id: str | None
    created_at: datetime
    recorded_at: datetime | None
    status: str | None  # the provider batch's status when last read (None: not read yet)
    request_counts: dict[str, Any] | None  # {total, completed, failed} when last read
    collected_at: datetime | None  # its lines read back into the batch (it has ended)


@dataclasses.dataclass(frozen=True, slots=True)
class NativeLine:
    """A line of a batch sent in a provider-native batch: its provider and request body."""

    line: int
    provider: str
    request: dict[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class NativeResult:
    """How a native line ended: `outcome` succeeded, failed or not_run, its output or error
    file line (without custom_id), and its usage."""

    line: int
    outcome: str
    result_line: dict[str, Any]
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class PartEnding:
    """An ended part read back: its lines' results, the provider's last status and counts,
    and its usage billed once (a ledger row named by the part's key) at the batch price."""

    part_key: str
    batch_id: str
    tenant_id: str
    lease_token: str
    status: str
    request_counts: dict[str, Any]
    results: Sequence[NativeResult]
    provider: str
    model: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class ConversationItem:
    """One item of a conversation, as the Conversations API answers it (`item`), at its
    place (`position` orders a conversation's items; numbers may skip)."""

    conversation_id: str
    position: int
    id: str
    item: dict[str, Any]
    response_id: str | None  # the response whose turn added it (None: added directly)
    created_at: datetime
