"""The job state machine: six states, the transition table and one `transition()` check.

Transitions are monotonic: terminal states are immutable, except that an operator's redrive
moves a dead-lettered `failed` job back to `queued` (a new attempt series).

This module is the oracle, not the enforcer: production never calls `transition()`. The rules
are applied by each dialect's SQL (every state-changing statement is fenced on the state it
leaves, and a write that matches no row changes nothing). tests/storage/test_state_oracle.py
drives every (source state, attempted transition) pair through the storage API on both
backends and holds the SQL to `transition()`'s verdict: applied, or left where it was.
"""

from __future__ import annotations

import enum


class JobState(enum.StrEnum):
    # Accepted and durable, not yet claimed. Out: a worker's claim -> running;
    # cancel -> cancelled; start deadline passed -> expired.
    QUEUED = "queued"
    # A worker holds a lease (or the provider holds the job in background mode). Out: the lease
    # holder -> succeeded / failed / queued (retry); the reaper on lease expiry -> queued or
    # failed; a confirmed cancel -> cancelled; execution deadline -> failed. Once a cancel was
    # requested, a verdict of queued (a retry, from whoever) is the cancellation instead: only
    # the row as the write locks it knows whether a cancel arrived, so storage applies this
    # rule inside the write (the SQL fragment `retry_unless_cancelled`, one per dialect; its
    # oracle is `verdicts.as_applied`).
    RUNNING = "running"
    # Terminal. The result is stored. Nobody moves it out.
    SUCCEEDED = "succeeded"
    # Terminal. Only an operator's redrive of a dead-lettered job moves it back to queued.
    FAILED = "failed"
    # Terminal. Nobody moves it out.
    CANCELLED = "cancelled"
    # Terminal: no worker started it before its start deadline. Nobody moves it out.
    EXPIRED = "expired"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES: frozenset[JobState] = frozenset(
    {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.EXPIRED}
)
# The states a job can still leave by itself (not terminal), in the enum's order.
LIVE_STATES: tuple[JobState, ...] = tuple(s for s in JobState if s not in TERMINAL_STATES)


def in_order(states: frozenset[JobState] | tuple[JobState, ...]) -> tuple[JobState, ...]:
    """`states` in the enum's order, for a list written out (SQL's `IN (...)`, a schema)."""
    return tuple(s for s in JobState if s in states)


# Every transition the system may apply; anything else is rejected.
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.QUEUED: frozenset({JobState.RUNNING, JobState.CANCELLED, JobState.EXPIRED}),
    JobState.RUNNING: frozenset(
        {JobState.SUCCEEDED, JobState.FAILED, JobState.QUEUED, JobState.CANCELLED}
    ),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset({JobState.QUEUED}),  # operator redrive only, see transition()
    JobState.CANCELLED: frozenset(),
    JobState.EXPIRED: frozenset(),
}


class Verdict(enum.Enum):
    """What to do with a requested state change."""

    APPLY = "apply"
    # The job is already where the event would put it, or already terminal: record, don't apply.
    IGNORE = "ignore"


class InvalidTransition(ValueError):
    def __init__(self, source: JobState, target: JobState) -> None:
        super().__init__(f"invalid job transition {source} -> {target}")
        self.source = source
        self.target = target


def transition(source: JobState, target: JobState, *, redrive: bool = False) -> Verdict:
    """Decide whether `source -> target` may be applied.

    Late or duplicate events aimed at a terminal job (or repeating the current state) are
    IGNORE: they are logged but never move the job. A backwards move of a live job
    (running -> queued is a retry and allowed; anything else) raises InvalidTransition, and so
    does a redrive of anything but a failed job (storage answers it with errors.Conflict).
    """
    if redrive and source is not JobState.FAILED:
        raise InvalidTransition(source, target)
    if source.terminal and not (redrive and source is JobState.FAILED):
        return Verdict.IGNORE
    if source is target:
        return Verdict.IGNORE
    if target not in TRANSITIONS[source]:
        raise InvalidTransition(source, target)
    if source is JobState.FAILED and not redrive:
        raise InvalidTransition(source, target)
    return Verdict.APPLY
