"""The Storage contract's feature areas beside the job queue: webhooks and the outbox,
schedules, files and batches, bulk actions, retention, the operator console and its
sessions, alert signals. The rules in `storage.protocol` apply to every method."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from jobgate.domain.bulk import BulkAction, JobFilter
from jobgate.domain.job import Job
from jobgate.domain.retention import Horizon
from jobgate.domain.rollups import QueueDepth, Transition
from jobgate.domain.states import JobState
from jobgate.storage.records import (
    BatchChunk,
    BatchCounts,
    BatchEnding,
    BatchItemResult,
    BatchRecord,
    BulkChunk,
    Conversation,
    ConversationItem,
    Delivery,
    DeliveryAttempt,
    DeliveryOutcome,
    EndpointChanges,
    EndpointHealth,
    FileChunk,
    FileRecord,
    FileUsage,
    NativeLine,
    NewWebhookEndpoint,
    PartEnding,
    PartitionDrops,
    ProviderBatch,
    QueueLimit,
    RetentionBatch,
    Schedule,
    TenantOverview,
    UsageDay,
    WebhookEndpoint,
)


class WebhookEndpointStore(Protocol):
    """A tenant's webhook endpoints and the record of deliveries to them."""

    async def webhook_endpoint_create(
        self, *, endpoint: NewWebhookEndpoint, now: datetime | None = None
    ) -> WebhookEndpoint: ...

    async def webhook_endpoint_get(
        self, *, endpoint_id: str, tenant_id: str | None = None
    ) -> WebhookEndpoint | None:
        """None when missing or owned by another tenant (when tenant_id is given)."""
        ...

    async def webhook_endpoint_list(
        self, *, tenant_id: str, after: str | None = None, limit: int = 20
    ) -> list[WebhookEndpoint]:
        """Oldest first; `after` is the id of the last endpoint of the previous page."""
        ...

    async def webhook_endpoint_update(
        self,
        *,
        endpoint_id: str,
        tenant_id: str,
        changes: EndpointChanges,
        now: datetime | None = None,
    ) -> WebhookEndpoint | None:
        """Apply the fields that are set; enabling clears disabled_reason. None when not found."""
        ...

    async def webhook_endpoint_delete(
        self, *, endpoint_id: str, tenant_id: str, now: datetime | None = None
    ) -> bool:
        """Delete the endpoint and fail its pending deliveries. False when not found."""
        ...

    async def webhook_endpoint_rotate_secret(
        self,
        *,
        endpoint_id: str,
        tenant_id: str,
        secret: str,
        grace_s: float,
        now: datetime | None = None,
    ) -> WebhookEndpoint | None:
        """`secret` becomes current; the old one keeps signing for `grace_s` (none if 0)."""
        ...

    async def delivery_recover(
        self, *, endpoint_id: str, tenant_id: str, since: datetime, now: datetime | None = None
    ) -> int:
        """Re-queue the endpoint's failed deliveries created at or after `since`, with a fresh
        attempt budget. Returns how many."""
        ...

    async def delivery_attempts_for_job(self, *, job_id: str) -> list[DeliveryAttempt]:
        """Every attempt at delivering a job's events, oldest first."""
        ...


