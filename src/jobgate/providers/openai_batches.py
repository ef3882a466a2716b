"""OpenAI's Files and Batch API for provider-native batches: upload a part's input file, create
its batch with the part's key in `metadata`, find a batch by that key (a create whose answer was
lost), retrieve, cancel, and read its output and error files. Failures are classified as the
adapters classify them (providers.calls): a create that may have been sent and got no answer
raises errors.ProviderOutcomeUnknown.
"""

from __future__ import annotations

from datetime import datetime

import httpx

from jobgate import errors
from jobgate.clock import Clock, SystemClock
from jobgate.config import ProviderConfig
from jobgate.domain.provider_batches import PART_KEY
from jobgate.providers import calls
from jobgate.providers.base import JSONObject
from jobgate.providers.openai import api_client

COMPLETION_WINDOW = "24h"
LIST_PAGE = 100  # the Batch API's largest list page


class OpenAIBatches:
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
        self._client = api_client(config, transport)

    async def upload(self, data: bytes, *, filename: str) -> str:
        """Store an input file (purpose `batch`); answers its id. An upload is not billed
        work: one whose answer was lost is simply uploaded again."""
        files = {"file": (filename, data, "application/jsonl"), "purpose": (None, b"batch")}
        answer = calls.decode_json(await self._request("POST", "files", files=files))
        file_id = answer.get("id")
        if not isinstance(file_id, str):
            raise errors.ProviderRetryable("the file object has no id", code="bad_response")
        return file_id

    async def create(self, *, input_file_id: str, endpoint: str, part_key: str) -> JSONObject:
        """Create the part's batch, its key in `metadata`. Sent once: an answer lost after
        sending raises errors.ProviderOutcomeUnknown (then `find` says what happened)."""
        body = {
            "input_file_id": input_file_id,
            "endpoint": endpoint,
            "completion_window": COMPLETION_WINDOW,
            "metadata": {PART_KEY: part_key},
        }
        return _batch(await self._request("POST", "batches", json=body, creates=True))

    async def find(self, part_key: str, *, since: datetime) -> JSONObject | None:
        """The batch carrying `part_key` in its metadata, looked for among the batches
        created from `since` on (the list is newest first: it stops at the first older)."""
        after: str | None = None
        floor = since.timestamp()
        while True:
            params: dict[str, str | int] = {"limit": LIST_PAGE}
            if after is not None:
                params["after"] = after
            page = calls.decode_json(await self._request("GET", "batches", params=params))
            data = page.get("data") if isinstance(page.get("data"), list) else []
            for item in data or []:
                if not isinstance(item, dict):
                    continue
                if (item.get("metadata") or {}).get(PART_KEY) == part_key:
                    return _batch(item)
                created = item.get("created_at")
                if isinstance(created, int | float) and created < floor:
                    return None
            if not page.get("has_more") or not data:
                return None
            after = str(data[-1].get("id"))

    async def retrieve(self, batch_id: str) -> JSONObject:
        return _batch(await self._request("GET", f"batches/{batch_id}"))

    async def cancel(self, batch_id: str) -> JSONObject:
        return _batch(await self._request("POST", f"batches/{batch_id}/cancel"))

    async def file_content(self, file_id: str) -> bytes:
        return (await self._request("GET", f"files/{file_id}/content")).content

    async def aclose(self) -> None:
        await self._client.aclose()

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
            raise calls.classify_status(
                response,
                now=self._clock.now(),
                default_retry_after_s=self._config.retry_after_default_s,
            )
        return response


def _batch(payload: JSONObject | httpx.Response) -> JSONObject:
    body = calls.decode_json(payload) if isinstance(payload, httpx.Response) else payload
    if not isinstance(body.get("id"), str) or body.get("object") != "batch":
        raise errors.ProviderRetryable("the answer is not a batch object", code="bad_response")
    return body
