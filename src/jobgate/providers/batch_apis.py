"""The provider-native batch APIs by provider kind: what the batches role needs of each (encode
a part's lines, send it crash-safe, read its state, read its lines back, cancel it), and the
registry `KINDS` it looks them up in. A kind with a batch API adds its adapter here (and its
name to config.NATIVE_BATCH_KINDS, which a test keeps equal to this registry's keys).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import orjson

from jobgate import errors
from jobgate.config import ProviderConfig
from jobgate.domain import provider_batch_results
from jobgate.domain.provider_batch_results import LineResult, PartState
from jobgate.domain.provider_batches import LIMITS, Limits
from jobgate.providers import openai
from jobgate.providers.base import JSONObject
from jobgate.providers.openai_batches import OpenAIBatches


class BatchSender(Protocol):
    """What sending a part needs of a provider's batch API: upload its input, create it with
    its key in the metadata, find it by that key (services.provider_batch_send)."""

    async def upload(self, data: bytes, *, filename: str) -> str: ...

    async def create(self, *, input_file_id: str, endpoint: str, part_key: str) -> JSONObject: ...

    async def find(self, part_key: str, *, since: dt.datetime) -> JSONObject | None: ...


class NativeBatchApi(Protocol):
    """One provider's batch API, as the batches role drives it. Failures raise the provider
    errors as classified (errors.ProviderOutcomeUnknown where a create got no answer)."""

    name: str
    limits: Limits  # one provider batch's bounds (the configured batch_max_requests applied)

    def serves(self, endpoint: str) -> bool:
        """Whether a line of `endpoint` can go in this provider's batches."""
        ...

    def encode(self, custom_id: str, endpoint: str, body: JSONObject) -> bytes:
        """One request of a part, as the provider's batch input holds it (no line end)."""
        ...

    @property
    def sender(self) -> BatchSender:
        """What services.provider_batch_send sends a part through."""
        ...

    async def find(self, part_key: str, *, since: dt.datetime) -> str | None:
        """The id of the provider batch carrying `part_key` (None: there is none)."""
        ...

    async def state(self, provider_batch_id: str) -> PartState: ...

    async def results(
        self, state: PartState, custom_ids: Sequence[str], *, status: str
    ) -> list[LineResult]:
        """An ended part's lines, in the order of `custom_ids`, each once; a line that did not
        run reads as the provider batch's `status` says (expired, cancelled, failed)."""
        ...

    async def cancel(self, provider_batch_id: str) -> None: ...

    async def aclose(self) -> None: ...


class OpenAIBatchApi:
    """OpenAI's Files and Batch API (providers.openai_batches), read back by
    domain.provider_batch_results."""

    def __init__(self, name: str, config: ProviderConfig, client: OpenAIBatches) -> None:
        self.name = name
        self._config = config
        self._client = client
        bound = LIMITS["openai"]
        most = config.batch_max_requests or bound.max_requests
        self.limits = Limits(
            min(most, bound.max_requests),
            bound.max_bytes,
            per_line_bytes=bound.per_line_bytes,
            envelope_bytes=bound.envelope_bytes,
        )

    def serves(self, endpoint: str) -> bool:
        if endpoint == openai.RESPONSES:  # its own Responses API, not translated to chat
            return self._config.responses_api == "native"
        return endpoint in openai.ENDPOINTS

    def encode(self, custom_id: str, endpoint: str, body: JSONObject) -> bytes:
        # The body goes as the job would hold it: a `sim` object (which a job's call moves to
        # a header) has no header to go to in a batch, and the simulator reads it per line.
        line = {"custom_id": custom_id, "method": "POST", "url": endpoint, "body": body}
        return orjson.dumps(line)

    @property
    def sender(self) -> BatchSender:
        return self._client

    async def find(self, part_key: str, *, since: dt.datetime) -> str | None:
        found = await self._client.find(part_key, since=since)
        return None if found is None else str(found["id"])

    async def state(self, provider_batch_id: str) -> PartState:
        batch = await self._client.retrieve(provider_batch_id)
        try:
            return provider_batch_results.part_state(batch)
        except ValueError as exc:
            raise errors.ProviderRetryable(str(exc), code="bad_response") from exc

    async def results(
        self, state: PartState, custom_ids: Sequence[str], *, status: str
    ) -> list[LineResult]:
        output = b""
        failures = b""
        if state.output_file_id is not None:
            output = await self._client.file_content(state.output_file_id)
        if state.error_file_id is not None:
            failures = await self._client.file_content(state.error_file_id)
        return provider_batch_results.lines_back(
            custom_ids, status=status, output=output, errors=failures
        )

    async def cancel(self, provider_batch_id: str) -> None:
        await self._client.cancel(provider_batch_id)

    async def aclose(self) -> None:
        await self._client.aclose()


def _openai(name: str, config: ProviderConfig) -> NativeBatchApi:
    return OpenAIBatchApi(name, config, OpenAIBatches(name, config))


Factory = Callable[[str, ProviderConfig], NativeBatchApi]
KINDS: Mapping[str, Factory] = {"openai": _openai}


def api_for(name: str, config: ProviderConfig) -> NativeBatchApi | None:
    """The batch API of the provider `name`, when its configuration turns native batches on
    and its kind has one (None: its batch lines run as jobs)."""
    factory = KINDS.get(config.kind)
    if not config.native_batches or factory is None:
        return None
    return factory(name, config)
