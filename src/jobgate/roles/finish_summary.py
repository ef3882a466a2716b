"""What a worker finished: attempts and transitions into the metrics, and one aggregated info
line per interval instead of a line per job (a line per job costs more than the job on a fast
drain)."""

from __future__ import annotations

import collections
import logging

from jobgate import metrics
from jobgate.clock import Clock

log = logging.getLogger("jobgate.roles.worker")

SUMMARY_INTERVAL_S = 10.0  # at most one "jobs finished" info line per interval


class FinishSummary:
    def __init__(self, *, clock: Clock, worker_id: str) -> None:
        self._clock = clock
        self._worker_id = worker_id
        self._since_log: collections.Counter[str] = collections.Counter()
        self._logged_at = clock.monotonic()

    def count(self, counts: collections.Counter[tuple[str, str, str]]) -> None:
        """Attempts and transitions by (provider, reason, state), into the metrics and the
        summary line."""
        for (provider, reason, state), n in counts.items():
            metrics.ATTEMPTS.labels(provider, reason).inc(n)
            metrics.TRANSITIONS.labels(state).inc(n)
            self._since_log[state] += n
        if not counts:
            return
        now = self._clock.monotonic()
        if now - self._logged_at >= SUMMARY_INTERVAL_S:
            log.info(
                "jobs finished",
                extra={
                    "worker_id": self._worker_id,
                    "interval_s": round(now - self._logged_at, 3),
                    "by_state": dict(self._since_log),
                },
            )
            self._since_log.clear()
            self._logged_at = now
