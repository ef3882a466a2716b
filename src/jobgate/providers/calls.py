"""Sending a request to a provider over httpx, and classifying how it ended, exactly once:

- not sent (connect failure, connect or pool timeout): retryable, nothing reached the provider;
- rate-limited (429): retry after `retry-after-ms` / `retry-after` (seconds or an HTTP date);
- retryable: 408, 409, 5xx, 529 (overloaded); `x-should-retry` from the provider overrides;
- fatal: every other 4xx (auth, invalid request, not found);
- sent, no answer (read timeout, connection dropped or reset after the request went out): for a
  call that creates work, ProviderOutcomeUnknown (never a blind retry); for a read, retryable.
"""

from __future__ import annotations

import email.utils
import os
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
    """How long the provider asked us to wait: retry-after-ms, then retry-after."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if raw:
        try:
            return max(0.0, float(raw))
        except ValueError:
            try:
                moment = email.utils.parsedate_to_datetime(raw)
            except (TypeError, ValueError):
                return default_s
            if moment.tzinfo is None:
                return default_s
            return max(0.0, (moment - now).total_seconds())
    return default_s


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
    return message, code


def classify_status(
    response: httpx.Response, *, now: datetime, default_retry_after_s: float
) -> errors.ProviderError:
    """The error an unsuccessful answer means."""
    status = response.status_code
    message, code = error_details(response)
    should_retry = response.headers.get("x-should-retry")
    if status == 429:
        return errors.ProviderRateLimited(
            message,
            retry_after_s=retry_after_s(response.headers, now=now, default_s=default_retry_after_s),
            status_code=status,
        )
    if should_retry == "true" or (
        should_retry != "false" and (status in (408, 409, 529) or status >= 500)
    ):
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
