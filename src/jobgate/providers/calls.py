"""Sending a request to a provider over httpx, and classifying how it ended, exactly once:

- not sent (connect failure, connect or pool timeout): retryable, nothing reached the provider;
- rate-limited (429): retry after `retry-after-ms` / `retry-after` (seconds or an HTTP date),
  else the rate-limit reset headers (OpenAI `x-ratelimit-reset-*` durations such as `6m0s`,
  Anthropic `anthropic-ratelimit-*-reset` RFC 3339 times);
- quota (`insufficient_quota`, a spend limit; mostly sent as 429): fatal, ProviderQuotaExceeded,
  since waiting does not restore access;
- retryable: 408, 409, 5xx, 529 (overloaded);
- `x-should-retry` from the provider overrides these, as in both official SDKs (`false` makes
  even a 429 fatal);
- fatal: every other 4xx (auth, invalid request, not found);
- sent, no answer (read timeout, connection dropped or reset after the request went out): for a
  call that creates work, ProviderOutcomeUnknown (never a blind retry); for a read, retryable.
"""

from __future__ import annotations

import email.utils
import os
import re
from collections.abc import AsyncIterator, Generator, Mapping
from datetime import datetime
from typing import Any

import httpx
import orjson

import jobgate
from jobgate import errors
from jobgate.config import ProviderConfig

SIM_HEADER = "x-jobgate-sim"
_MAX_MESSAGE = 500


def missing_key(name: str, config: ProviderConfig) -> errors.ConfigError | None:
    """The error to start with when the key's variable is unset (roles that call providers
    check this at startup; the API and admin commands never need provider keys)."""
    if config.api_key_env is None or os.environ.get(config.api_key_env):
        return None
    return errors.ConfigError(
        f"providers.{name}.api_key_env",
        f"the environment variable {config.api_key_env} is not set",
    )


class EnvKey(httpx.Auth):
    """Reads the key from its variable on every request, so it is never kept in the file,
    the logs, or a process that makes no calls."""

    def __init__(self, variable: str, header: str, prefix: str = "") -> None:
        self._variable = variable
        self._header = header
        self._prefix = prefix

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        value = os.environ.get(self._variable)
        if not value:
            # Retryable (and counted by the breaker): the operator fixes the host's environment.
            raise errors.ProviderRetryable(
                f"the environment variable {self._variable} holding the API key is not set",
                code="missing_api_key",
            )
        request.headers[self._header] = self._prefix + value
        yield request