class DeliveryStore(Protocol):
    """The outbox as a delivery queue (the dispatcher). Deliveries are leased like jobs,
    visibility-timeout style: a claim pushes `next_attempt_at` past the lease and sets a fresh
    `lease_token`, so a dispatcher that dies mid-send loses its claim when the lease runs out
    and the row is delivered again under the same webhook-id (at-least-once). Results are
    written fenced on the token."""

    async def delivery_claim_due(
        self,
        *,
        limit: int,
        lease_s: float,
        busy: Sequence[str] = (),
        now: datetime | None = None,
    ) -> list[Delivery]:
        """Lease up to `limit` pending deliveries due at `now`, oldest due first, counting the
        attempt. Skips rows whose limit key (an endpoint id, or `url:` + a per-job URL) is in
        `busy`. Never hands one row to two concurrent callers (SKIP LOCKED on PostgreSQL).
        A row to an endpoint waits while a `job.progress` of the same job to that endpoint is
        in flight (leased, its lease not run out): progress never overtakes a later event."""
        ...

    async def delivery_record(
        self, *, delivery: Delivery, outcome: DeliveryOutcome, now: datetime | None = None
    ) -> bool:
        """Record the attempt (always, if one was made) and, fenced on the lease token, the
        delivery's new state; disable the endpoint if the outcome says so. False when the lease
        was lost (someone else owns the row now; only the attempt was recorded)."""
        ...

    async def delivery_release(
        self, *, delivery: Delivery, delay_s: float = 0.0, now: datetime | None = None
    ) -> bool:
        """Give a claimed delivery back unsent (its attempt refunded), due after `delay_s`.
        Fenced on the lease token; False when the lease was lost."""
        ...


class WebhookStore(WebhookEndpointStore, DeliveryStore, Protocol):
    """Webhooks: endpoints, and the outbox as a delivery queue."""


class ScheduleStore(Protocol):
    """Storage for recurring schedules. Firing is at-least-once by design; the job a slot fires is
    deduplicated by its Idempotency-Key, and advancing a slot is a compare-and-set, so two
    schedulers (or a restart) never double or skip a run."""

    async def schedule_insert(self, *, schedule: Schedule, max_per_tenant: int) -> Schedule | None:
        """Store a schedule unless its tenant keeps `max_per_tenant` already (None, nothing
        stored). Exact under concurrent creates, in any number of processes."""
        ...

    async def schedule_list(
        self, *, tenant_id: str, after: str | None = None, limit: int = 100
    ) -> list[Schedule]:
        """A page of a tenant's schedules, oldest first, after the schedule `after` (keyset;
        an `after` of no schedule of the tenant gives an empty page)."""
        ...

    async def schedule_get(self, *, schedule_id: str, tenant_id: str) -> Schedule | None:
        """One schedule of a tenant (None: not found or another tenant's)."""
        ...

    async def schedule_set_paused(
        self,
        *,
        schedule_id: str,
        tenant_id: str,
        paused: bool,
        next_run_at: datetime | None = None,
    ) -> Schedule | None:
        """Pause or resume (a resume moves `next_run_at`: slots missed while paused are not
        fired). None: not found."""
        ...

    async def schedule_delete(self, *, schedule_id: str, tenant_id: str) -> bool:
        """Delete a schedule (its jobs stay). False: not found."""
        ...

    async def schedule_due(self, *, limit: int, now: datetime | None = None) -> list[Schedule]:
        """Unpaused schedules whose next slot has come (by the database's clock), fair between
        tenants: each tenant's oldest slot, then each tenant's second, and so on; within a
        turn, oldest slot first."""
        ...

    async def schedule_advance(
        self, *, schedule_id: str, slot: datetime, next_run_at: datetime
    ) -> bool:
        """Move a schedule from `slot` (fired) to `next_run_at`, only if it is still at
        `slot` and not paused (compare-and-set). False: another scheduler moved it."""
        ...


