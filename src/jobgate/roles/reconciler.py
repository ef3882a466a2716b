"""The reconciler: the only component that asks providers about jobs they run in the background.

Each pass takes the background jobs that are due (their next check has come, a cancel was
requested since the last check, or a provider webhook just named them) and asks the provider:
- still running: look again later, backing off (a cancel sent: soon);
- finished: settle the job from the provider's answer (the provider is authoritative), fenced
  so that the first verdict wins and a terminal job never moves; a late or duplicate verdict
  is logged as ignored;
- a cancel was requested: cancel at the provider (cancelled: `at_provider`; already finished:
  the real result is kept, `too_late`; no cancel at this provider: cancelled here,
  `not_supported`, and the job is watched until its result can be discarded and refunded);
- the check failed (status-check-failed) or the result could not be fetched or stored
  (completion-handling-failed): recorded on the job and retried with backoff. A failed check
  never creates the job again.
On start it makes every running job with a provider id due: it cannot know what it missed.
Safe to run in many processes: claims push `reconcile_at` ahead (SKIP LOCKED on PostgreSQL).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
from collections.abc import Awaitable
from datetime import datetime, timedelta

from jobgate import errors, metrics, wakeups
from jobgate.clock import Clock, SystemClock
from jobgate.config import Settings
from jobgate.domain import progress, reconcile, verdicts
from jobgate.domain.states import JobState
from jobgate.domain.verdicts import Poisoning
from jobgate.providers.background import (
    BackgroundProvider,
    ProviderJobRef,
    Snapshot,
    Status,
)
from jobgate.providers.base import ProviderResult
from jobgate.providers.registry import ProviderRegistry
from jobgate.roles import settlements
from jobgate.services.poison_log import log_poison
from jobgate.storage import protocol
from jobgate.storage.records import BackgroundJob, ReconcileDeferral, Settlement

log = logging.getLogger(__name__)

ACTOR = settlements.ACTOR
CLAIM_LEASE_S = 120.0  # a reconciler that dies mid-check is replaced after this
STATUS_CHECK_FAILED = "status_check_failed"
COMPLETION_HANDLING_FAILED = "completion_handling_failed"
LOST_AFTER_NOT_FOUND = 3  # consecutive 404s on a status check: the provider lost the job
# Consecutive failed checks of which the last raised unexpectedly: the job fails alone
# (`poison_job`). A damaged row fails at once.
POISON_AFTER_FAILURES = 5
PROVIDER_EVENT_RETENTION = timedelta(days=7)
PRUNE_EVERY_S = 3600.0


@dataclasses.dataclass(slots=True)
class SweepResult:
    claimed: int = 0
    settled: list[str] = dataclasses.field(default_factory=list)
    deferred: list[str] = dataclasses.field(default_factory=list)
    failed_checks: list[str] = dataclasses.field(default_factory=list)
    ignored: list[str] = dataclasses.field(default_factory=list)


class _Deferred(Exception):
    """Not settled this pass; the deferral says when to look again."""

    def __init__(self, deferral: ReconcileDeferral) -> None:
        super().__init__(deferral.job_id)
        self.deferral = deferral


class Reconciler:
    def __init__(
        self,
        *,
        storage: protocol.ReconcilerStorage,
        providers: ProviderRegistry,
        settings: Settings,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        batch_size: int = 100,
        concurrency: int = 16,
    ) -> None:
        self._storage = storage
        self._providers = providers
        self._settings = settings
        self._clock = clock or SystemClock()
        self._rng = rng
        self._batch_size = batch_size
        self._concurrency = concurrency
        self._stopping = asyncio.Event()
        self._wake = wakeups.Wakeup()
        self._pruned_at: float | None = None

    # -- passes ------------------------------------------------------------------------------

    async def refresh(self, *, now: datetime | None = None) -> int:
        """Make every running job with a provider id due now (after a restart). Logged every
        time, even when none was due: the line says this reconciler is past its start-up."""
        count = await self._storage.job_reconcile_refresh(now=now)
        log.info("reconciler refresh", extra={"count": count})
        return count

    async def sweep_once(self, *, now: datetime | None = None) -> SweepResult:
        """One pass over the background jobs due now."""
        result = SweepResult()
        items = await self._storage.job_reconcile_claim(
            limit=self._batch_size, lease_s=CLAIM_LEASE_S, now=now
        )
        result.claimed = len(items)
        gate = asyncio.Semaphore(self._concurrency)

        async def one(item: BackgroundJob) -> None:
            async with gate:
                outcome = await self._reconcile(item, now)
            getattr(result, outcome).append(item.job.id)

        await asyncio.gather(*(one(item) for item in items))
        return result

    async def _reconcile(self, item: BackgroundJob, now: datetime | None) -> str:
        job = item.job
        if job.damaged:
            return await self._poison(item, None, now)
        try:
            provider = self._providers.get(job.provider)
        except errors.UnknownProvider:
            provider = None
        if not isinstance(provider, BackgroundProvider) or job.provider_job_id is None:
            return await self._defer(
                item,
                ReconcileDeferral(
                    job.id,
                    job.provider_job_id or "",
                    reconcile.failure_backoff_s(
                        item.reconcile_failures, max_s=300.0, rng=self._rng
                    ),
                    failure=settlements.failure(
                        STATUS_CHECK_FAILED,
                        "unknown_provider",
                        f"provider {job.provider!r} is not configured for background jobs",
                    ),
                ),
                now,
            )
        ref = ProviderJobRef(job.id, job.provider_job_id, job.endpoint, job.model)
        try:
            if job.state is JobState.CANCELLED:
                return await self._watch_after_cancel(item, provider, ref, now)
            return await self._check(item, provider, ref, now)
        except _Deferred as deferred:
            return await self._defer(item, deferred.deferral, now)
        except _Settle as settle:
            if job.state is JobState.CANCELLED:  # stop watching what the provider lost
                await self._storage.job_discard_late_result(
                    job_id=job.id,
                    provider_job_id=ref.provider_job_id,
                    to_state=JobState.FAILED,
                    usage=None,
                    actor=ACTOR,
                    now=now,
                )
                return "ignored"
            return await self._settle(item, settle.settlement, now)
        except errors.StorageUnavailable as exc:
            # Completion handling failed on our side: the claim's lease brings the job back.
            log.warning(
                "reconciler could not record a verdict: %s",
                type(exc).__name__,
                extra={"job_id": job.id, "provider_job_id": job.provider_job_id},
            )
            return "failed_checks"
        except Exception as exc:  # a bug, or a verdict the database refuses (a NUL in a result
            # on PostgreSQL): keep the loop alive; after a few, the job fails alone
            with contextlib.suppress(errors.StorageError):
                if item.reconcile_failures + 1 >= POISON_AFTER_FAILURES:
                    return await self._poison(item, exc, now)
                log.exception(
                    "reconciler failed on a job",
                    extra={"job_id": job.id, "provider_job_id": job.provider_job_id},
                )
                failure = errors.ProviderRetryable(
                    f"internal error while handling the job ({type(exc).__name__})",
                    code="internal_error",
                )
                return await self._defer(
                    item, self._failed_check(item, COMPLETION_HANDLING_FAILED, failure), now
                )
            return "failed_checks"  # not recorded: the claim's lease brings it back

    async def _poison(
        self, item: BackgroundJob, exc: BaseException | None, now: datetime | None
    ) -> str:
        job = item.job
        detail = verdicts.poison_detail(job, exc)
        log_poison("reconciler", Poisoning(job.id, detail, exc))
        metrics.POISON_JOBS.labels("reconciler").inc()
        if job.state is JobState.CANCELLED:  # cancelled here and watched: stop watching
            await self._storage.job_discard_late_result(
                job_id=job.id,
                provider_job_id=job.provider_job_id or "",
                to_state=JobState.FAILED,
                usage=None,
                actor=ACTOR,
                now=now,
            )
            return "ignored"
        return await self._settle(item, settlements.poison(job, detail), now)

    async def _check(
        self,
        item: BackgroundJob,
        provider: BackgroundProvider,
        ref: ProviderJobRef,
        now: datetime | None,
    ) -> str:
        job = item.job
        cancel_wanted = job.cancel_requested_at is not None and job.cancel_outcome is None
        # The claim compared the deadline with the database's clock, never this host's. (A
        # cancel that arrives after the claim is not lost: job_settle turns a retry into the
        # cancellation, and the job is claimed again for the cancel.)
        moment = _checked_at(item)
        overdue = item.overdue
        sent_cancel = False
        if (cancel_wanted or overdue) and item.cancel_sent_at is None:
            try:
                snapshot = await self._ask(item, self._send_cancel(item, provider, ref))
                sent_cancel = True
            except errors.ProviderCancelUnsupported:
                if overdue and not cancel_wanted:
                    snapshot = await self._ask(item, provider.retrieve(ref))
                else:
                    return await self._cancel_locally(item, now)
        else:
            snapshot = await self._ask(item, provider.retrieve(ref))
        if not snapshot.terminal:
            if overdue and not cancel_wanted:
                return await self._settle(item, settlements.deadline_exceeded(job, snapshot), now)
            return await self._defer(
                item, self._next_check(item, snapshot, sent_cancel, moment), now
            )
        if overdue and not cancel_wanted and snapshot.status == Status.CANCELLED:
            return await self._settle(item, settlements.deadline_exceeded(job, snapshot), now)
        result = await self._result(item, provider, ref, snapshot)
        verdict = settlements.from_snapshot(
            job,
            snapshot,
            result,
            cancel_wanted=cancel_wanted,
            settings=self._settings,
            rng=self._rng,
        )
        return await self._settle(item, verdict, now)

    async def _watch_after_cancel(
        self,
        item: BackgroundJob,
        provider: BackgroundProvider,
        ref: ProviderJobRef,
        now: datetime | None,
    ) -> str:
        """A job cancelled here while its provider could not stop it: when the provider
        finishes, its result is discarded and its cost refunded to the tenant."""
        snapshot = await self._ask(item, provider.retrieve(ref))
        if not snapshot.terminal:
            moment = _checked_at(item)
            return await self._defer(item, self._next_check(item, snapshot, False, moment), now)
        result = await self._result(item, provider, ref, snapshot)
        usage = None if result is None else result.usage.as_dict()
        await self._storage.job_discard_late_result(
            job_id=item.job.id,
            provider_job_id=ref.provider_job_id,
            to_state=settlements.state_of(snapshot),
            usage=usage,
            actor=ACTOR,
            now=now,
        )
        log.info(
            "late provider result discarded",
            extra={"job_id": item.job.id, "provider_job_id": ref.provider_job_id},
        )
        return "ignored"

    async def _send_cancel(
        self, item: BackgroundJob, provider: BackgroundProvider, ref: ProviderJobRef
    ) -> Snapshot:
        """Cancel at the provider. A cancel the provider refuses for good (a 4xx other than
        404, such as OpenAI's 400 "Cannot cancel a completed response") is never sent again:
        the job is retrieved instead. Finished: that answer settles it (the real result is
        kept, too late). Still running: as at a provider that cannot cancel."""
        try:
            return await provider.cancel(ref)
        except errors.ProviderCancelUnsupported:
            raise
        except errors.ProviderFatal as exc:
            if exc.status_code == 404:
                raise
            log.info(
                "provider refused the cancel; asking where the job stands",
                extra={
                    "job_id": item.job.id,
                    "provider_job_id": ref.provider_job_id,
                    "error_code": exc.code,
                    "status_code": exc.status_code,
                },
            )
            snapshot = await provider.retrieve(ref)
            if snapshot.terminal:
                return snapshot
            raise errors.ProviderCancelUnsupported(
                f"the provider refused to cancel a running job ({exc.message})",
                status_code=exc.status_code,
            ) from exc

    async def _ask(self, item: BackgroundJob, question: Awaitable[Snapshot]) -> Snapshot:
        """A status check or cancel; a failure defers the job (status-check-failed)."""
        job = item.job
        try:
            snapshot = await question
        except errors.ProviderCancelUnsupported:
            raise
        except errors.ProviderError as exc:
            self._providers.gates.record(job.provider, job.id, exc)
            if exc.status_code == 404 and item.reconcile_failures + 1 >= LOST_AFTER_NOT_FOUND:
                raise _Settle(settlements.lost(item.job, exc)) from exc
            raise _Deferred(self._failed_check(item, STATUS_CHECK_FAILED, exc)) from exc
        self._providers.gates.record(job.provider, job.id, None)
        return snapshot

    async def _result(
        self,
        item: BackgroundJob,
        provider: BackgroundProvider,
        ref: ProviderJobRef,
        snapshot: Snapshot,
    ) -> ProviderResult | None:
        if snapshot.result is not None or not snapshot.needs_result:
            return snapshot.result
        try:
            return await provider.fetch_result(ref, snapshot)
        except errors.ProviderError as exc:
            raise _Deferred(self._failed_check(item, COMPLETION_HANDLING_FAILED, exc)) from exc

    async def _cancel_locally(self, item: BackgroundJob, now: datetime | None) -> str:
        """The provider cannot cancel: cancel here and keep watching the provider's job."""
        job = item.job
        assert job.provider_job_id is not None
        settlement = settlements.cancelled_locally(job, watch_in_s=self._check_interval(item))
        return await self._settle(item, settlement, now)

    async def _settle(
        self, item: BackgroundJob, settlement: Settlement, now: datetime | None
    ) -> str:
        settled = await self._storage.job_settle(settlement=settlement, now=now)
        if settled is None:
            # Someone settled it first (another reconciler, a cancel): the first verdict wins.
            await self._storage.job_record_ignored(
                job_id=settlement.job_id,
                to_state=settlement.state,
                actor=ACTOR,
                reason="provider_verdict_after_settlement",
            )
            return "ignored"
        log.info(
            "job transition",
            extra={
                "job_id": settled.id,
                "tenant_id": settled.tenant_id,
                "from_state": JobState.RUNNING.value,
                "to_state": str(settled.state),
                "reason": settlement.reason,
                "actor": ACTOR,
                "provider": settled.provider,
                "provider_job_id": settlement.provider_job_id,
            },
        )
        return "settled"

    # -- scheduling --------------------------------------------------------------------------

    def _check_interval(self, item: BackgroundJob) -> float:
        config = self._providers.config(item.job.provider)
        return reconcile.next_check_in_s(
            item.reconcile_checks + 1,
            first_s=config.reconcile_after_s,
            max_s=config.reconcile_max_interval_s,
            rng=self._rng,
        )

    def _next_check(
        self, item: BackgroundJob, snapshot: Snapshot, sent_cancel: bool, now: datetime
    ) -> ReconcileDeferral:
        job = item.job
        in_s = self._check_interval(item)
        if item.cancel_sent_at is not None:
            # A cancel on its way: soon, backing off as it takes longer than it should.
            waited_s = (now - item.cancel_sent_at).total_seconds()
            in_s = min(in_s, max(reconcile.CANCEL_CHECK_S, waited_s / 2))
        elif sent_cancel or snapshot.status == Status.CANCELLING:
            in_s = min(in_s, reconcile.CANCEL_CHECK_S)
        return ReconcileDeferral(
            job.id,
            snapshot.provider_job_id,
            in_s,
            provider_status=snapshot.status,
            cancel_sent=sent_cancel,
            progress=progress.reported(snapshot.body),
        )

    def _failed_check(
        self, item: BackgroundJob, kind: str, exc: errors.ProviderError
    ) -> ReconcileDeferral:
        job = item.job
        config = self._providers.config(job.provider)
        in_s = reconcile.failure_backoff_s(
            item.reconcile_failures, max_s=config.reconcile_max_interval_s, rng=self._rng
        )
        if isinstance(exc, errors.ProviderRateLimited):
            in_s = max(in_s, exc.retry_after_s)
        log.warning(
            "reconciler: %s",
            kind,
            extra={
                "job_id": job.id,
                "provider": job.provider,
                "provider_job_id": job.provider_job_id,
                "error_code": exc.code,
                "status_code": exc.status_code,
            },
        )
        return ReconcileDeferral(
            job.id,
            job.provider_job_id or "",
            in_s,
            failure=settlements.failure(kind, exc.code, exc.message),
        )

    async def _defer(
        self, item: BackgroundJob, deferral: ReconcileDeferral, now: datetime | None
    ) -> str:
        still_there = await self._storage.job_reconcile_defer(deferral=deferral, now=now)
        if not still_there:
            return "ignored"
        return "failed_checks" if deferral.failure is not None else "deferred"

    # -- the long-running loop ---------------------------------------------------------------

    def request_stop(self) -> None:
        self._stopping.set()
        self._wake.set()

    def _on_cancel(self, _job_ids: list[str]) -> None:
        self._wake.set()  # a background job's cancel is due at once (see job_reconcile_claim)

    async def run(self) -> None:
        changes = self._storage.changes
        with changes.watch_reconcile() as due, changes.on_cancel(self._on_cancel):
            async with self._wake.relaying(due):
                await self._loop()

    async def _loop(self) -> None:
        refreshed = False
        backoff_s = 0.1
        while not self._stopping.is_set():
            self._wake.clear()
            try:
                if not refreshed:
                    await self.refresh()
                    refreshed = True
                result = await self.sweep_once()
                await self._prune()
                backoff_s = 0.1
            except errors.StorageError as exc:
                log.warning("reconciler pass failed: %s", type(exc).__name__)
                await self._wake.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, 5.0)
                continue
            if result.claimed >= self._batch_size:
                continue  # more may be due
            await self._wake.sleep(self._settings.reconciler_interval_s)

    async def _prune(self) -> None:
        moment = self._clock.monotonic()
        if self._pruned_at is not None and moment - self._pruned_at < PRUNE_EVERY_S:
            return
        self._pruned_at = moment
        database_now = await self._storage.database_now()
        await self._storage.provider_events_prune(before=database_now - PROVIDER_EVENT_RETENTION)


def _checked_at(item: BackgroundJob) -> datetime:
    """The database's time when the job was claimed for this check."""
    assert item.checked_at is not None, "a reconcile claim stamps checked_at"
    return item.checked_at


class _Settle(Exception):
    def __init__(self, settlement: Settlement) -> None:
        super().__init__(settlement.job_id)
        self.settlement = settlement