def client(
    config: ProviderConfig,
    *,
    base_url: str,
    headers: Mapping[str, str],
    auth: httpx.Auth | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> httpx.AsyncClient:
    """One pooled client per provider. The read timeout is `request_timeout_s`: for a plain
    request the wait for the whole answer, for a stream the longest silence allowed."""
    timeout = httpx.Timeout(
        connect=config.connect_timeout_s,
        read=config.request_timeout_s,
        write=config.request_timeout_s,
        pool=config.connect_timeout_s,
    )
    # Room for status checks and cancels beside the creates the concurrency cap admits.
    limits = httpx.Limits(max_connections=config.concurrency + 8, max_keepalive_connections=32)
    return httpx.AsyncClient(
        base_url=base_url.rstrip("/") + "/",
        headers={"user-agent": f"jobgate/{jobgate.__version__}", **config.headers, **headers},
        timeout=timeout,
        limits=limits,
        follow_redirects=False,
        auth=auth,
        transport=transport,
    )


def wire_body(body: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """The body to send and extra headers: a `sim` object moves to the x-jobgate-sim header,
    so the same job is a valid request for the real provider and for the simulator."""
    sent = {key: value for key, value in body.items() if key != "sim"}
    headers = {}
    if body.get("sim") is not None:
        headers[SIM_HEADER] = orjson.dumps(body["sim"]).decode()
    return sent, headers


def retry_after_s(headers: httpx.Headers, *, now: datetime, default_s: float) -> float:
    """How long the provider asked us to wait: retry-after-ms, then retry-after, then the
    rate-limit reset headers (the latest reset among the limits that are exhausted, or among
    all of them when none says so), then `default_s`."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return _bounded(float(raw_ms) / 1000)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw:
        try:
            return _bounded(float(raw))
        except ValueError:
            try:
                moment = email.utils.parsedate_to_datetime(raw)
            except (TypeError, ValueError, IndexError):
                moment = None
            if moment is not None and moment.tzinfo is not None:
                return _bounded((moment - now).total_seconds())
    reset = reset_after_s(headers, now=now)
    return default_s if reset is None else reset


MAX_RETRY_AFTER_S = 86_400.0  # a header asking for longer is believed for a day
_RESET_HEADERS = (
    # (reset header, remaining header, format)
    ("x-ratelimit-reset-requests", "x-ratelimit-remaining-requests", "duration"),
    ("x-ratelimit-reset-tokens", "x-ratelimit-remaining-tokens", "duration"),
    ("anthropic-ratelimit-requests-reset", "anthropic-ratelimit-requests-remaining", "time"),
    ("anthropic-ratelimit-tokens-reset", "anthropic-ratelimit-tokens-remaining", "time"),
    (
        "anthropic-ratelimit-input-tokens-reset",
        "anthropic-ratelimit-input-tokens-remaining",
        "time",
    ),
    (
        "anthropic-ratelimit-output-tokens-reset",
        "anthropic-ratelimit-output-tokens-remaining",
        "time",
    ),
)
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|us|µs|ns|h|m|s)")
_DURATION_UNIT_S = {
    "h": 3600.0,
    "m": 60.0,
    "s": 1.0,
    "ms": 1e-3,
    "us": 1e-6,
    "µs": 1e-6,
    "ns": 1e-9,
}


def _bounded(seconds: float) -> float:
    if seconds != seconds:  # NaN
        return 0.0
    return min(MAX_RETRY_AFTER_S, max(0.0, seconds))


def parse_duration_s(raw: str) -> float | None:
    """A Go-style duration as OpenAI sends it (`6m0s`, `1s`, `20ms`, `1h2m3.5s`), in seconds;
    None for anything else."""
    text = raw.strip()
    if not text or len(text) > 64:
        return None
    total = 0.0
    position = 0
    for match in _DURATION_PART.finditer(text):
        if match.start() != position:
            return None
        total += float(match.group(1)) * _DURATION_UNIT_S[match.group(2)]
        position = match.end()
    if position != len(text):
        return None
    return total


def _parse_time_s(raw: str, *, now: datetime) -> float | None:
    """Seconds from `now` to an RFC 3339 time (Anthropic's reset headers); None if unreadable."""
    try:
        moment = datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    return (moment - now).total_seconds()


def reset_after_s(headers: httpx.Headers, *, now: datetime) -> float | None:
    """When the exhausted rate limit resets, from the providers' reset headers; None when the
    answer carries none that parse."""
    exhausted: list[float] = []
    every: list[float] = []
    for reset_name, remaining_name, kind in _RESET_HEADERS:
        raw = headers.get(reset_name)
        if not raw:
            continue
        seconds = parse_duration_s(raw) if kind == "duration" else _parse_time_s(raw, now=now)
        if seconds is None:
            continue
        every.append(seconds)
        if headers.get(remaining_name, "").strip() == "0":
            exhausted.append(seconds)
    chosen = exhausted or every
    return _bounded(max(chosen)) if chosen else None


def request_id(headers: httpx.Headers) -> str | None:
    """The provider's id for this request: OpenAI's `x-request-id`, Anthropic's `request-id`."""
    value = headers.get("x-request-id") or headers.get("request-id")
    return value[:200] if value else None


# Error codes (OpenAI `error.code`/`type`, Anthropic `error.type`) that mean billing, not
# rate: waiting does not restore access.
QUOTA_CODES = frozenset(
    {
        "insufficient_quota",
        "organization_spend_limit_exceeded",
        "project_spend_limit_exceeded",
        "billing_hard_limit_reached",
        "billing_not_active",
        "billing_error",
    }
)
# Anthropic answers a spend limit with a plain 429 `rate_limit_error` ("This request would
# exceed your account's monthly spend limit"); only its message tells.
_SPEND_LIMIT_MESSAGE = re.compile(r"spend limit|credit balance", re.IGNORECASE)


def error_details(response: httpx.Response) -> tuple[str, str | None]:
    """(message, code) from an OpenAI (`error.code`/`type`) or Anthropic (`error.type`) error
    body; the status line when the body says nothing usable."""
    message = f"provider answered HTTP {response.status_code}"
    code = None
    try:
        payload = response.json()
    except ValueError:
        return message, code
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict):
        if isinstance(error.get("message"), str) and error["message"]:
            message = error["message"][:_MAX_MESSAGE]
        raw_code = error.get("code") or error.get("type")
        code = raw_code if isinstance(raw_code, str) else None
        raw_type = error.get("type")
        if isinstance(raw_type, str) and raw_type in QUOTA_CODES:
            code = raw_type  # a quota `type` under another code still is one
    return message, code


def is_quota_error(status: int, code: str | None, message: str) -> bool:
    """Whether an error answer is a billing, quota or spend-limit problem."""
    if code in QUOTA_CODES:
        return True
    spend_limit = _SPEND_LIMIT_MESSAGE.search(message) is not None
    return status == 429 and code == "rate_limit_error" and spend_limit


def classify_status(
    response: httpx.Response, *, now: datetime, default_retry_after_s: float
) -> errors.ProviderError:
    """The error an unsuccessful answer means, carrying the provider's request id."""
    error = _classify_status(response, now=now, default_retry_after_s=default_retry_after_s)
    error.request_id = request_id(response.headers)
    return error


def _classify_status(
    response: httpx.Response, *, now: datetime, default_retry_after_s: float
) -> errors.ProviderError:
    status = response.status_code
    message, code = error_details(response)
    should_retry = (response.headers.get("x-should-retry") or "").strip().lower()
    if is_quota_error(status, code, message):
        quota_code = code if code in QUOTA_CODES else "insufficient_quota"
        return errors.ProviderQuotaExceeded(message, code=quota_code, status_code=status)
    if should_retry == "false":
        # The provider says a retry cannot succeed, whatever the status (both SDKs obey it).
        fallback = "rate_limit_exceeded" if status == 429 else "invalid_request"
        return errors.ProviderFatal(message, code=code or fallback, status_code=status)
    if status == 429:
        return errors.ProviderRateLimited(
            message,
            retry_after_s=retry_after_s(response.headers, now=now, default_s=default_retry_after_s),
            status_code=status,
        )
    if should_retry == "true" or status in (408, 409, 529) or status >= 500:
        return errors.ProviderRetryable(message, code=code or "server_error", status_code=status)
    return errors.ProviderFatal(message, code=code or "invalid_request", status_code=status)


_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol)


def classify_transport(
    exc: httpx.TransportError, *, creates: bool, safe_to_retry: bool = False
) -> errors.ProviderError:
    """The error a failure without an answer means. `creates`: the request starts work at
    the provider (billed), so once it may have been sent the outcome is unknown."""
    kind = type(exc).__name__
    if isinstance(exc, _NOT_SENT):
        return errors.ProviderRetryable(f"request not sent: {kind}", code="connection_error")
    if not creates:
        return errors.ProviderRetryable(f"no answer: {kind}", code="connection_error")
    if isinstance(exc, httpx.TimeoutException):
        message = f"the provider did not answer in time ({kind}); the job may be running there"
    else:
        message = f"the connection failed after the request was sent ({kind})"
    return errors.ProviderOutcomeUnknown(message, safe_to_retry=safe_to_retry)


def decode_json(response: httpx.Response) -> dict[str, Any]:
    """A 2xx answer's JSON object; a body that is not one is the provider's fault (retryable)."""
    try:
        payload = response.json()
    except ValueError:
        payload = None
    if not isinstance(payload, dict):
        raise errors.ProviderRetryable(
            "the provider answered 2xx with a body that is not a JSON object",
            code="bad_response",
            status_code=response.status_code,
        )
    return payload


async def server_sent_events(response: httpx.Response) -> AsyncIterator[tuple[str, str]]:
    """(event, data) pairs of a text/event-stream answer."""
    event = ""
    data: list[str] = []
    async for line in response.aiter_lines():
        if not line:
            if data or event:
                yield event or "message", "\n".join(data)
            event, data = "", []
        elif line.startswith(":"):
            continue
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    if data:
        yield event or "message", "\n".join(data)
