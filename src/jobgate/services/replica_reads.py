"""Which server answers a read that may lag: a streaming replica (JOBGATE_READ_DATABASE_URL) or
the primary. Status, list, events and the first read of a long poll come here; every write,
and every read that follows a change (a long poll woken, a stream), goes to the primary.

The rules, each for a reason:
- Read-your-writes, by WAL position. A tenant's read goes to the replica only once the replica
  has replayed the primary's WAL up to a position sampled after that tenant's last write
  through this process (a submit, a cancel, a delete, a redrive): the sample is the primary's
  insert position, asked after the write returned, so every commit of the write lies before
  it; the replica's replay position is read after that. Until then the tenant reads from the
  primary: a submit's own answer, an idempotent replay and a read right after a cancel never
  go backwards.
- Bounded staleness for everyone else: the replica answers only while it has replayed a
  sample at most `max_lag_s` old (a replica paused, cut off or far behind is not read).
- A miss is not an answer: a replica read that finds nothing (a job not replayed yet, a list
  cursor it does not hold) is asked again of the primary.
- A replica that fails (down, refusing, a query cancelled by recovery, slower than
  READ_TIMEOUT_S) is never the client's problem: the read is answered by the primary, and the
  replica is left alone for DOWN_S before it is sampled again.

Samples are taken on demand, one at a time: a read starts one when the newest is older than
the probe period (a quarter of `max_lag_s`, at most PROBE_EVERY_S), and never waits for it.
An idle process asks nothing. Another process's writes are seen on the replica within the
staleness bound, not at once: a client that must read its own writes through another API
process reads them at most `max_lag_s` late (or pins its API process).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from jobgate import metrics
from jobgate.clock import Clock
from jobgate.storage.protocol import JobLogStore, JobReadStore
from jobgate.storage.records import WalPosition

log = logging.getLogger(__name__)

T = TypeVar("T")

PROBE_EVERY_S = 0.2  # the most often one process samples both servers' WAL positions
READ_TIMEOUT_S = 2.0  # a replica read or sample slower than this is a failure
DOWN_S = 5.0  # a failed replica is not read, nor sampled, for this long
MAX_PENDING = 1_000  # primary samples kept while the replica has not replayed them
MAX_WRITERS = 10_000  # tenants' last writes remembered before the stale ones are forgotten


class LaggingStore(JobReadStore, JobLogStore, Protocol):
    """What a read that may lag calls, on whichever server answers it."""


class WalStore(Protocol):
    async def wal_position(self) -> WalPosition: ...


class Replica(LaggingStore, WalStore, Protocol):
    """A streaming replica's storage: opened on first use, closed with the process."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...


@dataclasses.dataclass(frozen=True, slots=True)
class _Sample:
    taken_at: float  # monotonic, before the primary was asked
    lsn: int  # the primary's insert position then


