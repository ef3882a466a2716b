"""The Storage contract. Both backends (SQLite, PostgreSQL) implement it and pass one test suite.
This module holds the rules, the job-queue areas and `Storage` (every area);
`storage.feature_protocol` holds the areas beside the queue (webhooks, schedules, batches, ...).

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

from collections.abc import Iterable, Sequence
from datetime import date, datetime
from typing import Protocol

from jobgate.domain import costs, job_search, progress
from jobgate.domain.job import Job, JobEvent, JSONObject, Lease, NewJob
from jobgate.domain.job_search import JobSearch
from jobgate.domain.rate_limits import Bucket, Take
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Finish, RetryDelay
from jobgate.storage.feature_protocol import (
    AdminStore,
    BatchesStore,
    BatchReadStore,
    BulkActionsStore,
    ConsoleStore,
    ConversationStore,
    DeliveryStore,
    FilesStore,
    ProviderBatchStore,
    RetentionStore,
    ScheduleStore,
    SessionStore,
    SignalStore,
    WebhookEndpointStore,
    WebhookStore,
)
from jobgate.storage.records import (
    ApiKey,
    BackgroundJob,
    ClaimedById,
    ClaimPolicy,
    Finished,
    HeartbeatResult,
    IdempotencyClaim,
    Inserted,
    JobSearchPage,
    JobStatus,
    JobTokenSecret,
    LimitOverrides,
    OutboxEntry,
    OutputChunk,
    Pause,
    ProviderEventOutcome,
    Publication,
    QueueCounts,
    QueueLimit,
    ReapResult,
    ReconcileDeferral,
    Settlement,
    Tenant,
    UsageEntry,
    WaitGroup,
    WaitRead,
)
from jobgate.wakeups import ChangeHub

# The request's members a job's views read (services.output_progress: whether it streams, its
# output cap); `job_view` may leave out every other one.
VIEW_REQUEST_MEMBERS: tuple[str, ...] = ("stream", *progress.OUTPUT_CAPS)


class DatabaseClock(Protocol):
    """The database's clock, the authority for leases and schedules."""

    async def database_now(self) -> datetime: ...


class ChangeFeed(Protocol):
    """Where the loops and long polls of this process hear of changes."""

    changes: ChangeHub  # in-process wake-ups; fed by this process's writes and, on PG, NOTIFY


class LifecycleStore(DatabaseClock, ChangeFeed, Protocol):
    dialect: str

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
        """Start feeding `changes` with other processes' commits (PostgreSQL: LISTEN; SQLite: a
        poll of the file's data version). Idempotent."""
        ...


class TenantReadStore(Protocol):
    """Tenants as the roles that label or limit them read them."""

    async def tenant_get(
        self, *, tenant_id: str | None = None, name: str | None = None
    ) -> Tenant | None: ...

    async def tenant_list(self) -> list[Tenant]: ...


class TenantStore(TenantReadStore, Protocol):
    async def tenant_create(
        self, *, tenant_id: str, name: str, webhook_secret: str, now: datetime | None = None
    ) -> Tenant:
        """Raise errors.Conflict when the name is taken."""
        ...

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


