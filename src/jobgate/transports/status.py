"""Whether this process reaches its broker: set by the worker's intake and the relay, read by
/readyz (which fails while the broker is down under `transport_fallback = "fail"`) and shown
as jobgate_transport_up."""

from __future__ import annotations

from jobgate import metrics
from jobgate.config import Settings

_down: set[str] = set()  # transports (by name) whose last call in this process failed


def mark(name: str, *, up: bool) -> None:
    metrics.TRANSPORT_UP.labels(name).set(1 if up else 0)
    if up:
        _down.discard(name)
    else:
        _down.add(name)


def readiness_failure(settings: Settings) -> str | None:
    """Why this process is not ready because of its broker, or None: only under
    `transport_fallback = "fail"` (with `database`, claims go on from the job table)."""
    if settings.transport == "database" or settings.transport_fallback != "fail" or not _down:
        return None
    return "transport_unavailable"
