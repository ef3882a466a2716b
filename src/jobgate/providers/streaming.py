"""Streaming provider calls (live output streaming): the optional `stream` method an adapter
offers beside `call`, and the few helpers every streaming adapter shares.

`stream(call, on_delta)` runs the same call as `call` but hands each piece of output text to
`on_delta` as it arrives, and answers the same ProviderResult (the whole body, usage taken
from the stream's final event). An adapter without it, or an endpoint it cannot stream, is
called as usual and its whole text is one delta at completion (services.output_stream).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

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


def output_text(body: Any) -> str:
    """The assistant text of a finished answer, whatever its wire: a Chat Completion
    (`choices[0].message.content`), a Response (`output[].content[]` output_text parts) or an
    Anthropic message (`content[]` text blocks). Empty when there is none."""
    if not isinstance(body, dict):
        return ""
    choices = body.get("choices")
    if isinstance(choices, list):
        first = choices[0] if choices else None
        message = first.get("message") if isinstance(first, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        return content if isinstance(content, str) else ""
    if body.get("object") == "response" or isinstance(body.get("output"), list):
        return "".join(
            part.get("text", "")
            for item in body.get("output") or []
            if isinstance(item, dict) and item.get("type") == "message"
            for part in item.get("content") or []
            if isinstance(part, dict) and part.get("type") == "output_text"
        )
    content = body.get("content")
    if isinstance(content, list):
        return "".join(
            block.get("text", "")
            for block in content
            if isinstance(block, dict) and block.get("type") == "text"
        )
    return ""


def split_evenly(text: str, pieces: int) -> list[str]:
    """`text` cut into `pieces` parts of near-equal length (some empty when the text is
    shorter than that); their concatenation is `text`."""
    pieces = max(1, pieces)
    size, extra = divmod(len(text), pieces)
    parts = []
    start = 0
    for index in range(pieces):
        end = start + size + (1 if index < extra else 0)
        parts.append(text[start:end])
        start = end
    return parts
