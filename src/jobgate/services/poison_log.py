"""The log line of a job a role failed alone as `poison_job` (the verdict itself is
`domain.verdicts.poison_verdict`): column names, exception types and frames, never a value."""

from __future__ import annotations

import logging
import traceback

from jobgate.domain.verdicts import POISON_JOB, Poisoning

log = logging.getLogger(__name__)


def traceback_text(exc: BaseException) -> str:
    """The traceback's frames and the exception's type, without its message (which may quote
    a stored value)."""
    frames = "".join(traceback.format_tb(exc.__traceback__))
    return f"Traceback (most recent call last):\n{frames}{type(exc).__qualname__}"


def log_poison(role: str, poisoning: Poisoning) -> None:
    """The log line of a job failed alone as `poison_job`."""
    exc = poisoning.exc
    log.error(
        "poison job failed alone",
        extra={
            "role": role,
            "job_id": poisoning.job_id,
            "error_code": POISON_JOB,
            "detail": poisoning.detail,
            "traceback": None if exc is None else traceback_text(exc),
        },
    )
