"""A worker's leases: the jobs it holds, one renewal of all of them per heartbeat interval, and
the calls stopped whose lease is gone, about to run out, or whose cancel was requested."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
from typing import Any

from jobgate import errors
from jobgate.clock import Clock
from jobgate.config import Settings
from jobgate.domain.job import Job, Lease
from jobgate.roles.intake import Intake
from jobgate.storage import protocol

log = logging.getLogger("jobgate.roles.worker")

ABORT_CANCEL = "cancel"  # the client asked: stop the call, confirm `cancelled`
ABORT_LEASE_LOST = "lease_lost"  # someone else owns the job now: stop, write nothing
ABORT_LEASE_EXPIRING = "lease_expiring"  # cannot renew in time: stop, write nothing
ABORT_SHUTDOWN = "shutdown"  # graceful stop: give the job back at once
ABORT_OUTPUT_NOT_STORED = "output_not_stored"  # the live output was refused: fail the attempt


@dataclasses.dataclass(slots=True)
class InFlight:
    """A job the worker holds, from its claim until its verdict is written or its lease lost."""

    job: Job
    lease: Lease
    renewed_at: float  # monotonic time at which the last successful renewal was sent
    abort_reason: str | None = None
    # The job's own task while it awaits the provider (one task per job: the call runs in it,
    # so stopping the call cancels that task inside the call, and only there).
    calling: asyncio.Task[Any] | None = None
    task: asyncio.Task[Any] | None = None  # the task running the job (it may run others first)
    writing: bool = False  # the verdict is with the finish batcher: the slot is free again

    def stop(self, reason: str) -> None:
        """Abort the job's provider call (now, or as soon as it starts) for `reason`."""
        if self.abort_reason is None:
            self.abort_reason = reason
            if self.calling is not None:
                self.calling.cancel()