class JobReadStore(Protocol):
    """Reading a job, its log and what it caused (usage, outbox rows)."""

    async def job_get(self, *, job_id: str, tenant_id: str | None = None) -> Job | None:
        """None when missing or owned by another tenant (when tenant_id is given)."""
        ...

    async def job_view(self, *, job_id: str, tenant_id: str) -> Job | None:
        """The job as its views show it: `job_get` for the tenant, except that its `request`
        may hold only VIEW_REQUEST_MEMBERS (those it has, nulls left out): a prompt can be
        hundreds of kilobytes, and a status read or long poll never shows it."""
        ...

    async def job_status(
        self, *, job_id: str, tenant_id: str, now: datetime | None = None
    ) -> JobStatus | None:
        """What a status read shows: `job_view`, and for a queued job its place in its
        tenant's line (`job_queue_position`'s answer, and whether it is exact or a floor),
        read together (one statement)."""
        ...

    async def job_without_input(self, *, job_id: str, tenant_id: str) -> Job | None:
        """The job as a Response renders it: `job_get` for the tenant, except that a request
        of over 2 KB may lack its `input` member (the prompt; a Response shows the request's
        settings, never its input)."""
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
        """Newest first; `after` is the id of the last job of the previous page. Each job as
        `job_view` reads it (its request may hold only VIEW_REQUEST_MEMBERS). One read of
        jobs_by_tenant. Raises InvalidRequest for an `after` that is not one of the tenant's
        jobs."""
        ...

    async def job_search(
        self,
        *,
        tenant_id: str,
        search: JobSearch,
        states: Sequence[JobState] | None = None,
        dead_lettered: bool | None = None,
        after: str | None = None,
        limit: int = 20,
        walk_limit: int = job_search.WALK_ROWS,
    ) -> JobSearchPage:
        """The jobs after `after` matching every criterion of `search` (and `states`,
        `dead_lettered`), newest first, each as `job_view` reads it: `created_after`
        inclusive, `created_before` exclusive, `metadata` pairs each a top-level member of
        the job's metadata with this string value. Bounded: it walks at most `walk_limit` of
        the tenant's jobs in the created range (jobs_by_tenant; no index per criterion, which
        every claim and finish would write), so a page may hold fewer than `limit` jobs, none
        at all, with `walked_to` saying where the next walk starts. A metadata search on
        PostgreSQL reads the GIN index jobs_by_metadata instead and is never partial. Raises
        InvalidRequest for an `after` that is not one of the tenant's jobs."""
        ...

    async def job_events(
        self, *, job_id: str, after_seq: int = 0, limit: int = 1000
    ) -> list[JobEvent]:
        """The log in sequence order, events with seq > after_seq."""
        ...

    async def usage_for_job(self, *, job_id: str) -> list[UsageEntry]: ...

    async def outbox_for_job(self, *, job_id: str) -> list[OutboxEntry]: ...


class JobLeaseStore(Protocol):
    """The lease holder's part: claims, heartbeats and fenced verdicts (the worker)."""

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


class JobLogStore(Protocol):
    """Logging what was not applied, by whoever received it (worker, reconciler, provider
    events)."""

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


class JobReapStore(Protocol):
    """Reclaiming expired leases and expiring queued jobs past their start deadline (the reaper)."""

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


class JobStore(JobReadStore, JobLeaseStore, JobLogStore, JobReapStore, Protocol):
    """Every job area, plus submitting one job and the tenant's actions on it (cancel, redrive,
    purge)."""

    async def job_insert(
        self,
        *,
        chunks: Iterable[Sequence[NewJob]],
        keys: Sequence[IdempotencyClaim | None] | None = None,
        queue_limit: QueueLimit | None = None,
        now: datetime | None = None,
    ) -> Inserted:
        """Insert queued jobs, their first events and their idempotency keys in one
        transaction: all of them or none. The only way in: a submit is a call of one job, a
        batch one chunk, a streamed bulk many chunks. `chunks` is read lazily: a dialect may
        insert one chunk while the next is made (PostgreSQL does, without keys or bounds); an
        exception raised while making a chunk rolls back what was inserted and propagates as
        is. `keys`: one per job of every chunk, in order (None: the job has no key).

        Each key is decided by domain.idempotency.decide: a key not bound binds to its first
        item (inserted); a live key with the same body hash answers the bound job (replayed,
        nothing inserted); with another body hash errors.IdempotencyKeyReused in its item's
        place, the other items unaffected. An expired key is replaced. While another
        transaction holds a key past a short lock timeout, raises
        errors.IdempotencyInProgress with nothing stored. Safe to retry whole: every keyed
        item replays. Without keys, a duplicate id is refused (errors.StorageError).

        With `queue_limit`, the new jobs are counted with the tenant's (and everyone's) queued
        jobs, and errors.QueueFull (retry_after_s 0: the caller knows the drain rate) is raised
        at a bound, storing nothing; the count and the insert are decided together, so that
        concurrent inserts (from any process) never pass the bound. A replay is answered even
        when the queue is full.
        """
        ...

    async def job_cancel(
        self, *, job_id: str, tenant_id: str, actor: str, now: datetime | None = None
    ) -> Job | None:
        """queued -> cancelled at once; running -> cancel_requested_at set (the lease holder
        confirms); terminal -> unchanged. Idempotent. None when not found."""
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


