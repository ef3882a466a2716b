"""Plain records the storage layer takes and returns (besides domain.job's Job and JobEvent)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from jobgate.domain.job import Job, JSONObject, Lease
from jobgate.domain.states import JobState


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
class Finish:
    """A lease holder's verdict on its job; applied only while the lease token still matches."""

    lease: Lease
    state: JobState  # succeeded | failed | cancelled | queued (a retry)
    reason: str
    result: JSONObject | None = None
    error: JSONObject | None = None
    usage: JSONObject | None = None  # {"input_tokens", "output_tokens", ...}
    retry_in_s: float = 0.0  # for a retry: delay before the job is claimable again
    count_attempt: bool = True  # False: the attempt is refunded (rate limit, shutdown)
    dead_lettered: bool = False
    cancel_outcome: str | None = None
    creation_outcome: str | None = None
    actor: str = "worker"
    lost: bool = False  # the reaper's verdict on a worker that stopped heartbeating
    provider_request_id: str | None = None  # the attempt's `x-request-id` / `request-id`


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
class ClaimRequest:
    """One job_claim call's arguments, as each dialect's claim transaction takes them."""

    worker_id: str
    limit: int
    lease_ttl_s: float
    rules: ClaimPolicy
    now: datetime | None
    providers: list[str] | None
    models: list[str] | None
    skip_models: list[str] | None


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


# Given the attempt just lost (1-based), the seconds to wait before the job is claimable again.
RetryDelay = Callable[[int], float]

Row = dict[str, Any]
