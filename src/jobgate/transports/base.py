"""The Transport seam: what carries "job X is ready" from the relay to the workers.

A transport carries job ids only; the job row stays the truth. Delivery is at-least-once and
duplicates are harmless: a worker claims the named job by id with a fenced lease
(Storage.job_claim_by_id) and acks the message after the job's verdict committed, or at once
when the job is no longer claimable. A message the broker loses is found again by the relay's
sweep (Storage.transport_publish_due). `database` (the default) has no Transport object at all:
workers claim straight from the job table, exactly as without this seam.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Protocol

from jobgate import errors


class TransportUnavailable(errors.JobgateError):
    """The broker cannot be reached (or refused the operation); the message keeps its cause."""

    code = "transport_unavailable"


@dataclasses.dataclass(frozen=True, slots=True)
class Delivery:
    """One received message: the job it names, how often the broker delivered it (1: the
    first time), and the broker's own handle for ack and extend."""

    job_id: str
    delivery_count: int
    handle: object


class Transport(Protocol):
    name: str  # redis | amqp | sqs: the `transport` label of the metrics

    async def open(self) -> None:
        """Connect and declare what the broker needs (stream and group, queues, DLQ).
        Idempotent; raises TransportUnavailable."""
        ...

    async def close(self) -> None:
        """Disconnect; unacked deliveries go back to the broker (redelivered later)."""
        ...

    async def publish(self, job_ids: Sequence[str]) -> None:
        """Publish one "job ready" message per id, durably (confirmed by the broker) before
        answering. Raises TransportUnavailable; some of the ids may have been published."""
        ...

    async def receive(self, *, max_count: int, wait_s: float) -> list[Delivery]:
        """Up to `max_count` messages, waiting up to `wait_s` for the first; including
        messages of consumers that died without acking. Raises TransportUnavailable."""
        ...

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        """Done with these messages (the job's verdict committed, or the job was not
        claimable): never delivered again. Idempotent; raises TransportUnavailable."""
        ...

    async def extend(self, deliveries: Sequence[Delivery], *, visibility_s: float) -> None:
        """Keep these messages from being handed to another consumer for `visibility_s` more
        (called with each lease heartbeat). Best effort: a redelivery is harmless."""
        ...

    async def lag(self) -> int:
        """Messages waiting in the broker, delivered or not but unacked."""
        ...
