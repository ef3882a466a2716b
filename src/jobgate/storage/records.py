"""Plain records the storage layer takes and returns (besides domain.job's Job and JobEvent)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import date, datetime
from typing import Any

from jobgate import errors
from jobgate.domain.job import Job, NewJob
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


@dataclasses.dataclass(frozen=True, slots=True)
class SubmitOutcome:
    job: Job
    replayed: bool  # True: the key was seen before with the same body; nothing was inserted
    status_code: int  # the status the first submit answered


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


@dataclasses.dataclass(frozen=True, slots=True)
class ClaimPolicy:
    """Who may take worker slots, and how many: per-tenant caps and weights for fair claims."""

    default: TenantShare = TenantShare()
    tenants: Mapping[str, TenantShare] = dataclasses.field(default_factory=dict)  # by tenant id
    blocked_tenants: frozenset[str] = frozenset()  # e.g. over their daily budget

    def share(self, tenant_id: str) -> TenantShare:
        return self.tenants.get(tenant_id, self.default)

    @property
    def capped(self) -> bool:
        """Whether any cap applies (then claims must be serialised to enforce it exactly)."""
        return any(
            share.max_running > 0 or share.max_running_per_key > 0
            for share in (self.default, *self.tenants.values())
        )

    @property
    def keys_capped(self) -> bool:
        """Whether any tenant caps its jobs per concurrency key."""
        return any(
            share.max_running_per_key > 0 for share in (self.default, *self.tenants.values())
        )


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


Row = dict[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class BulkItem:
    job: NewJob
    idempotency: IdempotencyClaim | None = None


# One item's answer: its job (new or replayed) or the refusal of its key.
BulkResult = SubmitOutcome | errors.IdempotencyKeyReused


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
class TenantOverview:
    tenant_id: str
    tenant_name: str
    queued: int
    running: int
    oldest_due_at: datetime | None  # run_at of the longest-waiting claimable job
    dead_lettered: int


@dataclasses.dataclass(frozen=True, slots=True)
class EndpointHealth:
    endpoint_id: str
    tenant_name: str
    url: str
    disabled: bool
    disabled_reason: str | None
    pending: int
    succeeded: int
    failed: int
    last_status_code: int | None
    last_error: str | None