class FilesStore(Protocol):
    """Storage for OpenAI-compatible files: JSONL uploads kept as chunks of whole lines."""

    async def file_create(
        self,
        *,
        file_id: str,
        tenant_id: str,
        purpose: str,
        filename: str,
        expires_after_s: float | None = None,
        batch_id: str | None = None,
        lease_token: str | None = None,
        now: datetime | None = None,
    ) -> bool:
        """Insert an `uploading` file, invisible to reads until file_finish (or, a result
        file of `batch_id`, until batch_finish shows it), expiring `expires_after_s` from now
        (None: never). With `lease_token`, only while that token holds the batch: False
        (nothing written) once it does not."""
        ...

    async def file_chunk_put(
        self, *, file_id: str, chunk: FileChunk, lease_token: str | None = None
    ) -> bool:
        """Store one chunk of whole lines; idempotent (a chunk stored again is replaced). With
        `lease_token` (a batch's result file), only while that token holds the batch: False
        (nothing written) once it does not."""
        ...

    async def file_finish(self, *, file_id: str, bytes: int, lines: int) -> FileRecord:
        """Mark an uploaded file `processed` with its size; answers it."""
        ...

    async def file_get(
        self, *, file_id: str, tenant_id: str | None = None, now: datetime | None = None
    ) -> FileRecord | None:
        """A processed file (None: missing, uploading, expired, or another tenant's)."""
        ...

    async def file_list(
        self,
        *,
        tenant_id: str,
        purpose: str | None,
        after: str | None,
        limit: int,
        oldest_first: bool = False,
        now: datetime | None = None,
    ) -> list[FileRecord]:
        """A page of the tenant's processed files that have not expired, newest first (or
        oldest first), after the file `after`."""
        ...

    async def file_usage(self, *, tenant_id: str) -> FileUsage:
        """The tenant's processed uploads (purpose `batch`): how many, and their bytes."""
        ...

    async def file_delete_expired(self, *, limit: int, now: datetime | None = None) -> int:
        """Delete up to `limit` files past their `expires_at` (uploads and results, any
        status), except the input of a batch that has not ended; how many it deleted."""
        ...

    async def file_chunks(self, *, file_id: str, from_seq: int, limit: int) -> list[FileChunk]:
        """Up to `limit` chunks in order from `from_seq`."""
        ...

    async def file_delete(self, *, file_id: str, tenant_id: str | None = None) -> bool:
        """Delete a file and its chunks (any status); False when there was none. Raises
        errors.Conflict (nothing deleted) while a batch that has not ended reads it as its
        input; a batch created over the file at the same moment is seen, or finds it gone."""
        ...


class BatchReadStore(Protocol):
    """A batch and its lines' counts, as they stand."""

    async def batch_get(
        self, *, batch_id: str, tenant_id: str | None = None
    ) -> BatchRecord | None: ...

    async def batch_counts(self, *, batch_id: str) -> BatchCounts:
        """The batch's lines by their jobs' states, as they stand."""
        ...