class LeaseKeeper:
    """Keeps the leases of `inflight` (the worker's own table of held jobs, shared)."""

    def __init__(
        self,
        *,
        storage: protocol.WorkerStorage,
        settings: Settings,
        clock: Clock,
        worker_id: str,
        inflight: dict[str, InFlight],
        intake: Intake | None,
    ) -> None:
        self._storage = storage
        self._settings = settings
        self._clock = clock
        self._worker_id = worker_id
        self._inflight = inflight
        self._intake = intake
        # No held lease was renewed (or claimed) before this monotonic time: a lower bound,
        # lowered by claims and raised by check_lease_expiry's full passes, so that the check
        # made every tick is one comparison while thousands of long calls wait.
        self._renewed_floor = math.inf
        lease_ttl_s = settings.lease_ttl_s
        # Stop work this long before the lease would run out without a renewal.
        self._safety_margin_s = min(settings.heartbeat_interval_s, lease_ttl_s / 4)
        # How long a renewal's answer can still save a lease: beyond this from its sending,
        # check_lease_expiry has stopped the calls it would have renewed.
        self._renewal_window_s = lease_ttl_s - self._safety_margin_s
        # The broker call that keeps the held messages invisible (one at a time, never awaited
        # by a renewal: a slow broker must not hold up the database's leases).
        self._extending: asyncio.Task[None] | None = None

    def claimed(self, sent_at: float) -> None:
        """Leases were taken by a claim sent at `sent_at` (monotonic)."""
        self._renewed_floor = min(self._renewed_floor, sent_at)

    async def heartbeat_once(self) -> bool:
        """Renew every held lease in one statement, however many there are; stop the calls
        whose lease is gone or whose cancel was requested. Answers whether the renewal landed;
        a failed one only matters once a lease is about to run out."""
        entries = list(self._inflight.values())
        if not entries:
            return True
        sent_at = self._clock.monotonic()
        try:
            # Waited for as long as its answer can still save a lease, not one interval: a
            # renewal that lands late still extends every lease (counted from `sent_at`), and
            # cancelling it would make each beat on a slow database fail alike until calls
            # that are still running lose their leases.
            async with asyncio.timeout(self._renewal_window_s):
                held = await self._storage.job_heartbeat(
                    leases=[entry.lease for entry in entries],
                    lease_ttl_s=self._settings.lease_ttl_s,
                )
        except (errors.StorageError, TimeoutError):
            log.warning(
                "heartbeat failed", extra={"worker_id": self._worker_id, "count": len(entries)}
            )
            self.check_lease_expiry()
            return False
        answers = {result.job_id: result for result in held}
        for entry in entries:
            answer = answers.get(entry.job.id)
            if answer is None:
                if entry.job.id in self._inflight:
                    entry.stop(ABORT_LEASE_LOST)
                continue
            entry.renewed_at = max(entry.renewed_at, sent_at)
            if answer.cancel_requested:
                entry.stop(ABORT_CANCEL)
        if self._intake is not None:  # the messages' visibility follows the leases
            self._extend_visibility(self._intake, [entry.lease for entry in entries])
        return True

    def _extend_visibility(self, intake: Intake, leases: list[Lease]) -> None:
        """Extend the held messages' visibility beside the renewals, not in their way: a beat
        that waited on a slow broker (an overloaded SQS endpoint answering in seconds) sent no
        renewal meanwhile, every lease of the worker ran out, the jobs went back to the queue
        and were swept to the broker again, loading it more. An extension still running when
        the next beat comes is left to finish (the next one covers every held message); a
        message that became visible meanwhile is redelivered and dropped, its job running."""
        if self._extending is not None and not self._extending.done():
            return
        self._extending = asyncio.create_task(self._extend(intake, leases), name="visibility")

    async def _extend(self, intake: Intake, leases: list[Lease]) -> None:
        try:
            async with asyncio.timeout(self._renewal_window_s):
                await intake.extend(leases)
        except Exception as exc:  # a task nobody awaits: say what failed, keep the worker
            log.warning(
                "message visibility not extended: %s",
                type(exc).__name__,
                extra={"worker_id": self._worker_id, "count": len(leases)},
            )

    def check_lease_expiry(self) -> None:
        """Stop calls whose lease will run out before another renewal could land.

        Called every tick: while the oldest renewal is recent enough (the usual case, however
        many calls are held) it compares one number; otherwise it walks every entry, stops
        the expiring ones and raises the floor to the oldest renewal among the others."""
        now = self._clock.monotonic()
        limit_s = self._settings.lease_ttl_s - self._safety_margin_s
        if now - self._renewed_floor < limit_s:
            return
        floor = math.inf
        for entry in list(self._inflight.values()):
            if entry.abort_reason is not None:
                continue  # stopped already: nothing left to check
            if now - entry.renewed_at >= limit_s:
                log.warning(
                    "lease about to expire without renewal; stopping the call",
                    extra={"job_id": entry.job.id, "worker_id": self._worker_id},
                )
                entry.stop(ABORT_LEASE_EXPIRING)
            else:
                floor = min(floor, entry.renewed_at)
        self._renewed_floor = floor

    def on_cancel_requested(self, job_ids: list[str]) -> None:
        for job_id in job_ids:
            entry = self._inflight.get(job_id)
            if entry is not None:
                entry.stop(ABORT_CANCEL)

    async def run(self) -> None:
        """One renewal in flight at a time, one per interval: a slow database gets no pile of
        overlapping statements, and the next beat starts as soon as a late one answers."""
        interval_s = self._settings.heartbeat_interval_s
        tick_s = min(1.0, interval_s / 4)
        next_beat = self._clock.monotonic() + interval_s
        beat: asyncio.Task[bool] | None = None
        try:
            while True:
                await asyncio.sleep(tick_s)
                self.check_lease_expiry()
                now = self._clock.monotonic()
                if beat is not None and beat.done():
                    if not _renewed(beat):
                        # Leases keep running out meanwhile: try again soon, not a whole
                        # interval later.
                        next_beat = min(next_beat, now + interval_s / 4)
                    beat = None
                if beat is None and now >= next_beat:
                    beat = asyncio.create_task(self.heartbeat_once(), name="heartbeat")
                    next_beat = now + interval_s
        finally:
            if beat is not None:
                beat.cancel()
            if self._extending is not None:
                self._extending.cancel()


def _renewed(beat: asyncio.Task[bool]) -> bool:
    if beat.cancelled():
        return False
    if beat.exception() is not None:
        log.error("heartbeat raised", exc_info=beat.exception())
        return False
    return beat.result()
