"""The reaper: reclaims jobs whose worker stopped heartbeating and expires jobs nobody started.

Idempotent and safe in several processes at once: every reclaim is fenced on the expired lease
(and SKIP LOCKED on PostgreSQL), so two reapers never act on one job.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
from datetime import datetime, timedelta

from jobgate import errors, metrics
from jobgate.config import Settings
from jobgate.domain.backoff import full_jitter_s
from jobgate.domain.states import JobState
from jobgate.roles.retention import Retention
from jobgate.services.poison_log import log_poison
from jobgate.storage import protocol
from jobgate.storage.records import ReapResult

log = logging.getLogger(__name__)


@dataclasses.dataclass(slots=True)
class ReapPass:
    reaped: ReapResult
    expired: list[str]
    purged: int = 0  # jobs whose input and result passed the retention period
    keys_forgotten: int = 0  # idempotency keys past their expiry
    deleted: int = 0  # finished jobs past the retention period, deleted (roles.retention)

    @property
    def total(self) -> int:
        return self.reaped.total + len(self.expired)


class Reaper:
    def __init__(
        self,
        *,
        storage: protocol.ReaperStorage,
        settings: Settings,
        rng: random.Random | None = None,
        batch_size: int = 500,
    ) -> None:
        self._storage = storage
        self._settings = settings
        self._rng = rng
        self._batch_size = batch_size
        self._stopping = asyncio.Event()
        self._retention = Retention(storage=storage, settings=settings)

    def _retry_delay(self, attempt: int) -> float:
        return full_jitter_s(
            attempt,
            base_s=self._settings.retry_base_s,
            cap_s=self._settings.retry_max_s,
            rng=self._rng,
        )

    async def reap_once(self, *, now: datetime | None = None) -> ReapPass:
        """One pass: reclaim every expired lease and expire every overdue queued job."""
        total = ReapPass(ReapResult(), [])
        await self._reclaim(total, now)
        while True:
            expired = await self._storage.job_expire_due(limit=self._batch_size, now=now)
            total.expired += expired
            if len(expired) < self._batch_size:
                break
        # Delete what retention allows before purging, so no row is purged then deleted.
        total.deleted = (await self._retention.sweep_once(now=now))["jobs"]
        await self._purge(total, now)
        self._report(total)
        return total

    async def _reclaim(self, total: ReapPass, now: datetime | None) -> None:
        """Every expired lease, a batch at a time."""
        while True:
            reaped = await self._storage.job_reap_expired(
                limit=self._batch_size, retry_delay=self._retry_delay, now=now
            )
            total.reaped.requeued += reaped.requeued
            total.reaped.failed += reaped.failed
            total.reaped.cancelled += reaped.cancelled
            total.reaped.poisoned += reaped.poisoned
            for poisoning in reaped.poisonings:
                log_poison("reaper", poisoning)
            total.reaped.poisonings += reaped.poisonings
            if reaped.total < self._batch_size:
                break

    async def _purge(self, total: ReapPass, now: datetime | None) -> None:
        """The inputs of jobs completed past retention, then the idempotency keys expired."""
        cut_off = await self._storage.database_now() if now is None else now
        cut_off -= timedelta(seconds=self._settings.retention_s)
        while True:
            purged = await self._storage.job_purge_expired(
                completed_before=cut_off, limit=self._batch_size, now=now
            )
            total.purged += purged
            if purged < self._batch_size:
                break
        while True:
            forgotten = await self._storage.idempotency_purge_expired(
                limit=self._batch_size, now=now
            )
            total.keys_forgotten += forgotten
            if forgotten < self._batch_size:
                break

    def _report(self, total: ReapPass) -> None:
        """The pass's metrics and log lines."""
        moved = {
            JobState.QUEUED.value: total.reaped.requeued,
            JobState.FAILED.value: total.reaped.failed,
            JobState.CANCELLED.value: total.reaped.cancelled,
            JobState.EXPIRED.value: total.expired,
        }
        facts = {
            "requeued" if state == JobState.QUEUED else state: len(ids)
            for state, ids in moved.items()
        }
        metrics.REAPER_RECLAIMED.observe(total.reaped.total)
        if total.reaped.poisoned:  # each logged with its traceback above
            metrics.POISON_JOBS.labels("reaper").inc(len(total.reaped.poisoned))
        for state, ids in moved.items():
            if ids:
                metrics.TRANSITIONS.labels(state).inc(len(ids))
        if total.reaped.total > self._settings.reaper_warn_threshold:
            # A burst means workers are crashing in bulk: an incident, not bad luck.
            metrics.REAPER_BULK_RECLAIMS.inc()
            log.warning("reaper reclaimed many leases in one pass", extra=facts)
        elif total.total:
            log.info("reaper pass", extra=facts)
        for job_id in total.reaped.requeued + total.reaped.failed + total.reaped.cancelled:
            log.info(
                "job transition",
                extra={
                    "job_id": job_id,
                    "from_state": JobState.RUNNING.value,
                    "actor": "reaper",
                    "reason": "worker_lost",
                },
            )

    def request_stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        while not self._stopping.is_set():
            try:
                await self.reap_once()
            except errors.StorageError as exc:
                log.warning("reaper pass failed: %s", type(exc).__name__)
            try:
                async with asyncio.timeout(self._settings.reaper_interval_s):
                    await self._stopping.wait()
            except TimeoutError:
                pass