class BatchesStore(BatchReadStore, Protocol):
    """Storage for OpenAI-compatible batches: a batch's lines become jobs, tracked per line."""

    async def batch_create(
        self, *, batch: Mapping[str, Any], now: datetime | None = None
    ) -> BatchRecord | None:
        """Insert a `validating` batch over the tenant's processed file `input_file_id`, whose
        lines are its total (keys: id, tenant_id, endpoint, input_file_id, completion_window,
        window_s, metadata, priority); None when there is no such file (deleted meanwhile)."""
        ...

    async def batch_list(
        self, *, tenant_id: str | None, after: str | None, limit: int, status: str | None = None
    ) -> list[BatchRecord]:
        """A page of the tenant's batches (every tenant's when `tenant_id` is None: an
        operator's list), of one status unless `status` is None, newest first, after the
        batch `after`."""
        ...

    async def batch_claim_live(
        self, *, limit: int, lease_s: float, now: datetime | None = None
    ) -> list[BatchRecord]:
        """Live batches (validating, in_progress, cancelling, finalizing) no one else works on,
        leased for `lease_s`, each with a new `lease_token`: one batches role at a time works
        on a batch, and every write it makes for the batch names the token (a fence), so a
        role whose lease ran out and was taken over writes nothing more."""
        ...

    async def batch_update(
        self,
        *,
        batch_id: str,
        from_statuses: Sequence[str],
        status: str | None = None,
        final_status: str | None = None,
        expanded_chunks: int | None = None,
        completed_count: int | None = None,
        failed_count: int | None = None,
        output_file_id: str | None = None,
        error_file_id: str | None = None,
        errors: dict[str, Any] | None = None,
        failures: int | None = None,
        total: int | None = None,
        model: str | None = None,
        lease_token: str | None = None,
        lease_s: float | None = None,
        release: bool = False,
        unsettled: bool = False,
        now: datetime | None = None,
    ) -> BatchRecord | None:
        """Update a batch only while its status is one of `from_statuses`, while
        `lease_token` holds it (the batches role's writes; None: the API's, unfenced) and,
        with `unsettled`, while it has no final status (None otherwise, and nothing written).
        None leaves a column as it is; a new status stamps its `*_at` time (the database's
        clock) once; a final status, once set, stays (the first cancel or expiry wins);
        `lease_s` renews the lease from now; `release` drops it and its token."""
        ...

    async def batch_cancel(
        self,
        *,
        batch_id: str,
        from_statuses: Sequence[str],
        actor: str,
        now: datetime | None = None,
    ) -> BatchRecord | None:
        """A cancel the API accepted, in one transaction: the batch moves to cancelling with
        final status cancelled (only from one of `from_statuses`, with no final status yet;
        None otherwise, and nothing written), every job of its lines still queued is
        cancelled and every running one asked to stop, as job_cancel does for each. No job
        of the batch can be claimed once the cancel committed; a chunk being stored commits
        first (its jobs are then cancelled here) or sees the cancel and stores nothing."""
        ...

    async def batch_chunk_insert(
        self,
        *,
        chunk: BatchChunk,
        queue_limit: QueueLimit | None = None,
        now: datetime | None = None,
    ) -> BatchRecord | None:
        """In one transaction: the chunk's jobs (within `queue_limit`, else errors.QueueFull
        and nothing written), its lines, and the expansion cursor moved to
        `chunk.expanded_chunks`; the batch as it then stands. Only while the batch is
        in_progress with no final status and `chunk.lease_token` holds it: None (nothing
        written) otherwise, so no job of a batch exists without its line, and none is
        created once a cancel or expiry is committed."""
        ...

    async def batch_fail(
        self,
        *,
        batch_id: str,
        lease_token: str,
        errors: dict[str, Any],
        failures: int | None = None,
        now: datetime | None = None,
    ) -> BatchRecord | None:
        """In one transaction, while `lease_token` holds the live batch (else None, nothing
        written): `failed` with `errors` (OpenAI's `{"object": "list", "data": [...]}`), its
        lease released, and its `batch.failed` event queued once per endpoint that wants it."""
        ...

    async def batch_finish(
        self, *, ending: BatchEnding, now: datetime | None = None
    ) -> BatchRecord | None:
        """In one transaction, while `ending.lease_token` holds the finalizing batch (else
        None, nothing written): its final status, counts and result files (made visible; the
        batch's other unfinished result files deleted), its lease released, and its webhook
        event queued once per endpoint of the tenant that wants it."""
        ...

    async def batch_items_page(
        self, *, batch_id: str, after_line: int, limit: int
    ) -> list[BatchItemResult]:
        """Lines in order after `after_line`, each with its job's state, result and error."""
        ...

    async def batch_live_job_ids(self, *, batch_id: str, limit: int) -> list[str]:
        """Ids of the batch's jobs still queued or running (for cancel and expiry)."""
        ...

    async def batch_event_insert(
        self,
        *,
        batch_id: str,
        tenant_id: str,
        event_type: str,
        status: str,
        now: datetime | None = None,
    ) -> None:
        """Queue the batch's webhook event (`batch.completed` ...) in the outbox, once per
        endpoint of the tenant that wants it; idempotent (a repeat queues nothing more)."""
        ...

    async def outbox_batch_progress_arm(self, *, batch_id: str, now: datetime | None = None) -> int:
        """Arm the in-progress batch's `batch.progress` delivery to each enabled endpoint of
        its tenant that lists it, under outbox_progress_arm's rules (one row per endpoint,
        due once its `progress_interval_s` passed since the last send, a pending row left
        as it is). Answers the rows armed; none for a batch that is not in progress."""
        ...


