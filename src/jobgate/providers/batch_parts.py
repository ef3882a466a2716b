"""One interface for sending a part to either provider's batch API, so the crash-safe send
(roles.provider_batch_send) is written once: `find_part` (the part's provider batch, None
when none can be it) and `create_part` (from the caller's lines, in the part's order).

A line goes as the caller wrote it, less its body's `sim` directives unless the provider is
configured to read them (`provider_line`). OpenAI uploads the lines as an input file, then
creates the batch with the part's key in its metadata. Anthropic translates each line into
a Messages request under the part's short custom_id (wire.anthropic_batches) and creates the
batch with them in its body; its `find_part` may also raise errors.ProviderOutcomeUnknown
while a batch that may be the part's is still processing (providers.anthropic_batches),
which the send treats as it treats a lost create: nothing is created, and it looks again
later.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

import orjson

from jobgate import errors
from jobgate.config import ProviderConfig
from jobgate.domain.provider_batches import Part
from jobgate.providers.anthropic_batches import AnthropicBatches
from jobgate.providers.base import JSONObject
from jobgate.providers.openai_batches import OpenAIBatches
from jobgate.wire import anthropic_batch_results as ids
from jobgate.wire import anthropic_batches, sim

Line = Mapping[str, Any]  # a caller's batch line: {"custom_id", "method", "url", "body"}


class PartApi(Protocol):
    """What sending a part needs of a provider's batch API."""

    async def find_part(
        self, part: Part, *, since: datetime, known_ids: Collection[str]
    ) -> JSONObject | None:
        """The provider batch created for `part` from `since` on, or None when none can be
        it. `known_ids`: provider batch ids recorded for other parts (never the part's).
        Raises errors.ProviderOutcomeUnknown when it cannot tell yet (do not create)."""
        ...

    async def create_part(self, part: Part, lines: Sequence[Line]) -> JSONObject:
        """Create the part's provider batch from its lines (the caller's, in the part's
        order); answers the provider's batch object. A create whose answer was lost raises
        errors.ProviderOutcomeUnknown. Not idempotent: call only after `find_part` found
        nothing."""
        ...


def provider_line(line: Line, config: ProviderConfig) -> Line:
    """The caller's line as the provider is sent it: its body's `sim` directives stay only for
    an upstream that reads them (`sim_directives`: the simulator, another jobgate). A batch
    line has no header of its own to carry them, and a real provider refuses the member."""
    body = line.get("body")
    if config.sim_directives or not isinstance(body, dict) or "sim" not in body:
        return line
    return {**line, "body": sim.without(body)}


class OpenAIParts:
    def __init__(self, api: OpenAIBatches, config: ProviderConfig) -> None:
        self.api = api
        self._config = config

    def check(self, line: Line) -> int:
        """The bytes the line takes in a part's input file, its newline aside (for the
        planner)."""
        return len(orjson.dumps(dict(provider_line(line, self._config))))

    async def find_part(
        self, part: Part, *, since: datetime, known_ids: Collection[str]
    ) -> JSONObject | None:
        return await self.api.find(part.key, since=since)

    async def create_part(self, part: Part, lines: Sequence[Line]) -> JSONObject:
        if not lines:
            raise ValueError(f"part {part.key} has no lines")
        sent = [provider_line(line, self._config) for line in lines]
        data = b"".join(orjson.dumps(dict(line)) + b"\n" for line in sent)
        file_id = await self.api.upload(data, filename=f"{part.key}.jsonl")
        endpoint = str(lines[0].get("url"))
        return await self.api.create(input_file_id=file_id, endpoint=endpoint, part_key=part.key)


class AnthropicParts:
    def __init__(self, api: AnthropicBatches, config: ProviderConfig) -> None:
        self.api = api
        self._config = config

    def request(self, part_key: str, index: int, line: Line) -> JSONObject:
        """The Message Batches request for the part's `index`-th line; errors.InvalidRequest
        when it cannot be expressed for Anthropic (check lines with `check` before planning)."""
        body = line.get("body")
        model = body.get("model") if isinstance(body, dict) else None
        bound = self._config.output_bound(model if isinstance(model, str) else None)
        custom_id = ids.request_custom_id(part_key, index)
        sent = provider_line(line, self._config)
        return anthropic_batches.to_request(sent, custom_id=custom_id, output_bound=bound)

    def check(self, line: Line) -> int:
        """The most bytes the line takes in a part's request body (for the planner), or
        errors.InvalidRequest when it cannot be sent to Anthropic: such a line gets its error
        line at once and goes in no part."""
        longest = "x" * ids.MAX_CUSTOM_ID_CHARS
        body = line.get("body")
        model = body.get("model") if isinstance(body, dict) else None
        bound = self._config.output_bound(model if isinstance(model, str) else None)
        sent = provider_line(line, self._config)
        request = anthropic_batches.to_request(sent, custom_id=longest, output_bound=bound)
        return len(orjson.dumps(request))

    async def find_part(
        self, part: Part, *, since: datetime, known_ids: Collection[str]
    ) -> JSONObject | None:
        return await self.api.find(part.key, since=since, size=len(part.lines), known_ids=known_ids)

    async def create_part(self, part: Part, lines: Sequence[Line]) -> JSONObject:
        if len(lines) != len(part.lines):
            raise ValueError(f"part {part.key} has {len(part.lines)} lines, not {len(lines)}")
        try:
            requests = [self.request(part.key, index, line) for index, line in enumerate(lines)]
        except errors.InvalidRequest as exc:
            # A line the planner should have kept out: nothing was sent.
            raise errors.ProviderFatal(
                f"part {part.key}: a line cannot be sent to Anthropic ({exc.message})",
                code="invalid_request",
            ) from exc
        return await self.api.create(requests, part_key=part.key)