class TransportStore(Protocol):
    """Storage for transports: claiming the job a "job ready" message names, and the
    publication ledger the relay and its sweep read."""

    async def job_claim_by_id(
        self,
        *,
        worker_id: str,
        job_ids: Sequence[str],
        lease_ttl_s: float,
        providers: Sequence[str] | None = None,
        policy: ClaimPolicy | None = None,
        now: datetime | None = None,
    ) -> ClaimedById:
        """Move the named jobs that are claimable (queued, run_at <= now, before their start
        deadline, of `providers` when given) to running under a fresh lease token each, like
        job_claim: no tenant exceeds its cap in `policy` (nor a concurrency key its
        max_running_per_key) across every worker process, blocked
        tenants get nothing, and within a tenant over its cap the best (priority, run_at, id)
        go first. Never leases a job twice; an id that is not claimable is answered, never
        raised: deferred when still queued, else left out (a duplicate message is harmless)."""
        ...

    async def transport_publish_due(
        self,
        *,
        limit: int,
        republish_after_s: float,
        window: int | None = None,
        policy: ClaimPolicy | None = None,
        now: datetime | None = None,
        skip_providers: Sequence[str] | None = None,
        sweep: bool = True,
    ) -> list[Publication]:
        """Record, and answer, up to `limit` ready jobs (queued, due, before their start
        deadline) that need a message: never published; published for an earlier transition
        (a retry, a reclaim, a redrive moved them since); deferred (transport_defer) and past
        their delay; or still unclaimed at their republish time (the sweep: the message is
        presumed lost). A message is outstanding from its publication until its job is
        claimed, moves on or is deferred, whether or not it is due for the sweep. With
        `window`, the jobs that add a message (all but the sweep's) are no more than the
        window leaves free, chosen by weighted fair share across tenants (`policy`'s
        weights; a tenant's running jobs and outstanding messages count against it), as
        job_claim chooses; the sweep replaces messages the window already counts, so a full
        window never stops it. Each is answered by one caller only (safe from several
        relays, which may together exceed the window by a batch); the caller publishes after
        this commits, so a crash in between delays a message by `republish_after_s` (the
        sweep) but never loses it. Jobs of `skip_providers` (the rate-limited ones, claimed
        from the table) are never answered. With `sweep` off, jobs whose message is
        outstanding are not answered again, whatever their republish time (deferred jobs
        still are)."""
        ...

    async def transport_defer(
        self, *, job_ids: Sequence[str], delay_s: float, now: datetime | None = None
    ) -> None:
        """Publish these jobs again `delay_s` from now if they are still ready then: they
        have no message in the broker (one arrived while the job's tenant was at its cap and
        was consumed, or the publish failed), so until published again they hold no place in
        transport_publish_due's window. Idempotent."""
        ...


