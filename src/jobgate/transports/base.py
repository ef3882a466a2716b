"""The Transport seam: what carries "job X is ready" from the relay to the workers.

A transport carries job ids only; the job row stays the truth. Delivery is at-least-once and
duplicates are harmless: a worker claims the named job by id with a fenced lease
(Storage.job_claim_by_id) and acks the message after the job's verdict committed, or at once
when the job is no longer claimable; a claim that fails gives its messages back at once. A
message that names no job (not a job id: garbage, an empty entry) is acked and counted at
once. A message the broker loses is found again by the relay's sweep
(Storage.transport_publish_due). `database` (the default) has no Transport object at all:
workers claim straight from the job table, exactly as without this seam.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Protocol

from jobgate import errors

# The job ids jobgate mints (a lower-case prefix, "_", letters and digits), with room to spare.
# A transport that cannot read a message's job id (bytes that are not UTF-8, a missing field)
# hands it out with an empty one.
_JOB_ID = re.compile(r"[a-z]{1,16}_[A-Za-z0-9]{1,64}")


def well_formed(job_id: str) -> bool:
    """Whether a message's job id can name a job at all (a NUL, say, would make PostgreSQL
    refuse the claim by id every time the message came back)."""
    return _JOB_ID.fullmatch(job_id) is not None


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

    async def release(self, deliveries: Sequence[Delivery]) -> None:
        """Give these messages back undone (their claim failed): the broker hands them out
        again at once, to this consumer or another (RabbitMQ `basic.nack` with requeue, SQS
        visibility 0, Redis idle enough for the next `XAUTOCLAIM`). Raises
        TransportUnavailable (then the broker returns them itself, later)."""
        ...

    def credit(self) -> int | None:
        """How many more messages the broker will push to this consumer before some are acked
        or released (RabbitMQ's prefetch less the unsettled deliveries); None where the
        broker sets no such bound (Redis, SQS)."""
        ...

    def outstanding(self) -> list[Delivery]:
        """The deliveries `receive` handed out and nobody acked or released since, where
        `credit` is bounded (empty elsewhere): what a lost delivery would hold for good."""
        ...

    async def extend(self, deliveries: Sequence[Delivery], *, visibility_s: float) -> None:
        """Keep these messages from being handed to another consumer for `visibility_s` more
        (called with each lease heartbeat). Best effort: a redelivery is harmless."""
        ...

    async def lag(self) -> int:
        """Messages waiting in the broker, delivered or not but unacked."""
        ...
