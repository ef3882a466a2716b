"""Plain records the storage layer takes and returns (besides domain.job's Job and JobEvent)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
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


@dataclasses.dataclass(frozen=True, slots=True)
class HeartbeatResult:
    job_id: str
    cancel_requested: bool


@dataclasses.dataclass(slots=True)
class ReapResult:
    requeued: list[str] = dataclasses.field(default_factory=list)
    failed: list[str] = dataclasses.field(default_factory=list)
    cancelled: list[str] = dataclasses.field(default_factory=list)

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
    input_tokens: int
    output_tokens: int
    created_at: datetime


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


# Given the attempt just lost (1-based), the seconds to wait before the job is claimable again.
RetryDelay = Callable[[int], float]

Row = dict[str, Any]