class BulkActionsStore(Protocol):
    """Bulk actions by filter, a chunk per transaction."""

    async def job_bulk_count(
        self, *, where: JobFilter, action: BulkAction, now: datetime | None = None
    ) -> int:
        """How many jobs match `where` and are eligible for `action` now (a read)."""
        ...

    async def job_bulk_apply(
        self,
        *,
        where: JobFilter,
        action: BulkAction,
        actor: str,
        reason: str,
        after_id: str | None,
        limit: int,
        now: datetime | None = None,
    ) -> BulkChunk:
        """One short transaction: apply `action` to the first `limit` eligible jobs matching
        `where` with an id above `after_id` (keyset order by id), each change logged as a
        job event with `actor` and `reason`. Fewer than `limit` changed means none are left.
        Rows another transaction is changing are waited for (never skipped), then checked
        again. Never moves a job the action does not apply to (domain.bulk.BulkAction)."""
        ...


class RetentionStore(Protocol):
    """Deleting finished jobs past the retention period, and the usage rollup that keeps their
    usage."""

    async def rate_limit_key_purge(self, *, limit: int, now: datetime | None = None) -> int:
        """One short transaction: delete up to `limit` buckets of concurrency keys
        (domain.rate_limits.key_bucket) that have admitted starts again for over a minute
        (an open bucket admits as a missing one does, so nothing changes but the table's size);
        how many. Never races a claim's check and take of a bucket (PostgreSQL: behind the
        claims' lock; SQLite: the one writer)."""
        ...

    async def retention_delete(self, *, horizon: Horizon, limit: int) -> RetentionBatch:
        """One short transaction: delete up to `limit` terminal jobs the horizon allows
        (domain.retention), oldest completion first, with their events, outbox rows, delivery
        attempts and usage ledger rows, after adding their usage to usage_daily. A job with
        a pending delivery, or named by an idempotency key live at `horizon.now`, is kept.
        Safe from several processes at once (SKIP LOCKED on
        PostgreSQL, one writer on SQLite): each job is deleted and summed once."""
        ...

    async def retention_batch_usage(self, *, horizon: Horizon, limit: int) -> int:
        """One short transaction: add up to `limit` usage ledger rows of kind `batch` (a
        provider-native batch part's usage, named by its key) billed before
        `horizon.completed_before`, oldest first, to usage_daily_batches (which the budget and
        spend reads count as native-batch usage, as they count the ledger's), then delete them;
        how many. Safe from several processes at once: each row is summed once."""
        ...

    async def usage_daily(self, *, tenant_id: str | None = None) -> list[UsageDay]:
        """The rollup of deleted jobs' usage, by tenant, day, provider and model."""
        ...

    async def history_partitions_ensure(self, *, days_ahead: int, now: datetime) -> int:
        """Make sure every history table has its partition for each UTC day from `now`'s to
        `days_ahead` days later (PostgreSQL, migration 0088); how many were made. Idempotent
        and safe from several processes at once; a partition whose lock is busy is left for the
        next call. SQLite has no partitions: 0."""
        ...

    async def history_partitions_drop(self, *, horizon: Horizon, max_kept: int) -> PartitionDrops:
        """Detach and drop each history partition of a day wholly before
        `horizon.completed_before` (PostgreSQL). Rows that must outlive their day (a job of that
        day still in the jobs table: inside retention, named by a live idempotency key, with a
        pending delivery or not finished; a pending delivery of a batch) move to the DEFAULT
        partition first, where retention's row-wise path deletes them with their job; a day with
        more than `max_kept` such jobs and deliveries waits for a later pass. SQLite: nothing."""
        ...


