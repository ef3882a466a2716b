"""Transports (DESIGN §9, issue 18): what carries "job ready" messages to workers. The job row
stays the truth; see transports.base for the seam and docs/transports.md for the choice."""

from __future__ import annotations

import urllib.parse

from jobgate import errors
from jobgate.config import Settings
from jobgate.transports.base import Transport


def for_settings(settings: Settings, *, consumer: str) -> Transport | None:
    """The transport `settings.transport` names, not yet opened; None for `database` (workers
    claim straight from the job table). `consumer` names this process to the broker."""
    url = settings.transport
    scheme = urllib.parse.urlsplit(url).scheme
    if url == "database":
        return None
    if scheme in ("redis", "rediss"):
        from jobgate.transports.redis_streams import RedisStreamsTransport

        return RedisStreamsTransport(url, consumer=consumer, claim_idle_s=settings.lease_ttl_s)
    if scheme in ("amqp", "amqps"):
        from jobgate.transports.amqp import AmqpTransport

        return AmqpTransport(url, consumer=consumer, prefetch=settings.worker_concurrency)
    if scheme == "sqs":
        from jobgate.transports.sqs import SqsTransport

        return SqsTransport(url, visibility_s=settings.lease_ttl_s)
    raise errors.ConfigError("transport", f"unknown transport scheme {scheme!r}")
