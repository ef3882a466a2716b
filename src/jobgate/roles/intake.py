"""A worker's side of a transport: received messages become jobs claimed by id under fenced
leases; the messages of claimed jobs are acked once their verdict committed, the others at once.
A message that names no job is acked at once as garbage. A claim that fails (the database is
unreachable) gives its messages back to the broker, so that none is held by nobody.

While the broker is unreachable, `transport_fallback` decides: `database` claims straight from
the job table meanwhile (the worker keeps working, more slowly at scale; logged, counted and
shown by /readyz); `fail` claims nothing (jobgate_transport_up 0 and /readyz say why) until
the broker is back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from jobgate import errors, metrics
from jobgate.clock import Clock
from jobgate.config import Settings
from jobgate.domain.job import Job, Lease
from jobgate.storage.protocol import TransportStore
from jobgate.storage.records import ClaimPolicy
from jobgate.transports import status
from jobgate.transports.base import Delivery, Transport, TransportUnavailable, well_formed
from jobgate.transports.stall import StallWatch

log = logging.getLogger(__name__)

RECEIVE_WAIT_MAX_S = 1.0  # a blocking receive returns at least this often (stop, free slots)
RETRY_BROKER_S = 5.0  # during an outage, how often the broker is tried again


class Intake:
    def __init__(
        self,
        *,
        storage: TransportStore,
        transport: Transport,
        settings: Settings,
        clock: Clock,
        worker_id: str,
        on_claimed: Callable[[], None] | None = None,
    ) -> None:
        self.transport = transport
        self._on_claimed = on_claimed  # the relay's wake-up: the window has room again
        self._storage = storage
        self._settings = settings
        self._clock = clock
        # When the last claim by id was sent (monotonic): its leases run from then, not from
        # the receive before it, which may have waited seconds for the broker.
        self.claim_sent_at = clock.monotonic()
        self._worker_id = worker_id
        # By lease: the messages to ack once that lease's verdict committed.
        self._held: dict[Lease, list[Delivery]] = {}
        self._down_until: float | None = None  # monotonic; None while the broker answers
        # Acks of finished jobs, sent together while an earlier ack is in flight (one SQS
        # DeleteMessageBatch, one Redis pipeline, for many verdicts).
        self._acks: list[Delivery] = []
        self._acking: asyncio.Task[None] | None = None
        self._stall = StallWatch(
            transport=transport, clock=clock, after_s=settings.lease_ttl_s, worker_id=worker_id
        )

    @property
    def broker_down(self) -> bool:
        """True during an outage (then the caller claims per `transport_fallback`)."""
        return self._down_until is not None and self._clock.monotonic() < self._down_until

    def _outage(self, exc: TransportUnavailable) -> None:
        name = self.transport.name
        if self._down_until is None:
            fallback = self._settings.transport_fallback == "database"
            meanwhile = "claiming from the job table" if fallback else "claiming nothing"
            log.warning(
                "broker unreachable: %s; %s meanwhile",
                exc.message,
                meanwhile,
                extra={"worker_id": self._worker_id},
            )
            if fallback:
                metrics.TRANSPORT_FALLBACKS.labels(name).inc()
                status.mark_fallback(name, active=True)
        self._down_until = self._clock.monotonic() + RETRY_BROKER_S
        status.mark(name, up=False)

    def _reachable(self) -> None:
        name = self.transport.name
        if self._down_until is not None:
            log.info("broker reachable again", extra={"worker_id": self._worker_id})
            self._down_until = None
            status.mark_fallback(name, active=False)
        status.mark(name, up=True)

    async def _by_job(self, deliveries: Sequence[Delivery]) -> dict[str, list[Delivery]]:
        """The deliveries naming a well-formed job id, by job (redeliveries counted, the
        malformed ones acknowledged away)."""
        redelivered = sum(1 for d in deliveries if d.delivery_count > 1)
        if redelivered:
            metrics.TRANSPORT_REDELIVERIES.labels(self.transport.name).inc(redelivered)
        malformed = [d for d in deliveries if not well_formed(d.job_id)]
        if malformed:
            await self._ack_malformed(malformed)
        by_job: dict[str, list[Delivery]] = {}
        for delivery in deliveries:
            if well_formed(delivery.job_id):
                by_job.setdefault(delivery.job_id, []).append(delivery)
        return by_job

    async def claim(
        self,
        *,
        count: int,
        providers: Sequence[str] | None,
        policy: ClaimPolicy | None,
    ) -> list[Job]:
        """Receive up to `count` messages (blocking up to a second) and claim their jobs."""
        name = self.transport.name
        try:
            deliveries = await self.transport.receive(
                max_count=count,
                wait_s=min(RECEIVE_WAIT_MAX_S, self._settings.worker_poll_interval_s),
            )
        except TransportUnavailable as exc:
            self._outage(exc)
            return []
        self._reachable()
        if not deliveries:
            await self._give_back(await self._stall.starved(self._settling))
            return []
        self._stall.heard()
        by_job = await self._by_job(deliveries)
        if not by_job:
            return []
        self.claim_sent_at = self._clock.monotonic()
        try:
            result = await self._storage.job_claim_by_id(
                worker_id=self._worker_id,
                job_ids=list(by_job),
                lease_ttl_s=self._settings.lease_ttl_s,
                providers=providers,
                policy=policy,
            )
        except BaseException:
            # Given back at once, whatever failed: held by nobody, a RabbitMQ delivery would
            # keep its place in the prefetch for good (the broker returns it only when the
            # connection closes), a Redis or SQS one would hide until its idle or visibility
            # time. A claim whose reply was lost is the reaper's once its lease runs out;
            # its messages then come back and are dropped (the job is not claimable).
            await self._give_back([d for ds in by_job.values() for d in ds])
            raise
        for job in result.claimed:  # held first: nothing below may lose them
            assert job.lease_token is not None
            self._held[Lease(job.id, job.lease_token)] = by_job[job.id]
        claimed = {job.id for job in result.claimed}
        if self._on_claimed is not None:
            self._on_claimed()
        if result.deferred:
            # Queued but not claimable now (its tenant at its cap): published again shortly.
            # Best effort: the jobs just claimed must reach the caller whatever happens here
            # (else they would wait for the reaper); a failed defer leaves them to the sweep.
            try:
                await self._storage.transport_defer(
                    job_ids=result.deferred, delay_s=self._settings.transport_defer_s
                )
            except errors.StorageError as exc:
                log.warning(
                    "defer failed: %s", type(exc).__name__, extra={"count": len(result.deferred)}
                )
        done_with = [d for job_id, ds in by_job.items() if job_id not in claimed for d in ds]
        received = metrics.TRANSPORT_RECEIVED
        received.labels(name, "claimed").inc(len(claimed))
        received.labels(name, "deferred").inc(len(result.deferred))
        received.labels(name, "dropped").inc(len(by_job) - len(claimed) - len(result.deferred))
        await self._ack(done_with)
        return result.claimed

    async def _ack_malformed(self, deliveries: list[Delivery]) -> None:
        """Acked at once, counted and logged (once: they are not delivered again): a message
        that names no job can never be claimed, and left unacked it would come back forever
        (and count in the broker's lag). Only a sample of what it held is logged."""
        metrics.TRANSPORT_RECEIVED.labels(self.transport.name, "malformed").inc(len(deliveries))
        log.warning(
            "acked %d messages that name no job",
            len(deliveries),
            extra={
                "worker_id": self._worker_id,
                "count": len(deliveries),
                "sample": ascii(deliveries[0].job_id[:40]),
            },
        )
        await self._ack(deliveries)

    async def _give_back(self, deliveries: list[Delivery]) -> None:
        """Release `deliveries` to the broker (best effort: one it cannot reach returns them
        itself, later)."""
        if not deliveries:
            return
        metrics.TRANSPORT_RECEIVED.labels(self.transport.name, "returned").inc(len(deliveries))
        try:
            await self.transport.release(deliveries)
        except TransportUnavailable as exc:
            self._outage(exc)

    def _settling(self) -> list[Delivery]:
        """The deliveries this intake answers for: held for a job, or waiting for their ack
        (one being acked is the transport's no longer)."""
        return [d for ds in self._held.values() for d in ds] + self._acks

    def finished(self, lease: Lease) -> None:
        """The lease's verdict committed (or the lease is gone): ack its job's messages, in
        the next ack batch. An ack lost to a crash or a shutdown only means a redelivery,
        which is dropped (the job is no longer claimable)."""
        self._acks += self._held.pop(lease, [])
        if self._acks and (self._acking is None or self._acking.done()):
            self._acking = asyncio.create_task(self._flush_acks(), name="transport acks")

    async def _flush_acks(self) -> None:
        while self._acks:
            batch, self._acks = self._acks, []
            await self._ack(batch)

    async def drain(self) -> None:
        """Wait for the acks in flight (at shutdown)."""
        if self._acking is not None:
            await asyncio.gather(self._acking, return_exceptions=True)

    async def extend(self, leases: Sequence[Lease]) -> None:
        """With each heartbeat: keep the held messages of these leases invisible to others."""
        held = [d for lease in leases for d in self._held.get(lease, [])]
        if not held:
            return
        try:
            await self.transport.extend(held, visibility_s=self._settings.lease_ttl_s)
        except TransportUnavailable as exc:
            self._outage(exc)

    async def _ack(self, deliveries: list[Delivery]) -> None:
        if not deliveries:
            return
        try:
            await self.transport.ack(deliveries)
        except TransportUnavailable as exc:
            # Redelivered later and dropped then (the job is running or done): harmless.
            self._outage(exc)
