"""How this process stands with its broker, for /readyz and the metrics: whether it reaches the
broker (jobgate_transport_up; under `transport_fallback = "fail"` an outage fails /readyz),
whether its worker claims from the job table meanwhile (`transport_fallback = "database"`:
a warning), and whether its consumer is stalled (no credit left while work waits: a warning).
Set by the worker's intake and the relay."""

from __future__ import annotations

from jobgate import metrics
from jobgate.config import Settings

_down: set[str] = set()  # transports (by name) whose last call in this process failed
_falling_back: set[str] = set()  # transports whose worker claims from the job table meanwhile
_stalled: set[str] = set()  # transports whose consumer has no credit while work waits


def mark(name: str, *, up: bool) -> None:
    metrics.TRANSPORT_UP.labels(name).set(1 if up else 0)
    if up:
        _down.discard(name)
    else:
        _down.add(name)


def mark_fallback(name: str, *, active: bool) -> None:
    _flag(_falling_back, name, active)


def mark_stalled(name: str, *, stalled: bool) -> None:
    metrics.TRANSPORT_STALLED.labels(name).set(1 if stalled else 0)
    _flag(_stalled, name, stalled)


def _flag(names: set[str], name: str, on: bool) -> None:
    if on:
        names.add(name)
    else:
        names.discard(name)


def readiness_failure(settings: Settings) -> str | None:
    """Why this process is not ready because of its broker, or None: only under
    `transport_fallback = "fail"` (with `database`, claims go on from the job table)."""
    if settings.transport == "database" or settings.transport_fallback != "fail" or not _down:
        return None
    return "transport_unavailable"


def warnings() -> list[str]:
    """What /readyz reports while this process still serves: `transport_fallback` (its worker
    claims from the job table, the broker being unreachable), `transport_stalled` (its
    consumer has had no credit for a lease while messages wait)."""
    found = []
    if _falling_back:
        found.append("transport_fallback")
    if _stalled:
        found.append("transport_stalled")
    return found


def reset() -> None:
    """Forget everything (a test's process-wide state between tests)."""
    for name in _down | _falling_back | _stalled:
        mark(name, up=True)
        mark_stalled(name, stalled=False)
    _falling_back.clear()
