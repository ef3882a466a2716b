"""The provider-native batch APIs by provider kind: what the batches role needs of each (a line's
size in a part, the part sent through providers.batch_parts' one interface, the part's state,
its lines read back, cancel), and the registry `KINDS` it looks them up in. A kind with a batch
API adds its adapter here (and its name to config.NATIVE_BATCH_KINDS, which a test keeps equal
to this registry's keys).

A part's state is told in OpenAI's words whatever the provider (`validating`, `in_progress`,
`finalizing`, `cancelling`, then `completed`, `expired`, `cancelled` or `failed`): it is what
`GET /v1/batches/{id}` shows of each part.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from jobgate import errors
from jobgate.config import ProviderConfig
from jobgate.domain.provider_batches import LIMITS, Limits
from jobgate.providers import anthropic_batch_lines, openai
from jobgate.providers.anthropic_batches import AnthropicBatches
from jobgate.providers.base import Usage, openai_usage
from jobgate.providers.batch_parts import AnthropicParts, Line, OpenAIParts, PartApi
from jobgate.providers.openai_batches import OpenAIBatches
from jobgate.wire import anthropic_batch_results
from jobgate.wire import openai_batch_results as provider_batch_results
from jobgate.wire import openai_batches as batches
from jobgate.wire.openai_batches import RequestCounts


@dataclasses.dataclass(frozen=True, slots=True)
class PartStatus:
    """A provider batch as last read: its status in OpenAI's words, whether it ended (its
    lines can be read back), its counts as OpenAI counts them, and the provider's object."""

    status: str
    ended: bool
    counts: RequestCounts
    batch: Mapping[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class LineBack:
    """A part's line as the ended provider batch left it: the caller's output or error file
    line (with the line's custom_id in its part), whether it succeeded, and its usage."""

    line: dict[str, Any]
    succeeded: bool
    usage: Usage | None


class NativeBatchApi(Protocol):
    """One provider's batch API, as the batches role drives it. Failures raise the provider
    errors as classified (errors.ProviderOutcomeUnknown where a create got no answer)."""

    name: str
    limits: Limits  # one provider batch's bounds (the configured batch_max_requests applied)
    parts: PartApi  # how a part is found and created (roles.provider_batch_send)

    def serves(self, endpoint: str) -> bool:
        """Whether a line of `endpoint` can go in this provider's batches."""
        ...

    def size(self, line: Line) -> int:
        """The most bytes `line` (the caller's form, its custom_id its part's) takes in a
        part; errors.InvalidRequest when it cannot be sent in this provider's batches."""
        ...

    async def state(self, provider_batch_id: str) -> PartStatus: ...

    async def results(
        self, part_key: str, status: PartStatus, lines: Sequence[Line]
    ) -> list[LineBack]:
        """An ended part's `lines` (in the part's order) as it left them, each once."""
        ...

    async def cancel(self, provider_batch_id: str) -> None: ...

    async def aclose(self) -> None: ...


def _limits(kind: str, config: ProviderConfig) -> Limits:
    bound = LIMITS[kind]
    most = min(config.batch_max_requests or bound.max_requests, bound.max_requests)
    return dataclasses.replace(bound, max_requests=most)


class OpenAIBatchApi:
    """OpenAI's Files and Batch API (providers.openai_batches), read back by
    wire.openai_batch_results."""

    def __init__(self, name: str, config: ProviderConfig, client: OpenAIBatches) -> None:
        self.name = name
        self._config = config
        self._client = client
        self._parts = OpenAIParts(client, config)
        self.parts: PartApi = self._parts
        self.limits = _limits("openai", config)

    def serves(self, endpoint: str) -> bool:
        if endpoint == openai.RESPONSES:  # its own Responses API, not translated to chat
            return self._config.responses_api == "native"
        return endpoint in openai.ENDPOINTS

    def size(self, line: Line) -> int:
        return self._parts.check(line)

    async def state(self, provider_batch_id: str) -> PartStatus:
        batch = await self._client.retrieve(provider_batch_id)
        try:
            read = provider_batch_results.part_state(batch)
        except ValueError as exc:
            raise errors.ProviderRetryable(str(exc), code="bad_response") from exc
        return PartStatus(read.status, read.ended, read.counts, batch)

    async def results(
        self, part_key: str, status: PartStatus, lines: Sequence[Line]
    ) -> list[LineBack]:
        read = provider_batch_results.part_state(status.batch)
        output = failures = b""
        if read.output_file_id is not None:
            output = await self._client.file_content(read.output_file_id)
        if read.error_file_id is not None:
            failures = await self._client.file_content(read.error_file_id)
        custom_ids = [str(line["custom_id"]) for line in lines]
        found = provider_batch_results.lines_back(
            custom_ids, status=status.status, output=output, errors=failures
        )
        return [
            LineBack(r.line, r.succeeded, _usage(r.line) if r.succeeded else None) for r in found
        ]

    async def cancel(self, provider_batch_id: str) -> None:
        await self._client.cancel(provider_batch_id)

    async def aclose(self) -> None:
        await self._client.aclose()


def _usage(line: Mapping[str, Any]) -> Usage:
    response = line.get("response")
    body = response.get("body") if isinstance(response, dict) else None
    return openai_usage(body.get("usage") if isinstance(body, dict) else None)


class AnthropicBatchApi:
    """Anthropic's Message Batches (providers.anthropic_batches): the caller's lines translated
    to Messages requests and their results back (providers.anthropic_batch_lines)."""

    def __init__(self, name: str, config: ProviderConfig, client: AnthropicBatches) -> None:
        self.name = name
        self._client = client
        self._parts = AnthropicParts(client, config)
        self.parts: PartApi = self._parts
        self.limits = _limits("anthropic", config)

    def serves(self, endpoint: str) -> bool:
        return endpoint in (batches.CHAT, batches.RESPONSES)

    def size(self, line: Line) -> int:
        return self._parts.check(line)

    async def state(self, provider_batch_id: str) -> PartStatus:
        batch = await self._client.retrieve(provider_batch_id)
        try:
            read = anthropic_batch_results.part_state(batch)
        except ValueError as exc:
            raise errors.ProviderRetryable(str(exc), code="bad_response") from exc
        return PartStatus(_openai_status(batch, read), read.ended, read.counts, batch)

    async def results(
        self, part_key: str, status: PartStatus, lines: Sequence[Line]
    ) -> list[LineBack]:
        provider_id = str(status.batch.get("id"))
        data = await self._client.results(provider_id)
        found = anthropic_batch_lines.lines_back(
            lines,
            part_key=part_key,
            provider_batch_id=provider_id,
            results=data,
            created_at=_unix(status.batch.get("created_at")),
        )
        return [LineBack(r.line, r.succeeded, r.usage) for r in found]

    async def cancel(self, provider_batch_id: str) -> None:
        await self._client.cancel(provider_batch_id)

    async def aclose(self) -> None:
        await self._client.aclose()


def _openai_status(batch: Mapping[str, Any], read: anthropic_batch_results.PartState) -> str:
    """A Message Batch's processing_status in OpenAI's words: an ended batch that was asked to
    cancel is cancelled, one with expired requests expired, any other completed."""
    if read.processing_status == "canceling":
        return "cancelling"
    if not read.ended:
        return "in_progress"
    if batch.get("cancel_initiated_at"):
        return "cancelled"
    return "expired" if read.raw_counts.get("expired") else "completed"


def _unix(value: Any) -> int:
    """An RFC 3339 time (Anthropic's) as Unix seconds (0 when unreadable)."""
    try:
        return int(datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp())
    except ValueError:
        return 0


def _openai(name: str, config: ProviderConfig) -> NativeBatchApi:
    return OpenAIBatchApi(name, config, OpenAIBatches(name, config))


def _anthropic(name: str, config: ProviderConfig) -> NativeBatchApi:
    return AnthropicBatchApi(name, config, AnthropicBatches(name, config))


Factory = Callable[[str, ProviderConfig], NativeBatchApi]
KINDS: Mapping[str, Factory] = {"openai": _openai, "anthropic": _anthropic}


def api_for(name: str, config: ProviderConfig) -> NativeBatchApi | None:
    """The batch API of the provider `name`, when its configuration turns native batches on
    and its kind has one (None: its batch lines run as jobs)."""
    factory = KINDS.get(config.kind)
    if not config.native_batches or factory is None:
        return None
    return factory(name, config)
