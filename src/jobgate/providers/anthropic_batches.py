"""Anthropic's Message Batches for provider-native batches: create a part's batch, find one whose
create answer was lost, retrieve, cancel, and read its results file. Failures are classified
as the `anthropic` adapter classifies them (providers.calls: 429 rate-limited, 529 and 5xx
retryable, other 4xx fatal); a create that may have been sent and got no answer raises
errors.ProviderOutcomeUnknown.

Finding a part's batch. A Message Batch has no metadata, and the list shows no requests: only
ids, times and request counts. Every request of a part's batch carries the part's tag in its
custom_id (wire.anthropic_batch_results), which the results file shows once the batch has
ended. So `find` walks the list newest first, down to the batches created before `since`, and
takes as candidates those holding exactly the part's number of requests and not already
recorded for another part (`known_ids`). An ended candidate is decided by its results'
first custom_id: the part's tag, it is the part's batch; any other, it is not. A candidate
still processing cannot be told apart yet: `find` then raises errors.ProviderOutcomeUnknown
(look again later; never create), and answers None only when no candidate could be the
part's. Limits: a part whose lost create left its batch processing is recognised only once
that batch ends (at most 24 hours; its results are then ready at once), and an unrelated
batch of the same size created in the window (by another client of the same workspace)
delays the decision the same way; a batch created before `since` (the part's intent, less
the clock margin) is never looked at.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime

import httpx
import orjson

from jobgate import errors
from jobgate.clock import Clock, SystemClock
from jobgate.config import ProviderConfig
from jobgate.providers import anthropic, calls
from jobgate.providers.base import JSONObject
from jobgate.wire import anthropic_batch_results as ids

LIST_PAGE = 1000  # the list's largest page
PATH = "v1/messages/batches"


class AnthropicBatches:
    def __init__(
        self,
        name: str,
        config: ProviderConfig,
        *,
        clock: Clock | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.name = name
        self._config = config
        self._clock = clock or SystemClock()
        self._client = anthropic.api_client(config, transport)

    async def create(self, requests: Sequence[JSONObject], *, part_key: str) -> JSONObject:
        """Create the part's batch from its requests (`{"custom_id", "params"}`, each
        custom_id carrying the part's tag). Sent once: an answer lost after sending raises
        errors.ProviderOutcomeUnknown (then `find` says what happened)."""
        tag = ids.part_tag(part_key)
        for request in requests:
            if not str(request.get("custom_id", "")).startswith(tag):
                raise ValueError(f"request {request.get('custom_id')!r} lacks the part's tag")
        body = orjson.dumps({"requests": list(requests)})
        headers = {"content-type": "application/json", "idempotency-key": tag.rstrip("-")}
        answer = await self._request("POST", PATH, content=body, headers=headers, creates=True)
        return _batch(calls.decode_json(answer))

    async def find(
        self,
        part_key: str,
        *,
        since: datetime,
        size: int,
        known_ids: Collection[str] = (),
    ) -> JSONObject | None:
        """The part's batch (`size` requests, created from `since` on), None when no batch
        can be it, errors.ProviderOutcomeUnknown while one that may be it is processing (the
        rule is in the module's docstring)."""
        floor = since.timestamp()
        tag = ids.part_tag(part_key)
        undecided: list[str] = []
        after_id: str | None = None
        while True:
            params: dict[str, str | int] = {"limit": LIST_PAGE}
            if after_id is not None:
                params["after_id"] = after_id
            page = calls.decode_json(await self._request("GET", PATH, params=params))
            data = page.get("data")
            items = (
                [item for item in data if isinstance(item, dict)] if isinstance(data, list) else []
            )
            older = False
            for item in items:
                created = _unix(item.get("created_at"))
                if created is not None and created < floor:
                    older = True
                    break
                batch_id = item.get("id")
                if not isinstance(batch_id, str) or batch_id in known_ids:
                    continue
                if ids.requests_total(item) != size or item.get("archived_at"):
                    continue
                if item.get("processing_status") != ids.ENDED:
                    undecided.append(batch_id)
                    continue
                first = await self._first_custom_id(batch_id)
                if first is not None and first.startswith(tag):
                    return _batch(item)
            if older or not page.get("has_more") or not items:
                break
            after_id = str(page.get("last_id") or items[-1].get("id"))
        if undecided:
            raise errors.ProviderOutcomeUnknown(
                f"batch {', '.join(undecided)} may be part {part_key}'s; "
                "it can be told once it has ended",
                code="provider_batch_undecided",
            )
        return None

    async def retrieve(self, batch_id: str) -> JSONObject:
        return _batch(calls.decode_json(await self._request("GET", f"{PATH}/{batch_id}")))

    async def cancel(self, batch_id: str) -> JSONObject:
        """Start canceling the batch; one that has already ended is answered as it stands
        (Anthropic refuses its cancel with a 400)."""
        try:
            answer = await self._request("POST", f"{PATH}/{batch_id}/cancel")
        except errors.ProviderFatal as exc:
            if exc.status_code not in (400, 409) or isinstance(exc, errors.ProviderQuotaExceeded):
                raise
            batch = await self.retrieve(batch_id)
            if batch.get("processing_status") != ids.ENDED:
                raise
            return batch
        return _batch(calls.decode_json(answer))

    async def results(self, batch_id: str) -> bytes:
        """The ended batch's results file (JSONL), read from the configured base URL, never
        from the `results_url` the batch names: the API key goes to the configured host only."""
        return (await self._request("GET", f"{PATH}/{batch_id}/results")).content

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _first_custom_id(self, batch_id: str) -> str | None:
        """The custom_id of the results file's first line (read no further)."""
        try:
            async with self._client.stream("GET", f"{PATH}/{batch_id}/results") as response:
                if not response.is_success:
                    await response.aread()
                    raise self._status_error(response)
                async for line in response.aiter_lines():
                    if line.strip():
                        try:
                            item = orjson.loads(line)
                        except orjson.JSONDecodeError:
                            return None
                        custom_id = item.get("custom_id") if isinstance(item, dict) else None
                        return custom_id if isinstance(custom_id, str) else None
        except httpx.TransportError as exc:
            raise calls.classify_transport(exc, creates=False) from exc
        return None

    async def _request(
        self,
        method: str,
        path: str,
        *,
        creates: bool = False,
        **kwargs: object,
    ) -> httpx.Response:
        try:
            response = await self._client.request(method, path, **kwargs)  # type: ignore[arg-type]
        except httpx.TransportError as exc:
            raise calls.classify_transport(exc, creates=creates) from exc
        if not response.is_success:
            raise self._status_error(response)
        return response

    def _status_error(self, response: httpx.Response) -> errors.ProviderError:
        return calls.classify_status(
            response,
            now=self._clock.now(),
            default_retry_after_s=self._config.retry_after_default_s,
        )


def _batch(body: JSONObject) -> JSONObject:
    if not isinstance(body.get("id"), str) or body.get("type") != "message_batch":
        raise errors.ProviderRetryable("the answer is not a message_batch", code="bad_response")
    return body


def _unix(value: object) -> float | None:
    """An RFC 3339 time as Unix seconds (None when it is not one)."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
