"""The transport relay: publishes a "job ready" message for every ready transition after it
committed, and republishes ready jobs still unclaimed past their republish time (the sweep).
The sweep holds while the broker reports a backlog of at least the window: it cannot tell a
lost message from one still waiting, and a broker that holds that many is slow, not lossy;
republishing then would only pile duplicates on its backlog.

Every worker process runs one; Storage.transport_publish_due hands each publication to one
relay only. A publish that fails is deferred briefly (tried again soon, holding no place in the
window meanwhile), never lost: the ledger row committed before the publish, and the sweep covers
a crash in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Protocol

from jobgate import metrics
from jobgate.config import Settings
from jobgate.services.limits import LimitsService
from jobgate.storage.protocol import TransportStore
from jobgate.transports import status
from jobgate.transports.base import Transport, TransportUnavailable
from jobgate.wakeups import ChangeHub, wait_for

log = logging.getLogger(__name__)

RELAY_BATCH_MAX = 500


class RelayStore(TransportStore, Protocol):
    changes: ChangeHub


class Relay:
    def __init__(
        self,
        *,
        storage: RelayStore,
        transport: Transport,
        settings: Settings,
        limits: LimitsService | None = None,
        skip_providers: Iterable[str] | Callable[[], Iterable[str]] = (),
    ) -> None:
        self._storage = storage
        # Rate-limited providers: never published (the workers claim them from the table,
        # taking from their buckets first), so they hold no place in the window. A callable
        # is asked at each batch: limits reload with the configuration.
        self._skip_providers = skip_providers
        self._transport = transport
        self._settings = settings
        self._limits = limits  # the tenants' weights, for a fair window
        self._stop = asyncio.Event()
        self._claimed = asyncio.Event()
        self._broker_backlog: int | None = None  # the broker's last reported lag

    def wake(self) -> None:
        """Messages were claimed: the window has room again (this process's intake calls it;
        other processes' claims are seen at the next poll)."""
        self._claimed.set()

    async def relay_once(self) -> int:
        """Publish one batch of due publications; the number published."""
        policy = None if self._limits is None else await self._limits.claim_policy()
        due = await self._storage.transport_publish_due(
            sweep=not self.sweep_held(),
            limit=RELAY_BATCH_MAX,
            republish_after_s=self._settings.transport_sweep_after_s,
            window=self._settings.transport_window,
            policy=policy,
            skip_providers=sorted(
                self._skip_providers() if callable(self._skip_providers) else self._skip_providers
            ),
        )
        if not due:
            return 0
        ids = [p.job_id for p in due]
        try:
            await self._transport.publish(ids)
        except TransportUnavailable as exc:
            status.mark(self._transport.name, up=False)
            log.warning("publish failed: %s", exc.message, extra={"count": len(ids)})
            await self._storage.transport_defer(
                job_ids=ids, delay_s=self._settings.transport_defer_s
            )
            raise
        status.mark(self._transport.name, up=True)
        swept = sum(1 for p in due if p.published_count > 1)
        published = metrics.TRANSPORT_PUBLISHED
        published.labels(self._transport.name, "ready").inc(len(due) - swept)
        if swept:
            published.labels(self._transport.name, "sweep").inc(swept)
            log.info("republished unclaimed ready jobs", extra={"count": swept})
        return len(due)

    def sweep_held(self) -> bool:
        """Whether the sweep holds: the broker's last reported backlog is at least the
        window."""
        backlog = self._broker_backlog
        return backlog is not None and backlog >= self._settings.transport_window

    async def read_lag(self) -> None:
        """Ask the broker for its backlog (the lag gauge, and whether the sweep holds)."""
        held = self.sweep_held()
        lag = await self._transport.lag()
        metrics.TRANSPORT_LAG.labels(self._transport.name).set(lag)
        self._broker_backlog = lag
        if self.sweep_held() != held:
            log.info(
                "sweep held: the broker's backlog is at least the window"
                if not held
                else "sweep resumed: the broker's backlog is below the window",
                extra={"count": lag},
            )
        metrics.TRANSPORT_SWEEP_HELD.labels(self._transport.name).set(int(self.sweep_held()))

    def request_stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        """Relay until request_stop(): at once on new work, else every poll interval (which
        also runs the sweep and refreshes the lag gauge)."""
        poll_s = self._settings.worker_poll_interval_s
        backoff_s = 0.1
        with self._storage.changes.watch_work() as work:
            while not self._stop.is_set():
                try:
                    while await self.relay_once() == RELAY_BATCH_MAX:
                        pass
                    with contextlib.suppress(TransportUnavailable):
                        await self.read_lag()
                    backoff_s = 0.1
                except Exception as exc:  # storage or broker down: keep going, slower
                    log.warning("relay pass failed: %s", type(exc).__name__)
                    await wait_for(self._stop, backoff_s)
                    backoff_s = min(backoff_s * 2, 5.0)
                    continue
                waiters = {
                    asyncio.ensure_future(event.wait())
                    for event in (self._stop, work, self._claimed)
                }
                await asyncio.wait(waiters, timeout=poll_s, return_when="FIRST_COMPLETED")
                for waiter in waiters:
                    waiter.cancel()
                work.clear()
                self._claimed.clear()