class OutputStreamStore(Protocol):
    """Storage for live output streaming: the durable output log of running jobs. The lease holder
    appends a job's output deltas in small batches; any API process reads them after a sequence
    number while the job runs and after it finished."""

    async def job_output_append(
        self, *, lease: Lease, text: str, continued_chars: int = 0, now: datetime | None = None
    ) -> OutputChunk:
        """Append `text` as the job's next chunk, fenced on the lease (the job must be running
        under this token): zero rows raises errors.LeaseLost and stores nothing.
        `continued_chars` (> 0 only on an attempt's first chunk): the attempt continues the
        previous one's output and `text` begins with that many characters of it. Not
        idempotent: a retry after an unknown outcome may store the text twice, so callers
        retry only errors raised before the statement ran. Wakes the job's stream readers in
        every process (NOTIFY on PostgreSQL; in-process and data_version polling on SQLite)."""
        ...

    async def job_output_read(
        self, *, job_id: str, after_seq: int = 0, limit: int = 1000
    ) -> list[OutputChunk]:
        """The job's chunks with seq > after_seq, in order, at most `limit`. No tenant check:
        the caller has read the job first."""
        ...

    async def job_output_chars(self, *, job_id: str, generation: int) -> int:
        """The characters streamed by the job's attempt `generation` (its run_count), summed
        by the database. No tenant check: the caller has read the job first."""
        ...

    async def outbox_progress_arm(self, *, job_id: str, now: datetime | None = None) -> int:
        """Arm the running job's `job.progress` delivery to each enabled endpoint of its tenant
        that lists that event type: a new outbox row, or a sent (or dropped) one made pending
        again under a new event id, due once the endpoint's `progress_interval_s` has passed
        since its last send. A pending row is left as it is (its body is built when it is
        sent, so it carries the newest progress). Answers the rows armed; none for a job that
        is not running. Idempotent within an interval."""
        ...


class BackgroundStartStore(Protocol):
    """Handing a job to a provider that runs it on its side (background mode, in the worker)."""

    async def job_provider_submitting(self, *, lease: Lease, now: datetime | None = None) -> None:
        """Fenced on the lease: a create is about to be sent (phase `submitting`,
        creation_outcome `sending`). If the worker dies before job_background_accept, the next
        run of the job sees `sending` and knows a provider job may exist. Raises
        errors.LeaseLost."""
        ...

    async def job_background_accept(
        self,
        *,
        lease: Lease,
        provider_job_id: str,
        provider_status: str | None,
        reconcile_in_s: float,
        now: datetime | None = None,
    ) -> Job:
        """Fenced on the lease: the provider accepted the job. Records its id (creation_outcome
        `accepted`, phase `awaiting_provider`), releases the lease (a job without a lease is
        never reaped) and schedules the first status check; at once if a provider event about
        that id already arrived or a cancel was requested. The state stays `running`: no
        event. Raises errors.LeaseLost."""
        ...


class ReconcileStore(Protocol):
    """The reconciler's part: checking background jobs at their provider and settling them."""

    async def job_reconcile_refresh(
        self, *, providers: Sequence[str] | None = None, now: datetime | None = None
    ) -> int:
        """Make every running job that has a provider id due for a check now (a reconciler
        starting up cannot know what it missed). Returns how many."""
        ...

    async def job_reconcile_claim(
        self,
        *,
        limit: int,
        lease_s: float,
        providers: Sequence[str] | None = None,
        now: datetime | None = None,
    ) -> list[BackgroundJob]:
        """Take up to `limit` background jobs due for a check: running at a provider with
        reconcile_at passed or a cancel request newer than their last check, or cancelled
        locally and still watched. Pushes each reconcile_at `lease_s` ahead (a reconciler that
        dies is replaced after that), so concurrent reconcilers never take the same job."""
        ...

    async def job_reconcile_defer(
        self, *, deferral: ReconcileDeferral, now: datetime | None = None
    ) -> bool:
        """Schedule the next check of a job still at the provider. A failed check (`failure`)
        counts in reconcile_failures and is kept in reconcile_error; a good one resets them.
        False when the job moved on (settled elsewhere): nothing is written."""
        ...

    async def job_settle(
        self, *, settlement: Settlement, now: datetime | None = None
    ) -> Job | None:
        """Apply the provider's verdict, fenced on (id, provider_job_id, running, no lease):
        the first verdict wins and a terminal job never moves. A success (or any verdict with
        usage) is billed once. To `queued`: a new attempt, the provider id cleared. None when
        the fence fails; the caller records the verdict as ignored."""
        ...

    async def job_discard_late_result(
        self,
        *,
        job_id: str,
        provider_job_id: str,
        to_state: JobState,
        usage: JSONObject | None,
        actor: str,
        now: datetime | None = None,
    ) -> bool:
        """The provider finished a job jobgate had cancelled locally (cancel not supported):
        stop watching, log the result as ignored (it is discarded), and write the provider's
        usage as a `completion` entry with a matching `refund` (the tenant pays nothing). False
        when the job is not such a job."""
        ...


