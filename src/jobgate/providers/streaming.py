"""Streaming provider calls (live output streaming): the optional `stream` method an adapter
offers beside `call`, and the few helpers every streaming adapter shares.

`stream(call, on_delta)` runs the same call as `call` but hands each piece of output text to
`on_delta` as it arrives, and answers the same ProviderResult (the whole body, usage taken
from the stream's final event). An adapter without it, or an endpoint it cannot stream, is
called as usual and its whole text is one delta at completion (roles.output_stream).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol, runtime_checkable

from jobgate.domain import on_retry
from jobgate.providers.base import JSONObject, ProviderCall, ProviderResult

DeltaSink = Callable[[str], Awaitable[None]]
# A job's own stall timeout (the submit option), kept in its stored body beside `stream`.
STALL_TIMEOUT = "stall_timeout_s"
# Members of a job's stored body that ask jobgate for a stream; never sent to a provider as
# they are (a streaming adapter sets its own).
STREAM_MEMBERS = frozenset({"stream", "stream_options", STALL_TIMEOUT, on_retry.ON_RETRY})


@runtime_checkable
class StreamingProvider(Protocol):
    def streams(self, endpoint: str) -> bool:
        """Whether `stream` serves this endpoint."""
        ...

    async def stream(self, call: ProviderCall, on_delta: DeltaSink) -> ProviderResult:
        """Like Provider.call, handing output text to `on_delta` as it arrives (in order,
        never twice). Raises only classified errors.ProviderError; cancellable."""
        ...


@runtime_checkable
class PrefillingProvider(Protocol):
    def prefills(self, endpoint: str) -> bool:
        """Whether this provider continues a trailing assistant message of a body for
        `endpoint` (an assistant prefix) instead of answering after it."""
        ...


def prefills(provider: object, endpoint: str) -> bool:
    """Whether `provider` takes an assistant prefix on `endpoint` (continue on retry)."""
    return (
        endpoint in on_retry.ENDPOINTS
        and isinstance(provider, PrefillingProvider)
        and provider.prefills(endpoint)
    )


def streaming_for(provider: object, endpoint: str) -> StreamingProvider | None:
    """The provider as a streaming one for `endpoint`, or None to call it whole."""
    if isinstance(provider, StreamingProvider) and provider.streams(endpoint):
        return provider
    return None


def without_stream_members(body: JSONObject) -> JSONObject:
    return {key: value for key, value in body.items() if key not in STREAM_MEMBERS}


def stall_timeout_s(body: JSONObject | None, default_s: float) -> float:
    """A job's stall timeout: its own (the submit option) or the setting's."""
    own = (body or {}).get(STALL_TIMEOUT)
    if isinstance(own, int | float) and not isinstance(own, bool) and own > 0:
        return float(own)
    return default_s