class AdminStore(Protocol):
    """What operators see across tenants (the dashboard)."""

    async def operator_key_create(
        self,
        *,
        key_id: str,
        name: str,
        key_hash: str,
        key_prefix: str,
        now: datetime | None = None,
    ) -> None:
        """Store an operator key's hash (never the key)."""
        ...

    async def operator_key_name(self, *, key_hash: str) -> str | None:
        """The operator owning a live key with this hash."""
        ...

    async def operator_key_count(self) -> int: ...

    async def admin_overview(self, *, now: datetime | None = None) -> list[TenantOverview]:
        """Every tenant's queue depth, running jobs, longest wait and dead letters, each read
        at a cost independent of the backlog: the queued jobs counted are at most
        ranges.QUEUE_COUNTED entries of the tenant's line (`queued_exact` False: a floor)."""
        ...

    async def admin_job_list(
        self,
        *,
        tenant_id: str | None = None,
        states: Sequence[JobState] | None = None,
        dead_lettered: bool | None = None,
        after: str | None = None,
        limit: int = 50,
    ) -> list[Job]:
        """Jobs of one tenant or of all, newest first; `after` pages like job_list."""
        ...

    async def admin_endpoint_health(self, *, min_attempts: int) -> list[EndpointHealth]:
        """Every webhook endpoint with its deliveries by state, its last failure, and whether
        it is failing: a delivery still pending after `min_attempts` failed attempts (the rule
        of webhook_endpoints_failing, so the console and /metrics agree)."""
        ...


class ConsoleStore(Protocol):
    """What the operator console reads: recent transitions for its charts, queue depth by tenant and
    provider, and job search."""

    async def console_transitions(self, *, since: datetime, limit: int) -> list[Transition]:
        """Applied job events at or after `since`, newest first, at most `limit` (one query
        over the job_events time index: the charts' only read of history)."""
        ...

    async def console_queue_depth(self) -> list[QueueDepth]:
        """Queued jobs now, by tenant and provider, counted over the head of each tenant's
        line in claim order: at most ranges.QUEUE_COUNTED jobs of a tenant (`exact` False on
        each of its rows when its line is longer: floors). Read-only."""
        ...

    async def console_job_search(
        self,
        *,
        where: JobFilter,
        job_id: str | None = None,
        provider_job_id: str | None = None,
        after: str | None = None,
        limit: int = 50,
    ) -> list[Job]:
        """Jobs matching every criterion given, newest first; `after` (a job id) pages like
        admin_job_list. `job_id` and `provider_job_id` match exactly, through an index.
        Raises InvalidRequest for an unknown `after`."""
        ...


class SessionStore(Protocol):
    """Dashboard sessions: server-side sign-ins, so that the browser's cookie holds a random session
    id and never an operator key."""

    async def dashboard_session_create(
        self, *, id_hash: str, key_hash: str, ttl_s: float, now: datetime | None = None
    ) -> str | None:
        """Open a session lasting `ttl_s` for the live operator key with this hash, and forget
        expired sessions; the operator's name, or None (nothing stored) if the key is not
        live. Stores the session id's hash only."""
        ...

    async def dashboard_session_operator(
        self, *, id_hash: str, now: datetime | None = None
    ) -> str | None:
        """The operator of the session with this id hash, while it is unexpired and its key
        is not revoked; else None."""
        ...

    async def dashboard_session_delete(self, *, id_hash: str) -> None:
        """End a session (sign-out). Idempotent."""
        ...


class SignalStore(Protocol):
    """Cluster-wide facts the alert gauges read at scrape time."""

    async def webhook_endpoints_failing(self, *, min_attempts: int) -> dict[str, int]:
        """Per tenant id: enabled endpoints with a delivery still pending after at least
        `min_attempts` failed attempts. Reads only pending outbox rows."""
        ...


