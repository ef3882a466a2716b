"""Watching a consumer's credit. A broker that bounds a consumer's unsettled deliveries
(RabbitMQ's prefetch) sends it nothing once they are all unacked: a delivery lost on the way
between receive and ack would hold its place for good, and enough of them leave the worker deaf
while work waits. Once that lasted a lease (by then every delivery of a running job has been
acked with its verdict, or its lease is gone), it is reported (jobgate_transport_stalled,
/readyz's `transport_stalled`, one warning) and the deliveries no job of the worker holds are
handed back to be given back to the broker."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from jobgate.clock import Clock
from jobgate.transports import status
from jobgate.transports.base import Delivery, Transport, TransportUnavailable

log = logging.getLogger(__name__)


class StallWatch:
    def __init__(
        self, *, transport: Transport, clock: Clock, after_s: float, worker_id: str
    ) -> None:
        self._transport = transport
        self._clock = clock
        self._after_s = after_s
        self._worker_id = worker_id
        self._since: float | None = None  # monotonic; when the credit ran out
        self.stalled = False

    def heard(self) -> None:
        """The consumer received messages, or has credit: not stalled."""
        self._since = None
        if self.stalled:
            self.stalled = False
            status.mark_stalled(self._transport.name, stalled=False)
            log.info("the consumer has credit again", extra={"worker_id": self._worker_id})

    async def starved(self, held: Callable[[], Iterable[Delivery]]) -> list[Delivery]:
        """After a receive that brought nothing although the worker had free slots: the
        deliveries to give back (outstanding, and none of `held()`: those the worker holds for
        its jobs or is acking) once the consumer has had no credit for a lease while messages
        wait; else none."""
        credit = self._transport.credit()
        if credit is None or credit > 0:
            self.heard()
            return []
        now = self._clock.monotonic()
        if self._since is None:
            self._since = now
        if now - self._since < self._after_s:
            return []
        try:
            waiting = await self._transport.lag()
        except TransportUnavailable:
            return []  # an outage, reported as such
        if waiting <= 0:
            return []  # nothing waits: no credit costs nothing yet
        kept = set(held())
        outstanding = self._transport.outstanding()
        lost = [d for d in outstanding if d not in kept]
        if not self.stalled:
            self.stalled = True
            status.mark_stalled(self._transport.name, stalled=True)
            log.warning(
                "the consumer has no credit left while messages wait",
                extra={
                    "worker_id": self._worker_id,
                    "waiting": waiting,
                    "held": len(outstanding) - len(lost),
                    "lost": len(lost),
                },
            )
        return lost
