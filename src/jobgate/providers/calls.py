"""Sending a request to a provider over httpx, and classifying how it ended, exactly once:

- not sent (connect failure, connect or pool timeout): retryable, nothing reached the provider;
- rate-limited (429): retry after `retry-after-ms` / `retry-after` (seconds or an HTTP date),
  else the rate-limit reset headers (providers.rate_limit_waits);
- quota (`insufficient_quota`, a spend limit, by code: providers.error_codes; mostly sent as
  429): fatal, ProviderQuotaExceeded, since waiting does not restore access;
- retryable: 408, 409, 5xx, 529 (overloaded);
- `x-should-retry` from the provider overrides these, as in both official SDKs (`false` makes
  even a 429 fatal);
- fatal: every other 4xx (auth, invalid request, not found);
- sent, no answer (read timeout, connection dropped or reset after the request went out): for a
  call that creates work, ProviderOutcomeUnknown (never a blind retry); for a read, retryable.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Generator, Mapping
from datetime import datetime
from typing import Any

import httpx
import orjson

import jobgate
from jobgate import errors
from jobgate.config import ProviderConfig
from jobgate.providers import error_codes
from jobgate.providers.rate_limit_waits import (
    MAX_RETRY_AFTER_S as MAX_RETRY_AFTER_S,
)
from jobgate.providers.rate_limit_waits import (
    parse_duration_s as parse_duration_s,
)
from jobgate.providers.rate_limit_waits import (
    reset_after_s as reset_after_s,
)
from jobgate.providers.rate_limit_waits import (
    retry_after_s as retry_after_s,
)
from jobgate.wire import sim

SIM_HEADER = "x-jobgate-sim"


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
    sent = sim.without(body)
    headers = {}
    if body.get("sim") is not None:
        headers[SIM_HEADER] = orjson.dumps(body["sim"]).decode()
    return sent, headers


def request_id(headers: httpx.Headers) -> str | None:
    """The provider's id for this request: OpenAI's `x-request-id`, Anthropic's `request-id`."""
    value = headers.get("x-request-id") or headers.get("request-id")
    return value[:200] if value else None


QUOTA_CODES = error_codes.QUOTA_CODES


def _error_object(response: httpx.Response) -> error_codes.ProviderErrorObject:
    default = f"provider answered HTTP {response.status_code}"
    try:
        payload = response.json()
    except ValueError:
        payload = None
    error = payload.get("error") if isinstance(payload, dict) else None
    return error_codes.read(error, default_message=default)


def error_details(response: httpx.Response) -> tuple[str, str | None]:
    """(message, code) from an OpenAI (`error.code`/`type`) or Anthropic (`error.type`,
    `error.details.error_code`) error body; the status line when the body says nothing."""
    error = _error_object(response)
    return error.message, error.code


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
    error = _error_object(response)
    message, code = error.message, error.code
    should_retry = (response.headers.get("x-should-retry") or "").strip().lower()
    quota_code = error_codes.quota_code(error, status)
    if quota_code is not None:
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


async def server_sent_events(
    response: httpx.Response, *, stall_timeout_s: float | None = None
) -> AsyncIterator[tuple[str, str]]:
    """(event, data) pairs of a text/event-stream answer. A stream silent for
    `stall_timeout_s` (no line at all: pings and comments count as signs of life) has stalled:
    a retryable `stream_stalled`, as the same silence before any answer would be a timeout."""
    event = ""
    data: list[str] = []
    async for line in _lines(response, stall_timeout_s):
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


STREAM_STALLED = "stream_stalled"


async def _lines(response: httpx.Response, stall_timeout_s: float | None) -> AsyncIterator[str]:
    lines = response.aiter_lines()
    if stall_timeout_s is None:
        async for line in lines:
            yield line
        return
    while True:
        try:
            async with asyncio.timeout(stall_timeout_s):
                line = await anext(lines)
        except StopAsyncIteration:
            return
        except TimeoutError:
            raise errors.ProviderRetryable(
                f"the provider's stream sent nothing for {stall_timeout_s:g} s (stall_timeout_s)",
                code=STREAM_STALLED,
            ) from None
        yield line
