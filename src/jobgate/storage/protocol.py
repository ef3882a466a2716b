"""The Storage contract. Both backends (SQLite, PostgreSQL) implement it and pass one test suite.

Rules every method keeps:
- Each method is one short transaction. No method waits on anything but the database.
- Methods that take `now` use it as the current time; `None` means the database's clock, which
  is the authority for leases in production (a host with a skewed clock cannot reclaim early).
- Writes by a lease holder are fenced: `WHERE id = :id AND lease_token = :token AND
  state = 'running'`. A fenced single write that matches nothing raises errors.LeaseLost; batch
  variants report it per item.
- Every applied transition appends a job_events row and, when the new state emits an event,
  its outbox rows, in the same transaction. Transitions never move a terminal job.
- Driver errors leave as errors.StorageUnavailable (cannot reach the database) or
  errors.StorageError, with the driver's exception as the cause.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from jobgate.domain.job import Job, JobEvent, Lease, NewJob
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish, RetryDelay
from jobgate.storage.admin_protocol import AdminStore
from jobgate.storage.batch_protocol import BatchStore
from jobgate.storage.batches_protocol import BatchesStore, FilesStore
from jobgate.storage.bulk_insert_protocol import BulkInsertStore
from jobgate.storage.bulk_protocol import BulkStore
from jobgate.storage.changes import ChangeHub
from jobgate.storage.console_protocol import ConsoleStore
from jobgate.storage.limits_protocol import LimitsStore
from jobgate.storage.providers_protocol import ProviderStore
from jobgate.storage.rate_limits_protocol import RateLimitStore
from jobgate.storage.records import (
    ApiKey,
    ClaimPolicy,
    Finished,
    HeartbeatResult,
    IdempotencyClaim,
    OutboxEntry,
    QueueLimit,
    ReapResult,
    SubmitOutcome,
    Tenant,
    UsageEntry,
)
from jobgate.storage.retention_protocol import RetentionStore
from jobgate.storage.roles_protocol import RolesStore
from jobgate.storage.schedules_protocol import ScheduleStore
from jobgate.storage.sessions_protocol import SessionStore
from jobgate.storage.signals_protocol import SignalStore
from jobgate.storage.streams_protocol import OutputStreamStore
from jobgate.storage.transport_protocol import TransportStore
from jobgate.storage.webhooks_protocol import WebhookStore


class LifecycleStore(Protocol):
    dialect: str
    changes: ChangeHub  # in-process wake-ups; fed by this process's writes and, on PG, NOTIFY

    async def open(self) -> None:
        """Connect. Idempotent."""
        ...

    async def close(self) -> None: ...

    async def migrate(self) -> list[int]:
        """Apply pending migrations under a lock (safe from several processes); return them."""
        ...

    async def schema_version(self) -> int:
        """The highest applied migration, 0 on an empty database."""
        ...

    async def ping(self) -> None:
        """Raise errors.StorageUnavailable unless the database answers."""
        ...

    async def listen(self) -> None:
        """Start feeding `changes` from other processes (PostgreSQL LISTEN); no-op on SQLite."""
        ...

    async def database_now(self) -> datetime:
        """The database's clock."""
        ...


class TenantStore(Protocol):
    async def tenant_create(
        self, *, tenant_id: str, name: str, webhook_secret: str, now: datetime | None = None
    ) -> Tenant:
        """Raise errors.Conflict when the name is taken."""
        ...

    async def tenant_get(
        self, *, tenant_id: str | None = None, name: str | None = None
    ) -> Tenant | None: ...

    async def tenant_list(self) -> list[Tenant]: ...

    async def api_key_create(
        self,
        *,
        key_id: str,
        tenant_id: str,
        key_hash: str,
        key_prefix: str,
        now: datetime | None = None,
    ) -> ApiKey:
        """Store a key's hash (never the key)."""
        ...

    async def api_key_tenant(self, *, key_hash: str) -> Tenant | None:
        """The tenant owning a live (unrevoked) key with this hash."""
        ...

    async def api_key_list(self, *, tenant_id: str) -> list[ApiKey]: ...

    async def api_key_revoke(self, *, key_id: str, now: datetime | None = None) -> bool:
        """Idempotent; False when no such key."""
        ...