class ProviderEventStore(Protocol):
    """Inbound provider webhooks, deduplicated, and the job each one names."""

    async def job_by_provider_job(
        self, *, provider: str, provider_job_id: str
    ) -> BackgroundJob | None: ...

    async def provider_event_record(
        self,
        *,
        provider: str,
        event_id: str,
        event_type: str,
        provider_job_id: str | None,
        now: datetime | None = None,
    ) -> ProviderEventOutcome:
        """Insert an inbound event under its unique (provider, event id). A duplicate changes
        nothing. Otherwise the job it names, if running at that provider (or watched after a
        local cancel), becomes due for a check now: the settlement itself is the reconciler's,
        from the provider's authoritative answer."""
        ...

    async def provider_events_prune(self, *, before: datetime) -> int:
        """Forget provider events received before `before` (dedup needs only recent ones)."""
        ...


class ProviderStore(BackgroundStartStore, ReconcileStore, ProviderEventStore, Protocol):
    """The provider store: what background mode, the reconciler and inbound provider webhooks need
    from storage."""


class RateLimitStore(Protocol):
    """Storage for shared rate limits: the bucket rows of domain.rate_limits, locked and updated in
    one short transaction each, so that every worker process of a deployment draws on the same
    budget."""

    async def rate_limit_take(
        self, *, buckets: Sequence[Bucket], reserve_tokens: int = 0, now: datetime | None = None
    ) -> Take:
        """Admit one request under every bucket at once (creating missing rows): admitted at
        the database's time (each bucket's next start moved one spacing ahead, and
        `reserve_tokens` charged as one job's, at most a bucket's capacity, to each token
        bucket in the same transaction), else the seconds to wait (nothing changed).
        Serialised per bucket across processes."""
        ...

    async def rate_limit_give_back(self, *, buckets: Sequence[Bucket], taken_at: float) -> None:
        """Return a request that rate_limit_take admitted at `taken_at` and that was not used,
        to each bucket where no request was admitted after it (domain.rate_limits.give_back:
        a later start waited for its slot, so it stays spent there)."""
        ...

    async def rate_limit_spend(
        self, *, spends: Sequence[tuple[Bucket, int]], now: datetime | None = None
    ) -> None:
        """Add tokens (negative: an estimate corrected down) to the buckets' debt."""
        ...

    async def rate_limit_waits(
        self, *, buckets: Sequence[Bucket], now: datetime | None = None
    ) -> dict[tuple[str, str], float]:
        """Seconds until each bucket admits its next request (absent: it admits now)."""
        ...

    async def rate_limited_queued(
        self, *, buckets: Sequence[Bucket], now: datetime | None = None
    ) -> dict[tuple[str, str], int]:
        """Claimable queued jobs held back by each closed bucket (absent: open or none)."""
        ...

    async def breaker_open(
        self, *, provider: str, open_s: float, opened_by: str, now: datetime | None = None
    ) -> None:
        """A process opened `provider`'s circuit breaker: every process keeps away from it for
        `open_s` seconds (by the database's clock), then may send one probe."""
        ...

    async def breaker_close(self, *, provider: str) -> None:
        """A probe succeeded: `provider`'s breaker is closed for every process."""
        ...

    async def breaker_states(self, *, now: datetime | None = None) -> dict[str, float]:
        """Every open breaker: provider -> seconds left open (0 or less: half-open)."""
        ...

    async def job_reroute(
        self,
        *,
        lease: Lease,
        provider: str,
        model: str,
        actor: str,
        reason: str,
        now: datetime | None = None,
    ) -> bool:
        """Move a running job (fenced on `lease`) to another model route target for its next
        attempt: its provider, model and request's `model`, with a running-to-running event
        giving `reason`. False when the lease is no longer held (nothing changed)."""
        ...

    async def job_queue_position(self, *, job: Job, now: datetime | None = None) -> int:
        """1 + the claimable queued jobs of the job's tenant ahead of it in claim order
        (priority, run_at, id) among at most ranges.QUEUE_POSITION_COUNTED entries of the line
        walked back from it: a floor when the walk stops there (job_status says which). An
        estimate: other tenants' fair shares, caps and limits decide how fast that line
        moves."""
        ...