class ReplicaReads:
    """Routes reads that may lag (module docstring). Without a replica every read is the
    primary's, unchanged."""

    def __init__(
        self,
        *,
        primary: LaggingStore,
        clock: Clock,
        replica: Replica | None = None,
        primary_wal: WalStore | None = None,
        max_lag_s: float = 1.0,
    ) -> None:
        self._primary = primary
        self._replica = replica
        self._primary_wal = primary_wal
        self._clock = clock
        self.max_lag_s = max_lag_s
        self._probe_every_s = min(PROBE_EVERY_S, max_lag_s / 4)
        self._wrote: dict[str, float] = {}  # tenant id -> monotonic time after its last write
        self._pending: collections.deque[_Sample] = collections.deque()
        self._caught_up_at: float | None = None  # the newest sample the replica has replayed
        self._probed_at = -math.inf
        self._probe: asyncio.Task[None] | None = None
        self._down_until = -math.inf
        self._opened = False

    @property
    def replica(self) -> Replica | None:
        return self._replica

    def wrote(self, tenant_id: str) -> None:
        """Call after a write of the tenant returned (or a write that found nothing to change,
        answered from the primary): its reads go to the primary until the replica has
        replayed past what that answer showed."""
        if self._replica is not None:
            self._wrote[tenant_id] = self._clock.monotonic()

    async def read(self, tenant_id: str, run: Callable[[LaggingStore], Awaitable[T]]) -> T:
        """`run` on the replica when it may answer this tenant, else (or when it fails or
        answers None) on the primary."""
        replica = self._replica
        if replica is None or not self._fresh_for(tenant_id):
            if replica is not None:
                metrics.LAGGING_READS.labels("primary").inc()
            return await run(self._primary)
        try:
            async with asyncio.timeout(READ_TIMEOUT_S):
                found = await run(replica)
        except Exception as exc:  # any failure of the replica is answered by the primary
            self._failed("read", exc)
            metrics.LAGGING_READS.labels("primary_after_error").inc()
            return await run(self._primary)
        if found is None:  # not replayed yet, perhaps: the primary knows
            metrics.LAGGING_READS.labels("primary_after_miss").inc()
            return await run(self._primary)
        metrics.LAGGING_READS.labels("replica").inc()
        return found

    def behind_s(self) -> float | None:
        """How old the newest primary sample the replica has replayed is (None: none yet)."""
        if self._caught_up_at is None:
            return None
        return self._clock.monotonic() - self._caught_up_at

    async def close(self) -> None:
        probe, self._probe = self._probe, None
        if probe is not None:
            probe.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await probe
        if self._replica is not None and self._opened:
            self._opened = False
            await self._replica.close()

    # -- freshness -----------------------------------------------------------------------

    def _fresh_for(self, tenant_id: str) -> bool:
        now = self._clock.monotonic()
        self._start_probe(now)
        if now < self._down_until or self._caught_up_at is None:
            return False
        if now - self._caught_up_at > self.max_lag_s:
            return False
        wrote = self._wrote.get(tenant_id)
        return wrote is None or wrote < self._caught_up_at

    def _start_probe(self, now: float) -> None:
        if self._probe is not None or now < self._down_until:
            return
        if now - self._probed_at < self._probe_every_s:
            return
        self._probed_at = now
        self._probe = asyncio.create_task(self._probe_once(), name="jobgate-replica-probe")

    async def _probe_once(self) -> None:
        try:
            await self.sample_once()
        finally:
            self._probe = None

    async def sample_once(self) -> None:
        """One sample: the primary's insert position now, then how far the replica has
        replayed; a failure leaves the replica alone for DOWN_S. Reads start these
        themselves; tests call it directly."""
        if self._replica is None:
            return
        try:
            async with asyncio.timeout(READ_TIMEOUT_S):
                standby = await self._positions(self._clock.monotonic())
        except Exception as exc:
            self._failed("sample", exc)
            return
        self._replayed(standby)

    async def _positions(self, taken_at: float) -> WalPosition:
        """The primary's insert position (kept as a sample), then the replica's replay."""
        replica, primary = self._replica, self._primary_wal
        assert replica is not None and primary is not None
        if not self._opened:
            await replica.open()
            self._opened = True
        position = await primary.wal_position()
        if position.lsn is not None:
            self._pending.append(_Sample(taken_at, position.lsn))
            while len(self._pending) > MAX_PENDING:
                self._pending.popleft()
        return await replica.wal_position()

    def _replayed(self, standby: WalPosition) -> None:
        if not standby.in_recovery or standby.lsn is None:
            # Not a standby (a second primary, or one promoted): its data is no replica's.
            self._failed("sample", RuntimeError("JOBGATE_READ_DATABASE_URL is not a standby"))
            return
        while self._pending and self._pending[0].lsn <= standby.lsn:
            self._caught_up_at = self._pending.popleft().taken_at
        if self._caught_up_at is not None and len(self._wrote) > MAX_WRITERS:
            caught = self._caught_up_at
            self._wrote = {t: at for t, at in self._wrote.items() if at >= caught}

    def _failed(self, what: str, exc: Exception) -> None:
        if self._clock.monotonic() >= self._down_until:  # once per outage, not per read
            log.warning(
                "read replica unusable, reading from the primary for %.0f s: %s failed (%s)",
                DOWN_S,
                what,
                type(exc).__name__,
            )
        self._down_until = self._clock.monotonic() + DOWN_S
        self._pending.clear()
        self._caught_up_at = None
