"""An OpenAI Responses `response` object read as a background Snapshot: its status, its result
when it finished with output, its error classified like a failed call's. Read from a create or a
retrieve, from the last event of a stream, and from the simulator's answers alike."""

from __future__ import annotations

from typing import Any

from jobgate import errors
from jobgate.providers import calls
from jobgate.providers.background import Snapshot, Status
from jobgate.providers.base import JSONObject, ProviderResult, openai_usage

_STATUSES = {
    "queued": Status.QUEUED,
    "in_progress": Status.IN_PROGRESS,
    "completed": Status.COMPLETED,
    "incomplete": Status.INCOMPLETE,
    "failed": Status.FAILED,
    "cancelled": Status.CANCELLED,
}
_RETRYABLE_RUN_ERRORS = frozenset({"server_error", "vector_store_timeout"})


def response_snapshot(payload: JSONObject) -> Snapshot:
    """A Responses API `response` object, as a Snapshot."""
    response_id = payload.get("id")
    if not isinstance(response_id, str) or not response_id:
        raise errors.ProviderRetryable("the response object has no id", code="bad_response")
    raw_status = payload.get("status")
    status = _STATUSES.get(raw_status if isinstance(raw_status, str) else "", Status.IN_PROGRESS)
    result = None
    error: errors.ProviderError | None = None
    if status in (Status.COMPLETED, Status.INCOMPLETE):
        result = ProviderResult(
            body=payload,
            usage=openai_usage(payload.get("usage")),
            provider_request_id=response_id,
        )
    elif status == Status.FAILED:
        error = _run_error(payload.get("error"))
    return Snapshot(response_id, status, payload, result=result, error=error)


def _run_error(raw: Any) -> errors.ProviderError:
    """Classify the `error` of a failed response like a failed call."""
    details = raw if isinstance(raw, dict) else {}
    code = str(details.get("code") or "server_error")
    message = str(details.get("message") or "the response failed at the provider")[:500]
    if code in calls.QUOTA_CODES:
        return errors.ProviderQuotaExceeded(message, code=code)
    if code == "rate_limit_exceeded":
        return errors.ProviderRateLimited(message, retry_after_s=0.0, status_code=None)
    if code in _RETRYABLE_RUN_ERRORS:
        return errors.ProviderRetryable(message, code=code)
    return errors.ProviderFatal(message, code=code)