class PurgeStore(Protocol):
    """Erasing what the retention period has passed: job inputs and results (tombstones stay),
    idempotency keys (the reaper)."""

    async def job_purge_expired(
        self, *, completed_before: datetime, limit: int, now: datetime | None = None
    ) -> int:
        """Erase input and result of terminal jobs completed before the cut-off (tombstones
        stay). Returns how many were purged."""
        ...

    async def idempotency_purge_expired(self, *, limit: int, now: datetime | None = None) -> int:
        """Forget idempotency keys past their expiry (kept at least 24 h by construction)."""
        ...


class LimitsStore(Protocol):
    """Storage for tenant limits and queue accounting."""

    async def tenant_limits_set(
        self, *, tenant_id: str, overrides: LimitOverrides, now: datetime | None = None
    ) -> LimitOverrides:
        """Store a tenant's overrides (replacing the previous ones); None fields clear them."""
        ...

    async def tenant_limits_all(self) -> dict[str, LimitOverrides]:
        """Every tenant's stored overrides, by tenant id."""
        ...

    async def queue_counts(self) -> QueueCounts:
        """Queued jobs per tenant and claims per tenant so far (cheap enough to poll)."""
        ...

    async def usage_tokens_since(self, *, day: date) -> dict[str, int]:
        """Tokens billed per tenant since the start of UTC day `day` (completions minus
        refunds): the ledger's, and those retention rolled up as it deleted their jobs."""
        ...

    async def usage_by_model_since(self, *, day: date) -> list[costs.UsageTotal]:
        """Tokens billed since the start of UTC day `day` per (tenant, provider, model),
        completions minus refunds, the ledger's and those retention rolled up, in no
        particular order. Read-only; pricing them is the caller's business."""
        ...

    async def usage_by_key_since(
        self, *, day: date, tenant_ids: Sequence[str]
    ) -> list[costs.UsageTotal]:
        """As usage_by_model_since, per (tenant, concurrency key, provider, model) of the
        `tenant_ids` given, for jobs with a concurrency key only (each total names its
        `concurrency_key`); retention's deletions are counted through their rollup."""
        ...


class RolesStore(Protocol):
    """Storage for role heartbeats: which roles have a live process."""

    async def role_heartbeat(
        self, *, role: str, instance: str, now: datetime | None = None
    ) -> None:
        """Record that `instance` (one process) of `role` is alive at the database's `now`,
        and forget instances of that role unseen for a day. Idempotent."""
        ...

    async def role_heartbeat_age_s(self, *, role: str, now: datetime | None = None) -> float | None:
        """Seconds since any instance of `role` was last seen, by the database's clock; None
        if none ever was. Read-only."""
        ...

    async def role_heartbeat_forget(self, *, role: str, instance: str) -> None:
        """Forget `instance` of `role` (its process stops). Idempotent."""
        ...

    async def role_heartbeat_ages(self, *, now: datetime | None = None) -> dict[str, float]:
        """Per role ever seen (and not forgotten): seconds since its freshest instance was
        last seen, by the database's clock. Read-only."""
        ...

    async def roles_with_work(self) -> frozenset[str]:
        """Which of the roles worker, batches, dispatcher and reaper have work now: queued
        jobs; live batches; pending webhook deliveries; running jobs or active schedules.
        Read-only."""
        ...


