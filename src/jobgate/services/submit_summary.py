"""Single submits logged as one aggregated info line per interval, each job's own line at
debug: at thousands of submits a second a line per job costs the API process a noticeable
share of its CPU (the worker's finishes are summed the same way, roles.finish_summary)."""

from __future__ import annotations

import logging

from jobgate.clock import Clock
from jobgate.domain.states import JobState

log = logging.getLogger("jobgate.services.jobs")

SUMMARY_INTERVAL_S = 10.0  # at most one "jobs submitted" info line per interval


class SubmitSummary:
    def __init__(self, *, clock: Clock) -> None:
        self._clock = clock
        self._since_log = 0
        self._logged_at = clock.monotonic()

    def submitted(self, *, job_id: str, tenant_id: str, provider: str, endpoint: str) -> None:
        """One job stored by a single submit (a replay is not one)."""
        if log.isEnabledFor(logging.DEBUG):  # the line's fields are not built for nothing
            log.debug(
                "job transition",
                extra={
                    "job_id": job_id,
                    "tenant_id": tenant_id,
                    "to_state": JobState.QUEUED.value,
                    "provider": provider,
                    "endpoint": endpoint,
                    "actor": "api",
                },
            )
        self._since_log += 1
        now = self._clock.monotonic()
        if now - self._logged_at >= SUMMARY_INTERVAL_S:
            log.info(
                "jobs submitted",
                extra={
                    "count": self._since_log,
                    "interval_s": round(now - self._logged_at, 3),
                    "to_state": JobState.QUEUED.value,
                },
            )
            self._since_log = 0
            self._logged_at = now