class ProviderBatchStore(Protocol):
    """A batch's parts sent as provider batches (native batches). The part is written before
    its create is sent and its provider id recorded after, so a crash between the two leaves a
    part without an id: found again by listing the provider's batches for the part's key,
    never created twice. Every method is one statement."""

    async def provider_batch_intend(
        self,
        *,
        part_key: str,
        batch_id: str,
        provider: str,
        lines: Sequence[int],
        now: datetime | None = None,
    ) -> ProviderBatch:
        """Record a part before its create is sent, and answer it. Idempotent: a part already
        recorded under `part_key` is answered as it stands (its lines and id unchanged)."""
        ...

    async def provider_batch_record(
        self, *, part_key: str, provider_batch_id: str, now: datetime | None = None
    ) -> ProviderBatch | None:
        """Name the part's provider batch. Idempotent for the same id; None when the part is
        unknown or already names another provider batch (which is never overwritten)."""
        ...

    async def provider_batches_of(self, *, batch_id: str) -> list[ProviderBatch]:
        """The batch's parts in the order they were recorded. Read-only."""
        ...

    async def batch_native_lines(
        self, *, batch_id: str, after_line: int, limit: int
    ) -> list[NativeLine]:
        """Up to `limit` of the batch's lines sent in provider batches after `after_line`, in
        order, each with its provider and request body. Read-only."""
        ...

    async def provider_batch_seen(
        self, *, part_key: str, lease_token: str, status: str, request_counts: dict[str, Any]
    ) -> bool:
        """Keep the part's provider status and request counts as last read (for reads of the
        batch), while `lease_token` holds its batch and the part is not read back; False
        (nothing written) otherwise."""
        ...

    async def provider_batch_end(self, *, ending: PartEnding, now: datetime | None = None) -> bool:
        """An ended part read back, in one transaction, only while `ending.lease_token` holds
        its batch in progress or cancelling (False, nothing written, otherwise): each of its
        lines' outcome, result line and usage (a line keeps the first it was given), the part
        marked read back with the provider's last status and counts, and its usage in the
        ledger as one row of kind `batch` named by the part's key (billed once: a part read
        back again adds nothing). True once the part is read back."""
        ...


class ConversationStore(Protocol):
    """Conversations: a tenant's items in order, and the responses whose turn is still to be
    added to one. Every method is one statement; another tenant's conversation is as absent
    as a missing one."""

    async def conversation_insert(
        self,
        *,
        conversation_id: str,
        tenant_id: str,
        metadata: dict[str, Any],
        now: datetime | None = None,
    ) -> Conversation:
        """Store an empty conversation and answer it. Not idempotent (a new id each call)."""
        ...

    async def conversation_get(
        self, *, tenant_id: str, conversation_id: str
    ) -> Conversation | None:
        """The tenant's conversation, or None. Read-only."""
        ...

    async def conversation_delete(self, *, tenant_id: str, conversation_id: str) -> bool:
        """Delete the tenant's conversation with its items and turns; False if there was
        none. Idempotent."""
        ...

    async def conversation_item_append(
        self,
        *,
        tenant_id: str,
        conversation_id: str,
        items: Sequence[dict[str, Any]],
        response_id: str | None = None,
        now: datetime | None = None,
    ) -> list[ConversationItem]:
        """Add `items` (each with a string `id`) after the conversation's last, in order, and
        answer those added: an item whose id the conversation already holds is left out, so
        adding the same items again adds nothing (idempotent). Empty if the tenant has no
        such conversation. Concurrent appends to one conversation never share a position."""
        ...

    async def conversation_item_page(
        self,
        *,
        tenant_id: str,
        conversation_id: str,
        after: str | None,
        limit: int,
        descending: bool,
    ) -> list[ConversationItem]:
        """Up to `limit` items after the item `after` (None, or an id the conversation does
        not hold: from the start) in position order, newest first if `descending`. Read-only."""
        ...

    async def conversation_turn_insert(
        self, *, conversation_id: str, response_id: str, now: datetime | None = None
    ) -> None:
        """Remember that `response_id`'s turn goes to the conversation once it finishes.
        Idempotent."""
        ...

    async def conversation_turn_list(self, *, conversation_id: str) -> list[str]:
        """The responses whose turn is still to be added, oldest first. Read-only."""
        ...

    async def conversation_turn_delete(self, *, conversation_id: str, response_id: str) -> None:
        """Forget a turn (added, or never to be). Idempotent."""
        ...

    async def conversation_turn_prune(
        self, *, conversation_id: str, grace_s: float, now: datetime | None = None
    ) -> int:
        """Forget the turns older than `grace_s` whose response does not exist (its create
        failed after the turn was remembered); answers how many. Idempotent."""
        ...