class PauseStore(Protocol):
    """Storage for pauses: the operator's holds on claims. Every claim statement skips the
    queued jobs a pause covers (the `pause_covers` fragment), so a pause holds across every
    worker process from its commit on, and survives restarts."""

    async def pause_insert(
        self,
        *,
        pause_id: str,
        provider: str | None,
        model: str | None,
        tenant_id: str | None,
        reason: str | None,
        created_by: str,
        now: datetime | None = None,
    ) -> Pause:
        """Store a pause (the scope members as given: None matches anything) and answer it.
        Not idempotent: each call is a pause of its own."""
        ...

    async def pause_list(self) -> list[Pause]:
        """Every pause, oldest first. Read-only."""
        ...

    async def pause_delete(self, *, pause_id: str | None) -> list[Pause]:
        """Delete the pause `pause_id` (None: every pause) and answer what was deleted (empty:
        nothing was there); wakes the workers of every process to claim again."""
        ...


class JobTokenStore(Protocol):
    """Storage for the secret that signs job tokens, one generation per rotation. API processes
    read it rarely and cache it: a token is verified without a read."""

    async def job_token_secrets(self) -> list[JobTokenSecret]:
        """Every stored generation, oldest first. Read-only."""
        ...

    async def job_token_secret_first(self, *, secret: str, now: datetime | None = None) -> None:
        """Store `secret` as generation 1 if no generation exists yet; idempotent (a
        concurrent first store wins, the others store nothing)."""
        ...

    async def job_token_secret_rotate(
        self, *, secret: str, revokes_older: bool, now: datetime | None = None
    ) -> int | None:
        """Store `secret` as the next generation (it signs from now on) and answer its number;
        None when a concurrent rotation took that number (nothing stored: try again).
        `revokes_older`: every token an older generation signed stops verifying."""
        ...

    async def job_token_secret_prune(self, *, max_ttl_s: float, now: datetime | None = None) -> int:
        """Delete the generations that verify nothing any more: those a later rotation revoked,
        and those replaced more than `max_ttl_s` ago (every token they signed has expired).
        Idempotent; answers how many were deleted."""
        ...


class WaitStore(Protocol):
    """What the claim would read about queued jobs, read the way the claim reads it: the pauses
    covering them (`pause_covers`) and the worker slots their tenant and key hold."""

    async def job_wait_facts(
        self,
        *,
        tenant_id: str,
        job_ids: Sequence[str],
        count_running: bool,
        count_keys: bool,
        count_positions: bool = False,
        now: datetime | None = None,
    ) -> dict[str, WaitRead]:
        """For those of `job_ids` that are `tenant_id`'s and queued (others are left out):
        the database's time (or `now`), the oldest pause covering each, the slots held by its
        tenant (`count_running`) and by its concurrency key (`count_keys`; None for a job
        without one), and its place in line as job_queue_position walks it, exact or a floor
        (`count_positions`). Read-only."""
        ...

    async def queued_wait_groups(
        self,
        *,
        keys: bool,
        capped_tenants: Sequence[str],
        limit: int,
        now: datetime | None = None,
    ) -> list[WaitGroup]:
        """The head of each tenant's line (at most ranges.QUEUE_COUNTED queued jobs of a
        tenant, in claim order) counted once, in at most `limit` groups (the largest first)
        alike for every claim rule: tenant, provider, model, concurrency key (only with `keys`)
        and whether run_at is still ahead; each with its oldest covering pause and the slots
        its tenant (tenants of `capped_tenants` only) and key hold, and `exact` False when its
        tenant's line is longer than the walk (its count a floor). Read-only."""
        ...


