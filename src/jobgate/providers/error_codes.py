"""What a provider's error object means, by its code wherever one exists (the SDKs warn that
messages change wording): OpenAI's `error.code` and `type`, Anthropic's `error.type` and
`error.details.error_code`. One set of rules classifies an error answered as an HTTP status
(calls.classify_status) and one reported inside a 200's event stream (`stream_error`), so the
same fault is the same class either way: a transient fault retried, a rate limit waited out, a
quota or spend limit failing the job (waiting does not restore access).

Inside a stream no header can say how long to wait: OpenAI nests its rate-limit headers in
the error object, or names the wait in the message ("Please try again in 6.57s"); Anthropic
says nothing, but the 200's own headers show which limit is exhausted until when.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import httpx

from jobgate import errors
from jobgate.providers import rate_limit_waits

MAX_MESSAGE = 500

# Billing, not rate: OpenAI `code`/`type`, Anthropic `type` and `details.error_code`.
QUOTA_CODES = frozenset(
    {
        "insufficient_quota",
        "credit_balance_exhausted",
        "organization_spend_limit_exceeded",
        "project_spend_limit_exceeded",
        "billing_hard_limit_reached",
        "billing_not_active",
        "billing_error",
        "enforced_spend_limit_reached",
        "contract_spend_limit_reached",
        "linked_organization_spend_limit_reached",
        "linked_organization_billing_unavailable",
    }
)
RATE_LIMIT_CODES = frozenset({"rate_limit_exceeded", "rate_limit_error", "ramp_limit_exceeded"})
# The provider's own trouble, retried as the same fault answered 5xx or 529 would be.
TRANSIENT_CODES = frozenset(
    {
        "server_error",
        "internal_error",
        "internal_server_error",
        "service_unavailable",
        "service_unavailable_error",
        "too_many_requests",
        "overloaded_error",
        "api_error",
        "timeout_error",
        "gateway_timeout_error",
        "vector_store_timeout",
    }
)
# Older Anthropic answers: a spend limit as a plain 429 `rate_limit_error` whose message alone
# tells ("This request would exceed your account's monthly spend limit").
_SPEND_LIMIT_MESSAGE = re.compile(r"spend limit|credit balance", re.IGNORECASE)
# Anthropic's usage limit is a 400 `invalid_request_error` with no code at all ("You have
# reached your specified API usage limits. You will regain access on ..."): its wording is the
# only signal there is.
_USAGE_LIMIT_MESSAGE = re.compile(r"reached your specified API usage limits", re.IGNORECASE)


@dataclasses.dataclass(frozen=True, slots=True)
class ProviderErrorObject:
    """An error object as either provider writes it."""

    message: str
    code: str | None  # the most specific: details.error_code, else code, else type
    kind: str | None  # the `type`
    headers: httpx.Headers | None = None  # rate-limit headers nested in a streamed error


def read(raw: object, *, default_message: str) -> ProviderErrorObject:
    """The parts of an error object that classify it; anything missing or malformed is None."""
    error = raw if isinstance(raw, Mapping) else {}
    message = error.get("message")
    details = error.get("details")
    detail_code = details.get("error_code") if isinstance(details, Mapping) else None
    kind = _text(error.get("type"))
    code = _text(detail_code) or _text(error.get("code"))
    if kind in QUOTA_CODES and code not in QUOTA_CODES:
        code = kind  # a quota `type` under another code still is one
    nested = error.get("headers")
    headers = None
    if isinstance(nested, Mapping):
        headers = httpx.Headers({str(k): str(v) for k, v in nested.items() if _scalar(v)})
    return ProviderErrorObject(
        message=message[:MAX_MESSAGE] if isinstance(message, str) and message else default_message,
        code=code or kind,
        kind=kind,
        headers=headers,
    )


def quota_code(error: ProviderErrorObject, status: int | None) -> str | None:
    """The code to fail a quota or spend-limit error with; None when it is not one."""
    if error.code in QUOTA_CODES:
        return error.code
    if error.kind == "rate_limit_error" and status in (429, None):
        if _SPEND_LIMIT_MESSAGE.search(error.message):
            return "insufficient_quota"
    if error.kind == "invalid_request_error" and status in (400, None):
        if _USAGE_LIMIT_MESSAGE.search(error.message):
            return "insufficient_quota"
    return None


def is_rate_limit(error: ProviderErrorObject) -> bool:
    return error.code in RATE_LIMIT_CODES or error.kind in RATE_LIMIT_CODES


def is_transient(error: ProviderErrorObject) -> bool:
    """A fault of the provider's (a flat stream error with neither code nor type is one)."""
    if error.code is None and error.kind is None:
        return True
    return error.code in TRANSIENT_CODES or error.kind in TRANSIENT_CODES


def stream_wait_s(
    error: ProviderErrorObject, *, response_headers: httpx.Headers, now: datetime
) -> float | None:
    """How long a rate limit reported mid-stream asks to wait: the longest of the nested
    headers' reset, the wait its message names and the reset of a limit the answer's own
    headers show exhausted; None when nothing says."""
    waits = [
        rate_limit_waits.message_wait_s(error.message),
        rate_limit_waits.reset_after_s(response_headers, now=now, exhausted_only=True),
    ]
    if error.headers is not None:
        waits.append(rate_limit_waits.reset_after_s(error.headers, now=now))
    found = [wait for wait in waits if wait is not None]
    return max(found) if found else None


def stream_error(
    raw: object,
    *,
    response_headers: httpx.Headers,
    now: datetime,
    default_retry_after_s: float,
) -> errors.ProviderError:
    """An error a provider reported inside a 200's event stream, classified as the same
    error answered as an HTTP status would be."""
    error = read(raw, default_message="the provider reported an error mid-stream")
    quota = quota_code(error, None)
    if quota is not None:
        return errors.ProviderQuotaExceeded(error.message, code=quota)
    if is_rate_limit(error):
        wait_s = stream_wait_s(error, response_headers=response_headers, now=now)
        return errors.ProviderRateLimited(
            error.message,
            retry_after_s=default_retry_after_s if wait_s is None else wait_s,
            status_code=None,
        )
    if is_transient(error):
        return errors.ProviderRetryable(error.message, code=error.code or "server_error")
    return errors.ProviderFatal(error.message, code=error.code or "invalid_request")


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float) and not isinstance(value, bool)
