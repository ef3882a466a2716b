"""Which outbound event type a transition produces, per API surface."""

from __future__ import annotations

from jobgate.domain.states import JobState

# The storage layer computes the same mapping in SQL when it fans a transition out to the
# outbox (jobgate_event_type); tests/storage check that the two agree.
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
    # Never started before its start deadline: OpenAI has no such status, so `cancelled`
    # (the Response object says `expired: true`).
    JobState.EXPIRED: "response.cancelled",
}
# A batch's end, announced to webhook endpoints only (roles.batch_runner: `batch.<status>`).
BATCH_EVENT_TYPES = frozenset(
    {"batch.completed", "batch.failed", "batch.cancelled", "batch.expired"}
)
# Every event type a webhook endpoint or a job may subscribe to.
EVENT_TYPES = frozenset(
    {*_NATIVE.values(), *_RESPONSES.values(), "response.incomplete", *BATCH_EVENT_TYPES}
)
# A running streaming job's output so far, to webhook endpoints that list it (never to a job's
# own URL: the throttle is an endpoint's `progress_interval_s`). Sent while the job runs.
PROGRESS = "job.progress"
# An in-progress batch's request_counts, to webhook endpoints that list it, under the same
# throttle and delivery rules as job.progress.
BATCH_PROGRESS = "batch.progress"
PROGRESS_EVENT_TYPES = frozenset({PROGRESS, BATCH_PROGRESS})
ENDPOINT_EVENT_TYPES = EVENT_TYPES | PROGRESS_EVENT_TYPES


def event_type_for(api: str, state: JobState, result_status: str | None = None) -> str | None:
    """The event a job entering `state` emits, or None (queued emits nothing).

    `result_status` is the `status` member of the stored result: a Responses job that
    succeeded with an `incomplete` response (cut short at max_output_tokens, or filtered)
    emits `response.incomplete`, as OpenAI does."""
    if api == "responses":
        if state is JobState.SUCCEEDED and result_status == "incomplete":
            return "response.incomplete"
        return _RESPONSES.get(state)
    return _NATIVE.get(state)
