"""Retention: deletes finished jobs older than JOBGATE_RETENTION_S with their events, outbox
rows and delivery attempts (their usage summed per tenant and day first), the usage ledger
rows of provider-native batch parts billed before the horizon (summed the same way, apart:
they are priced at the batch price), the files whose time ran out, and the rate-limit buckets
of concurrency keys long idle, in small batches so that no transaction is long; a job a live
idempotency key names, or with a pending delivery, waits for them (domain.retention). The
reaper calls `sweep_once()` on each pass.

On PostgreSQL that history is partitioned by the day its job was created (migration 0088): the
row-wise batches delete only what sits in the DEFAULT partitions, and each pass makes the day
partitions of the next JOBGATE_PARTITIONS_AHEAD_DAYS days and drops every day partition whose
whole day is past the horizon, once at most `max_kept` of its jobs are still kept (those, and
pending deliveries, move to DEFAULT first)."""

from __future__ import annotations

import logging
from datetime import datetime

from jobgate import metrics
from jobgate.config import Settings
from jobgate.domain import retention
from jobgate.storage import protocol
from jobgate.storage.records import RetentionBatch

log = logging.getLogger(__name__)


class Retention:
    def __init__(
        self,
        *,
        storage: protocol.RetentionStorage,
        settings: Settings,
        batch_size: int = 500,
        max_batches: int = 20,
        max_kept: int = 1000,
    ) -> None:
        self._storage = storage
        self._settings = settings
        self._batch_size = batch_size
        # A pass stops after this many batches (10,000 jobs by default) so that the reaper's
        # other duties never wait long behind a backlog; the next pass goes on.
        self._max_batches = max_batches
        # A day partition is dropped once at most this many of its jobs (and pending
        # deliveries) must outlive it: their rows are moved to DEFAULT while the table is
        # locked, so the move stays short.
        self._max_kept = max_kept

    async def sweep_once(self, *, now: datetime | None = None) -> dict[str, int]:
        """Delete what the retention horizon allows, batch by batch; the rows deleted by
        table. `now` None means the database's clock."""
        moment = await self._storage.database_now() if now is None else now
        horizon = retention.horizon(moment, retention_s=self._settings.retention_s)
        deleted = RetentionBatch().by_table()
        for _ in range(self._max_batches):
            batch = await self._storage.retention_delete(horizon=horizon, limit=self._batch_size)
            for table, rows in batch.by_table().items():
                deleted[table] += rows
                if rows:
                    metrics.RETENTION_DELETED_ROWS.labels(table).inc(rows)
            if batch.jobs < self._batch_size:
                break
        if deleted["jobs"]:
            log.info("retention deleted finished jobs", extra={"count": deleted["jobs"]})
        deleted["usage_ledger"] += await self._roll_batch_usage(horizon)
        deleted["history_partitions"] = await self._partitions(moment, horizon)
        deleted["files"] = await self._expire_files(moment)
        deleted["rate_limit_buckets"] = await self._purge_key_buckets(moment)
        return deleted

    async def _partitions(self, moment: datetime, horizon: retention.Horizon) -> int:
        """Make the day partitions ahead and drop those past the horizon (PostgreSQL); how many
        were dropped."""
        await self._storage.history_partitions_ensure(
            days_ahead=self._settings.partitions_ahead_days, now=moment
        )
        drops = await self._storage.history_partitions_drop(
            horizon=horizon, max_kept=self._max_kept
        )
        metrics.HISTORY_PARTITIONS_BLOCKED.set(drops.blocked)
        if drops.dropped:
            metrics.HISTORY_PARTITIONS_DROPPED.inc(drops.dropped)
            log.info(
                "retention dropped history partitions",
                extra={"count": drops.dropped, "moved_rows": drops.moved_rows},
            )
        return drops.dropped

    async def _roll_batch_usage(self, horizon: retention.Horizon) -> int:
        """Sum the usage of provider-native batch parts billed before the horizon into the
        daily rollup and delete their ledger rows, as a job's go with the job; how many."""
        gone = 0
        for _ in range(self._max_batches):
            batch = await self._storage.retention_batch_usage(
                horizon=horizon, limit=self._batch_size
            )
            gone += batch
            if batch < self._batch_size:
                break
        if gone:
            metrics.RETENTION_DELETED_ROWS.labels("usage_ledger").inc(gone)
        return gone

    async def _purge_key_buckets(self, moment: datetime) -> int:
        """Forget the rpm_per_key buckets of keys idle for over a minute (one row per end user
        ever limited would otherwise stay for good); how many."""
        gone = 0
        for _ in range(self._max_batches):
            batch = await self._storage.rate_limit_key_purge(limit=self._batch_size, now=moment)
            gone += batch
            if batch < self._batch_size:
                break
        if gone:
            metrics.RETENTION_DELETED_ROWS.labels("rate_limit_buckets").inc(gone)
        return gone

    async def _expire_files(self, moment: datetime) -> int:
        """Delete the files whose time ran out (OpenAI's 30 days, files_expire_after_s), a
        live batch's input excepted; how many."""
        gone = 0
        for _ in range(self._max_batches):
            batch = await self._storage.file_delete_expired(limit=self._batch_size, now=moment)
            gone += batch
            if batch < self._batch_size:
                break
        if gone:
            metrics.RETENTION_DELETED_ROWS.labels("files").inc(gone)
            log.info("retention deleted expired files", extra={"count": gone})
        return gone