class JobStore(Protocol):
    async def job_insert(
        self,
        *,
        job: NewJob,
        idempotency: IdempotencyClaim | None = None,
        queue_limit: QueueLimit | None = None,
        now: datetime | None = None,
    ) -> SubmitOutcome:
        """Insert a queued job, its first event and its idempotency key in one transaction.

        With `queue_limit`, count the tenant's (and everyone's) queued jobs and raise
        errors.QueueFull (retry_after_s 0: the caller knows the drain rate) at the bound,
        storing nothing; the count and the insert are decided together, so that concurrent
        inserts (from any process) never pass the bound. A replay of a bound key is answered
        even when the queue is full.

        A live key with the same body hash answers the existing job (replayed=True) and inserts
        nothing; with another hash raises errors.IdempotencyKeyReused; while another transaction
        holds the key for longer than a short lock timeout, errors.IdempotencyInProgress.
        An expired key is replaced.
        """
        ...

    async def job_get(self, *, job_id: str, tenant_id: str | None = None) -> Job | None:
        """None when missing or owned by another tenant (when tenant_id is given)."""
        ...

    async def job_list(
        self,
        *,
        tenant_id: str,
        states: Sequence[JobState] | None = None,
        dead_lettered: bool | None = None,
        after: str | None = None,
        limit: int = 20,
    ) -> list[Job]:
        """Newest first; `after` is the id of the last job of the previous page."""
        ...

    async def job_events(
        self, *, job_id: str, after_seq: int = 0, limit: int = 1000
    ) -> list[JobEvent]:
        """The log in sequence order, events with seq > after_seq."""
        ...

    async def job_claim(
        self,
        *,
        worker_id: str,
        limit: int,
        lease_ttl_s: float,
        providers: Sequence[str] | None = None,
        policy: ClaimPolicy | None = None,
        now: datetime | None = None,
        models: Sequence[str] | None = None,
        skip_models: Sequence[str] | None = None,
    ) -> list[Job]:
        """Move up to `limit` claimable jobs (queued, run_at <= now) to running under a fresh
        lease token each. Across tenants the order is weighted fair share (domain.fairness:
        the tenant furthest below its share first); within a tenant (priority, run_at, id).
        No tenant exceeds its cap in `policy`, across every worker process (claims are
        serialised while a cap applies); blocked tenants get nothing. Never returns a job twice
        for concurrent callers (SKIP LOCKED on PostgreSQL, one writer on SQLite). `models`
        takes only jobs for those models, `skip_models` none of those (rate-limited models
        are claimed apart, domain.rate_limits); a concurrency key at its tenant's
        max_running_per_key gets no more slots."""
        ...

    async def job_heartbeat(
        self, *, leases: Sequence[Lease], lease_ttl_s: float, now: datetime | None = None
    ) -> list[HeartbeatResult]:
        """Extend the leases still held; a lease missing from the answer is lost."""
        ...

    async def job_finish_many(
        self, *, finishes: Sequence[Finish], now: datetime | None = None
    ) -> list[Finished | None]:
        """Apply each fenced verdict, all in one transaction; the answer is in the order of
        `finishes`: what was written, or None where the lease was lost (a stale token, or the
        job is no longer running), in which case nothing was written for that job."""
        ...

    async def job_finish(self, *, finish: Finish, now: datetime | None = None) -> Job:
        """One fenced verdict, answered with the whole job as written; raises
        errors.LeaseLost when the lease is gone."""
        ...

    async def job_release(
        self, *, leases: Sequence[Lease], reason: str, now: datetime | None = None
    ) -> list[str]:
        """Give held jobs back at once (graceful shutdown): queued again with the attempt
        refunded, or cancelled if a cancel was requested. Returns the released ids."""
        ...

    async def job_cancel(
        self, *, job_id: str, tenant_id: str, actor: str, now: datetime | None = None
    ) -> Job | None:
        """queued -> cancelled at once; running -> cancel_requested_at set (the lease holder
        confirms); terminal -> unchanged. Idempotent. None when not found."""
        ...

    async def job_record_ignored(
        self,
        *,
        job_id: str,
        to_state: JobState,
        actor: str,
        reason: str,
        now: datetime | None = None,
    ) -> None:
        """Log an event that was not applied (late, duplicate, fenced off)."""
        ...

    async def job_reap_expired(
        self, *, limit: int, retry_delay: RetryDelay, now: datetime | None = None
    ) -> ReapResult:
        """Running jobs whose lease expired: cancelled if a cancel was requested; failed with
        deadline_exceeded past their deadline; failed (dead-lettered, worker_lost or
        worker_lost_repeatedly) when attempts are spent; else queued again after
        retry_delay(attempt). Safe to run from several processes at once."""
        ...

    async def job_expire_due(self, *, limit: int, now: datetime | None = None) -> list[str]:
        """Queued jobs past their start deadline -> expired."""
        ...

    async def job_redrive(
        self, *, job_id: str, tenant_id: str, actor: str, now: datetime | None = None
    ) -> Job | None:
        """A dead-lettered failed job -> queued with a fresh attempt series. errors.Conflict
        if the job is not dead-lettered; None when not found."""
        ...

    async def job_purge(
        self, *, job_id: str, tenant_id: str, now: datetime | None = None
    ) -> Job | None:
        """Erase input and result, leaving a tombstone (the row, its log, its metadata)."""
        ...

    async def usage_for_job(self, *, job_id: str) -> list[UsageEntry]: ...

    async def outbox_for_job(self, *, job_id: str) -> list[OutboxEntry]: ...


class Storage(
    LifecycleStore,
    TenantStore,
    JobStore,
    LimitsStore,
    RateLimitStore,
    ScheduleStore,
    WebhookStore,
    AdminStore,
    ProviderStore,
    BatchStore,
    RolesStore,
    SessionStore,
    BulkStore,
    RetentionStore,
    SignalStore,
    OutputStreamStore,
    BulkInsertStore,
    FilesStore,
    BatchesStore,
    ConsoleStore,
    TransportStore,
    Protocol,
):
    """Everything jobgate keeps. Feature stores add their protocol to this list."""
