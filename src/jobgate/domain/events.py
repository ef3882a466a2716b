"""Which outbound event type a transition produces, per API surface."""

from __future__ import annotations

from jobgate.domain.states import JobState

# The storage layer computes the same mapping in SQL when it fans a transition out to the
# outbox; tests/storage check that the two agree.
_NATIVE = {
    JobState.RUNNING: "job.running",
    JobState.SUCCEEDED: "job.succeeded",
    JobState.FAILED: "job.failed",
    JobState.CANCELLED: "job.cancelled",
    JobState.EXPIRED: "job.expired",
}
_RESPONSES = {
    JobState.RUNNING: "response.in_progress",
    JobState.SUCCEEDED: "response.completed",
    JobState.FAILED: "response.failed",
    JobState.CANCELLED: "response.cancelled",
    JobState.EXPIRED: "response.cancelled",
}
# Sent only to targets that list them explicitly; an empty filter means "every terminal event".
OPT_IN_EVENT_TYPES = frozenset({"job.running", "response.in_progress"})


def event_type_for(api: str, state: JobState) -> str | None:
    """The event a job entering `state` emits, or None (queued emits nothing)."""
    table = _RESPONSES if api == "responses" else _NATIVE
    return table.get(state)