class Storage(
    LifecycleStore,
    TenantStore,
    JobStore,
    LimitsStore,
    PurgeStore,
    RateLimitStore,
    ScheduleStore,
    WebhookStore,
    AdminStore,
    ProviderStore,
    RolesStore,
    PauseStore,
    WaitStore,
    JobTokenStore,
    SessionStore,
    BulkActionsStore,
    RetentionStore,
    SignalStore,
    OutputStreamStore,
    FilesStore,
    BatchesStore,
    BatchReadStore,
    ConsoleStore,
    TransportStore,
    ConversationStore,
    ProviderBatchStore,
    Protocol,
):
    """Everything jobgate keeps. Feature stores add their protocol to this list."""


# -- What each role reaches ------------------------------------------------------------------
# Each consumer takes the narrowest of these that covers its calls, so its reach reads off its
# signature; mypy holds the full Storage to every one of them where the runtime passes it.


class WorkerStorage(
    JobLeaseStore,
    JobReadStore,
    JobLogStore,
    TenantReadStore,  # tenant names for metric labels
    RateLimitStore,
    OutputStreamStore,
    TransportStore,  # claims by id, when a broker transport feeds the worker
    BackgroundStartStore,
    ChangeFeed,
    Protocol,
):
    """The worker: claims, heartbeats and fenced verdicts; rate limits, breakers and reroutes;
    live output; background-mode hand-offs."""


class ReaperStorage(JobReapStore, PurgeStore, RetentionStore, FilesStore, DatabaseClock, Protocol):
    """The reaper: expired leases, overdue queued jobs, and what retention erases or deletes."""


class RetentionStorage(RetentionStore, FilesStore, DatabaseClock, Protocol):
    """The retention sweep (run by the reaper): finished jobs, and files whose time ran out."""


class DispatcherStorage(
    DeliveryStore, JobReadStore, OutputStreamStore, BatchReadStore, ChangeFeed, Protocol
):
    """The webhook dispatcher: leased deliveries, and the job a delivery's body may include
    (with its output so far, for a `job.progress`)."""


class ReconcilerStorage(
    ReconcileStore, ProviderEventStore, JobLogStore, DatabaseClock, ChangeFeed, Protocol
):
    """The reconciler: background jobs due for a check at their provider, settled there."""


class BatchFilesStorage(FilesStore, BatchesStore, ProviderBatchStore, Protocol):
    """The files and batches API: uploads, and batches over them (their provider batches)."""


class ProviderEventStorage(ProviderEventStore, JobLogStore, Protocol):
    """Inbound provider webhooks: recorded once, a late one logged as ignored."""


class BatchRunnerStorage(
    BatchFilesStorage, WebhookEndpointStore, JobReadStore, DatabaseClock, Protocol
):
    """The batches role: expands input files into jobs or provider batches, follows them, arms
    their progress webhooks and writes result files."""


class ScheduleStorage(ScheduleStore, DatabaseClock, Protocol):
    """Recurring schedules: their CRUD and firing (the job a slot fires goes through JobService)."""


class ApiStorage(
    LifecycleStore,  # health (ping, dialect), long polls (changes), the database's clock
    TenantReadStore,
    JobReadStore,
    JobLogStore,
    ProviderEventStore,  # inbound provider webhooks
    RateLimitStore,  # queue positions and rate-limit waits shown on a job
    LimitsStore,
    RolesStore,
    PauseStore,  # the operator's pauses
    WaitStore,  # why queued jobs wait
    JobTokenStore,  # the secret that signs job tokens
    ScheduleStore,
    WebhookEndpointStore,
    FilesStore,
    BatchesStore,
    BatchReadStore,
    ProviderBatchStore,  # a batch's provider batches, shown with it
    BulkActionsStore,  # bulk actions from the API and the console
    AdminStore,
    ConsoleStore,
    SessionStore,
    SignalStore,
    OutputStreamStore,
    Protocol,
):
    """What the HTTP edge reaches directly (its services hold the rest): reads, health, the
    operator console; never a lease, a claim or a reap."""
