"""Transports (DESIGN §9): what carries "job ready" messages to workers. The job row
stays the truth; see transports.base for the seam and docs/transports.md for the choice."""

from __future__ import annotations

import importlib
import urllib.parse

from jobgate import errors
from jobgate.config import Settings
from jobgate.transports.base import Transport

# The broker client each scheme imports, and the extra (`pip install 'jobgate[EXTRA]'`) that
# installs it.
CLIENTS: dict[str, tuple[str, str]] = {
    "redis": ("redis", "redis"),
    "rediss": ("redis", "redis"),
    "amqp": ("aio_pika", "amqp"),
    "amqps": ("aio_pika", "amqp"),
    "sqs": ("aiobotocore", "sqs"),
}


def require_client(url: str) -> None:
    """Raise errors.ConfigError, naming the extra to install, when the broker client that the
    transport `url` needs is not installed: every role checks it at start, so a missing
    extra is one line there rather than a traceback in the first worker."""
    client = CLIENTS.get(urllib.parse.urlsplit(url).scheme)
    if client is None:
        return
    module, extra = client
    try:
        importlib.import_module(module)
    except ImportError:
        raise errors.ConfigError(
            "JOBGATE_TRANSPORT",
            f"{url.split(':', 1)[0]}:// needs the {module} package: pip install 'jobgate[{extra}]'",
        ) from None


def _take(url: str, name: str) -> tuple[str, str | None]:
    """`url` without its `name` query parameter, and that parameter's value (jobgate's own
    options, kept out of what the broker's client parses)."""
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    value = next((v for k, v in query if k == name), None)
    rest = urllib.parse.urlencode([(k, v) for k, v in query if k != name])
    return urllib.parse.urlunsplit(parts._replace(query=rest)), value


def for_settings(settings: Settings, *, consumer: str) -> Transport | None:
    """The transport `settings.transport` names, not yet opened; None for `database` (workers
    claim straight from the job table). `consumer` names this process to the broker."""
    url = settings.transport
    scheme = urllib.parse.urlsplit(url).scheme
    if url == "database":
        return None
    if scheme in ("redis", "rediss"):
        from jobgate.transports import redis_streams

        url, stream = _take(url, "stream")  # ?stream=NAME (default jobgate:ready)
        return redis_streams.RedisStreamsTransport(
            url,
            consumer=consumer,
            claim_idle_s=settings.lease_ttl_s,
            stream=stream or redis_streams.STREAM,
            group=f"{stream}:workers" if stream else redis_streams.GROUP,
        )
    if scheme in ("amqp", "amqps"):
        from jobgate.transports import amqp

        url, queue = _take(url, "queue")  # ?queue=NAME (default jobgate.ready)
        return amqp.AmqpTransport(
            url,
            consumer=consumer,
            prefetch=settings.worker_concurrency,
            queue=queue or amqp.QUEUE,
        )
    if scheme == "sqs":
        from jobgate.transports.sqs import SqsTransport

        return SqsTransport(url, visibility_s=settings.lease_ttl_s)
    raise errors.ConfigError("transport", f"unknown transport scheme {scheme!r}")
